"""`tiedattention decompose`: the error decomposition E_over / E_under / E_approx / E_mismatch per alpha.

Theory (state evolution) by default; with ``--seeds K`` also the finite-d estimators of the same parts from K
proximal-gradient ERM runs at dimension ``--d`` (mean and standard error over seeds). See
docs/theory/decomposition.md.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Annotated, Any

import numpy as np
import typer

from ..cli_common import (
    JsonOpt,
    check_dimension,
    cli_errors,
    emit_json,
    parse_floats,
    print_table,
    problem_title,
    progress_bar,
    with_problem,
)
from ..errors import ParameterError
from ..problem import Problem

# the keys of a decomposition record that the simulations estimate too
ESTIMATED = (
    "E_over", "E_under", "E_approx", "E_mismatch", "E_over_clean", "E_under_clean", "E_approx_clean",
    "E_mismatch_clean", "mse", "mse_over", "mse_under", "mse_approx", "mse_mismatch", "dist", "dist_over",
    "dist_under", "dist_approx", "e_test_qm", "e_test_clean_qm", "q", "m",
)


def register(app: typer.Typer) -> None:
    app.command("decompose")(decompose)


def simulate_parts(problem: Problem, se, alpha: float, d: int, seeds: int, c_inf: float, n_outliers: int,
                   saturation, seed0: int = 0, n_test: int = 2000, solver: str = "prox",
                   on_seed: Callable[[int, np.ndarray, np.ndarray, dict[str, Any]], None] | None = None,
                   debias: bool = False, **trainer_options: Any) -> dict[str, Any]:
    """Finite-d estimators of the parts from ``seeds`` ERM runs (seeds seed0.., the streams of ``simulate``):
    ``sim_<key>_mean`` and ``sim_<key>_sem`` for every key of :data:`ESTIMATED`, the measured test errors
    (``sim_test_error_mean/_sem``, ``sim_test_error_clean_mean/_sem``), ``sim_converged`` (fraction of seeds).
    ``on_seed(seed, S_hat, S0, row)``, if given, sees each seed's learned and target matrices and its estimator
    record (with ``test_error``, ``test_error_clean``, ``converged``, ``train_seconds``) -- for per-seed caches.
    ``debias``: the estimator with the first-order bias of its over/under split removed (decompose_matrices)."""
    import torch

    from ..simulation import n_of, rng_for, sample_dataset, test_errors, train
    from ..theory.decomposition import estimate_record

    n = n_of(alpha, d)
    rows, measured, conv = [], [], []
    old = torch.get_num_threads()
    if n * problem.task.tokens * d * d < 2e8:
        torch.set_num_threads(1)
    try:
        for s in range(seed0, seed0 + seeds):
            S0 = problem.task.target.sample(d, rng_for(s, "target"))
            data = sample_dataset(problem, n, d, s, S0=S0)
            tr = train(problem, data, solver=solver, seed=s, **trainer_options)
            del data
            conv.append(bool(tr.converged))
            rows.append(estimate_record(se, tr.S_hat, S0, c_inf, n_outliers, saturation, debias=debias))
            measured.append(test_errors(problem, tr.S_hat, S0, s, n_test))
            if on_seed is not None:
                on_seed(s, np.asarray(tr.S_hat), S0, {**rows[-1], **{k: float(measured[-1][k]) for k in (
                    "test_error", "test_error_clean")}, "converged": bool(tr.converged),
                    "steps": int(tr.steps), "train_seconds": float(tr.seconds)})
    finally:
        torch.set_num_threads(old)
    out: dict[str, Any] = {"sim_d": d, "sim_n": n, "sim_seeds": seeds, "sim_solver": solver,
                           "sim_converged": float(np.mean(conv))}
    for key in ESTIMATED:
        v = np.array([r[key] for r in rows], float)
        out[f"sim_{key}_mean"] = float(v.mean())
        out[f"sim_{key}_sem"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
    for key in ("test_error", "test_error_clean"):
        v = np.array([r[key] for r in measured], float)
        out[f"sim_{key}_mean"] = float(v.mean())
        out[f"sim_{key}_sem"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
    return out


@with_problem
def decompose(
    problem: Problem,
    alpha: Annotated[str, typer.Option("--alpha", help="α = n/d² values: a,b,c or start:stop:num (log)")],
    d: Annotated[int | None, typer.Option(
        "--d", help="dimension: of list-based targets in the theory, and of the simulations")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="ERM runs per α for the finite-d estimators (0: none)")] = 0,
    c_inf: Annotated[float | None, typer.Option(
        "--c-inf", help="reference scale c∞ (default: argmin of the noisy test error on the ray S = c S0)")] = None,
    n_test: Annotated[int, typer.Option("--n-test", help="fresh test sequences per seed")] = 2000,
    debias: Annotated[bool, typer.Option(
        "--debias", help="simulations: remove the O(1/d) bias of the estimator's over/under split")] = False,
    json: JsonOpt = False,
) -> None:
    """Split the excess test error e_test − e_0 (and the MSE on S) into E_over, E_under, E_approx, E_mismatch."""
    from rich.table import Table

    from ..theory.decomposition import decompose_point, saturation_point
    from ..theory.state_evolution import StateEvolution

    with cli_errors():
        alphas = sorted(parse_floats(alpha, "alpha"))
        check_dimension(d)
        if seeds < 0:
            raise ParameterError("seeds", f"must be an integer >= 0 (got {seeds})")
        if seeds > 0 and d is None:
            raise ParameterError("d", "the simulations (--seeds) need a dimension --d")
        if c_inf is not None and not (math.isfinite(c_inf) and c_inf > 0):
            raise ParameterError("c-inf", f"must be a number > 0 (got {c_inf})")
        if n_test < 2:
            raise ParameterError("n-test", f"must be an integer >= 2 (got {n_test})")
        se = StateEvolution(problem, d=d)
        sat = saturation_point(se)
    records = []
    with contextlib.ExitStack() as stack:
        bar = job = None
        if seeds > 0:  # minutes per seed at d = 200: say where the run is (stderr, gone when done)
            bar = stack.enter_context(progress_bar())
            job = bar.add_task(f"ERM runs at d={d}", total=len(alphas) * seeds)
        for res in se.learning_curve(alphas):
            rec = decompose_point(se, res, c_inf, sat)
            if seeds > 0:
                if rec["converged"]:
                    rec.update(simulate_parts(problem, se, res.alpha, d, seeds, rec["c_inf"], rec["k_star"], sat,
                                              n_test=n_test, debias=debias,
                                              on_seed=lambda *a: bar.advance(job)))
                else:
                    rec["sim_message"] = ("theory point did not converge: no outlier count to match, "
                                          "simulations skipped")
                    bar.advance(job, seeds)
            records.append(rec)
            if json:
                emit_json(rec)
    if not json:
        table = Table(title=f"error decomposition: {problem_title(problem)}")
        for col in ("α", "e_test", "e_0", "E_over", "E_under", "E_approx", "E_mismatch", "MSE", "k*", "conv"):
            table.add_column(col, justify="right")
        for r in records:
            table.add_row(f"{r['alpha']:.4g}", f"{r['e_test']:.5f}", f"{r['e_0']:.5f}", *(
                f"{r[f'E_{k}']:.5f}" for k in ("over", "under", "approx", "mismatch")),
                f"{r.get('mse', float('nan')):.5f}", str(r.get("k_star", "")), "yes" if r["converged"] else "NO")
        print_table(table, min_width=130)
        if seeds > 0:  # the simulations' estimates of the same parts (they were only in --json)
            sim = Table(title=f"finite-d estimators: d={d}, {seeds} prox ERM run(s) per α (mean ± s.e.)")
            for col in ("α", "test error", "e_test(q, m)", "E_over", "E_under", "E_approx", "E_mismatch", "MSE"):
                sim.add_column(col, justify="right")
            for r in records:
                if "sim_E_over_mean" not in r:
                    sim.add_row(f"{r['alpha']:.4g}", r.get("sim_message", "-"), *[""] * 6)
                    continue

                def pm(key: str, r=r) -> str:
                    sem = r[f"sim_{key}_sem"]
                    return f"{r[f'sim_{key}_mean']:.5f}" + ("" if math.isnan(sem) else f" ± {sem:.5f}")

                sim.add_row(f"{r['alpha']:.4g}", pm("test_error"), pm("e_test_qm"),
                            *(pm(f"E_{k}") for k in ("over", "under", "approx", "mismatch")), pm("mse"))
            print_table(sim, min_width=130)
    if not all(r["converged"] for r in records):
        raise typer.Exit(code=1)
