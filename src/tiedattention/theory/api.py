"""Records for the CLI and sweeps: one flat, JSON-ready dict per alpha (the ``theory --json`` contract)."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from ..problem import Problem, validate_problem
from .state_evolution import SEResult, StateEvolution, _alphas, unknown_option  # (one parser each, shared)

STATE_EVOLUTION_OPTIONS = frozenset(
    n for n in inspect.signature(StateEvolution.__init__).parameters if n not in ("self", "problem", "d", "unknown"))

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


def check_options(options: dict[str, Any]) -> None:
    """The keyword options :class:`StateEvolution` takes (tol, accuracy, max_iter, ...): any other is a
    ParameterError naming it (it was Python's TypeError from ``StateEvolution.__init__``); the message is
    :func:`~tiedattention.theory.state_evolution.unknown_option`'s, as ``StateEvolution(..., typo=...)`` gives."""
    for name in sorted(options):
        if name not in STATE_EVOLUTION_OPTIONS:
            raise unknown_option(name)


def theory_records(problem: Problem, alphas, d: int | None = None, progress=None, **options) -> list[dict]:
    """Warm-started learning curve as records: one flat, JSON-ready dict per alpha (:func:`record_of`), in the
    order of ``alphas`` (a list or array of alpha = n/d^2, or one number). ``d`` is the dimension of a list-based
    target's spectrum (power law, spikes; None: d -> inf); ``options`` go to :class:`StateEvolution` (``tol``,
    ``accuracy``, ...). Every argument is checked before the first point is solved. ``pandas.DataFrame(records)``
    makes the table."""
    validate_problem(problem)
    check_options(options)
    alphas = _alphas(alphas)
    se = StateEvolution(problem, d=d, **options)
    return [record_of(r) for r in se.learning_curve(alphas, progress=progress)]


def theory_record(problem: Problem, alpha: float, d: int | None = None, **options) -> dict[str, Any]:
    """One SE point as a record (used by sweeps)."""
    validate_problem(problem)
    check_options(options)
    return record_of(StateEvolution(problem, d=d, **options).solve(alpha))
