"""Finite-size state evolution: the SE with the AIM's per-sequence design Gram matrix at dimension d.

Why. At finite d the structured (AIM) ERM sits O(1/d) above the d -> infinity state evolution, while the same ERM
on exactly Gaussian logits (``simulation.gaussian_design``) does not. What carries the difference is the **design
Gram matrix of a sequence**: the K = T(T+1)/2 logits of one sequence are the measurements <M_k, S>/sqrt(d) with
the rank-one sensing matrices M_ab = (x_a x_b^T + x_b x_a^T)/2 (a != b), M_aa = x_a x_a^T - I, whose normalised
Gram matrix

    Gamma_kl = <M_k, M_l>_F / (D c_k c_l),   D = d(d+1)/2,  c_k = 1 (a != b), sqrt(2) (a = b),

has E Gamma = I exactly but fluctuates by O(1/sqrt(d)) from sequence to sequence (it is a function of the tokens'
T x T Gram matrix X X^T ~ Wishart_T(d, I)). A Gaussian design whose sensing vectors are given the AIM's Gram
matrices reproduces the AIM's d = 100 test error (docs/theory/finite_size.md, "the Gram-matched design").

What. The leave-one-sequence-out (cavity) argument with correlated sensing vectors b_k (E b_k.b_l = D Gamma_kl)
changes the channel of THEORY.md section 3 in three places, and nothing else (the matrix side is the SE's):

* cavity logits z = L zeta and teacher logits z0 = L zeta0, L L^T = Gamma, with (zeta0_k, zeta_k) i.i.d. per entry
  N(0, [[Q0, m], [m, q]]) (the label noise sqrt(Delta/2) xi and the output noise are added as before, unmixed);
* the proximal point in the metric (Sigma Gamma)^{-1}:
      h* = argmin_h (h - z)^T Gamma^{-1} (h - z)/(2 Sigma) + ||y - softmax_row(beta D(h))||_F^2,
      g = Gamma^{-1} (h* - z)/Sigma = -grad l(h*);
* the conjugates  q_hat = 2 alpha E[g^T Gamma g],  m_hat = 2 alpha E tr(Gamma dg/dz0),
  sigma_hat = -2 alpha E tr(Gamma dg/dz), by implicit differentiation of the prox (exact per node):
      sigma_hat = 2 alpha E[(K - tr(M^{-1} Gamma^{-1})/Sigma)/Sigma],   M = Gamma^{-1}/Sigma + Hess l(h*),
      m_hat = 2 alpha E[2 tr(M^{-1} J^T Y0)/Sigma],
  J = d vec softmax_row(beta D(h))/dh at h*, Y0 = d vec y/dz0 (the teacher's softmax Jacobian);
  the Stein form m_hat = (2 alpha/s) E[g^T L eta] (zeta0 = (m/sqrt q) u + s eta) is kept as a check.
At Gamma = I these are the SE's channel equations exactly.

How (numerics). Every expectation runs over the same fixed scrambled Sobol' points (``replicas`` independent
scramblings of 2^qmc_log2 points; the spread of the replicas is the error estimate), in dimension 3K + T(T+1)/2
(+ T^2 with output noise): u, eta, label noise, the Bartlett factors of the Wishart Gram. The finite-d channel is
evaluated as a **control variate**: moments(d) = SoftmaxChannel.moments (the SE's accurate rule) + [QMC with
Gamma - QMC with Gamma = I on the same points], so the QMC noise enters only through the (strongly correlated)
difference, and the correction vanishes identically as Gamma -> I (d -> infinity). The fixed point is solved by
``scipy.optimize.root`` (hybr) in the SE's unconstrained coordinates from the d -> infinity solution, and reports
converged, iterations (map evaluations) and residual. The test and train errors get the same treatment.

numpy/scipy only; deterministic (fixed Sobol' seeds).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, stats
from scipy.stats import qmc

from ..design import design_gram
from ..errors import ParameterError
from ..problem import Problem
from .api import result_of
from .channel import (
    ChannelParams,
    _logit_fit_matrix,
    _softmax_rows,
    invariant_direction,
    logit_design,
    reduced_basis,
    softmax_loss,
)
from .denoisers import matrix_update
from .stability import channel_options_for
from .state_evolution import SEResult, StateEvolution

__all__ = [
    "design_gram",
    "wishart_tokens",
    "FiniteSizeChannel",
    "FiniteSizeResult",
    "solve_finite_size",
    "finite_size_fields",
]


# --------------------------------------------------------------------------------------------------
# the AIM's design Gram matrix (design.design_gram) and its law
# --------------------------------------------------------------------------------------------------
def wishart_tokens(u: np.ndarray, d: int, T: int) -> np.ndarray:
    """Token Gram matrices G = X X^T ~ Wishart_T(d, I) (N, T, T) from uniforms u (N, T(T+1)/2) by Bartlett's
    decomposition G = A A^T: A_ii^2 ~ chi^2_{d-i} (i = 0..T-1), A_ij ~ N(0, 1) (i > j)."""
    u = np.clip(np.asarray(u, dtype=float), 1e-300, 1 - 1e-16)
    N = u.shape[0]
    A = np.zeros((N, T, T))
    col = 0
    for i in range(T):
        A[:, i, i] = np.sqrt(stats.chi2.ppf(u[:, col], d - i))
        col += 1
    for i in range(T):
        for j in range(i):
            A[:, i, j] = stats.norm.ppf(u[:, col])
            col += 1
    return A @ np.swapaxes(A, -1, -2)


# --------------------------------------------------------------------------------------------------
# the finite-d channel
# --------------------------------------------------------------------------------------------------
def _softmax_jacobian(h: np.ndarray, beta: float, T: int) -> tuple[np.ndarray, np.ndarray]:
    """softmax_row(beta D(h)) (N, T, T) and its Jacobian d vec / dh (N, T*T, K)."""
    s = _softmax(h, beta, T)
    N = h.shape[0]
    Jr = np.zeros((N, T * T, T * T))
    for r in range(T):
        sr = s[:, r]
        Jr[:, r * T : (r + 1) * T, r * T : (r + 1) * T] = (
            np.einsum("ni,ij->nij", sr, np.eye(T)) - sr[:, :, None] * sr[:, None, :])
    return s, beta * (Jr @ logit_design(T))


def _softmax(h: np.ndarray, beta: float, T: int) -> np.ndarray:
    """softmax_row(beta D(h)) (N, T, T) of logits h (N, K) in the SE's coordinates."""
    return _softmax_rows((beta * (h @ logit_design(T).T)).reshape(h.shape[0], T, T))


@dataclass
class _Nodes:
    u: np.ndarray  # (N, K) standard normals of the student's cavity logit
    eta: np.ndarray  # (N, K) standard normals of the teacher's independent part
    xi: np.ndarray  # (N, K) label noise (v coordinates)
    out: np.ndarray | None  # (N, T*T) output noise
    L: np.ndarray  # (N, K, K) Cholesky factor of Gamma
    Gi: np.ndarray  # (N, K, K) Gamma^{-1}
    Gamma: np.ndarray  # (N, K, K)


class FiniteSizeChannel:
    """The channel with the AIM's design Gram matrix at dimension ``d`` (module docstring), evaluated on fixed
    scrambled Sobol' points: ``replicas`` x 2^``qmc_log2`` nodes, seed ``seed``.

    :meth:`evaluate` returns the channel moments per replica with the Gram matrices (``gram=True``) or with
    Gamma = I on the same points; :meth:`correction` their difference (mean and replica error)."""

    def __init__(self, params: ChannelParams, d: int, qmc_log2: int = 12, replicas: int = 8, seed: int = 20261130,
                 tol: float = 1e-10, max_iter: int = 60):
        if isinstance(d, bool) or int(d) != d or d < params.tokens + 1:
            raise ParameterError("d", f"must be an integer > T (got {d!r})")
        if not 6 <= int(qmc_log2) <= 20:
            raise ParameterError("qmc-log2", f"must be in 6..20 (got {qmc_log2!r})")
        if int(replicas) < 2:
            raise ParameterError("replicas", f"must be >= 2 for an error estimate (got {replicas!r})")
        self.params, self.d = params, int(d)
        self.qmc_log2, self.replicas, self.seed = int(qmc_log2), int(replicas), int(seed)
        self.tol, self.max_iter = float(tol), int(max_iter)
        T = params.tokens
        self.T, self.K = T, T * (T + 1) // 2
        self.n_wishart = T * (T + 1) // 2
        self.dim = 3 * self.K + self.n_wishart + (T * T if params.noise_out > 0 else 0)
        self._nodes = [self._make_nodes(r) for r in range(self.replicas)]
        eye = np.broadcast_to(np.eye(self.K), (2**self.qmc_log2, self.K, self.K))
        self._identity = [_Nodes(nd.u, nd.eta, nd.xi, nd.out, eye, eye, eye) for nd in self._nodes]

    def _make_nodes(self, r: int) -> _Nodes:
        K, T = self.K, self.T
        x = qmc.Sobol(self.dim, scramble=True, seed=np.random.default_rng([self.seed, self.dim, r])).random_base2(
            self.qmc_log2)
        x = np.clip(x, 1e-16, 1 - 1e-16)
        gauss = stats.norm.ppf(x[:, : 3 * K])
        wish = x[:, 3 * K : 3 * K + self.n_wishart]
        out = stats.norm.ppf(x[:, 3 * K + self.n_wishart :]) if self.params.noise_out > 0 else None
        Gamma = design_gram(wishart_tokens(wish, self.d, T), self.d)
        L = np.linalg.cholesky(Gamma)
        Gi = np.linalg.inv(Gamma)
        return _Nodes(gauss[:, :K], gauss[:, K : 2 * K], gauss[:, 2 * K :], out, L, Gi, Gamma)

    # --------------------------------------------------------------------------------------------
    def _fields(self, nd: _Nodes, q: float, m: float, clean: bool = False):
        """Cavity logits z (N, K), noisy teacher logits z0n (N, K), the teacher's independent part's scale s."""
        p = self.params
        if q < 0 or m * m > q * p.q0 * (1 + 1e-12):
            raise ParameterError("overlaps", f"(q, m, Q0) = ({q}, {m}, {p.q0}) is not a covariance")
        sq = math.sqrt(q)
        s = math.sqrt(max(p.q0 - (m * m / q if q > 0 else 0.0), 0.0))
        zeta = sq * nd.u
        zeta0 = (m / sq if q > 0 else 0.0) * nd.u + s * nd.eta
        z = np.einsum("nkl,nl->nk", nd.L, zeta)
        z0 = np.einsum("nkl,nl->nk", nd.L, zeta0)
        z0n = z0 if clean else z0 + math.sqrt(p.noise / 2.0) * nd.xi
        return z, z0n, s

    def _noisy(self, y0: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """Labels y = y0 (+ sqrt(Delta_out) x the nodes' output noise)."""
        return y0 if out is None else y0 + math.sqrt(self.params.noise_out) * out.reshape(y0.shape)

    def _phi(self, h, z, Gi, y, sigma):
        loss, grad, hess = softmax_loss(h, y, self.params.beta, self.T)
        r = h - z
        Gr = np.einsum("nkl,nl->nk", Gi, r)
        return 0.5 * np.einsum("nk,nk->n", r, Gr) / sigma + loss, Gr / sigma + grad, Gi / sigma + hess

    def _newton(self, h, z, Gi, y, sigma):
        """Modified Newton with backtracking on phi(h) = (h-z)^T Gi (h-z)/(2 sigma) + l(h; y), all nodes at once."""
        N = h.shape[0]
        conv = np.zeros(N, dtype=bool)
        f, g, H = self._phi(h, z, Gi, y, sigma)
        it = 0
        while it < self.max_iter:
            it += 1
            act = ~conv
            if not act.any():
                break
            w, V = np.linalg.eigh(H[act])
            floor = 1e-8 * np.max(np.abs(w), axis=1, keepdims=True) + 1e-300
            w = np.maximum(np.abs(w), floor)  # saddle / concave directions: a descent step anyway
            step = -np.einsum("nij,nj->ni", V, np.einsum("nji,nj->ni", V, g[act]) / w)
            t = np.ones(step.shape[0])
            slope = np.einsum("nk,nk->n", g[act], step)
            ha, za, Gia, ya, fa = h[act], z[act], Gi[act], y[act], f[act]
            accepted = np.zeros(step.shape[0], dtype=bool)
            hn = ha.copy()
            fn = fa.copy()
            for _ in range(40):
                todo = ~accepted
                if not todo.any():
                    break
                trial = ha[todo] + t[todo, None] * step[todo]
                ft = self._phi(trial, za[todo], Gia[todo], ya[todo], sigma)[0]
                ok = ft <= fa[todo] + 1e-4 * t[todo] * slope[todo] + 1e-15 * np.abs(fa[todo])
                idx = np.flatnonzero(todo)
                hn[idx[ok]] = trial[ok]
                fn[idx[ok]] = ft[ok]
                accepted[idx[ok]] = True
                t[idx[~ok]] *= 0.5
            h[act] = hn
            fa_new, ga, Ha = self._phi(hn, za, Gia, ya, sigma)
            f[act], g[act], H[act] = fa_new, ga, Ha
            small = np.max(np.abs(ga), axis=1) * sigma <= self.tol * (1.0 + np.max(np.abs(hn), axis=1))
            conv[np.flatnonzero(act)[small | ~accepted]] = True
        resid = float(np.max(np.max(np.abs(g), axis=1) * sigma)) if N else 0.0
        return h, f, resid, it

    def _prox(self, z, Gi, y, sigma):
        """Global minimiser over two starts: the cavity logit z and the logit that fits the label."""
        T = self.T
        B, e = reduced_basis(T), invariant_direction(T)
        fit = _logit_fit_matrix(T, self.params.beta)
        logy = np.log(np.clip(y, 1e-300, None)).reshape(y.shape[0], T * T)
        h1 = (logy @ fit.T) @ B.T + np.outer(z @ e, e)
        ha, fa, ra, ia = self._newton(z.copy(), z, Gi, y, sigma)
        hb, fb, rb, ib = self._newton(h1, z, Gi, y, sigma)
        pick_b = fb < fa
        h = np.where(pick_b[:, None], hb, ha)
        return h, max(ra, rb), max(ia, ib)

    def _conjugates(self, alpha: float, z: np.ndarray, z0n: np.ndarray, Gi: np.ndarray, Gamma: np.ndarray,
                    sigma: float, out: np.ndarray | None) -> dict[str, float]:
        """Channel moments from cavity fields z, noisy teacher fields z0n (N, K), the prox metric Gi/sigma
        (Gi = Sigma C^{-1}: Gamma^{-1} for the Gram channel) and the sensing Gram Gamma (N, K, K)."""
        if sigma <= 0:
            raise ParameterError("sigma", f"must be > 0 (got {sigma!r})")
        p = self.params
        y0, Y0 = _softmax_jacobian(z0n, p.beta0, self.T)
        y = self._noisy(y0, out)
        h, resid, iters = self._prox(z, Gi, y, sigma)
        loss, _, hess = softmax_loss(h, y, p.beta, self.T)
        Ci = Gi / sigma
        g = np.einsum("nkl,nl->nk", Ci, h - z)
        Minv = np.linalg.inv(Ci + hess)
        _, J = _softmax_jacobian(h, p.beta, self.T)
        GC = Gamma @ Ci
        q_hat = np.einsum("nk,nkl,nl->n", g, Gamma, g)
        sig_hat = np.einsum("nkk->n", GC) - np.einsum("nkl,nlk->n", GC @ Minv, Ci)
        m_hat = 2.0 * np.einsum("nkl,nlk->n", GC @ Minv, np.swapaxes(J, 1, 2) @ Y0)
        return {"q_hat": 2 * alpha * q_hat.mean(), "m_hat": 2 * alpha * m_hat.mean(),
                "sigma_hat": 2 * alpha * sig_hat.mean(), "train_error": loss.mean(),
                "prox_residual": resid, "prox_iterations": iters, "_g": g}

    def _moments_on(self, nd: _Nodes, alpha: float, q: float, m: float, sigma: float) -> dict[str, float]:
        z, z0n, s = self._fields(nd, q, m)
        out = self._conjugates(alpha, z, z0n, nd.Gi, nd.Gamma, sigma, nd.out)
        g = out.pop("_g")
        if s > 0:
            out["m_hat_stein"] = 2 * alpha * np.einsum("nk,nkl,nl->n", g, nd.L, nd.eta).mean() / s
        return out

    def _test_on(self, nd: _Nodes, q: float, m: float, clean: bool) -> float:
        z, z0n, _ = self._fields(nd, q, m, clean=clean)
        y0 = _softmax(z0n, self.params.beta0, self.T)
        y = y0 if clean else self._noisy(y0, nd.out)
        s = _softmax(z, self.params.beta, self.T)
        return float(((y - s) ** 2).sum(axis=(1, 2)).mean())

    # --------------------------------------------------------------------------------------------
    def evaluate(self, alpha: float, q: float, m: float, sigma: float, gram: bool = True) -> list[dict[str, float]]:
        """Channel moments (q_hat, m_hat, sigma_hat with the factor 2 alpha; train_error; m_hat_stein) per
        replica, with the design Gram matrices (``gram``) or Gamma = I on the same points."""
        nodes = self._nodes if gram else self._identity
        return [self._moments_on(nd, alpha, q, m, sigma) for nd in nodes]

    def correction(self, alpha: float, q: float, m: float, sigma: float) -> tuple[dict[str, float], dict[str, float]]:
        """(mean, error) over replicas of [Gram - identity] for q_hat, m_hat, sigma_hat, train_error."""
        keys = ("q_hat", "m_hat", "sigma_hat", "train_error")
        a = self.evaluate(alpha, q, m, sigma, gram=True)
        b = self.evaluate(alpha, q, m, sigma, gram=False)
        diff = np.array([[ra[k] - rb[k] for k in keys] for ra, rb in zip(a, b, strict=True)])
        mean = diff.mean(axis=0)
        err = diff.std(axis=0, ddof=1) / math.sqrt(diff.shape[0])
        return dict(zip(keys, mean, strict=True)), dict(zip(keys, err, strict=True))

    def test_error_correction(self, q: float, m: float, clean: bool = False) -> tuple[float, float]:
        """(mean, error) over replicas of the test error with Gram matrices minus with Gamma = I."""
        diff = np.array([self._test_on(a, q, m, clean) - self._test_on(b, q, m, clean)
                         for a, b in zip(self._nodes, self._identity, strict=True)])
        return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size))


# --------------------------------------------------------------------------------------------------
# the finite-size fixed point
# --------------------------------------------------------------------------------------------------
@dataclass
class FiniteSizeResult:
    """The finite-size SE point at dimension d, next to the d -> infinity SE point it corrects.

    q, m, sigma, q_hat, m_hat, sigma_hat, mse, test_error, test_error_clean, train_error: at dimension d;
    ``errors``: QMC error estimates (replica spread of the control-variate difference) of the test and train
    errors; ``se``: the d -> infinity SEResult (as a dict); converged / iterations (map evaluations) / residual
    (max relative change of (q, m, Sigma) under the map)."""

    alpha: float
    d: int
    q: float
    m: float
    sigma: float
    q_hat: float
    m_hat: float
    sigma_hat: float
    mse: float
    test_error: float
    test_error_clean: float
    train_error: float
    converged: bool
    iterations: int
    residual: float
    seconds: float
    message: str = ""
    errors: dict[str, float] = field(default_factory=dict)
    se: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def solve_finite_size(problem: Problem, alpha: float, d: int, se: StateEvolution | None = None,
                      se_result: SEResult | None = None, qmc_log2: int = 12, replicas: int = 8,
                      seed: int = 20261130, tol: float = 1e-9) -> FiniteSizeResult:
    """The finite-size SE at (alpha, d): the SE's matrix side with the Gram-corrected channel (module docstring).

    ``se``: the d -> infinity solver to use (default ``StateEvolution(problem)``); ``se_result``: its solution at
    alpha (solved if not given; the start of the finite-size iteration). ``qmc_log2``, ``replicas``, ``seed``: the
    QMC rule of the correction; ``tol``: hybr's relative tolerance on the unconstrained coordinates."""
    t0 = time.perf_counter()
    se = se if se is not None else StateEvolution(problem)
    base = se_result if se_result is not None else se.solve(alpha)
    if not base.converged or base.phase != "regular":
        raise ParameterError("alpha", f"the d -> infinity SE at alpha={alpha:g} is not a regular converged point "
                                      f"({base.phase}: {base.message}); the finite-size correction starts from it")
    rule = channel_options_for(base.quadrature)
    if base.quadrature and base.quadrature != se.quadrature and rule is not None:
        # the point was solved with another rule (order raised, or the QMC re-solve): the correction's control
        # variate and the matrix side must use that rule, not the default one
        se = StateEvolution(problem, d=se.d, channel_options={**se.channel_options, **rule})
    params = se.channel_final.params
    fsc = FiniteSizeChannel(params, d, qmc_log2=qmc_log2, replicas=replicas, seed=seed)
    state: dict[str, Any] = {"evals": 0}

    def fmap(y: np.ndarray) -> np.ndarray:
        x = se._to_x(y)
        ch = se.channel_final.moments(alpha, *x)
        corr, corr_err = fsc.correction(alpha, *x)
        qh, mh, sh = ch.q_hat + corr["q_hat"], ch.m_hat + corr["m_hat"], ch.sigma_hat + corr["sigma_hat"]
        ms = matrix_update(problem, se.measure, qh, mh, sh)
        state["evals"] += 1
        fx = se._to_y(np.array([ms.q, ms.m, ms.sigma])) - y
        state["last"] = (y.copy(), fx, x, ch, corr, corr_err, (qh, mh, sh))
        return fx

    sol = optimize.root(fmap, se._to_y(base.x), method="hybr", options={"xtol": tol})
    if not np.array_equal(state["last"][0], sol.x):  # (the point hybr returns need not be its last evaluation)
        fmap(sol.x)
    _, fx, x, ch, corr, corr_err, (qh, mh, sh) = state["last"]
    resid = float(np.max(np.abs(fx)))
    q, m, sigma = x
    te, te_err = se.channel_final.test_error(q, m)
    tc, tc_err = se.channel_final.test_error(q, m, clean=True)
    dte, dte_err = fsc.test_error_correction(q, m)
    dtc, dtc_err = fsc.test_error_correction(q, m, clean=True)
    offset = se.error_offset
    converged = bool(sol.success) and resid <= max(10 * tol, 1e-8) and all(map(math.isfinite, (q, m, sigma)))
    return FiniteSizeResult(
        alpha=float(alpha), d=int(d), q=float(q), m=float(m), sigma=float(sigma), q_hat=qh, m_hat=mh, sigma_hat=sh,
        mse=float(se.q0 - 2 * m + q), test_error=te + dte + offset, test_error_clean=tc + dtc,
        train_error=ch.train_error + corr["train_error"] + offset, converged=converged,
        iterations=int(state["evals"]), residual=resid, seconds=time.perf_counter() - t0,
        message="" if converged else f"hybr: {sol.message} (residual {resid:.1e})",
        errors={"test_error": math.hypot(te_err, dte_err), "test_error_clean": math.hypot(tc_err, dtc_err),
                "test_error_correction": dte_err, "train_error": corr_err["train_error"],
                "q_hat": corr_err["q_hat"], "m_hat": corr_err["m_hat"], "sigma_hat": corr_err["sigma_hat"]},
        se=base.to_dict(),
    )


FIELDS = ("test_error", "test_error_clean", "train_error", "mse", "q", "m", "sigma", "converged", "iterations",
          "residual", "seconds", "message")


def finite_size_fields(problem: Problem, record: dict[str, Any], d: int, se: StateEvolution) -> dict[str, Any]:
    """``fd_*`` fields of one ``theory`` record (its SE point is the record's own, ``api.result_of``; ``se`` the
    solver that made it, whose channel and matrix side the correction uses): the finite-size SE at
    dimension d (``fd_d``, ``fd_test_error``, ``fd_test_error_clean``, ``fd_train_error``, ``fd_mse``, ``fd_q``,
    ``fd_m``, ``fd_sigma``, ``fd_converged``, ``fd_iterations``, ``fd_residual``, ``fd_seconds``,
    ``fd_message``, ``fd_err_test_error``); None values (fd_converged too) with a message where the SE point is
    not a regular converged point (lambda -> 0+ phases, S_hat = 0)."""
    out: dict[str, Any] = {"fd_d": int(d), **{f"fd_{k}": None for k in FIELDS}, "fd_err_test_error": None}
    if not record.get("converged") or record.get("phase") != "regular":  # (fd_converged stays None)
        out["fd_message"] = f"not computed: the SE point is not a regular converged point ({record.get('phase')})"
        return out
    res = solve_finite_size(problem, record["alpha"], d, se=se, se_result=result_of(record))
    out.update({f"fd_{k}": getattr(res, k) for k in FIELDS})
    out["fd_err_test_error"] = res.errors["test_error"]
    return out
