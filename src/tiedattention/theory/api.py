"""Records for the CLI and sweeps: one flat, JSON-ready dict per alpha (the ``theory --json`` contract)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..problem import Problem
from .state_evolution import SEResult, StateEvolution

CONTRACT_KEYS = (
    "alpha", "alpha_bar", "q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "mse", "test_error",
    "test_error_clean", "train_error", "rank", "converged", "iterations", "seconds",
)


def record_of(res: SEResult) -> dict[str, Any]:
    """Flat record: the contract's keys first, then delta, eps, objective, residual, phase, errors (as ``err_<key>``;
    :func:`result_of` inverts it)."""
    d = res.to_dict()
    errors = d.pop("errors")
    out = {k: d.pop(k) for k in CONTRACT_KEYS}
    out.update(d)
    out.update({f"err_{k}": v for k, v in errors.items()})
    return out


def result_of(record: dict[str, Any]) -> SEResult:
    """The SEResult a record was made from (the inverse of :func:`record_of`; other keys, e.g. ``rs_*`` or
    ``fd_*`` fields added later, are ignored)."""
    names = {f.name for f in fields(SEResult)} - {"errors"}
    errors = {k[len("err_"):]: v for k, v in record.items() if k.startswith("err_")}
    return SEResult(**{k: record[k] for k in names if k in record}, errors=errors)


def theory_records(problem: Problem, alphas, d: int | None = None, progress=None, **options) -> list[dict]:
    """Warm-started learning curve as records."""
    se = StateEvolution(problem, d=d, **options)
    return [record_of(r) for r in se.learning_curve(alphas, progress=progress)]


def theory_record(problem: Problem, alpha: float, d: int | None = None, **options) -> dict[str, Any]:
    """One SE point as a record (used by sweeps)."""
    return record_of(StateEvolution(problem, d=d, **options).solve(alpha))
