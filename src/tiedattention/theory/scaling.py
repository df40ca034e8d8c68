r"""Power-law targets: scaling laws of the excess test error (docs/theory/scaling.md).

Two routes to the curve e_test(n) - e_0 for a power-law target theta_i = C i^{-gamma} (Q0 = 1):

* **finite d** (:func:`finite_d_curve`): the state evolution (SE) at dimension d along alpha = n/d^2, with a
  lambda rule per point (optimal: bounded Brent minimisation of the test error over log lambda, warm started;
  fixed; power);
* **scaling limit** (:class:`ScalingLimit`, ``d = inf``): d -> infinity at fixed nu = n/d = alpha d with
  lambda = lambda_t / sqrt(d). In these variables (units of sqrt(d) for eigenvalues)

      theta_i / sqrt(d) -> t_i = i^{-gamma} / sqrt(zeta(2 gamma)),    delta / sqrt(d) -> tau,
      eps / sqrt(d) -> eps_t,   (q_hat, m_hat, sigma_hat) d -> channel moments at alpha = nu,

  every target mode with t_i > tau is an isolated spike of Y = S0 + delta Z at y_i = t_i + tau^2/t_i with
  squared eigenvector overlap 1 - tau^2/t_i^2 (BBP), the undetected modes and the noise form a semicircle bulk
  of radius 2 tau, and that bulk contributes d tau^2 h(eps_t/tau) to (1/d)||S_hat||^2: finite only when
  eps_t >= 2 tau (bulk cut). The matrix side is then a finite sum over the recovered modes,

      q = s^2 sum (y_i - eps_t)^2,  m = s sum (y_i - eps_t) t_i (1 - tau^2/t_i^2),
      Sigma = 2 sum (y_i - eps_t)/t_i / sigma_hat',   s = m_hat'/sigma_hat',

  and the channel side is the ordinary one at alpha = nu (its moments are linear in alpha).

e_0 (:func:`saturation_error`) is the minimum of the test error over the ray S = c S0, which is the alpha -> inf
value of the ERM with the matched loss (its population objective is the noisy-label test error).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from ..errors import ParameterError
from ..problem import Problem
from ..targets import PowerLawTarget
from .denoisers import MatrixSide
from .spectral import _Kernel
from .state_evolution import SEResult, StateEvolution

__all__ = [
    "LamRule",
    "parse_lam_rule",
    "PowerLawModes",
    "ScalingLimit",
    "saturation_error",
    "finite_d_curve",
    "limit_curve",
    "fit_exponent",
    "predicted_exponent",
    "k_star_finite",
]


# --------------------------------------------------------------------------------------------------
# lambda rules
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LamRule:
    """How lambda is chosen at each n.

    kind = "optimal": minimise the test error over lambda at every point;
    kind = "fixed":   lambda = value (finite d only);
    kind = "power":   lambda = value * nu^p / sqrt(d), nu = n/d (the scaling-limit variables: lambda_t = value nu^p).
    """

    kind: str
    value: float = 0.0
    p: float = 0.0

    def lam(self, nu: float, d: float) -> float:
        if self.kind == "fixed":
            return self.value
        if self.kind == "power":
            return self.value * nu**self.p / math.sqrt(d)
        raise ValueError("the optimal rule has no closed-form lambda")

    @property
    def spec(self) -> str:
        if self.kind == "optimal":
            return "optimal"
        if self.kind == "fixed":
            return f"fixed:{self.value:g}"
        return f"power:{self.p:g}:{self.value:g}"


def parse_lam_rule(text: str) -> LamRule:
    """'optimal' | 'fixed:LAM' | 'power:P[:LAM1]' (lambda = LAM1 nu^P / sqrt(d), LAM1 = 1 by default)."""
    kind, _, rest = str(text).strip().partition(":")
    try:
        if kind == "optimal" and not rest:
            return LamRule("optimal")
        if kind == "fixed":
            v = float(rest)
            if not (math.isfinite(v) and v > 0):
                raise ValueError
            return LamRule("fixed", value=v)
        if kind == "power":
            parts = rest.split(":")
            p = float(parts[0])
            v = float(parts[1]) if len(parts) > 1 else 1.0
            if not (math.isfinite(p) and math.isfinite(v) and v > 0) or len(parts) > 2:
                raise ValueError
            return LamRule("power", value=v, p=p)
    except ValueError:
        pass
    raise ParameterError("lam-rule", f"cannot read '{text}' (expected optimal, fixed:LAM or power:P[:LAM1])")


# --------------------------------------------------------------------------------------------------
# the target's modes in scaling units
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerLawModes:
    """t_i = i^{-gamma}/sqrt(Z), Z = sum_{i <= R} i^{-2 gamma} (R = cutoff, or infinity: Z = zeta(2 gamma))."""

    gamma: float
    cutoff: int | None = None

    def __post_init__(self) -> None:
        if self.cutoff is None and not self.gamma > 0.5:
            raise ParameterError("target", f"the d = inf limit needs gamma > 1/2 without a cutoff (got {self.gamma})")

    @property
    def norm(self) -> float:
        if self.cutoff is None:
            return float(special.zeta(2 * self.gamma, 1))
        return float(np.sum(np.arange(1, self.cutoff + 1, dtype=float) ** (-2 * self.gamma)))

    def theta(self, k: int) -> np.ndarray:
        i = np.arange(1, k + 1, dtype=float)
        return i ** (-self.gamma) / math.sqrt(self.norm)

    def count_above(self, t: float) -> int:
        """#{i : t_i > t}."""
        if t <= 0:
            return self.cutoff if self.cutoff is not None else np.iinfo(np.int64).max
        k = int(math.floor((t * t * self.norm) ** (-1.0 / (2 * self.gamma))))
        th = self.theta(k + 2)[k - 1 : k + 2] if k >= 1 else self.theta(2)
        # guard the floor against rounding: adjust by at most one
        while k >= 1 and th[0] <= t:
            k -= 1
            th = self.theta(k + 2)[max(k - 1, 0) : k + 2]
        if self.cutoff is not None:
            k = min(k, self.cutoff)
        return max(k, 0)

    def tail_energy(self, k: int) -> float:
        """sum_{i > k} t_i^2 (the energy of the modes beyond k; Q0 = 1 in total)."""
        if self.cutoff is not None:
            if k >= self.cutoff:
                return 0.0
            i = np.arange(k + 1, self.cutoff + 1, dtype=float)
            return float(np.sum(i ** (-2 * self.gamma)) / self.norm)
        return float(special.zeta(2 * self.gamma, k + 1) / self.norm)


# --------------------------------------------------------------------------------------------------
# scaling limit d -> infinity
# --------------------------------------------------------------------------------------------------
@dataclass
class LimitPoint:
    """A scaling-limit SE point: the SEResult (alpha field = nu = n/d) and what the spikes give."""

    nu: float
    lam_t: float  # lambda sqrt(d)
    ratio: float  # eps_t / tau (>= 2: the noise bulk is cut)
    k_star: int
    under: float  # energy of the unrecovered target modes, sum_{i > k*} t_i^2
    result: SEResult


class ScalingLimit(StateEvolution):
    """State evolution of a power-law target in the scaling limit d -> infinity (module docstring).

    The fixed-point machinery (Anderson iteration in log coordinates, zero phase, quadrature error estimates) is
    the finite-d one; only the matrix side differs. ``solve(nu, ratio=r)`` fixes eps_t = r tau; ``solve(nu,
    lam_t=l)`` fixes lambda sqrt(d) = l (eps_t = 2 l / m_hat'), and a point where the noise bulk would be fitted
    (eps_t < 2 tau: excess error of order d) is reported as not converged.
    """

    def __init__(self, problem: Problem, max_modes: int = 20_000_000, **options: Any):
        target = problem.task.target
        if not isinstance(target, PowerLawTarget):
            raise ParameterError("target", "the scaling limit is implemented for power-law targets")
        if problem.student.model != "factorized" or problem.student.kappa < 1:
            raise ParameterError("model", "the scaling limit is implemented for the factorised student, kappa >= 1")
        super().__init__(problem, d=2, **options)  # measure unused; Q0 = 1 as for every power law
        self.modes = PowerLawModes(target.gamma, target.cutoff)
        self.q0 = 1.0
        self.max_modes = max_modes
        self._ratio: float | None = 2.0
        self._lam_t: float | None = None

    # the matrix side in scaling units ----------------------------------------------------------
    def spikes(self, tau: float, eps_t: float) -> dict[str, Any]:
        k = self.modes.count_above(tau)
        if k > self.max_modes:
            raise FloatingPointError(f"{k} detected modes exceed max_modes={self.max_modes}")
        t = self.modes.theta(k)
        y = t + tau * tau / t
        keep = y > eps_t
        t, y = t[keep], y[keep]
        return {"theta": t, "y": y, "overlap": 1.0 - tau * tau / (t * t), "k_star": int(t.size)}

    def limit_side(self, q_hat: float, m_hat: float, sigma_hat: float) -> MatrixSide:
        if not (q_hat > 0 and m_hat > 0 and sigma_hat > 0):
            raise FloatingPointError(f"conjugates left the admissible region ({q_hat:g}, {m_hat:g}, {sigma_hat:g})")
        tau = math.sqrt(q_hat) / m_hat
        eps_t = self._ratio * tau if self._ratio is not None else 2.0 * self._lam_t / m_hat
        if eps_t < 2.0 * tau * (1 - 1e-12):
            raise FloatingPointError(f"noise bulk fitted (eps_t/tau = {eps_t / tau:.3g} < 2): excess of order d")
        sp = self.spikes(tau, eps_t)
        s = m_hat / sigma_hat
        f = sp["y"] - eps_t
        q = s * s * float(np.sum(f * f))
        m = s * float(np.sum(f * sp["theta"] * sp["overlap"]))
        sigma = 2.0 * float(np.sum(f / sp["theta"])) / sigma_hat
        return MatrixSide(q, m, sigma, tau, eps_t, 0.0, s * float(np.sum(f)), 0.0, eps_t)

    def _map(self, alpha: float, x: np.ndarray, final: bool = False):
        q, m, sigma = x
        ch = (self.channel_final if final else self.channel).moments(alpha, q, m, sigma)
        ms = self.limit_side(ch.q_hat, ch.m_hat, ch.sigma_hat)
        return np.array([ms.q, ms.m, ms.sigma]), ch, ms

    def interpolation_alpha_bar(self) -> float:  # lambda = 0 is not a scaling-limit rule
        return 0.0

    def solve_point(self, nu: float, ratio: float | None = None, lam_t: float | None = None,
                    init: Any = None) -> LimitPoint:
        if (ratio is None) == (lam_t is None):
            raise ValueError("give exactly one of ratio, lam_t")
        if ratio is not None and ratio < 2:
            raise ParameterError("ratio", f"eps/delta must be >= 2 in the scaling limit (got {ratio})")
        self._ratio, self._lam_t = ratio, lam_t
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = self.solve(nu, init=init)
        return self._point(nu, res)

    def _point(self, nu: float, res: SEResult) -> LimitPoint:
        if res.phase == "failed" or not np.isfinite(res.delta):
            return LimitPoint(nu, math.nan, math.nan, 0, 1.0, res)
        tau, eps_t = res.delta, res.eps
        if res.phase == "zero":
            return LimitPoint(nu, self._lam_t if self._lam_t is not None else math.nan, math.nan, 0, 1.0, res)
        sp = self.spikes(tau, eps_t)
        lam_t = eps_t * res.m_hat / 2.0
        res.objective = nu * res.train_error + lam_t * (res.m_hat / res.sigma_hat) * float(np.sum(sp["y"] - eps_t))
        k = sp["k_star"]
        return LimitPoint(nu, lam_t, eps_t / tau, k, self.modes.tail_energy(k), res)

    def solve_optimal(self, nu: float, init: Any = None, r_max: float = 12.0, xatol: float = 1e-3,
                      h: float = 1e-3) -> LimitPoint:
        """Minimise the test error over eps_t/tau in [2, r_max], warm-started.

        The boundary r = 2 (bulk edge at the threshold) is taken when the error increases from it
        (f(2 + h) >= f(2): a boundary minimum, the case in every setting we ran); otherwise bounded Brent."""
        cache: dict[float, LimitPoint] = {}

        def f(r: float) -> float:
            pt = self.solve_point(nu, ratio=r, init=init)
            cache[r] = pt
            return pt.result.test_error if pt.result.converged else math.inf

        if not f(2.0 + h) >= f(2.0):
            optimize.minimize_scalar(f, bounds=(2.0, r_max), method="bounded", options={"xatol": xatol})
        return min(cache.values(), key=lambda p: p.result.test_error if p.result.converged else math.inf)


# --------------------------------------------------------------------------------------------------
# e_0 and k*
# --------------------------------------------------------------------------------------------------
def saturation_error(se: StateEvolution, clean: bool = False) -> tuple[float, float]:
    """(e_0, c_0): min over c of the test error of S = c S0 (q = c^2 Q0, m = c Q0), and its argmin."""
    q0 = se.q0
    r = se.problem.task.beta0 / se.problem.student.beta

    def e(c: float) -> float:
        return se.channel_final.test_error(c * c * q0, c * q0, clean=clean)[0]

    res = optimize.minimize_scalar(e, bounds=(1e-3, 4.0 * r), method="bounded", options={"xatol": 1e-9})
    return float(res.fun) + (0.0 if clean else se.error_offset), float(res.x)


def k_star_finite(se: StateEvolution, res: SEResult) -> int:
    """Recovered target modes at a finite-d SE point: spikes detached from the rest of the spectrum
    (delta^2 int dnu/(theta - x)^2 < 1) whose outlier position theta + delta^2 g_nu(theta) lies above the cut."""
    if res.phase != "regular" or not res.converged:
        return 0
    theta = np.unique(se.measure.atoms[se.measure.atoms > 0])[::-1]
    g, f = _Kernel(se.measure).rest_sums(theta)
    t = res.delta**2
    ok = (t * f < 1.0) & (theta + t * g > res.eps)
    return int(np.sum(ok))


# --------------------------------------------------------------------------------------------------
# curves
# --------------------------------------------------------------------------------------------------
def _rec(n, d, nu, lam, res: SEResult, e0, k, extra=None) -> dict[str, Any]:
    out = {
        "n": n, "d": d, "nu": nu, "alpha": res.alpha if d is not None else None, "lam": lam,
        "test_error": res.test_error, "e0": e0, "excess": res.test_error - e0, "mse": res.mse,
        "k_star": k, "delta": res.delta, "eps": res.eps, "q": res.q, "m": res.m, "sigma": res.sigma,
        "converged": res.converged, "phase": res.phase, "iterations": res.iterations,
        "err_test_error": res.errors.get("test_error", math.nan), "seconds": res.seconds,
    }
    out.update(extra or {})
    return out


def limit_curve(problem: Problem, n_over_d, rule: LamRule, progress=None, **options) -> list[dict[str, Any]]:
    """Scaling-limit curve along nu = n/d (d = inf). Records carry lam_t = lambda sqrt(d) instead of lambda."""
    if rule.kind == "fixed":
        raise ParameterError("lam-rule", "a fixed lambda is not a scaling-limit rule (use optimal or power:P)")
    sl = ScalingLimit(problem, **options)
    e0, c0 = saturation_error(sl)
    out, prev = [], None
    for nu in sorted(float(v) for v in n_over_d):
        t0 = time.perf_counter()
        if rule.kind == "optimal":
            pt = sl.solve_optimal(nu, init=prev)
        else:
            pt = sl.solve_point(nu, lam_t=rule.value * nu**rule.p, init=prev)
        res = pt.result
        if res.converged and res.phase == "regular":
            prev = res
        rec = _rec(None, None, nu, None, res, e0, pt.k_star,
                   {"lam_t": pt.lam_t, "ratio": pt.ratio, "under_energy": pt.under, "c0": c0})
        rec["seconds"] = time.perf_counter() - t0
        rec["message"] = res.message
        out.append(rec)
        if progress is not None:
            progress()
    return out


def finite_d_curve(problem: Problem, d: int, alphas, rule: LamRule, progress=None, xatol: float = 0.03,
                   **options) -> list[dict[str, Any]]:
    """Finite-d SE along alphas (n = alpha d^2) with the lambda rule; optimal: bounded Brent over log lambda in
    [log lam_guess - 2.5, log lam_guess + 2.5], lam_guess = sqrt(q_hat) of the previous point (the eps = 2 delta
    rule: lambda = eps m_hat/2 = delta m_hat), warm started."""
    import warnings

    from ..errors import ConvergenceWarning

    e0 = c0 = None
    out, prev = [], None
    lam_guess = None
    for alpha in sorted(float(a) for a in alphas):
        t0 = time.perf_counter()
        nu = alpha * d
        if rule.kind == "optimal":
            cache: dict[float, tuple[SEResult, StateEvolution]] = {}
            g = lam_guess if lam_guess is not None else 0.1 * math.sqrt(alpha)

            def f(loglam: float, start=prev, alpha=alpha, cache=cache) -> float:
                se = StateEvolution(problem.replace_student(lam=math.exp(loglam)), d=d, **options)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    res = se.solve(alpha, init=start)
                cache[loglam] = (res, se)
                return res.test_error if res.converged else math.inf

            optimize.minimize_scalar(f, bounds=(math.log(g) - 2.5, math.log(g) + 2.5), method="bounded",
                                     options={"xatol": xatol})
            loglam = min(cache, key=lambda k: cache[k][0].test_error if cache[k][0].converged else math.inf)
            res, se = cache[loglam]
            lam = math.exp(loglam)
        else:
            lam = rule.lam(nu, d)
            se = StateEvolution(problem.replace_student(lam=lam), d=d, **options)
            res = se.solve(alpha, init=prev)
        if e0 is None:
            e0, c0 = saturation_error(se)
        if res.converged and res.phase == "regular":
            prev = res
            lam_guess = math.sqrt(res.q_hat) if rule.kind == "optimal" else None
        rec = _rec(alpha * d * d, d, nu, lam, res, e0, k_star_finite(se, res), {"c0": c0})
        rec["seconds"] = time.perf_counter() - t0
        rec["message"] = res.message
        out.append(rec)
        if progress is not None:
            progress()
    return out


# --------------------------------------------------------------------------------------------------
# exponents
# --------------------------------------------------------------------------------------------------
def fit_exponent(n, excess, level: float = 0.95) -> dict[str, float]:
    """Least squares of log(excess) on log(n): excess ~ n^{-f}. Returns f, its CI (Student t, ordinary least
    squares: the residuals of a stepwise curve are correlated, so the CI is a lower bound of the uncertainty)."""
    x = np.log(np.asarray(n, float))
    y = np.log(np.asarray(excess, float))
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3:
        raise ValueError(f"need at least 3 points with positive excess to fit an exponent (got {x.size})")
    slope, intercept, r, p, se = stats.linregress(x, y)
    tq = stats.t.ppf(0.5 + level / 2, x.size - 2)
    return {"fitted_exponent": float(-slope), "fitted_exponent_ci": [float(-slope - tq * se), float(-slope + tq * se)],
            "stderr": float(se), "points": int(x.size), "intercept": float(intercept)}


def predicted_exponent(gamma: float, rule: LamRule, kappa: float = 1.0, d_inf: bool = False) -> tuple[float, str]:
    """The derived exponent f of e_test - e_0 ~ n^{-f} and the regime's name (docs/theory/scaling.md, section 4),
    for 1 << k*(n) << d (finite d) or every n (d = inf). gamma > 1/2."""
    base = 1.0 - 1.0 / (2.0 * gamma)
    if kappa < 1 and not d_inf:
        return 0.0, "width-limited (kappa < 1): excess saturates at the rank-p tail ~ p^(1-2 gamma)"
    if rule.kind == "optimal":
        return base, "optimal lambda: f = 1 - 1/(2 gamma)"
    if rule.kind == "fixed":
        return 1.0, "under-regularised (fixed lambda, eps/delta -> 0): noise bulk fitted, f = 1"
    p = rule.p
    if p > 0.5:
        if p >= 1:
            return 0.0, "over-regularised with p >= 1: nothing more is learned"
        return 2.0 * (1.0 - p) * base, "over-regularised (lambda ~ n^p, p > 1/2): f = 2(1-p)(1 - 1/(2 gamma))"
    if p == 0.5:
        return base, "critical (lambda ~ n^(1/2), eps/delta -> const): f = 1 - 1/(2 gamma)"
    return 1.0, "under-regularised (lambda ~ n^p, p < 1/2): noise bulk fitted, f = 1"
