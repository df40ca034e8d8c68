"""Records for the CLI and sweeps: one flat, JSON-ready dict per alpha (the ``theory --json`` contract)."""

from __future__ import annotations

from typing import Any

from ..problem import Problem
from .state_evolution import SEResult, StateEvolution

CONTRACT_KEYS = (
    "alpha", "alpha_bar", "q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "mse", "test_error",
    "test_error_clean", "train_error", "rank", "converged", "iterations", "seconds",
)


def record_of(res: SEResult) -> dict[str, Any]:
    """Flat record: the contract's keys first, then delta, eps, objective, residual, phase, errors."""
    d = res.to_dict()
    errors = d.pop("errors")
    out = {k: d.pop(k) for k in CONTRACT_KEYS}
    out.update(d)
    out.update({f"err_{k}": v for k, v in errors.items()})
    return out


def theory_records(problem: Problem, alphas, d: int | None = None, progress=None, **options) -> list[dict]:
    """Warm-started learning curve as records."""
    se = StateEvolution(problem, d=d, **options)
    return [record_of(r) for r in se.learning_curve(alphas, progress=progress)]


def theory_record(problem: Problem, alpha: float, d: int | None = None, **options) -> dict[str, Any]:
    """One SE point as a record (used by sweeps)."""
    return record_of(StateEvolution(problem, d=d, **options).solve(alpha))
