r"""Two-time quantities for the state evolution of damped GAMP (docs/theory/gamp.md section 4).

Damped GAMP (``amp.gamp(..., damp="effective")``) denoises the mixture Y_bar_t = eta Y_t + (1 - eta) Y_bar_{t-1}
of the per-iteration effective observations Y_s = m_hat_s S0 + N_s, so its state evolution has to carry the
covariance of the noises N_s across iterations. Two ingredients, both closed (no data):

* **Matrix side** (:func:`resolvent_overlap`, :func:`threshold_overlap`). For X_a = S0 + W_a, X_b = S0 + W_b with
  W_a, W_b jointly GOE-like (semicircle variances delta_a^2, delta_b^2, entrywise covariance c in the same
  units: W_b = (c/delta_a^2) W_a + independent), free probability gives (Bun, Bouchaud, Potters, PRE 2018)

      psi(z_a, z_b) = (1/d) Tr G_a(z_a) G_b(z_b) = tau / (1 - c tau),
      tau = (1/d) Tr (omega_a - S0)^-1 (omega_b - S0)^-1 = (g_mu(omega_b) - g_mu(omega_a)) / (omega_a - omega_b),

  G = (z - X)^-1, omega = z - delta^2 g_X(z) the subordination function (g_X(z) = g_mu(omega(z))). The overlap of
  two soft thresholds, (1/d) Tr (X_a - eps_a)_+ (X_b - eps_b)_+, is the double contour integral

      (1/(2 pi i))^2 oint_{C_a} oint_{C_b} (x - eps_a)(y - eps_b) psi(x, y) dx dy,

  C = a counter-clockwise circle through eps and through a point R above the spectrum: it encloses the part of
  the spectrum above eps and touches the real axis only at eps (where the factor x - eps vanishes) and at R
  (outside the spectrum). No real-axis density, no principal values, and the eigenvector-overlap peak at
  x = y (width ~ the decorrelation, which goes to 0 as the iteration converges) never has to be resolved.
* **Channel side** (:class:`TwoTimeChannel`): E[g_s . g_t] for the output messages of two iterations, with
  (zeta, omega_s, omega_t) jointly Gaussian per logit, covariance [[Qz, m_s, m_t], [m_s, q_s, Q_st],
  [m_t, Q_st, q_t]] (Q_st = (1/d) Tr S_s S_t), the same label y = softmax(beta0 D(zeta)) and each prox at its
  own V: a 3(K-1)-dimensional integral by scrambled Sobol' points (the same nodes for both times).

numpy/scipy only; deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import ParameterError
from ..problem import validate_integer, validate_problem

__all__ = [
    "subordination",
    "resolvent_overlap",
    "ContourRule",
    "contour_rule",
    "threshold_overlap",
    "TwoTimeChannel",
    "TwoTimeSE",
    "damped_state_evolution",
]


# --------------------------------------------------------------------------------------------------
# Matrix side
# --------------------------------------------------------------------------------------------------
def _g_mu(measure, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g_mu(w), g_mu'(w) for w off the real axis (either half plane: g(conj w) = conj g(w))."""
    w = np.asarray(w, complex)
    low = w.imag < 0
    g, dg = measure.stieltjes(np.where(low, np.conj(w), w))
    return np.where(low, np.conj(g), g), np.where(low, np.conj(dg), dg)


def _support_hull(measure) -> tuple[float, float]:
    """[lo, hi] containing supp mu: its atoms (the MP atom at 0 included) and its continuous intervals."""
    atoms, weights = measure.point_masses()
    ends = [float(a) for a in atoms[weights > 0]] + [e for iv in measure.support_intervals() for e in iv]
    return (min(ends), max(ends)) if ends else (np.inf, -np.inf)


def subordination(measure, t: float, z, tol: float = 1e-13, max_iter: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """omega(z) and g_X(z) = g_mu(omega) for X = S0 + sqrt(t) Z (Z GOE, semicircle on [-2, 2]), z off the axis.

    omega solves omega + t g_mu(omega) = z with Im omega of the sign of Im z and |Im omega| >= |Im z| (the
    subordination function; Biane). The fixed-point map omega <- z - t g_mu(omega) maps the half plane into
    itself and converges to it; it is run until it is close and finished by Newton (F' = 1 + t g_mu'). Points
    that this leaves unconverged (very close to the axis, where the fixed-point map contracts slowly and Newton
    can leave the half plane) are reached by continuation in Im z from Im z = 1 (Newton along a geometric path).
    Raises FloatingPointError if a point does not converge.
    """
    z = np.asarray(z, complex)
    if np.any(z.imag == 0):
        raise ParameterError("z", "must be off the real axis")
    sgn = np.sign(z.imag)
    zu = np.where(sgn < 0, np.conj(z), z)  # work in the upper half plane
    w, done = _subordination_solve(measure, t, zu, zu - t * _g_mu(measure, zu)[0], tol, max_iter)
    if not np.all(done):
        idx = np.flatnonzero(~done.ravel())
        zf = zu.ravel()[idx]
        top = np.maximum(zf.imag, 1.0)
        wf = zf.real + 1j * top
        wf = _subordination_solve(measure, t, wf, wf - t * _g_mu(measure, wf)[0], tol, max_iter)[0]
        ok = np.ones(idx.size, bool)
        for k in range(1, 81):  # Im z from max(Im z, 1) down to Im z in 80 geometric steps
            zk = zf.real + 1j * top * (zf.imag / top) ** (k / 80)
            wf, ok = _subordination_solve(measure, t, zk, wf, tol, 30, newton_only=True)
        if not np.all(ok):
            raise FloatingPointError(f"subordination: {int(np.sum(~ok))} points did not converge")
        w = w.ravel().copy()
        w[idx] = wf
        w = w.reshape(zu.shape)
    g = _g_mu(measure, w)[0]
    return np.where(sgn < 0, np.conj(w), w), np.where(sgn < 0, np.conj(g), g)


def _subordination_solve(measure, t, zu, w, tol, max_iter, newton_only=False):
    """Safeguarded Newton for omega + t g_mu(omega) = zu (Im zu > 0) from w; returns (omega, converged)."""
    done = np.zeros(zu.shape, bool)
    for _ in range(max_iter):
        g, dg = _g_mu(measure, w)
        F = w + t * g - zu
        err = np.abs(F)
        done = err <= tol * (1.0 + np.abs(zu))
        if np.all(done):
            break
        w_new = w - F / (1.0 + t * dg)
        # Newton where it stays in the half plane and decreases the residual, a fixed-point step otherwise
        bad = ~(w_new.imag >= zu.imag)
        if np.any(~bad):
            g2 = _g_mu(measure, np.where(bad, w, w_new))[0]
            err2 = np.abs(np.where(bad, w, w_new) + t * g2 - zu)
            bad |= err2 > err
        if newton_only:  # continuation: a short Newton step in place of the slow fixed-point step
            half = w - 0.5 * F / (1.0 + t * dg)
            w = np.where(done, w, np.where(bad & (half.imag >= zu.imag), half, np.where(bad, zu - t * g, w_new)))
        else:
            w = np.where(done, w, np.where(bad, zu - t * g, w_new))
    return w, done


def resolvent_overlap(measure, omega_a, g_a, omega_b, g_b, c: float) -> np.ndarray:
    """psi = (1/d) Tr G_a(z_a) G_b(z_b) = tau/(1 - c tau) from the subordination values (broadcasting).

    tau = (1/d) Tr (omega_a - S0)^-1 (omega_b - S0)^-1 = (g_mu(omega_b) - g_mu(omega_a))/(omega_a - omega_b),
    -g_mu'(omega) at coinciding points (midpoint derivative when |omega_a - omega_b| < 1e-6 (1 + |omega|)).
    """
    omega_a, g_a, omega_b, g_b = np.broadcast_arrays(*(np.asarray(v, complex) for v in (omega_a, g_a, omega_b, g_b)))
    dw = omega_a - omega_b
    close = np.abs(dw) < 1e-6 * (1.0 + np.abs(omega_a))
    tau = (g_b - g_a) / np.where(close, 1.0, dw)
    if np.any(close):
        mid = 0.5 * (omega_a[close] + omega_b[close])
        # both points in one half plane when close (the half planes are separated by |Im| >= |Im z| > 0)
        tau[close] = -_g_mu(measure, mid)[1]
    return tau / (1.0 - c * tau)


@lru_cache(maxsize=8)
def _gl(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


@dataclass(frozen=True)
class ContourRule:
    """Nodes x on the circle C through eps and R (counter-clockwise) and weights with
    sum_k w_k F(x_k) ~ (1/(2 pi i)) oint_C (x - eps) F(x) dx; omega, g the subordination values at x."""

    delta: float
    eps: float
    x: np.ndarray
    w: np.ndarray
    omega: np.ndarray
    g: np.ndarray
    empty: bool = False  # eps above the spectrum: the threshold kills everything


def contour_rule(measure, delta: float, eps: float, n: int = 96) -> ContourRule:
    """The rule of :class:`ContourRule` for X = S0 + delta Z: Gauss-Legendre in the angle, n nodes on each of
    the lower and upper half circles, the angle graded towards the pinch point eps (theta = pi (1 - s^2) with
    s Gauss-Legendre), where the integrand is smallest and least smooth."""
    lo, hi = _support_hull(measure)
    top = hi + 2.0 * delta
    if eps >= top:
        e = np.zeros(0)
        return ContourRule(delta, eps, e.astype(complex), e.astype(complex), e.astype(complex), e.astype(complex), True)
    span = top - max(eps, lo - 2.0 * delta)
    R = top + 0.5 * span + 0.1 * (1.0 + abs(top))
    c0, r = 0.5 * (eps + R), 0.5 * (R - eps)
    s, ws = _gl(n)
    s = 0.5 * (s + 1.0)  # (0, 1)
    ws = 0.5 * ws
    th = np.pi * (1.0 - s * s)  # (0, pi), dense at pi
    dth = 2.0 * np.pi * s * ws
    theta = np.concatenate([-th, th])  # lower half (-pi, 0), upper half (0, pi)
    wth = np.concatenate([dth, dth])
    x = c0 + r * np.exp(1j * theta)
    dx = 1j * r * np.exp(1j * theta)
    w = wth * dx * (x - eps) / (2j * np.pi)
    omega, g = subordination(measure, delta * delta, x)
    return ContourRule(delta, eps, x, w, omega, g)


def threshold_overlap(measure, rule_a: ContourRule, rule_b: ContourRule, c: float) -> float:
    """(1/d) Tr (X_a - eps_a)_+ (X_b - eps_b)_+ for X_a = S0 + delta_a Z_a, X_b = S0 + delta_b Z_b, the noises
    jointly Gaussian with entrywise covariance c (in the units where Var = delta^2; c = delta_a delta_b r for
    GOE matrices Z_a, Z_b of correlation r): the double contour integral of the module docstring."""
    if rule_a.empty or rule_b.empty:
        return 0.0
    psi = resolvent_overlap(measure, rule_a.omega[:, None], rule_a.g[:, None], rule_b.omega[None, :],
                            rule_b.g[None, :], c)
    val = rule_a.w @ psi @ rule_b.w
    return float(val.real)


# --------------------------------------------------------------------------------------------------
# Channel side
# --------------------------------------------------------------------------------------------------
@dataclass
class _Side:
    """One time's part of the two-time channel integral at the QMC nodes: the student field and its g."""

    q: float
    m: float
    V: float
    s: float  # conditional std of omega given zeta
    g: list  # per replica: (N, K) output messages


class TwoTimeChannel:
    """E[g_s . g_t] of the softmax channel at two iterations (seq2lab, no output noise).

    Per logit (K - 1 reduced coordinates, i.i.d.): zeta ~ N(0, Qz), omega_t = (m_t/Qz) zeta + s_t x2,
    omega_s = (m_s/Qz) zeta + beta x2 + gamma x3 (the Cholesky factor of the 3 x 3 covariance), y =
    softmax_row(beta0 D(zeta)), g = (prox_{V l}(omega) - omega)/V (``channel.prox_softmax``). ``replicas``
    scrambled Sobol' sets of 2^log2n points in 3(K - 1) dimensions (the same for every pair of times, so that
    the correlation coefficients are estimated with common random numbers).
    """

    def __init__(self, params, log2n: int = 10, replicas: int = 4, seed: int = 20250925):
        from scipy.special import softmax

        from .channel import _qmc_panels, logit_design, reduced_basis

        if params.noise_out > 0:
            raise ParameterError("noise-out", "the two-time channel has no output noise")
        self.params = params
        self.prox_residual = 0.0  # the largest scaled prox residual met so far (reported, not hidden)
        T = params.tokens
        self.B = np.asarray(reduced_basis(T))
        self.P = np.asarray(logit_design(T))
        n = self.B.shape[1]
        self.n = n
        self.nodes = []
        for panel in _qmc_panels(3 * n, int(log2n), int(replicas), seed):  # the channel's cached Sobol' sets
            x = panel.x
            zeta = math.sqrt(params.q_zeta) * x[:, :n]
            h0 = (zeta @ self.B.T) @ self.P.T
            y = softmax(params.beta0 * h0.reshape(-1, T, T), axis=-1)
            self.nodes.append((x, zeta, y))

    def _g(self, omega_red: np.ndarray, y: np.ndarray, V: float) -> np.ndarray:
        import warnings

        from ..errors import ConvergenceWarning
        from .channel import prox_softmax

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            pr = prox_softmax(omega_red @ self.B.T, y, V, self.params.beta, self.params.tokens)
        self.prox_residual = max(self.prox_residual, pr.residual)
        return pr.g

    def side(self, q: float, m: float, V: float) -> _Side:
        """The 'current' time t: omega_t = (m/Qz) zeta + s_t x2 and its messages g_t at the nodes."""
        qz = self.params.q_zeta
        s = math.sqrt(max(q - m * m / qz, 0.0))
        n = self.n
        gs = [self._g((m / qz) * zeta + s * x[:, n:2 * n], y, V) for x, zeta, y in self.nodes]
        return _Side(q, m, V, s, gs)

    def correlation(self, t: _Side, q: float, m: float, V: float, Q_ts: float) -> tuple[float, float]:
        """(r, err): r = E[g_t.g_s]/sqrt(E|g_t|^2 E|g_s|^2) for the past time s = (q, m, V) with overlap Q_ts
        (the replica mean of the per-replica ratios) and its standard error over the replicas."""
        qz = self.params.q_zeta
        n = self.n
        beta = (Q_ts - t.m * m / qz) / t.s if t.s > 0 else 0.0
        gamma = math.sqrt(max(q - m * m / qz - beta * beta, 0.0))
        rs = []
        for (x, zeta, y), gt in zip(self.nodes, t.g, strict=True):
            om = (m / qz) * zeta + beta * x[:, n:2 * n] + gamma * x[:, 2 * n:]
            gs = self._g(om, y, V)
            rs.append(float(np.sum(gt * gs) / math.sqrt(np.sum(gt * gt) * np.sum(gs * gs))))
        rs = np.array(rs)
        return float(rs.mean()), float(rs.std(ddof=1) / math.sqrt(rs.size)) if rs.size > 1 else float("nan")


# --------------------------------------------------------------------------------------------------
# The two-time state evolution of damped GAMP
# --------------------------------------------------------------------------------------------------
@dataclass
class TwoTimeSE:
    """Output of :func:`damped_state_evolution`.

    x : (iterations + 1, 3) the predicted (q_t, m_t, Sigma_t); rho : (iterations,) the predicted correlation
    <g_t, g_bar_{t-1}>/(|g_t| |g_bar_{t-1}|) (GAMP's ``noise_correlation``; NaN at t = 0); rho_err : its QMC
    standard error (propagated from the channel correlations of the last step only); Q : (iterations + 1,
    iterations + 1) the overlaps (1/d) Tr S_s S_t (NaN outside the memory window); r : the output-message
    correlations r(t, s) = E[g_t.g_s]/sqrt(E|g_t|^2 E|g_s|^2) (NaN outside the window); C : the covariance of
    the mixed noises of Y_bar_t, Y_bar_s (in q_hat units: C[t, t] is the mixed q_hat_bar_t); prox_residual :
    the largest scaled prox residual of the two-time channel (a ConvergenceWarning above 1e-7).
    """

    x: np.ndarray
    rho: np.ndarray
    rho_err: np.ndarray
    Q: np.ndarray
    r: np.ndarray
    C: np.ndarray
    seconds: float = 0.0
    prox_residual: float = 0.0  # the largest scaled residual of the two-time channel's proxes


def damped_state_evolution(problem, alpha: float, x0, iterations: int, damping: float = 0.5, *, memory: int = 12,
                           d: int | None = None, channel_options: dict | None = None, qmc_log2: int = 10,
                           replicas: int = 4, contour_nodes: int = 64, seed: int = 20250925) -> TwoTimeSE:
    """Closed state evolution of GAMP damped on the effective observation (``gamp(..., damp="effective")``).

    Iteration t (0-based; x_t = (q_t, m_t, Sigma_t), x_0 = ``x0``; GAMP's default start is (0, 0, 1)):

    1. single-time channel moments (q_hat_t, m_hat_t, sigma_hat_t) at x_t (``SoftmaxChannel.moments``);
    2. two-time channel: r(t, s) for the ``memory`` previous iterations s (:class:`TwoTimeChannel`, with the
       overlaps Q(t, s)), q_hat(t, s) = r(t, s) sqrt(q_hat_t q_hat_s); older pairs reuse r(t, t - memory)
       (their weight in the mixture is (1 - eta)^lag);
    3. the mixed noise N_bar_t = eta N_t + (1 - eta) N_bar_{t-1} (N_bar_0 = N_0, the first step is undamped):
       B(t, s) = Cov(N_t, N_bar_s) = eta q_hat(t, s) + (1 - eta) B(t, s - 1), B(t, 0) = q_hat(t, 0);
       C(t, s) = eta B(t, s) + (1 - eta) C(t - 1, s) (s < t), C(t, t) = eta^2 q_hat_t + (1 - eta)^2 C(t-1, t-1)
       + 2 eta (1 - eta) B(t, t - 1); m_hat and sigma_hat mixed linearly; rho_t = B(t, t-1)/sqrt(q_hat_t C(t-1, t-1));
    4. single-time matrix side: (q, m, Sigma)_{t+1} = matrix_update(C(t, t), m_bar_t, sigma_bar_t);
    5. two-time matrix side: Q(t + 1, s + 1) = (m_bar_t m_bar_s / (sigma_bar_t sigma_bar_s)) *
       (1/d) Tr (X_t - eps_t)_+ (X_s - eps_s)_+ with X = S0 + N_bar/m_bar, eps = 2 lam/m_bar, the noise
       covariance C(t, s)/(m_bar_t m_bar_s) (:func:`threshold_overlap`); Q(t + 1, 0) = (1/d) Tr S_{t+1} S_0 = 0
       for S_0 = 0 (x0 with q = 0); direct model: (m_bar_t m_bar_s Q0 + C(t, s))/((sigma_bar_t + 4 lam)(...)).

    Factorised students with kappa >= 1 and the direct model; seq2lab without output noise. ``damping`` = 1
    is the plain SE (no two-time quantity enters).
    """
    import time

    from .denoisers import RIDGE_FACTOR, matrix_update
    from .state_evolution import StateEvolution

    t_start = time.perf_counter()
    validate_problem(problem)
    if isinstance(damping, (bool, str)) or not isinstance(damping, (int, float, np.number)) or not 0 < damping <= 1:
        raise ParameterError("damping", f"must be a number in (0, 1] (got {damping!r})")
    iterations = validate_integer("iterations", iterations, 0)
    memory = validate_integer("memory", memory, 1)
    qmc_log2 = validate_integer("qmc_log2", qmc_log2, 1)
    replicas = validate_integer("replicas", replicas, 1)
    contour_nodes = validate_integer("contour_nodes", contour_nodes, 1)
    st = problem.student
    direct = st.model == "direct"
    if not direct and st.kappa < 1:
        raise ParameterError("kappa", "the two-time state evolution covers kappa >= 1 (no rank cut)")
    try:
        x = np.asarray(x0, float)
    except (TypeError, ValueError):
        x = np.array([])
    if x.shape != (3,) or not np.all(np.isfinite(x)):
        raise ParameterError("x0", f"must be the three finite numbers (q, m, Sigma) (got {x0!r})")
    if x[0] != 0.0 or x[1] != 0.0:
        raise ParameterError("x0", "the two-time state evolution starts from S_0 = 0 (q = m = 0)")
    se = StateEvolution(problem, d=d, channel_options=channel_options)
    measure, lam, q0 = se.measure, st.lam, se.measure.q0
    eta = float(damping)
    L = max(1, int(memory))
    n_it = int(iterations)
    ttc = TwoTimeChannel(se.channel.params, qmc_log2, replicas, seed) if eta < 1 else None
    xs = np.full((n_it + 1, 3), np.nan)
    xs[0] = x
    Q = np.full((n_it + 1, n_it + 1), np.nan)
    Q[0, 0] = x[0]
    r = np.full((n_it, n_it), np.nan)
    C = np.zeros((n_it, n_it))
    rho = np.full(n_it, np.nan)
    rho_err = np.full(n_it, np.nan)
    qh, mbar, sbar, rules = np.zeros(n_it), np.zeros(n_it), np.zeros(n_it), [None] * n_it
    for t in range(n_it):
        q_t, m_t, v_t = xs[t]
        ch = se.channel.moments(alpha, q_t, m_t, v_t)
        qh[t] = ch.q_hat
        if t == 0 or eta == 1.0:
            C[t, t], mbar[t], sbar[t] = ch.q_hat, ch.m_hat, ch.sigma_hat
            if t > 0:
                C[t, :t] = C[:t, t] = np.nan  # not needed (and not computed) without damping
        else:
            side = ttc.side(q_t, m_t, v_t)
            errs = np.zeros(t)
            for s in range(max(0, t - L), t):
                r[t, s], errs[s] = ttc.correlation(side, xs[s, 0], xs[s, 1], xs[s, 2], Q[t, s])
            r[t, : max(0, t - L)] = r[t, max(0, t - L)]
            qhat_ts = r[t, :t] * np.sqrt(qh[t] * qh[:t])
            B = np.zeros(t)
            B[0] = qhat_ts[0]
            for s in range(1, t):
                B[s] = eta * qhat_ts[s] + (1 - eta) * B[s - 1]
            C[t, :t] = eta * B + (1 - eta) * C[t - 1, :t]
            C[:t, t] = C[t, :t]
            C[t, t] = eta**2 * qh[t] + (1 - eta) ** 2 * C[t - 1, t - 1] + 2 * eta * (1 - eta) * B[t - 1]
            mbar[t] = eta * ch.m_hat + (1 - eta) * mbar[t - 1]
            sbar[t] = eta * ch.sigma_hat + (1 - eta) * sbar[t - 1]
            norm = math.sqrt(qh[t] * C[t - 1, t - 1])
            rho[t] = B[t - 1] / norm
            # the error of B(t, t-1) from the errors of the r(t, s) (independent replicas per pair: an upper bound)
            w = eta * (1 - eta) ** np.arange(t - 1, -1, -1, dtype=float)
            w[0] = (1 - eta) ** (t - 1)
            rho_err[t] = float(np.sum(w * errs * np.sqrt(qh[t] * qh[:t]))) / norm
        ms = matrix_update(problem, measure, C[t, t], mbar[t], sbar[t])
        xs[t + 1] = (ms.q, ms.m, ms.sigma)
        Q[t + 1, t + 1] = ms.q
        Q[t + 1, 0] = Q[0, t + 1] = 0.0
        if eta == 1.0:
            continue
        if not direct:
            rules[t] = contour_rule(measure, math.sqrt(C[t, t]) / mbar[t], 2.0 * lam / mbar[t], contour_nodes)
        for s in range(max(0, t - L), t):
            if direct:
                ridge = RIDGE_FACTOR * lam
                ov = (mbar[t] * mbar[s] * q0 + C[t, s]) / ((sbar[t] + ridge) * (sbar[s] + ridge))
            else:
                ov = threshold_overlap(measure, rules[t], rules[s], C[t, s] / (mbar[t] * mbar[s]))
                ov *= mbar[t] * mbar[s] / (sbar[t] * sbar[s])
            Q[t + 1, s + 1] = Q[s + 1, t + 1] = ov
        if t - L >= 0:
            rules[t - L] = None
    prox_res = ttc.prox_residual if ttc is not None else 0.0
    if prox_res > 1e-7:
        import warnings

        from ..errors import ConvergenceWarning

        warnings.warn(f"two-time channel: max prox residual {prox_res:.1e}", ConvergenceWarning, stacklevel=2)
    return TwoTimeSE(xs, rho, rho_err, Q, r, C, time.perf_counter() - t_start, prox_res)
