"""Rank-one design without token sharing: the AIM's law per logit, independent logits (finite-size control).

In the AIM a sequence's K = T(T+1)/2 logits are functions of the same T tokens: h_aa = (x_a^T S x_a - Tr S)/sqrt(d)
and h_ab = x_a^T S x_b / sqrt(d) share x_a. Here each logit is a rank-one measurement of its **own** fresh tokens:

* a diagonal logit (a, a) of sequence mu reads ``(u^T S u - Tr S)/sqrt(d)``, an off-diagonal one (a, b)
  ``u^T S v / sqrt(d)`` (symmetrised: h_ab = h_ba), with u, v i.i.d. N(0, I_d) drawn for that logit alone: each
  logit has the AIM's law exactly (mean 0, variance (1/d)Tr S^2 off the diagonal and twice that on it, the same
  non-Gaussian quadratic-form law), different logits are independent;
* logit noise, labels, output noise and the target exactly as :func:`.gaussian_design.sample_gaussian_design`
  (seq2lab only; S0 from ``rng_for(seed, "target")``, the same S0 as the AIM's and the Gaussian design's seed).

Between the AIM and the Gaussian design (:mod:`.gaussian_design`) it separates two finite-size features of the
AIM: the per-logit rank-one law (present here) and the sharing of tokens among a sequence's logits (absent here).
docs/theory/finite_size.md ("Where the AIM's small-alpha excess sits") measures the split with
:func:`rank_one_design_seed`. Training reuses :func:`.trainers.solve_prox` (through
:func:`.gaussian_design.train_design`) with the duck-typed :class:`RankOneObjective`
(:class:`.gaussian_design.DesignObjective`). Memory: 2 n K d float64 (the tokens), so any d the AIM reaches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..design import logit_pairs as pairs
from ..problem import Problem
from .gaussian_design import DesignData, DesignObjective, design_n, design_seed_row, design_setup, train_design
from .sampler import rng_for, softmax_rows, symmetric_noise

__all__ = ["RankOneDataset", "sample_rank_one_design", "rank_one_logits", "RankOneObjective", "rank_one_design_seed"]


@dataclass
class RankOneDataset(DesignData):
    """n sequences of the rank-one design. U, V: (n K, d) tokens of each logit (row mu K + k is pair k of
    sequence mu, order of :func:`..design.logit_pairs`; V = U on diagonal pairs); diag: (n K,) bool, the diagonal
    pairs; y, clean: (n, T, T) noisy and clean labels; S0 (d, d)."""

    U: np.ndarray
    V: np.ndarray
    diag: np.ndarray
    y: np.ndarray
    clean: np.ndarray
    S0: np.ndarray
    T: int


def rank_one_logits(U, V, diag, S, T: int):
    """All logits (n, T, T) of the rank-one design at a symmetric S (numpy or torch, following U):
    (u_k^T S v_k - [k diagonal] Tr S)/sqrt(d) placed at (a_k, b_k) and (b_k, a_k)."""
    d = S.shape[0]
    a, b, _ = pairs(T)
    K = a.size
    if isinstance(U, torch.Tensor):
        v = (((U @ S) * V).sum(1) - diag * torch.trace(S)) / math.sqrt(d)
        H = torch.empty((v.shape[0] // K, T, T), dtype=U.dtype, device=U.device)
    else:
        v = (np.einsum("kd,de,ke->k", U, S, V) - diag * np.trace(S)) / math.sqrt(d)
        H = np.empty((v.shape[0] // K, T, T))
    v = v.reshape(-1, K)
    H[:, a, b] = v
    H[:, b, a] = v
    return H


def sample_rank_one_design(problem: Problem, n: int, d: int, seed: int, S0: np.ndarray | None = None) -> RankOneDataset:
    """Sample n sequences of the rank-one design (seq2lab; see the module docstring)."""
    task = problem.task
    n, d, T, S0 = design_setup(problem, n, d, seed, S0, "rank-one")
    a, b, _ = pairs(T)
    K = a.size
    rtok, rxi, rout = (np.random.default_rng(int(s)) for s in rng_for(int(seed), "train").integers(0, 2**63 - 1, 3))
    U = rtok.standard_normal((n * K, d))
    V = rtok.standard_normal((n * K, d))
    diag = np.tile(a == b, n)
    V[diag] = U[diag]
    h0 = rank_one_logits(U, V, diag, S0, T)
    xi = symmetric_noise(rxi, n, T)
    y = softmax_rows(task.beta0 * (h0 + math.sqrt(task.noise) * xi))
    if task.noise_out > 0:
        y = y + math.sqrt(task.noise_out) * rout.standard_normal((n, T, T))
    return RankOneDataset(U=U, V=V, diag=diag, y=y, clean=softmax_rows(task.beta0 * h0), S0=S0, T=T)


class RankOneObjective(DesignObjective):
    """:class:`.gaussian_design.DesignObjective` on a :class:`RankOneDataset`: logits :func:`rank_one_logits`."""

    def __init__(self, problem: Problem, data: RankOneDataset):
        self.U, self.V = torch.from_numpy(data.U), torch.from_numpy(data.V)
        self.diag = torch.from_numpy(data.diag.astype(np.float64))
        self._setup(problem, data.d, data.y, data.T, self.U.dtype)

    def logits_all(self, S: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return rank_one_logits(self.U, self.V, self.diag, S, self.T)

    def grad_S_of(self, G: torch.Tensor) -> torch.Tensor:
        """Frobenius gradient on symmetric S of F(h(S)) given G = dF/dH: sum_k g_k (u_k v_k^T + v_k u_k^T)/(2 sqrt d)
        - (sum over diagonal k of g_k) I/sqrt(d), g_k = dF/dv_k."""
        g = self.pair_gradient(G) / math.sqrt(self.d)
        M = (self.U * g[:, None]).T @ self.V
        return 0.5 * (M + M.T) - (g * self.diag).sum() * torch.eye(self.d, dtype=G.dtype)


def rank_one_design_seed(problem: Problem, alpha: float, d: int, seed: int, n_test: int = 200_000,
                         **options) -> dict:
    """One seed of the rank-one-design ERM (n = round(alpha d^2), :func:`.gaussian_design.train_design` with
    ``options``): :func:`.gaussian_design.design_seed_row`, whose test errors are those of the trained S_hat under
    the Gaussian law of its (q, m, Q0): the training side only, the score used to compare designs."""
    n = design_n(alpha, d)
    data = sample_rank_one_design(problem, n, d, seed)
    res = train_design(problem, RankOneObjective(problem, data), seed=seed, **options)
    return design_seed_row(problem, res, data.S0, seed, n_test)
