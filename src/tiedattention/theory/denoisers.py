"""Matrix (prior) side of the state evolution: the spectral denoisers of each student.

(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) through the effective observation Y = m_hat S0 + sqrt(q_hat) Z
(Z a GOE matrix, semicircle on [-2, 2]); see docs/theory/state_evolution.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ParameterError
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


def matrix_update(
    problem: Problem, measure, q_hat: float, m_hat: float, sigma_hat: float
) -> MatrixSide:
    """(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) for the student's denoiser.

    factorised (kappa >= 1):  S_hat = (m_hat/sigma_hat) (S0 + delta Z - eps)_+,  delta = sqrt(q_hat)/m_hat,
                              eps = 2 lambda/m_hat;
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
    if problem.student.kappa < 1:
        raise ParameterError("kappa", "narrow students (kappa < 1) are not in the state evolution yet")
    eps = 2.0 * lam / m_hat
    si = FreeConvolution(measure, delta).integrals(eps)
    scale = m_hat / sigma_hat
    q = scale**2 * si.I
    m = scale * (si.I - 0.5 * delta * si.dI_ddelta - 0.5 * eps * si.dI_deps)
    sigma = si.dI_ddelta / (2.0 * delta * sigma_hat)
    return MatrixSide(q, m, sigma, delta, eps, si.rank, -0.5 * scale * si.dI_deps, si.error)
