r"""Thresholds of the lambda -> 0+ ERM, in alpha_bar units (THEORY.md section 4).

* perfect recovery, direct (ridge) model: alpha_bar = 1/2;
* perfect recovery, factorised (minimum nuclear norm over the PSD cone, noiseless), rank fraction
  kappa0 < 1: with P_k(x) = (1/2 pi) int_{-2}^{x} sqrt(4 - t^2) t^k dt solve
  c - (1 - kappa0) [c P_0(c) - P_1(c)] = 0, then alpha_PR = 1/2 - (1/2)(1-kappa0)^2 [P_2(c) - c P_1(c)];
* interpolation: the train error leaves zero. In the lambda -> 0+ SE this happens where the soft
  threshold eps of the interpolating phase reaches 0 (docs/theory/state_evolution.md):
  I(delta, 0) - (delta/2) dI/ddelta(delta, 0) = Q0 + Delta/2, then alpha_bar = dI/ddelta / (4 delta).
  As Delta -> 0+ this tends to (1 - w^2/2)/2 with w the mass of mu_{S0} at 0, i.e.
  (1 + 2 kappa0 - kappa0^2)/4 for the MP target; the direct model interpolates up to alpha_bar = 1/2;
* Bayes-optimal perfect recovery (reference): kappa0 - kappa0^2/2 for kappa0 < 1, else 1/2.

Everything depends on the target only through its rank fraction kappa0 = 1 - mu_{S0}({0}) (and, for the
interpolation threshold at Delta > 0, on the full spectrum).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize

from ..problem import Problem, alpha_from_bar
from .spectral import FreeConvolution

__all__ = [
    "Thresholds",
    "thresholds",
    "perfect_recovery_factorized",
    "perfect_recovery_direct",
    "bayes_optimal",
    "interpolation_threshold",
    "interpolation_noiseless",
    "perfect_recovery_se",
    "rank_fraction",
    "negative_mass",
    "parameter_count",
]


def _semicircle_partial(k: int, x: float) -> float:
    """P_k(x) = (1/2 pi) int_{-2}^{x} sqrt(4 - t^2) t^k dt in closed form (k = 0, 1, 2).

    With t = 2 sin(theta): P_0 = [x sqrt(4-x^2)/2 + 2 theta + pi]/(2 pi), P_1 = -(4-x^2)^{3/2}/(6 pi),
    P_2 = [2 theta + pi - sin(4 theta)/2]/(2 pi), theta = arcsin(x/2).
    """
    x = min(max(x, -2.0), 2.0)
    theta = math.asin(x / 2.0)
    root = math.sqrt(max(4.0 - x * x, 0.0))
    if k == 0:
        return (0.5 * x * root + 2.0 * theta + math.pi) / (2.0 * math.pi)
    if k == 1:
        return -(root**3) / (6.0 * math.pi)
    if k == 2:
        return (2.0 * theta + math.pi - 0.5 * math.sin(4.0 * theta)) / (2.0 * math.pi)
    raise ValueError("k must be 0, 1 or 2")


def rank_fraction(measure) -> float:
    """kappa0 = 1 - mu({0}): the fraction of non-zero target eigenvalues."""
    atoms, weights = measure.point_masses()
    w0 = float(np.sum(weights[np.abs(atoms) < 1e-14]))
    return 1.0 - w0


def negative_mass(measure) -> float:
    """mu((-inf, 0)): the share of negative target eigenvalues (0 for a PSD target; the MP part is PSD)."""
    atoms, weights = measure.point_masses()
    return float(np.sum(weights[atoms < -1e-14]))


def perfect_recovery_factorized(kappa0: float) -> float:
    """alpha_bar_PR of the minimum-nuclear-norm PSD estimator (noiseless), THEORY.md section 4."""
    if kappa0 >= 1:
        return 0.5
    w = 1.0 - kappa0

    def eq(c: float) -> float:
        return c - w * (c * _semicircle_partial(0, c) - _semicircle_partial(1, c))

    c = optimize.brentq(eq, -2.0, 2.0, xtol=1e-15, rtol=1e-15)
    return 0.5 - 0.5 * w**2 * (_semicircle_partial(2, c) - c * _semicircle_partial(1, c))


def perfect_recovery_direct() -> float:
    """alpha_bar = 1/2: the number of free entries of a symmetric matrix, d^2/2."""
    return 0.5


def bayes_optimal(kappa0: float) -> float:
    """Bayes-optimal perfect-recovery threshold kappa0 - kappa0^2/2 (kappa0 < 1), else 1/2."""
    return kappa0 - kappa0**2 / 2 if kappa0 < 1 else 0.5


def interpolation_noiseless(kappa0: float) -> float:
    """Delta -> 0+ interpolation threshold of the factorised model: (1 + 2 kappa0 - kappa0^2)/4."""
    return (1 + 2 * kappa0 - kappa0**2) / 4 if kappa0 < 1 else 0.5


def interpolation_threshold(measure, noise: float, model: str = "factorized") -> float:
    """alpha_bar at which the lambda -> 0+ train error leaves zero, for logit noise Delta = ``noise``.

    Factorised: the root delta* of H(delta) = I(delta,0) - (delta/2) dI/ddelta(delta,0) - Q0 - Delta/2,
    then alpha_bar = dI/ddelta(delta*,0) / (4 delta*). H(0+) = -Delta/2 and H grows like delta^3 at small
    delta, so the relevant root is the first sign change from below, bracketed on a geometric grid.
    Delta = 0 returns the delta -> 0 limit (1 - w^2/2)/2, and so does a Delta too small for the root to be
    resolved (below ~1e-15; at Delta = 1e-12 the root is delta* ~ 1.7e-4, below the scan's first point).
    """
    if model == "direct":
        return 0.5
    w = 1.0 - rank_fraction(measure)
    psd = negative_mass(measure) == 0.0  # else I(0, 0) = int y_+^2 < Q0: H(0+) < 0 even at Delta = 0
    if noise == 0 and psd:
        return (1.0 - w * w / 2.0) / 2.0
    q_target = measure.q0 + noise / 2.0

    def h(delta: float) -> float:
        si = FreeConvolution(measure, delta).integrals(0.0)
        return si.I - 0.5 * delta * si.dI_ddelta - q_target

    def value(delta: float) -> float:
        si = FreeConvolution(measure, delta).integrals(0.0)
        return si.dI_ddelta / (4.0 * delta)

    delta = first_root_from_below(h)
    if delta is None:  # Delta too small to resolve (~1e-15): the delta -> 0 limit
        return (1.0 - w * w / 2.0) / 2.0 if psd else 0.0
    # no root (delta = inf): the PSD projection never fits the noise; interpolation only below alpha_bar -> 0
    return 0.0 if math.isinf(delta) else value(delta)


def first_root_from_below(h, lo: float = 1e-3, hi: float = 1e3, num: int = 61, floor: float = 1e-6) -> float | None:
    """The first sign change from below of H(delta) = -Delta/2 + O(delta^3) (the interpolation thresholds).

    Scanned upwards on a geometric grid [lo, hi]; where H(lo) > 0 already (Delta <~ 1e-9: the root lies below lo)
    the scan goes down to ``floor`` first. Returns the root (Brent), ``None`` when H > 0 down to ``floor`` (the
    root is at delta -> 0: Delta = 0 or too small to resolve; the caller takes the delta -> 0 limit), or
    ``math.inf`` when H stays <= 0 up to ``hi``."""
    if h(lo) > 0:
        top = lo
        for x in np.geomspace(lo / 10.0, floor, max(2, int(round(math.log10(lo / floor))))):
            if h(x) <= 0:
                return optimize.brentq(h, x, top, xtol=1e-16, rtol=1e-13)
            top = x
        return None
    grid = np.geomspace(lo, hi, num)
    for a, b in zip(grid[:-1], grid[1:], strict=True):
        if h(b) > 0:
            return optimize.brentq(h, a, b, xtol=1e-14, rtol=1e-13)
    return math.inf


def perfect_recovery_se(measure, delta: float = 5e-3) -> tuple[float, float]:
    """The SE route to perfect recovery: the noiseless lambda -> 0+ interpolating phase at small delta.

    On the interpolating phase with Delta = 0 and fixed delta, B(eps) = Q0 - I + (delta/2) dI/ddelta
    + eps dI/deps vanishes at eps ~ c delta (B(0+) = -H(delta) < 0, B > 0 beyond the root); then
    alpha_bar = dI/ddelta/(4 delta). As delta -> 0 this tends to the closed form (the small-delta
    expansion of I reproduces THEORY.md's c-equation, docs/theory/state_evolution.md) while the MSE on S,
    Q0 - 2m + q = -I + delta dI/ddelta + eps dI/deps + Q0, vanishes like delta^2.
    Returns (alpha_bar, mse) at this delta.
    """
    fc = FreeConvolution(measure, delta)
    q0 = measure.q0

    def b(eps: float) -> float:
        si = fc.integrals(eps)
        return q0 - si.I + 0.5 * delta * si.dI_ddelta + eps * si.dI_deps

    lo, hi = 1e-3 * delta, 3.0 * delta
    while b(hi) <= 0:
        hi *= 2.0
    eps = optimize.brentq(b, lo, hi, xtol=1e-16, rtol=1e-13)
    si = fc.integrals(eps)
    mse = q0 - si.I + delta * si.dI_ddelta + eps * si.dI_deps
    return si.dI_ddelta / (4.0 * delta), mse


def parameter_count(kappa: float) -> float:
    """Dimension of {S PSD, rank <= kappa d} per d^2 (alpha_bar units): kappa - kappa^2/2 (1/2 for kappa >= 1).

    n generic noisy labels cannot be fitted exactly by a manifold of lower dimension, so the training error of
    a rank-kappa d student leaves zero at alpha_bar <= parameter_count(kappa)."""
    return kappa - kappa * kappa / 2 if kappa < 1 else 0.5


@dataclass(frozen=True)
class Thresholds:
    """All thresholds, in alpha_bar units and (suffix _alpha) in alpha = n/d^2 units.

    ``interpolation`` is where the training error of the problem's student leaves zero at lambda -> 0+. For a
    narrow factorised student (kappa < 1) whose rank cut binds, the replica-symmetric value
    (``interpolation_rs``) is RS-unstable (docs/theory/stability.md) and can exceed the parameter count
    kappa - kappa^2/2; ``interpolation`` is then the smaller of the two (training stops interpolating at the
    parameter count, docs/theory/spectra.md section 2) and ``message`` says so. ``perfect_recovery_factorized``
    is None when the student's rank is below the target's (kappa < kappa0: S0 cannot be represented).
    """

    interpolation: float
    perfect_recovery_factorized: float | None
    perfect_recovery_direct: float
    bayes_optimal: float
    interpolation_alpha: float
    perfect_recovery_factorized_alpha: float | None
    perfect_recovery_direct_alpha: float
    bayes_optimal_alpha: float
    kappa0: float
    tokens: int
    kappa: float = 1.0
    interpolation_rs: float | None = None
    parameter_count: float = 0.5
    message: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def thresholds(problem: Problem, d: int | None = None) -> Thresholds:
    """Thresholds for a problem (the interpolation threshold uses its noise, model and spectrum)."""
    measure = problem.task.target.measure(d)
    kappa0 = rank_fraction(measure)
    student = problem.student
    narrow = student.model == "factorized" and student.kappa < 1
    count = parameter_count(student.kappa) if student.model == "factorized" else 0.5
    messages = []
    inter_rs = None
    if problem.task.noise_out > 0 and problem.task.task == "seq2lab":
        inter = 0.0  # output noise leaves the simplex: labels cannot be fitted exactly
        messages.append("interpolation is 0: seq2lab output noise leaves the simplex, the training error never "
                        "reaches 0")
    elif narrow:
        from .denoisers import narrow_interpolation_alpha_bar

        inter_rs = narrow_interpolation_alpha_bar(measure, problem.task.noise, student.kappa)
        inter = min(inter_rs, count)
        if inter_rs > count:
            messages.append(
                f"the replica-symmetric narrow threshold {inter_rs:.6g} exceeds the parameter count "
                f"kappa - kappa^2/2 = {count:.6g}; its rank cut binds (RS unstable, docs/theory/stability.md): "
                "interpolation is reported at the parameter count, where training stops interpolating")
    else:
        inter = interpolation_threshold(measure, problem.task.noise, student.model)
    pr_f: float | None = perfect_recovery_factorized(kappa0)
    neg = negative_mass(measure)
    if neg > 0:
        pr_f = None
        messages.append(f"no factorised perfect recovery: S0 has negative eigenvalues (a share {neg:.4g}), which the "
                        "PSD student S = W^T W / sqrt(pd) cannot represent")
    elif narrow and student.kappa < kappa0:
        pr_f = None
        messages.append(f"no perfect recovery: student rank fraction kappa = {student.kappa:g} < kappa0 = {kappa0:.4g}")
    elif narrow:
        messages.append("perfect_recovery_factorized is the full-width (convex) value; the rank constraint is "
                        "not included")
    pr_d = perfect_recovery_direct()
    bo = bayes_optimal(kappa0)
    t = problem.task.tokens
    return Thresholds(
        interpolation=inter,
        perfect_recovery_factorized=pr_f,
        perfect_recovery_direct=pr_d,
        bayes_optimal=bo,
        interpolation_alpha=alpha_from_bar(inter, t),
        perfect_recovery_factorized_alpha=None if pr_f is None else alpha_from_bar(pr_f, t),
        perfect_recovery_direct_alpha=alpha_from_bar(pr_d, t),
        bayes_optimal_alpha=alpha_from_bar(bo, t),
        kappa0=kappa0,
        tokens=t,
        kappa=float(student.kappa),
        interpolation_rs=inter_rs,
        parameter_count=count,
        message="; ".join(messages),
    )
