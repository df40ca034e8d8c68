"""Records for the CLI and sweeps: one flat, JSON-ready dict per alpha (the ``theory --json`` contract)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from ..errors import ParameterError
from ..problem import Problem, validate_alpha, validate_problem
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


def check_options(options: dict[str, Any]) -> None:
    """The keyword options :class:`StateEvolution` takes (tol, accuracy, max_iter, ...): any other is a
    ParameterError naming it (it was Python's TypeError from ``StateEvolution.__init__``)."""
    import difflib

    known = [n for n in inspect.signature(StateEvolution.__init__).parameters if n not in ("self", "problem", "d")]
    for name in sorted(options):
        if name not in known:
            if name in ("order", "gh_order", "quadrature_order"):
                hint = "; the Gauss-Hermite order (the CLI's --order) is channel_options={'order': N}"
            else:
                close = difflib.get_close_matches(name, known, n=1) or [k for k in known if name.startswith(k)]
                hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ParameterError(name, f"is not an option of the state evolution (its options: {', '.join(known)})"
                                 f"{hint}")


def _alphas(alphas: Any) -> list[float]:
    """A list of alphas from a list / array of numbers, or one number (a one-point curve)."""
    if isinstance(alphas, (str, bytes)):
        raise ParameterError("alpha", f"must be a number or a list of numbers (got {alphas!r}); the CLI's "
                             "'a,b,c' and 'start:stop:num' are strings of the shell, here write [a, b, c] or "
                             "numpy.geomspace(start, stop, num)")
    if isinstance(alphas, Iterable):
        return [validate_alpha(a) for a in alphas]
    return [validate_alpha(alphas)]


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
