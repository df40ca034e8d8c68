"""Gaussian-design control of the AIM: the same channel with exactly Gaussian logits (numpy/torch, float64).

In the AIM (THEORY.md section 1) a logit ``h_ab(S) = (x_a^T S x_b - delta_ab Tr S)/sqrt(d)`` is the rank-one
measurement ``<x_a x_b^T, S>/sqrt(d)`` (minus its mean): at finite d its law is not Gaussian (fourth cumulant
O(1/d)). Here every logit is instead a Gaussian linear measurement of S with the **same covariance**:

* a sequence has K = T(T+1)/2 independent logits, one per pair a <= b; pair (a, b) of sequence mu reads
  ``h_ab = h_ba = c_ab <A_{mu,ab}, S>_F / sqrt(d)`` with ``A = (G + G^T)/2``, G i.i.d. N(0, 1) (d x d), and
  ``c_ab = 1`` (a != b), ``c_aa = sqrt(2)``: mean 0, off-diagonal variance (1/d) Tr S^2, diagonal 2 (1/d) Tr S^2,
  different logits uncorrelated, exactly as the AIM's (THEORY.md sections 1, 3), and exactly Gaussian for every S;
* stored as ``B`` (n K, d(d+1)/2), B i.i.d. N(0, 1), against the isometric vectorisation ``svec(S)`` (diagonal,
  then sqrt(2) S_ij for i < j in ``np.triu_indices`` order): ``<A, S>_F = b . svec(S)`` has the law above;
* logit noise, labels and output noise exactly as :func:`.sampler.sample_dataset` (seq2lab only): ``y =
  softmax_row(beta0 [h(S0) + sqrt(Delta) xi])`` (+ N(0, Delta_out) per entry), S0 from ``rng_for(seed, "target")``
  (the same S0 as the structured sampler's seed), the rest from ``rng_for(seed, "train")``.

Training reuses the project's proximal solver :func:`.trainers.solve_prox` unchanged: it only calls
``logits_all``, ``loss_of_logits`` and ``grad_S_of`` of its objective, which :class:`GaussianObjective` provides
for the Gaussian design (same normalisation as :class:`.models.Objective`: F = [sum_mu ||y - yhat||^2 +
lam d Tr S]/d^2). Test error: for a fixed S_hat the fresh Gaussian-design logits (h(S_hat), h(S0)) of one pair are
exactly jointly Gaussian with covariance c_ab^2 [[q, m], [m, Q0]], q = (1/d)Tr S_hat^2, m = (1/d)Tr S_hat S0,
Q0 = (1/d)Tr S0^2; :func:`gaussian_test_errors` samples those Gaussians (``n_test`` sequences, default 2e5, stream
``rng_for(seed, "test")``), so the test error depends on S_hat only through (q, m, Q0) and costs nothing in d.

Purpose: at finite d the structured-data ERM sits O(1/d) above the state evolution; the Gaussian design isolates
whether that bias comes from the non-Gaussian rank-one measurements (docs/theory/state_evolution.md, "Where the
finite-size bias comes from: a Gaussian-design control").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..design import design_gram
from ..design import logit_pairs as pairs
from ..errors import ParameterError
from ..problem import Problem
from ..targets import validate_dimension
from .models import Objective, seq2lab_loss, sym
from .sampler import rng_for, softmax_rows, symmetric_noise
from .trainers import solve_prox

__all__ = [
    "svec",
    "smat",
    "pairs",
    "GaussianDataset",
    "sample_gaussian_design",
    "gaussian_logits",
    "DesignObjective",
    "GaussianObjective",
    "train_design",
    "train_gaussian",
    "gaussian_test_errors",
    "design_seed_row",
    "gaussian_design_seed",
    "overlaps",
]


def svec(S: np.ndarray | torch.Tensor):
    """Isometric vectorisation of a symmetric (d, d) matrix: (S_ii, sqrt(2) S_ij for i < j), ``triu_indices`` order
    (diagonal entries appear at their positions in that order)."""
    d = S.shape[0]
    iu, ju = np.triu_indices(d)
    scale = np.where(iu == ju, 1.0, math.sqrt(2.0))
    if isinstance(S, torch.Tensor):
        return S[iu, ju] * torch.as_tensor(scale, dtype=S.dtype, device=S.device)
    return np.asarray(S)[iu, ju] * scale


def smat(u: np.ndarray | torch.Tensor, d: int):
    """Inverse of :func:`svec`; also the Frobenius gradient on symmetric matrices of ``S -> b . svec(S)`` is
    ``smat(b)``."""
    iu, ju = np.triu_indices(d)
    scale = np.where(iu == ju, 1.0, 1.0 / math.sqrt(2.0))
    if isinstance(u, torch.Tensor):
        S = torch.zeros((d, d), dtype=u.dtype, device=u.device)
        v = u * torch.as_tensor(scale, dtype=u.dtype, device=u.device)
        S[iu, ju] = v
        S[ju, iu] = v
        return S
    S = np.zeros((d, d))
    v = np.asarray(u) * scale
    S[iu, ju] = v
    S[ju, iu] = v
    return S


class DesignData:
    """The sizes of a control design's data set, from its target S0 (d, d) and labels y (n, T, T)."""

    @property
    def d(self) -> int:
        return self.S0.shape[0]

    @property
    def n(self) -> int:
        return self.y.shape[0]


@dataclass
class GaussianDataset(DesignData):
    """n sequences of the Gaussian-design AIM. B: (n K, d(d+1)/2) sensing vectors (row mu K + k is pair k of
    sequence mu, order of :func:`pairs`); y, clean: (n, T, T) noisy and clean labels; S0 (d, d)."""

    B: np.ndarray
    y: np.ndarray
    clean: np.ndarray
    S0: np.ndarray
    T: int


def gaussian_logits(B: np.ndarray | torch.Tensor, S: np.ndarray | torch.Tensor, T: int):
    """All logits (n, T, T) of the Gaussian design at a symmetric S (numpy or torch, following B)."""
    d = S.shape[0]
    a, b, c = pairs(T)
    K = a.size
    if isinstance(B, torch.Tensor):
        v = torch.mv(B, svec(S)).reshape(-1, K) * torch.as_tensor(c / math.sqrt(d), dtype=B.dtype, device=B.device)
        H = torch.empty((v.shape[0], T, T), dtype=B.dtype, device=B.device)
    else:
        v = (B @ svec(S)).reshape(-1, K) * (c / math.sqrt(d))
        H = np.empty((v.shape[0], T, T))
    H[:, a, b] = v
    H[:, b, a] = v
    return H


def _gram_factors(rng: np.random.Generator, n: int, d: int, T: int) -> np.ndarray:
    """Cholesky factors (n, K, K) of the AIM design Gram matrices of n sequences of fresh tokens (design.py)."""
    x = rng.standard_normal((n, T, d))
    return np.linalg.cholesky(design_gram(np.einsum("nad,nbd->nab", x, x), d))


def design_n(alpha: float, d: int) -> int:
    """n = round(alpha d^2) of a control design's seed, alpha validated as for the AIM (ParameterError("alpha")
    for alpha <= 0, NaN, inf, or n = 0), so that a bad alpha is never trained as n = 1."""
    from ..problem import validate_alpha
    from .api import n_of

    return n_of(validate_alpha(alpha), int(d))


def design_setup(problem: Problem, n: int, d: int, seed: int, S0: np.ndarray | None,
                 name: str) -> tuple[int, int, int, np.ndarray]:
    """Validated (n, d, T, S0) of a control design's sample (seq2lab only): S0 from ``rng_for(seed, "target")``
    unless given, i.e. the same S0 as the AIM's sampler for that seed."""
    task = problem.task
    if task.task != "seq2lab":
        raise ParameterError("task", f"the {name} design is implemented for seq2lab only")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ParameterError("n", f"must be a positive integer (got {n!r})")
    validate_dimension(d)
    if S0 is None:
        S0 = task.target.sample(int(d), rng_for(int(seed), "target"))
    return int(n), int(d), task.tokens, np.asarray(S0, dtype=np.float64)


def sample_gaussian_design(
    problem: Problem, n: int, d: int, seed: int, S0: np.ndarray | None = None, chunk: int = 1 << 22,
    gram: bool = False,
) -> GaussianDataset:
    """Sample n Gaussian-design sequences (seq2lab; see the module docstring). ``chunk``: numbers drawn at once
    (the data do not depend on it). ``gram``: the Gram-matched design, in which the K sensing vectors of a
    sequence are mixed, B_mu <- L_mu B_mu with L_mu L_mu^T the AIM's design Gram matrix of fresh tokens
    (``design.design_gram``; tokens from a fourth stream of ``rng_for(seed, "train")``): Gaussian logits with the
    AIM's per-sequence Gram fluctuations (theory: ``theory.finite_size``)."""
    task = problem.task
    n, d, T, S0 = design_setup(problem, n, d, seed, S0, "Gaussian")
    seeds = rng_for(int(seed), "train").integers(0, 2**63 - 1, size=4)
    rB, rxi, rout, rgram = (np.random.default_rng(int(s)) for s in seeds)
    K, D = T * (T + 1) // 2, d * (d + 1) // 2
    B = np.empty((n * K, D))
    rows = max(1, chunk // D)
    for lo in range(0, n * K, rows):  # sequential draws of one generator: independent of the chunk size
        rB.standard_normal(out=B[lo : lo + rows])
    if gram:
        B3 = B.reshape(n, K, D)
        for lo in range(0, n, 4096):
            sl = slice(lo, min(n, lo + 4096))
            B3[sl] = np.einsum("nkl,nld->nkd", _gram_factors(rgram, B3[sl].shape[0], d, T), B3[sl])
    h0 = gaussian_logits(B, S0, T)
    xi = symmetric_noise(rxi, n, T)
    y = softmax_rows(task.beta0 * (h0 + math.sqrt(task.noise) * xi))
    if task.noise_out > 0:
        y = y + math.sqrt(task.noise_out) * rout.standard_normal((n, T, T))
    return GaussianDataset(B=B, y=y, clean=softmax_rows(task.beta0 * h0), S0=S0, T=T)


class _Data:
    def __init__(self, dtype: torch.dtype, device: torch.device):
        self.dtype, self.device = dtype, device


class DesignObjective:
    """F = [sum_mu ||y_mu - softmax_row(beta h_mu(S))||^2 + penalty]/d^2 for a control design whose logits h(S)
    are linear in S: the part shared by the designs. A subclass sets ``self.y`` (torch, (n, T, T)) and the data's
    dtype in ``__init__`` (through :meth:`_setup`) and provides ``logits_all(S)`` and ``grad_S_of(G)``, the
    adjoint; together they are the interface :func:`.trainers.solve_prox` uses (``logits_all``,
    ``loss_of_logits``, ``grad_S_of``, ``penalty_trace``, ``penalty_ridge``)."""

    def _setup(self, problem: Problem, d: int, y: np.ndarray, T: int, dtype: torch.dtype) -> None:
        self.problem = problem
        self.d, self.n, self.T = d, y.shape[0], T
        self.lam = problem.student.lam
        self.beta = problem.student.beta
        self.y = torch.from_numpy(y)
        self.data = _Data(dtype, torch.device("cpu"))

    def loss_of_logits(self, H: torch.Tensor, grad: bool = True) -> tuple[float, torch.Tensor | None]:
        """data sum / d^2 of all logits H (n, T, T) and, with ``grad``, dF/dH (n, T, T)."""
        if not grad:
            with torch.no_grad():
                return float(seq2lab_loss(torch.softmax(self.beta * H, dim=-1), self.y)) / self.d**2, None
        Hl = H.detach().requires_grad_(True)
        val = seq2lab_loss(torch.softmax(self.beta * Hl, dim=-1), self.y) / self.d**2
        (G,) = torch.autograd.grad(val, Hl)
        return float(val.detach()), G

    def pair_gradient(self, G: torch.Tensor) -> torch.Tensor:
        """dF/dv for the K = T(T+1)/2 distinct logits of each sequence, flattened (n K,): h_ab and h_ba are the
        same logit v_k, so the off-diagonal entries of G add up."""
        a, b, _ = pairs(self.T)
        g = (G[:, a, b] + G[:, b, a]) * torch.as_tensor(np.where(a == b, 0.5, 1.0), dtype=G.dtype)
        return g.reshape(-1)

    def data_only(self, S: torch.Tensor) -> float:
        return self.loss_of_logits(self.logits_all(S), grad=False)[0]

    # the AIM objective's penalties (they read only lam and d)
    penalty_trace = Objective.penalty_trace
    penalty_ridge = Objective.penalty_ridge
    penalty_S = Objective.penalty_S

    def value(self, S: torch.Tensor) -> float:
        """The full normalised objective F(S) (trace penalty for the factorised model, ridge for the direct one)."""
        return self.data_only(S) + float(self.penalty_S(S))


class GaussianObjective(DesignObjective):
    """:class:`DesignObjective` on a :class:`GaussianDataset`: logits ``gaussian_logits(B, S)``."""

    def __init__(self, problem: Problem, data: GaussianDataset):
        self.B = torch.from_numpy(data.B)
        self._setup(problem, data.d, data.y, data.T, self.B.dtype)
        _, _, c = pairs(self.T)
        self._c = torch.as_tensor(c / math.sqrt(self.d), dtype=self.B.dtype)

    def logits_all(self, S: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return gaussian_logits(self.B, S, self.T)

    def grad_S_of(self, G: torch.Tensor) -> torch.Tensor:
        """Frobenius gradient on symmetric S of F(h(S)) given G = dF/dH (h_ab and h_ba are the same logit)."""
        g = (self.pair_gradient(G).reshape(-1, self._c.numel()) * self._c).reshape(-1)
        return smat(torch.mv(self.B.T, g), self.d)


def train_design(problem: Problem, obj: DesignObjective, seed: int = 0, **options) -> dict:
    """Minimise a control design's F with :func:`.trainers.solve_prox` (``options``: its rtol, max_iter, ...).
    Returns S_hat (numpy), objective, train_error (per sequence), steps, converged, message, seconds."""
    t0 = time.perf_counter()
    sol = solve_prox(problem, obj, seed=seed, **options)
    seconds = time.perf_counter() - t0
    S = sym(sol.S.detach())
    data_term = obj.data_only(S)
    F = obj.value(S)
    converged = bool(sol.converged) and math.isfinite(F)
    return {
        "S_hat": S.numpy().astype(np.float64), "objective": F, "train_error": data_term * obj.d**2 / obj.n,
        "steps": int(sol.steps), "converged": converged, "message": sol.message, "seconds": seconds,
    }


def train_gaussian(problem: Problem, data: GaussianDataset, seed: int = 0, **options) -> dict:
    """:func:`train_design` on the Gaussian design."""
    return train_design(problem, GaussianObjective(problem, data), seed=seed, **options)


def gaussian_test_errors(
    problem: Problem, q: float, m: float, Q0: float, seed: int, n_test: int = 200_000, chunk: int = 50_000,
    gram: bool = False, d: int | None = None,
) -> dict[str, float]:
    """Test errors of a student with overlaps (q, m) against a teacher of norm Q0 on fresh Gaussian-design logits
    (exact law, sampled): test_error(_sem) against noisy labels, test_error_clean(_sem) against clean ones.
    ``gram`` (needs ``d``): the Gram-matched design's fresh sequences (logits mixed by the AIM's Gram factors)."""
    if isinstance(n_test, bool) or int(n_test) != n_test or n_test < 2:
        raise ParameterError("n_test", f"must be an integer >= 2 (got {n_test!r})")
    if gram and (d is None or int(d) < problem.task.tokens + 1):
        raise ParameterError("d", f"the Gram-matched test errors need the dimension d > T (got {d!r})")
    task, beta = problem.task, problem.student.beta
    T = task.tokens
    a, b, c = pairs(T)
    K = a.size
    if q < 0 or Q0 <= 0 or m * m > q * Q0 * (1 + 1e-12):
        raise ParameterError("overlaps", f"(q, m, Q0) = ({q}, {m}, {Q0}) is not a covariance")
    rng = rng_for(int(seed), "test")
    s0, r = math.sqrt(Q0), m / math.sqrt(Q0)
    rest = math.sqrt(max(q - r * r, 0.0))
    noisy, clean = np.empty(n_test), np.empty(n_test)
    for lo in range(0, n_test, chunk):
        k = min(n_test, lo + chunk) - lo
        z = rng.standard_normal((2, k, K))
        t0, ts = s0 * z[0], r * z[0] + rest * z[1]
        if gram:
            L = _gram_factors(rng, k, int(d), T)
            t0, ts = np.einsum("nkl,nl->nk", L, t0), np.einsum("nkl,nl->nk", L, ts)
        h0, hs = np.empty((k, T, T)), np.empty((k, T, T))
        h0[:, a, b] = h0[:, b, a] = t0 * c
        hs[:, a, b] = hs[:, b, a] = ts * c
        xi = symmetric_noise(rng, k, T)
        y = softmax_rows(task.beta0 * (h0 + math.sqrt(task.noise) * xi))
        if task.noise_out > 0:
            y = y + math.sqrt(task.noise_out) * rng.standard_normal((k, T, T))
        yhat = softmax_rows(beta * hs)
        noisy[lo : lo + k] = ((y - yhat) ** 2).sum(axis=(1, 2))
        clean[lo : lo + k] = ((softmax_rows(task.beta0 * h0) - yhat) ** 2).sum(axis=(1, 2))
    sq = math.sqrt(n_test)
    return {
        "test_error": float(noisy.mean()), "test_error_sem": float(noisy.std(ddof=1) / sq),
        "test_error_clean": float(clean.mean()), "test_error_clean_sem": float(clean.std(ddof=1) / sq),
    }


def overlaps(S_hat: np.ndarray, S0: np.ndarray) -> tuple[float, float, float]:
    """(q, m, Q0) = ((1/d)Tr S_hat^2, (1/d)Tr S_hat S0, (1/d)Tr S0^2)."""
    d = S0.shape[0]
    return float((S_hat * S_hat).sum() / d), float((S_hat * S0).sum() / d), float((S0 * S0).sum() / d)


def design_seed_row(problem: Problem, res: dict, S0: np.ndarray, seed: int, n_test: int) -> dict:
    """The record of one trained control-design seed (``res`` from :func:`train_design`): objective/d^2, train
    error, steps, converged, seconds, overlaps (q, m, Q0), MSE on S and the test errors under the Gaussian law of
    (q, m, Q0) (:func:`gaussian_test_errors`)."""
    q, m, Q0 = overlaps(res["S_hat"], S0)
    row = {k: res[k] for k in ("objective", "train_error", "steps", "converged", "seconds")}
    row.update(q=q, m=m, Q0=Q0, mse=q - 2 * m + Q0)
    row.update(gaussian_test_errors(problem, q, m, Q0, seed, n_test))
    return row


def gaussian_design_seed(problem: Problem, alpha: float, d: int, seed: int, n_test: int = 200_000, **options) -> dict:
    """One seed of the Gaussian-design ERM (n = round(alpha d^2)): :func:`design_seed_row`."""
    n = design_n(alpha, d)
    data = sample_gaussian_design(problem, n, d, seed)
    res = train_gaussian(problem, data, seed=seed, **options)
    S0 = data.S0
    del data
    return design_seed_row(problem, res, S0, seed, n_test)
