"""Matrix (prior) side of the state evolution: the spectral denoisers of each student.

(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) through the effective observation Y = m_hat S0 + sqrt(q_hat) Z
(Z a GOE matrix, semicircle on [-2, 2]); see docs/theory/state_evolution.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..problem import Problem
from .spectral import FreeConvolution

__all__ = ["MatrixSide", "matrix_update", "RIDGE_FACTOR"]

# the ridge penalty lambda d ||S||_F^2 enters the denoiser as 2 * lambda (1/d) Tr S^2 -> 4 lambda S
RIDGE_FACTOR = 4.0


@dataclass(frozen=True)
class MatrixSide:
    """Output of the matrix (prior) side: order parameters and what the observables need."""

    q: float
    m: float
    sigma: float
    delta: float
    eps: float
    rank: float  # fraction of non-zero eigenvalues of S_hat
    trace: float  # (1/d) Tr S_hat
    spectral_error: float
    cut: float = 0.0  # eigenvalues of Y/m_hat below the cut are set to 0 (eps, or the rank-kappa quantile)


def matrix_update(
    problem: Problem, measure, q_hat: float, m_hat: float, sigma_hat: float
) -> MatrixSide:
    """(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) for the student's denoiser.

    factorised (kappa >= 1):  S_hat = (m_hat/sigma_hat) (S0 + delta Z - eps)_+,  delta = sqrt(q_hat)/m_hat,
                              eps = 2 lambda/m_hat;
    factorised (kappa < 1):   the same, keeping only the top kappa*d eigenvalues: f(y) = (y - eps) 1[y > c],
                              c = max(eps, y_kappa), y_kappa the (1 - kappa)-quantile of rho_delta
                              (docs/theory/spectra.md);
    direct (ridge):           S_hat = (m_hat S0 + sqrt(q_hat) Z)/(sigma_hat + 4 lambda).
    """
    lam = problem.student.lam
    q0 = measure.q0
    if not (q_hat > 0 and m_hat > 0 and sigma_hat > 0):
        raise FloatingPointError(
            f"conjugates left the admissible region (q_hat={q_hat:g}, m_hat={m_hat:g}, sigma_hat={sigma_hat:g})"
        )
    delta = math.sqrt(q_hat) / m_hat
    if problem.student.model == "direct":
        den = sigma_hat + RIDGE_FACTOR * lam
        q = (m_hat**2 * q0 + q_hat) / den**2
        m = m_hat * q0 / den
        return MatrixSide(q, m, 1.0 / den, delta, 0.0, 1.0, m_hat * measure.moment(1) / den, 0.0)
    eps = 2.0 * lam / m_hat
    fc = FreeConvolution(measure, delta)
    si = fc.integrals(eps)
    kappa = problem.student.kappa
    if kappa < 1 and si.rank > kappa:
        # rank constraint binds: keep the top kappa*d eigenvalues, f(y) = (y - eps) 1[y > c]
        si = fc.integrals(eps, cut=fc.quantile(kappa))
    return _spectral_side(si, m_hat, sigma_hat, delta, eps)


def _spectral_side(si, m_hat: float, sigma_hat: float, delta: float, eps: float) -> MatrixSide:
    """q, m, Sigma of S_hat = (m_hat/sigma_hat) f(Y), f(y) = (y - eps) 1[y > c] (c = eps: soft threshold).

    With J2 = int f^2 rho, J1 = int f rho, JG = int f rho Re g (rho = rho_delta, g = g_delta):
    q = s^2 J2,  m = s [J2 + eps J1 - 2 delta^2 JG],  Sigma = 2 JG / sigma_hat,  s = m_hat/sigma_hat
    (GOE Stein identity (1/d) E Tr f(Y) Z = 2 delta JG, valid for the jump at c: its own term is O(1/d)).
    For c = eps these are the kappa >= 1 formulas q = s^2 I, m = s[I - delta/2 dI/ddelta - eps/2 dI/deps],
    Sigma = dI/ddelta/(2 delta sigma_hat).
    """
    scale = m_hat / sigma_hat
    j2, j1, jg = si.I, -0.5 * si.dI_deps, si.dI_ddelta / (4.0 * delta)
    q = scale**2 * j2
    m = scale * (j2 + eps * j1 - 2.0 * delta**2 * jg)
    sigma = 2.0 * jg / sigma_hat
    return MatrixSide(q, m, sigma, delta, eps, si.rank, scale * j1, si.error, si.cut if si.cut is not None else eps)
