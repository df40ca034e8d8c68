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

from ..targets import SpectralMeasure, mp_edges, mp_stieltjes

__all__ = [
    "FreeConvolution",
    "SpectralIntegrals",
    "ThresholdFamily",
    "ThresholdIntegrals",
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
    error: float  # estimated absolute quadrature error (sum over the accepted panels)
    nodes: int
    cut: float | None = None  # the cut c of a narrow student (None: c = eps)


_BLOCK = 1 << 15  # elements of one (nodes x atoms) block: small enough to stay in cache
_NP, _NP_CHECK = 16, 10  # Gauss nodes per panel, and the lower-order rule that checks it
_MAX_LEVEL = 48
_MAX_ACTIVE = 4096  # panels refined at once beyond 16 per initial piece (ordinary solves use <= 70 in all)
# a panel is not halved below this width relative to |u| (~5e3 ulps): an edge is only known to rounding, and nodes
# closer to it than that give v ~ 0 and dpsi = -inf (a d = 100 power law's 100 bumps at delta = 3.9e-5: at level
# 26, width 5.7e-14 at u = 8.6, the totals were -inf); such a panel is accepted, its disagreement in the error
_U_RESOLUTION = 1e-12
_DEBUG = False


def _mp_second_derivative(z: np.ndarray, kappa0: float) -> np.ndarray:
    """g''(z) of the MP target law (real z off the support), by implicit differentiation of its quadratic.

    With P(w, g) = c w g^2 - (w + c - 1) g + 1 (c = 1/kappa0, w = z/s, s = sqrt(kappa0)):
    g_w = -P_w/P_g and g_ww = -(2 P_wg g_w + P_gg g_w^2)/P_g (P_ww = 0), then g_S0'' = g_ww / s^3.
    """
    s = np.sqrt(kappa0)
    c = 1.0 / kappa0
    w = np.asarray(z, dtype=complex) / s
    g, dg = mp_stieltjes(z, kappa0)
    gm, dgm = g * s, dg * s * s
    p_g = 2.0 * c * w * gm - (w + c - 1.0)
    d2gm = -(2.0 * (2.0 * c * gm - 1.0) * dgm + 2.0 * c * w * dgm**2) / p_g
    return d2gm / s**3


class _Kernel:
    """Sums over mu in real arithmetic: atoms by blocked direct summation, the MP part in closed form.

    Blocking keeps every temporary of shape (nodes x atoms) at ~256 kB, so a list of d = 10^4
    eigenvalues never builds a large matrix.
    """

    def __init__(self, measure: SpectralMeasure):
        keep = measure.weights > 0
        self.a = np.ascontiguousarray(measure.atoms[keep])
        self.w = np.ascontiguousarray(measure.weights[keep])
        has_mp = measure.mp_kappa0 is not None and measure.mp_mass > 0
        self.kappa0 = float(measure.mp_kappa0) if has_mp else None
        self.mp_mass = float(measure.mp_mass) if has_mp else 0.0
        self.step = max(1, _BLOCK // max(self.a.size, 1))

    def _blocks(self, n: int):
        for i in range(0, n, self.step):
            yield slice(i, min(i + self.step, n))

    def phi(self, u: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """phi = int dmu/((u-x)^2 + s) and dphi/ds (s = v^2 > 0)."""
        phi = np.zeros(u.shape)
        dphi = np.zeros(u.shape)
        if self.a.size:
            for sl in self._blocks(u.size):
                r = u[sl, None] - self.a
                np.multiply(r, r, out=r)
                r += s[sl, None]
                np.reciprocal(r, out=r)
                phi[sl] = r @ self.w
                np.multiply(r, r, out=r)
                dphi[sl] = -(r @ self.w)
        if self.kappa0 is not None:
            v = np.sqrt(s)
            g, dg = mp_stieltjes(u + 1j * v, self.kappa0)
            phi += self.mp_mass * (-g.imag / v)
            dphi += self.mp_mass * (-dg.real / v + g.imag / s) / (2.0 * v)
        return phi, dphi

    def g_dg(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """g(u + iv) and g'(u + iv) (v > 0, or v = 0 off the support)."""
        s = v * v
        re_g, im_g = np.zeros(u.shape), np.zeros(u.shape)
        re_dg, im_dg = np.zeros(u.shape), np.zeros(u.shape)
        if self.a.size:
            for sl in self._blocks(u.size):
                r = u[sl, None] - self.a
                den = r * r
                den += s[sl, None]
                np.reciprocal(den, out=den)  # D
                rd = r * den  # r D
                re_g[sl] = rd @ self.w
                im_g[sl] = -v[sl] * (den @ self.w)
                im_dg[sl] = 2.0 * v[sl] * ((rd * den) @ self.w)
                np.multiply(den, den, out=den)  # D^2
                np.multiply(rd, rd, out=rd)  # r^2 D^2
                re_dg[sl] = s[sl] * (den @ self.w) - rd @ self.w
        g = re_g + 1j * im_g
        dg = re_dg + 1j * im_dg
        if self.kappa0 is not None:
            gm, dgm = mp_stieltjes(u + 1j * v, self.kappa0)
            g = g + self.mp_mass * gm
            dg = dg + self.mp_mass * dgm
        return g, dg

    def real_axis(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Re g(u), F(u) = int dmu/(u-x)^2 and F'(u) for real u outside supp mu."""
        g = np.zeros(u.shape)
        f = np.zeros(u.shape)
        df = np.zeros(u.shape)
        if self.a.size:
            for sl in self._blocks(u.size):
                inv = 1.0 / (u[sl, None] - self.a)
                g[sl] = inv @ self.w
                inv2 = inv * inv
                f[sl] = inv2 @ self.w
                df[sl] = -2.0 * ((inv2 * inv) @ self.w)
        if self.kappa0 is not None:
            z = u + 0j
            gm, dgm = mp_stieltjes(z, self.kappa0)
            g += self.mp_mass * gm.real
            f += self.mp_mass * (-dgm.real)
            df += self.mp_mass * (-_mp_second_derivative(z, self.kappa0).real)
        return g, f, df


    def rest_sums(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each atom position theta_k: g_nu(theta_k) = int dnu/(theta_k - x) and int dnu/(theta_k - x)^2,
        nu = mu without its atoms at theta_k (the rest of the spectrum seen by an isolated eigenvalue).
        inf where theta_k lies inside the continuous (MP) part."""
        theta = np.atleast_1d(np.asarray(theta, float))
        g = np.zeros(theta.shape)
        f = np.zeros(theta.shape)
        if self.a.size:
            for sl in self._blocks(theta.size):
                diff = theta[sl, None] - self.a
                same = diff == 0
                diff[same] = 1.0
                inv = np.where(same, 0.0, 1.0 / diff)
                g[sl] = inv @ self.w
                f[sl] = (inv * inv) @ self.w
        if self.kappa0 is not None:
            lo, hi = mp_edges(self.kappa0)
            inside = (theta >= lo) & (theta <= hi)
            z = np.where(inside, hi + 1.0, theta) + 0j
            gm, dgm = mp_stieltjes(z, self.kappa0)
            g += self.mp_mass * gm.real
            f += self.mp_mass * (-dgm.real)
            f[inside] = np.inf
        return g, f


def _vec_root(fun, a: np.ndarray, b: np.ndarray, maxiter: int = 200, x0: np.ndarray | None = None) -> np.ndarray:
    """Roots of fun (returns f, f') on brackets [a, b] with a sign change: safeguarded Newton, vectorised.

    ``a`` and ``b`` need not be ordered; the function is only assumed continuous and monotone-ish
    (bisection guards every Newton step that leaves the current bracket). ``x0``: first iterates (used where
    strictly inside the bracket; the midpoint elsewhere). See :func:`_vec_root_indexed`.
    """
    return _vec_root_indexed(lambda x, _idx: fun(x), a, b, maxiter, x0=x0)


class FreeConvolution:
    """rho_delta = mu boxplus semicircle(delta^2) for a :class:`SpectralMeasure` mu.

    Construct once per (measure, delta); all methods are deterministic. ``delta > 0``.
    ``rtol`` is the target accuracy of the spectral integrals relative to max(1, their size).
    """

    def __init__(self, measure: SpectralMeasure, delta: float, rtol: float = 1e-12, support_hint: dict | None = None):
        """``support_hint``: a dict owned by the caller (start with ``{}``) that carries the support's edges from
        one construction to the next for the same measure (a state-evolution solve): the edge roots then start
        Newton at the previous edges instead of the brackets' midpoints (same brackets and stopping rule, so the
        same edges to rounding: ~4 Newton steps instead of ~17 per edge)."""
        if not np.isfinite(delta) or delta <= 0:
            raise ValueError(f"delta must be > 0 (got {delta})")
        self.measure = measure
        self.delta = float(delta)
        self.t = self.delta**2
        self.rtol = rtol
        self.kernel = _Kernel(measure)
        self._m1, self._m2 = measure.moment(1), measure.moment(2)
        self.intervals_u = self._support_u(support_hint)
        lo = np.array([i[0] for i in self.intervals_u])
        hi = np.array([i[1] for i in self.intervals_u])
        self._ulo, self._uhi = lo, hi
        self._ylo, self._yhi = self._psi_real(lo), self._psi_real(hi)

    # ------------------------------------------------------------------ subordination -----------
    def _phi0(self, u: np.ndarray) -> np.ndarray:
        """F(u) = int dmu/(u-x)^2 = -g'(u) for real u outside supp mu."""
        return self.kernel.real_axis(np.atleast_1d(np.asarray(u, dtype=float)))[1]

    def _psi_real(self, u: np.ndarray) -> np.ndarray:
        """psi(u) = u + t Re g(u) where v(u) = 0 (outside the support intervals, and at their edges)."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        return u + self.t * self.kernel.real_axis(u)[0]

    def solve_v(self, u: np.ndarray) -> np.ndarray:
        """v(u) >= 0 for an array of u inside the support intervals (vectorised safeguarded Newton).

        Solves h(s) = t for s = v^2, where h(s) = 1/phi(u, sqrt s) is the harmonic mean of
        (u-x)^2 + s: concave and increasing in s, with s <= h(s) <= s + int (u-x)^2 dmu, so the root
        lies in [max(0, t - A), t] with A = int (u - x)^2 dmu. Newton from the left of the root converges
        monotonically for a concave increasing function; bisection guards it. Only the nodes that have
        not converged are iterated.
        """
        u = np.atleast_1d(np.asarray(u, dtype=float))
        t = self.t
        a_var = np.maximum(u**2 - 2 * u * self._m1 + self._m2, 0.0)
        lo = np.maximum(t - a_var, 0.0)
        hi = np.full_like(u, t)
        # start at the left end of the bracket (h(lo) <= t; inside the support h(0) = 1/F(u) <= t), from
        # where Newton on the concave h increases monotonically to the root
        s = np.maximum(lo, 1e-16 * t)  # (s > 0: the MP part's phi = -Im g/v needs v > 0)
        act = np.arange(u.size)
        for _ in range(200):
            if act.size == 0:
                break
            sa = s[act]
            phi, dphi = self.kernel.phi(u[act], sa)
            f = 1.0 / phi - t
            dh = -dphi / phi**2
            lo_a = np.where(f < 0, sa, lo[act])
            hi_a = np.where(f > 0, sa, hi[act])
            lo[act], hi[act] = lo_a, hi_a
            with np.errstate(divide="ignore", invalid="ignore"):
                sn = sa - f / dh
            bad = ~np.isfinite(sn) | (sn < lo_a) | (sn > hi_a)
            sn = np.where(bad, 0.5 * (lo_a + hi_a), sn)
            # quadratic convergence: a relative step below 1e-9 leaves an error below ~1e-18 after it,
            # and stops the iteration before rounding noise in f can make it cycle
            done = (np.abs(sn - sa) <= 1e-9 * sn) | (hi_a - lo_a <= 4e-16 * hi_a) | (f == 0)
            s[act] = sn
            act = act[~done]
        return np.sqrt(s)

    def _at(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """y = psi(u), density rho_delta(y), Re g_delta(y), dpsi/du at the points u (v > 0)."""
        t = self.t
        u = np.atleast_1d(np.asarray(u, dtype=float))
        v = self.solve_v(u)
        g, dg = self.kernel.g_dg(u, v)
        y = u + t * g.real
        # v'(u) from phi(u, v(u)) = 1/t
        with np.errstate(divide="ignore", invalid="ignore"):
            dphi_du = -dg.imag / v
            dphi_dv = -dg.real / v + g.imag / v**2
            dv_du = -dphi_du / dphi_dv
            dpsi = 1.0 + t * (dg.real - dg.imag * dv_du)
        # a node that lands exactly on an edge (v = 0 after rounding) carries no density
        dpsi = np.where(v > 0, dpsi, 0.0)
        return {"u": u, "v": v, "y": y, "rho": v / (np.pi * t), "re_g": g.real, "dpsi": dpsi}

    def psi(self, u: np.ndarray) -> np.ndarray:
        """y = psi(u) (also outside the support, where v = 0)."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        inside = self._inside(u)
        out = np.empty_like(u)
        if np.any(inside):
            out[inside] = self._at(u[inside])["y"]
        if np.any(~inside):
            out[~inside] = self._psi_real(u[~inside])
        return out

    def _inside(self, u: np.ndarray) -> np.ndarray:
        inside = np.zeros(u.shape, dtype=bool)
        for lo, hi in self.intervals_u:
            inside |= (u > lo) & (u < hi)
        return inside

    # ------------------------------------------------------------------ support ----------------
    def _components(self) -> list[tuple[float, float]]:
        """Connected components of supp mu as closed intervals (atoms are degenerate intervals)."""
        return [(lo, hi) for lo, hi, _ in self._components_with_mass()]

    def _components_with_mass(self) -> list[tuple[float, float, float]]:
        """(lo, hi, mu-mass) of the components of supp mu; for a continuous part the mass is nan."""
        atoms, masses = self.measure.point_masses()
        comps = [(float(a), float(a), float(m)) for a, m in zip(atoms, masses, strict=True) if m > 0]
        comps += [(float(lo), float(hi), np.nan) for lo, hi in self.measure.support_intervals()]
        comps.sort()
        merged: list[tuple[float, float, float]] = []
        for lo, hi, m in comps:
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi), np.nan)
            else:
                merged.append((lo, hi, m))
        return merged

    def _support_u(self, hint: dict | None = None) -> list[tuple[float, float]]:
        """Intervals of u where v(u) > 0 (their images under psi are the bulks of rho_delta).

        F(u) = int dmu/(u-x)^2 blows up at every component of supp mu (atoms, and square-root edges of
        densities) and is convex in every gap, so each gap holds zero or two edges and each side one.
        A gap between two atoms of masses w1, w2 at distance D has F >= 8 min(w1, w2)/D^2, so only gaps
        with D^2 > 8 min(w) t can open; the others are skipped. For the remaining ones (vectorised):
        bisection on the sign of F' with tangent lower bounds decides open (a point with F < 1/t) or
        closed (the tangents at both ends of the bracket meet above 1/t). Edges are the roots of
        F^{-1/2} = delta, found by safeguarded Newton with the exact F'.
        """
        comps = self._components_with_mass()
        lo_c = np.array([c[0] for c in comps])
        hi_c = np.array([c[1] for c in comps])
        mass = np.array([c[2] for c in comps])
        t, inv_t = self.t, 1.0 / self.t
        kern = self.kernel

        def g_fun(u):
            _, f, df = kern.real_axis(u)
            with np.errstate(divide="ignore", invalid="ignore"):
                val = 1.0 / np.sqrt(f)
                return val - self.delta, -0.5 * val**3 * df

        gl, gr = hi_c[:-1], lo_c[1:]
        width = gr - gl
        atom_gap = np.isfinite(mass[:-1]) & np.isfinite(mass[1:])
        wmin = np.fmin(mass[:-1], mass[1:])
        cand = (width > 0) & (~atom_gap | (width**2 > 8.0 * wmin * t))
        idx = np.flatnonzero(cand)
        pts = self._open_points_hinted(idx, gl, gr, inv_t, hint)
        open_ = np.isfinite(pts)
        idx, pts = idx[open_], pts[open_]

        def near(x, direction):
            return x + direction * np.maximum(1e-13 * np.maximum(np.abs(x), 1.0), 1e-300)

        # all brackets at once: outer left, outer right, then (left, right) edge of every open gap
        a_list = [np.array([lo_c[0] - 2 * self.delta]), np.array([near(hi_c[-1], 1.0)])]
        b_list = [np.array([near(lo_c[0], -1.0)]), np.array([hi_c[-1] + 2 * self.delta])]
        a_list += [near(gl[idx], 1.0), pts]
        b_list += [pts, near(gr[idx], -1.0)]
        a = np.concatenate(a_list)
        b = np.concatenate(b_list)
        # the end next to a component must have F > 1/t (G < 0); if not, the edge is that end
        ga, _ = g_fun(a)
        gb, _ = g_fun(b)
        ok = np.sign(ga) != np.sign(gb)
        roots = np.where(np.abs(ga) < np.abs(gb), a, b)
        key = tuple(idx.tolist())  # the same measure and the same open gaps: the same brackets, in the same order
        prev = hint.get("support") if hint is not None else None
        x0 = prev[2] if prev is not None and prev[0] is self.measure and prev[1] == key else None
        if np.any(ok):
            roots[ok] = _vec_root(g_fun, a[ok], b[ok], x0=None if x0 is None else x0[ok])
        if hint is not None:
            hint["support"] = (self.measure, key, roots.copy())
        k = idx.size
        edges = np.concatenate([[roots[0]], np.ravel(np.column_stack([roots[2 : 2 + k], roots[2 + k :]])),
                                [roots[1]]])
        return [(float(edges[i]), float(edges[i + 1])) for i in range(0, edges.size, 2)]

    def _open_points_hinted(self, idx, gl, gr, level: float, hint: dict | None) -> np.ndarray:
        """:meth:`_open_points` on the candidate gaps ``idx``, using what a previous construction (same measure,
        ``hint``) found: F does not depend on delta, so a gap closed at delta' (F >= 1/delta'^2 throughout) is
        closed for every delta >= delta', and a point with F < 1/delta'^2 proves the gap open for delta <= delta'
        (and for any delta where F there is still < 1/delta^2, checked in one evaluation). Exact either way; the
        remaining gaps are searched as before."""
        pts = np.full(idx.size, np.nan)
        todo = np.ones(idx.size, dtype=bool)
        prev = hint.get("gaps") if hint is not None else None
        if prev is not None and prev[0] is self.measure:
            delta0, known = prev[1], prev[2]
            check = []
            for j, g in enumerate(idx.tolist()):
                pt = known.get(g)
                if pt is None:
                    continue
                if np.isnan(pt):
                    todo[j] = not self.delta >= delta0
                elif self.delta <= delta0:
                    pts[j], todo[j] = pt, False
                else:
                    pts[j] = pt
                    check.append(j)
            if check:
                check = np.array(check)
                f = self.kernel.real_axis(pts[check])[1]
                holds = f < level
                todo[check[holds]] = False
                pts[check[~holds]] = np.nan
        if todo.any():
            pts[todo] = self._open_points(gl[idx[todo]], gr[idx[todo]], level)
        if hint is not None:
            hint["gaps"] = (self.measure, self.delta, dict(zip(idx.tolist(), pts.tolist(), strict=True)))
        return pts

    def _open_points(self, a: np.ndarray, b: np.ndarray, level: float) -> np.ndarray:
        """For convex F on gaps (a, b) (F -> inf at both ends): a point with F < level, or nan if none."""
        out = np.full(a.size, np.nan)
        if a.size == 0:
            return out
        w = b - a
        lo, hi = a + 1e-9 * w, b - 1e-9 * w
        _, flo, dlo = self.kernel.real_axis(lo)
        _, fhi, dhi = self.kernel.real_axis(hi)
        act = np.arange(a.size)
        for it in range(300):
            if act.size == 0:
                break
            l_, h_ = lo[act], hi[act]
            fl, dl, fh, dh = flo[act], dlo[act], fhi[act], dhi[act]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                ux = (fh - fl + dl * l_ - dh * h_) / (dl - dh)
                bound = fl + dl * (ux - l_)
            closed = np.isfinite(bound) & (bound >= level)
            mid = 0.5 * (l_ + h_)
            if it % 2:
                span = h_ - l_
                trial = np.where(np.isfinite(ux), np.clip(ux, l_ + 0.05 * span, h_ - 0.05 * span), mid)
            else:
                trial = mid
            _, ft, dt = self.kernel.real_axis(trial)
            found = (ft < level) & ~closed
            out[act[found]] = trial[found]
            left = dt < 0
            lo[act] = np.where(left, trial, l_)
            flo[act] = np.where(left, ft, fl)
            dlo[act] = np.where(left, dt, dl)
            hi[act] = np.where(left, h_, trial)
            fhi[act] = np.where(left, fh, ft)
            dhi[act] = np.where(left, dh, dt)
            tiny = (hi[act] - lo[act]) <= 1e-14 * np.maximum(np.abs(lo[act]), 1.0)
            act = act[~(closed | found | tiny)]
        return out

    # ------------------------------------------------------------------ quadrature -------------
    def _rule(self, lo: float, hi: float, lo_edge: bool, n: int) -> dict[str, np.ndarray]:
        """One Gauss-Jacobi rule on [lo, hi] in u (right end an edge; left end an edge if ``lo_edge``).

        Returns y, weights w (so that int F(y) rho_delta(y) dy ~ sum w F(y)), Re g at the nodes.
        """
        r = self._panel_nodes(np.array([lo]), np.array([hi]), np.array([0.5 if lo_edge else 0.0]),
                              np.array([0.5]), n)
        return {"y": r["y"][0], "w": r["w"][0], "re_g": r["re_g"][0], "u": r["u"][0]}

    def _panel_nodes(self, lo, hi, eb, ea, n: int) -> dict[str, np.ndarray]:
        """n-point Gauss-Jacobi rules on panels [lo_k, hi_k] with weight (1-x)^ea (1+x)^eb (ea: right end).

        Returns arrays of shape (panels, n): u, y, re_g and weights w including rho_delta and dpsi/du.
        """
        npan = lo.size
        xs = np.empty((npan, n))
        ws = np.empty((npan, n))
        for ea_, eb_ in {(float(x), float(y)) for x, y in zip(ea, eb, strict=True)}:
            sel = (ea == ea_) & (eb == eb_)
            x, wj = _jacobi_rule(n, ea_, eb_)
            xs[sel] = x
            ws[sel] = wj / ((1.0 - x) ** ea_ * (1.0 + x) ** eb_)
        half = 0.5 * (hi - lo)
        u = lo[:, None] + half[:, None] * (xs + 1.0)
        pts = self._at(u.ravel())
        shape = u.shape
        w = ws * half[:, None] * (pts["rho"] * pts["dpsi"]).reshape(shape)
        return {"u": u, "y": pts["y"].reshape(shape), "re_g": pts["re_g"].reshape(shape), "w": w,
                "rho": pts["rho"].reshape(shape)}

    def adaptive(self, pieces, tests, rtol: float | None = None, with_rho: bool = False) -> dict:
        """Adaptive composite Gauss-Jacobi quadrature over pieces [(u_lo, u_hi, eb, ea), ...] in u.

        ``tests(y, re_g)`` (``tests(y, re_g, rho)`` with ``with_rho``) returns the (K, ...) integrands; a panel
        is accepted when its 16-node and 10-node rules agree to rtol * max(1, |totals|) * (panel length / total
        length), else it is halved (the halves inherit the edge exponents of their outer ends). Returns totals
        (K,), the error estimate (sum of the accepted panels' disagreements), the number of nodes, and the
        accepted panels with their nodes (u, y, re_g, w, rho) for reuse.
        """
        rtol = self.rtol if rtol is None else rtol
        if not pieces:
            return {"totals": None, "error": 0.0, "nodes": 0, "panels": None}
        lo = np.array([p[0] for p in pieces], float)
        hi = np.array([p[1] for p in pieces], float)
        eb = np.array([p[2] for p in pieces], float)
        ea = np.array([p[3] for p in pieces], float)
        total_len = float(np.sum(hi - lo))
        max_active = _MAX_ACTIVE + 16 * lo.size
        acc = {"lo": [], "hi": [], "eb": [], "ea": [], "u": [], "y": [], "re_g": [], "w": [], "q": []}
        totals = None
        error = 0.0
        nodes = 0
        scale = None
        with np.errstate(invalid="ignore", over="ignore"):  # non-finite totals raise below, naming delta
            for level in range(_MAX_LEVEL + 1):
                r = self._panel_nodes(lo, hi, eb, ea, _NP)
                r2 = self._panel_nodes(lo, hi, eb, ea, _NP_CHECK)
                nodes += lo.size * (_NP + _NP_CHECK)
                extra, extra2 = ((r["rho"],), (r2["rho"],)) if with_rho else ((), ())
                tv = np.asarray(tests(r["y"], r["re_g"], *extra))
                q = np.einsum("kpn,pn->pk", tv, r["w"])
                q2 = np.einsum("kpn,pn->pk", np.asarray(tests(r2["y"], r2["re_g"], *extra2)), r2["w"])
                if scale is None:
                    scale = max(1.0, float(np.max(np.abs(q.sum(axis=0)))))
                diff = np.max(np.abs(q - q2), axis=1)
                # target share of this panel, plus the rounding floor of its sums
                roundoff = 1e-13 * np.max(np.einsum("kpn,pn->pk", np.abs(tv), np.abs(r["w"])), axis=1)
                # (no panel is asked for more than 1% of the total tolerance: near edges v is only known to
                # rounding relative to t, which would otherwise refine the edge panels for ever)
                thr = rtol * scale * np.maximum((hi - lo) / total_len, 0.01) + roundoff
                if _DEBUG:
                    print("level", level, lo.size, np.sum(diff > thr))
                # a refinement that keeps doubling (a degenerate iterate: delta = 4e12 halved 1e6 panels of a support
                # 4e12 wide, level after level, until memory ran out) stops at max_active panels: they are accepted,
                # their disagreement goes into the error estimate
                at_resolution = 0.5 * (hi - lo) <= _U_RESOLUTION * np.maximum(np.abs(lo), np.abs(hi))
                ok = (diff <= thr) | (level == _MAX_LEVEL) | (lo.size > max_active) | at_resolution
                for key, val in (("lo", lo), ("hi", hi), ("eb", eb), ("ea", ea), ("u", r["u"]), ("y", r["y"]),
                                 ("re_g", r["re_g"]), ("w", r["w"]), ("q", q)):
                    acc[key].append(val[ok])
                error += float(diff[ok].sum())
                totals = q[ok].sum(axis=0) if totals is None else totals + q[ok].sum(axis=0)
                if np.all(ok):
                    break
                bad = ~ok
                mid = 0.5 * (lo[bad] + hi[bad])
                lo, hi = np.concatenate([lo[bad], mid]), np.concatenate([mid, hi[bad]])
                eb = np.concatenate([eb[bad], np.zeros(mid.size)])
                ea = np.concatenate([np.zeros(mid.size), ea[bad]])
        if not np.all(np.isfinite(totals)):  # (inf - inf in the sums printed numpy's "invalid value" warnings)
            raise FloatingPointError(f"spectral quadrature: non-finite integrals at delta = {self.delta:g} "
                                     f"(totals {totals})")
        panels = {k: np.concatenate(v) for k, v in acc.items()}
        order = np.argsort(panels["lo"])
        panels = {k: v[order] for k, v in panels.items()}
        return {"totals": totals, "error": error, "nodes": nodes, "panels": panels}

    def _u_of_y_vec(self, y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Inverse of psi on support intervals [lo_k, hi_k] (psi increasing there): vectorised Newton
        with the exact dpsi/du, guarded by bisection."""
        y = np.asarray(y, float)

        def fun(u, idx):
            p = self._at(u)
            return p["y"] - y[idx], p["dpsi"]

        span = hi - lo
        return _vec_root_indexed(fun, lo + 1e-15 * span, hi - 1e-15 * span)

    def _u_of_y(self, y: float, lo: float, hi: float) -> float:
        """Inverse of psi on one support interval (psi is increasing)."""
        return float(self._u_of_y_vec(np.array([y]), np.array([lo]), np.array([hi]))[0])

    def _pieces_above(self, c: float) -> list[tuple[float, float, float, float]]:
        """Pieces (u_lo, u_hi, eb, ea) of the support where y > c (the cut point is not an edge)."""
        pieces = []
        cut_int = np.flatnonzero((self._ylo < c) & (self._yhi > c))
        u_c = {}
        if cut_int.size:
            uc = self._u_of_y_vec(np.full(cut_int.size, float(c)), self._ulo[cut_int], self._uhi[cut_int])
            u_c = dict(zip(cut_int.tolist(), uc.tolist(), strict=True))
        for k, (lo, hi) in enumerate(self.intervals_u):
            if self._yhi[k] <= c:
                continue
            if k in u_c:
                pieces.append((u_c[k], hi, 0.0, 0.5))
            else:
                pieces.append((lo, hi, 0.5, 0.5))
        return pieces

    def integrals(self, eps: float, cut: float | None = None, n0: int | None = None,
                  n_max: int | None = None) -> SpectralIntegrals:
        """I, dI/ddelta, dI/deps and the rank at threshold eps (adaptive composite quadrature).

        With ``cut`` (narrow students): the integrals of f(y) = (y - eps) 1[y > c], c = max(eps, cut),
        are returned in the same fields: I = int f^2 rho, dI_deps = -2 int f rho, dI_ddelta =
        4 delta int f rho Re g, rank = int_{y > c} rho (they are derivatives of I only when c = eps).
        """
        c = float(eps) if cut is None else max(float(eps), float(cut))
        pieces = self._pieces_above(c)

        def tests(y, re_g):
            f = y - eps
            return [f * f, f, f * re_g, np.ones_like(y)]

        res = self.adaptive(pieces, tests)
        tot = res["totals"] if res["totals"] is not None else np.zeros(4)
        return SpectralIntegrals(
            delta=self.delta,
            eps=float(eps),
            I=float(tot[0]),
            dI_ddelta=float(4.0 * self.delta * tot[2]),
            dI_deps=float(-2.0 * tot[1]),
            rank=float(tot[3]),
            mass=1.0,
            error=float(res["error"]),
            nodes=int(res["nodes"]),
            cut=c,
        )

    def threshold_family(self, eps_min: float = 0.0, eps_ref: float | None = None) -> ThresholdFamily:
        """The soft-threshold integrals at this delta for every eps >= eps_min, from one quadrature.

        The support above eps_min is integrated once (adaptive panels) against a basis that is polynomial in
        the threshold; a query at eps re-integrates only the one panel that eps cuts. See
        :class:`ThresholdFamily` for the fields and the exact derivatives in t = delta^2.
        """
        return ThresholdFamily(self, float(eps_min), eps_ref)

    # ------------------------------------------------------------------ quantiles --------------
    def quantile(self, tail: float) -> float:
        """y_q with int_{y > y_q} rho_delta = tail (0 < tail < 1): the cut of a rank-tail*d student."""
        if not 0.0 < tail < 1.0:
            raise ValueError(f"tail mass must be in (0, 1) (got {tail})")
        full = self._full_rule()
        p = full["panels"]
        pm = p["q"][:, 0]
        above = np.cumsum(pm[::-1])[::-1] - pm  # mass of the panels to the right of each panel
        k = int(np.flatnonzero(above + pm >= tail)[-1])
        lo, hi, eb, ea = p["lo"][k], p["hi"][k], p["eb"][k], p["ea"][k]
        target = tail - above[k]  # mass wanted from [u, hi] inside panel k

        def fun(u):
            # mass of [u, hi]; next to an edge at lo use the complement so the sqrt end keeps its weight
            if u >= hi:
                return -target
            if u <= lo:
                return pm[k] - target
            if eb > 0:
                r = self._panel_nodes(np.array([lo]), np.array([u]), np.array([eb]), np.array([0.0]), _NP)
                return pm[k] - float(r["w"].sum()) - target
            r = self._panel_nodes(np.array([u]), np.array([hi]), np.array([0.0]), np.array([ea]), _NP)
            return float(r["w"].sum()) - target

        if pm[k] - target <= 0:
            return float(self._psi_in(lo))
        u = optimize.brentq(fun, lo, hi, xtol=1e-15 * max(1.0, abs(hi)), rtol=1e-15)
        return float(self._psi_in(u))

    def _psi_in(self, u: float) -> float:
        return float(self.psi(np.array([u]))[0])

    def _full_rule(self) -> dict:
        if not hasattr(self, "_full"):
            pieces = [(lo, hi, 0.5, 0.5) for lo, hi in self.intervals_u]
            self._full = self.adaptive(pieces, lambda y, rg: [np.ones_like(y), y, y * y, y**3, y**4])
        return self._full

    # ------------------------------------------------------------------ densities, moments -----
    def moments(self, kmax: int = 4, n: int | None = None) -> np.ndarray:
        """int y^k rho_delta(y) dy for k = 0..kmax (adaptive quadrature)."""
        if kmax <= 4:
            return self._full_rule()["totals"][: kmax + 1].copy()
        pieces = [(lo, hi, 0.5, 0.5) for lo, hi in self.intervals_u]
        return self.adaptive(pieces, lambda y, rg: [y**k for k in range(kmax + 1)])["totals"]

    def mass(self, n: int | None = None) -> float:
        return float(self.moments(0)[0])

    def support(self) -> list[tuple[float, float]]:
        """Bulks of rho_delta in y: [(y_lo, y_hi), ...]."""
        return [(float(a), float(b)) for a, b in zip(self._ylo, self._yhi, strict=True)]

    def bulks(self) -> list[dict]:
        """Components of supp rho_delta: y interval, u interval, mass (= the mu-mass of the u interval,
        exact: free convolution with the semicircle maps each component onto one of rho_delta with the same
        mass), and the number of atoms of mu inside (1 for the bump of an isolated eigenvalue)."""
        atoms, masses = self.measure.point_masses()
        out = []
        cont = self.measure.support_intervals()
        cont_mass = 0.0
        if self.kernel.kappa0 is not None:
            cont_mass = self.kernel.mp_mass * min(1.0, self.kernel.kappa0)
        for k, (lo, hi) in enumerate(self.intervals_u):
            inside = (atoms > lo) & (atoms < hi)
            m = float(masses[inside].sum())
            n_cont = sum(1 for a, b in cont if a > lo and b < hi)
            m += cont_mass * n_cont
            out.append({"y_lo": float(self._ylo[k]), "y_hi": float(self._yhi[k]), "u_lo": lo, "u_hi": hi,
                        "mass": m, "atoms": atoms[inside], "continuous": bool(n_cont)})
        return out

    def density(self, y: np.ndarray) -> np.ndarray:
        """rho_delta(y) on an array of y (0 outside the support)."""
        y = np.atleast_1d(np.asarray(y, dtype=float))
        out = np.zeros_like(y)
        k = self._interval_of(y)
        sel = np.flatnonzero(k >= 0)
        if sel.size:
            u = self._u_of_y_vec(y[sel], self._ulo[k[sel]], self._uhi[k[sel]])
            out[sel] = self.solve_v(u) / (np.pi * self.t)
        return out

    def _interval_of(self, y: np.ndarray) -> np.ndarray:
        k = np.full(y.shape, -1)
        for i in range(self._ylo.size):
            k[(y > self._ylo[i]) & (y < self._yhi[i])] = i
        return k

    def cdf(self, y: np.ndarray, n: int | None = None) -> np.ndarray:
        """Distribution function of rho_delta at the points y."""
        y = np.atleast_1d(np.asarray(y, dtype=float))
        p = self._full_rule()["panels"]
        cum = np.concatenate([[0.0], np.cumsum(p["q"][:, 0])])  # mass left of panel k = cum[k]
        y_panel_hi = np.array([]) if p["hi"].size == 0 else self.psi(p["hi"])
        out = np.zeros_like(y)
        # points beyond whole panels
        k = self._interval_of(y)
        out = np.interp(y, np.concatenate([[-np.inf], y_panel_hi]), cum)  # step approx, refined below
        for i in range(self._ylo.size):
            out[y >= self._yhi[i]] = np.maximum(out[y >= self._yhi[i]], 0.0)
        inside = np.flatnonzero(k >= 0)
        if inside.size:
            u = self._u_of_y_vec(y[inside], self._ulo[k[inside]], self._uhi[k[inside]])
            j = np.searchsorted(p["hi"], u)  # panel index containing u
            j = np.minimum(j, p["hi"].size - 1)
            lo = p["lo"][j]
            r = self._panel_nodes(lo, u, p["eb"][j], np.zeros(j.size), _NP)
            out[inside] = cum[j] + r["w"].sum(axis=1)
        below = np.flatnonzero(k < 0)
        if below.size:
            # outside the support: total mass of the panels whose upper end lies below y
            idx = np.searchsorted(y_panel_hi, y[below], side="right")
            out[below] = cum[idx]
        return out


# ------------------------------------------------------------------------------------------------
# the soft-threshold family at one delta, with exact derivatives in t = delta^2
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ThresholdIntegrals:
    r"""Soft-threshold integrals at (delta, eps) and their exact first derivatives in t = delta^2 and eps.

    With f = (y - eps)_+, rho = rho_delta, g = g_delta (Re g on the real axis):

        j2 = int f^2 rho (= I),   j1 = int f rho (= -dI/deps / 2),   jg = int f rho Re g (= dI/ddelta / (4 delta)),
        rank = int_{y > eps} rho,   kg = int_{y > eps} rho Re g,   kh = int_{y > eps} rho ((Re g)^2 - pi^2 rho^2/3).

    Free heat flow (complex Burgers equation d_t g = -g d_z g) gives, for F continuous with F(eps) = 0,
    d_t int F rho = int F' rho Re g and d_t int F rho Re g = int F' rho ((Re g)^2 - pi^2 rho^2 / 3), hence

        d_t j2 = 2 jg,  d_t j1 = kg,  d_t jg = kh;     d_eps j2 = -2 j1,  d_eps j1 = -rank,  d_eps jg = -kg.
    """

    delta: float
    eps: float
    j2: float
    j1: float
    jg: float
    rank: float
    kg: float
    kh: float
    error: float

    @property
    def t(self) -> float:
        return self.delta * self.delta

    @property
    def I(self) -> float:  # noqa: E743 - name from the theory
        return self.j2

    @property
    def dI_deps(self) -> float:
        return -2.0 * self.j1

    @property
    def dI_ddelta(self) -> float:
        return 4.0 * self.delta * self.jg

    def values(self) -> np.ndarray:
        """(j2, j1, jg)."""
        return np.array([self.j2, self.j1, self.jg])

    def d_t(self) -> np.ndarray:
        """d/dt of (j2, j1, jg) at fixed eps (t = delta^2)."""
        return np.array([2.0 * self.jg, self.kg, self.kh])

    def d_eps(self) -> np.ndarray:
        """d/deps of (j2, j1, jg) at fixed delta."""
        return np.array([-2.0 * self.j1, -self.rank, -self.kg])

    def as_spectral_integrals(self) -> SpectralIntegrals:
        return SpectralIntegrals(self.delta, self.eps, self.j2, self.dI_ddelta, self.dI_deps, self.rank, 1.0,
                                 self.error, 0, self.eps)


class ThresholdFamily:
    """Soft-threshold integrals of one :class:`FreeConvolution` for any eps >= eps_min (one quadrature).

    The accepted panels of an adaptive rule over the support above eps_min carry the sums of the basis
    1, (y - c), (y - c)^2, Re g, (y - c) Re g, (Re g)^2 - pi^2 rho^2/3 (c = eps_ref), from which every
    eps-dependent integral is a polynomial combination; the panel that eps cuts is integrated afresh from
    eps (adaptive, the same rule and tolerance). Queries cost one panel, not the whole support.
    """

    def __init__(self, fc: FreeConvolution, eps_min: float = 0.0, eps_ref: float | None = None):
        self.fc = fc
        self.eps_min = float(eps_min)
        self.c = float(eps_min if eps_ref is None else eps_ref)
        c = self.c
        self._basis = lambda y, g, rho: [np.ones_like(y), y - c, (y - c) ** 2, g, (y - c) * g,
                                         g * g - (np.pi * rho) ** 2 / 3.0]
        res = fc.adaptive(fc._pieces_above(self.eps_min), self._basis, with_rho=True)
        if res["panels"] is None:
            self.lo = self.hi = self.eb = self.ea = self.ylo = self.yhi = np.zeros(0)
            self.q = np.zeros((0, 6))
            self.suffix = np.zeros((1, 6))
        else:
            p = res["panels"]
            self.lo, self.hi, self.eb, self.ea, self.q = p["lo"], p["hi"], p["eb"], p["ea"], p["q"]
            ends = fc.psi(np.concatenate([self.lo, self.hi]))
            self.ylo, self.yhi = ends[: self.lo.size], ends[self.lo.size :]
            # suffix[k] = sum of the panels k, k+1, ... (panels are sorted in u, hence in y)
            self.suffix = np.vstack([np.cumsum(self.q[::-1], axis=0)[::-1], np.zeros((1, 6))])
        self.error = float(res["error"])
        self.nodes = int(res["nodes"])

    def _sums(self, eps: float) -> tuple[np.ndarray, float]:
        k = int(np.searchsorted(self.ylo, eps, side="left"))  # first panel with y_lo >= eps
        tot = self.suffix[k].copy()
        err = self.error
        j = k - 1  # the panel before it may be cut by eps
        if j >= 0 and self.yhi[j] > eps:
            fc = self.fc
            uc = float(fc._u_of_y_vec(np.array([eps]), np.array([self.lo[j]]), np.array([self.hi[j]]))[0])
            part = fc.adaptive([(uc, float(self.hi[j]), 0.0, float(self.ea[j]))], self._basis, with_rho=True)
            if part["totals"] is not None:
                tot += part["totals"]
                err += part["error"]
        return tot, err

    def at(self, eps: float) -> ThresholdIntegrals:
        """The integrals at threshold eps (>= eps_min)."""
        eps = float(eps)
        if not eps >= self.eps_min - 1e-14 * max(1.0, abs(self.eps_min)):
            raise ValueError(f"eps = {eps} is below the family's eps_min = {self.eps_min}")
        b, err = self._sums(eps)
        a = eps - self.c
        return ThresholdIntegrals(
            delta=self.fc.delta, eps=eps, j2=float(b[2] - 2.0 * a * b[1] + a * a * b[0]), j1=float(b[1] - a * b[0]),
            jg=float(b[4] - a * b[3]), rank=float(b[0]), kg=float(b[3]), kh=float(b[5]), error=float(err),
        )


def _vec_root_indexed(fun, a: np.ndarray, b: np.ndarray, maxiter: int = 200, x0: np.ndarray | None = None
                      ) -> np.ndarray:
    """Like :func:`_vec_root` for point-dependent functions: ``fun(x, idx)`` gets the active indices."""
    a = np.asarray(a, float).copy()
    b = np.asarray(b, float).copy()
    idx_all = np.arange(a.size)
    fa, _ = fun(a, idx_all)
    fb, _ = fun(b, idx_all)
    neg = np.where(fa < 0, a, b)
    pos = np.where(fa < 0, b, a)
    x = 0.5 * (neg + pos)
    if x0 is not None:
        x0 = np.asarray(x0, float)
        inside = np.isfinite(x0) & (x0 > np.minimum(a, b)) & (x0 < np.maximum(a, b))
        x[inside] = x0[inside]
    # ends already at the root (or no sign change: clamp to the closer end)
    same = np.sign(fa) == np.sign(fb)
    x[same] = np.where(np.abs(fa[same]) < np.abs(fb[same]), a[same], b[same])
    act = idx_all[~same]
    for _ in range(maxiter):
        if act.size == 0:
            break
        xa = x[act]
        f, df = fun(xa, act)
        n_, p_ = neg[act], pos[act]
        n_ = np.where(f < 0, xa, n_)
        p_ = np.where(f > 0, xa, p_)
        neg[act], pos[act] = n_, p_
        with np.errstate(divide="ignore", invalid="ignore"):
            step = f / df
        xn = xa - step
        lo, hi = np.minimum(n_, p_), np.maximum(n_, p_)
        # a Newton step below rounding has converged, even where xa - step rounds onto the end of the bracket
        # that xa itself just became (judged "outside" below, it used to trigger ~30 bisections towards xa)
        last = np.isfinite(step) & (np.abs(step) <= 4e-16 * np.maximum(np.abs(xa), 1e-300))
        bad = ~last & (~np.isfinite(xn) | (xn <= lo) | (xn >= hi))
        xn = np.where(bad, 0.5 * (lo + hi), np.where(last, np.clip(xn, lo, hi), xn))
        tol = 4e-16 * np.maximum(np.abs(xn), 1e-300)
        done = (f == 0) | last | (np.abs(xn - xa) <= tol) | (hi - lo <= tol)
        x[act] = np.where(f == 0, xa, xn)
        act = act[~done]
    return x


def _root_between(f, a: float, b: float) -> float:
    """Root of a continuous f with a sign change on [a, b] (Brent), to full precision."""
    fa, fb = f(a), f(b)
    if fa == 0:
        return a
    if fb == 0:
        return b
    if np.sign(fa) == np.sign(fb):
        raise ValueError("no sign change")
    return optimize.brentq(f, a, b, xtol=1e-15, rtol=1e-15, maxiter=500)


def spectral_integrals(measure: SpectralMeasure, delta: float, eps: float) -> SpectralIntegrals:
    """Convenience wrapper: FreeConvolution(measure, delta).integrals(eps)."""
    return FreeConvolution(measure, delta).integrals(eps)
