r"""State evolution (SE) of the tied-attention ERM: the fixed point of THEORY.md section 3.

Order parameters x = (q, m, Sigma) and conjugates (q_hat, m_hat, sigma_hat):

* channel side (``channel.SoftmaxChannel``): (q, m, Sigma) -> (q_hat, m_hat, sigma_hat) by Gaussian
  quadrature of the softmax prox;
* matrix side (:func:`matrix_update`): (q_hat, m_hat, sigma_hat) -> (q, m, Sigma) by the spectral
  denoiser, through the free convolution rho_delta = mu_{S0} boxplus semicircle(delta^2).

The map x -> F(x) is deterministic and smooth, and its fixed point is found by damped iteration with
Anderson acceleration (type II, memory 5, restarted when a step does not reduce the residual); the
result records converged / iterations / residual and is never a silent NaN.

lambda = 0 is the limit lambda -> 0+. Below the interpolation threshold the response Sigma diverges like
1/lambda while every conjugate vanishes like lambda; the rescaled equations ("interpolating phase",
derived in docs/theory/state_evolution.md) are solved directly:

    factorised:  dI/ddelta(delta, eps) = 4 delta alpha_bar,
                 Q0 + Delta/2 - I + 2 alpha_bar delta^2 + eps dI/deps = 0,
                 q = r^2 I,  m = r (I - delta/2 dI/ddelta - eps/2 dI/deps),  r = beta0/beta;
    direct:      s = 2 alpha_bar, delta^2 = (Q0 + Delta/2 - 2 s Q0 + s^2 Q0)/(s(1-s)),
                 q = r^2 s^2 (Q0 + delta^2),  m = r s Q0.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

from ..errors import ConvergenceWarning, ParameterError
from ..problem import Problem, alpha_bar, validate_alpha
from .channel import ChannelParams, SoftmaxChannel
from .spectral import FreeConvolution

__all__ = ["SEResult", "StateEvolution", "matrix_update", "MatrixSide", "solve", "learning_curve"]

# the ridge penalty lambda d ||S||_F^2 enters the denoiser as 2 * lambda (1/d) Tr S^2 -> 4 lambda S
RIDGE_FACTOR = 4.0


@dataclass(frozen=True)
class MatrixSide:
    """Output of the matrix (prior) side: order parameters and what the observables need."""

    q: float
    m: float
    sigma: float
    delta: float
    eps: float
    rank: float  # fraction of non-zero eigenvalues of S_hat
    trace: float  # (1/d) Tr S_hat
    spectral_error: float


def matrix_update(
    problem: Problem, measure, q_hat: float, m_hat: float, sigma_hat: float
) -> MatrixSide:
    """(q_hat, m_hat, sigma_hat) -> (q, m, Sigma) for the student's denoiser.

    factorised (kappa >= 1):  S_hat = (m_hat/sigma_hat) (S0 + delta Z - eps)_+,  delta = sqrt(q_hat)/m_hat,
                              eps = 2 lambda/m_hat;
    direct (ridge):           S_hat = (m_hat S0 + sqrt(q_hat) Z)/(sigma_hat + 4 lambda).
    """
    lam = problem.student.lam
    q0 = measure.q0
    if not (q_hat > 0 and m_hat > 0 and sigma_hat > 0):
        raise FloatingPointError(
            f"conjugates left the admissible region (q_hat={q_hat:g}, m_hat={m_hat:g}, sigma_hat={sigma_hat:g})"
        )
    delta = math.sqrt(q_hat) / m_hat
    if problem.student.model == "direct":
        den = sigma_hat + RIDGE_FACTOR * lam
        q = (m_hat**2 * q0 + q_hat) / den**2
        m = m_hat * q0 / den
        return MatrixSide(q, m, 1.0 / den, delta, 0.0, 1.0, m_hat * measure.moment(1) / den, 0.0)
    if problem.student.kappa < 1:
        raise ParameterError("kappa", "narrow students (kappa < 1) are not in the state evolution yet")
    eps = 2.0 * lam / m_hat
    si = FreeConvolution(measure, delta).integrals(eps)
    scale = m_hat / sigma_hat
    q = scale**2 * si.I
    m = scale * (si.I - 0.5 * delta * si.dI_ddelta - 0.5 * eps * si.dI_deps)
    sigma = si.dI_ddelta / (2.0 * delta * sigma_hat)
    return MatrixSide(q, m, sigma, delta, eps, si.rank, -0.5 * scale * si.dI_deps, si.error)


@dataclass
class SEResult:
    """A state-evolution point. Field names follow the ``theory --json`` contract."""

    alpha: float
    alpha_bar: float
    q: float
    m: float
    sigma: float
    q_hat: float
    m_hat: float
    sigma_hat: float
    delta: float
    eps: float
    mse: float
    test_error: float
    test_error_clean: float
    train_error: float
    objective: float
    rank: float
    converged: bool
    iterations: int
    residual: float
    seconds: float
    phase: str = "regular"
    message: str = ""
    errors: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def x(self) -> np.ndarray:
        return np.array([self.q, self.m, self.sigma])


class StateEvolution:
    """Fixed-point solver for one problem; call :meth:`solve` per alpha or :meth:`learning_curve`.

    Parameters
    ----------
    problem : Problem
    d : int or None
        dimension for targets that need a finite list of eigenvalues (power law, spikes, custom).
    tol : float
        convergence when max_i |F(x)_i - x_i| / max(|x_i|, 1e-3) <= tol.
    max_iter : int
    damping : float
        step eta of the damped iteration x <- x + eta (F(x) - x) underlying Anderson mixing.
    channel_options : dict
        passed to :class:`SoftmaxChannel` (quadrature order, QMC points).
    """

    def __init__(
        self,
        problem: Problem,
        d: int | None = None,
        tol: float = 1e-10,
        max_iter: int = 400,
        damping: float = 0.7,
        anderson: int = 5,
        channel_options: dict | None = None,
    ):
        self.problem = problem
        self.measure = problem.task.target.measure(d)
        self.q0 = self.measure.q0
        self.tol = tol
        self.max_iter = max_iter
        self.damping = damping
        self.anderson = anderson
        task = problem.task
        # seq2seq: (1/d)||(A - A_hat) X||^2 -> ||A - A_hat||^2, output noise only adds T*Delta_out
        noise_out = task.noise_out if task.task == "seq2lab" else 0.0
        self.error_offset = task.tokens * task.noise_out if task.task == "seq2seq" else 0.0
        self.channel = SoftmaxChannel(
            ChannelParams(
                tokens=task.tokens,
                beta=problem.student.beta,
                beta0=task.beta0,
                noise=task.noise,
                noise_out=noise_out,
                q0=self.q0,
            ),
            **(channel_options or {}),
        )
        self._inter_abar: float | None = None

    # -------------------------------------------------------------------------------------------
    def _map(self, alpha: float, x: np.ndarray):
        q, m, sigma = x
        ch = self.channel.moments(alpha, q, m, sigma)
        ms = matrix_update(self.problem, self.measure, ch.q_hat, ch.m_hat, ch.sigma_hat)
        return np.array([ms.q, ms.m, ms.sigma]), ch, ms

    def _project(self, x: np.ndarray) -> np.ndarray:
        """Keep iterates admissible: q >= 0, Sigma > 0, m^2 <= q (Q0 + Delta/2)."""
        q = max(x[0], 1e-14)
        qz = self.q0 + self.problem.task.noise / 2
        mmax = math.sqrt(q * qz) * (1 - 1e-12)
        m = min(max(x[1], -mmax), mmax)
        sigma = max(x[2], 1e-14)
        return np.array([q, m, sigma])

    def initial_guess(self) -> np.ndarray:
        return np.array([0.5 * self.q0, 0.4 * self.q0, 1.0])

    def solve(self, alpha: float, init: np.ndarray | SEResult | None = None) -> SEResult:
        """Solve the SE at one alpha (warm start from ``init`` if given)."""
        alpha = validate_alpha(alpha)
        t0 = time.perf_counter()
        lam = self.problem.student.lam
        abar = alpha_bar(alpha, self.problem.task.tokens)
        if lam == 0.0 and self.problem.task.noise_out == 0.0 and abar < self.interpolation_alpha_bar():
            res = self._solve_interpolating(alpha)
        else:
            res = self._solve_regular(alpha, init)
        res.seconds = time.perf_counter() - t0
        if not res.converged:
            warnings.warn(
                f"state evolution did not converge at alpha={alpha:g}: {res.message}", ConvergenceWarning,
                stacklevel=2,
            )
        return res

    def _solve_regular(self, alpha: float, init) -> SEResult:
        if isinstance(init, SEResult):
            init = init.x if init.phase == "regular" and init.converged else None
        x = self._project(np.asarray(init, float) if init is not None else self.initial_guess())
        hist_x: list[np.ndarray] = []
        hist_f: list[np.ndarray] = []
        best = (np.inf, x)
        message = ""
        converged = False
        it = 0
        resid = np.inf
        ch = ms = None
        for it in range(1, self.max_iter + 1):  # noqa: B007 - the count is reported
            try:
                fx, ch, ms = self._map(alpha, x)
            except FloatingPointError as exc:
                message = str(exc)
                break
            f = fx - x
            scale = np.maximum(np.abs(x), 1e-3)
            resid = float(np.max(np.abs(f) / scale))
            if not np.isfinite(resid):
                message = "non-finite residual"
                break
            if resid <= self.tol:
                converged = True
                x = fx
                break
            if resid < best[0]:
                best = (resid, x)
            elif resid > 10 * best[0]:  # Anderson went astray: restart from the best point
                hist_x.clear()
                hist_f.clear()
            hist_x.append(x.copy())
            hist_f.append(f.copy())
            if len(hist_x) > self.anderson + 1:
                hist_x.pop(0)
                hist_f.pop(0)
            eta = self.damping
            x_new = x + eta * f
            if len(hist_x) >= 2:
                dX = np.diff(np.array(hist_x), axis=0).T
                dF = np.diff(np.array(hist_f), axis=0).T
                gamma, *_ = np.linalg.lstsq(dF, f, rcond=None)
                x_new = x_new - (dX + eta * dF) @ gamma
            x = self._project(x_new)
        else:
            message = f"no convergence in {self.max_iter} iterations"
        if ch is None or ms is None:
            return self._failed(alpha, it, resid, message or "map could not be evaluated")
        # observables at the final point (recompute consistently at x)
        fx, ch, ms = self._map(alpha, x)
        return self._observables(alpha, x, ch, ms, converged, it, resid, message)

    def _observables(self, alpha, x, ch, ms, converged, it, resid, message) -> SEResult:
        q, m, sigma = x
        te, te_err = self.channel.test_error(q, m, clean=False)
        tc, tc_err = self.channel.test_error(q, m, clean=True)
        lam = self.problem.student.lam
        penalty = lam * (q if self.problem.student.model == "direct" else ms.trace)
        train = ch.train_error + self.error_offset
        return SEResult(
            alpha=alpha,
            alpha_bar=alpha_bar(alpha, self.problem.task.tokens),
            q=q,
            m=m,
            sigma=sigma,
            q_hat=ch.q_hat,
            m_hat=ch.m_hat,
            sigma_hat=ch.sigma_hat,
            delta=ms.delta,
            eps=ms.eps,
            mse=self.q0 - 2 * m + q,
            test_error=te + self.error_offset,
            test_error_clean=tc,
            train_error=train,
            objective=alpha * train + penalty,
            rank=ms.rank,
            converged=bool(converged),
            iterations=it,
            residual=resid,
            seconds=0.0,
            message=message,
            errors={
                "test_error": te_err,
                "test_error_clean": tc_err,
                "spectral": ms.spectral_error,
                **{f"channel_{k}": v for k, v in ch.error_estimate.items()},
            },
        )

    def _failed(self, alpha, it, resid, message) -> SEResult:
        nan = float("nan")
        return SEResult(
            alpha, alpha_bar(alpha, self.problem.task.tokens), nan, nan, nan, nan, nan, nan, nan, nan, nan,
            nan, nan, nan, nan, nan, False, it, float(resid), 0.0, "failed", message,
        )

    # ----------------------------------------------------------------- lambda -> 0+ ------------
    def interpolation_alpha_bar(self) -> float:
        """alpha_bar at which the lambda -> 0+ training error leaves zero (see thresholds)."""
        if self._inter_abar is None:
            from .thresholds import interpolation_threshold

            self._inter_abar = interpolation_threshold(self.measure, self.problem.task.noise,
                                                       model=self.problem.student.model)
        return self._inter_abar

    def _solve_interpolating(self, alpha: float) -> SEResult:
        abar = alpha_bar(alpha, self.problem.task.tokens)
        r = self.problem.task.beta0 / self.problem.student.beta
        qz = self.q0 + self.problem.task.noise / 2
        if self.problem.student.model == "direct":
            s = 2 * abar
            delta2 = (qz - 2 * s * self.q0 + s * s * self.q0) / (s * (1 - s))
            q = r * r * s * s * (self.q0 + delta2)
            m = r * s * self.q0
            delta, eps, rank, it, resid, ok, msg = math.sqrt(delta2), 0.0, 1.0, 0, 0.0, True, ""
        else:
            sol = solve_interpolating_phase(self.measure, qz, abar)
            delta, eps = sol["delta"], sol["eps"]
            q = r * r * sol["I"]
            m = r * sol["m_over_r"]
            rank = sol["rank"]
            it, resid, ok, msg = sol["iterations"], sol["residual"], sol["converged"], sol["message"]
        te, te_err = self.channel.test_error(q, m, clean=False)
        tc, tc_err = self.channel.test_error(q, m, clean=True)
        return SEResult(
            alpha=alpha, alpha_bar=abar, q=q, m=m, sigma=math.inf, q_hat=0.0, m_hat=0.0, sigma_hat=0.0,
            delta=delta, eps=eps, mse=self.q0 - 2 * m + q, test_error=te + self.error_offset,
            test_error_clean=tc, train_error=self.error_offset, objective=alpha * self.error_offset,
            rank=rank, converged=ok, iterations=it, residual=resid, seconds=0.0, phase="interpolating",
            message=msg, errors={"test_error": te_err, "test_error_clean": tc_err},
        )

    # ----------------------------------------------------------------- sweeps ------------------
    def learning_curve(self, alphas, progress=None) -> list[SEResult]:
        """Solve along a sequence of alphas, warm-starting each point from the previous one."""
        out: list[SEResult] = []
        prev: SEResult | None = None
        for a in alphas:
            res = self.solve(a, init=prev)
            if not res.converged and prev is not None:  # retry cold
                cold = self.solve(a, init=None)
                if cold.converged:
                    res = cold
            out.append(res)
            prev = res if res.converged else prev
            if progress is not None:
                progress()
        return out


def solve_interpolating_phase(measure, qz: float, abar: float) -> dict[str, Any]:
    """Factorised lambda -> 0+ in the interpolating phase: find (delta, eps) (see module docstring).

    For fixed eps, G(delta) = Q' - I + (delta/2) dI/ddelta + eps dI/deps is solved for delta after
    eliminating alpha_bar with dI/ddelta = 4 delta alpha_bar; the outer Brent search matches
    alpha_bar(eps) = dI/ddelta/(4 delta) to the target. Both are bracketed 1-D root finds.
    """
    def integrals(delta, eps):
        return FreeConvolution(measure, delta).integrals(eps)

    def abar_of_delta(delta, eps):
        return integrals(delta, eps).dI_ddelta / (4 * delta)

    def g_eq(delta, eps):
        si = integrals(delta, eps)
        abar_d = si.dI_ddelta / (4 * delta)
        return qz - si.I + 2 * abar_d * delta**2 + eps * si.dI_deps

    # For fixed eps: alpha_bar(delta) along the curve; solve G(delta, eps) = 0 with alpha from delta.
    # We instead solve the 2x2 system by nested brentq: outer over eps, inner over delta.
    def inner_delta(eps):
        # G -> qz - Q0 > 0-ish as delta -> 0 (when eps > 0 keeps support), G < 0 for large delta
        lo, hi = 1e-6, 1.0
        while g_eq(hi, eps) > 0:
            hi *= 2
            if hi > 1e6:
                raise FloatingPointError("no interpolating solution")
        glo = g_eq(lo, eps)
        if glo < 0:
            raise FloatingPointError("no interpolating solution at this eps")
        return optimize.brentq(lambda dl: g_eq(dl, eps), lo, hi, xtol=1e-14, rtol=1e-13)

    def outer(eps):
        delta = inner_delta(eps)
        return abar_of_delta(delta, eps) - abar

    # eps grows as alpha_bar decreases; bracket
    e_lo, e_hi = 1e-8, 1.0
    iterations = 0
    try:
        f_lo = outer(e_lo)
        while outer(e_hi) > 0:
            e_hi *= 2
            if e_hi > 1e6:
                raise FloatingPointError("eps bracket")
        if f_lo < 0:
            raise FloatingPointError("alpha_bar above the interpolation threshold")
        eps, rr = optimize.brentq(outer, e_lo, e_hi, xtol=1e-14, rtol=1e-12, full_output=True)
        iterations = rr.iterations
        delta = inner_delta(eps)
        si = integrals(delta, eps)
        resid = abs(si.dI_ddelta / (4 * delta) - abar)
        ok = bool(rr.converged)
        msg = ""
    except FloatingPointError as exc:
        nan = float("nan")
        return {"delta": nan, "eps": nan, "I": nan, "m_over_r": nan, "rank": nan, "trace": nan,
                "iterations": iterations, "residual": nan, "converged": False, "message": str(exc)}
    m_over_r = si.I - 0.5 * delta * si.dI_ddelta - 0.5 * eps * si.dI_deps
    return {"delta": delta, "eps": eps, "I": si.I, "m_over_r": m_over_r, "rank": si.rank,
            "trace": -0.5 * si.dI_deps, "iterations": iterations, "residual": resid, "converged": ok,
            "message": msg}


def solve(problem: Problem, alpha: float, d: int | None = None, **options) -> SEResult:
    """One SE point (convenience)."""
    return StateEvolution(problem, d=d, **options).solve(alpha)


def learning_curve(problem: Problem, alphas, d: int | None = None, **options) -> list[SEResult]:
    """Warm-started SE along alphas (convenience)."""
    return StateEvolution(problem, d=d, **options).learning_curve(alphas)
