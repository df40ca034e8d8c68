r"""Replica-symmetry (de Almeida-Thouless) stability of the state-evolution fixed point.

Derivation: docs/theory/stability.md. The RS fixed point of the ERM is locally stable against replica-symmetry
breaking iff

    AT = [2 alpha E ||dg/dz||_F^2] * [(1/Sigma_hat^2) * D2] < 1,

* channel replicon ``2 alpha E||dg/dz||_F^2``: g = (h* - z)/Sigma the prox output of one sequence, dg/dz its
  K x K Jacobian (= -H (I + Sigma H)^-1, exact, from implicit differentiation; K = T(T+1)/2 logits in the
  channel's coordinates, in which every logit has variance q); from ``SoftmaxChannel.moments(jacobian=True)``;
* denoiser replicon ``D2/Sigma_hat^2``: the squared Frobenius norm of the Jacobian of the matrix denoiser
  S_hat(Y) = f(Y)/Sigma_hat per d^2/2 coordinates, i.e. for the soft threshold phi(y) = (y - eps)_+ on
  rho_delta (Y = m_hat (S0 + delta Z), the difference quotients are scale-free)

      D2 = int int ((phi(x) - phi(y))/(x - y))^2 rho_delta(x) rho_delta(y) dx dy
         = r^2 + 2 int_{x > eps} int_{y < eps} ((x - eps)/(x - y))^2 rho_delta(x) rho_delta(y),

  r the rank fraction; for the direct (ridge) student D2/Sigma_hat^2 = 1/(Sigma_hat + 4 lam)^2 exactly.

AT is also the factor by which the mean square of a small random perturbation of GAMP's iterate grows per
undamped iteration at its fixed point (Kabashima 2003): tests/test_stability.py measures it.

Narrow students (kappa < 1) whose rank cut binds above the threshold (c > eps): the quotient (phi(x) - 0)/(x - y)
across the cut behaves like (c - eps)/(x - y), whose square is not integrable at x = y = c: D2 diverges like
2 (c - eps)^2 rho_delta(c)^2 log d at finite d, so AT = inf (the RS fixed point is unstable).
:func:`finite_d_denoiser_replicon` gives the deterministic finite-d value on the d classical locations.

The channel has a singular part too: where the prox objective has several local minima, h*(z) jumps and the
zero-temperature replicon is infinite (:func:`prox_switching` measures how often; AT above is the regular part
only). RS is stable iff AT < 1 and the prox does not switch branches (docs/theory/stability.md section 5).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..problem import Problem
from . import channel as _ch
from .channel import SoftmaxChannel
from .denoisers import RIDGE_FACTOR, spectral_divided_differences
from .spectral import FreeConvolution
from .state_evolution import channel_setup

__all__ = [
    "StabilityResult",
    "rs_stability",
    "channel_replicon",
    "denoiser_replicon",
    "soft_threshold_d2",
    "spectral_jacobian_sq",
    "finite_d_denoiser_replicon",
    "finite_d_d2",
    "interpolating_phase_at",
    "prox_switching",
    "rs_fields",
]

_GRADE_LEVELS = 44  # geometric grading of the panels next to the threshold (ratio 1/2): innermost 2^-44 of a panel


@dataclass(frozen=True)
class StabilityResult:
    """AT = channel * denoiser (< 1: RS stable). ``error``: quadrature error estimate of AT.

    ``channel`` = 2 alpha E||dg/dz||_F^2, ``denoiser`` = D2/Sigma_hat^2; ``channel_normalised`` = channel * Sigma^2
    and ``denoiser_normalised`` = D2/(Sigma Sigma_hat)^2 (both are 1 for a linear channel/denoiser at the
    boundary; their product is AT). ``divergence_check`` = D1/(Sigma Sigma_hat) - 1 where D1 is the difference
    quotient integral on the same nodes (must be 0: D1 = 2 int phi rho Re g = Sigma Sigma_hat).
    """

    at: float
    error: float
    channel: float
    channel_error: float
    denoiser: float
    denoiser_error: float
    channel_normalised: float
    denoiser_normalised: float
    divergence_check: float
    stable: bool
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# finite-d: the Jacobian of a spectral function of a symmetric matrix
# --------------------------------------------------------------------------------------------------
def spectral_jacobian_sq(mu: np.ndarray, f: np.ndarray, fprime: np.ndarray) -> float:
    """Squared Hilbert-Schmidt norm of the Jacobian of Y = U diag(mu) U^T -> U diag(f) U^T on Sym(d).

    In the N = d(d+1)/2 orthonormal coordinates of Sym(d) the Jacobian is diagonal in the eigenbasis of Y:
    f'(mu_i) on E_ii, (f_i - f_j)/(mu_i - mu_j) on (E_ij + E_ji)/sqrt 2. Hence
    ``sum_i f'(mu_i)^2 + sum_{i<j} ((f_i - f_j)/(mu_i - mu_j))^2`` (equal eigenvalues: the mean derivative).
    """
    diag, off = spectral_divided_differences(mu, f, fprime)
    return float(np.sum(diag**2) + np.sum(off**2))


# --------------------------------------------------------------------------------------------------
# the denoiser's replicon: D2 for the soft threshold on rho_delta
# --------------------------------------------------------------------------------------------------
def _graded(pieces: list[tuple[float, float, float, float]], u_c: float | None, side: str):
    """Split the piece that ends (side='below') or starts (side='above') at u_c geometrically towards u_c."""
    out = []
    for lo, hi, eb, ea in pieces:
        at_cut = u_c is not None and ((side == "above" and lo == u_c) or (side == "below" and hi == u_c))
        if not at_cut:
            out.append((lo, hi, eb, ea))
            continue
        L = hi - lo
        pts = [L * 0.5**k for k in range(_GRADE_LEVELS + 1)] + [0.0]  # distances from u_c, decreasing
        for k in range(len(pts) - 1):
            far, near = pts[k], pts[k + 1]
            if side == "above":
                out.append((u_c + near, u_c + far, 0.0, ea if k == 0 else 0.0))
            else:
                out.append((u_c - far, u_c - near, eb if k == 0 else 0.0, 0.0))
    return out


def _nodes(fc: FreeConvolution, pieces, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """y, weights (rho_delta dy) and Re g_delta on n-point Gauss-Jacobi panels."""
    if not pieces:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    arr = np.array(pieces, float)
    r = fc._panel_nodes(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], n)
    return r["y"].ravel(), r["w"].ravel(), r["re_g"].ravel()


def _split_pieces(fc: FreeConvolution, eps: float):
    """Support pieces in u above and below y = eps, and the cut point u_c (None if eps is outside the bulks)."""
    above, below, u_c = [], [], None
    for k, (lo, hi) in enumerate(fc.intervals_u):
        ylo, yhi = fc._ylo[k], fc._yhi[k]
        if yhi <= eps:
            below.append((lo, hi, 0.5, 0.5))
        elif ylo >= eps:
            above.append((lo, hi, 0.5, 0.5))
        else:
            u_c = fc._u_of_y(float(eps), lo, hi)
            below.append((lo, u_c, 0.5, 0.0))
            above.append((u_c, hi, 0.0, 0.5))
    return above, below, u_c


def _refine(fc: FreeConvolution, pieces, eps: float, rtol: float = 1e-11):
    """The adaptive rule's accepted panels for int rho and int |y - eps| rho on these pieces."""
    if not pieces:
        return []
    res = fc.adaptive(pieces, lambda y, rg: [np.ones_like(y), np.abs(y - eps)], rtol=rtol)
    p = res["panels"]
    return [(float(a), float(b), float(c), float(d)) for a, b, c, d in zip(p["lo"], p["hi"], p["eb"], p["ea"],
                                                                              strict=True)]


def soft_threshold_d2(fc: FreeConvolution, eps: float, n: int = 16, n_check: int = 24) -> dict[str, float]:
    """D2 = int int ((phi(x) - phi(y))/(x - y))^2 rho rho for phi(y) = (y - eps)_+ on rho_delta, with D1 (the
    same with the first power) and 2 int phi rho Re g (= D1 exactly) as a check.

    Product Gauss-Jacobi rule over (x above eps) x (y below eps) on the adaptive rule's panels, the panels next
    to eps graded geometrically towards it (the integrand ((x - eps)/(x - y))^2 is bounded by 1 but
    discontinuous at the corner x = y = eps); error = difference between n- and n_check-point rules.
    """
    above, below, u_c = _split_pieces(fc, eps)
    above = _graded(_refine(fc, above, eps), u_c, "above")
    below = _graded(_refine(fc, below, eps), u_c, "below")

    def compute(nn: int) -> tuple[float, float, float, float]:
        ya, wa, ga = _nodes(fc, above, nn)
        yb, wb, _ = _nodes(fc, below, nn)
        rank = float(np.sum(wa))
        a = ya - eps
        pv = 2.0 * float(np.sum(wa * a * ga))  # 2 int phi rho Re g
        if yb.size == 0 or ya.size == 0:
            return rank**2, rank**2, rank, pv
        b = eps - yb
        quot = a[:, None] / (a[:, None] + b[None, :])
        cross1 = float(wa @ quot @ wb)
        cross2 = float(wa @ (quot * quot) @ wb)
        return rank**2 + 2.0 * cross2, rank**2 + 2.0 * cross1, rank, pv

    d2, d1, rank, pv = compute(n)
    d2c, d1c, _, pvc = compute(n_check)
    return {"D2": d2, "D2_error": abs(d2 - d2c), "D1": d1, "D1_error": abs(d1 - d1c), "rank": rank,
            "two_int_phi_re_g": pv, "nodes": (len(above) + len(below)) * n}


def denoiser_replicon(problem: Problem, measure, q_hat: float, m_hat: float, sigma_hat: float) -> dict[str, Any]:
    """D2/Sigma_hat^2 for the student's denoiser at the conjugates (with D1 and its check, see above).

    Returns a dict with ``value``, ``error``, ``D2``, ``D1``, ``sigma_sigma_hat`` (= 2 int phi rho Re g or, for the
    direct model, Sigma_hat/(Sigma_hat + 4 lam)) and ``message``. Narrow students whose cut binds above the
    threshold: value = inf (see the module docstring).
    """
    lam = problem.student.lam
    if problem.student.model == "direct":
        den = sigma_hat + RIDGE_FACTOR * lam
        return {"value": 1.0 / den**2, "error": 0.0, "D2": (sigma_hat / den) ** 2, "D1": sigma_hat / den,
                "sigma_sigma_hat": sigma_hat / den, "message": "direct (ridge) student: linear denoiser"}
    delta = math.sqrt(q_hat) / m_hat
    eps = 2.0 * lam / m_hat
    fc = FreeConvolution(measure, delta)
    top = float(fc._yhi[-1])
    if eps >= top:
        return {"value": 0.0, "error": 0.0, "D2": 0.0, "D1": 0.0, "sigma_sigma_hat": 0.0,
                "message": "zero phase: S_hat = 0 in a neighbourhood, the denoiser's Jacobian vanishes"}
    kappa = problem.student.kappa
    if kappa < 1:
        c = fc.quantile(kappa)
        if c > eps:
            return {"value": math.inf, "error": 0.0, "D2": math.inf, "D1": float("nan"),
                    "sigma_sigma_hat": float("nan"), "cut": c, "eps": eps,
                    "message": (f"rank cut binds above the threshold (cut {c:.6g} > eps {eps:.6g}): the denoiser's "
                                "Jacobian has an infinite (log d) Frobenius norm, RS unstable")}
    r = soft_threshold_d2(fc, eps)
    return {"value": r["D2"] / sigma_hat**2, "error": r["D2_error"] / sigma_hat**2, "D2": r["D2"], "D1": r["D1"],
            "sigma_sigma_hat": r["two_int_phi_re_g"], "rank": r["rank"], "eps": eps, "delta": delta,
            "message": ""}


def finite_d_d2(measure, delta: float, eps: float, d: int, kappa: float = 1.0) -> float:
    """(2/d^2) ||D phi(Y)||_HS^2 for the d eigenvalues of Y at the classical locations of rho_delta (quantiles
    (i - 1/2)/d), phi(y) = (y - eps)_+ keeping the top round(kappa d) (kappa < 1): a deterministic finite-d D2
    (-> the integral as d -> inf without a binding cut; grows like log d with one)."""
    fc = FreeConvolution(measure, delta)
    pieces = [(lo, hi, 0.5, 0.5) for lo, hi in fc.intervals_u]
    full = fc.adaptive(pieces, lambda y, rg: [np.ones_like(y)])["panels"]
    # fine (y, cdf) table from the accepted panels (each cut in 8), then inversion by interpolation
    sub = []
    for lo, hi, eb, ea in zip(full["lo"], full["hi"], full["eb"], full["ea"], strict=True):
        edges = np.linspace(lo, hi, 9)
        for j in range(8):
            sub.append((edges[j], edges[j + 1], eb if j == 0 else 0.0, ea if j == 7 else 0.0))
    sub = np.array(sub)
    r = fc._panel_nodes(sub[:, 0], sub[:, 1], sub[:, 2], sub[:, 3], 16)
    cdf = np.cumsum(r["w"].sum(axis=1))
    cdf /= cdf[-1]
    y_tab = np.concatenate([fc.psi(sub[:1, 0]), fc.psi(sub[:, 1])])
    mu = np.interp((np.arange(d) + 0.5) / d, np.concatenate([[0.0], cdf]), y_tab)
    f = np.maximum(mu - eps, 0.0)
    fp = (mu > eps).astype(float)
    p = int(round(kappa * d))
    if p < d:
        f[: d - p] = 0.0
        fp[: d - p] = 0.0
    return 2.0 * spectral_jacobian_sq(mu, f, fp) / d**2


def finite_d_denoiser_replicon(problem: Problem, measure, q_hat: float, m_hat: float, sigma_hat: float,
                               d: int) -> float:
    """D2/Sigma_hat^2 at finite d (:func:`finite_d_d2` at delta = sqrt(q_hat)/m_hat, eps = 2 lam/m_hat)."""
    kappa = 1.0 if problem.student.model == "direct" else min(1.0, problem.student.kappa)
    delta = math.sqrt(q_hat) / m_hat
    return finite_d_d2(measure, delta, 2.0 * problem.student.lam / m_hat, d, kappa) / sigma_hat**2


def interpolating_phase_at(measure, delta: float, eps: float, abar: float, kappa: float = 1.0,
                           d: int | None = None) -> dict[str, float]:
    """AT of the lambda -> 0+ interpolating phase (state_evolution.md section 3) at its (delta, eps).

    There the channel is the projection on the interpolation set: 2 alpha E||dg/dz||^2 Sigma^2 -> 2 alpha (K - 1)
    = 2 alpha_bar, and Sigma Sigma_hat = 2 alpha_bar = D1, so AT = D2/(2 alpha_bar) = D2/D1 <= 1 for the soft
    threshold (its quotients lie in [0, 1]). A binding rank cut (kappa < 1, cut above eps) makes D2 infinite;
    with ``d`` the finite-d value (:func:`finite_d_d2`) is returned as ``at_d``."""
    fc = FreeConvolution(measure, delta)
    out: dict[str, float] = {"at": float("nan"), "error": 0.0, "cut": float(eps)}
    cut = fc.quantile(kappa) if kappa < 1 else -math.inf
    if cut > eps:
        out.update(at=math.inf, cut=cut)
    else:
        r = soft_threshold_d2(fc, eps)
        out.update(at=r["D2"] / (2.0 * abar), error=r["D2_error"] / (2.0 * abar), d1_over_2abar=r["D1"] / (2 * abar))
    if d is not None:
        out["at_d"] = finite_d_d2(measure, delta, eps, d, kappa) / (2.0 * abar)
    return out


# --------------------------------------------------------------------------------------------------
# the channel's replicon and the product
# --------------------------------------------------------------------------------------------------
def _channel(problem: Problem, measure, channel_options: dict | None) -> SoftmaxChannel:
    """The SE's channel rule (state_evolution.channel_setup) with error estimates."""
    params, options = channel_setup(problem, measure.q0, channel_options)
    return SoftmaxChannel(params, **{**options, "estimate_error": True})


def channel_replicon(problem: Problem, alpha: float, q: float, m: float, sigma: float, measure=None,
                     channel_options: dict | None = None):
    """(2 alpha E||dg/dz||_F^2, its quadrature error, the ChannelMoments) at (q, m, Sigma), with the SE's rule."""
    measure = problem.task.target.measure(None) if measure is None else measure
    ch = _channel(problem, measure, channel_options).moments(alpha, q, m, sigma, jacobian=True)
    return ch.jac_sq, ch.jac_sq_error, ch


def channel_options_for(quadrature: str) -> dict | None:
    """The channel options of an SE point's rule name (``SEResult.quadrature``): "qmcRx2^L" -> QMC with R
    replicas of 2^L points; "ghN" -> Gauss-Hermite of order N (a point whose order was raised); a "+stein" suffix
    (a T >= 3 point re-solved with the Stein forms of the conjugates) adds ``conjugates="stein"``; None (the
    SE's default rule) for an empty name."""
    name = quadrature or ""
    forms = {"conjugates": "stein"} if name.endswith("+stein") else {}
    name = name.removesuffix("+stein")
    hit = re.fullmatch(r"qmc(\d+)x2\^(\d+)", name)
    if hit is not None:
        return {"rule": "qmc", "replicas": int(hit.group(1)), "qmc_log2": int(hit.group(2)), **forms}
    hit = re.fullmatch(r"gh(\d+)", name)
    if hit is not None:
        return {"order": int(hit.group(1)), **forms}
    return forms or None


def rs_stability(problem: Problem, point, alpha: float | None = None, d: int | None = None,
                 channel_options: dict | None = None) -> StabilityResult:
    """AT value of the RS fixed point ``point`` (an :class:`SEResult`, or (q, m, Sigma) with ``alpha``).

    The conjugates are recomputed from (q, m, Sigma) by the same channel rule as the SE's (so that the channel
    and the denoiser parts belong to one evaluation; for an SEResult re-solved with QMC, that QMC rule);
    ``d`` only for list-based targets.
    """
    if hasattr(point, "q"):
        alpha = point.alpha if alpha is None else alpha
        q, m, sigma = point.q, point.m, point.sigma
        if channel_options is None:  # a point re-solved with QMC past the peak: evaluate with its own rule
            channel_options = channel_options_for(getattr(point, "quadrature", ""))
    else:
        q, m, sigma = (float(v) for v in point)
    if alpha is None:
        raise ValueError("alpha is needed with (q, m, sigma)")
    measure = problem.task.target.measure(d)
    if q == 0.0 and m == 0.0:
        return StabilityResult(0.0, 0.0, float("nan"), 0.0, 0.0, 0.0, float("nan"), 0.0, 0.0, True,
                               "zero phase: S_hat = 0, AT = 0")
    chan, chan_err, ch = channel_replicon(problem, alpha, q, m, sigma, measure, channel_options)
    den = denoiser_replicon(problem, measure, ch.q_hat, ch.m_hat, ch.sigma_hat)
    at = chan * den["value"]
    if math.isinf(den["value"]):
        err = 0.0
    else:
        err = chan_err * den["value"] + chan * den["error"]
    ss = den["sigma_sigma_hat"]
    check = den["D1"] / ss - 1.0 if ss and math.isfinite(ss) and ss > 0 else float("nan")
    dn = den["D2"] / (sigma * ch.sigma_hat) ** 2 if sigma > 0 else float("nan")
    return StabilityResult(
        at=float(at), error=float(err), channel=float(chan), channel_error=float(chan_err),
        denoiser=float(den["value"]), denoiser_error=float(den["error"]),
        channel_normalised=float(chan * sigma**2), denoiser_normalised=float(dn),
        divergence_check=float(check), stable=bool(at < 1.0), message=den["message"],
    )


# --------------------------------------------------------------------------------------------------
# the singular part: branch switching of the prox (zero temperature)
# --------------------------------------------------------------------------------------------------
def prox_switching(problem: Problem, point, alpha: float | None = None, samples: int = 20000, seed: int = 0,
                   tau: float = 3e-3, d: int | None = None) -> dict[str, float]:
    """How often the channel's prox objective |h - z|^2/(2 Sigma) + l(h; y) has several local minima.

    Where it does, the global minimiser h*(z) jumps across a surface in (zeta, z) space, g = (h* - z)/Sigma
    jumps with it, and the zero-temperature replicon picks up a Dirac term whose square diverges (smoothed at
    inverse temperature b it is ~ b 2 alpha E[|dg|^4 delta(df)]/6): the RS fixed point is then AT-unstable
    whatever the regular value of :func:`rs_stability` (docs/theory/stability.md section 5).

    Monte Carlo over the channel's law at the point (fixed ``seed``: deterministic), Newton (the channel's
    modified Newton) from z, the interpolating point, 3 points on their line and 4 points at distance 0.3 Sigma
    around z. Returns ``multi`` (fraction of samples with >= 2 distinct local minima) with its binomial standard
    error, ``tie_density`` = P(0 < f_2 - f_1 < tau)/tau (the density of near-ties, per unit prox objective: > 0
    means a switching surface of positive measure), ``dg2_tie`` = E|g_1 - g_2|^2 over the near-ties, and
    ``two_start_misses`` (fraction where the SE channel's two starts miss the lowest minimum found).
    """
    if hasattr(point, "q"):
        alpha = point.alpha if alpha is None else alpha
        q, m, sigma = point.q, point.m, point.sigma
    else:
        q, m, sigma = (float(v) for v in point)
    task = problem.task
    if task.task == "seq2lab" and task.noise_out > 0:
        raise ValueError("prox_switching: output noise is not implemented")
    measure = problem.task.target.measure(d)
    qz = measure.q0 + task.noise / 2.0
    T = task.tokens
    n = T * (T + 1) // 2 - 1
    R3, _ = _ch._reduced_design(T)
    R2 = R3.reshape(T * T, n)
    kern = _ch._kernel(T, problem.student.beta)
    rng = np.random.default_rng(seed)
    x, eta = rng.standard_normal((samples, n)), rng.standard_normal((samples, n))
    a = math.sqrt(qz) * x
    b = (m / qz) * a + math.sqrt(max(q - m * m / qz, 0.0)) * eta
    y = _ch._softmax_rows((task.beta0 * (a @ R2.T)).reshape(samples, T, T))
    lab = kern.labels(y)
    sig = np.full(samples, float(sigma))
    c_int = (task.beta0 / problem.student.beta) * a
    starts = [b, c_int] + [b + t * (c_int - b) for t in (0.5, 1.5, -0.5)]
    for k in range(min(n, 2)):
        for sgn in (1.0, -1.0):
            e = np.zeros(n)
            e[k] = sgn * 0.3 * sigma
            starts.append(b + e)
    cs, fs = [], []
    for s0 in starts:
        r = _ch._prox_reduced(kern, b, lab, sig, [s0], 1e-12, 200)
        cs.append(r.c)
        fs.append(r.f)
    c, f = np.stack(cs, 1), np.stack(fs, 1)
    idx = np.arange(samples)
    best = np.argmin(f, axis=1)
    cb, fb = c[idx, best], f[idx, best]
    distinct = np.linalg.norm(c - cb[:, None, :], axis=2) > 1e-5 * (1.0 + np.linalg.norm(cb, axis=1))[:, None]
    fm = np.where(distinct, f, np.inf)
    f2, i2 = fm.min(axis=1), fm.argmin(axis=1)
    multi = np.isfinite(f2)
    near = multi & (f2 - fb < tau)
    dg2 = np.sum((c[idx, i2] - cb) ** 2, axis=1) / sigma**2
    two = np.where(f[:, 0] <= f[:, 1], f[:, 0], f[:, 1])
    p = float(multi.mean())
    return {"multi": p, "multi_error": math.sqrt(max(p * (1 - p), 1.0 / samples) / samples),
            "tie_density": float(near.mean() / tau), "dg2_tie": float(dg2[near].mean()) if near.any() else 0.0,
            "two_start_misses": float(np.mean(two > fb + 1e-10 * (1.0 + np.abs(fb)))), "samples": samples}


#: the fields :func:`rs_fields` adds to a record
RS_FIELDS = ("rs_at", "rs_at_error", "rs_switching", "rs_stable", "rs_message")


def rs_fields(problem: Problem, rec: dict, d: int | None = None, channel_options: dict | None = None) -> dict:
    """RS stability of one converged SE record (``theory --rs-stability``, the phase diagrams): the regular AT value
    and the prox branch-switching fraction, as the fields rs_at, rs_at_error, rs_switching, rs_stable, rs_message
    (all None, with a message, for a point that is not converged or not finite). ``channel_options`` None: the rule
    the point was solved with (its ``quadrature``)."""
    out = {**dict.fromkeys(RS_FIELDS), "rs_message": ""}
    if (rec["converged"] and rec.get("phase") == "interpolating" and problem.student.model == "factorized"
            and all(isinstance(rec.get(k), float) and math.isfinite(rec[k]) for k in ("delta", "eps"))
            and rec["delta"] > 0):
        # lambda -> 0+ below the interpolation threshold: AT = D2/(2 alpha_bar) <= 1 (interpolating_phase_at); the
        # prox is the projection on the affine set of logits that fit the labels, unique: no switching
        at = interpolating_phase_at(problem.task.target.measure(d), rec["delta"], rec["eps"], rec["alpha_bar"],
                                    problem.student.kappa)
        finite = math.isfinite(at["at"])
        out.update(rs_at=at["at"] if finite else None, rs_at_error=at["error"], rs_switching=0.0,
                   rs_stable=bool(finite and at["at"] < 1.0),
                   rs_message="interpolating phase (lambda -> 0+): AT = D2/(2 alpha_bar)" + (
                       "" if finite else f"; rank cut {at['cut']:.6g} binds above eps: AT infinite, RS unstable"))
        return out
    if not rec["converged"] or not all(
            isinstance(rec[k], float) and math.isfinite(rec[k]) for k in ("q", "m", "sigma")):
        out["rs_message"] = "not computed (point not converged or not finite)"
        return out
    point = (rec["q"], rec["m"], rec["sigma"])
    if channel_options is None:  # the rule the point was solved with (QMC past the interpolation peak)
        channel_options = channel_options_for(rec.get("quadrature", ""))
    s = rs_stability(problem, point, alpha=rec["alpha"], d=d, channel_options=channel_options)
    sw: float | None = 0.0
    if problem.task.task == "seq2lab" and problem.task.noise_out > 0:
        sw = None  # prox_switching does not implement seq2lab's output noise (seq2seq's does not enter the prox)
    elif rec["q"] > 0:
        sw = prox_switching(problem, point, alpha=rec["alpha"], samples=5000, d=d)["multi"]
    notes = [s.message] if s.message else []
    if sw is None:
        notes.append("prox branch switching not computed (seq2lab output noise): RS stability undecided")
    elif sw:
        notes.append(f"prox has several local minima for {100 * sw:.2f} % of the sequences: RS unstable")
    stable = None if sw is None and s.stable else bool(s.stable and sw == 0.0)
    out.update(rs_at=s.at if math.isfinite(s.at) else None, rs_at_error=s.error, rs_switching=sw,
               rs_stable=stable, rs_message="; ".join(notes))
    return out
