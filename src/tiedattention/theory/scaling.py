r"""Power-law targets: scaling laws of the excess test error (docs/theory/scaling.md).

Two routes to the curve e_test(n) - e_0 for a power-law target theta_i = C i^{-gamma} (Q0 = 1):

* **finite d** (:func:`finite_d_curve`, :func:`finite_d_points`): the state evolution (SE) at dimension d along
  alpha = n/d^2, with a lambda rule per point (optimal: minimise the test error over log lambda; fixed;
  power). The fast route (:class:`FastFiniteD`; the default wherever it applies: factorised, kappa >= 1) builds
  the spectral side from a few exact free convolutions in delta (one :class:`~.spectral.ThresholdFamily` each,
  interpolated in t = delta^2 with the exact heat-flow derivatives) and continues (x, delta, log lambda) along
  the curve; the plain route solves a fresh SE per lambda;
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
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from ..errors import ConvergenceWarning, ParameterError
from ..problem import Problem
from ..targets import PowerLawTarget
from .denoisers import MatrixSide, _spectral_side
from .spectral import FreeConvolution, SpectralIntegrals, ThresholdFamily, _Kernel
from .state_evolution import SEResult, StateEvolution

# The scaling routes keep the Gauss-Hermite order 12 of their recorded runs and no per-point fixed-point error
# estimate (its low-order re-solve, and a raised order at some lambda, would cost ~1.6x and make the test error a
# non-smooth function of lambda for the optimal-lambda search). Measured: order 20 moves the fitted exponents by
# <= 1.1e-3 (docs/theory/scaling.md, section 7). Options passed by the caller override these.
SCALING_SE_OPTIONS: dict[str, Any] = {"channel_options": {"order": 12}, "fixed_point_errors": False, "accuracy": None}


def _scaling_options(options: dict[str, Any]) -> dict[str, Any]:
    return {**SCALING_SE_OPTIONS, **options}

__all__ = [
    "LamRule",
    "parse_lam_rule",
    "PowerLawModes",
    "ScalingLimit",
    "saturation_error",
    "finite_d_curve",
    "finite_d_points",
    "FastFiniteD",
    "limit_curve",
    "recovery_kink",
    "fit_exponent",
    "predicted_exponent",
    "k_star_finite",
    "recovered_modes_finite",
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

    _order_checks = False

    def __init__(self, problem: Problem, max_modes: int = 20_000_000, **options: Any):
        options = _scaling_options(options)
        target = problem.task.target
        if not isinstance(target, PowerLawTarget):
            raise ParameterError("target", "the scaling limit is implemented for power-law targets")
        if problem.student.model != "factorized":
            raise ParameterError("model", "the scaling limit is implemented for the factorised student, kappa >= 1")
        if problem.student.kappa < 1:  # (was reported as --model)
            raise ParameterError("kappa", "the scaling limit is implemented for kappa >= 1 (a narrow student's "
                                          "excess saturates at its rank-p tail: use a finite --d; "
                                          f"got {problem.student.kappa})")
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

    def _map(self, alpha: float, x: np.ndarray, final: bool = False, cond_var: float | None = None):
        q, m, sigma = x
        ch = (self.channel_final if final else self.channel).moments(alpha, q, m, sigma, cond_var=cond_var)
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


def recovered_modes_finite(se: StateEvolution, res: SEResult) -> list[dict[str, float]]:
    """The recovered target modes at a finite-d SE point, strongest first: eigenvalues theta of S0 detached from
    the rest nu of the spectrum (overlap 1 - delta^2 int dnu/(theta - x)^2 > 0) whose outlier position
    y = theta + delta^2 g_nu(theta) (units of Y/m_hat = S0 + delta Z) lies above the threshold eps. Each entry:
    theta, y, overlap (squared, with the target eigenvector) and eigenvalue = s (y - eps) of S_hat, s = m_hat/sigma_hat
    (theory/spectrum.py, docs/theory/spectra.md section 4; these are the d -> inf spike formulas against the rest
    of the finite-d spectrum, as in :func:`tiedattention.theory.spectrum.outlier_alphas`). A narrow student
    (kappa < 1) keeps only the top kappa d eigenvalues: y must also lie above the cut c = max(eps, y_kappa),
    y_kappa the (1 - kappa)-quantile of rho_delta (one free convolution)."""
    if res.phase != "regular" or not res.converged:
        return []
    theta = np.unique(se.measure.atoms[se.measure.atoms > 0])[::-1]
    g, f = _Kernel(se.measure).rest_sums(theta)
    t = res.delta**2
    y = theta + t * g
    cut = res.eps
    kappa = se.problem.student.kappa
    if kappa < 1 and res.rank > kappa * (1 - 1e-9):  # the rank constraint binds (rank = kappa at the point)
        cut = max(cut, FreeConvolution(se.measure, res.delta).quantile(kappa))
    ok = (t * f < 1.0) & (y > cut)
    s = res.m_hat / res.sigma_hat
    return [{"theta": float(a), "y": float(b), "overlap": float(1.0 - t * c), "eigenvalue": float(s * (b - res.eps))}
            for a, b, c in zip(theta[ok], y[ok], f[ok], strict=True)]


def k_star_finite(se: StateEvolution, res: SEResult) -> int:
    """Recovered target modes at a finite-d SE point (the length of :func:`recovered_modes_finite`)."""
    return len(recovered_modes_finite(se, res))


# --------------------------------------------------------------------------------------------------
# finite d, fast route: the spectral side from a few exact free convolutions ("nodes") in delta
# --------------------------------------------------------------------------------------------------
class _Nodes:
    """Exact spectral data at a few delta: one :class:`ThresholdFamily` per node (any eps >= 0 at its delta).

    Between nodes the integrals (j2, j1, jg) are interpolated in t = delta^2 by the cubic Hermite polynomial
    through the last two nodes, with the exact t-derivatives of the free heat flow (one node: the tangent).
    At a node the values are the node's own: exact.
    """

    def __init__(self, measure):
        self.measure = measure
        self.nodes: list[tuple[float, ThresholdFamily]] = []
        self.built = 0  # free convolutions constructed (the expensive step)

    def clear(self) -> None:
        self.nodes = []

    def add(self, delta: float) -> None:
        fam = FreeConvolution(self.measure, float(delta)).threshold_family(0.0)
        self.nodes.append((float(delta) ** 2, fam))
        self.built += 1
        if len(self.nodes) > 2:
            self.nodes.pop(0)

    @property
    def last_delta(self) -> float:
        return math.sqrt(self.nodes[-1][0])

    #: beyond this many node gaps from the last node the pair's cubic is not used, only the last node's tangent
    FAR = 4.0

    def far(self, t: float) -> bool:
        """Whether t lies more than FAR gaps |t_last - t_other| from the last node (or there is one node). The
        cubic through two nodes a tiny gap apart (the last two nodes of a converged solve: the gap is the last
        outer step) extrapolates their derivatives' difference quotient, quadrature noise over the gap, and is
        garbage a few per cent away: a later solve from there (an exact search trial, another lambda) failed
        its 80 iterations on it and went to the plain solver (d = 60, nu = 20: 5 of 6 trials 0.25 apart in log
        lambda, ~2 s each instead of ~0.3 s)."""
        if len(self.nodes) == 1:
            return True
        ta, tb = self.nodes[-1][0], self.nodes[0][0]
        return abs(t - ta) > self.FAR * abs(ta - tb)

    def at(self, delta: float, eps: float):
        t = delta * delta
        ta, fa = self.nodes[-1]
        a = fa.at(eps)
        if t == ta or self.far(t):
            vals = a.values() + (t - ta) * a.d_t()
            return vals, a
        tb, fb = self.nodes[0]
        b = fb.at(eps)
        h = ta - tb
        s = (t - tb) / h
        h00, h10 = (1 + 2 * s) * (1 - s) ** 2, s * (1 - s) ** 2
        h01, h11 = s * s * (3 - 2 * s), s * s * (s - 1)
        vals = h00 * b.values() + h10 * h * b.d_t() + h01 * a.values() + h11 * h * a.d_t()
        return vals, a


class FastFiniteD(StateEvolution):
    """The finite-d state evolution with the spectral side built from a few exact free convolutions.

    The matrix side depends on the conjugates only through (delta, eps) (and scalar factors), and one
    :class:`FreeConvolution` at delta gives the soft-threshold integrals at every eps, with their exact
    derivatives in t = delta^2 (:class:`ThresholdIntegrals`). So the fixed point is found by an outer loop on
    delta: solve the SE with the spectral side interpolated from the nodes (channel calls only), add an exact
    node at the delta of that solution, repeat. Near a node the interpolation error is O(dt^2) with one node and
    O(dt^4) with two, so delta converges superlinearly; the loop stops when the interpolation error at the
    solution's delta, estimated as g^2 (one node) or g^2 (g + h)^2 (two; g = distance to the last node, h =
    between the nodes, relative in t), is below ``interp_tol`` (1e-20: rounding level), i.e. where the spectral
    side *is* the exact one; the returned :class:`SEResult` is the exact SE point (converged to ``tol`` with the
    base class's own final evaluation and error estimates).

    ``eps`` is fixed either by lambda (eps = 2 lambda / m_hat) or by the ratio r = eps/delta (``ratio``), the
    natural variable of the optimal-lambda rule (then lambda = eps m_hat/2 is an output).
    Factorised students with kappa >= 1 only.
    """

    _order_checks = False

    def __init__(self, problem: Problem, d: int, interp_tol: float = 1e-20, max_outer: int = 12, **options: Any):
        options = _scaling_options(options)
        self.check_applies(problem)
        super().__init__(problem, d=d, **options)
        self._d, self._options = d, options
        self.nodes = _Nodes(self.measure)
        self.interp_tol = interp_tol
        self.max_outer = max_outer
        self.ratio: float | None = None
        self.lam = problem.student.lam
        self.channel_calls = 0
        self._e0: float | None = None  # saturation error (the basin scan's flatness scale), computed when needed

    @staticmethod
    def check_applies(problem: Problem) -> None:
        """ParameterError naming the parameter where the fast route does not apply: the direct (ridge) student,
        whose denoiser is not a threshold of Y, and narrow students (kappa < 1), whose rank cut c = max(eps,
        y_kappa(delta)) moves with delta (the nodes interpolate integrals above a fixed threshold, and the t
        derivatives at fixed c miss the quantile's own motion). Both are solved by the plain route."""
        if problem.student.model != "factorized":
            raise ParameterError("model", f"the fast finite-d route needs the factorised student (got "
                                 f"{problem.student.model}); use the plain route (route auto or plain)")
        if problem.student.kappa < 1:
            raise ParameterError("kappa", f"the fast finite-d route needs kappa >= 1 (got {problem.student.kappa:g}: "
                                 "the rank cut of a narrow student is not interpolated by its nodes); use the plain "
                                 "route (route auto or plain)")

    # the matrix side from the nodes -----------------------------------------------------------------
    def matrix_side(self, q_hat: float, m_hat: float, sigma_hat: float) -> MatrixSide:
        if not (q_hat > 0 and m_hat > 0 and sigma_hat > 0):
            raise FloatingPointError(f"conjugates left the admissible region ({q_hat:g}, {m_hat:g}, {sigma_hat:g})")
        delta = math.sqrt(q_hat) / m_hat
        eps = self.ratio * delta if self.ratio is not None else 2.0 * self.lam / m_hat
        (j2, j1, jg), node = self.nodes.at(delta, eps)
        # the interpolated values replace the node's; rank and error are the node's (exact at the node)
        si = SpectralIntegrals(delta, eps, j2, 4.0 * delta * jg, -2.0 * j1, node.rank, 1.0, node.error, 0, eps)
        return _spectral_side(si, m_hat, sigma_hat, delta, eps)

    def _map(self, alpha: float, x: np.ndarray, final: bool = False, cond_var: float | None = None):
        q, m, sigma = x
        # (the current stage's channel where the base class has stages; the Gauss-Hermite rule otherwise)
        channel = self.channel_final if final else getattr(self, "_stage", (self.channel, None))[0]
        ch = channel.moments(alpha, q, m, sigma, cond_var=cond_var)
        self.channel_calls += 1
        ms = self.matrix_side(ch.q_hat, ch.m_hat, ch.sigma_hat)
        return np.array([ms.q, ms.m, ms.sigma]), ch, ms

    def _zero_phase(self, alpha: float):  # the fast route is used where S_hat != 0 (callers fall back otherwise)
        return None

    # the fixed point on the current nodes: the shared Anderson loop (StateEvolution._iterate) ------------------
    def _fast_iterate(self, alpha: float, x0: np.ndarray, tol: float, max_iter: int = 80):
        """The fixed point of the map on the current nodes by :meth:`StateEvolution._iterate` (damped Anderson in
        the solver's log coordinates, the same loop as every SE solve); (x, matrix side, iterations) or None.

        Two knobs differ from a plain solve, both measured (docs/theory/scaling.md section 6.1, "One fixed-point
        loop"): the cap is ``max_iter`` = 80 instead of 400 (a search trial or outer step that has not converged
        by then fails: the search solves such a trial exactly, ``solve_fixed`` falls back to the plain solver),
        and the stall rule (stop after 25 iterations without a new best residual) is off within that cap: of 677
        trials along five table curves one converged after stalling for 25 iterations (gamma = 0.75, d = 500),
        and losing it sends a search point to the plain solver. The channel's warnings are silenced (trial
        points of the search); an unevaluable map (FloatingPointError) is recovered by the shared loop's halved
        step from the last good point; any other ValueError fails the trial."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                st = StateEvolution._iterate(self, alpha, self._to_y(np.asarray(x0, float)), tol,
                                             max_iter=max_iter, stall=max_iter)
        except ValueError:
            return None
        if not st["converged"]:
            return None
        return self._to_x(st["y"]), st["final"][2], st["it"]

    def _add_node(self, delta: float, trust: float = 2.0) -> None:
        if self.nodes.nodes:
            ref = self.nodes.last_delta
            delta = min(max(delta, ref / trust), ref * trust)
        self.nodes.add(delta)

    def _near_node(self, delta: float) -> bool:
        return bool(self.nodes.nodes) and abs(delta / self.nodes.last_delta - 1.0) <= 1e-12

    def _interp_error(self, delta: float) -> float:
        """Scale of the relative interpolation error of the spectral side at delta: g^2 with one node (tangent),
        g^2 (g + h)^2 with two (cubic Hermite), g = |t/t_last - 1|, h = |t_last/t_other - 1| (t = delta^2)."""
        if not self.nodes.nodes:
            return math.inf
        t = delta * delta
        g = abs(t / self.nodes.nodes[-1][0] - 1.0)
        if self.nodes.far(t):  # (the tangent at the last node: _Nodes.at)
            return g * g
        h = abs(self.nodes.nodes[-1][0] / self.nodes.nodes[0][0] - 1.0)
        return g * g * (g + h) ** 2

    def solve_fixed(self, alpha: float, x0: np.ndarray, delta0: float | None = None) -> SEResult | None:
        """Exact SE point at the current eps rule (lambda or ratio), starting from x0; None if the fast route
        cannot find it (the caller falls back to the plain solver)."""
        if delta0 is not None and not self._near_node(delta0):
            self._add_node(delta0)
        if not self.nodes.nodes:
            ch = self.channel.moments(alpha, *x0)
            self._add_node(math.sqrt(ch.q_hat) / ch.m_hat)
        x = np.asarray(x0, float)
        tol_it = max(self.tol, 1e-7)
        for _ in range(self.max_outer):
            out = self._fast_iterate(alpha, x, tol_it)
            if out is None:
                return None
            x, ms, it = out
            if self._interp_error(ms.delta) <= self.interp_tol:
                if tol_it <= self.tol:
                    break
                tol_it = self.tol
                continue
            gap = abs(ms.delta / self.nodes.last_delta - 1.0)
            self._add_node(ms.delta)
            # iterating the next model beyond its own accuracy is wasted: its error is ~ gap^2 (and less); a gap
            # below 1e-4 puts the next solution within ~gap^2 of this node, where the interpolation error
            # ~ gap^6 is at rounding level: iterate to the final tolerance at once
            tol_it = self.tol if gap < 1e-4 else max(self.tol, min(1e-7, 1e-2 * gap * gap))
        else:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = StateEvolution.solve(self, alpha, init=x)
        if res.phase != "regular":
            return None
        res.objective = alpha * res.train_error + (res.eps * res.m_hat / 2.0) * self._trace(res)
        return res

    def _trace(self, res: SEResult) -> float:
        """(1/d) Tr S_hat = s j1 at the point (from the node)."""
        (_, j1, _), _ = self.nodes.at(res.delta, res.eps)
        return res.m_hat / res.sigma_hat * j1

    def test_error_at(self, x: np.ndarray) -> float:
        return self.channel.test_error(x[0], x[1])[0] + self.error_offset

    # the optimal lambda ----------------------------------------------------------------------------
    def solve_optimal(self, alpha: float, x0: np.ndarray, v0: float, h: float = 0.25, delta0: float | None = None,
                      search_tol: float = 1e-8, var: str = "loglam", r_min: float = 1e-3, exact_trials: bool = False,
                      renode_tol: float = 0.1, bias_tol: float = 0.25, scan: bool = True, flat_tol: float = 2e-3,
                      scan_grid: tuple[float, float, float] = (1e-7, 10.0, 2.0),
                      scan_below: float = 1e-3) -> tuple[SEResult | None, dict]:
        """Minimise the test error over v = log lambda (``var="loglam"``) or r = eps/delta (``var="ratio"``) at
        alpha, then solve the exact SE at the minimiser.

        The search runs on the nodes as they are (one node at ``delta0``, the predicted delta): each trial is a
        fixed point with channel calls only, warm started from the other trials extrapolated in v; trials at
        v0 and v0 +- h (walking by h until the middle one is lowest) give a parabola whose vertex is where the
        exact SE is then solved. The error is quadratic in v there, so the O(dt^2) accuracy of the node during
        the search moves the reported test error at second order only; the returned point is the exact SE.
        log lambda is the better variable where the optimal lambda is small (small n: as lambda -> 0+ the ratio
        eps/delta tends to a positive limit, so r resolves that end badly). ``exact_trials``: every trial is an
        exact SE point (its own nodes; for a first point, whose single node is far from most trials).

        **Basin scan** (``scan``, log lambda only): the walk finds the minimum of the basin it starts in. Below
        k* ~ 7 the test error is nearly flat as lambda -> 0+ (the interpolating phase), and a walk started there
        (lambda continued from points on that side) takes steps whose gain is below any tolerance and can run
        out of steps far from the minimum. So where the walk ends without a bracket (the middle trial not the
        lowest after 12 steps), or in a flat one (its curvature (min(e_lo, e_hi) - e_mid)/h^2 below ``flat_tol``
        times the excess e_mid - e_0 over the saturation error of :func:`saturation_error`: 2e-3, i.e. a depth
        of 1.25e-4 of the excess at h = 0.25; measured along a d = 2000, gamma = 1.25 curve: 2e-4 - 9e-4 on the
        lambda -> 0 side, 2.4e-3 at the crossover nu = 16, 0.02 - 2 beyond), or below ``scan_below`` (1e-3: the
        lambda -> 0 side, where the fixed point is sensitive and the interpolated trials can make a sharp fake
        bracket that neither check above sees: d = 4000, nu = 20.2, a node 8 % off in t, trials +-0.25 around
        lambda = 5.1e-6 at 0.1433 against exact 0.1320 (and the exact error falls to 0.12985 at lambda = 0.004);
        the exact optima measured move continuously from 1e-6 - 4e-4 at the smallest nu to 1.2e-3 (d = 2000,
        nu = 11.1) and 1e-2 - 1 beyond: the scan covers the points whose walk starts from the plateau side),
        or where the exact point is missing, the exact SE is solved on a fixed grid of lambda (``scan_grid`` =
        (lo, hi, points per decade), log-spaced, always including the walk's own end), outward from the walk's
        end, each grid point warm started from its nearest regular neighbour (S_hat = 0 counts at its constant
        test error; a side stops after two failed points in a row). If the grid's lowest point is lower than the
        walk's result (another basin, or the same one far from where the walk stopped: d = 4000, nu = 43.7, a walk
        ended on S_hat = 0), the exact walk and vertex are redone from there and the lower of the two results is
        returned; otherwise the walk's result is returned unchanged. ``info``:
        ``scan`` (ran), ``scan_trials``, ``scan_min`` ((log lambda, test error) of the grid's lowest point),
        ``basin`` ("walk": the walk's result kept; "scan": the result of the walk from the grid's minimum),
        ``bracketed``, ``depth`` (the bracket's curvature relative to the excess), ``walk`` ((log lambda, test
        error) of the walk's own result before any scan)."""
        self.nodes.clear()
        if delta0 is None:
            ch = self.channel.moments(alpha, *x0)
            delta0 = math.sqrt(ch.q_hat) / ch.m_hat
        self._add_node(delta0)
        lower = r_min if var == "ratio" else -math.inf

        def set_var(v: float) -> None:
            if var == "ratio":
                self.ratio = v
            else:
                self.ratio, self.lam = None, math.exp(v)

        trials: dict[float, tuple[float, np.ndarray]] = {}

        def start_for(r: float) -> np.ndarray:
            """Warm start: the trials' fixed points extrapolated (linearly, in log x) to r."""
            if not trials:
                return np.asarray(x0, float)
            near = sorted(trials, key=lambda k: abs(k - r))
            xa = trials[near[0]][1]
            if len(near) < 2 or not math.isfinite(trials[near[1]][0]) or not math.isfinite(trials[near[0]][0]):
                return xa
            xb = trials[near[1]][1]
            if not (np.all(xa > 0) and np.all(xb > 0)):  # (log extrapolation needs positive q, m, Sigma)
                return xa if np.all(np.isfinite(xa)) else np.asarray(x0, float)
            w = (r - near[0]) / (near[0] - near[1])
            return np.exp(np.log(xa) + w * (np.log(xa) - np.log(xb)))

        def plain_at(v: float, start: np.ndarray, zero_ok: bool = False) -> SEResult | None:
            """The exact SE at log lambda = v by the plain solver, warm started from ``start`` (the exact trials'
            fallback; and every grid point of the basin scan, 1.15 apart in log lambda and far from any node:
            12-45 iterations, 0.3-2 s at d = 500-2000)."""
            plain = StateEvolution(self.problem.replace_student(lam=math.exp(v)), d=self._d, **self._options)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    res_v = plain.solve(alpha, init=start)
            except ValueError:  # a start the channel refuses (d = 8000, nu = 21.5: m = nan): a failed trial
                return None
            return res_v if res_v.phase == "regular" or (zero_ok and res_v.phase == "zero") else None

        def exact_at(v: float, start: np.ndarray) -> SEResult | None:
            """The exact SE at v: the fast solve, else (log lambda) the plain solver from the same start."""
            set_var(v)
            res_v = self.solve_fixed(alpha, start)
            if (res_v is None or not res_v.converged) and var == "loglam":
                res_v = plain_at(v, start)
            return res_v

        def ev(r: float) -> float:
            r = max(r, lower)
            if r in trials:
                return trials[r][0]
            start = start_for(r)
            set_var(r)
            out = None if exact_trials else self._fast_iterate(alpha, start, search_tol)
            if out is None:
                # exact trials; and a trial the iteration on the nodes could not solve: as +inf it would stop
                # the walk at a point that is not a minimum (d = 1000, nu = 11.1: lambda 0.046 returned with
                # the test error 0.15541, the minimum is 0.14762 at lambda ~ 0.012), so solve it exactly
                res_r = exact_at(r, start)
                ok = res_r is not None and res_r.converged
                trials[r] = (res_r.test_error if ok else math.inf, res_r.x if ok else start)
                return trials[r][0]
            x, ms, _ = out
            trials[r] = (self.test_error_at(x), x)
            deltas[r] = ms.delta
            return trials[r][0]

        def walk(r0: float):
            lo, mid, hi = max(r0 - h, lower), r0, r0 + h
            e_mid, e_lo, e_hi = ev(mid), ev(lo), ev(hi)
            for _ in range(12):  # walk until the middle trial is the lowest
                if e_mid <= e_lo and e_mid <= e_hi:
                    break
                if e_lo < e_mid and lo > lower:
                    hi, e_hi, mid, e_mid = mid, e_mid, lo, e_lo
                    lo = max(lo - h, lower)
                    e_lo = ev(lo)
                elif e_hi < e_mid:
                    lo, e_lo, mid, e_mid = mid, e_mid, hi, e_hi
                    hi = hi + h
                    e_hi = ev(hi)
                else:
                    break
            return lo, mid, hi, e_lo, e_mid, e_hi

        def redo_exact(v_start: float, x_start: np.ndarray, seed: tuple[float, np.ndarray] | None = None):
            """Search again from v_start with exact trials, warm started at x_start (``seed``: an exact trial
            already known at v_start): the bracket of the new walk."""
            nonlocal x0, exact_trials
            x0, exact_trials = x_start, True
            trials.clear()
            if seed is not None:
                trials[v_start] = seed
            return walk(v_start)

        def vertex() -> tuple[float, float]:
            """The parabola's vertex through the three trials (the middle one where there is none inside the
            bracket) and the parabola's value there."""
            den = (mid - lo) * (e_mid - e_hi) - (mid - hi) * (e_mid - e_lo)
            if not all(math.isfinite(v) for v in (e_lo, e_mid, e_hi)) or den == 0:
                return mid, e_mid
            num = (mid - lo) ** 2 * (e_mid - e_hi) - (mid - hi) ** 2 * (e_mid - e_lo)
            cand = mid - 0.5 * num / den
            if not lo < cand < hi:
                return mid, e_mid
            value = (e_lo * (cand - mid) * (cand - hi) / ((lo - mid) * (lo - hi))  # Lagrange form
                     + e_mid * (cand - lo) * (cand - hi) / ((mid - lo) * (mid - hi))
                     + e_hi * (cand - lo) * (cand - mid) / ((hi - lo) * (hi - mid)))
            return cand, value

        def exact_vertex() -> tuple[float, float, SEResult | None]:
            """The current bracket's vertex, the parabola's value there, and the exact SE at it."""
            v, value = vertex()
            set_var(v)
            return v, value, exact_at(v, start_for(v))

        deltas: dict[float, float] = {}
        lo, mid, hi, e_lo, e_mid, e_hi = walk(v0)
        renodes = 0
        # the trials are only as good as the node is close to them (tangent in t: relative error ~ g^2, times the
        # sensitivity of the fixed point, large at small alpha; far from the node the interpolated map can even
        # have spurious fixed points): where one of the three trials' delta is more than renode_tol off the node
        # in t, search again from the middle trial with exact trials. Measured: d = 1000, gamma = 1.25, nu = 11.1
        # after a plain-route point, g = 0.2 at the middle trial and a fake minimum at lambda 0.046 (test error
        # 0.15542 against 0.14762 at lambda ~ 0.012; a node moved to the middle trial still left 0.14783);
        # d = 2000, gamma = 2, nu = 31.6: g = 0.04 at the middle trial but 0.37 and 0.48 at its neighbours,
        # whose interpolated test errors 0.146 and 0.152 made a sharp fake minimum at lambda 0.0115 (0.10770;
        # lambda = 0.035 gives 0.10235)
        gaps = [abs((deltas[v] / self.nodes.last_delta) ** 2 - 1.0) for v in (lo, mid, hi) if v in deltas]
        node_gap = max(gaps) if gaps else math.nan
        if not exact_trials and node_gap > renode_tol:
            renodes = 1
            lo, mid, hi, e_lo, e_mid, e_hi = redo_exact(mid, trials[mid][1])

        r_star, pred = vertex()
        set_var(r_star)
        res = exact_at(r_star, start_for(r_star)) if exact_trials else self.solve_fixed(alpha, start_for(r_star))
        # the trials ran on the interpolated spectral side; their error is invisible to the walk, but the exact SE
        # at the vertex measures it: where it exceeds bias_tol times the bracket's depth, the interpolated errors
        # may have moved the minimum (gamma = 0.75, d = 2000, nu = 10: node 4 % off in t, trials 0.0028 above the
        # exact errors with a minimum at lambda 0.016, exact minimum near 0.005: test error 0.26343 against
        # 0.26158), so search again from the vertex with exact trials
        bias_redo = 0
        if not exact_trials and res is not None and res.converged and math.isfinite(pred):
            depth = min(e_lo, e_hi) - e_mid
            if abs(res.test_error - pred) > bias_tol * max(depth, 0.0):
                bias_redo = 1
                lo, mid, hi, e_lo, e_mid, e_hi = redo_exact(r_star, res.x)
                r_star, pred, res = exact_vertex()
        info = {var: r_star, "trials": len(trials), "search": sorted((k, v[0]) for k, v in trials.items()),
                "renodes": renodes, "node_gap": node_gap, "bias_redo": bias_redo}
        ok = res is not None and res.converged
        bracketed = all(math.isfinite(e) for e in (e_lo, e_mid, e_hi)) and e_mid <= e_lo and e_mid <= e_hi
        depth = math.nan
        if bracketed:  # relative to the excess e_mid - e_0 (e_0: saturation_error)
            if self._e0 is None:
                self._e0 = saturation_error(self)[0]
            excess = e_mid - self._e0
            depth = (min(e_lo, e_hi) - e_mid) / (excess if excess > 0 else abs(e_mid)) / (h * h)
        info.update(bracketed=bracketed, depth=depth, scan=False, scan_trials=0, scan_min=(math.nan, math.nan),
                    basin="walk", walk=(r_star, res.test_error if ok else math.inf))
        settled = ok and bracketed and depth >= flat_tol and r_star >= math.log(scan_below)  # (depth nan: unbracketed)
        if not (scan and var == "loglam") or settled:
            return res, info
        # the basin scan (docstring): exact SE points on a fixed log-lambda grid, outward from the walk's end
        lo_g, hi_g, per = scan_grid
        step = math.log(10.0) / per
        k_lo, k_hi = math.ceil(math.log(lo_g) / step - 1e-9), math.floor(math.log(hi_g) / step + 1e-9)
        grid = sorted({k * step for k in range(k_lo, k_hi + 1)} | {r_star})
        i0 = grid.index(r_star)
        found: dict[float, tuple[float, np.ndarray]] = {r_star: (info["walk"][1], res.x if ok else np.asarray(x0))}
        for side in (range(i0 - 1, -1, -1), range(i0 + 1, len(grid))):
            fails, prev_v = 0, r_star
            for i in side:
                v = grid[i]
                # (S_hat = 0 is a point of the scan, at its constant test error, but no warm start for the next)
                res_v = plain_at(v, found[prev_v][1], zero_ok=True)
                good = res_v is not None and res_v.converged
                regular = good and res_v.phase == "regular"
                found[v] = (res_v.test_error if good else math.inf, res_v.x if regular else found[prev_v][1])
                if good:
                    fails, prev_v = 0, (v if regular else prev_v)
                else:
                    fails += 1
                    if fails == 2:
                        break
        v_best = min(found, key=lambda v: found[v][0])
        info.update(scan=True, scan_trials=len(found) - 1, scan_min=(v_best, found[v_best][0]))
        if not found[v_best][0] < info["walk"][1]:  # (the walk's end is the lowest point seen: keep it)
            return res, info
        lo, mid, hi, e_lo, e_mid, e_hi = redo_exact(v_best, found[v_best][1], seed=found[v_best])
        r_new, _, res_new = exact_vertex()
        if res_new is not None and res_new.converged and (not ok or res_new.test_error < res.test_error):
            res, r_star = res_new, r_new
            info.update(basin="scan", loglam=r_new)
        info["trials"] += len(trials)
        info["search"] = sorted(info["search"] + [(k, v[0]) for k, v in trials.items()])
        return res, info


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
        "quadrature": res.quadrature,  # "gh12" (SCALING_SE_OPTIONS), or "qmc4x2^14" where the QMC re-solve replaced it
        "branch_share": res.errors.get("branch_share", math.nan),  # the re-solve's trigger (> 1e-3 at T = 2, GH)
    }
    out.update(extra or {})
    return out


def _append_point(out: list, rec: dict[str, Any], res: SEResult, t0: float, progress) -> None:
    """Finish a curve record (wall seconds of the whole point, the solver's message), append it, tick progress."""
    rec["seconds"] = time.perf_counter() - t0
    rec["message"] = res.message
    out.append(rec)
    if progress is not None:
        progress()


def _check_limit_rule(rule: LamRule | None) -> None:
    if rule is None or rule.kind == "fixed":
        raise ParameterError("lam-rule", "a fixed lambda is not a scaling-limit rule (use optimal or power:P)")


def _limit_point(sl: ScalingLimit, nu: float, rule: LamRule, init: Any) -> LimitPoint:
    """The scaling-limit point at nu under an optimal or power:P rule, warm-started from ``init``."""
    if rule.kind == "optimal":
        return sl.solve_optimal(nu, init=init)
    return sl.solve_point(nu, lam_t=rule.value * nu**rule.p, init=init)


def limit_curve(problem: Problem, n_over_d, rule: LamRule, progress=None, **options) -> list[dict[str, Any]]:
    """Scaling-limit curve along nu = n/d (d = inf). Records carry lam_t = lambda sqrt(d) instead of lambda."""
    _check_limit_rule(rule)
    sl = ScalingLimit(problem, **options)
    e0, c0 = saturation_error(sl)
    out, prev = [], None
    for nu in sorted(float(v) for v in n_over_d):
        t0 = time.perf_counter()
        pt = _limit_point(sl, nu, rule, prev)
        res = pt.result
        if res.converged and res.phase == "regular":
            prev = res
        rec = _rec(None, None, nu, None, res, e0, pt.k_star,
                   {"lam_t": pt.lam_t, "ratio": pt.ratio, "under_energy": pt.under, "c0": c0})
        _append_point(out, rec, res, t0, progress)
    return out


def recovery_kink(problem: Problem, rule: LamRule | None, mode: int, nu_lo: float, nu_hi: float, h: float = 1e-4,
                  ratio: float | None = None, **options) -> dict[str, Any]:
    """Scaling limit: where target mode ``mode`` (1 = strongest) is recovered along n/d, and the local exponent
    -d ln(e_test - e_0)/d ln nu on either side of that point (docs/theory/scaling.md section 3, "emergence").

    The recovery point nu_i is the root in [nu_lo, nu_hi] (Brent in ln nu, to 1e-13) of the mode's margin:
    t_i - tau while it is undetected (t_i <= tau), y_i - eps_t = t_i + tau^2/t_i - eps_t once detected (it is
    recovered when its outlier passes the threshold). At the optimal rule (eps_t = 2 tau) the second branch is
    (t_i - tau)^2/t_i >= 0, so the root is the detachment t_i = tau itself. The local exponents are one-sided
    differences of ln(excess) over ``h`` in ln nu from nu_i, each side on its own smooth branch of the curve (the
    set of recovered modes is fixed there): they converge to the one-sided derivatives as O(h), and their
    difference is the jump of the local exponent (a kink of the excess) where the derivative is discontinuous.
    Returns nu_i, slope_left, slope_right, jump = right - left, k_left/k_right (recovered modes at nu_i e^-h,
    nu_i e^h), ratio = eps_t/tau at nu_i. ``ratio`` (instead of a rule): eps_t = ratio tau at every nu (ratio = 2:
    the optimal rule's boundary optimum, without its search)."""
    if ratio is None:
        _check_limit_rule(rule)
    sl = ScalingLimit(problem, **options)
    e0, _ = saturation_error(sl)
    t_i = float(sl.modes.theta(mode)[-1])
    cache: dict[float, LimitPoint] = {}
    prev: list[Any] = [None]

    def point(u: float) -> LimitPoint:
        if u not in cache:
            nu = math.exp(u)
            if ratio is not None:
                pt = sl.solve_point(nu, ratio=ratio, init=prev[0])
            else:
                pt = _limit_point(sl, nu, rule, prev[0])
            if not (pt.result.converged and pt.result.phase == "regular"):
                raise RuntimeError(f"scaling-limit SE not converged at nu = {nu:.6g}: {pt.result.message}")
            prev[0] = pt.result
            cache[u] = pt
        return cache[u]

    def margin(u: float) -> float:
        res = point(u).result
        tau, eps = res.delta, res.eps
        return t_i - tau if t_i <= tau else t_i + tau * tau / t_i - eps

    u_lo, u_hi = math.log(nu_lo), math.log(nu_hi)
    if not (margin(u_lo) < 0 < margin(u_hi)):
        raise ValueError(f"mode {mode} is not recovered between nu = {nu_lo:g} and {nu_hi:g}")
    u_i = optimize.brentq(margin, u_lo, u_hi, xtol=1e-13, rtol=4 * np.finfo(float).eps)

    def log_excess(u: float) -> float:
        return math.log(point(u).result.test_error - e0)

    left = -(log_excess(u_i) - log_excess(u_i - h)) / h
    right = -(log_excess(u_i + h) - log_excess(u_i)) / h
    return {"nu": math.exp(u_i), "slope_left": left, "slope_right": right, "jump": right - left,
            "k_left": point(u_i - h).k_star, "k_right": point(u_i + h).k_star, "ratio": point(u_i).ratio}


def _plain_curve(problem: Problem, d: int, alphas, rule: LamRule, progress=None, xatol: float = 0.03,
                 **options) -> list[dict[str, Any]]:
    """The plain route: a fresh :class:`StateEvolution` per lambda. Optimal: bounded Brent over log lambda in
    [log lam_guess - 2.5, log lam_guess + 2.5], lam_guess = sqrt(q_hat) of the previous point (the eps = 2 delta
    rule: lambda = eps m_hat/2 = delta m_hat), warm started."""
    options = _scaling_options(options)
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
        rec = _rec(alpha * d * d, d, nu, lam, res, e0, k_star_finite(se, res),
                   {"c0": c0, "ratio": res.eps / res.delta if res.phase == "regular" else math.nan, "route": "plain"})
        _append_point(out, rec, res, t0, progress)
    return out


def finite_d_curve(problem: Problem, d: int, alphas, rule: LamRule, progress=None, xatol: float = 0.03,
                   route: str = "auto", outliers: bool = False, k_stop: int | None = None, on_record=None,
                   **options) -> list[dict[str, Any]]:
    """Finite-d SE along alphas (n = alpha d^2) with the lambda rule: one record per alpha.

    route = "auto" (default): "fast" where it applies (factorised student, kappa >= 1), else "plain" for the
    whole curve (records say which in ``route``).
    route = "fast": :class:`FastFiniteD` with continuation along the curve: the next point's
    (q, m, Sigma), delta and optimal log lambda are extrapolated (log-log, last two points); the optimal rule
    minimises the test error over log lambda by a parabola through bracketing trials (``FastFiniteD.
    solve_optimal``; docs/theory/scaling.md section 6).
    A point the fast route cannot solve (e.g. S_hat = 0 under a large lambda) is solved by the plain route;
    a problem it does not implement (kappa < 1, direct student) raises ParameterError naming the parameter.
    route = "plain": a fresh :class:`StateEvolution` per lambda, Brent over log lambda (xatol) for the optimal rule.

    Record fields: n, d, nu = n/d, alpha, lam, test_error, e0, excess = test_error - e0, mse, k_star (target
    modes detached from the rest of the spectrum of Y and above the threshold), delta, eps, ratio = eps/delta,
    q, m, sigma, converged, phase, iterations, err_test_error, seconds, route, c0; with ``outliers`` also
    ``outliers``: the recovered modes' target eigenvalue theta, position y (in units of Y/m_hat), learned
    eigenvalue and squared overlap (:func:`recovered_modes_finite`; cheap: no free convolution).
    ``k_stop``: end the curve after the first point with k_star > k_stop (the points beyond a fit window
    k* <= d/4 cost the most and are not used). ``on_record``: called with each record as soon as it is done
    (fast route; the plain route calls it at the end), e.g. to write long curves point by point.
    """
    options = _scaling_options(options)
    if route not in ("auto", "fast", "plain"):
        raise ValueError(f"route must be 'auto', 'fast' or 'plain' (got {route!r})")
    if route == "fast":
        FastFiniteD.check_applies(problem)
    elif route == "auto":
        try:
            FastFiniteD.check_applies(problem)
            route = "fast"
        except ParameterError:
            route = "plain"
    if route == "plain":
        out = _plain_curve(problem, d, alphas, rule, progress=progress, xatol=xatol, **options)
        if k_stop is not None:
            over = [i for i, r in enumerate(out) if r["k_star"] > k_stop]
            out = out[: over[0] + 1] if over else out
        if outliers:  # (the plain records do not keep their SE points: re-solve each one)
            for rec in out:
                se = StateEvolution(problem.replace_student(lam=rec["lam"]), d=d, **options)
                rec["outliers"] = recovered_modes_finite(se, se.solve(rec["alpha"]))
        for rec in out if on_record is not None else ():
            on_record(rec)
        return out
    if on_record is not None:
        user_progress = progress

        def progress() -> None:
            on_record(out[-1])
            if user_progress is not None:
                user_progress()

    fast = FastFiniteD(problem, d, **options)
    e0, c0 = saturation_error(fast)
    hist: list[tuple[float, np.ndarray, float, float]] = []  # (log alpha, log x, log delta, log lambda)
    out = []
    for alpha in sorted(float(a) for a in alphas):
        t0 = time.perf_counter()
        built0, calls0 = fast.nodes.built, fast.channel_calls
        la = math.log(alpha)
        if not hist:
            x0, delta0, u0 = fast.initial_guess(), None, math.log(0.1 * math.sqrt(alpha))
        elif len(hist) == 1:
            x0 = np.exp(hist[-1][1])
            delta0 = math.exp(hist[-1][2] - 0.5 * (la - hist[-1][0]))  # delta^2 ~ 1/alpha
            u0 = hist[-1][3] + 0.5 * (la - hist[-1][0])  # lambda_opt ~ sqrt(q_hat) ~ sqrt(alpha)
        else:
            (a0, x_0, d_0, u_0), (a1, x_1, d_1, u_1) = hist[-2], hist[-1]
            w = (la - a1) / (a1 - a0)
            x0 = np.exp(x_1 + w * (x_1 - x_0))
            delta0 = math.exp(d_1 + w * (d_1 - d_0))
            u0 = u_1 + w * (u_1 - u_0)
        res = None
        info: dict[str, Any] = {}
        lam = math.nan
        if rule.kind == "optimal":
            if not hist:  # a plain solve from a cold start gives the search a point at the right delta
                first = StateEvolution(problem.replace_student(lam=math.exp(u0)), d=d, **options)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    first = first.solve(alpha)
                if first.converged and first.phase == "regular":
                    x0, delta0 = first.x, first.delta
            if hist or delta0 is not None:
                res, info = fast.solve_optimal(alpha, x0, u0, h=0.25 if hist else 0.7, delta0=delta0,
                                               exact_trials=not hist)
                if not hist and res is not None:  # the first search ran on a node far from some trials: refine
                    first_info = info  # (its basin scan, if it ran, chose the basin: the refinement stays in it)
                    res, info = fast.solve_optimal(alpha, res.x, info["loglam"], h=0.15, delta0=res.delta,
                                                   exact_trials=True, scan=not first_info["scan"])
                    if first_info["scan"]:
                        info.update(scan=True, scan_trials=first_info["scan_trials"], basin=first_info["basin"])
            if res is not None:
                lam = res.eps * res.m_hat / 2.0
        else:
            lam = rule.lam(alpha * d, d)
            fast.ratio, fast.lam = None, lam
            fast.nodes.clear()
            if hist:
                res = fast.solve_fixed(alpha, x0, delta0)
        route_used = "fast"
        # fall back to the plain route for this point where the fast one failed, or where its search ended on
        # S_hat = 0 (m at the solver's floor): the test error is flat in lambda there, so a walk started there
        # stays (gamma = 2, d = 4000, nu = 46.4: lambda extrapolated to 1.36 from 1.3e-4 and 0.013; without this
        # the rest of the curve stayed at S_hat = 0 with lambda growing 100-fold per point)
        if res is None or not res.converged or not (res.m > 0 and res.q > 1e-20):
            route_used = "plain"
            rec = _plain_curve(problem, d, [alpha], rule, xatol=xatol, **options)[0]
            lam = rec["lam"]
            se = StateEvolution(problem.replace_student(lam=lam), d=d, **options)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = se.solve(alpha, init=x0 if hist else None)
        if res.converged and res.phase == "regular" and np.all(res.x > 0) and res.eps > 0:
            hist.append((la, np.log(res.x), math.log(res.delta), math.log(res.eps * res.m_hat / 2.0)))
            hist = hist[-2:]
        modes = recovered_modes_finite(fast, res)
        rec = _rec(alpha * d * d, d, alpha * d, lam, res, e0, len(modes),
                   {"c0": c0, "ratio": res.eps / res.delta if res.phase == "regular" else math.nan,
                    "route": route_used, "free_convolutions": fast.nodes.built - built0,
                    "channel_calls": fast.channel_calls - calls0, "search_trials": info.get("trials", 0),
                    "search_renodes": info.get("renodes", 0), "search_node_gap": info.get("node_gap", math.nan),
                    "search_bias_redo": info.get("bias_redo", 0), "search_scan": info.get("scan", False),
                    "search_scan_trials": info.get("scan_trials", 0), "search_basin": info.get("basin", ""),
                    "search_depth": info.get("depth", math.nan),
                    "search_walk_test_error": info.get("walk", (math.nan, math.nan))[1]})
        if outliers:
            rec["outliers"] = modes
        _append_point(out, rec, res, t0, progress)
        if k_stop is not None and rec["k_star"] > k_stop:
            break
    return out


def finite_d_points(problem: Problem, d: int, alphas, rule: LamRule | str = "optimal", outliers: bool = True,
                    **options) -> list[dict[str, Any]]:
    """The finite-d SE scaling curve in the form used to compare with simulations (one dict per alpha).

    Fields: alpha, n = alpha d^2, lam (the lambda the rule chose; optimal: the minimiser of the test error),
    e_test (noisy-label test error), e_0 (its alpha -> inf saturation value, :func:`saturation_error`),
    excess = e_test - e_0, k_star (recovered target modes), converged, and with ``outliers`` the list
    ``outliers`` of recovered modes {theta, y, eigenvalue, overlap} (target eigenvalue, position in the spectrum
    of Y/m_hat = S0 + delta Z, eigenvalue of S_hat, squared overlap with the target eigenvector), strongest first
    (:func:`recovered_modes_finite`; len(outliers) == k_star).
    Computed by the fast route of :func:`finite_d_curve`.
    """
    rule = parse_lam_rule(rule) if isinstance(rule, str) else rule
    recs = finite_d_curve(problem, d, alphas, rule, outliers=outliers, **options)
    out = []
    for r in recs:
        p = {"alpha": r["alpha"], "n": r["n"], "lam": r["lam"], "e_test": r["test_error"], "e_0": r["e0"],
             "excess": r["excess"], "k_star": r["k_star"], "converged": r["converged"]}
        if outliers:
            p["outliers"] = r.get("outliers", [])
        out.append(p)
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


def predicted_exponent(gamma: float, rule: LamRule, kappa: float = 1.0, d_inf: bool = False,
                       model: str = "factorized", noiseless: bool = False) -> tuple[float, str]:
    """The derived exponent f of e_test - e_0 ~ n^{-f} and the regime's name (docs/theory/scaling.md, section 4),
    for 1 << k*(n) << d (finite d) or every n (d = inf). The rates through 1 - 1/(2 gamma) need gamma > 1/2 (else
    nan, "not derived"). ``model`` "direct" (ridge on S): the
    estimator is the linear shrinkage c (S0 + delta Z), which keeps the noise in every direction, so f = 1 for
    the optimal and fixed rules (nan, "not derived", for the power rules; section 5). ``noiseless`` (Delta = 0 and
    no output noise): the rates rest on delta^2 = D/alpha with D -> D_inf > 0, which the label noise keeps (section
    2); without it D -> 0 and the excess falls faster (fitted 1.51 at gamma = 1.25, d = inf, nu = 1e3-1e5): nan,
    "not derived", except the width floor and p >= 1 (0 in n whatever the noise)."""
    base = 1.0 - 1.0 / (2.0 * gamma)
    noiseless_rate = math.nan, ("noiseless labels (Delta = 0, no output noise): not derived (D -> 0 as the fit "
                                "becomes exact; the excess falls faster than these rates)")
    if model == "direct":
        if noiseless:
            return noiseless_rate
        if rule.kind in ("optimal", "fixed"):
            return 1.0, "direct (ridge): linear shrinkage keeps the noise in every direction, f = 1"
        return math.nan, "direct (ridge) with a power rule: not derived"
    if kappa < 1 and not d_inf:
        return 0.0, "width-limited (kappa < 1): excess saturates at the rank-p tail ~ p^(1-2 gamma)"
    if noiseless and not (rule.kind == "power" and rule.p >= 1):
        return noiseless_rate
    # the exponents through 1 - 1/(2 gamma) assume gamma > 1/2 (<= 0 would say the error does not fall with n)
    not_derived = math.nan, "gamma <= 1/2: not derived (the target's energy is not carried by its top modes)"
    if rule.kind == "optimal":
        if not gamma > 0.5:
            return not_derived
        return base, "optimal lambda: f = 1 - 1/(2 gamma)"
    if rule.kind == "fixed":
        return 1.0, "under-regularised (fixed lambda, eps/delta -> 0): noise bulk fitted, f = 1"
    p = rule.p
    if p >= 1:
        return 0.0, "over-regularised with p >= 1: nothing more is learned"
    if p >= 0.5 and not gamma > 0.5:
        return not_derived
    if p > 0.5:
        return 2.0 * (1.0 - p) * base, "over-regularised (lambda ~ n^p, p > 1/2): f = 2(1-p)(1 - 1/(2 gamma))"
    if p == 0.5:
        return base, "critical (lambda ~ n^(1/2), eps/delta -> const): f = 1 - 1/(2 gamma)"
    return 1.0, "under-regularised (lambda ~ n^p, p < 1/2): noise bulk fitted, f = 1"
