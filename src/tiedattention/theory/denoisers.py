"""Matrix (prior) side of the state evolution: the spectral denoisers of each student.

(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) through the effective observation Y = m_hat S0 + sqrt(q_hat) Z
(Z a GOE matrix, semicircle on [-2, 2]); see docs/theory/state_evolution.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

from ..problem import Problem
from .spectral import FreeConvolution, SpectralIntegrals

__all__ = ["MatrixSide", "matrix_update", "RIDGE_FACTOR", "narrow_interpolation_alpha_bar",
           "solve_narrow_interpolating_phase"]

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
    problem: Problem, measure, q_hat: float, m_hat: float, sigma_hat: float, fixed_nodes: int | None = None,
    warm: dict | None = None,
) -> MatrixSide:
    """(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) for the student's denoiser.

    factorised (kappa >= 1):  S_hat = (m_hat/sigma_hat) (S0 + delta Z - eps)_+,  delta = sqrt(q_hat)/m_hat,
                              eps = 2 lambda/m_hat;
    factorised (kappa < 1):   the same, keeping only the top kappa*d eigenvalues: f(y) = (y - eps) 1[y > c],
                              c = max(eps, y_kappa), y_kappa the (1 - kappa)-quantile of rho_delta
                              (docs/theory/spectra.md);
    direct (ridge):           S_hat = (m_hat S0 + sqrt(q_hat) Z)/(sigma_hat + 4 lambda).

    ``fixed_nodes``: a cheap, lower-accuracy spectral side (the first stages of the SE iteration): a fixed
    composite rule of ``fixed_nodes``-point Gauss-Jacobi panels (:func:`_fixed_integrals`) instead of the
    adaptive rule (no error control). The default (None) is the adaptive rule (relative 1e-12).
    ``warm``: a dict owned by the caller (start with ``{}``): the support's edges are kept in it and the next
    call's edge search starts Newton there (``FreeConvolution(support_hint=...)``); for kappa >= 1 also the
    point u_c + i v_c that rho_delta's subordination maps to the threshold eps, from which the next call finds
    its own by complex Newton (instead of a bracketed inversion of psi), falling back to the bracketed
    inversion when Newton fails. The integrals are those of ``FreeConvolution.integrals`` (same pieces and
    adaptive rule) up to the rounding of the edges and of u_c.
    """
    lam = problem.student.lam
    q0 = measure.q0
    if not (q_hat > 0 and m_hat > 0 and sigma_hat > 0):
        raise FloatingPointError(
            f"conjugates left the admissible region (q_hat={q_hat:g}, m_hat={m_hat:g}, sigma_hat={sigma_hat:g})"
        )
    delta = math.sqrt(q_hat) / m_hat
    if not delta < 1e150:  # delta**2 would overflow (m_hat ~ 1e-150: a fixed-point iterate far out, e.g. noise >~ 1e7)
        raise FloatingPointError(
            f"conjugates left the admissible region (m_hat={m_hat:g} against q_hat={q_hat:g}: delta = "
            f"sqrt(q_hat)/m_hat = {delta:g} overflows)"
        )
    if problem.student.model == "direct":
        den = sigma_hat + RIDGE_FACTOR * lam
        q = (m_hat**2 * q0 + q_hat) / den**2
        m = m_hat * q0 / den
        return MatrixSide(q, m, 1.0 / den, delta, 0.0, 1.0, m_hat * measure.moment(1) / den, 0.0)
    eps = 2.0 * lam / m_hat
    fc = FreeConvolution(measure, delta, support_hint=warm)
    kappa = problem.student.kappa
    if kappa >= 1 and (fixed_nodes is not None or warm is not None):
        pieces = _pieces_above(fc, eps, warm)
        if fixed_nodes is not None:
            si = _fixed_integrals(fc, eps, int(fixed_nodes), pieces)
        else:
            si = _adaptive_integrals(fc, eps, pieces)
        return _spectral_side(si, m_hat, sigma_hat, delta, eps)
    si = fc.integrals(eps)
    if kappa < 1 and si.rank > kappa:
        # rank constraint binds: keep the top kappa*d eigenvalues, f(y) = (y - eps) 1[y > c]
        si = fc.integrals(eps, cut=fc.quantile(kappa))
    return _spectral_side(si, m_hat, sigma_hat, delta, eps)


def _pieces_above(fc: FreeConvolution, eps: float, warm: dict | None) -> list[tuple[float, float, float, float]]:
    """``FreeConvolution._pieces_above(eps)``, with the cut point warm-started from ``warm`` (see matrix_update).

    The cut point is omega = u_c + i v_c with omega + t g_mu(omega) = eps, Im omega > 0 (t = delta^2): complex
    Newton with g_mu' from the kernel, accepted only when it converged on the bulk that eps cuts and v_c
    agrees with solve_v(u_c) (the physical branch); otherwise the bracketed inversion decides."""
    if warm is None:
        return fc._pieces_above(eps)
    cut = np.flatnonzero((fc._ylo < eps) & (fc._yhi > eps))
    if cut.size != 1:
        return fc._pieces_above(eps)
    k = int(cut[0])
    lo_k, hi_k = fc.intervals_u[k]
    t = fc.t
    u_c = None
    omega = warm.get("omega")
    if omega is not None:
        for _ in range(12):
            if not (omega.imag > 0 and lo_k < omega.real < hi_k):
                break
            g, dg = fc.kernel.g_dg(np.array([omega.real]), np.array([omega.imag]))
            step = (omega + t * g[0] - eps) / (1.0 + t * dg[0])
            omega = omega - step
            if abs(step) <= 1e-15 * max(1.0, abs(omega)):
                if omega.imag > 0 and lo_k < omega.real < hi_k:
                    v = float(fc.solve_v(np.array([omega.real]))[0])
                    if abs(v - omega.imag) <= 1e-8 * max(v, 1e-300) + 1e-14 * fc.delta:
                        u_c = float(omega.real)
                break
    if u_c is None:
        u_c = fc._u_of_y(float(eps), lo_k, hi_k)
        omega = complex(u_c, float(fc.solve_v(np.array([u_c]))[0]))
    warm["omega"] = complex(omega)
    pieces = []
    for j, (lo, hi) in enumerate(fc.intervals_u):
        if fc._yhi[j] <= eps:
            continue
        pieces.append((u_c, hi, 0.0, 0.5) if j == k else (lo, hi, 0.5, 0.5))
    return pieces


def _adaptive_integrals(fc: FreeConvolution, eps: float, pieces) -> SpectralIntegrals:
    """``FreeConvolution.integrals(eps)`` (kappa >= 1) on the given pieces: the same adaptive rule."""

    def tests(y, re_g):
        f = y - eps
        return [f * f, f, f * re_g, np.ones_like(y)]

    res = fc.adaptive(pieces, tests)
    tot = res["totals"] if res["totals"] is not None else np.zeros(4)
    return SpectralIntegrals(delta=fc.delta, eps=float(eps), I=float(tot[0]), dI_ddelta=float(4.0 * fc.delta * tot[2]),
                             dI_deps=float(-2.0 * tot[1]), rank=float(tot[3]), mass=1.0, error=float(res["error"]),
                             nodes=int(res["nodes"]), cut=float(eps))


# breakpoints of the fixed spectral rule on a support piece (fractions of its length from its lower end): graded
# towards the lower end, where the threshold cuts the smeared atom of a rank-deficient target at small delta
FIXED_BREAKS = np.array([0.0, 1 / 81, 1 / 27, 1 / 9, 1 / 3, 1.0])


def _fixed_integrals(fc: FreeConvolution, eps: float, n: int, pieces) -> SpectralIntegrals:
    """FreeConvolution.integrals(eps) by a fixed composite rule: n-point Gauss-Jacobi panels on each support
    piece above eps, split at FIXED_BREAKS (the same pieces, edge exponents and integrands as the adaptive
    rule, without its refinement and error check). MP kappa0 = 0.5, Delta = 0.5, lambda = 0.01 solutions at
    alpha = 0.05 ... 4: ~1e-15 ... 1e-6 relative at n = 16 (worst at large alpha, small delta)."""
    tot = np.zeros(4)
    if pieces:
        m = FIXED_BREAKS.size - 1
        lo, hi, eb, ea = (np.array([pc[k] for pc in pieces], float) for k in range(4))
        cuts = lo[:, None] + (hi - lo)[:, None] * FIXED_BREAKS[None, :]
        first, last = np.arange(m) == 0, np.arange(m) == m - 1
        eb = np.where(first[None, :], eb[:, None], 0.0).ravel()
        ea = np.where(last[None, :], ea[:, None], 0.0).ravel()
        r = fc._panel_nodes(cuts[:, :-1].ravel(), cuts[:, 1:].ravel(), eb, ea, n)
        f, w = r["y"] - eps, r["w"]
        tot = np.array([np.sum(w * f * f), np.sum(w * f), np.sum(w * f * r["re_g"]), np.sum(w)])
    return SpectralIntegrals(delta=fc.delta, eps=float(eps), I=float(tot[0]), dI_ddelta=float(4.0 * fc.delta * tot[2]),
                             dI_deps=float(-2.0 * tot[1]), rank=float(tot[3]), mass=1.0, error=float("nan"),
                             nodes=n * (FIXED_BREAKS.size - 1) * len(pieces), cut=float(eps))


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


# ------------------------------------------------------------------------------------------------
# narrow students (kappa < 1) at lambda -> 0+: the interpolating phase (docs/theory/spectra.md section 2)
# ------------------------------------------------------------------------------------------------
def _narrow_j(fc: FreeConvolution, eps: float, y_kappa: float) -> tuple[float, float, float, Any]:
    """J2 = int f^2 rho, J1 = int f rho, JG = int f rho Re g for f(y) = (y - eps) 1[y > max(eps, y_kappa)]."""
    si = fc.integrals(eps, cut=y_kappa)
    return si.I, -0.5 * si.dI_deps, si.dI_ddelta / (4.0 * fc.delta), si


def _narrow_eps(fc: FreeConvolution, y_kappa: float, abar: float) -> tuple[float, Any]:
    """eps with JG(delta, eps) = alpha_bar. JG decreases in eps (dJG/deps = -int_{y>c} rho Re g < 0: the
    principal value over the top part of the spectrum is positive). While the cut binds (eps <= y_kappa, c =
    y_kappa fixed) JG = A - eps B is linear in eps, so two evaluations give the root exactly; if it lies above
    y_kappa the cut does not bind (c = eps) and the root is bracketed in [y_kappa, top edge] (Brent)."""
    j_hi = _narrow_j(fc, y_kappa, y_kappa)[2]
    if j_hi <= abar:  # the cut binds at the solution: linear in eps below y_kappa
        j_lo = _narrow_j(fc, y_kappa - 1.0, y_kappa)[2]
        slope = j_lo - j_hi  # B > 0
        if not slope > 0:
            raise FloatingPointError("narrow interpolating phase: JG does not decrease in eps")
        eps = y_kappa - (abar - j_hi) / slope
    else:
        hi = fc.support()[-1][1]
        eps = optimize.brentq(lambda e: _narrow_j(fc, e, y_kappa)[2] - abar, y_kappa, hi, xtol=1e-15, rtol=1e-14)
    return eps, _narrow_j(fc, eps, y_kappa)


def narrow_interpolation_alpha_bar(measure, noise: float, kappa: float) -> float:
    """alpha_bar at which the lambda -> 0+ training error of a rank-kappa d student leaves zero.

    The end of the narrow interpolating phase (eps -> 0): with c = max(0, y_kappa(delta)) and the J's of
    f(y) = y 1[y > c], the root delta* of H(delta) = J2 - 2 delta^2 JG - Q0 - Delta/2, then alpha_bar = JG(delta*)
    (for c = 0 this is the wide threshold of thresholds.interpolation_threshold). H(0+) = int_{y>c} y^2 dmu - Q0
    - Delta/2 <= 0; the first sign change on a geometric grid is refined by Brent (thresholds.first_root_from_below;
    for Delta = 0 and kappa >= kappa0, H(0+) = 0 and the value is the delta -> 0 limit). 0 if H never changes sign.
    When the cut binds the result can exceed the parameter count kappa - kappa^2/2 (MP kappa0 = 0.5, Delta = 0.5,
    kappa = 0.25: 0.24854 > 0.21875); training does not interpolate in between (docs/theory/spectra.md section 2),
    so there the parameter count, not this value, is where the training error leaves zero.
    """
    q_target = measure.q0 + noise / 2.0

    def h(delta: float) -> float:
        fc = FreeConvolution(measure, delta)
        j2, _, jg, _ = _narrow_j(fc, 0.0, fc.quantile(kappa))
        return j2 - 2.0 * delta**2 * jg - q_target

    def jg(delta: float) -> float:
        fc = FreeConvolution(measure, delta)
        return float(_narrow_j(fc, 0.0, fc.quantile(kappa))[2])

    from .thresholds import first_root_from_below

    delta = first_root_from_below(h)
    if delta is None:
        # Delta = 0 (or too small to resolve) with kappa >= kappa0: H(0+) = 0 and the root is at delta -> 0; JG is
        # linear in delta there (MP 0.5, kappa = 0.7: 0.4369336, 0.4370714, 0.4370852 at delta = 1e-3, 1e-4,
        # 1e-5), so a Richardson step from 1e-4 and 1e-5 gives the limit (0.4370867; 0.4375000 at kappa >= 0.75)
        a, b = jg(1e-4), jg(1e-5)
        return b + (b - a) / 9.0
    return 0.0 if math.isinf(delta) else jg(delta)


def solve_narrow_interpolating_phase(measure, qz: float, abar: float, kappa: float) -> dict[str, Any]:
    """Narrow student (kappa < 1), lambda -> 0+, below its interpolation threshold: find (delta, eps).

    As for kappa >= 1 (state_evolution.md section 3) the conjugates vanish like lambda with m_hat/sigma_hat =
    r = beta0/beta, delta^2 = (r^2 Q' - 2 r m + q)/(2 alpha_bar r^2) and eps = lambda Sigma/(alpha_bar r) finite.
    With the rank-cut denoiser f(y) = (y - eps) 1[y > c], c = max(eps, y_kappa(delta)), q = r^2 J2,
    m = r (J2 + eps J1 - 2 delta^2 JG), Sigma sigma_hat = 2 JG = 2 alpha_bar, the two equations are

        JG(delta, eps) = alpha_bar,    G(delta) = Q' - J2 - 2 eps J1 + 2 alpha_bar delta^2 = 0

    (with c = eps they are the kappa >= 1 equations dI/ddelta = 4 delta alpha_bar, Q' - I + 2 alpha_bar delta^2
    + eps dI/deps = 0). Inner: eps(delta) by Brent (JG is monotone in eps); outer: the first sign change of G
    (G(0+) = Delta/2 > 0) on a geometric grid (factor 2.15), then Brent. Returns the keys of
    ``state_evolution.solve_interpolating_phase`` (I = J2, m_over_r = m/r, rank = kappa when the cut binds).
    """
    nan = float("nan")
    fail = {"delta": nan, "eps": nan, "I": nan, "m_over_r": nan, "rank": nan, "trace": nan, "iterations": 0,
            "residual": nan, "converged": False}
    if not 0 < abar < 0.5:
        return {**fail, "message": "interpolating phase needs 0 < alpha_bar < 1/2"}

    def solve_at(delta: float):
        fc = FreeConvolution(measure, delta)
        eps, (j2, j1, jg, si) = _narrow_eps(fc, fc.quantile(kappa), abar)
        return eps, j2, j1, jg, si

    def g_raw(delta: float) -> tuple[float, float]:
        eps, j2, j1, _, _ = solve_at(delta)
        return qz - j2 - 2.0 * eps * j1 + 2.0 * abar * delta**2, eps

    def g_eq(delta: float) -> float:
        # as in state_evolution.solve_interpolating_phase: eps < 0 is no lambda -> 0+ solution and G turns
        # back up there, so it counts as negative (a bracket holding only the jump is rejected below)
        g, eps = g_raw(delta)
        return g if eps >= 0 else -(1.0 + abs(g))

    grid = np.geomspace(1e-3, 1e3, 19)  # G > 0 below its first root, < 0 above; Brent does the rest
    bracket = None
    g_prev = g_eq(grid[0])
    for lo_d, hi_d in zip(grid[:-1], grid[1:], strict=True):
        g_next = g_eq(hi_d)
        if g_prev > 0 >= g_next:
            bracket = (lo_d, hi_d)
            break
        g_prev = g_next
    if bracket is None:
        return {**fail, "message": "no narrow interpolating solution (above the interpolation threshold?)"}
    delta, rr = optimize.brentq(g_eq, *bracket, xtol=1e-14, rtol=1e-13, full_output=True)
    eps, j2, j1, jg, si = solve_at(delta)
    resid = abs(g_raw(delta)[0])
    ok = bool(rr.converged) and eps >= 0.0 and resid <= 1e-8 * max(1.0, qz)
    msg = "" if ok else (f"no narrow interpolating solution with eps >= 0 (eps = {eps:.3g}, residual {resid:.1e}: "
                         "above the threshold?)")
    if ok and abar > kappa - kappa * kappa / 2:
        # noisy labels cannot be interpolated by the d^2 (kappa - kappa^2/2) parameters of a rank-kappa d PSD
        # matrix: the replica-symmetric phase is not exact here (docs/theory/spectra.md section 2). Training
        # (prox and L-BFGS on W, d = 40-80) confirms it: the train error stays finite as lambda -> 0 here.
        msg = (f"alpha_bar above the parameter count kappa - kappa^2/2 = {kappa - kappa * kappa / 2:.4g}: "
               "contradicted, a rank-kappa d student cannot interpolate noisy labels here and training does not "
               "(train error flat in lambda, 17-35x this phase's at lambda = 1e-5, d = 40-80)")
    return {"delta": delta, "eps": eps, "I": j2, "m_over_r": j2 + eps * j1 - 2.0 * delta**2 * jg, "rank": si.rank,
            "trace": j1, "iterations": rr.iterations, "residual": resid, "converged": ok,
            "message": msg}


def spectral_divided_differences(mu: np.ndarray, f: np.ndarray, fprime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Jacobian of the spectral map Y = U diag(mu) U^T -> U diag(f) U^T on Sym(d), in its eigenbasis.

    In the N = d(d+1)/2 orthonormal coordinates of Sym(d) (Frobenius inner product) the Jacobian is diagonal:
    f'(mu_i) on E_ii and the divided differences (f_i - f_j)/(mu_i - mu_j) on (E_ij + E_ji)/sqrt 2, i < j
    ((numerically) equal eigenvalues: the mean derivative). Returns (f' of shape (d,), the d(d-1)/2 divided
    differences). Its trace is GAMP's divergence (amp.py), its squared norm the denoiser's replicon
    (stability.py)."""
    mu, f, fprime = (np.asarray(a, float) for a in (mu, f, fprime))
    dmu = mu[:, None] - mu[None, :]
    df = f[:, None] - f[None, :]
    scale = max(float(np.max(np.abs(mu))), 1e-300)
    close = np.abs(dmu) <= 1e-12 * scale
    ratio = np.where(close, 0.5 * (fprime[:, None] + fprime[None, :]), df / np.where(close, 1.0, dmu))
    return fprime, ratio[np.triu_indices(mu.size, 1)]
