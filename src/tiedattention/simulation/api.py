"""One simulation record per (problem, alpha, d): ``seeds`` independent data sets, trained and measured.

The record is the JSON object of the ``tiedattention simulate`` contract (ARCHITECTURE.md).
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import ParameterError
from ..problem import Problem, alpha_bar, validate_alpha, validate_flag, validate_integer, validate_problem
from ..targets import validate_dimension
from .metrics import mse_on_S, rank_fraction, spectra, test_errors
from .models import resolve_device
from .sampler import rng_for, sample_dataset
from .trainers import SOLVERS, check_solver_options, check_train_options, train, unknown_solver

__all__ = ["simulate_record", "n_of", "combined_sem", "solver_options", "check_scaled_starts"]

#: a scaled start replaces the first solution only if it lowers F by more than this (relative): the same minimiser
#: reached from two starts differs in the last digits, and counting that as a new one would misreport the start
START_MARGIN = 1e-9


def check_scaled_starts(scaled_starts: Any, solver: str) -> tuple[float, ...]:
    """The scales s of :func:`simulate_record`'s ``scaled_starts``, validated: a sequence of numbers, one number,
    or a string "3,10" (the CLI's and a sweep spec's spelling); each finite and > 0; none or solver ``prox`` (the
    solver that starts from a given S). ParameterError("scaled_starts") otherwise."""
    if scaled_starts is None:
        return ()
    values = scaled_starts
    if isinstance(values, str):
        try:
            values = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise ParameterError("scaled_starts", f"cannot read {scaled_starts!r} (expected numbers a,b,...)") from None
        if not values:
            raise ParameterError("scaled_starts", f"needs at least one number (got {scaled_starts!r})")
    elif isinstance(values, (int, float, np.number)) and not isinstance(values, bool):
        values = [values]
    try:
        out = tuple(float(v) for v in values if not isinstance(v, bool))
        if len(out) != len(values):
            raise TypeError
    except (TypeError, ValueError):
        raise ParameterError("scaled_starts", f"must be numbers (got {scaled_starts!r})") from None
    for v in out:
        if not (math.isfinite(v) and v > 0.0):
            raise ParameterError("scaled_starts", f"each scale must be finite and > 0 (got {v:g})")
    if out and solver != "prox":
        raise ParameterError("scaled_starts", f"applies to solver 'prox' only, the solver that starts from a given S "
                                              f"(got solver {solver!r})")
    return out


def n_of(alpha: float, d: int) -> int:
    """n = round(alpha d^2), at least 1 (ParameterError("alpha") otherwise)."""
    n = int(round(alpha * d * d))
    if n < 1:
        raise ParameterError("alpha", f"alpha={alpha:g} gives n = round(alpha d^2) = 0 sequences at d={d}")
    return n


def combined_sem(values: np.ndarray, within_sem: np.ndarray) -> float:
    """Standard error of the mean over seeds of per-seed estimates that carry their own test-sampling error.

    The sample variance over seeds already contains the within-seed (test-sampling) variance; it is floored
    by the mean within-seed variance (the mean cannot be known better than that), and with one seed the
    within-seed error is all there is: ``sqrt(max(var_seeds, mean(within_sem^2)) / seeds)``.
    """
    values = np.asarray(values, float)
    within = float(np.mean(np.asarray(within_sem, float) ** 2))
    var = float(values.var(ddof=1)) if values.size > 1 else 0.0
    return math.sqrt(max(var, within) / values.size)


def _validate(d: int, seeds: int, solver: str, n_test: int, seed0: int = 0, threads: int | None = None,
              rank_tol: float = 1e-6) -> None:
    # each ParameterError names simulate_record's argument (n_test, seed0; they read n-test and seed, the CLI's
    # spellings: the CLI and sweep specs check their own options before calling this, under their own names)
    validate_dimension(d)
    validate_integer("seeds", seeds, 1)
    if solver not in SOLVERS:
        raise ParameterError("solver", unknown_solver(solver))
    validate_integer("n_test", n_test, 2)
    validate_integer("seed0", seed0, 0)
    if threads is not None:
        validate_integer("threads", threads, 1)
    try:
        tol = float(rank_tol) if not isinstance(rank_tol, bool) else math.nan
    except (TypeError, ValueError):
        tol = math.nan
    if not (math.isfinite(tol) and 0 <= tol < 1):
        raise ParameterError("rank_tol", f"must be in [0, 1) (got {rank_tol!r})")


# train()'s own keywords that simulate_record passes on with the solver's (device and seed it sets itself)
_TRAIN_OPTIONS = ("dtype", "chunk", "callback")


def solver_options(solver: str) -> tuple[str, ...] | None:
    """The keyword options a registered solver takes (what ``simulate_record(..., **trainer_options)`` and
    ``train(..., **options)`` hand to it), or None when it takes any (a ``**kwargs`` solver)."""
    if solver not in SOLVERS:
        raise ParameterError("solver", unknown_solver(solver))
    params = inspect.signature(SOLVERS[solver]).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in ("seed", "callback"))


def _validate_trainer_options(solver: str, options: dict[str, Any]) -> None:
    """An option the solver does not take is a ParameterError naming it (it was the solver's TypeError, raised
    after the first data set had been sampled); the solvers' option names differ (adam: tol, max_steps;
    lbfgs, prox: rtol, max_iter), so the message lists the solver's own."""
    known = solver_options(solver)
    if known is None:
        return
    for name in sorted(options):
        if name in ("seed", "seeds_from", "first_seed"):
            raise ParameterError(name, "the seeds are seed0 .. seed0+seeds-1: pass seed0=")
        if name not in known and name not in _TRAIN_OPTIONS:
            raise ParameterError(name, f"is not an option of solver {solver!r} (its options: "
                                 f"{', '.join(known + _TRAIN_OPTIONS)})")


def _stats(name: str, values: list[float]) -> dict[str, float]:
    a = np.asarray(values, float)
    return {
        f"{name}_mean": float(a.mean()),
        f"{name}_std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        f"{name}_sem": float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0,
    }


def _best_of_scaled_starts(problem: Problem, data: Any, first: Any, scales: tuple[float, ...], device: str,
                           seed: int, options: dict[str, Any]) -> tuple[Any, float, int, float]:
    """(kept TrainResult, its start scale (0: the first solve), steps and seconds of all starts): the first
    solution, replaced by the solve from s x first.S_hat (s in ``scales``) of lowest objective among the converged
    ones that lower F by more than START_MARGIN (relative); a converged start also replaces an unconverged first."""
    best, start, steps, seconds = first, 0.0, first.steps, first.seconds
    if not scales or not np.all(np.isfinite(first.S_hat)):
        return best, start, steps, seconds
    for scale in scales:
        cand = train(problem, data, solver="prox", device=device, seed=seed, **{**options, "init": scale * first.S_hat})
        steps, seconds = steps + cand.steps, seconds + cand.seconds
        if not (cand.converged and math.isfinite(cand.objective)):
            continue
        if not best.converged or cand.objective < best.objective - START_MARGIN * abs(best.objective):
            best, start = cand, scale
    return best, start, steps, seconds


def simulate_record(
    problem: Problem,
    alpha: float,
    d: int,
    seeds: int = 8,
    solver: str = "adam",
    device: str = "cpu",
    seed0: int = 0,
    n_test: int = 2000,
    return_spectra: bool = False,
    progress: Callable[[dict[str, Any]], None] | None = None,
    threads: int | None = None,
    rank_tol: float = 1e-6,
    scaled_starts: Any = (),
    **trainer_options: Any,
) -> dict[str, Any]:
    """Train ``seeds`` students on independent data sets (seeds seed0 .. seed0+seeds-1) and summarise.

    Each seed s draws S0 from ``rng_for(s, "target")``, n = round(alpha d^2) training sequences from
    ``rng_for(s, "train")``, the initialisation from ``rng_for(s, "init")`` and ``n_test`` test sequences from
    ``rng_for(s, "test")``.

    Returns the record: alpha, alpha_bar, d, n, p, seeds, seed0, solver, device, the problem options,
    ``<m>_mean/_std/_sem`` for m in test_error, test_error_clean, train_error, objective (F = L/d^2), penalty,
    mse, rank, steps, seconds (per seed), ``test_error_sem`` and ``test_error_clean_sem`` combined as in
    :func:`combined_sem`, ``converged`` (fraction of seeds whose solver met its stop rule), ``converged_all``,
    ``seconds`` (wall time of the whole record) and, with ``return_spectra``, ``eigenvalues`` (seeds x d) and
    ``singular_values`` (seeds x min(p, d)), a row of NaN for a seed whose solution is not finite.

    ``progress(info)`` is called after each seed with a dict (seed, test_error, steps, converged, seconds).
    ``threads`` sets torch's CPU thread count for the call (restored afterwards); by default small problems
    (n T d^2 < 2e8 multiply-adds per pass) run on one thread, larger ones on torch's default. Other keyword
    arguments go to the solver: its own (:func:`solver_options`; e.g. ``lr``, ``tol``, ``max_steps`` for adam,
    ``rtol``, ``max_iter`` for lbfgs and prox) and :func:`~.trainers.train`'s ``dtype``, ``chunk``, ``callback``;
    any other is a ParameterError naming it, before anything is sampled.

    ``scaled_starts`` (solver ``prox`` only; e.g. ``(3,)``): after the solve from S = 0, solve again from s x S_hat
    for each s, and keep the converged solution of lowest objective (a start must lower F by more than
    START_MARGIN, relative, to replace it). The objective is not convex in S, and at large logit noise and small
    lambda the run from S = 0 can end on a small-norm minimiser while a large-norm one is lower -- the branch the
    state evolution reports (docs/user-guide/simulation.md, "Scaled starts"). The record then also carries
    ``scaled_starts`` (the scales), ``start_scale`` (per seed, the scale whose solution was kept, 0 for the first
    solve's) and ``from_scaled_start`` (the fraction of seeds kept from a scaled start); ``steps`` and ``seconds``
    per seed count every start.
    """
    validate_problem(problem)
    alpha = validate_alpha(alpha)
    _validate(d, seeds, solver, n_test, seed0, threads, rank_tol)
    scales = check_scaled_starts(scaled_starts, solver)
    return_spectra = validate_flag("return_spectra", return_spectra)
    _validate_trainer_options(solver, trainer_options)
    # the values: the solver's (adam lr=-1 was torch's error), train()'s and progress (was a TypeError after a seed)
    train_own = {k: trainer_options[k] for k in _TRAIN_OPTIONS if k in trainer_options}
    check_train_options(progress=progress, **train_own)
    trainer_options = check_solver_options(solver, trainer_options)
    d, seeds, seed0 = int(d), int(seeds), int(seed0)
    dev = resolve_device(device)
    n = n_of(alpha, d)
    old_threads = torch.get_num_threads()
    if threads is None and dev.type == "cpu" and n * problem.task.tokens * d * d < 2e8:
        threads = 1  # small problems: thread start-up and contention cost more than they save
    if threads is not None:
        torch.set_num_threads(int(threads))
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    evs, svs = [], []
    try:
        for s in range(seed0, seed0 + seeds):
            S0 = problem.task.target.sample(d, rng_for(s, "target"))
            data = sample_dataset(problem, n, d, s, S0=S0)
            res = train(problem, data, solver=solver, device=str(dev), seed=s, **trainer_options)
            res, start, steps, seconds = _best_of_scaled_starts(problem, data, res, scales, str(dev), s,
                                                                trainer_options)
            del data
            row: dict[str, Any] = {
                "train_error": res.train_error,
                "objective": res.objective,
                "penalty": res.penalty,
                "steps": steps,
                "converged": res.converged,
                "seconds": seconds,
                "start_scale": start,
            }
            if np.all(np.isfinite(res.S_hat)):
                row.update(test_errors(problem, res.S_hat, S0, s, n_test))
                row["mse"] = mse_on_S(res.S_hat, S0)
                row["rank"] = rank_fraction(res.S_hat, rank_tol)
                if return_spectra:
                    ev, sv = spectra(res.S_hat, res.W, problem.student.width(d))
                    evs.append(ev)
                    svs.append(sv)
            else:  # never a silent NaN: the seed is reported as not converged and its metrics as NaN (null)
                row["converged"] = False
                for k in ("test_error", "test_error_sem", "test_error_clean", "test_error_clean_sem", "mse", "rank"):
                    row[k] = float("nan")
                if return_spectra:  # one row per seed, aligned with the seeds
                    evs.append(np.full(d, np.nan))
                    svs.append(np.full(min(d, problem.student.width(d)), np.nan))
            rows.append(row)
            if progress is not None:
                keys = ("test_error", "steps", "converged", "seconds")
                progress({"seed": s, "alpha": alpha, **{k: row[k] for k in keys}})
    finally:
        torch.set_num_threads(old_threads)

    rec: dict[str, Any] = {
        "alpha": alpha,
        "alpha_bar": alpha_bar(alpha, problem.task.tokens),
        "d": d,
        "n": n,
        "p": problem.student.width(d),
        "seeds": seeds,
        "seed0": seed0,
        "solver": solver,
        "device": dev.type,
        "n_test": int(n_test),
        **problem.options(),
    }
    for key in ("test_error", "test_error_clean", "train_error", "objective", "penalty", "mse", "rank", "steps"):
        rec.update(_stats(key, [r[key] for r in rows]))
    for key in ("test_error", "test_error_clean"):
        values, within = np.array([r[key] for r in rows]), np.array([r[f"{key}_sem"] for r in rows])
        rec[f"{key}_sem"] = combined_sem(values, within)
    sec = _stats("seconds_per_seed", [r["seconds"] for r in rows])
    rec["seconds_per_seed_mean"] = sec["seconds_per_seed_mean"]
    rec["seconds_per_seed_std"] = sec["seconds_per_seed_std"]
    conv = [bool(r["converged"]) for r in rows]
    if scales:
        rec["scaled_starts"] = list(scales)
        rec["start_scale"] = [r["start_scale"] for r in rows]
        rec["from_scaled_start"] = float(np.mean([r["start_scale"] > 0.0 for r in rows]))
    rec["converged"] = float(np.mean(conv))
    rec["converged_all"] = all(conv)
    rec["seconds"] = time.perf_counter() - t_start
    if return_spectra:
        rec["eigenvalues"] = np.array(evs) if evs else np.zeros((0, d))
        rec["singular_values"] = np.array(svs) if svs else np.zeros((0, min(d, problem.student.width(d))))
    return rec
