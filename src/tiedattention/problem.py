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

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .errors import ParameterError
from .targets import Target, parse_target

__all__ = ["Task", "Student", "Problem", "alpha_bar", "alpha_from_bar", "validate_alpha", "TASKS", "MODELS"]

TASKS = ("seq2lab", "seq2seq")
MODELS = ("factorized", "direct")


def _check_finite(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, f"must be a number (got {value!r})") from None
    if not math.isfinite(v):
        raise ParameterError(name, f"must be finite (got {value!r})")
    return v


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
        if isinstance(self.tokens, bool) or not float(self.tokens).is_integer():
            raise ParameterError("tokens", f"must be an integer >= 2 (got {self.tokens!r})")
        if int(self.tokens) < 2:
            raise ParameterError("tokens", f"must be an integer >= 2 (got {self.tokens!r})")
        object.__setattr__(self, "tokens", int(self.tokens))
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
    ) -> Problem:
        """The problem options shared by every CLI command (ARCHITECTURE.md), with the same defaults."""
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
        unknown = set(changes) - set(opts)
        if unknown:
            raise ParameterError(sorted(unknown)[0], "unknown problem option")
        opts.update(changes)
        return Problem.from_options(**opts)

    def replace_student(self, **changes: Any) -> Problem:
        return replace(self, student=replace(self.student, **changes))


def validate_alpha(alpha: float, name: str = "alpha") -> float:
    """alpha = n/d^2 must be a finite positive number."""
    return _check_pos(name, alpha)


def alpha_bar(alpha: float, tokens: int) -> float:
    """alpha_bar = alpha (T^2 + T - 2)/2: measurements per d^2, comparable across T (= 2 alpha at T=2)."""
    return alpha * (tokens**2 + tokens - 2) / 2


def alpha_from_bar(abar: float, tokens: int) -> float:
    """Inverse of :func:`alpha_bar`."""
    return abar * 2 / (tokens**2 + tokens - 2)
