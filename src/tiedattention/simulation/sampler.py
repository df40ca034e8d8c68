"""Sampler of the attention-indexed model (AIM), THEORY.md section 1.  Pure numpy, float64.

Normalisations (exactly as THEORY.md):

* tokens ``x_a ~ N(0, I_d)``, a sequence is ``X`` of shape (T, d);
* logits ``h_ab(S) = (x_a^T S x_b - delta_ab Tr S) / sqrt(d)``: mean 0, off-diagonal variance (1/d) Tr S^2,
  diagonal variance twice that;
* logit noise ``sqrt(Delta) xi``, ``xi`` symmetric Gaussian with Var xi_ab = 1/2 (a != b), Var xi_aa = 1,
  sampled as ``xi = (G + G^T)/2`` with G i.i.d. N(0, 1);
* attention label ``y = softmax_row(beta0 [h(S0) + sqrt(Delta) xi])`` of shape (T, T);
* seq2lab: the label is ``y`` plus output noise ``N(0, Delta_out)`` on each of its T^2 entries;
* seq2seq: the label is ``Y = y X + E`` of shape (T, d), ``E`` i.i.d. ``N(0, Delta_out)``; its loss is
  ``(1/d) ||Y - yhat X||_F^2``.  The dataset keeps the sufficient statistics of that loss instead of Y:
  ``gram = X X^T / d``, ``out_cross = X E^T / d`` (both (T, T)) and ``out_sq = ||E||_F^2 / d``, so that
  ``(1/d)||Y - yhat X||^2 = tr(D gram D^T) + 2 tr(D out_cross) + out_sq`` with ``D = y - yhat``.

Reproducibility: every random draw comes from a numpy Generator seeded by ``(seed, purpose)``
(:func:`rng_for`); tokens, logit noise and output noise are three independent child streams, drawn chunk
by chunk, so the data do not depend on the chunk size (nor on the device the student is trained on).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from ..problem import Problem
from ..targets import validate_dimension

__all__ = [
    "PURPOSES",
    "rng_for",
    "Dataset",
    "sample_dataset",
    "iter_dataset",
    "logits",
    "softmax_rows",
    "symmetric_noise",
    "default_chunk",
]

#: purposes of the random streams derived from one seed
PURPOSES = {"target": 0, "train": 1, "test": 2, "init": 3}


def rng_for(seed: int, purpose: str) -> np.random.Generator:
    """numpy Generator for ``(seed, purpose)``; purposes: target, train, test, init."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown random purpose {purpose!r}")
    return np.random.default_rng(np.random.SeedSequence([int(seed), PURPOSES[purpose]]))


def default_chunk(T: int, d: int, budget: int = 1 << 22) -> int:
    """Sequences per chunk so that one chunk of tokens holds about ``budget`` numbers (32 MiB in float64)."""
    return max(1, budget // (T * d))


def logits(X: np.ndarray, S: np.ndarray) -> np.ndarray:
    """h(S) for a batch: X (m, T, d), S (d, d) symmetric -> (m, T, T), ``(X S X^T - I Tr S)/sqrt(d)``."""
    d = X.shape[-1]
    h = (X @ S) @ np.swapaxes(X, -1, -2)
    T = X.shape[-2]
    h -= np.trace(S) * np.eye(T)
    return h / np.sqrt(d)


def softmax_rows(h: np.ndarray) -> np.ndarray:
    """Row softmax over the last axis (numerically stable)."""
    z = h - h.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def symmetric_noise(rng: np.random.Generator, m: int, T: int) -> np.ndarray:
    """xi of shape (m, T, T): symmetric, Var xi_ab = 1/2 (a != b), Var xi_aa = 1."""
    g = rng.standard_normal((m, T, T))
    return 0.5 * (g + np.swapaxes(g, -1, -2))


@dataclass
class Dataset:
    """n sequences of the AIM (numpy, float64).

    Attributes:
        X: tokens, (n, T, d).
        y: noisy attention labels, (n, T, T). For seq2lab they include the output noise.
        clean: clean attention ``softmax_row(beta0 h(S0))`` (no logit or output noise), (n, T, T).
        S0: the target, (d, d).
        task: "seq2lab" or "seq2seq".
        gram, out_cross, out_sq: seq2seq only (else None): X X^T/d (n,T,T), X E^T/d (n,T,T), ||E||^2/d (n,).
        Y: seq2seq labels y X + E, (n, T, d), only when sampled with ``keep_outputs=True``.
    """

    X: np.ndarray
    y: np.ndarray
    clean: np.ndarray
    S0: np.ndarray
    task: str
    gram: np.ndarray | None = None
    out_cross: np.ndarray | None = None
    out_sq: np.ndarray | None = None
    Y: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def T(self) -> int:
        return self.X.shape[1]

    @property
    def d(self) -> int:
        return self.X.shape[2]


def _streams(rng: np.random.Generator) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """Three independent child generators (tokens, logit noise, output noise)."""
    seeds = rng.integers(0, 2**63 - 1, size=3)
    return tuple(np.random.default_rng(int(s)) for s in seeds)  # type: ignore[return-value]


def _setup(problem, n, d, rng_or_seed, S0, purpose):
    """Validated (n, d, S0, rng) of a sample (see :func:`sample_dataset`)."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ParameterError("n", f"must be a positive integer (got {n!r})")
    validate_dimension(d)
    n, d = int(n), int(d)
    task = problem.task
    if isinstance(rng_or_seed, np.random.Generator):
        rng = rng_or_seed
        if S0 is None:
            S0 = task.target.sample(d, rng)
    else:
        if isinstance(rng_or_seed, bool) or int(rng_or_seed) != rng_or_seed or rng_or_seed < 0:
            raise ParameterError("seed", f"must be an integer >= 0 or a numpy Generator (got {rng_or_seed!r})")
        if S0 is None:
            S0 = task.target.sample(d, rng_for(int(rng_or_seed), "target"))
        rng = rng_for(int(rng_or_seed), purpose)
    S0 = np.asarray(S0, dtype=np.float64)
    if S0.shape != (d, d):
        raise ParameterError("S0", f"must have shape ({d}, {d}) (got {S0.shape})")
    if not np.all(np.isfinite(S0)):
        raise ParameterError("S0", "must be finite")
    if not np.allclose(S0, S0.T, rtol=0.0, atol=1e-12 * max(1.0, float(np.abs(S0).max()))):
        raise ParameterError("S0", "must be symmetric (the logits h_ab and h_ba are the same measurement)")
    return n, d, S0, rng


def _chunks(problem, n, d, S0, rng, chunk, keep_outputs):
    """Consecutive chunks of the sample as Datasets (the draws do not depend on the chunk size; default
    :func:`default_chunk`)."""
    task = problem.task
    T = task.tokens
    chunk = int(chunk) if chunk else default_chunk(T, d)
    seq2seq = task.task == "seq2seq"
    rx, rxi, rout = _streams(rng)
    sd, sout = np.sqrt(task.noise), np.sqrt(task.noise_out)
    for lo in range(0, n, chunk):
        m = min(n, lo + chunk) - lo
        xc = rx.standard_normal((m, T, d))
        h0 = logits(xc, S0)
        xi = symmetric_noise(rxi, m, T)
        att = softmax_rows(task.beta0 * (h0 + sd * xi))
        clean = softmax_rows(task.beta0 * h0)
        if not seq2seq:
            if task.noise_out > 0:
                att = att + sout * rout.standard_normal((m, T, T))
            yield Dataset(X=xc, y=att, clean=clean, S0=S0, task=task.task)
            continue
        gram = xc @ np.swapaxes(xc, -1, -2) / d
        cross, sq = np.zeros((m, T, T)), np.zeros(m)
        if task.noise_out > 0:
            e = sout * rout.standard_normal((m, T, d))
            cross = xc @ np.swapaxes(e, -1, -2) / d
            sq = (e * e).sum(axis=(1, 2)) / d
        else:
            e = 0.0
        Y = att @ xc + e if keep_outputs else None
        yield Dataset(X=xc, y=att, clean=clean, S0=S0, task=task.task, gram=gram, out_cross=cross, out_sq=sq, Y=Y)


def iter_dataset(
    problem: Problem,
    n: int,
    d: int,
    rng_or_seed: int | np.random.Generator,
    S0: np.ndarray | None = None,
    purpose: str = "train",
    chunk: int | None = None,
    keep_outputs: bool = False,
):
    """The sample of :func:`sample_dataset` (same arguments, same numbers) as consecutive Datasets of at most
    ``chunk`` sequences, so that a large sample (e.g. test sequences) never has to be in memory at once."""
    n, d, S0, rng = _setup(problem, n, d, rng_or_seed, S0, purpose)
    yield from _chunks(problem, n, d, S0, rng, chunk, keep_outputs)


def sample_dataset(
    problem: Problem,
    n: int,
    d: int,
    rng_or_seed: int | np.random.Generator,
    S0: np.ndarray | None = None,
    purpose: str = "train",
    chunk: int | None = None,
    keep_outputs: bool = False,
) -> Dataset:
    """Sample n sequences of dimension d from the problem's task.

    Args:
        problem: the problem (only ``problem.task`` is used).
        n, d: number of sequences and token dimension.
        rng_or_seed: an integer seed (streams ``rng_for(seed, purpose)``, and ``rng_for(seed, "target")``
            for S0 when it is not given) or a numpy Generator (used for S0 first when S0 is None).
        S0: the target (d, d); default ``problem.task.target.sample(d, rng)``.
        purpose: "train" or "test" (which stream of the seed to use).
        chunk: sequences drawn at once (the result does not depend on it).
        keep_outputs: seq2seq only, also store ``Y = y X + E`` (n, T, d).
    """
    n, d, S0, rng = _setup(problem, n, d, rng_or_seed, S0, purpose)
    task = problem.task
    T = task.tokens
    seq2seq = task.task == "seq2seq"
    X = np.empty((n, T, d))
    y = np.empty((n, T, T))
    clean = np.empty((n, T, T))
    gram = np.empty((n, T, T)) if seq2seq else None
    cross = np.empty((n, T, T)) if seq2seq else None
    sq = np.empty(n) if seq2seq else None
    Y = np.empty((n, T, d)) if (seq2seq and keep_outputs) else None
    lo = 0
    for part in _chunks(problem, n, d, S0, rng, chunk, keep_outputs):
        hi = lo + part.n
        X[lo:hi], y[lo:hi], clean[lo:hi] = part.X, part.y, part.clean
        if seq2seq:
            gram[lo:hi], cross[lo:hi], sq[lo:hi] = part.gram, part.out_cross, part.out_sq
            if Y is not None:
                Y[lo:hi] = part.Y
        lo = hi
    return Dataset(X=X, y=y, clean=clean, S0=S0, task=task.task, gram=gram, out_cross=cross, out_sq=sq, Y=Y)
