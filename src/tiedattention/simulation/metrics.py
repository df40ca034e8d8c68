"""Metrics of a trained student (THEORY.md section 2), numpy float64.

* test error: mean per-sequence loss on ``n_test`` fresh sequences (stream ``rng_for(seed, "test")``, same S0),
  against noisy labels (logit noise and output noise, as in training) and against clean labels
  (``softmax_row(beta0 h(S0))``, no noise); each with its standard error std/sqrt(n_test). Per-sequence loss:
  seq2lab ``||y - yhat||_F^2`` (summed over the T^2 entries); seq2seq ``(1/d)||Y - yhat X||_F^2``.
* MSE on S: ``(1/d)||S_hat - S0||_F^2``.
* rank fraction: ``(1/d) #{eigenvalues of S_hat > rank_tol * max|eigenvalue|}``, rank_tol = 1e-6 by default.
  Only solvers that produce exact zeros (``prox``) resolve the rank; Adam and L-BFGS on W leave small positive
  eigenvalues that decay slowly, so their rank fraction is an upper bound.
* spectra: eigenvalues of S_hat (ascending) and singular values of W/(p d)^{1/4} (descending; the square roots
  of the top-p eigenvalues of S_hat clipped at 0 when W is not given).
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from .sampler import iter_dataset, logits, softmax_rows

__all__ = ["test_errors", "mse_on_S", "rank_fraction", "spectra", "RANK_TOL"]

RANK_TOL = 1e-6


def _per_sequence_losses(problem: Problem, S_hat: np.ndarray, data, chunk: int = 4096) -> tuple[np.ndarray, ...]:
    beta = problem.student.beta
    noisy = np.empty(data.n)
    clean = np.empty(data.n)
    for lo in range(0, data.n, chunk):
        sl = slice(lo, min(data.n, lo + chunk))
        yhat = softmax_rows(beta * logits(data.X[sl], S_hat))
        Dn = data.y[sl] - yhat
        Dc = data.clean[sl] - yhat
        if data.task == "seq2seq":
            G = data.gram[sl]
            noisy[sl] = (
                ((Dn @ G) * Dn).sum(axis=(1, 2))
                + 2.0 * (Dn * np.swapaxes(data.out_cross[sl], -1, -2)).sum(axis=(1, 2))
                + data.out_sq[sl]
            )
            clean[sl] = ((Dc @ G) * Dc).sum(axis=(1, 2))
        else:
            noisy[sl] = (Dn * Dn).sum(axis=(1, 2))
            clean[sl] = (Dc * Dc).sum(axis=(1, 2))
    return noisy, clean


def test_errors(
    problem: Problem, S_hat: np.ndarray, S0: np.ndarray, seed: int, n_test: int = 2000
) -> dict[str, float]:
    """Test errors on ``n_test`` fresh sequences: test_error(_sem), test_error_clean(_sem)."""
    d = S0.shape[0]
    S_hat = np.asarray(S_hat, float)
    # the test sequences chunk by chunk (the same numbers as one sample_dataset call): memory O(chunk), not O(n_test)
    parts = [_per_sequence_losses(problem, S_hat, data)
             for data in iter_dataset(problem, n_test, d, seed, S0=S0, purpose="test", chunk=4096)]
    noisy, clean = (np.concatenate(v) for v in zip(*parts, strict=True))
    sq = np.sqrt(n_test)
    return {
        "test_error": float(noisy.mean()),
        "test_error_sem": float(noisy.std(ddof=1) / sq) if n_test > 1 else float("nan"),
        "test_error_clean": float(clean.mean()),
        "test_error_clean_sem": float(clean.std(ddof=1) / sq) if n_test > 1 else float("nan"),
    }


def mse_on_S(S_hat: np.ndarray, S0: np.ndarray) -> float:
    """(1/d)||S_hat - S0||_F^2."""
    diff = np.asarray(S_hat) - np.asarray(S0)
    return float((diff * diff).sum() / S0.shape[0])


def rank_fraction(S_hat: np.ndarray, rank_tol: float = RANK_TOL) -> float:
    """(1/d) #{eig(S_hat) > rank_tol * max|eig|}."""
    ev = np.linalg.eigvalsh(np.asarray(S_hat))
    top = np.abs(ev).max()
    if top == 0:
        return 0.0
    return float(np.count_nonzero(ev > rank_tol * top) / ev.size)


def spectra(S_hat: np.ndarray, W: np.ndarray | None, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues of S_hat ascending (d,), singular values of W/(p d)^{1/4} descending (min(p, d),))."""
    ev = np.linalg.eigvalsh(np.asarray(S_hat))
    d = ev.size
    if W is not None:
        sv = np.linalg.svd(np.asarray(W) / (W.shape[0] * d) ** 0.25, compute_uv=False)
    else:
        sv = np.sqrt(np.clip(ev[::-1][: min(p, d)], 0.0, None))
    return ev, sv
