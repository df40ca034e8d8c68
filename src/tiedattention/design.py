"""The attention-indexed model's measurement design, shared by the theory and the simulation (numpy only).

A sequence's K = T(T+1)/2 logits are measurements h_ab(S) = <M_ab, S>_F/sqrt(d) of S with the rank-one sensing
matrices M_ab = (x_a x_b^T + x_b x_a^T)/2 (a != b) and M_aa = x_a x_a^T - I (THEORY.md section 1). Their
normalised Gram matrix

    Gamma_kl = <M_k, M_l>_F / (D c_k c_l),   D = d(d+1)/2,  c_k = 1 (a != b), sqrt(2) (a = b),

has E Gamma = I exactly and fluctuates by O(1/sqrt(d)) from sequence to sequence; it depends on the tokens only
through their T x T Gram matrix G = X X^T (Wishart_T(d, I)). ``theory.finite_size`` averages the channel over
it; ``simulation.gaussian_design(gram=True)`` gives Gaussian sensing vectors the same Gram matrices.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["logit_pairs", "design_gram"]


def logit_pairs(T: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The K = T(T+1)/2 logit pairs a <= b (``np.triu_indices(T)`` order) and their scales c_ab (sqrt(2) on the
    diagonal)."""
    a, b = np.triu_indices(T)
    return a, b, np.where(a == b, math.sqrt(2.0), 1.0)


def design_gram(G: np.ndarray, d: int) -> np.ndarray:
    """Normalised Gram matrices Gamma (..., K, K) of the AIM sensing matrices from the tokens' Gram matrices
    G = X X^T (..., T, T) at dimension d (module docstring; E Gamma = I exactly).

    <M_ab, M_ce>_F = (G_ac G_be + G_ae G_bc)/2 - [a=b] G_ce - [c=e] G_ab + [a=b][c=e] d."""
    G = np.asarray(G, dtype=float)
    T = G.shape[-1]
    a, b, c = logit_pairs(T)
    K = a.size
    P = np.empty(G.shape[:-2] + (K, K))
    for k in range(K):
        for l in range(K):
            v = 0.5 * (G[..., a[k], a[l]] * G[..., b[k], b[l]] + G[..., a[k], b[l]] * G[..., b[k], a[l]])
            if a[k] == b[k]:
                v = v - G[..., a[l], b[l]]
            if a[l] == b[l]:
                v = v - G[..., a[k], b[k]]
            if a[k] == b[k] and a[l] == b[l]:
                v = v + d
            P[..., k, l] = v
    return P / (d * (d + 1) / 2.0 * np.outer(c, c))
