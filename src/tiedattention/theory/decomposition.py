r"""Error decomposition: E_over, E_under, E_approx, E_mismatch (THEORY.md section 6 item 5).

Derivation, definitions and checks: docs/theory/decomposition.md. In short, with S_inf = c_inf S0 the estimator's
alpha -> infinity saturation point (c_inf = argmin of the noisy-label test error on the ray S = c S0) and
P_K the spectral projectors of S_hat onto three groups of its eigen-directions,

* O: the outliers of recovered target modes (isolated eigenvalues of S0 whose bump of rho_delta is detached
  and above the cut -- the ``recovered`` outliers of :mod:`.spectrum`);
* B: every other direction with a non-zero eigenvalue (the learned bulk);
* N: the null space of S_hat (low-rank collapse, the rank limit),

the distance to the saturation point splits exactly into non-negative pieces,

    dist := (1/d)||S_hat - c S0||^2 = sum_K (1/d)||(S_hat - c S0) P_K||^2,
    per direction u_j (eigenvalue l_j):  ||(S_hat - c S0) u_j||^2 = (l_j - c xi_j)^2 + c^2 (a_j - xi_j^2),
    xi_j = <u_j, S0 u_j>,  a_j = ||S0 u_j||^2 >= xi_j^2,

grouped into

    E_approx = O-directions (whole error)  +  c^2 (rank-p tail of S0)               [>= 0]
    E_over   = B-directions, eigenvalue error where l_j > c xi_j                    [>= 0]
    E_under  = the rest: B eigenvalue error where l_j <= c xi_j, B eigenvector error,
               N-directions c^2 a_j minus the rank-p tail (Ky Fan)                  [>= 0]

Every part is also a pair (dq_k, dm_k) of changes of (q, m) = ((1/d)Tr S^2, (1/d)Tr S S0) away from
(c^2 Q0, c Q0), with dq_k - 2 c dm_k = part_k and sum_k (dq_k, dm_k) = (q - c^2 Q0, m - c Q0) exactly. So

    MSE on S = Q0 - 2m + q = (1 - c)^2 Q0 + sum_k (dq_k - 2 dm_k)             (exact; the first is mse_mismatch)
    e_test - e_0 = [e(S_inf) - e_0] + sum_k E_k                                  (exact)

with e(q, m) the test error as a function of (q, m) only, E_mismatch = e(S_inf) - e_0 >= 0, and E_k the Shapley
values of the game v(A) = e(P_inf + sum_{k in A} (dq_k, dm_k)) (exact in sum; each equals the linearisation
grad e(P_inf) . (dq_k, dm_k) up to second order; at c = c_0 (noisy labels, matched loss) grad e = e_q (1, -2c),
so E_k ~ e_q part_k >= 0 to first order). Every partial sum is an admissible (q, m) (Cauchy-Schwarz, in the docs).

In the SE every sum over directions is an integral over rho_delta: a direction of Y = S0 + delta Z at y carries
l(y) = s f(y), xi(y) = y - 2 delta^2 Re g_delta(y) and a(y) = delta^2 - u^2 - v^2 + 2 u xi(y), where
u + i v = omega(y) is the subordination point (u = y - delta^2 Re g_delta, v = pi delta^2 rho_delta(y)): these
are the moments of the eigenvector overlap density O(x, y) = delta^2/|x - omega(y)|^2 of Y's eigenvectors with
S0's. The finite-d estimator :func:`decompose_matrices` computes the same sums from S_hat and S0 by
diagonalisation (``debias=True``: the O(1/d) bias of its over/under split removed to first order);
:func:`model_record` applies it to the SE's own finite-d model s f(S0 + delta Z), the same-d theory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np
from scipy import integrate

from ..problem import Problem, alpha_bar
from ..targets import SpectralMeasure
from .spectral import FreeConvolution
from .spectrum import outlier_weight_limit, spike_outlier
from .state_evolution import SEResult, StateEvolution

__all__ = [
    "PARTS",
    "decompose_matrices",
    "spectral_parts",
    "rank_tail_energy",
    "shapley",
    "error_parts",
    "decompose_point",
    "saturation_point",
    "decomposition_curve",
    "estimate_record",
    "model_matrix",
    "model_record",
    "goe",
]

PARTS = ("over", "under", "approx")


# --------------------------------------------------------------------------------------------------
# the rank-p tail of the target (E_approx of a narrow student)
# --------------------------------------------------------------------------------------------------
def rank_tail_energy(measure: SpectralMeasure, kappa: float) -> float:
    r"""(1/d) sum of the smallest (1 - kappa) d values of theta_i^2: min over rank-kappa d matrices L of
    (1/d)||S0 - L||^2 (Eckart-Young). 0 for kappa >= 1. Atoms and the MP part (closed-form density) together."""
    if kappa >= 1:
        return 0.0
    # pieces of mu in the variable x^2: atoms (x^2, w) and, for the MP part, a density on [lo^2, hi^2]
    atoms, weights = measure.point_masses()
    x2 = atoms**2
    lo = hi = None
    mp_w = 0.0
    if measure.mp_kappa0 is not None and measure.mp_mass > 0:
        k0 = measure.mp_kappa0
        s, c = math.sqrt(k0), 1.0 / k0
        a_, b_ = (1 - math.sqrt(c)) ** 2, (1 + math.sqrt(c)) ** 2
        lo, hi = s * a_, s * b_
        mp_w = measure.mp_mass

        def dens(x):  # density of the continuous MP part of S0 = s M (mass min(1, kappa0) of the MP law)
            w = x / s
            return np.sqrt(np.maximum((b_ - w) * (w - a_), 0.0)) / (2 * math.pi * c * w) / s

    def mass_above(t: float, energy: bool = False) -> tuple[float, float]:
        """(mass, energy) of mu on {x^2 > t} (energy only when asked)."""
        sel = x2 > t
        m, e = float(np.sum(weights[sel])), float(np.sum(weights[sel] * x2[sel]))
        if lo is not None:
            x0 = max(math.sqrt(max(t, 0.0)), lo)
            if x0 < hi:
                m += mp_w * integrate.quad(dens, x0, hi, limit=200, epsabs=1e-14)[0]
                if energy:
                    e += mp_w * integrate.quad(lambda x: x * x * dens(x), x0, hi, limit=200, epsabs=1e-14)[0]
        return m, e

    total = measure.moment(2)
    # threshold t with mass{x^2 > t} = kappa: bisection (monotone), then the partial atom at t
    top = float(max(x2.max(initial=0.0), hi * hi if hi is not None else 0.0))
    if mass_above(0.0)[0] <= kappa:
        return 0.0
    a, b = 0.0, top
    for _ in range(200):
        t = 0.5 * (a + b)
        if mass_above(t)[0] > kappa:
            a = t
        else:
            b = t
        if b - a <= 1e-13 * max(top, 1e-300):
            break
    m_b, e_b = mass_above(b, energy=True)
    # the mass between b and a sits (in the limit) at x^2 = b: take what is missing from there
    kept = e_b + (kappa - m_b) * b
    return float(max(total - kept, 0.0))


# --------------------------------------------------------------------------------------------------
# per-direction sums -> parts
# --------------------------------------------------------------------------------------------------
def _assemble(c: float, q0: float, groups: dict[str, dict[str, float]], a_null: float, tail: float,
              k_star: int) -> dict[str, Any]:
    """groups: 'O' and 'B' with sums q = sum l^2, m = sum l xi, a = sum a, and for B the over-sums
    oq = sum_{l > c xi} (l^2 - c^2 xi^2), om = sum_{l > c xi} (l xi - c xi^2). All sums carry the 1/d."""
    O, B = groups["O"], groups["B"]
    over = (B["oq"], B["om"])
    under = (B["q"] - c * c * B["a"] - B["oq"] - c * c * (a_null - tail),
             B["m"] - c * B["a"] - B["om"] - c * (a_null - tail))
    approx = (O["q"] - c * c * O["a"] - c * c * tail, O["m"] - c * O["a"] - c * tail)
    pairs = {"over": over, "under": under, "approx": approx}
    q = O["q"] + B["q"]
    m = O["m"] + B["m"]
    out: dict[str, Any] = {"c": c, "q0": q0, "q": q, "m": m, "dist": q - 2 * c * m + c * c * q0,
                           "pairs": pairs, "k_star": int(k_star), "tail": tail, "a_null": a_null}
    for k, (dq, dm) in pairs.items():
        out[f"dist_{k}"] = dq - 2 * c * dm
        out[f"mse_{k}"] = dq - 2 * dm
    out["mse"] = q0 - 2 * m + q
    out["mse_mismatch"] = (1 - c) ** 2 * q0
    return out


def _moving_average(x: np.ndarray, w: int) -> np.ndarray:
    """Centred moving average with window w (truncated at the ends)."""
    if w <= 1 or x.size <= 1:
        return x.copy()
    k = np.ones(min(w, x.size))
    return np.convolve(x, k, mode="same") / np.convolve(np.ones_like(x), k, mode="same")


def decompose_matrices(S_hat: np.ndarray, S0: np.ndarray, c: float, n_outliers: int = 0, rank: int | None = None,
                       null_tol: float = 1e-6, smooth: int = 0, debias: bool = False) -> dict[str, Any]:
    """Finite-d estimator of the parts from a learned S_hat and the target S0 (both symmetric d x d).

    c : reference scale (c_inf from the theory); n_outliers : the recovered outliers, taken as the n_outliers
    largest eigenvalues of S_hat (they sit above its bulk); rank : the student's rank p (None: d), for the
    rank-p tail of S0; null_tol : eigenvalues with |l| <= null_tol * max|l| are the null space.
    smooth : the signal xi_j = <u_j, S0 u_j> of a bulk direction is a noisy (O(d^-1/2)) estimate of its
    conditional mean xi(y); the over/under split (sign of l_j - c xi_j, square) is nonlinear in it, which biases
    E_over by O(Var xi) = O(1/d). With smooth = w > 1 the split uses the moving average of xi over w neighbouring
    bulk directions (ordered by l), E_under staying the exact remainder (then E_under >= 0 is no longer
    guaranteed direction by direction). smooth = 0 (default): the exact per-direction split (every part >= 0 for
    any S_hat). Measured bias at d = 200 in docs/theory/decomposition.md section 5.
    debias : remove the first-order bias instead: on a bulk direction with l_j > c xi_j, E[(l_j - c xi_j)^2] =
    (l_j - c xi(y))^2 + c^2 Var xi_j, so the over part uses xi_j^2 - V_j for xi(y)^2, with the centred
    Porter-Thomas estimate V_j = (2/3) sum_i (theta_i - xi_j)^2 w_ij^4 (w_ij = <v_i, u_j>, v_i, theta_i the
    eigenpairs of S0; centred because sum_i w_ij^2 = 1). The total stays exact (E_under takes the rest); the
    over part can then be < 0 on a sample. Not combined with smooth.
    Returns the dict of :func:`spectral_parts` (dist, dist_*, mse, mse_*, pairs, q, m, q0, ...).
    """
    S_hat = np.asarray(S_hat, float)
    S0 = np.asarray(S0, float)
    d = S0.shape[0]
    if S_hat.shape != (d, d) or S0.shape != (d, d):
        raise ValueError(f"S_hat has shape {S_hat.shape}, S0 has {S0.shape}: need two d x d matrices")
    if not (np.all(np.isfinite(S_hat)) and np.all(np.isfinite(S0))):
        raise ValueError("S_hat and S0 must be finite (a diverged S_hat has no decomposition)")
    if not (math.isfinite(c) and c >= 0):
        raise ValueError(f"c must be a finite number >= 0 (got {c})")
    if isinstance(n_outliers, bool) or int(n_outliers) != n_outliers or n_outliers < 0:
        raise ValueError(f"n_outliers must be an integer >= 0 (got {n_outliers})")  # (-1 took d - 1 of them)
    if rank is not None and (isinstance(rank, bool) or int(rank) != rank or rank < 0):
        raise ValueError(f"rank must be an integer >= 0 or None (got {rank})")
    lam, U = np.linalg.eigh(0.5 * (S_hat + S_hat.T))
    top = float(np.max(np.abs(lam))) if lam.size else 0.0
    live = np.abs(lam) > null_tol * top if top > 0 else np.zeros(d, bool)
    order = np.argsort(-lam)
    k = int(n_outliers)
    out_idx = [j for j in order[:k] if live[j]]
    if len(out_idx) < k:
        raise ValueError(f"asked for {k} outliers but S_hat has only {int(live.sum())} non-zero eigenvalues")
    is_out = np.zeros(d, bool)
    is_out[out_idx] = True
    SU = S0 @ U
    xi = np.einsum("ij,ij->j", U, SU)
    a = np.einsum("ij,ij->j", SU, SU)
    q0 = float(np.sum(S0 * S0)) / d
    w = int(smooth)
    if debias:
        if w > 1:
            raise ValueError("debias and smooth are alternatives: pass one of them")
        theta, V0 = np.linalg.eigh(0.5 * (S0 + S0.T))
        W4 = (V0.T @ U) ** 4
        var = (2.0 / 3.0) * ((theta**2) @ W4 - 2 * xi * (theta @ W4) + xi**2 * W4.sum(axis=0))
    else:
        theta = np.linalg.eigvalsh(0.5 * (S0 + S0.T))
        var = np.zeros(d)
    theta2 = np.sort(theta**2)
    p = d if rank is None else int(rank)
    tail = float(np.sum(theta2[: max(d - p, 0)])) / d

    def sums(sel, w=1):
        idx = np.flatnonzero(sel)
        idx = idx[np.argsort(lam[idx])]
        li, xs, aa, vv = lam[idx], xi[idx], a[idx], var[idx]
        xm = _moving_average(xs, w)
        ov = li > c * xm
        x2 = xm * xm - vv  # estimate of xi(y)^2 (vv = 0 unless debias)
        return {"q": float(np.sum(li * li)) / d, "m": float(np.sum(li * xs)) / d, "a": float(np.sum(aa)) / d,
                "oq": float(np.sum((li * li - c * c * x2)[ov])) / d,
                "om": float(np.sum((li * xm - c * x2)[ov])) / d}

    groups = {"O": sums(is_out), "B": sums(live & ~is_out, w)}
    a_null = q0 - groups["O"]["a"] - groups["B"]["a"]
    res = _assemble(float(c), q0, groups, max(a_null, 0.0), tail, k)
    res["eigenvalues_outliers"] = lam[out_idx].tolist()
    return res


# --------------------------------------------------------------------------------------------------
# the SE side: the same sums as integrals over rho_delta
# --------------------------------------------------------------------------------------------------
def _denoiser(problem: Problem, res: SEResult) -> tuple[float, float, float, bool]:
    """(scale s, eps, delta, linear) of S_hat = s f(S0 + delta Z); linear: f(y) = y (direct model)."""
    r = problem.task.beta0 / problem.student.beta
    if problem.student.model == "direct":
        if res.phase == "interpolating":
            return r * 2 * alpha_bar(res.alpha, problem.task.tokens), 0.0, res.delta, True
        return res.m_hat / (res.sigma_hat + 4 * problem.student.lam), 0.0, res.delta, True
    scale = r if res.phase == "interpolating" else res.m_hat / res.sigma_hat
    return scale, res.eps, res.delta, False


def denoiser_pieces(problem: Problem, measure: SpectralMeasure, res: SEResult, rtol: float | None = None):
    """The estimator's spectral picture at a solved (non-zero) SE point, shared by the decomposition and
    :mod:`.strong_modes`: (scale, eps, delta, linear, fc, cut, pieces) with fc the free convolution
    rho_delta, cut the eigenvalue of Y below which S_hat has no spectrum (eps, raised to the rank-kappa d
    quantile when a narrow student's cut binds; -inf for the linear direct denoiser) and pieces the
    integration panels of rho_delta above it."""
    scale, eps, delta, linear = _denoiser(problem, res)
    fc = FreeConvolution(measure, delta) if rtol is None else FreeConvolution(measure, delta, rtol=rtol)
    if linear:
        return scale, eps, delta, linear, fc, -math.inf, [(lo, hi, 0.5, 0.5) for lo, hi in fc.intervals_u]
    cut = eps
    kappa = problem.student.kappa if problem.student.model == "factorized" else 1.0
    if kappa < 1 and fc.integrals(eps).rank > kappa:
        cut = max(eps, fc.quantile(kappa))
    return scale, eps, delta, linear, fc, cut, fc._pieces_above(cut)


def spectral_parts(problem: Problem, measure: SpectralMeasure, res: SEResult, c: float,
                   max_outlier_weight: float | None = None, rtol: float = 1e-10) -> dict[str, Any]:
    """The parts at a solved SE point (regular, interpolating or zero phase), by quadrature over rho_delta.

    An atom of mu counts as a possible outlier when its weight is <= max_outlier_weight (default
    :func:`.spectrum.outlier_weight_limit`, the criterion of :mod:`.spectrum`, so that k* is the spectrum's
    ``n_recovered`` at every d); k* counts a repeated target eigenvalue with its multiplicity.

    Returns c, q0, q, m (recomputed from the spectrum: they equal res.q, res.m at a converged point), dist,
    dist_{over,under,approx} (>= 0, exact sum = dist), mse, mse_{over,under,approx}, mse_mismatch (exact sum =
    mse), pairs {part: (dq, dm)}, k_star, tail (rank-p tail of S0), a_null (target energy in the null space)."""
    if not res.converged:
        raise FloatingPointError(f"the SE point at alpha={res.alpha:g} did not converge: {res.message}")
    q0 = measure.q0
    kappa = problem.student.kappa if problem.student.model == "factorized" else 1.0
    tail = rank_tail_energy(measure, kappa)
    zero = {"q": 0.0, "m": 0.0, "a": 0.0, "oq": 0.0, "om": 0.0}
    if res.phase == "zero":
        return _assemble(c, q0, {"O": dict(zero), "B": dict(zero)}, q0, tail, 0)
    if max_outlier_weight is None:
        max_outlier_weight = outlier_weight_limit(measure)
    scale, eps, delta, linear, fc, cut, pieces = denoiser_pieces(problem, measure, res, rtol=rtol)
    t = fc.t
    comps = fc.bulks()
    # recovered outliers: an atom alone in its component, detached (d -> inf overlap > 0), bump mean above the cut
    cand = [k for k, b in enumerate(comps) if b["atoms"].size == 1 and not b["continuous"]
            and b["mass"] <= max_outlier_weight and b["atoms"][0] != 0.0]
    recovered: set[int] = set()
    if cand:
        r = fc.adaptive([(comps[k]["u_lo"], comps[k]["u_hi"], 0.5, 0.5) for k in cand],
                        lambda y, rg: [np.ones_like(y), y])
        p = r["panels"]
        for k in cand:
            sel = (p["lo"] >= comps[k]["u_lo"]) & (p["hi"] <= comps[k]["u_hi"])
            mass, ysum = p["q"][sel, 0].sum(), p["q"][sel, 1].sum()
            _, ov = spike_outlier(measure, float(comps[k]["atoms"][0]), delta)
            if ov > 0 and mass > 0 and ysum / mass > cut:
                recovered.add(k)

    def tests(y, re_g):
        u = y - t * re_g
        v = fc.solve_v(u.ravel()).reshape(u.shape)
        xi = y - 2 * t * re_g
        a = t - u * u - v * v + 2 * u * xi
        lam = scale * (y if linear else (y - eps))
        ov = lam > c * xi
        return [lam * lam, lam * xi, a, np.where(ov, lam * lam - c * c * xi * xi, 0.0),
                np.where(ov, lam * xi - c * xi * xi, 0.0)]

    groups = {"O": dict(zero), "B": dict(zero)}
    if pieces:
        r = fc.adaptive(pieces, tests)
        p = r["panels"]
        comp_of = np.full(p["lo"].size, -1)
        for k, b in enumerate(comps):
            comp_of[(p["lo"] >= b["u_lo"] - 1e-15 * max(1.0, abs(b["u_lo"]))) & (p["hi"] <= b["u_hi"])] = k
        is_o = np.isin(comp_of, list(recovered))
        for g, sel in (("O", is_o), ("B", ~is_o)):
            tot = p["q"][sel].sum(axis=0)
            groups[g] = dict(zip(("q", "m", "a", "oq", "om"), (float(v) for v in tot), strict=True))
    a_null = q0 - groups["O"]["a"] - groups["B"]["a"]
    # target modes recovered: a value repeated k times in a list of d is k outliers (bump of mass k/d)
    k_star = sum(max(1, int(round(comps[k]["mass"] * measure.d))) if measure.d else 1 for k in recovered)
    return _assemble(c, q0, groups, a_null, tail, k_star)


# --------------------------------------------------------------------------------------------------
# test-error parts
# --------------------------------------------------------------------------------------------------
def shapley(value: Callable[[frozenset], float], players: Sequence[str]) -> dict[str, float]:
    """Shapley values of a game v on subsets of players: sum_k phi_k = v(all) - v(empty) exactly."""
    n = len(players)
    cache: dict[frozenset, float] = {}

    def v(s: frozenset) -> float:
        if s not in cache:
            cache[s] = value(s)
        return cache[s]

    out = {}
    for k in players:
        rest = [p for p in players if p != k]
        phi = 0.0
        for size in range(n):
            w = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for s in combinations(rest, size):
                s = frozenset(s)
                phi += w * (v(s | {k}) - v(s))
        out[k] = phi
    return out


def error_parts(error: Callable[[float, float], float], parts: dict[str, Any], qz: float) -> dict[str, float]:
    """Shapley parts of e(q, m) - e(c^2 Q0, c Q0) over the parts' (dq, dm) pairs (keys over, under, approx), and
    each part alone, e(P_inf + (dq_k, dm_k)) - e(P_inf) (keys <part>_alone). ``qz`` is the teacher variance
    of the error's channel (Q0 + Delta/2 for noisy labels, Q0 for clean): partial sums are admissible (q >= 0,
    m^2 <= q qz) up to rounding, which is clipped."""
    c, q0, pairs = parts["c"], parts["q0"], parts["pairs"]

    def value(s: frozenset) -> float:
        q = c * c * q0 + sum(pairs[k][0] for k in s)
        m = c * q0 + sum(pairs[k][1] for k in s)
        q = max(q, 0.0)
        lim = math.sqrt(q * qz)
        m = min(max(m, -lim), lim)
        return float(error(q, m))

    out = shapley(value, PARTS)
    base = value(frozenset())
    for k in PARTS:  # each part alone (3 more evaluations)
        out[f"{k}_alone"] = value(frozenset([k])) - base
    return out


def _record(parts: dict[str, Any], e_fun, e_clean_fun, e0: float, e0_clean: float, qz: float,
            q0: float) -> dict[str, Any]:
    c = parts["c"]
    rec: dict[str, Any] = {}
    for tag, fun, base, z in (("", e_fun, e0, qz), ("_clean", e_clean_fun, e0_clean, q0)):
        sat = float(fun(c * c * q0, c * q0))
        ph = error_parts(fun, parts, z)
        rec[f"e_test{tag}_qm"] = float(fun(max(parts["q"], 0.0), parts["m"]))
        rec[f"e_sat{tag}"] = sat
        rec[f"e_0{tag}"] = base
        for k in PARTS:
            rec[f"E_{k}{tag}"] = ph[k]
            rec[f"E_{k}_alone{tag}"] = ph[f"{k}_alone"]
        rec[f"E_mismatch{tag}"] = sat - base
    for k in ("mse", "mse_mismatch", "dist", "q", "m", "q0", "k_star", "tail", "a_null"):
        rec[k] = parts[k]
    for k in PARTS:
        rec[f"mse_{k}"] = parts[f"mse_{k}"]
        rec[f"dist_{k}"] = parts[f"dist_{k}"]
    rec["c_inf"] = c
    return rec


def _errors(se: StateEvolution, ch=None):
    ch = se.channel_final if ch is None else ch
    return (lambda q, m: ch.test_error(q, m)[0] + se.error_offset,
            lambda q, m: ch.test_error(q, m, clean=True)[0])


def _point_channel(se: StateEvolution, res: SEResult):
    """The channel rule a point was solved with: the SE raises the Gauss-Hermite order (``quadrature`` "gh24", ...)
    or re-solves with its QMC rule (past the interpolation peak at small lambda) where its own rule is not accurate
    enough, and reports e_test from that rule. e(q, m) and e_0 must come from the same rule for the parts to add up
    to e_test - e_0 (with se.channel_final they missed it by 1.5e-4 at lambda = 1e-4, alpha = 0.3)."""
    base = se.channel_final
    quad = res.quadrature or ""
    if quad.startswith("gh") and base.rule == "gh" and quad[2:].isdigit() and int(quad[2:]) != base.order:
        return se._order_solver(int(quad[2:])).channel_final
    if quad.startswith("qmc") and base.rule == "gh":  # the large-noise route's rule, or the peak's QMC re-solve
        return se._noise_solver().channel_final if se._noisy else se._rough_solver().channel_final
    return base


def _saturation_on(se: StateEvolution, ch) -> tuple[float, float, float]:
    """(e_0, c_0, e_0 clean) of :func:`saturation_point` on the channel ``ch``."""
    from scipy import optimize

    q0 = se.q0
    r = se.problem.task.beta0 / se.problem.student.beta
    out = []
    for clean in (False, True):
        res = optimize.minimize_scalar(lambda c, clean=clean: ch.test_error(c * c * q0, c * q0, clean=clean)[0],
                                       bounds=(1e-3, 4.0 * r), method="bounded", options={"xatol": 1e-9})
        out.append((float(res.fun) + (0.0 if clean else se.error_offset), float(res.x)))
    return out[0][0], out[0][1], out[1][0]


def saturation_point(se: StateEvolution) -> tuple[float, float, float]:
    from .scaling import saturation_error

    e0, c0 = saturation_error(se)
    e0c, _ = saturation_error(se, clean=True)
    return e0, c0, e0c


def decompose_point(se: StateEvolution, res: SEResult, c_inf: float | None = None,
                    saturation: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """One record: alpha, e_test, e_0, E_{over,under,approx,mismatch} (noisy test error; exact sum e_test - e_0),
    the same with suffix _clean, mse and mse_{over,under,approx,mismatch} (exact sum), dist and
    dist_{over,under,approx} (>= 0, exact sum = (1/d)||S_hat - c_inf S0||^2), k_star, converged, phase."""
    t0 = time.perf_counter()
    e0, c0, e0c = saturation if saturation is not None else saturation_point(se)
    ch = _point_channel(se, res) if res.converged else se.channel_final
    if ch is not se.channel_final:  # the point's own rule: e_0 (and c_0) on it too
        e0, c0, e0c = _saturation_on(se, ch)
    c = c0 if c_inf is None else float(c_inf)
    rec: dict[str, Any] = {"alpha": res.alpha, "alpha_bar": res.alpha_bar, "e_test": res.test_error,
                           "e_test_clean": res.test_error_clean, "converged": bool(res.converged),
                           "phase": res.phase, "message": res.message}
    if res.converged:
        e_fun, ec_fun = _errors(se, ch)
        parts = spectral_parts(se.problem, se.measure, res, c)
        qz = se.q0 + se.problem.task.noise / 2
        rec.update(_record(parts, e_fun, ec_fun, e0, e0c, qz, se.q0))
    else:
        nan = float("nan")
        rec.update({"e_0": e0, "e_0_clean": e0c, "c_inf": c})
        for k in (*PARTS, "mismatch"):
            rec[f"E_{k}"] = rec[f"E_{k}_clean"] = rec[f"mse_{k}"] = nan
            if k != "mismatch":
                rec[f"dist_{k}"] = nan
    rec["seconds"] = time.perf_counter() - t0 + res.seconds
    return rec


def decomposition_curve(problem: Problem, alphas, d: int | None = None, c_inf: float | None = None,
                        progress=None, **options) -> list[dict[str, Any]]:
    """The decomposition along a warm-started SE learning curve: one :func:`decompose_point` record per alpha.

    ``d``: dimension for list-based targets (power law, spikes); ``c_inf``: the reference scale (default: the
    argmin of the noisy test error on the ray S = c S0, the alpha -> inf limit of the ERM); ``options`` go to
    :class:`StateEvolution`."""
    se = StateEvolution(problem, d=d, **options)
    sat = saturation_point(se)
    out = []
    for res in se.learning_curve(sorted(float(a) for a in alphas)):
        out.append(decompose_point(se, res, c_inf, sat))
        if progress is not None:
            progress()
    return out


def _ray_min(fun: Callable[[float, float], float], q0: float, r: float) -> float:
    """min over c of fun(c^2 q0, c q0) (as scaling.saturation_error)."""
    from scipy import optimize

    res = optimize.minimize_scalar(lambda c: fun(c * c * q0, c * q0), bounds=(1e-3, 4.0 * r), method="bounded",
                                   options={"xatol": 1e-9})
    return float(res.fun)


def estimate_record(se: StateEvolution, S_hat: np.ndarray, S0: np.ndarray, c_inf: float, n_outliers: int,
                    saturation: tuple[float, float, float] | None = None, smooth: int = 0,
                    debias: bool = False) -> dict[str, Any]:
    """Finite-d estimator as a record with the keys of :func:`decompose_point` (E_*, mse_*, dist_*): the matrix
    parts of :func:`decompose_matrices` pushed through the e(q, m) of the SE's channel. When the sample's
    Q0_d = (1/d)||S0||^2 differs from the theory's Q0 (MP targets), the channel, e_0 and the ray are those of
    Q0_d (the test error of S_hat against this S0 is e(q, m) with teacher variance Q0_d)."""
    d = S0.shape[0]
    rank = se.problem.student.width(d) if se.problem.student.model == "factorized" else d
    lam = np.linalg.eigvalsh(0.5 * (S_hat + S_hat.T))
    top = float(np.max(np.abs(lam))) if lam.size else 0.0
    live = int(np.sum(np.abs(lam) > 1e-6 * top)) if top > 0 else 0
    k = min(int(n_outliers), live)  # a trained S_hat with fewer non-zero eigenvalues than k*: all are outliers
    parts = decompose_matrices(S_hat, S0, c_inf, n_outliers=k, rank=rank, smooth=smooth, debias=debias)
    q0 = parts["q0"]
    if abs(q0 - se.q0) <= 1e-12 * se.q0:
        e0, _, e0c = saturation if saturation is not None else saturation_point(se)
        e_fun, ec_fun = _errors(se)
    else:
        from dataclasses import replace

        from .channel import SoftmaxChannel

        base = se.channel_final
        ch = SoftmaxChannel(replace(base.params, q0=q0), order=base.order, estimate_error=False)
        off = se.error_offset

        def e_fun(q, m):
            return ch.test_error(q, m)[0] + off

        def ec_fun(q, m):
            return ch.test_error(q, m, clean=True)[0]

        r = se.problem.task.beta0 / se.problem.student.beta
        e0, e0c = _ray_min(e_fun, q0, r), _ray_min(ec_fun, q0, r)
    qz = q0 + se.problem.task.noise / 2
    rec = _record(parts, e_fun, ec_fun, e0, e0c, qz, q0)
    rec["n_outliers_used"] = k
    return rec


def model_matrix(problem: Problem, res: SEResult, S0: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw of the SE's finite-d model of the learned matrix at a solved point: S_hat = s f(S0 + delta Z),
    Z GOE from ``rng``, f the soft threshold at eps keeping at most the student's width p (the prox of the
    rank-p nuclear norm), or f(y) = y for the direct model; 0 in the zero phase."""
    S0 = np.asarray(S0, float)
    d = S0.shape[0]
    if res.phase == "zero":
        return np.zeros((d, d))
    scale, eps, delta, linear = _denoiser(problem, res)
    y, U = np.linalg.eigh(S0 + delta * goe(d, rng))
    if linear:
        lam = scale * y
    else:
        keep = y > eps
        if problem.student.model == "factorized":
            keep[: max(d - problem.student.width(d), 0)] = False  # eigh sorts ascending: the top p survive
        lam = np.where(keep, scale * (y - eps), 0.0)
    return (U * lam) @ U.T


def model_record(se: StateEvolution, res: SEResult, S0: np.ndarray, c_inf: float, n_outliers: int,
                 saturation: tuple[float, float, float] | None = None, samples: int = 8, seed: int = 0,
                 smooth: int = 0, debias: bool = False) -> dict[str, float]:
    """The finite-d estimator applied to the SE's own model of S_hat at the same d and the same S0: the mean
    over ``samples`` draws of :func:`model_matrix` (GOE streams ``default_rng([seed, i])``: deterministic) of
    :func:`estimate_record`, with ``<key>_sem`` its Monte Carlo standard error, for every numeric key.

    This is the theory side of a same-d comparison: the estimator's O(1/d) bias (the per-direction signal xi_j
    fluctuates around xi(y), and the over/under split is nonlinear in it) is the same on both sides, so
    ``estimate_record(trained S_hat) - model_record`` tests only whether the trained S_hat is distributed as the
    SE's s f(S0 + delta Z) (docs/theory/decomposition.md section 5)."""
    rows = []
    for i in range(int(samples)):
        S_hat = model_matrix(se.problem, res, S0, np.random.default_rng([int(seed), i]))
        rows.append(estimate_record(se, S_hat, S0, c_inf, n_outliers, saturation, smooth=smooth, debias=debias))
    out: dict[str, float] = {"samples": int(samples)}
    for k, v in rows[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            x = np.array([r[k] for r in rows], float)
            out[k] = float(x.mean())
            out[f"{k}_sem"] = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
    return out


def goe(d: int, rng: np.random.Generator) -> np.ndarray:
    """GOE matrix with the semicircle on [-2, 2]: off-diagonal variance 1/d, diagonal 2/d."""
    g = rng.standard_normal((d, d))
    return (g + g.T) / math.sqrt(2 * d)
