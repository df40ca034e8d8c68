r"""Free additive convolution with the semicircle and the spectral integrals of the state evolution.

rho_delta = mu_{S0} boxplus semicircle(variance t = delta^2). We use Biane's parametrisation of the
subordination function (P. Biane, Indiana Univ. Math. J. 46 (1997)): for real u let

    v(u) = inf{ v >= 0 : phi(u, v) <= 1/t },   phi(u, v) = int dmu(x) / ((u - x)^2 + v^2) = -Im g(u+iv)/v,

then u -> y = psi(u) = u + t Re g(u + i v(u)) is an increasing homeomorphism of the real line, the
subordination point is omega(y) = u + i v(u), and

    g_delta(y) = g_{S0}(omega),   rho_delta(y) = v(u)/(pi t),   Re g_delta(y) = Re g_{S0}(u + i v(u)).

Only the Stieltjes transform g_{S0} (and g') off the real axis is needed, so one code path serves the
Marchenko-Pastur law (closed form), finite lists of eigenvalues, and atoms on top of a density.

The support of rho_delta is the image of {u : v(u) > 0}; its edges are the roots of
F(u) := int dmu/(u-x)^2 = 1/t in the gaps of supp mu. F is convex in each gap, so a gap of supp mu stays
open (two edges) iff min F < 1/t there. Near an edge v ~ sqrt(u - u_edge) while psi is analytic, so
integrals over rho_delta become integrals in u of (smooth) x sqrt(edge distance): Gauss-Jacobi rules with
exponent 1/2 at edge ends resolve them to machine precision (node count doubled until two rules agree).

Integrals for the state evolution (eps the soft threshold):
    I(delta, eps)   = int (y - eps)_+^2 rho_delta(y) dy
    dI/deps         = -2 int (y - eps)_+ rho_delta(y) dy
    dI/ddelta       = 4 delta int (y - eps)_+ rho_delta(y) Re g_delta(y) dy          (free heat flow)
    rank(delta,eps) = int_{y > eps} rho_delta(y) dy
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, special

from ..targets import SpectralMeasure

__all__ = [
    "FreeConvolution",
    "SpectralIntegrals",
    "spectral_integrals",
]

_TWO_PI = 2.0 * np.pi


@lru_cache(maxsize=64)
def _jacobi_rule(n: int, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Jacobi nodes/weights on [-1, 1] for weight (1 - x)^a (1 + x)^b (cached)."""
    x, w = special.roots_jacobi(n, a, b)
    return x, w


@dataclass(frozen=True)
class SpectralIntegrals:
    """Spectral integrals at (delta, eps) with their quadrature error estimates."""

    delta: float
    eps: float
    I: float  # noqa: E741 - name from the theory
    dI_ddelta: float
    dI_deps: float
    rank: float
    mass: float  # int rho_delta (= 1 up to quadrature error; a check)
    error: float  # estimated absolute quadrature error (max over the integrals)
    nodes: int


class FreeConvolution:
    """rho_delta = mu boxplus semicircle(delta^2) for a :class:`SpectralMeasure` mu.

    Construct once per (measure, delta); all methods are deterministic. ``delta > 0``.
    """

    def __init__(self, measure: SpectralMeasure, delta: float, rtol: float = 1e-12):
        if not np.isfinite(delta) or delta <= 0:
            raise ValueError(f"delta must be > 0 (got {delta})")
        self.measure = measure
        self.delta = float(delta)
        self.t = self.delta**2
        self.rtol = rtol
        self.intervals_u = self._support_u()

    # ------------------------------------------------------------------ subordination -----------
    def _phi0(self, u: np.ndarray) -> np.ndarray:
        """F(u) = int dmu/(u-x)^2 = -g'(u) for real u outside supp mu."""
        _, dg = self.measure.stieltjes(np.asarray(u, dtype=float) + 0j)
        return -dg.real

    def solve_v(self, u: np.ndarray) -> np.ndarray:
        """v(u) >= 0 for an array of u inside the support intervals (vectorised safeguarded Newton).

        Solves h(s) = t for s = v^2, where h(s) = 1/phi(u, sqrt s) is the harmonic mean of
        (u-x)^2 + s: concave and increasing in s, with s <= h(s) <= s + int (u-x)^2 dmu, so the root
        lies in [max(0, t - A), t] with A = int (u - x)^2 dmu. Newton from the left end of the bracket
        converges monotonically for a concave increasing function; bisection guards the first steps.
        """
        u = np.asarray(u, dtype=float)
        t = self.t
        m1, m2 = self.measure.moment(1), self.measure.moment(2)
        a_var = u**2 - 2 * u * m1 + m2
        lo = np.maximum(t - a_var, 0.0)
        hi = np.full_like(u, t)
        s = 0.5 * (lo + hi)
        for _ in range(200):
            v = np.sqrt(s)
            z = u + 1j * v
            g, dg = self.measure.stieltjes(z)
            phi = -g.imag / v
            h = 1.0 / phi
            f = h - t
            # dphi/ds = (dphi/dv)/(2v); dphi/dv = -Re g'/v + Im g/v^2
            dphi_dv = -dg.real / v + g.imag / v**2
            dh_ds = -(dphi_dv / (2 * v)) / phi**2
            lo = np.where(f < 0, s, lo)
            hi = np.where(f > 0, s, hi)
            s_new = s - f / dh_ds
            bad = ~np.isfinite(s_new) | (s_new <= lo) | (s_new >= hi)
            s_new = np.where(bad, 0.5 * (lo + hi), s_new)
            done = np.abs(s_new - s) <= 1e-15 * np.maximum(s, 1e-300) + 1e-300
            s = s_new
            if np.all(done | (hi - lo <= 4e-16 * hi)):
                break
        return np.sqrt(s)

    def _at(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """y = psi(u), density rho_delta(y), Re g_delta(y), dpsi/du at the points u (v > 0)."""
        t = self.t
        v = self.solve_v(u)
        z = u + 1j * v
        g, dg = self.measure.stieltjes(z)
        y = u + t * g.real
        # v'(u) from phi(u, v(u)) = 1/t
        dphi_du = -dg.imag / v
        dphi_dv = -dg.real / v + g.imag / v**2
        dv_du = -dphi_du / dphi_dv
        dpsi = 1.0 + t * (dg.real - dg.imag * dv_du)
        return {"u": u, "v": v, "y": y, "rho": v / (np.pi * t), "re_g": g.real, "dpsi": dpsi}

    def psi(self, u: np.ndarray) -> np.ndarray:
        """y = psi(u) (also outside the support, where v = 0)."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        inside = self._inside(u)
        out = np.empty_like(u)
        if np.any(inside):
            out[inside] = self._at(u[inside])["y"]
        if np.any(~inside):
            g, _ = self.measure.stieltjes(u[~inside] + 0j)
            out[~inside] = u[~inside] + self.t * g.real
        return out

    def _inside(self, u: np.ndarray) -> np.ndarray:
        inside = np.zeros(u.shape, dtype=bool)
        for lo, hi in self.intervals_u:
            inside |= (u > lo) & (u < hi)
        return inside

    # ------------------------------------------------------------------ support ----------------
    def _components(self) -> list[tuple[float, float]]:
        """Connected components of supp mu as closed intervals (atoms are degenerate intervals)."""
        comps = [(float(a), float(a)) for a in self.measure.point_masses()[0]]
        comps += [(float(lo), float(hi)) for lo, hi in self.measure.support_intervals()]
        comps.sort()
        merged: list[tuple[float, float]] = []
        for lo, hi in comps:
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        return merged

    def _support_u(self) -> list[tuple[float, float]]:
        """Intervals of u where v(u) > 0 (their images under psi are the bulks of rho_delta).

        F(u) = int dmu/(u-x)^2 blows up at every component of supp mu (atoms, and square-root or hard
        edges of densities) and is convex in every gap, so each gap holds zero or two edges and each
        side of the support one.
        """
        inv_t = 1.0 / self.t
        comps = self._components()

        def f(u: float) -> float:
            return float(self._phi0(np.array([u]))[0]) - inv_t

        sd = np.sqrt(self.t)

        def approach(x: float, direction: float, limit: float = np.inf) -> float:
            """A point next to the component at x (on the given side, within ``limit``) where F > 1/t."""
            h = min(sd, 0.5 * limit)
            floor = 1e-15 * max(1.0, abs(x))
            while h > floor:
                if f(x + direction * h) > 0:
                    return x + direction * h
                h *= 0.25
            return x + direction * floor

        def away(x: float, direction: float) -> float:
            """A point beyond the support on the given side where F < 1/t."""
            h = sd
            while f(x + direction * h) > 0:
                h *= 2
            return x + direction * h

        lo0, hi_last = comps[0][0], comps[-1][1]
        edges = [_root_between(f, away(lo0, -1), approach(lo0, -1))]
        for (_, a_hi), (b_lo, _) in zip(comps[:-1], comps[1:], strict=True):
            width = b_lo - a_hi
            if width <= 0:
                continue
            res = optimize.minimize_scalar(
                lambda u: self._phi0(np.array([u]))[0],
                bounds=(a_hi + 1e-9 * width, b_lo - 1e-9 * width),
                method="bounded",
                options={"xatol": 1e-14 * max(1.0, abs(a_hi))},
            )
            if res.fun >= inv_t:
                continue
            edges.append(_root_between(f, approach(a_hi, +1, res.x - a_hi), res.x))
            edges.append(_root_between(f, res.x, approach(b_lo, -1, b_lo - res.x)))
        edges.append(_root_between(f, approach(hi_last, +1), away(hi_last, +1)))
        return [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]

    # ------------------------------------------------------------------ quadrature -------------
    def _rule(self, lo: float, hi: float, lo_edge: bool, n: int) -> dict[str, np.ndarray]:
        """Nodes on [lo, hi] in u with weights including the Jacobian, density and sqrt edge factors.

        Returns y, weights w (so that int F(y) rho_delta(y) dy ~ sum w F(y)), Re g at nodes.
        """
        a_exp = 0.5  # right end is always an edge
        b_exp = 0.5 if lo_edge else 0.0
        x, wj = _jacobi_rule(n, a_exp, b_exp)
        half = 0.5 * (hi - lo)
        u = lo + half * (x + 1.0)
        pts = self._at(u)
        # weight function (1-x)^a (1+x)^b already in wj; divide it out of the integrand
        wfun = (1.0 - x) ** a_exp * (1.0 + x) ** b_exp
        w = wj * half * pts["rho"] * pts["dpsi"] / wfun
        return {"y": pts["y"], "w": w, "re_g": pts["re_g"]}

    def _u_of_y(self, y: float, lo: float, hi: float) -> float:
        """Inverse of psi on one support interval (psi is increasing)."""
        return _root_between(lambda u: self.psi(np.array([u]))[0] - y, lo, hi)

    def integrals(self, eps: float, n0: int = 48, n_max: int = 6144) -> SpectralIntegrals:
        """I, dI/ddelta, dI/deps, rank at threshold eps, with adaptive node doubling."""
        pieces = []
        for lo, hi in self.intervals_u:
            y_hi = self.psi(np.array([hi]))[0]
            if y_hi <= eps:
                continue
            y_lo = self.psi(np.array([lo]))[0]
            if y_lo >= eps:
                pieces.append((lo, hi, True))
            else:
                pieces.append((self._u_of_y(eps, lo, hi), hi, False))
        total = np.zeros(5)
        err = 0.0
        nodes = 0
        for lo, hi, lo_edge in pieces:
            n = n0
            prev = self._piece(lo, hi, lo_edge, n, eps)
            while True:
                n *= 2
                cur = self._piece(lo, hi, lo_edge, n, eps)
                diff = np.max(np.abs(cur - prev))
                if diff <= self.rtol * max(1.0, np.max(np.abs(cur))) or n >= n_max:
                    break
                prev = cur
            total += cur
            err = max(err, diff)
            nodes += n
        mass = self.mass()
        return SpectralIntegrals(
            delta=self.delta,
            eps=float(eps),
            I=float(total[0]),
            dI_ddelta=float(4.0 * self.delta * total[2]),
            dI_deps=float(-2.0 * total[1]),
            rank=float(total[3]),
            mass=mass,
            error=float(err),
            nodes=nodes,
        )

    def _piece(self, lo: float, hi: float, lo_edge: bool, n: int, eps: float) -> np.ndarray:
        r = self._rule(lo, hi, lo_edge, n)
        yp = np.maximum(r["y"] - eps, 0.0)
        w = r["w"]
        return np.array([w @ yp**2, w @ yp, w @ (yp * r["re_g"]), w.sum(), 0.0])

    # ------------------------------------------------------------------ densities, moments -----
    def moments(self, kmax: int = 4, n: int = 512) -> np.ndarray:
        """int y^k rho_delta(y) dy for k = 0..kmax (quadrature)."""
        out = np.zeros(kmax + 1)
        for lo, hi in self.intervals_u:
            r = self._rule(lo, hi, True, n)
            for k in range(kmax + 1):
                out[k] += r["w"] @ r["y"] ** k
        return out

    def mass(self, n: int = 256) -> float:
        return float(self.moments(0, n)[0])

    def support(self) -> list[tuple[float, float]]:
        """Bulks of rho_delta in y: [(y_lo, y_hi), ...]."""
        return [
            (float(self.psi(np.array([lo]))[0]), float(self.psi(np.array([hi]))[0]))
            for lo, hi in self.intervals_u
        ]

    def density(self, y: np.ndarray) -> np.ndarray:
        """rho_delta(y) on an array of y (0 outside the support)."""
        y = np.atleast_1d(np.asarray(y, dtype=float))
        out = np.zeros_like(y)
        for lo, hi in self.intervals_u:
            ylo, yhi = self.psi(np.array([lo]))[0], self.psi(np.array([hi]))[0]
            sel = (y > ylo) & (y < yhi)
            for i in np.flatnonzero(sel):
                u = self._u_of_y(y[i], lo, hi)
                out[i] = self.solve_v(np.array([u]))[0] / (np.pi * self.t)
        return out

    def cdf(self, y: np.ndarray, n: int = 256) -> np.ndarray:
        """Distribution function of rho_delta at the points y."""
        y = np.atleast_1d(np.asarray(y, dtype=float))
        out = np.zeros_like(y)
        for lo, hi in self.intervals_u:
            ylo, yhi = self.psi(np.array([lo]))[0], self.psi(np.array([hi]))[0]
            full = self._rule(lo, hi, True, n)["w"].sum()
            out += np.where(y >= yhi, full, 0.0)
            inside = np.flatnonzero((y > ylo) & (y < yhi))
            for i in inside:
                uc = self._u_of_y(y[i], lo, hi)
                # integral over [uc, hi] (right edge only), subtract from the full bulk mass
                r = self._rule(uc, hi, False, n)
                out[i] += full - r["w"].sum()
        return out


def _root_between(f, a: float, b: float) -> float:
    """Root of a continuous f with a sign change on [a, b] (Brent), to full precision."""
    fa, fb = f(a), f(b)
    if fa == 0:
        return a
    if fb == 0:
        return b
    if np.sign(fa) == np.sign(fb):
        # at an endpoint where f is infinite/undefined (atom), nudge inward
        raise ValueError("no sign change")
    return optimize.brentq(f, a, b, xtol=1e-15, rtol=1e-15, maxiter=500)


def spectral_integrals(measure: SpectralMeasure, delta: float, eps: float) -> SpectralIntegrals:
    """Convenience wrapper: FreeConvolution(measure, delta).integrals(eps)."""
    return FreeConvolution(measure, delta).integrals(eps)
