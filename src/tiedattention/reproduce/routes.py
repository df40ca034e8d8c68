"""Sweep routes used by the figures (``"tiedattention.reproduce.routes:<name>"``).

* :func:`theory_curve` -- a whole warm-started SE learning curve (a list of alphas) as one cell. Warm starts
  keep a curve on one branch of solutions; they do not make it cheaper than independent cold points
  (``benchmarks/bench_phase.py``: cold/warm 0.99-1.07 on two grids, docs/performance.md);
* :func:`threshold_diagram` -- the lambda -> 0+ thresholds (alpha_bar units) over a list of kappa0.

Both return the records as JSON text (``records``), which the store keeps as one string column.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import ConvergenceWarning
from ..problem import alpha_bar
from ..sweep.spec import problem_from_params

__all__ = ["theory_curve", "threshold_diagram"]


def theory_curve(params: Mapping[str, Any]) -> dict[str, Any]:
    """SE learning curve of the cell's problem over ``params["alphas"]`` (increasing), warm-started.

    Each alpha starts from the previous converged points, extrapolated (and is retried cold if that fails), as in
    :meth:`StateEvolution.learning_curve` (``CurvePath``). A point whose solve raises is recorded as not converged
    with the exception in ``message`` instead of failing the whole curve. Optional ``qmc_log2`` and ``replicas`` set
    the channel's quasi-Monte Carlo rule (used for T >= 3); optional ``d`` the dimension of a list-based target.
    Optional ``rs_stability`` (true) adds the RS (AT) stability of every point, as ``theory --rs-stability`` does
    (:func:`_rs_fields`); absent or false, the records are as without it.
    """
    from ..theory.api import record_of
    from ..theory.state_evolution import CurvePath, StateEvolution

    problem = problem_from_params(params)
    alphas = [float(a) for a in params["alphas"]]
    channel = {k: int(params[k]) for k in ("qmc_log2", "replicas") if k in params}
    d = params.get("d")  # only for targets whose theory depends on d (power law, spikes, file); not in other keys
    se = StateEvolution(problem, d=None if d is None else int(d), channel_options=channel or None)
    records, path = [], CurvePath()
    with warnings.catch_warnings():
        # a point that does not converge says so in its record (converged: false); the figure leaves it out
        warnings.simplefilter("ignore", ConvergenceWarning)
        for a in alphas:
            res, error = None, ""
            # warm (falling back to cold, StateEvolution.solve_warm); cold alone if the warm solve raised
            start = path.start(se, a)
            for init in (start, None) if start is not None else (None,):
                try:
                    res = se.solve_warm(a, init)
                    break
                except (ArithmeticError, ValueError) as exc:  # ParameterError is a ValueError
                    error = f"{type(exc).__name__}: {exc}"
            if res is None:
                records.append({"alpha": a, "alpha_bar": alpha_bar(a, problem.task.tokens), "converged": False,
                                "phase": "failed", "message": error})
                continue
            records.append(record_of(res))
            path.add(res)
    if params.get("rs_stability"):  # after the curve: the points are solved exactly as without it
        for rec in records:
            rec.update(_rs_fields(problem, rec, None if d is None else int(d), channel or None))
    return {
        "records": json.dumps(records),
        "n_points": len(records),
        "n_converged": sum(bool(r["converged"]) for r in records),
    }


def _rs_fields(problem, rec: dict[str, Any], d: int | None, channel_options: dict | None) -> dict[str, Any]:
    """The RS stability fields of one record (:func:`~tiedattention.theory.stability.rs_fields`, with the channel
    options the curve was solved with, as ``theory --rs-stability`` passes its own; None: the point's rule). A
    point whose solve failed, or whose stability computation raises, gets null fields and the reason in
    ``rs_message``: the curve never fails on it."""
    from ..theory.stability import RS_FIELDS, rs_fields

    out: dict[str, Any] = dict.fromkeys(RS_FIELDS)
    if "q" not in rec:  # a point whose solve raised has no fixed point to check
        return {**out, "rs_message": "not computed (solve failed)"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return rs_fields(problem, rec, d, channel_options)
    except Exception as exc:  # any failure of the check is recorded: it never fails the curve
        return {**out, "rs_message": f"not computed ({type(exc).__name__}: {exc})"}


def threshold_diagram(params: Mapping[str, Any]) -> dict[str, Any]:
    """Thresholds vs the MP rank fraction kappa0 (closed forms, and the SE interpolation threshold at the
    cell's noise Delta when it is > 0)."""
    from ..targets import parse_target
    from ..theory.thresholds import (
        bayes_optimal,
        interpolation_noiseless,
        interpolation_threshold,
        perfect_recovery_direct,
        perfect_recovery_factorized,
    )

    noise = float(params["noise"])
    records = []
    for k0 in params["kappa0s"]:
        k0 = float(k0)
        rec = {
            "kappa0": k0,
            "bayes_optimal": bayes_optimal(k0),
            "perfect_recovery_factorized": perfect_recovery_factorized(k0),
            "perfect_recovery_direct": perfect_recovery_direct(),
            "interpolation_noiseless": interpolation_noiseless(k0),
        }
        if noise > 0:
            rec["interpolation_noisy"] = interpolation_threshold(parse_target(f"mp:{k0:g}").measure(), noise)
        records.append(rec)
    return {"records": json.dumps(records), "n_points": len(records)}
