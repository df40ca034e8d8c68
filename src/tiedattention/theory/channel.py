"""Output (channel) side of the state evolution: the softmax square-loss channel (THEORY.md section 3).

Per sequence there are K = T(T+1)/2 logits (upper triangle with diagonal, order ``np.triu_indices(T)``).
``D(v)`` is the symmetric T x T matrix with ``v`` off the diagonal and ``sqrt(2) v`` on it. The loss is

    l(h; y) = || y - softmax_row(beta D(h)) ||_F^2 .

Reductions used throughout (docs/theory/channel.md derives them):

* D(e) is the all-ones matrix for e = (1/sqrt2 on diagonal entries, 1 off the diagonal), and row softmax
  ignores a constant added to a row, so l(h + t e) = l(h). The prox never moves along e, g has no e
  component, and everything lives on the (K-1)-dimensional complement, in an orthonormal basis B of e-perp.
  The reduced coordinates c = B^T h carry the reduced design ``R = P B`` (T^2 x (K-1)) with vec D(h) = P h.
* The integral over (zeta, z) (and label noise, if any) is over i.i.d. standard normals: a = sqrt(Qz) x,
  b = (m/Qz) a + sqrt(q - m^2/Qz) eta, with Qz = Q0 + Delta/2.
* Output noise sqrt(Delta_out) N only enters the prox through its row-centred part (T(T-1) numbers); the
  row-mean part adds the constant T Delta_out to the loss.

Public API: :class:`ChannelParams`, :class:`ChannelMoments`, :class:`SoftmaxChannel`, :func:`softmax_loss`,
:func:`prox_softmax` (:class:`ProxResult`), :func:`reduced_basis`, :func:`logit_design`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import numpy as np
from scipy.special import expit, ndtri

from ..errors import ConvergenceWarning, ParameterError
from ..problem import validate_flag, validate_integer, validate_number

__all__ = [
    "ChannelParams",
    "ChannelMoments",
    "SoftmaxChannel",
    "ProxResult",
    "softmax_loss",
    "prox_softmax",
    "reduced_basis",
    "logit_design",
    "invariant_direction",
]


# --------------------------------------------------------------------------------------------------
# Geometry: the logit map D, the invariant direction e, the reduced basis B
# --------------------------------------------------------------------------------------------------
@cache
def logit_design(tokens: int) -> np.ndarray:
    """P, shape (T*T, K): vec(D(v)) = P v (row-major vec), v in np.triu_indices(T) order."""
    T = int(tokens)
    iu, ju = np.triu_indices(T)
    P = np.zeros((T * T, iu.size))
    for k, (i, j) in enumerate(zip(iu, ju, strict=True)):
        if i == j:
            P[i * T + i, k] = math.sqrt(2.0)
        else:
            P[i * T + j, k] = 1.0
            P[j * T + i, k] = 1.0
    P.setflags(write=False)
    return P


@cache
def invariant_direction(tokens: int) -> np.ndarray:
    """Unit vector e (K,) with D(e) proportional to the all-ones matrix: l(h + t e) = l(h)."""
    T = int(tokens)
    iu, ju = np.triu_indices(T)
    e = np.where(iu == ju, 1.0 / math.sqrt(2.0), 1.0)
    e = e / np.linalg.norm(e)
    e.setflags(write=False)
    return e


@cache
def reduced_basis(tokens: int) -> np.ndarray:
    """Orthonormal basis B (K, K-1) of the complement of e (deterministic).

    T = 2: B = [(1, 0, -1)/sqrt2, (1, -sqrt2, 1)/2], in which the token swap h11 <-> h22 is the reflection of
    the first coordinate (the channel folds its quadrature rule with it). T >= 3: a Householder reflection.
    """
    e = invariant_direction(tokens)
    K = e.size
    if int(tokens) == 2:
        B = np.array([[1.0 / math.sqrt(2.0), 0.5], [0.0, -1.0 / math.sqrt(2.0)], [-1.0 / math.sqrt(2.0), 0.5]])
        B.setflags(write=False)
        return B
    v = e.copy()
    v[0] -= 1.0  # reflection H with H e_1 = e; its columns 2..K span e-perp
    H = np.eye(K) - 2.0 * np.outer(v, v) / (v @ v)
    B = np.ascontiguousarray(H[:, 1:])
    B.setflags(write=False)
    return B


@cache
def _reduced_design(tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """R = P B reshaped (T, T, K-1) and RR[(r,a), i*n+j] = R[r,a,i] R[r,a,j] for Hessian assembly."""
    T = int(tokens)
    R = logit_design(T) @ reduced_basis(T)
    n = R.shape[1]
    RR = (R[:, :, None] * R[:, None, :]).reshape(T * T, n * n)
    R3 = R.reshape(T, T, n)
    R3.setflags(write=False)
    RR.setflags(write=False)
    return R3, RR


@cache
def _row_noise_basis(tokens: int) -> np.ndarray:
    """Orthonormal basis (T, T-1) of the zero-sum vectors of one row (for the output noise)."""
    T = int(tokens)
    ones = np.full(T, 1.0 / math.sqrt(T))
    v = ones.copy()
    v[0] -= 1.0
    H = np.eye(T) - 2.0 * np.outer(v, v) / (v @ v)
    out = np.ascontiguousarray(H[:, 1:])
    out.setflags(write=False)
    return out


def _softmax_rows(u: np.ndarray) -> np.ndarray:
    u = u - u.max(axis=-1, keepdims=True)
    np.exp(u, out=u)
    u /= u.sum(axis=-1, keepdims=True)
    return u


# --------------------------------------------------------------------------------------------------
# Loss, gradient, Hessian
# --------------------------------------------------------------------------------------------------
def _loss_parts(u: np.ndarray, y: np.ndarray):
    """From pre-softmax logits u (N,T,T) (already times beta) and labels y: s, w = s*(e - <e,s>), loss."""
    s = _softmax_rows(u.copy())
    e = s - y
    ebar = np.sum(e * s, axis=2)
    w = s * (e - ebar[..., None])
    loss = np.sum((e * e).reshape(e.shape[0], -1), axis=1)
    return s, w, loss


def _rowmat(x: np.ndarray, R3: np.ndarray) -> np.ndarray:
    """(N,T,T) x (T,T,n) -> (N,T,n): out[:, r] = x[:, r] @ R3[r] (one BLAS product per row)."""
    return np.stack([x[:, r] @ R3[r] for r in range(R3.shape[0])], axis=1)


def _reduced_grad_hess(s, w, R3, RR, beta, need_hess=True):
    """Gradient (N,n) and Hessian (N,n,n) of l in reduced coordinates from the row quantities s, w.

    Per row r (u = beta R c): dl/du_r = 2 J_r (s_r - y_r) = 2 w_r, d2l/du_r2 = 2 J_r J_r + 2 (diag w_r - w_r s_r^T
    - s_r w_r^T), with J_r = diag s_r - s_r s_r^T and w_r = s_r * (e_r - <e_r, s_r>), e_r = s_r - y_r.
    Expanding J_r^2 = diag(s_r^2) - s_r^2 s_r^T - s_r (s_r^2)^T + |s_r|^2 s_r s_r^T, the Hessian is one GEMM of
    the diagonal parts s^2 + w against RR plus rank-two row terms: with Rs_r = R_r^T s_r and
    U_r = R_r^T (s_r^2 + w_r - |s_r|^2 s_r / 2),  H / (2 beta^2) = sum_r R_r^T diag(s_r^2 + w_r) R_r
    - sum_r (U_r Rs_r^T + Rs_r U_r^T).
    """
    N, T, _ = s.shape
    n = R3.shape[2]
    R2 = R3.reshape(T * T, n)
    grad = (2.0 * beta) * (w.reshape(N, T * T) @ R2)
    if not need_hess:
        return grad, None, None
    ss = np.sum(s * s, axis=2, keepdims=True)
    s2w = s * s + w
    blocks = np.zeros((T * T, T * n))  # block-diagonal: row r of D maps through R_r
    for r in range(T):
        blocks[r * T : (r + 1) * T, r * n : (r + 1) * n] = R3[r]
    both = np.concatenate([s.reshape(N, T * T), (s2w - 0.5 * ss * s).reshape(N, T * T)]) @ blocks
    Rs = both[:N].reshape(N, T, n)
    U = both[N:].reshape(N, T, n)
    X = np.matmul(U.transpose(0, 2, 1), Rs)
    H = (2.0 * beta**2) * ((s2w.reshape(N, T * T) @ RR).reshape(N, n, n) - X - X.transpose(0, 2, 1))
    return grad, H, None


class _GeneralKernel:
    """Softmax square loss in reduced coordinates for any T; labels are the (N,T,T) matrices y."""

    def __init__(self, tokens: int, beta: float):
        self.T = int(tokens)
        self.beta = float(beta)
        self.R3, self.RR = _reduced_design(self.T)
        self.n = self.R3.shape[2]
        self.R2 = self.R3.reshape(self.T * self.T, self.n)
        self.R2T = np.ascontiguousarray(self.R2.T)
        self.pooled = self.T == 3  # extra_starts is not empty: the prox runs a start pool (T = 3 only)

    def labels(self, y: np.ndarray) -> np.ndarray:
        return y

    def extra_starts(self, b: np.ndarray) -> list[np.ndarray]:
        """Newton starts besides z and the interpolating point, for the nodes where the prox is not certified
        convex (the T >= 3 analogue of :meth:`_TwoTokenKernel.extra_starts`): at T = 3 c = 0, uniform
        attention; none from T = 4 on.

        With z and the interpolating point alone, both ended in the same non-global basin at 9 of 4 x 2^12 QMC
        nodes at T = 3, beta = beta0 = 2, (q, m, Sigma) = (1.3, 1.2, 1.6) (objective up to 0.38 too high); the
        pool with c = 0 leaves 1, for ~1.1-1.3x per state-evolution point. Adding, per row r, the least-squares
        point with row r uniform and the other rows at z's logits found every minimum there but made a
        state-evolution point ~2.3-2.5x slower. At T = 5 c = 0 found none of the 3 misses of 3 x 2^10 nodes
        (objective <= 0.04 too high) and cost 1.3-1.45x (docs/theory/channel.md, "Missed global minima")."""
        return [np.zeros_like(b)] if self.pooled else []

    def negative_curvature_bound(self, lab: np.ndarray) -> np.ndarray:
        """(N,) bound L with lambda_min(H(c)) >= -L for all c: the residual part of each row's Hessian has
        norm <= 6 range(e_r) <= 6 (1 + range y_r), and |R|^2 <= |P|^2 = 2, so L = 12 beta^2 max_r(1 + range y_r)."""
        yr = 1.0 + (lab.max(axis=2) - lab.min(axis=2)).max(axis=1)
        return 12.0 * self.beta**2 * yr

    def sublevel_curvature_bound(self, b: np.ndarray, lab: np.ndarray, sigma: float, f0: np.ndarray) -> np.ndarray:
        """No sharper bound on the sublevel set {f <= f0} for T >= 3: inf (certifies no node; it is only asked
        where :meth:`negative_curvature_bound` already failed, so recomputing that would certify none either)."""
        return np.full(b.shape[0], np.inf)

    def _u(self, c):
        return (self.beta * (c @ self.R2T)).reshape(-1, self.T, self.T)

    def loss(self, c, lab):
        return _loss_parts(self._u(c), lab)[2]

    def derivs(self, c, lab):
        s, w, loss = _loss_parts(self._u(c), lab)
        g, H, _ = _reduced_grad_hess(s, w, self.R3, self.RR, self.beta)
        return loss, g, H

    def cross(self, c, a, beta0):
        """C (N,n,n) = sum_r (J_r R_r)^T (J0_r R_r): d(grad l)/da = -2 beta beta0 C (label y0 = softmax(beta0 R a))."""
        N, T, n = c.shape[0], self.T, self.n
        s = _softmax_rows(self._u(c))
        y0 = _softmax_rows((beta0 * (a @ self.R2T)).reshape(N, T, T))
        JR = s[..., None] * (self.R3[None] - _rowmat(s, self.R3)[:, :, None, :])
        J0R = y0[..., None] * (self.R3[None] - _rowmat(y0, self.R3)[:, :, None, :])
        return np.matmul(JR.reshape(N, T * T, n).transpose(0, 2, 1), J0R.reshape(N, T * T, n))


class _TwoTokenKernel:
    """T = 2 closed form. Row r's softmax is (1 - p_r, p_r), p_r = sigmoid(v_r), v = beta K c (K: 2 x 2).

    ||y_r - s_r||^2 = 2 (p_r - t_r)^2 + 2 delta_r^2 with t_r = (y_r2 - y_r1 + 1)/2, delta_r = (y_r1 + y_r2 - 1)/2,
    so labels are (t_1, t_2, const = 2 sum_r delta_r^2).
    """

    def __init__(self, beta: float):
        self.T, self.n = 2, 2
        self.beta = float(beta)
        R3, _ = _reduced_design(2)
        self.Kmat = np.ascontiguousarray(R3[:, 1, :] - R3[:, 0, :])  # (2 rows, 2 coords)
        k = self.Kmat
        # outer products k_r k_r^T flattened (rows r) -> entries (00, 01, 11)
        self.kk = np.stack([k[:, 0] * k[:, 0], k[:, 0] * k[:, 1], k[:, 1] * k[:, 1]], axis=1)  # (2, 3)
        self._kk_norm = float(np.linalg.eigvalsh(k.T @ k).max())
        self._Kinv = np.linalg.inv(k)  # row logits v = beta K c  ->  c = K^-1 v / beta
        self.pooled = True  # extra_starts is not empty: the prox runs a start pool

    def extra_starts(self, b: np.ndarray) -> list[np.ndarray]:
        """Newton starts besides z and the interpolating point, for the nodes where the prox is not certified
        convex: the points whose row logits v = beta K c are (0, 0), (v_z1, 0) and (0, v_z2), v_z = beta K z.

        Each row's loss 2 (sigmoid(v_r) - t_r)^2 is a well at logit(t_r) between two plateaus, steepest near
        v_r = 0, so a minimum of the prox objective has each row near z's logit (the penalty wins), in the
        well, or at the edge of the well near v_r = 0 where the slope of the loss balances the penalty. The two
        classic starts cover (z, z) and (well, well); Newton from either can step over an edge minimum (its
        quadratic model jumps to the other side), and the minima with a row at its edge were the global ones
        at ~10 % of the uncertified nodes at beta = 2 (docs/theory/channel.md, "Missed global minima")."""
        vb = self.beta * (b @ self.Kmat.T)
        zero = np.zeros_like(vb)
        out = []
        for v in (zero, np.stack([vb[:, 0], zero[:, 1]], axis=1), np.stack([zero[:, 0], vb[:, 1]], axis=1)):
            out.append((v @ self._Kinv.T) / self.beta)
        return out

    def labels(self, y: np.ndarray) -> np.ndarray:
        t = 0.5 * (y[:, :, 1] - y[:, :, 0] + 1.0)
        delta = 0.5 * (y[:, :, 0] + y[:, :, 1] - 1.0)
        return np.concatenate([t, 2.0 * np.sum(delta * delta, axis=1, keepdims=True)], axis=1)

    def negative_curvature_bound(self, lab: np.ndarray) -> np.ndarray:
        """(N,) bound L with lambda_min(H(c)) >= -L for all c. l_r'' = 4pq(pq + (p - t)(1 - 2p)) >=
        -4 max_p[pq|1-2p|] max(|t|, |1-t|) = -(2/(3 sqrt 3)) max(|t|,|1-t|); H = beta^2 sum_r l_r'' k_r k_r^T."""
        t = lab[:, :2]
        worst = np.maximum(np.abs(t), np.abs(1.0 - t)).max(axis=1)
        return (2.0 / (3.0 * math.sqrt(3.0))) * 1.0000001 * worst * self.beta**2 * self._kk_norm

    def sublevel_curvature_bound(self, b: np.ndarray, lab: np.ndarray, sigma: float, f0: np.ndarray) -> np.ndarray:
        """(N,) bound L with lambda_min(H(c)) >= -L on the sublevel set {f <= f0} of the prox objective
        f(c) = |c - b|^2/(2 sigma) + l(c), where every minimiser of f lies once f0 is the value of any point.

        l - const = 2 sum_r (p_r - t_r)^2 >= 0, so {f <= f0} lies in the ball |c - b| <= rho, rho^2 =
        2 sigma (f0 - const), on which row r's logit v_r = beta k_r.c ranges over an interval and p_r over
        [p_lo, p_hi]. There l_r'' = 4 (pq)^2 + 4 pq w, w = (p - t)(1 - 2p), is >= 4 min(pq)^2 + 4 max(pq)
        min(min w, 0) (pq concave with its peak at 1/2, w concave: both minimal at an end), and H = beta^2
        sum_r l_r'' k_r k_r^T. Where sigma L < 1, f is strictly convex on a convex set holding every minimiser:
        a stationary point there is the global minimiser (the second Newton start is not needed). pq w is also
        >= -max(pq |1 - 2p|) max|p - t| on the interval; the larger of the two lower bounds is used, so the
        result never exceeds :meth:`negative_curvature_bound` (the same bound over all of (0, 1))."""
        rho = np.sqrt(np.maximum(2.0 * sigma * (f0 - lab[:, 2]), 0.0))
        k = self.Kmat
        centre = self.beta * (b @ k.T)  # (N, 2)
        half = (self.beta * np.sqrt(np.sum(k * k, axis=1)))[None, :] * rho[:, None]
        p_lo, p_hi = expit(centre - half), expit(centre + half)
        pq_lo, pq_hi = p_lo * (1.0 - p_lo), p_hi * (1.0 - p_hi)
        pq_max = np.where((p_lo <= 0.5) & (p_hi >= 0.5), 0.25, np.maximum(pq_lo, pq_hi))
        pq_min = np.minimum(pq_lo, pq_hi)
        t = lab[:, :2]
        w_min = np.minimum((p_lo - t) * (1.0 - 2.0 * p_lo), (p_hi - t) * (1.0 - 2.0 * p_hi))
        # and pq w >= -max(pq |1 - 2p|) max|p - t|: pq|1 - 2p| peaks at 1/2 -+ 1/(2 sqrt 3) (value 1/(6 sqrt 3))
        h = lambda p: p * (1.0 - p) * np.abs(1.0 - 2.0 * p)  # noqa: E731
        h_max = np.maximum(h(p_lo), h(p_hi))
        for peak in (0.5 - 0.5 / math.sqrt(3.0), 0.5 + 0.5 / math.sqrt(3.0)):
            h_max = np.where((p_lo <= peak) & (p_hi >= peak), 1.0 / (6.0 * math.sqrt(3.0)), h_max)
        dev_max = np.maximum(np.abs(p_lo - t), np.abs(p_hi - t))
        low = np.maximum(pq_max * np.minimum(w_min, 0.0), -h_max * dev_max)  # two lower bounds of pq w
        neg = np.maximum(-4.0 * (pq_min * pq_min + low), 0.0)  # >= -l_r''
        m = neg @ self.kk  # sum_r neg_r k_r k_r^T as (00, 01, 11)
        top = 0.5 * (m[:, 0] + m[:, 2]) + np.hypot(0.5 * (m[:, 0] - m[:, 2]), m[:, 1])
        return 1.0000001 * self.beta**2 * top

    def _p(self, c):
        return expit(self.beta * (c @ self.Kmat.T))

    def loss(self, c, lab):
        d = self._p(c) - lab[:, :2]
        return 2.0 * (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + lab[:, 2]

    def _hess_from(self, coef):
        h = coef @ self.kk  # (N,3)
        H = np.empty((coef.shape[0], 2, 2))
        H[:, 0, 0], H[:, 0, 1], H[:, 1, 0], H[:, 1, 1] = h[:, 0], h[:, 1], h[:, 1], h[:, 2]
        return H

    def derivs(self, c, lab):
        p = self._p(c)
        d = p - lab[:, :2]
        pq = p * (1.0 - p)
        loss = 2.0 * (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + lab[:, 2]
        l1 = 4.0 * d * pq
        l2 = 4.0 * pq * (pq + d * (1.0 - 2.0 * p))
        grad = self.beta * (l1 @ self.Kmat)
        return loss, grad, self._hess_from(self.beta**2 * l2)

    def cross(self, c, a, beta0):
        p = self._p(c)
        t0 = expit(beta0 * (a @ self.Kmat.T))
        return self._hess_from(2.0 * p * (1.0 - p) * t0 * (1.0 - t0))


def _kernel(tokens: int, beta: float):
    return _TwoTokenKernel(beta) if int(tokens) == 2 else _GeneralKernel(tokens, beta)


def softmax_loss(h, y, beta: float, tokens: int):
    """Softmax square loss l(h; y) = ||y - softmax_row(beta D(h))||_F^2, batched, in full coordinates.

    Parameters
    ----------
    h : (N, K) logits, K = T(T+1)/2, ``np.triu_indices(T)`` order.
    y : (N, T, T) labels (any real matrices).

    Returns
    -------
    loss (N,), grad (N, K), hess (N, K, K).
    """
    T = int(tokens)
    h = np.atleast_2d(np.asarray(h, dtype=float))
    y = np.asarray(y, dtype=float).reshape(-1, T, T)
    P = logit_design(T)
    N, K = h.shape
    u = (beta * (h @ P.T)).reshape(N, T, T)
    s, w, loss = _loss_parts(u, y)
    P3 = P.reshape(T, T, K)
    RR = (P[:, :, None] * P[:, None, :]).reshape(T * T, K * K)
    grad, H, _ = _reduced_grad_hess(s, w, P3, RR, beta)
    return loss, grad, H


# --------------------------------------------------------------------------------------------------
# Prox: damped Newton in reduced coordinates
# --------------------------------------------------------------------------------------------------
def _sym_eig(A: np.ndarray):
    """Eigen-decomposition of a batch of symmetric matrices; closed form for 1x1 and 2x2."""
    n = A.shape[-1]
    if n == 1:
        return A[:, :, 0].copy(), np.ones_like(A)
    if n == 2:
        a, b, d = A[:, 0, 0], A[:, 0, 1], A[:, 1, 1]
        half_tr = 0.5 * (a + d)
        rad = np.hypot(0.5 * (a - d), b)
        lam = np.stack([half_tr - rad, half_tr + rad], axis=1)
        # rotation angle: tan(2 phi) = 2b / (a - d)
        phi = 0.5 * np.arctan2(2.0 * b, a - d)
        c, s = np.cos(phi), np.sin(phi)
        # columns: eigenvector of the larger eigenvalue is (c, s)
        V = np.empty_like(A)
        V[:, 0, 0], V[:, 1, 0] = -s, c
        V[:, 0, 1], V[:, 1, 1] = c, s
        return lam, V
    return np.linalg.eigh(A)


def _solve_sym(A: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Batched solve A X = rhs for (N,n,n) symmetric A, rhs (N,n,m); closed form for n <= 2."""
    n = A.shape[-1]
    if n == 1:
        return rhs / A
    if n == 2:
        a, b, d = A[:, 0, 0], A[:, 0, 1], A[:, 1, 1]
        det = a * d - b * b
        x0 = (d[:, None] * rhs[:, 0] - b[:, None] * rhs[:, 1]) / det[:, None]
        x1 = (a[:, None] * rhs[:, 1] - b[:, None] * rhs[:, 0]) / det[:, None]
        return np.stack([x0, x1], axis=1)
    # numpy's batched solve raises for the whole batch if one matrix is singular, where the closed forms above give
    # non-finite rows for that matrix alone (T = 4: one node's I + sigma H singular to round-off at a runaway's sigma
    # aborted a Stein-forms evaluation, which needs no solve): the same here, NaN rows
    return _solve_rows(A, rhs)[0]


def _solve_rows(A: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batched solve A X = rhs for (N,n,n) A, rhs (N,n,m), matrix by matrix where needed: (X with NaN rows where the
    matrix's LU meets a zero pivot, (N,) boolean of the rows solved). One batched call unless a matrix fails."""
    try:
        return np.linalg.solve(A, rhs), np.ones(A.shape[0], dtype=bool)
    except np.linalg.LinAlgError:
        ok = _batch_mask(A.shape[0], lambda idx: np.linalg.solve(A[idx], rhs[idx]))
        out = np.full(rhs.shape, np.nan)
        out[ok] = np.linalg.solve(A[ok], rhs[ok])
        return out, ok


def _batch_mask(size: int, op: Callable[[np.ndarray], Any]) -> np.ndarray:
    """(size,) boolean: for which items of a batch ``op(idx)`` (a batched numpy.linalg call on the items ``idx``)
    does not raise LinAlgError.

    numpy's batched Cholesky and solve fail for the whole batch if one matrix fails; bisecting the failing
    batches locates those few matrices at the cost of a few more passes (instead of an eigendecomposition of
    every matrix)."""
    out = np.ones(size, dtype=bool)
    stack = [np.arange(size)]
    while stack:
        idx = stack.pop()
        try:
            op(idx)
        except np.linalg.LinAlgError:
            if idx.size == 1:
                out[idx] = False
            else:
                half = idx.size // 2
                stack += [idx[:half], idx[half:]]
    return out


def _pd_mask(A: np.ndarray) -> np.ndarray:
    """(N,) boolean: which matrices of the batch (N,n,n) are positive definite (Cholesky succeeds)."""
    return _batch_mask(A.shape[0], lambda idx: np.linalg.cholesky(A[idx]))


def _modified_newton_step(A: np.ndarray, gf: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """d = -|A|^-1 gf with eigenvalues of A replaced by max(|lam|, floor); plain solve where A is PD."""
    n = A.shape[-1]
    if n == 2:
        a, b, c = A[:, 0, 0], A[:, 0, 1], A[:, 1, 1]
        det = a * c - b * b
        pd = (a > floor) & (c > floor) & (det > floor * np.maximum(a, c))
        d = np.empty_like(gf)
        d[:, 0] = -(c * gf[:, 0] - b * gf[:, 1]) / np.where(pd, det, 1.0)
        d[:, 1] = -(a * gf[:, 1] - b * gf[:, 0]) / np.where(pd, det, 1.0)
        if pd.all():
            return d
        bad = ~pd
    else:
        pd = _pd_mask(A)
        d = np.empty_like(gf)
        if pd.any():
            # Cholesky can pass a matrix whose LU meets an exact zero pivot (an eigenvalue ~1e-17 of the loss's
            # Hessian where 1/sigma ~ 1e-45: T = 4, a root finder's trial point far out, docs): those take the
            # eigenvalue route below, with the floor
            ipd = np.flatnonzero(pd)
            x, ok = _solve_rows(A[ipd], gf[ipd][..., None])
            pd[ipd[~ok]] = False
            d[pd] = -x[ok][..., 0]
        if pd.all():
            return d
        bad = ~pd
    lam, V = _sym_eig(A[bad])
    lam_mod = np.maximum(np.abs(lam), floor[bad, None])
    d[bad] = -np.einsum("nij,nj->ni", V, np.einsum("nji,nj->ni", V, gf[bad]) / lam_mod)
    return d


@dataclass
class _ReducedProx:
    c: np.ndarray  # (N,n) minimiser in reduced coordinates
    f: np.ndarray  # (N,) prox objective at c
    loss: np.ndarray  # (N,)
    grad: np.ndarray  # (N,n) gradient of l at c
    hess: np.ndarray  # (N,n,n) Hessian of l at c
    residual: np.ndarray  # (N,) scaled gradient norm of the prox objective
    iterations: int
    start_index: np.ndarray  # (N,) which start won


def _rowdot(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise dot product of (N,n) arrays (explicit for n = 2: reductions over tiny axes are slow)."""
    if u.shape[1] == 2:
        return u[:, 0] * v[:, 0] + u[:, 1] * v[:, 1]
    return np.einsum("ni,ni->n", u, v)


def _scaled_residual(dc, gl, sig):
    """|c - b + sigma grad l| / (1 + |c - b| + sigma |grad l|): dimensionless stationarity residual."""
    gf = dc / sig[:, None] + gl
    nrm = lambda v: np.sqrt(_rowdot(v, v))  # noqa: E731
    return nrm(gf) * sig / (1.0 + nrm(dc) + sig * nrm(gl)), gf


def _newton_reduced(kern, b, lab, sig, c0, tol, max_iter, keep_derivs=False):
    """Minimise f(c) = |c-b|^2/(2 sigma) + l(c) from c0 by modified Newton + Armijo backtracking.

    Modified Newton: the eigenvalues lam of the prox Hessian A = I/sigma + H are replaced by
    max(|lam|, 1e-8/sigma) (absolute-value / saddle-free modification), so the step is a descent
    direction even where f is nonconvex; Armijo backtracking guarantees decrease. Points whose residual
    is <= tol are frozen (removed from the active set). Returns c, the number of iterations and, when
    ``keep_derivs``, the loss, gradient, Hessian and residual at the returned c (from the pass that froze
    each point; None otherwise).
    """
    N, n = b.shape
    c = c0.copy()
    active = np.arange(N)
    it_done = 0
    eye = np.eye(n)[None]
    out = None
    if keep_derivs:
        out = (np.empty(N), np.empty((N, n)), np.empty((N, n, n)), np.empty(N))

    def store(where, sel, loss, gl, Hl, res):
        if out is not None:
            for arr, v in zip(out, (loss, gl, Hl, res), strict=True):
                arr[where] = v[sel]

    def fval(cc, bb, ll, ss):
        dc = cc - bb
        return _rowdot(dc, dc) / (2.0 * ss) + kern.loss(cc, ll)

    for it in range(max_iter + 1):
        if active.size == 0:
            break
        # (no copies while every node is still active / kept: active is then arange(N), keep all True)
        whole = active.size == N
        cc, bb, ll, ss = (c, b, lab, sig) if whole else (c[active], b[active], lab[active], sig[active])
        loss, gl, Hl = kern.derivs(cc, ll)
        dc = cc - bb
        res, gf = _scaled_residual(dc, gl, ss)
        keep = res > tol
        if it == max_iter or not keep.any():
            store(active, slice(None), loss, gl, Hl, res)
            break
        it_done = it + 1
        if keep.all():
            idx = active
            loss_k, gl_k, Hl_k, res_k, dk = loss, gl, Hl, res, dc
        else:
            store(active[~keep], ~keep, loss, gl, Hl, res)
            idx = active[keep]
            loss_k, gl_k, Hl_k, res_k = loss[keep], gl[keep], Hl[keep], res[keep]
            cc, bb, ll, ss, gf, Hl = cc[keep], bb[keep], ll[keep], ss[keep], gf[keep], Hl[keep]
            dk = dc[keep]
        f0 = _rowdot(dk, dk) / (2.0 * ss) + loss_k
        d = _modified_newton_step(Hl + eye / ss[:, None, None], gf, 1e-8 / ss)
        slope = _rowdot(gf, d)  # < 0
        t = np.ones(idx.size)
        # in the quadratic regime the decrease is below round-off: take the full step
        pending = -slope > 1e-13 * (1.0 + np.abs(f0))
        cnew = cc + d
        passes = 60
        if pending.all():  # the full step for every node first, without index copies (t = 1: ctry = cnew)
            ok = fval(cnew, bb, ll, ss) <= f0 + 1e-4 * t * slope
            pending = ~ok
            t[pending] *= 0.5
            passes = 59
        for _ in range(passes):
            if not pending.any():
                break
            p = np.flatnonzero(pending)
            ctry = cc[p] + t[p, None] * d[p]
            ok = fval(ctry, bb[p], ll[p], ss[p]) <= f0[p] + 1e-4 * t[p] * slope[p]
            cnew[p[ok]] = ctry[ok]
            pending[p[ok]] = False
            t[p[~ok]] *= 0.5
        cnew[pending] = cc[pending]  # no acceptable step: stay (the final residual flags it)
        # frozen: no acceptable step, or (checked from pass 8 on, when the ordinary nodes are done) a step below
        # the precision of c (c + d == c: a node at the round-off floor of its residual, e.g. |c| ~ 1e3 with
        # sigma ~ 1e4). Either way every further pass would repeat this one exactly, so dropping the node now
        # returns the same c and derivatives in fewer passes.
        frozen = pending if it < 8 else pending | np.all(cnew == cc, axis=1)
        store(idx[frozen], frozen, loss_k, gl_k, Hl_k, res_k)
        c[idx] = cnew
        active = idx[~frozen]
    return c, it_done, out


def _residual_floor(r: _ReducedProx, b: np.ndarray, sigma: float, tol: float) -> np.ndarray:
    """(N,) the scaled residual a converged prox can be asked for: max(tol, 1e-9, round-off floor). c is known
    to eps |c|, so the gradient of the prox objective to eps |c| ||A||, A = H + I/sigma; scaled as in
    :func:`_scaled_residual` that is eps |c| ||sigma H + I|| / (1 + |c - b| + sigma |grad l|) (large at far tail
    nodes: |c| ~ 2e3, sigma ~ 1.6e4 gives ~4e-9, an Anderson excursion of the lambda = 1e-4 curve at alpha = 0.5)."""
    n = r.c.shape[1]
    nrm = lambda v: np.sqrt(_rowdot(v, v))  # noqa: E731
    A = sigma * r.hess + np.eye(n)[None]
    a_norm = np.sqrt(np.sum(A * A, axis=(1, 2)))
    floor = np.finfo(float).eps * np.max(np.abs(r.c), axis=1) * a_norm / (1.0 + nrm(r.c - b) + sigma * nrm(r.grad))
    return np.maximum(floor, max(tol, 1e-9))


_POOL_STEPS = 3  # Newton steps from each start of the T = 2 pool before the lowest is continued (SoftmaxChannel)


def _prox_reduced(kern, b, lab, sig, starts, tol, max_iter) -> _ReducedProx:
    """Run Newton from each start, keep the lowest prox objective per point (the global minimiser when one of
    the starts lies in its basin)."""
    best = None
    total_it = 0
    for k, c0 in enumerate(starts):
        c, it, der = _newton_reduced(kern, b, lab, sig, c0, tol, max_iter, keep_derivs=kern.n > 2)
        total_it = max(total_it, it)
        dc = c - b
        if der is not None:  # T >= 3: the derivatives at the returned points, from the Newton passes
            loss, gl, Hl, res = der
        else:
            loss, gl, Hl = kern.derivs(c, lab)
            res, _ = _scaled_residual(dc, gl, sig)
        f = _rowdot(dc, dc) / (2.0 * sig) + loss
        r = _ReducedProx(c, f, loss, gl, Hl, res, it, np.full(c.shape[0], k))
        if best is None:
            best = r
            continue
        _keep_lower(best, np.arange(b.shape[0]), r)
    best.iterations = total_it
    return best


def _pool_prox(kern, b, lab, sig, first, extra, tol, max_iter) -> _ReducedProx:
    """The T = 2 start pool (SoftmaxChannel.moments and prox_softmax): Newton from ``first`` (the interpolating
    point, or a warm start) and from each of ``extra`` (:meth:`_TwoTokenKernel.extra_starts` of b) for
    _POOL_STEPS steps, then continued to convergence from the lowest prox objective (ties: the first).
    start_index is 1 + the index of the kept start in [first] + extra (docs/theory/channel.md, "Missed global
    minima")."""
    n = b.shape[1]
    cs = np.stack([_newton_reduced(kern, b, lab, sig, c0, tol, _POOL_STEPS)[0] for c0 in [first] + extra], axis=1)
    d = cs - b[:, None]
    fs = np.sum(d * d, axis=2) / (2.0 * sig[:, None])
    fs += kern.loss(cs.reshape(-1, n), np.repeat(lab, cs.shape[1], axis=0)).reshape(fs.shape)
    pick = np.argmin(fs, axis=1)
    o = _prox_reduced(kern, b, lab, sig, [cs[np.arange(b.shape[0]), pick]], tol, max_iter)
    o.start_index = 1 + pick
    o.iterations += _POOL_STEPS
    return o


def _prox_certified_pool(kern, b, lab, sig, first, tol, max_iter) -> _ReducedProx:
    """prox_softmax at T = 2 (default starts): Newton from z everywhere; where convexity is not certified (the
    global and the sublevel-set curvature bounds of SoftmaxChannel.moments), also the start pool of
    :func:`_pool_prox` with ``first`` (the least-squares logits of y) as its interpolating point; the lower prox
    objective is kept. Where the certificate holds the prox objective is strictly convex on a set holding every
    minimiser, so z's stationary point is the global minimiser."""
    r = _prox_reduced(kern, b, lab, sig, [b], tol, max_iter)
    sub, _ = _uncertified(kern, b, lab, sig, r.f, kern.negative_curvature_bound(lab))
    if sub.size:
        _keep_lower(r, sub, _pool_prox(kern, b[sub], lab[sub], sig[sub], first[sub], kern.extra_starts(b[sub]), tol,
                                       max_iter))
    return r


def _uncertified(kern, b, lab, sig, f0, curvature) -> tuple[np.ndarray, np.ndarray]:
    """The convexity certificate of the prox objective f (SoftmaxChannel.moments and prox_softmax): node i is
    certified where sig_i L_i < 1 for a bound L_i >= -lambda_min(H) of the loss's Hessian, first the global one
    (``curvature``, :meth:`negative_curvature_bound`), then, where that fails, the bound on the sublevel set
    {f <= f0_i} (f0: the objective of the first start's minimiser), which holds every minimiser. A stationary point
    of a certified node is its global minimiser. Returns the indices of the uncertified nodes and of those
    certified by the sublevel bound only."""
    sub = np.flatnonzero(sig * curvature >= 1.0)
    if not sub.size:
        return sub, sub
    tight = sig[sub] * kern.sublevel_curvature_bound(b[sub], lab[sub], sig[sub], f0[sub]) < 1.0
    return sub[~tight], sub[tight]


def _put(o: _ReducedProx, pos: np.ndarray, r: _ReducedProx, start_index) -> None:
    """Write the proxes ``r`` (computed on the nodes ``pos`` of ``o``) into ``o`` in place, with ``start_index``."""
    for name in ("c", "f", "loss", "grad", "hess", "residual"):
        getattr(o, name)[pos] = getattr(r, name)
    o.start_index[pos] = start_index
    o.iterations = max(o.iterations, r.iterations)


def _keep_lower(r: _ReducedProx, sub: np.ndarray, o: _ReducedProx) -> None:
    """Take ``o``'s minimiser (computed on the nodes ``sub`` of ``r``) into ``r`` in place wherever its prox objective
    is lower beyond round-off: the lowest of the starts is kept."""
    better = o.f < r.f[sub] - 1e-14 * (1.0 + np.abs(r.f[sub]))
    idx = sub[better]
    for name in ("c", "f", "loss", "grad", "hess", "residual", "start_index"):
        getattr(r, name)[idx] = getattr(o, name)[better]
    r.iterations = max(r.iterations, o.iterations)


@dataclass
class ProxResult:
    """Batched prox of the softmax square loss.

    h : (N, K) minimiser; g = (h - z)/sigma : (N, K); jac_z : (N, K, K) = dh*/dz = (I + sigma H)^-1 on
    e-perp and 1 along e; loss : (N,) l(h*; y); objective : (N,) prox objective (Moreau envelope);
    residual : max scaled gradient norm of the prox objective; iterations : max Newton iterations;
    converged : all residuals <= tol; start_index : (N,) which start gave the kept minimiser
    (0 = z, 1.. = the extra starts).
    """

    h: np.ndarray
    g: np.ndarray
    jac_z: np.ndarray
    loss: np.ndarray
    objective: np.ndarray
    residual: float
    iterations: int
    converged: bool
    start_index: np.ndarray = field(repr=False)
    residuals: np.ndarray = field(repr=False)


@cache
def _logit_fit_matrix(tokens: int, beta: float) -> np.ndarray:
    """Least-squares map from row-log-labels log y (T*T,) to reduced logits c with softmax(beta R c) ~ y."""
    T = int(tokens)
    R3, _ = _reduced_design(T)
    R2 = R3.reshape(T * T, -1)
    # unknowns: c (n) and one constant per row (T): beta R c + C k = log y
    C = np.zeros((T * T, T))
    for r in range(T):
        C[r * T : (r + 1) * T, r] = 1.0
    M = np.hstack([beta * R2, C])
    pinv = np.linalg.pinv(M)[: R2.shape[1]]
    pinv.setflags(write=False)
    return pinv


def prox_softmax(z, y, sigma, beta: float, tokens: int, init=None, tol: float = 1e-12, max_iter: int = 100):
    """Batched prox h* = argmin_h |h - z|^2/(2 sigma) + ||y - softmax_row(beta D(h))||_F^2.

    Parameters
    ----------
    z : (N, K) or (K,) centres; y : (N, T, T) labels (any real matrices; noisy labels allowed);
    sigma : scalar or (N,) > 0.
    init : extra starting point(s): None (default: the least-squares logits of log y, i.e. the point
        whose softmax matches y best -- the interpolating point when y is a softmax), an (N, K) array,
        or a list of such arrays. z itself is always a start; the lowest prox objective is kept, so the
        result is the global minimiser whenever one of the starts lies in its basin. With the default at
        T = 2 and 3, the starts besides z run only where convexity is not certified, as the start pool of
        :meth:`SoftmaxChannel.moments` (the least-squares logits and the kernel's fixed points -- T = 2: three,
        T = 3: c = 0 -- a few Newton steps each, continued from the lowest; start_index 1 + the start's index);
        with ``init`` given (or T >= 4) z and the given starts each run to convergence (a caller following one
        branch keeps it).
    tol : stopping tolerance on the scaled gradient norm
        |h - z + sigma grad l| / (1 + |h - z| + sigma |grad l|).

    Returns
    -------
    :class:`ProxResult`. Raises ``FloatingPointError`` on non-finite results; emits a
    :class:`~tiedattention.errors.ConvergenceWarning` if some residual stays above ``max(tol, 1e-9)``.
    """
    T = int(tokens)
    P = logit_design(T)
    K = P.shape[1]
    z = np.atleast_2d(np.asarray(z, dtype=float))
    N = z.shape[0]
    if z.shape[1] != K:
        raise ParameterError("z", f"must have K = T(T+1)/2 = {K} columns (got {z.shape[1]})")
    y = np.asarray(y, dtype=float).reshape(N, T, T)
    sig = np.broadcast_to(np.asarray(sigma, dtype=float), (N,)).copy()
    if np.any(~np.isfinite(sig)) or np.any(sig <= 0):
        raise ParameterError("sigma", "must be finite and > 0")
    B = reduced_basis(T)
    e = invariant_direction(T)
    kern = _kernel(T, float(beta))
    b = z @ B
    ze = z @ e
    lab = kern.labels(y)
    starts = [b]
    if init is None:
        logy = np.log(np.clip(y, 1e-12, None)).reshape(N, T * T)
        starts.append(logy @ _logit_fit_matrix(T, float(beta)).T)
    else:
        inits = [init] if isinstance(init, np.ndarray) and init.ndim <= 2 else list(init)
        for h0 in inits:
            starts.append(np.atleast_2d(np.asarray(h0, dtype=float)).reshape(N, K) @ B)
    if init is None and kern.pooled:  # T = 2, 3: the channel's start pool
        r = _prox_certified_pool(kern, b, lab, sig, starts[1], tol, max_iter)
    else:
        r = _prox_reduced(kern, b, lab, sig, starts, tol, max_iter)
    if not np.all(np.isfinite(r.c)):
        raise FloatingPointError("prox_softmax: non-finite minimiser")
    h = r.c @ B.T + ze[:, None] * e[None]
    g = (h - z) / sig[:, None]
    n = B.shape[1]
    A = np.eye(n)[None] + sig[:, None, None] * r.hess
    with np.errstate(divide="ignore", invalid="ignore"):  # (a singular I + sigma H: non-finite rows, raised below)
        Ainv = _solve_sym(A, np.broadcast_to(np.eye(n), (N, n, n)).copy())
    if not np.all(np.isfinite(Ainv)):
        raise FloatingPointError("prox_softmax: I + sigma H is singular at some minimiser (non-finite Jacobian)")
    jac = np.einsum("ki,nij,lj->nkl", B, Ainv, B) + np.outer(e, e)[None]
    res = float(np.max(r.residual)) if N else 0.0
    if res > max(tol, 1e-9):
        warnings.warn(f"prox_softmax: max scaled residual {res:.2e} > tol", ConvergenceWarning, stacklevel=2)
    return ProxResult(
        h=h,
        g=g,
        jac_z=jac,
        loss=r.loss,
        objective=r.f,
        residual=res,
        iterations=r.iterations,
        converged=res <= tol,
        start_index=r.start_index,
        residuals=r.residual,
    )


# --------------------------------------------------------------------------------------------------
# Quadrature rules over i.i.d. standard normals
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Panel:
    x: np.ndarray  # (M, dim) standard-normal nodes
    w: np.ndarray  # (M,) weights, sum 1


def _fold(x: np.ndarray, w: np.ndarray, groups: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, np.ndarray]:
    """Fold a rule symmetric under negating each coordinate group (jointly) onto one representative per orbit.

    A node is kept iff each group's sub-vector is lexicographically >= 0 (first nonzero entry > 0); its weight
    is multiplied by the orbit size 2^(number of nonzero groups). Exact for integrands invariant under the
    group; deterministic.
    """
    keep = np.ones(x.shape[0], dtype=bool)
    mult = np.ones(x.shape[0])
    for grp in groups:
        sub = x[:, list(grp)]
        nz = sub != 0
        first = np.argmax(nz, axis=1)
        lead = sub[np.arange(sub.shape[0]), first]
        keep &= lead >= 0  # all-zero sub-vectors have lead 0 and are kept once
        mult *= np.where(nz.any(axis=1), 2.0, 1.0)
    return x[keep], w[keep] * mult[keep]


def _channel_groups(dim: int, n: int, student: bool) -> tuple[tuple[int, ...], ...]:
    """T = 2 symmetry groups of the channel integrand in the coordinates (a, eta[, noise]) of the reduced
    basis: negating coordinate 1 of a and of eta is the token swap, negating coordinate 2 of both is swap
    composed with the global sign flip (zeta, z) -> (-zeta, -z) (sigmoid(-v) = 1 - sigmoid(v))."""
    if n != 2 or dim != (2 * n if student else n):
        return ()
    return ((0, 2), (1, 3)) if student else ((0,), (1,))


MAX_GH_ORDER = 64  # the largest Gauss-Hermite order per dimension (T = 2: 64^4 = 1.7e7 nodes)


@lru_cache(maxsize=32)
def _gh_panel(dim: int, order: int, prune: float, groups: tuple = ()) -> _Panel:
    """Tensor Gauss-Hermite (probabilists') rule in ``dim`` dimensions, nodes with weight < prune dropped,
    folded by the coordinate-reflection groups ``groups`` (see :func:`_fold`)."""
    from numpy.polynomial.hermite_e import hermegauss

    x1, w1 = hermegauss(order)
    w1 = w1 / w1.sum()
    grids = np.meshgrid(*([np.arange(order)] * dim), indexing="ij")
    idx = np.stack([g.ravel() for g in grids], axis=1)
    w = np.prod(w1[idx], axis=1)
    keep = w >= prune * w.max()
    x, w = x1[idx[keep]], w[keep]
    w = w / w.sum()  # renormalise the dropped mass (<= ~1e-13 of the total)
    if groups:
        x, w = _fold(x, w, groups)
    x.setflags(write=False)
    w.setflags(write=False)
    return _Panel(x, w)


@lru_cache(maxsize=32)
def _gh_panel_no_student(dim: int, n: int, order: int, prune: float, groups: tuple = ()) -> _Panel:
    """The tensor GH rule marginalised over the student-noise coordinates x[:, n:2n] (set to 0): exact when
    the integrand does not depend on them (q = m^2/Qz, e.g. q = m = 0), with order^n fewer nodes."""
    low = _gh_panel(dim - n, order, prune, groups)
    x = np.zeros((low.x.shape[0], dim))
    x[:, :n] = low.x[:, :n]
    x[:, 2 * n :] = low.x[:, n:]
    x.setflags(write=False)
    return _Panel(x, low.w)


@lru_cache(maxsize=32)
def _qmc_panels(dim: int, log2n: int, replicas: int, seed: int) -> tuple[_Panel, ...]:
    """``replicas`` independent scrambled Sobol' point sets (2^log2n points each), mapped to N(0, I)."""
    from scipy.stats import qmc

    out = []
    for r in range(replicas):
        sob = qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng([seed, r]))
        u = sob.random_base2(log2n)
        u = np.clip(u, 2.0**-60, 1.0 - 2.0**-53)
        x = ndtri(u)
        w = np.full(x.shape[0], 1.0 / x.shape[0])
        x.setflags(write=False)
        w.setflags(write=False)
        out.append(_Panel(x, w))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Channel
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChannelParams:
    """Everything the channel needs besides (q, m, sigma).

    tokens T, student temperature beta, teacher temperature beta0, logit noise Delta (``noise``), output
    noise Delta_out (``noise_out``), Q0 = (1/d) Tr S0^2 (``q0``).
    """

    tokens: int
    beta: float = 1.0
    beta0: float = 1.0
    noise: float = 0.0
    noise_out: float = 0.0
    q0: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or int(self.tokens) != self.tokens or self.tokens < 2:
            raise ParameterError("tokens", f"must be an integer >= 2 (got {self.tokens!r})")
        object.__setattr__(self, "tokens", int(self.tokens))
        for name in ("beta", "beta0", "q0"):
            v = float(getattr(self, name))
            if not math.isfinite(v) or v <= 0:
                raise ParameterError(name, f"must be finite and > 0 (got {v!r})")
            object.__setattr__(self, name, v)
        for name in ("noise", "noise_out"):
            v = float(getattr(self, name))
            if not math.isfinite(v) or v < 0:
                raise ParameterError(name.replace("_", "-"), f"must be finite and >= 0 (got {v!r})")
            object.__setattr__(self, name, v)

    @classmethod
    def from_problem(cls, problem, q0: float) -> ChannelParams:
        t, s = problem.task, problem.student
        return cls(tokens=t.tokens, beta=s.beta, beta0=t.beta0, noise=t.noise, noise_out=t.noise_out, q0=q0)

    @property
    def n_logits(self) -> int:
        return self.tokens * (self.tokens + 1) // 2

    @property
    def q_zeta(self) -> float:
        """Variance of the noisy teacher logits, Q0 + Delta/2."""
        return self.q0 + self.noise / 2.0


@dataclass(frozen=True)
class ChannelMoments:
    """One channel evaluation. q_hat, m_hat, sigma_hat already include the factor 2 alpha.

    train_error = loss_mean = E l(h*; y) (the same number for seq2lab; both are kept for clarity), envelope
    = E min_h [|h - z|^2/(2 sigma) + l(h; y)]. ``error_estimate`` has the quadrature error estimate of each
    of these keys; ``stein`` holds the integration-by-parts forms of m_hat and sigma_hat (a check).
    """

    q_hat: float
    m_hat: float
    sigma_hat: float
    train_error: float
    loss_mean: float
    envelope: float
    error_estimate: dict
    prox_residual: float
    prox_iterations: int
    stein: dict = field(default_factory=dict)
    # moments(jacobian=True): 2 alpha E||dg/dz||_F^2 (the channel's replicon, theory/stability.py) and its error
    jac_sq: float | None = None
    jac_sq_error: float | None = None
    # share of E||g||^2 that depends on the choice between two distinct local minima of the prox (nodes where
    # start 0 and the best of the other starts converged to different minimisers):
    # E[|  ||g_0||^2 - ||g_1||^2 | ; two minima] / E||g||^2.
    # Zero where the prox is convex; the SE switches T = 2 to a QMC rule when it is large (state_evolution.md)
    branch_share: float = 0.0
    # the largest prox residual over its node's allowance (max(tol, 1e-9, round-off floor)): > 1 where a prox did not
    # converge (the PROX_WARNING condition); 0 where none exceeded tol
    prox_excess: float = 0.0


# the ConvergenceWarning of an evaluation whose proxes did not all converge (StateEvolution.solve keeps it for the
# reported point's own evaluation only: those of the iterates on the way say nothing about the answer)
PROX_WARNING = "SoftmaxChannel.moments: a prox residual above tol and its node's round-off floor"

_KEYS = ("q_hat", "m_hat", "sigma_hat", "train_error", "loss_mean", "envelope", "m_hat_stein", "sigma_hat_stein")


class SoftmaxChannel:
    """The softmax square-loss channel of THEORY.md section 3 with cached quadrature.

    Parameters
    ----------
    params : :class:`ChannelParams`.
    order : Gauss-Hermite order per dimension (tensor rule, used when the integral has <= ``gh_max_dim``
        dimensions: T = 2 without output noise, 4 dims). The error estimate compares with order
        ``order_low`` (default round(0.75 order)).
    qmc_log2 : log2 of the number of scrambled Sobol' points per replica (used otherwise).
    replicas : number of independent scramblings; the estimate is their mean, the error std/sqrt(replicas).
    rule : "auto" | "gh" | "qmc".
    seed : QMC seed (fixed -> deterministic).
    estimate_error : if False, the GH error estimate (a second, lower-order rule) is skipped (faster).
    tol, max_iter : Newton tolerance and iteration cap for the proxes.
    symmetric : fold the T = 2 Gauss-Hermite rule by the token-swap and sign-flip symmetries of the integrand
        (4x fewer nodes, same value up to round-off); False gives the plain tensor rule.
    conjugates : "jacobian" (default here; the state evolution asks for "stein" at T = 2) or "stein": the forms
        of m_hat and sigma_hat returned (with their error estimates). The Jacobian forms integrate d g/d a and
        d g/d b pointwise, so they miss the jumps of g where the prox's global minimiser switches basin
        (docs/theory/state_evolution.md, "The conjugates: Stein forms"); for labels dominated by logit noise
        (Qz >> Q0) d g/d a is a ridge of width ~1/(beta0 sqrt Qz) along the label's switching lines, which no
        fixed rule resolves, and tr H (I + sigma H)^-1 has heavy tails where the nonconvex prox is near a fold
        (I + sigma H nearly singular). The Stein forms E g.(q a - m b)/det and -E g.(Qz b - m a)/det need g alone
        (docs/theory/channel.md, "Large logit noise"). With "stein", ``stein`` holds the Jacobian forms as the
        check (keys ``m_hat_jacobian``, ``sigma_hat_jacobian`` and their ``_err``); where det = Qz q - m^2
        vanishes the Jacobian forms are used.
    """

    def __init__(
        self,
        params: ChannelParams,
        order: int = 16,
        qmc_log2: int = 12,
        replicas: int = 4,
        *,
        rule: str = "auto",
        order_low: int | None = None,
        seed: int = 20250924,
        estimate_error: bool = True,
        gh_max_dim: int = 4,
        prune: float = 1e-11,
        tol: float = 1e-12,
        max_iter: int = 100,
        symmetric: bool = True,
        conjugates: str = "jacobian",
    ):
        # the rule's options are checked before anything is built (order='x' was int()'s ValueError)
        try:
            order = validate_integer("order", order, 2)
        except ParameterError:
            raise ParameterError("order", f"must be an integer between 2 and {MAX_GH_ORDER} (got {order!r:.60}; the "
                                 "Gauss-Hermite rule has order^dim nodes)") from None
        qmc_log2 = validate_integer("qmc_log2", qmc_log2, 1)
        replicas = validate_integer("replicas", replicas, 1)
        order_low = None if order_low is None else validate_integer("order_low", order_low, 2)
        seed = validate_integer("seed", seed, 0)
        gh_max_dim = validate_integer("gh_max_dim", gh_max_dim, 0)
        max_iter = validate_integer("max_iter", max_iter, 1)
        prune = validate_number("prune", prune, 0.0, closed=True)
        tol = validate_number("tol", tol, 0.0, closed=True)
        self.params = params
        T = params.tokens
        self.n = params.n_logits - 1  # reduced dimension
        self.noise_dim = T * (T - 1) if params.noise_out > 0 else 0
        self.dim = 2 * self.n + self.noise_dim
        if rule not in ("auto", "gh", "qmc"):
            raise ParameterError("rule", f"must be auto, gh or qmc (got {rule!r})")
        if conjugates not in ("jacobian", "stein"):
            raise ParameterError("conjugates", f"must be jacobian or stein (got {conjugates!r:.60})")
        self.conjugates = conjugates
        if rule == "auto":
            rule = "gh" if self.dim <= gh_max_dim else "qmc"
        self.rule = rule
        self.order = int(order)
        self.order_low = int(order_low) if order_low is not None else max(2, int(round(0.75 * order)))
        self.qmc_log2 = int(qmc_log2)
        self.replicas = int(replicas)
        if rule == "qmc" and self.replicas < 2:
            raise ParameterError("replicas", "QMC needs at least 2 replicas for an error estimate")
        self.seed = int(seed)
        self.estimate_error = estimate_error
        self.tol, self.max_iter = float(tol), int(max_iter)
        self.symmetric = bool(symmetric)
        groups = _channel_groups(self.dim, self.n, True) if self.symmetric else ()
        if rule == "gh":
            # the tensor rule has order^dim nodes (and ~100 bytes per node while built): order 120, which
            # beta = beta0 = 10 asked for through channel_setup's 12 beta, would need ~20 GB
            if not 2 <= self.order <= MAX_GH_ORDER or self.order_low < 2:
                raise ParameterError("order", f"must be between 2 and {MAX_GH_ORDER} (got {self.order}; the "
                                     f"Gauss-Hermite rule has order^{self.dim} nodes)")
            panels = [_gh_panel(self.dim, self.order, prune, groups)]
            if estimate_error:
                panels.append(_gh_panel(self.dim, self.order_low, prune, groups))
        else:
            panels = list(_qmc_panels(self.dim, self.qmc_log2, self.replicas, self.seed))
        self.panels = tuple(panels)
        self._label_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per own panel: labels, curvature bound
        self._prune = float(prune)
        self.R3, self.RR = _reduced_design(T)
        self._noise_basis = _row_noise_basis(T)
        self._kern = _kernel(T, params.beta)

    # ---------------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return sum(p.x.shape[0] for p in self.panels)

    def _combine(self, per_panel: list[dict]) -> tuple[dict, dict]:
        keys = per_panel[0].keys()
        if self.rule == "gh":
            val = {k: per_panel[0][k] for k in keys}
            if len(per_panel) > 1:
                err = {k: abs(per_panel[0][k] - per_panel[1][k]) for k in keys}
            else:
                err = {k: float("nan") for k in keys}
            return val, err
        val, err = {}, {}
        R = len(per_panel)
        for k in keys:
            v = np.array([p[k] for p in per_panel])
            val[k] = float(np.mean(v))
            err[k] = float(np.std(v, ddof=1) / math.sqrt(R))
        return val, err

    def _check_qm(self, q: float, m: float, qz: float, cond_var: float | None = None) -> tuple[float, float, float]:
        """(q, m, s) with s = sqrt(q - m^2/Qz), the student's standard deviation given the teacher; ``cond_var``:
        that variance from the caller, where it knows it better than q and m resolve it (next to perfect recovery
        q - m^2/Qz cancels to 1 - rho^2 ~ 1e-8 of q: computed from q and m it keeps ~8 digits)."""
        q, m = float(q), float(m)
        if not (math.isfinite(q) and math.isfinite(m)) or q < 0:
            raise ParameterError("q", f"need finite q >= 0 and m (got q={q!r}, m={m!r})")
        cond = q - m * m / qz
        if cond < -1e-10 * max(1.0, q):
            raise ParameterError("m", f"covariance not PSD: m^2 = {m * m!r} > q * Qz = {q * qz!r}")
        if cond_var is not None:
            cond_var = float(cond_var)
            if not math.isfinite(cond_var) or cond_var < 0 or abs(cond_var - cond) > 1e-10 * max(1.0, q):
                raise ParameterError("cond_var", f"must be q - m^2/Qz = {cond!r} to round-off (got {cond_var!r})")
            cond = cond_var
        return q, m, math.sqrt(max(cond, 0.0))

    def _panels_for(self, s_cond: float) -> tuple[_Panel, ...]:
        """The quadrature panels; for GH with a degenerate student (s_cond = 0) the student-noise marginal."""
        if self.rule != "gh" or s_cond != 0.0:
            return self.panels
        orders = [self.order, self.order_low][: len(self.panels)]
        groups = _channel_groups(self.dim - self.n, self.n, False) if self.symmetric else ()
        return tuple(_gh_panel_no_student(self.dim, self.n, o, self._prune, groups) for o in orders)

    def _labels(self, ip: int, panel: _Panel, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The kernel's labels of the teacher logits a (noisy labels: plus the output noise of the panel's nodes)
        and the global curvature bound per node. Neither depends on (q, m, sigma) (a = sqrt(Qz) x), so for the
        rule's own panels they are computed once per channel and kept."""
        own = ip < len(self.panels) and panel is self.panels[ip]
        if own and ip in self._label_cache:
            return self._label_cache[ip]
        p, T, N = self.params, self.params.tokens, panel.x.shape[0]
        y = _softmax_rows((p.beta0 * (a @ self.R3.reshape(T * T, self.n).T)).reshape(N, T, T))
        if self.noise_dim:
            xi = panel.x[:, 2 * self.n :].reshape(N, T, T - 1)
            y = y + math.sqrt(p.noise_out) * np.einsum("nri,ci->nrc", xi, self._noise_basis)
        lab = self._kern.labels(y)
        out = (lab, self._kern.negative_curvature_bound(lab))
        for arr in out:
            arr.setflags(write=False)
        if own:
            self._label_cache[ip] = out
        return out

    def _teacher_student(self, panel: _Panel, qz: float, m: float, s_cond: float):
        n = self.n
        a = math.sqrt(qz) * panel.x[:, :n]
        b = (m / qz) * a + s_cond * panel.x[:, n : 2 * n]
        return a, b

    @staticmethod
    def _wsum(w: np.ndarray, v: np.ndarray) -> float:
        return float(np.sum(w * v))  # pairwise summation: deterministic

    # ---------------------------------------------------------------------------------------------
    def moments(self, alpha: float, q: float, m: float, sigma: float, warm: dict | None = None,
                jacobian: bool = False, refresh_pool: bool = True, cond_var: float | None = None) -> ChannelMoments:
        """Conjugate order parameters and prox observables at (q, m, sigma). See :class:`ChannelMoments`.

        ``sigma = 0`` is the exact limit (h* = z, g = -grad l(z), dg/dz = -H(z)); q = m = 0 (z = 0) is allowed.

        Where convexity is not certified, further Newton starts run besides z: a pool of the interpolating
        point and the kernel's fixed points (T = 2: row logits at 0 / at z's, :meth:`_TwoTokenKernel.extra_starts`;
        T = 3: c = 0, :meth:`_GeneralKernel.extra_starts`), each for a few steps, continued from the lowest;
        T >= 4: the interpolating point alone. The lowest prox objective is kept (docs/theory/channel.md,
        "Missed global minima").

        ``warm``: an optional dict owned by the caller (start with ``{}``). Start 0 then begins at the
        minimiser it reached, node by node, in the previous call with the same dict, and the pool's
        interpolating point at the minimiser of the other starts there; this cuts the Newton iterations when
        successive calls are close (state-evolution iterations). At T >= 3 the pool (T >= 4: the second start)
        is run again only at the nodes where the two branches were distinct in the previous call (or where the
        dict holds no branch); at T = 2 the pool's fixed starts run at every uncertified node, so that basins no
        branch followed are still found. The lower prox objective is kept; the result equals the cold one to the
        Newton tolerance except where a new basin appears or a start would jump between basins (the SE checks
        the final point with a cold call). The dict is updated in place; a call with ``warm=None`` is cold and
        deterministic.

        ``refresh_pool`` (T = 2, warm calls only): False skips the pool's fixed starts where the previous call of
        the dict left a branch, so that only the warm branches (start 0's and the pool's kept minimiser) are
        followed, as at T >= 3. About 1.5x cheaper per SE point; meant for iterations whose fixed point a later
        stage refines with refreshed or cold calls (the state evolution's cheaper stages). A call that finds
        no previous branch (the first of a dict) runs the whole pool either way.

        ``cond_var``: q - m^2/Qz, the student logit's variance given the teacher's, where the caller knows it to
        better relative precision than q and m resolve it (the state evolution next to perfect recovery, from its
        coordinate atanh rho); it sets the student nodes' spread and the Stein forms' det = Qz cond_var, and must
        equal q - m^2/Qz to 1e-10 max(1, q). None: computed from q and m (docs/theory/channel.md).
        """
        p = self.params
        alpha, sigma = float(alpha), float(sigma)
        refresh_pool = validate_flag("refresh_pool", refresh_pool)
        if not math.isfinite(alpha) or alpha <= 0:
            raise ParameterError("alpha", f"must be > 0 (got {alpha!r})")
        if not math.isfinite(sigma) or sigma < 0:
            raise ParameterError("sigma", f"must be finite and >= 0 (got {sigma!r})")
        qz = p.q_zeta
        q, m, s_cond = self._check_qm(q, m, qz, cond_var)
        T, n = p.tokens, self.n
        kern = self._kern
        det = qz * q - m * m if cond_var is None else qz * s_cond * s_cond
        per_panel, max_res, max_it, excess = [], 0.0, 0, 0.0
        for ip, panel in enumerate(self._panels_for(s_cond)):
            N = panel.x.shape[0]
            a, b = self._teacher_student(panel, qz, m, s_cond)
            lab, curvature = self._labels(ip, panel, a)
            if sigma == 0.0:
                # exact limit: h* = z, prox objective = loss
                loss, gl, Hl = kern.derivs(b, lab)
                r = _ReducedProx(b, loss, loss, gl, Hl, np.zeros(N), 0, np.zeros(N, dtype=int))
                branch = 0.0
            else:
                branch = 0.0
                sig = np.full(N, sigma)
                prev = warm.get((ip, N)) if warm is not None else None
                start0 = prev[0] if prev is not None else b
                r = _prox_reduced(kern, b, lab, sig, [start0], self.tol, self.max_iter)
                c1_all = np.full_like(b, np.nan) if warm is not None else None
                if warm is not None:
                    c0_all = r.c.copy()  # branch of start 0, before the comparison below
                same = None
                if prev is not None:
                    # the interpolating start again only where the two branches were distinct last time
                    same = np.max(np.abs(prev[1] - prev[0]), axis=1) <= 1e-7 * (1.0 + np.max(np.abs(prev[0]), axis=1))
                    c1_all[same] = r.c[same]
                # convexity certificate (global, then on the sublevel set of start 0's minimum): where it holds
                # the prox objective is strictly convex where its minimisers lie and start 0 suffices
                sub, tight = _uncertified(kern, b, lab, sig, r.f, curvature)
                if warm is not None:  # one minimiser: the two branches coincide there
                    c1_all[tight] = r.c[tight]
                if sub.size:  # further starts only where convexity is not certified
                    # o: the best minimiser of the other starts on sub (branch 1), start 0's where none ran
                    o = _ReducedProx(r.c[sub], r.f[sub], r.loss[sub], r.grad[sub], r.hess[sub], r.residual[sub],
                                     0, np.zeros(sub.size, dtype=int))
                    # branch 1's previous minimiser, where the previous call of the dict left one
                    known = np.isfinite(prev[1][sub, 0]) if prev is not None else np.zeros(sub.size, dtype=bool)
                    # where branch 1 may differ from start 0's: everywhere in a first call, else where the two
                    # branches were distinct last time (or none is known: a NaN row is never "same")
                    need = np.ones(sub.size, dtype=bool) if same is None else ~same[sub]
                    # T = 2, 3: a pool of starts, the interpolating point (warm: branch 1's previous minimiser) and
                    # the kernel's fixed starts (T = 2: row logits at 0 / at z's; T = 3: c = 0), each for
                    # _POOL_STEPS Newton steps; Newton is continued from the lowest of them (ties: the first).
                    # T = 3 runs it where the second start would run. At T = 2 the fixed starts run in warm calls
                    # too by default, at every node of sub: their basins can become the global ones between two
                    # calls where no branch followed them (docs/theory/channel.md, "Missed global minima");
                    # refresh_pool=False runs them only where no branch is known
                    if not kern.pooled:
                        pool = np.zeros(sub.size, dtype=bool)
                    elif kern.n == 2:
                        pool = np.ones(sub.size, dtype=bool) if refresh_pool else ~known
                    else:
                        pool = need
                    if pool.any():
                        s1 = (p.beta0 / p.beta) * a[sub]
                        if prev is not None:
                            s1[known] = prev[1][sub[known]]
                        pp = np.flatnonzero(pool)
                        extra = [e[pp] for e in kern.extra_starts(b[sub])]
                        o1 = _pool_prox(kern, b[sub[pp]], lab[sub[pp]], sig[sub[pp]], s1[pp], extra, self.tol,
                                        self.max_iter)
                        _put(o, pp, o1, o1.start_index)
                    # the interpolating point alone (warm: branch 1's previous minimiser) where it is needed and the
                    # pool did not run (T >= 4, and T = 2 outside the pool)
                    second = need & ~pool
                    if second.any():
                        pos = np.flatnonzero(second)
                        s2 = sub[pos]
                        c_int = (p.beta0 / p.beta) * a[s2]
                        if prev is not None:
                            c_int[known[pos]] = prev[1][s2[known[pos]]]
                        r2 = _prox_reduced(kern, b[s2], lab[s2], sig[s2], [c_int], self.tol, self.max_iter)
                        _put(o, pos, r2, 1)
                    if warm is not None:
                        c1_all[sub] = o.c
                    c0s = r.c[sub]
                    two = np.max(np.abs(o.c - c0s), axis=1) > 1e-6 * (1.0 + np.max(np.abs(c0s), axis=1))
                    if two.any():  # |  ||g_0||^2 - ||g_1||^2 | on the nodes with two distinct minima
                        jump = np.abs(_rowdot(o.grad, o.grad) - _rowdot(r.grad[sub], r.grad[sub]))
                        branch = self._wsum(panel.w[sub], np.where(two, jump, 0.0))
                    _keep_lower(r, sub, o)
                if warm is not None:
                    warm[(ip, N)] = (c0_all, c1_all)
            if not np.all(np.isfinite(r.c)) or not np.all(np.isfinite(r.hess)):
                raise FloatingPointError("SoftmaxChannel.moments: non-finite prox")
            max_res = max(max_res, float(np.max(r.residual)))
            if sigma > 0.0 and np.max(r.residual) > max(self.tol, 1e-9):
                excess = max(excess, float(np.max(r.residual / _residual_floor(r, b, sigma, self.tol))))
            max_it = max(max_it, r.iterations)
            # g from the optimality condition g = -grad l(h*; y) (= (h* - z)/sigma at a converged prox):
            # no cancellation as sigma -> 0, and exact at sigma = 0
            g = -r.grad
            gg = _rowdot(g, g)
            A = np.eye(n)[None] + sigma * r.hess
            C = kern.cross(r.c, a, p.beta0)  # d(grad l)/da = -2 beta beta0 C
            # I + sigma H is singular to round-off on some nodes at a runaway's sigma (~1e9 at lambda = 0, docs):
            # the Jacobian forms are then not finite, which the checks below turn into a FloatingPointError where
            # they are in use (the Stein forms need no solve), instead of numpy's divide/invalid warnings
            with np.errstate(divide="ignore", invalid="ignore"):
                X = _solve_sym(A, np.concatenate([r.hess, C], axis=2))
                tr_h = np.trace(X[:, :, :n], axis1=1, axis2=2)  # tr[H (I + sigma H)^-1]
                tr_c = np.trace(X[:, :, n:], axis1=1, axis2=2)  # tr[(I + sigma H)^-1 C]
                vals = {
                    "q_hat": self._wsum(panel.w, gg),
                    "m_hat": 2.0 * p.beta * p.beta0 * self._wsum(panel.w, tr_c),
                    "sigma_hat": self._wsum(panel.w, tr_h),
                    "loss_mean": self._wsum(panel.w, r.loss),
                    "envelope": self._wsum(panel.w, r.f),
                }
                if jacobian:  # ||dg/dz||_F^2 = ||H (I + sigma H)^-1||_F^2 per node (g has no e component)
                    vals["jac_sq"] = self._wsum(panel.w, np.sum(X[:, :, :n] ** 2, axis=(1, 2)))
            if det > 1e-300:
                ga = _rowdot(g, q * a - m * b) / det
                gb = _rowdot(g, qz * b - m * a) / det
                vals["m_hat_stein"] = self._wsum(panel.w, ga)
                vals["sigma_hat_stein"] = -self._wsum(panel.w, gb)
            else:
                vals["m_hat_stein"] = vals["sigma_hat_stein"] = float("nan")
            vals["branch"] = branch
            per_panel.append(vals)
        val, err = self._combine(per_panel)
        const = T * p.noise_out  # row-mean part of the output noise: constant loss
        val["loss_mean"] += const
        val["envelope"] += const
        val["train_error"] = val["loss_mean"]
        err["train_error"] = err["loss_mean"]
        two_a = 2.0 * alpha
        for k in ("q_hat", "m_hat", "sigma_hat", "m_hat_stein", "sigma_hat_stein") + (("jac_sq",) if jacobian else ()):
            val[k] *= two_a
            err[k] *= two_a
        if excess > 1.0:
            warnings.warn(f"{PROX_WARNING} (max residual {max_res:.2e})", ConvergenceWarning, stacklevel=2)
        stein = {"m_hat": val["m_hat_stein"], "sigma_hat": val["sigma_hat_stein"], "m_hat_err": err["m_hat_stein"],
                 "sigma_hat_err": err["sigma_hat_stein"]}
        if self.conjugates == "stein" and math.isfinite(val["m_hat_stein"]) and math.isfinite(val["sigma_hat_stein"]):
            for k in ("m_hat", "sigma_hat"):
                stein[f"{k}_jacobian"], stein[f"{k}_jacobian_err"] = val[k], err[k]
                val[k], err[k] = val[f"{k}_stein"], err[f"{k}_stein"]
        for k in _KEYS[:6] + (("jac_sq",) if jacobian else ()):
            if not math.isfinite(val[k]):
                raise FloatingPointError(f"SoftmaxChannel.moments: {k} is not finite")
        return ChannelMoments(
            q_hat=val["q_hat"],
            m_hat=val["m_hat"],
            sigma_hat=val["sigma_hat"],
            train_error=val["train_error"],
            loss_mean=val["loss_mean"],
            envelope=val["envelope"],
            error_estimate={k: err[k] for k in _KEYS[:6]},
            prox_residual=max_res,
            prox_iterations=max_it,
            stein=stein,
            jac_sq=val["jac_sq"] if jacobian else None,
            jac_sq_error=err["jac_sq"] if jacobian else None,
            branch_share=val["branch"] / val["q_hat"] * two_a if val["q_hat"] > 0 else 0.0,
            prox_excess=excess,
        )

    # ---------------------------------------------------------------------------------------------
    def test_error(self, q: float, m: float, clean: bool = False) -> tuple[float, float]:
        """E||softmax(beta0 D(z0')) - softmax(beta D(z))||_F^2 (+ T^2 Delta_out unless clean); (value, error).

        (z0', z) ~ N(0, [[Q0 + Delta/2, m], [m, q]]) per entry for noisy labels, [[Q0, m], [m, q]] if clean.
        """
        p = self.params
        qz = p.q0 if clean else p.q_zeta
        q, m, s_cond = self._check_qm(q, m, qz)
        T, n = p.tokens, self.n
        R2 = self.R3.reshape(T * T, n)
        per_panel = []
        for panel in self._panels_for(s_cond):
            N = panel.x.shape[0]
            a, b = self._teacher_student(panel, qz, m, s_cond)
            y0 = _softmax_rows((p.beta0 * (a @ R2.T)).reshape(N, T, T))
            s = _softmax_rows((p.beta * (b @ R2.T)).reshape(N, T, T))
            d = (y0 - s).reshape(N, -1)
            per_panel.append({"e": self._wsum(panel.w, np.einsum("ni,ni->n", d, d))})
        val, err = self._combine(per_panel)
        extra = 0.0 if clean else T * T * p.noise_out
        return val["e"] + extra, err["e"]

    def uniform_error(self, clean: bool = False) -> float:
        """Test error of the uniform-attention predictor 1/T (equals test_error(0, 0))."""
        return self.test_error(0.0, 0.0, clean=clean)[0]


def check_channel_options(options: dict, name: str = "channel_options") -> None:
    """The keys of a ``channel_options`` dict are :class:`SoftmaxChannel` keywords; any other is a ParameterError
    naming the dict and the key (it was Python's TypeError from the channel's constructor). The values are checked
    by the constructor."""
    import difflib
    import inspect

    known = [n for n in inspect.signature(SoftmaxChannel.__init__).parameters if n not in ("self", "params")]
    for key in sorted(options, key=str):
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ParameterError(name, f"unknown channel option {key!r} (the channel's options: {', '.join(known)})"
                                 f"{hint}")
