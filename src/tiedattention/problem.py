"""The shared vocabulary: the task (data model) and the student, as frozen, validated dataclasses.

All parameters are validated here, once; every other layer (theory, simulation, CLI, sweeps) builds a
:class:`Problem` and trusts it.

Notation (THEORY.md):
    T       tokens per sequence                       ``tokens``
    beta0   teacher temperature                       ``beta0``
    Delta   logit-noise strength                      ``noise``
    Delta_out  output-noise variance per label entry  ``noise_out``
    kappa   student width ratio p/d                   ``kappa``
    lambda  weight decay                              ``lam``
    beta    student temperature                       ``beta``
    alpha   n/d^2; alpha_bar = alpha (T^2+T-2)/2      (see :func:`alpha_bar`)
"""

from __future__ import annotations

import inspect
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from .errors import ParameterError
from .targets import Target, parse_target

__all__ = ["Task", "Student", "Problem", "alpha_bar", "alpha_from_bar", "validate_alpha", "validate_integer",
           "validate_number", "validate_problem", "TASKS", "MODELS", "OPTIONS"]

TASKS = ("seq2lab", "seq2seq")
MODELS = ("factorized", "direct")
TASK_OPTIONS = ("target", "tokens", "beta0", "noise", "noise_out", "task")
STUDENT_OPTIONS = ("model", "kappa", "lam", "beta")
OPTIONS = TASK_OPTIONS + STUDENT_OPTIONS  # Problem.from_options' keywords, Problem.options()' keys


def _check_finite(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, f"must be a number (got {value!r})") from None
    if not math.isfinite(v):
        raise ParameterError(name, f"must be finite (got {value!r})")
    return v


def validate_integer(name: str, value: Any, minimum: int) -> int:
    """The one integer check of the API: ``value`` is an integer >= ``minimum`` (an int, a numpy integer, an
    integral float or a string of one, as the CLI passes it; never a bool), returned as an int."""
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    if not (math.isfinite(v) and v.is_integer() and v >= minimum):
        raise ParameterError(name, f"must be an integer >= {minimum} (got {value!r})")
    return int(v)


def validate_number(name: str, value: Any, lower: float, *, closed: bool = False, upper: float | None = None,
                    none: bool = False) -> float | None:
    """The one check of a numeric solver option: a finite number > ``lower`` (>= with ``closed``; <= ``upper``;
    None allowed with ``none``), not a bool or a string, returned as a float; anything else a ParameterError
    naming it."""
    if value is None and none:
        return None
    try:
        v = float(value) if not isinstance(value, (bool, str, bytes)) else math.nan
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    ok = math.isfinite(v) and (v >= lower if closed else v > lower) and (upper is None or v <= upper)
    if not ok:
        bound = (f"in {'[' if closed else '('}{lower:g}, {upper:g}]" if upper is not None
                 else f"{'>=' if closed else '>'} {lower:g}")
        raise ParameterError(name, f"must be a number {bound}{' (or None)' if none else ''} (got {value!r:.60})")
    return v


def validate_flag(name: str, value: Any, *, none: bool = False) -> bool | None:
    """The one check of an on/off option: True or False (a numpy bool too; None allowed with ``none``), never a
    truthy stand-in such as 1, "no" or a list (``warm_start="no"`` used to mean True)."""
    if value is None and none:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ParameterError(name, f"must be True or False{' (or None)' if none else ''} (got {value!r:.60})")


def _unknown_option(name: str, known: list[str]) -> ParameterError:
    """An option that does not exist: name it, say what exists and which was probably meant."""
    import difflib

    hint = ""
    if name in ("alpha", "alphas", "d", "n", "p", "seeds", "seed", "solver"):
        hint = (f"; {name} is not part of the problem but an argument of what solves or trains it "
                "(StateEvolution(problem).solve(alpha), theory_records(problem, alphas, d), "
                "simulate_record(problem, alpha, d, seeds, solver))")
    elif name in ("kappa0", "kappa_0", "rank"):
        hint = "; the target's rank fraction kappa0 is part of the target: target='mp:0.3'"
    elif name in ("T", "delta", "Delta", "noise_var", "weight_decay", "lambda_", "lmbda", "l2"):
        meant = {"T": "tokens", "delta": "noise", "Delta": "noise", "noise_var": "noise"}.get(name, "lam")
        hint = f"; did you mean {meant!r}?"
    else:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
    return ParameterError(name, f"unknown problem option (known: {', '.join(known)}){hint}")


def _check_nonneg(name: str, value: float) -> float:
    v = _check_finite(name, value)
    if v < 0:
        raise ParameterError(name, f"must be >= 0 (got {value!r})")
    return v


def _check_pos(name: str, value: float) -> float:
    v = _check_finite(name, value)
    if v <= 0:
        raise ParameterError(name, f"must be > 0 (got {value!r})")
    return v


@dataclass(frozen=True)
class Task:
    """The data model: attention-indexed model with target S0 (THEORY.md section 1)."""

    target: Target = field(default_factory=lambda: parse_target("mp:0.5"))
    tokens: int = 2
    beta0: float = 1.0
    noise: float = 0.5
    noise_out: float = 0.0
    task: str = "seq2lab"

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", parse_target(self.target))
        object.__setattr__(self, "tokens", validate_integer("tokens", self.tokens, 2))
        object.__setattr__(self, "beta0", _check_pos("beta0", self.beta0))
        object.__setattr__(self, "noise", _check_nonneg("noise", self.noise))
        object.__setattr__(self, "noise_out", _check_nonneg("noise-out", self.noise_out))
        if self.task not in TASKS:
            raise ParameterError("task", f"must be one of {', '.join(TASKS)} (got {self.task!r})")

    @property
    def n_logits(self) -> int:
        """K = T(T+1)/2 independent logits per sequence (upper triangle with diagonal)."""
        return self.tokens * (self.tokens + 1) // 2

    @property
    def measurements_per_sequence(self) -> float:
        """(T^2 + T - 2)/2 effective scalar measurements of S per sequence (row softmax removes one)."""
        return (self.tokens**2 + self.tokens - 2) / 2


@dataclass(frozen=True)
class Student:
    """The tied-attention student and its penalty (THEORY.md section 2)."""

    model: str = "factorized"
    kappa: float = 1.0
    lam: float = 0.01
    beta: float = 1.0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ParameterError("model", f"must be one of {', '.join(MODELS)} (got {self.model!r})")
        object.__setattr__(self, "kappa", _check_pos("kappa", self.kappa))
        object.__setattr__(self, "lam", _check_nonneg("lam", self.lam))
        object.__setattr__(self, "beta", _check_pos("beta", self.beta))

    def width(self, d: int) -> int:
        """p = round(kappa d), at least 1."""
        return max(1, int(round(self.kappa * d)))


@dataclass(frozen=True)
class Problem:
    """A task and a student. Build it from CLI-style options with :meth:`from_options`."""

    task: Task = field(default_factory=Task)
    student: Student = field(default_factory=Student)

    def __post_init__(self) -> None:
        for name, value, kind in (("task", self.task, Task), ("student", self.student, Student)):
            if not isinstance(value, kind):
                raise ParameterError(name, f"must be a {kind.__name__} (got {value!r}); "
                                     "Problem.from_options(...) builds a problem from options")

    @classmethod
    def from_options(
        cls,
        target: str | Target = "mp:0.5",
        noise: float = 0.5,
        noise_out: float = 0.0,
        lam: float = 0.01,
        tokens: int = 2,
        beta: float = 1.0,
        beta0: float = 1.0,
        kappa: float = 1.0,
        model: str = "factorized",
        task: str = "seq2lab",
        **unknown: Any,
    ) -> Problem:
        """The problem options shared by every CLI command (ARCHITECTURE.md), with the same defaults.

        ``target`` is a spec (``"mp:KAPPA0"``, ``"powerlaw:GAMMA"``, ``"spikes:a,b,c[+mp:K]"``, ``"file:PATH"``)
        or a :class:`~tiedattention.targets.Target`; ``noise`` is Delta, ``noise_out`` Delta_out, ``lam`` lambda,
        ``tokens`` T, ``beta``/``beta0`` the student's/teacher's temperatures, ``kappa`` p/d. Every value is
        validated here; a bad one, or an option that does not exist, is a :class:`ParameterError` naming it."""
        if unknown:
            raise _unknown_option(sorted(unknown)[0], list(OPTIONS))
        return cls(
            Task(target=target, tokens=tokens, beta0=beta0, noise=noise, noise_out=noise_out, task=task),
            Student(model=model, kappa=kappa, lam=lam, beta=beta),
        )

    def options(self) -> dict[str, Any]:
        """The flat option dict (CLI names, underscores), inverse of :meth:`from_options`."""
        t, s = asdict(self.task), asdict(self.student)
        t["target"] = self.task.target.spec
        return {**t, **s}

    def with_options(self, **changes: Any) -> Problem:
        """A copy with some options changed (validated again)."""
        opts = self.options()
        opts.update(changes)
        return Problem.from_options(**opts)

    def replace_student(self, **changes: Any) -> Problem:
        """A copy with some student options (model, kappa, lam, beta) changed (validated again)."""
        for name in sorted(changes):
            if name in STUDENT_OPTIONS:
                continue
            if name in OPTIONS:
                raise ParameterError(name, "is a task option, not a student one: use with_options")
            raise _unknown_option(name, list(OPTIONS))
        return replace(self, student=replace(self.student, **changes))


# from_options takes **unknown only to name a misspelt option (a ParameterError, not Python's TypeError); its
# signature, which help() shows and sweep specs read their grid keys from, lists the options alone
_sig = inspect.signature(Problem.from_options.__func__)
Problem.from_options.__func__.__signature__ = _sig.replace(
    parameters=[p for p in _sig.parameters.values() if p.kind is not p.VAR_KEYWORD])


def validate_problem(problem: Any, name: str = "problem") -> Problem:
    """The entry points' check that they were handed a :class:`Problem` (not a target spec or an option dict)."""
    if not isinstance(problem, Problem):
        raise ParameterError(name, f"must be a Problem (got {type(problem).__name__} {problem!r:.60}); "
                             "Problem.from_options(...) builds one")
    return problem


def validate_alpha(alpha: float, name: str = "alpha") -> float:
    """alpha = n/d^2 must be a finite positive number."""
    return _check_pos(name, alpha)


def alpha_bar(alpha: float, tokens: int) -> float:
    """alpha_bar = alpha (T^2 + T - 2)/2: measurements per d^2, comparable across T (= 2 alpha at T=2)."""
    return alpha * (tokens**2 + tokens - 2) / 2


def alpha_from_bar(abar: float, tokens: int) -> float:
    """Inverse of :func:`alpha_bar`."""
    return abar * 2 / (tokens**2 + tokens - 2)
