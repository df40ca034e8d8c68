r"""The spectrum of the learned query-key matrix S_hat, and of W/(p d)^{1/4} (THEORY.md section 5).

At the SE fixed point S_hat = s f(Y), Y = S0 + delta Z (Z GOE), s = m_hat/sigma_hat (the ratio
beta0/beta in the lambda -> 0+ interpolating phase) and f(y) = (y - eps) 1[y > c], with c = eps (soft
threshold) or, for a narrow student whose rank constraint binds, the (1 - kappa)-quantile of rho_delta.
So the eigenvalues of S_hat are distributed as

* an atom at 0 of mass rho_delta((-inf, c)) (low-rank collapse),
* the image under y -> s (y - eps) of rho_delta restricted to y > c: one bulk per component of supp
  rho_delta above c (two at large alpha with logit noise: the noise bulk grown out of the target's null
  space and the target's own bulk),
* outliers: for a target given as a list of d eigenvalues, an eigenvalue theta separated from the rest
  keeps its own bump of rho_delta of mass 1/d -- one eigenvalue of Y. In the d -> infinity description
  (theta a spike on the rest nu of the spectrum) it sits at

      y(theta) = psi_nu(theta) = theta + delta^2 g_nu(theta),   detached iff delta^2 int dnu/(theta - x)^2 < 1,

  and the squared overlap of the corresponding eigenvector of Y (hence of S_hat) with the target's
  eigenvector is |<u, u_hat>|^2 = 1/omega'(y) = psi_nu'(theta) = 1 - delta^2 int dnu(x)/(theta - x)^2
  (docs/theory/spectra.md). It is a learned (recovered) mode when y > c.

  Detachment at finite d is the exact condition of the subordination solver: the bump of theta is a
  component of supp rho_delta of its own iff F(u) = int dmu/(u - x)^2 dips below 1/delta^2 in the gaps
  of supp mu on both sides of theta, i.e. delta < delta_c(theta) = max(min_gap_left F, min_gap_right F)^{-1/2}
  (:func:`detachment_delta`). For one spike on zeros of mass 1 - w this is theta/((1 + r)^{3/2} sqrt(1 - w)),
  r = (w/(1 - w))^{1/3}: the finite-d BBP point, below the d -> infinity one delta = theta by O(d^{-1/3}).

Singular values of W/(p d)^{1/4} are the square roots of the eigenvalues of S_hat = W^T W / sqrt(p d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import optimize

from ..problem import Problem
from ..targets import SpectralMeasure
from .spectral import FreeConvolution, _Kernel
from .state_evolution import SEResult, StateEvolution

__all__ = [
    "LearnedSpectrum",
    "Outlier",
    "learned_spectrum",
    "spectrum_from_result",
    "outlier_weight_limit",
    "spike_outlier",
    "recovered_modes",
    "outlier_alphas",
    "bulk_split_alpha",
    "detachment_delta",
    "kolmogorov_distance",
]


@dataclass(frozen=True)
class Outlier:
    """An isolated eigenvalue theta of S0 seen through the denoiser."""

    theta: float  # target eigenvalue
    y: float  # position in the spectrum of Y/m_hat = S0 + delta Z: psi_nu(theta) (d -> infinity formula)
    y_bump: float  # mean of its bump of rho_delta (finite d; nan when the bump has merged)
    overlap: float  # |<u_theta, u_hat>|^2 = 1 - delta^2 int dnu/(theta - x)^2 (0 when not detached)
    detached: bool  # separated from the rest of the spectrum of Y
    eigenvalue: float  # learned eigenvalue of S_hat: s (y - eps) if recovered, else 0
    recovered: bool  # detached and above the cut
    delta_c: float = math.nan  # bump alone iff delta < delta_c (computed for detached outliers, else nan)
    multiplicity: int = 1  # target modes at theta (a value repeated k times in a list of d: weight k/d)
    mass: float = math.nan  # mass of its eigenvalues above the cut (multiplicity/d; less when the cut crosses its bump)

    @property
    def singular_value(self) -> float:
        return math.sqrt(max(self.eigenvalue, 0.0))


@dataclass
class LearnedSpectrum:
    """Law of the eigenvalues of S_hat at one SE point. Eigenvalue units: those of S_hat."""

    alpha: float
    scale: float  # s = m_hat/sigma_hat
    delta: float
    eps: float
    cut: float  # c >= eps in units of Y/m_hat
    atom_zero: float  # mass of the atom at 0 (1 - rank)
    bulks: list[tuple[float, float, float]]  # (lo, hi, mass) of each bulk of S_hat's nonzero eigenvalues
    outliers: list[Outlier] = field(default_factory=list)
    phase: str = "regular"
    fc: FreeConvolution | None = field(default=None, repr=False)

    @property
    def rank(self) -> float:
        return 1.0 - self.atom_zero

    @property
    def n_recovered(self) -> int:
        """k*: target eigenvalues learned as outliers (detached and above the cut), counted with multiplicity."""
        return sum(o.multiplicity for o in self.outliers if o.recovered)

    @property
    def top(self) -> float:
        """Largest eigenvalue of S_hat (top bulk edge or top outlier; 0 in the zero phase)."""
        vals = [b[1] for b in self.bulks] + [o.eigenvalue for o in self.outliers if o.recovered]
        return max(vals, default=0.0)

    def _y(self, lam: np.ndarray) -> np.ndarray:
        return self.eps + np.asarray(lam, float) / self.scale

    def density(self, lam: np.ndarray) -> np.ndarray:
        """Density of the nonzero eigenvalues of S_hat at lam > 0 (the atom at 0 is ``atom_zero``)."""
        lam = np.atleast_1d(np.asarray(lam, float))
        if self.fc is None:
            return np.zeros_like(lam)
        y = self._y(lam)
        out = np.where(y > self.cut, self.fc.density(y) / self.scale, 0.0)
        return np.where(lam > 0, out, 0.0)

    def cdf(self, lam: np.ndarray) -> np.ndarray:
        """P(eigenvalue of S_hat <= lam), atom at 0 included (lam >= 0)."""
        lam = np.atleast_1d(np.asarray(lam, float))
        if self.fc is None:
            return np.where(lam >= 0, 1.0, 0.0)
        y = np.maximum(self._y(lam), self.cut)
        return np.where(lam >= 0, self.fc.cdf(y), 0.0)

    def singular_density(self, sv: np.ndarray) -> np.ndarray:
        """Density of the nonzero singular values of W/(p d)^{1/4} (sigma = sqrt(eigenvalue))."""
        sv = np.atleast_1d(np.asarray(sv, float))
        return 2.0 * sv * self.density(sv**2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "scale": self.scale,
            "delta": self.delta,
            "eps": self.eps,
            "cut": self.cut,
            "phase": self.phase,
            "atom_zero": self.atom_zero,
            "rank": self.rank,
            "top_eigenvalue": self.top,
            "top_singular_value": math.sqrt(max(self.top, 0.0)),
            "bulks": [{"lo": lo, "hi": hi, "mass": m} for lo, hi, m in self.bulks],
            "n_bulks": len(self.bulks),
            "outliers": [
                {"theta": o.theta, "y": o.y, "y_bump": o.y_bump, "overlap": o.overlap, "detached": o.detached,
                 "eigenvalue": o.eigenvalue, "singular_value": o.singular_value, "recovered": o.recovered,
                 "delta_c": o.delta_c, "multiplicity": o.multiplicity, "mass": o.mass}
                for o in self.outliers
            ],
            "n_recovered": self.n_recovered,
        }


# ------------------------------------------------------------------------------------------------
# outliers
# ------------------------------------------------------------------------------------------------
def spike_outlier(measure: SpectralMeasure, theta: float, delta: float) -> tuple[float, float]:
    """(y, overlap) of an eigenvalue theta of mu seen against the rest nu of the spectrum (mu without its atom
    at theta): y = theta + delta^2 g_nu(theta), overlap = 1 - delta^2 int dnu/(theta - x)^2 (<= 0: merged)."""
    g, f = _Kernel(measure).rest_sums(np.array([float(theta)]))
    t = delta * delta
    return float(theta + t * g[0]), float(1.0 - t * f[0])


def _gap_min_f(kern: _Kernel, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """min of F(u) = int dmu/(u - x)^2 over gaps (lo, hi) of supp mu, vectorised over the gaps. F is convex in
    a gap and infinite at both ends, so F' increases from -inf to +inf: bisection on its sign (60 halvings put
    the point within 1e-18 of the gap width of the minimiser; F is flat there, so F(u) is exact to rounding)."""
    a, b = lo + 1e-12 * (hi - lo), hi - 1e-12 * (hi - lo)
    for _ in range(60):
        mid = 0.5 * (a + b)
        up = kern.real_axis(mid)[2] > 0
        b = np.where(up, mid, b)
        a = np.where(up, a, mid)
    return kern.real_axis(0.5 * (a + b))[1]


def detachment_delta(measure: SpectralMeasure, theta, criterion: str = "bump") -> np.ndarray:
    """Critical noise level delta_c of each atom theta of mu: its outlier is detached iff delta < delta_c.

    ``criterion="bump"`` (finite d, exact for the deterministic rho_delta of the given d atoms): the bump of
    theta is a component of supp rho_delta of its own iff F(u) = int dmu/(u - x)^2 < 1/delta^2 somewhere in
    the gaps of supp mu on each side of theta (F is convex in a gap and infinite at its ends), so
    delta_c = max(min_left F, min_right F)^{-1/2}. This is the criterion of :func:`learned_spectrum`.
    ``criterion="bbp"`` (the d -> infinity spike description): delta_c = (int dnu/(theta - x)^2)^{-1/2}, nu = mu
    without the atom (overlap 1 - delta^2 int dnu/(theta - x)^2 > 0). 0 for theta inside a continuous part.
    """
    theta = np.atleast_1d(np.asarray(theta, float))
    kern = _Kernel(measure)
    if criterion == "bbp":
        _, f = kern.rest_sums(theta)
        with np.errstate(divide="ignore"):
            return np.where(np.isfinite(f), 1.0 / np.sqrt(f), 0.0)
    if criterion != "bump":
        raise ValueError(f"criterion must be 'bump' or 'bbp' (got {criterion!r})")
    atoms, w = measure.point_masses()
    atoms = np.sort(atoms[w > 0])
    cont = measure.support_intervals()
    inside = np.zeros(theta.shape, bool)
    left = np.full(theta.shape, -np.inf)  # nearest point of supp mu below / above each theta
    right = np.full(theta.shape, np.inf)
    if atoms.size:
        k = np.searchsorted(atoms, theta, side="left")  # atoms[k - 1] < theta (theta itself is an atom)
        left = np.where(k > 0, atoms[np.maximum(k - 1, 0)], -np.inf)
        k = np.searchsorted(atoms, theta, side="right")
        right = np.where(k < atoms.size, atoms[np.minimum(k, atoms.size - 1)], np.inf)
    for lo, hi in cont:
        inside |= (theta >= lo) & (theta <= hi)
        left = np.where(hi < theta, np.maximum(left, hi), left)
        right = np.where(lo > theta, np.minimum(right, lo), right)
    fmin = np.zeros(theta.shape)
    for a, b in ((left, theta), (theta, right)):
        ok = ~inside & np.isfinite(a) & np.isfinite(b)
        if np.any(ok):
            fmin[ok] = np.maximum(fmin[ok], _gap_min_f(kern, a[ok], b[ok]))
    with np.errstate(divide="ignore"):
        out = np.where(fmin > 0, 1.0 / np.sqrt(fmin), np.inf)
    return np.where(inside, 0.0, out)


def _outliers(fc: FreeConvolution, scale: float, eps: float, cut: float, max_weight: float) -> list[Outlier]:
    mu = fc.measure
    if mu.atoms.size == 0:
        return []
    theta_all, weight_all = mu.point_masses()
    cand = np.flatnonzero((weight_all <= max_weight) & (theta_all != 0.0))
    if cand.size == 0:
        return []
    bulks = fc.bulks()
    # which atoms sit alone in their component of supp rho_delta
    alone: dict[float, dict] = {}
    for b in bulks:
        if b["atoms"].size == 1 and not b["continuous"]:
            alone[float(b["atoms"][0])] = b
    g, f = _Kernel(mu).rest_sums(theta_all[cand])
    # delta_c for the atoms alone in their bump (nan for the others: cheap for long lists)
    dc = np.full(cand.size, np.nan)
    is_alone = np.array([float(theta_all[i]) in alone for i in cand], bool)
    if np.any(is_alone):
        dc[is_alone] = detachment_delta(mu, theta_all[cand][is_alone])
    t = fc.t
    out = []
    for k, i in enumerate(cand):
        theta = float(theta_all[i])
        mult = max(1, int(round(weight_all[i] * mu.d))) if mu.d else 1
        y = theta + t * g[k]
        ov = 1.0 - t * f[k]
        b = alone.get(theta)
        detached = b is not None and ov > 0
        y_bump = float("nan")
        if b is not None:
            r = fc.adaptive([(b["u_lo"], b["u_hi"], 0.5, 0.5)], lambda yy, rg: [np.ones_like(yy), yy])
            y_bump = float(r["totals"][1] / r["totals"][0])
        pos = y_bump if detached else y
        recovered = bool(detached and pos > cut)
        out.append(Outlier(theta=theta, y=float(y), y_bump=y_bump, overlap=float(max(ov, 0.0)) if detached else 0.0,
                           detached=bool(detached), eigenvalue=float(scale * (pos - eps)) if recovered else 0.0,
                           recovered=recovered, delta_c=float(dc[k]), multiplicity=mult,
                           mass=float(weight_all[i]) if recovered else 0.0))
    out.sort(key=lambda o: -o.theta)
    return out


# ------------------------------------------------------------------------------------------------
# the law at one SE point
# ------------------------------------------------------------------------------------------------
#: the largest weight of a target atom that can be an outlier, whatever d
OUTLIER_WEIGHT = 0.01


def outlier_weight_limit(measure: SpectralMeasure) -> float:
    """The largest weight of a target atom that counts as an isolated mode (an outlier candidate).

    For a list-based target of dimension d (``measure.d``): max(:data:`OUTLIER_WEIGHT`, 1/sqrt(d), 1.5/d). A spike
    weighs 1/d, more than 0.01 below d = 100 (it used to be drawn as a bulk of mass 1/d there); a value repeated k
    times weighs k/d and is k outliers at one place as long as k <= sqrt(d) (spikes 3, 3, 3 at d = 100: three
    learned eigenvalues next to each other in training), while an atom of macroscopic weight (a custom list with
    repeated levels, S0 = c I) is a bulk of its own, not a spike: its weight stays above the limit as d grows.
    Without ``measure.d`` (a measure built by hand): 0.01, or 1.5 x the lightest nonzero atom where larger."""
    if measure.d:
        return max(OUTLIER_WEIGHT, 1.0 / math.sqrt(measure.d), 1.5 / measure.d)
    atoms, weights = measure.point_masses()
    w = weights[(atoms != 0.0) & (weights > 0)]
    return max(OUTLIER_WEIGHT, 1.5 * float(w.min())) if w.size else OUTLIER_WEIGHT


def perfect_recovery_message(problem: Problem, alpha: float) -> str:
    """Why a perfect-recovery point (noiseless, lambda -> 0+, alpha_bar >= alpha_bar_PR: delta = 0) has no law here."""
    r = problem.task.beta0 / problem.student.beta
    return (f"perfect recovery at alpha={alpha:g} (noiseless, lambda -> 0+; delta = 0): S_hat = {r:g} S0 (beta0/beta), "
            "so the learned spectrum is the target's own scaled by that factor; the free-convolution law is not "
            "built at delta = 0")


def spectrum_from_result(problem: Problem, measure: SpectralMeasure, res: SEResult,
                         max_outlier_weight: float | None = None) -> LearnedSpectrum:
    """Learned spectrum at a solved SE point ``res`` (regular, interpolating or zero phase). A target atom of
    weight <= ``max_outlier_weight`` (default :func:`outlier_weight_limit`) that forms a component of its own is an
    outlier; heavier ones are bulks."""
    if max_outlier_weight is None:
        max_outlier_weight = outlier_weight_limit(measure)
    if not res.converged:
        raise FloatingPointError(f"the SE point at alpha={res.alpha:g} did not converge: {res.message}")
    if res.phase == "zero":
        return LearnedSpectrum(res.alpha, 0.0, res.delta, res.eps, math.inf, 1.0, [], [], "zero", None)
    if problem.student.model == "direct":
        raise ValueError("the learned-spectrum law is implemented for the factorised student")
    if res.phase == "interpolating":
        scale = problem.task.beta0 / problem.student.beta
    else:
        scale = res.m_hat / res.sigma_hat
    delta, eps = res.delta, res.eps
    if delta == 0.0:  # (FreeConvolution raised "delta must be > 0" through every caller)
        raise ValueError(perfect_recovery_message(problem, res.alpha))
    fc = FreeConvolution(measure, delta)
    cut = eps
    si = fc.integrals(eps)
    if problem.student.kappa < 1 and si.rank > problem.student.kappa:
        cut = fc.quantile(problem.student.kappa)
    atom = float(fc.cdf(np.array([cut]))[0])
    bulks = []
    cdf_cut = atom
    for b in fc.bulks():
        # (a component of S0's null space alone is a bulk whatever its mass: no outlier is at theta = 0)
        if b["continuous"] or b["atoms"].size != 1 or b["mass"] > max_outlier_weight or b["atoms"][0] == 0.0:
            if b["y_hi"] <= cut:
                continue
            lo_y = max(b["y_lo"], cut)
            mass = b["mass"] if b["y_lo"] >= cut else float(fc.cdf(np.array([b["y_hi"]]))[0]) - cdf_cut
            bulks.append((float(scale * (lo_y - eps)), float(scale * (b["y_hi"] - eps)), float(mass)))
    outliers = _outliers(fc, scale, eps, cut, max_outlier_weight)
    # an outlier's bump that the cut crosses (a mode being recovered through the threshold, or a narrow student
    # whose kappa d is not an integer): only its part above the cut is in the law (the rest is in the atom at 0).
    # Recovered (bump mean above the cut): the outlier's mass is that part; not recovered: that part is a bulk.
    # (Before, the whole bump was counted as well as its part in the atom: total mass 1.005 at kappa d = 4.5.)
    crossed = {float(b["atoms"][0]): b for b in fc.bulks() if b["atoms"].size == 1 and not b["continuous"]
               and b["y_lo"] < cut < b["y_hi"]}
    for j, o in enumerate(outliers):
        b = crossed.get(o.theta)
        if b is None:
            continue
        above = float(fc.cdf(np.array([b["y_hi"]]))[0] - fc.cdf(np.array([cut]))[0])
        if o.recovered:  # its eigenvalue: the mean over that part
            r = fc.adaptive([(b["u_lo"], b["u_hi"], 0.5, 0.5)],
                            lambda yy, rg: [(yy > cut).astype(float), np.where(yy > cut, yy, 0.0)])
            outliers[j] = replace(o, mass=above, eigenvalue=float(scale * (r["totals"][1] / r["totals"][0] - eps)))
        elif above > 0:
            bulks.append((0.0, float(scale * (b["y_hi"] - eps)), above))
    return LearnedSpectrum(res.alpha, float(scale), float(delta), float(eps), float(cut), atom, bulks, outliers,
                           res.phase, fc)


def learned_spectrum(problem: Problem, alpha: float, d: int | None = None, se: StateEvolution | None = None,
                     init=None) -> LearnedSpectrum:
    """Solve the SE at alpha and return the law of the learned spectrum."""
    se = se if se is not None else StateEvolution(problem, d=d)
    res = se.solve(alpha, init=init)
    return spectrum_from_result(problem, se.measure, res)


def recovered_modes(problem: Problem, alphas, d: int | None = None) -> list[dict[str, Any]]:
    """k*(alpha): the number of target eigenvalues learned as outliers along a warm-started curve."""
    se = StateEvolution(problem, d=d)
    out = []
    for res in se.learning_curve(alphas):
        sp = spectrum_from_result(problem, se.measure, res)
        out.append({"alpha": res.alpha, "n_recovered": sp.n_recovered,
                    "recovered": [o.theta for o in sp.outliers if o.recovered]})
    return out


def outlier_alphas(problem: Problem, alphas, d: int | None = None, max_weight: float | None = None,
                   criterion: str = "bump", rtol: float = 1e-7, details: bool = False) -> dict[float, Any]:
    """For each isolated target eigenvalue theta: the alpha at which its outlier appears (detached and above
    the cut), by a root find on the alpha axis.

    The margin of theta at a solved SE point is M(alpha) = min(1 - delta^2/delta_c^2, (y - c)/max(|c|, 1)),
    y = psi_nu(theta) = theta + delta^2 g_nu(theta) its position and c the cut: detached iff delta < delta_c
    (:func:`detachment_delta`, ``criterion`` "bump" = finite d, the criterion of :func:`learned_spectrum`, or
    "bbp" = the d -> infinity spike condition), recovered iff also y > c. M is tabulated on the (sorted) grid
    ``alphas`` (warm-started SE curve); the first sign change from <= 0 to > 0 is then refined by Brent's method
    in log alpha (each evaluation one SE solve warm-started from the bracket end) to relative accuracy ``rtol``.
    Returns {theta: alpha} (grid[0] if already recovered there, nan if it never appears on the grid); with
    ``details``, {theta: {"alpha", "delta_c", "binding" ("detachment" or "cut"), "bracket"}}. In the zero phase
    (S_hat = 0) nothing is recovered (M = -1).
    """
    se = StateEvolution(problem, d=d)
    grid = sorted(float(a) for a in alphas)
    theta, weight = se.measure.point_masses()
    if max_weight is None:
        max_weight = outlier_weight_limit(se.measure)
    theta = theta[(weight <= max_weight) & (theta != 0.0)]
    g, _ = _Kernel(se.measure).rest_sums(theta)
    dc = detachment_delta(se.measure, theta, criterion)

    def parts(res: SEResult) -> tuple[np.ndarray, np.ndarray]:
        """(detachment margin, cut margin) of every theta at a converged SE point."""
        if res.phase == "zero":
            return np.full(theta.size, -1.0), np.full(theta.size, -1.0)
        sp = spectrum_from_result(problem, se.measure, res)
        t = sp.delta**2
        with np.errstate(divide="ignore"):
            det = 1.0 - t / dc**2
        return det, (theta + t * g - sp.cut) / max(abs(sp.cut), 1.0)

    results = se.learning_curve(grid)
    margins = np.full((len(grid), theta.size), np.nan)  # nan where the SE did not converge: never a bracket end
    for j, res in enumerate(results):
        if res.converged:
            margins[j] = np.minimum(*parts(res))
    out: dict[float, Any] = {}
    for k, th in enumerate(theta):
        m = margins[:, k]
        up = np.flatnonzero((m[:-1] <= 0) & (m[1:] > 0))  # (comparisons with nan are False)
        info: dict[str, Any] = {"alpha": float("nan"), "delta_c": float(dc[k]), "binding": None, "bracket": None}
        if m[0] > 0:
            info.update(alpha=grid[0], bracket=(grid[0], grid[0]))
        elif up.size:
            j = up[0]
            warm = {"lo": results[j], "hi": results[j + 1]}

            def margin(log_a: float, k=k, th=th, warm=warm) -> float:
                a = math.exp(log_a)
                ref = warm["lo"] if abs(log_a - math.log(warm["lo"].alpha)) < abs(log_a - math.log(warm["hi"].alpha)) \
                    else warm["hi"]
                res = se.solve_warm(a, ref)  # (cold as well where the warm solve stalls: a QMC point did, docs)
                if not res.converged:
                    raise FloatingPointError(f"SE did not converge at alpha={a:g} while locating theta={th:g}")
                return float(min(part[k] for part in parts(res)))

            la = optimize.brentq(margin, math.log(grid[j]), math.log(grid[j + 1]), xtol=rtol, rtol=1e-15)
            a_star = math.exp(la)
            res = se.solve_warm(a_star, results[j + 1])
            det, cut = parts(res)
            info.update(alpha=a_star, bracket=(grid[j], grid[j + 1]),
                        binding="detachment" if det[k] <= cut[k] else "cut")
        out[float(th)] = info if details else info["alpha"]
    return out


def bulk_split_alpha(problem: Problem, alpha_lo: float = 0.05, alpha_hi: float = 50.0, d: int | None = None,
                     num: int = 12, bisections: int = 12) -> float:
    """Smallest alpha at which the learned spectrum has two bulks (nan if not in [alpha_lo, alpha_hi]).

    The number of bulks of S_hat (components of rho_delta above the cut, outliers excluded) is tabulated
    on a geometric grid, then the first change 1 -> 2 is refined by bisection in log alpha.
    """
    se = StateEvolution(problem, d=d)

    def nb(alpha, init=None):
        res = se.solve_warm(alpha, init)  # (cold as well where the warm solve fails, as outlier_alphas)
        return len(spectrum_from_result(problem, se.measure, res).bulks), res

    grid = np.geomspace(alpha_lo, alpha_hi, num)
    prev_n, prev_res = nb(grid[0])
    if prev_n >= 2:
        return float(grid[0])
    for a0, a1 in zip(grid[:-1], grid[1:], strict=True):
        n1, res1 = nb(a1, prev_res)
        if n1 >= 2:
            lo, hi = a0, a1
            ref = prev_res
            for _ in range(bisections):
                mid = math.sqrt(lo * hi)
                nm, rm = nb(mid, ref)
                if nm >= 2:
                    hi = mid
                else:
                    lo, ref = mid, rm
            return float(math.sqrt(lo * hi))
        prev_n, prev_res = n1, res1
    return float("nan")


def kolmogorov_distance(samples: np.ndarray, cdf) -> float:
    """sup_x |F_n(x) - F(x)| for a 1-D sample and a CDF callable (which may have atoms)."""
    x = np.asarray(samples, float).ravel()
    ux, counts = np.unique(x, return_counts=True)
    upper = np.cumsum(counts) / x.size  # F_n(ux)
    lower = upper - counts / x.size  # F_n(ux - 0)
    fu = np.asarray(cdf(ux), float)
    fl = np.asarray(cdf(np.nextafter(ux, -np.inf)), float)
    return float(max(np.max(np.abs(upper - fu)), np.max(np.abs(lower - fl))))
