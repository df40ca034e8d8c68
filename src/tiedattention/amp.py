r"""GAMP on actual data: the algorithm whose state evolution is THEORY.md section 3, run at finite d.

Derivation and normalisations: docs/theory/gamp.md. In short, the unknown is the symmetric matrix S (the
Frobenius inner product on symmetric matrices, N = d(d+1)/2 orthonormal coordinates), and every sequence mu
gives K = T(T+1)/2 linear measurements ``v_mu,k = <A_mu,k, S>`` (upper triangle, ``np.triu_indices(T)``):

    A_mu,ab = (x_a x_b^T + x_b x_a^T) / (2 sqrt d)   (a < b),     A_mu,aa = (x_a x_a^T - I) / sqrt(2 d),

so that ``h(S) = D(v)`` (the channel's convention: v off the diagonal, sqrt(2) v on it) and every v has
variance (1/d) Tr S^2 = q. In orthonormal coordinates the entries of A have variance exactly 1/d.
The ERM is ``min_S sum_mu l(v_mu; y_mu) + lam d Tr S`` over {S psd, rank <= p} (factorised) or with
``lam d ||S||_F^2`` (direct), l the softmax square loss of ``theory.channel``.

One iteration, written directly in the state evolution's units (hats are the SE's conjugates):

    omega   = A(S_t) - V_t g_{t-1}                                   (Onsager correction)
    h*      = prox_{V_t l}(omega) (``prox_softmax``),  g = (h* - omega)/V_t,  J = dh*/domega
    q_hat   = (2/d^2) sum_mu |g_mu|^2,     sigma_hat = (2/d^2) sum_mu tr(I - J_mu)/V_t
    Y       = sigma_hat S_t + (2/d) A^T(g)                           (effective observation, = m_hat S0 + noise)
    S_{t+1} = f(Y)/sigma_hat,  f = eigenvalue soft threshold at 2 lam on the psd cone (top p kept)
              direct model: f(Y) = Y sigma_hat/(sigma_hat + 4 lam)
    V_{t+1} = 2 div f(Y) / (d^2 sigma_hat),   div on symmetric matrices (:func:`spectral_divergence`)

(1/d) Tr S_t^2, (1/d) Tr S_t S0 and V_t are the SE's q, m, Sigma of iteration t: started from the same
(q, m, Sigma), the SE map reproduces the iterates up to finite-size fluctuations (:func:`se_trajectory`;
with damping, the SE of damped GAMP with mixed conjugates, ``damp="effective"``, closed by the two-time SE of
``theory.two_time``: ``se_trajectory(..., noise_correlation="two-time")``).

Damping (``damp``): "iterates" mixes g, sigma_hat, S, V; "effective" mixes the Onsager-corrected Y (with g and
sigma_hat alike; Onsager term V g_bar). Narrow students (rank cut) use c sigma_hat in the input step
(``input_weight`` c = 1.5 by default): at c = 1 their fixed point is unstable for any damping (measured; the
rank-constrained denoiser is expansive in the rotations of kept into cut eigenvectors); a shorter step is not.

At a fixed point h* = A(S) and g = -grad l(A(S)), so A^T(g) is a subgradient of the
penalty at S: the fixed point is a stationary point of the ERM objective (``GAMPResult.kkt`` measures it).

Layering: numpy only, plus ``theory.channel`` (prox, loss), ``theory.state_evolution``, ``theory.denoisers`` (SE)
and ``theory.two_time`` (the two-time SE of damped GAMP).
The registry adapter :func:`solve_gamp` and :func:`register` import ``simulation`` (torch) lazily.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import ConvergenceWarning, ParameterError
from .problem import Problem, validate_integer, validate_problem
from .theory.channel import _softmax_rows, logit_design, prox_softmax, softmax_loss
from .theory.denoisers import spectral_divided_differences

__all__ = [
    "MeasurementOperator",
    "GAMPIterate",
    "GAMPResult",
    "gamp",
    "spectral_denoiser",
    "spectral_divergence",
    "se_trajectory",
    "objective",
    "solve_gamp",
    "register",
]


# --------------------------------------------------------------------------------------------------
# The linear measurement operator A: Sym(d) -> R^{n x K} and its adjoint
# --------------------------------------------------------------------------------------------------
class MeasurementOperator:
    """v = A(S) (n, K) and A^T(g) (d, d) for tokens X (n, T, d), with the Frobenius inner product on S.

    ``A(S)_mu,k = <A_mu,k, S>`` equals the channel coordinate of the logit: h_ab(S) for a < b and
    h_aa(S)/sqrt(2) on the diagonal, h(S) = (X S X^T - I Tr S)/sqrt(d). The adjoint is
    ``A^T(g) = sum_mu (X_mu^T D(g_mu) X_mu - tr D(g_mu) I) / (2 sqrt d)``. Each costs one (nT x d) x (d x d)
    matrix product.
    """

    def __init__(self, X: np.ndarray):
        X = np.asarray(X, dtype=float)
        if X.ndim != 3:
            raise ParameterError("X", f"must have shape (n, T, d) (got {X.shape})")
        self.X = X
        self.n, self.T, self.d = X.shape
        # the channel's D convention: vec D(v) = P v, and P^T P = 2 I, so v = P^T vec(h) / 2 for h = D(v)
        self.P = logit_design(self.T)
        self._flat = X.reshape(self.n * self.T, self.d)

    def row_weights(self) -> np.ndarray:
        """w_mu = mean_k ||A_mu,k||_F^2 / ((d + 1)/2), (n,): the per-sequence squared row norm relative to its
        expectation (E ||A_mu,k||^2 = (d + 1)/2 exactly; the fluctuations are O(1/sqrt d))."""
        sq = np.einsum("nad,nbd->nab", self.X, self.X)  # Gram matrices x_a . x_b
        nrm = np.diagonal(sq, axis1=1, axis2=2)  # |x_a|^2, (n, T)
        d = self.d
        a, b = np.triu_indices(self.T)
        off = (nrm[:, a] * nrm[:, b] + sq[:, a, b] ** 2) / (2 * d)
        dia = (nrm[:, a] ** 2 - 2 * nrm[:, a] + d) / (2 * d)
        rows = np.where(a == b, dia, off)
        return rows.mean(axis=1) / ((d + 1) / 2)

    @property
    def K(self) -> int:
        return self.P.shape[1]

    def logits(self, S: np.ndarray) -> np.ndarray:
        """h(S), (n, T, T)."""
        XS = (self._flat @ S).reshape(self.n, self.T, self.d)
        h = np.einsum("nad,nbd->nab", XS, self.X)
        h -= np.trace(S) * np.eye(self.T)
        return h / math.sqrt(self.d)

    def forward(self, S: np.ndarray) -> np.ndarray:
        """A(S), (n, K)."""
        return 0.5 * self.logits(S).reshape(self.n, self.T * self.T) @ self.P

    def adjoint(self, g: np.ndarray) -> np.ndarray:
        """A^T(g), (d, d) symmetric, for g (n, K)."""
        G = (0.5 * np.asarray(g, float) @ self.P.T).reshape(self.n, self.T, self.T)  # D(g)/2
        GX = np.einsum("nab,nbd->nad", G, self.X).reshape(self.n * self.T, self.d)
        out = self._flat.T @ GX
        out = 0.5 * (out + out.T)
        out -= np.trace(G, axis1=1, axis2=2).sum() * np.eye(self.d)
        return out / math.sqrt(self.d)


# --------------------------------------------------------------------------------------------------
# Spectral denoiser and its divergence
# --------------------------------------------------------------------------------------------------
def spectral_divergence(mu: np.ndarray, f: np.ndarray, fprime: np.ndarray) -> float:
    """Divergence of the spectral map Y = U diag(mu) U^T -> U diag(f) U^T on symmetric matrices.

    In the N = d(d+1)/2 orthonormal coordinates of Sym(d) (Frobenius inner product):
    ``div = sum_i f'(mu_i) + sum_{i<j} (f(mu_i) - f(mu_j)) / (mu_i - mu_j)``; (numerically) equal eigenvalues
    use the mean derivative. ``f`` may be any function of the ordered eigenvalues that is locally smooth
    (a rank cut between two distinct eigenvalues included).
    """
    diag, off = spectral_divided_differences(mu, f, fprime)
    return float(diag.sum() + off.sum())


@dataclass(frozen=True)
class Denoised:
    """f(Y) = U diag(f) U^T, with the eigenvalues mu of Y (ascending), f, and the divergence of Y -> f(Y)."""

    F: np.ndarray
    mu: np.ndarray
    f: np.ndarray
    divergence: float


def spectral_denoiser(Y: np.ndarray, thresh: float, rank: int | None = None) -> Denoised:
    """f(Y) = argmin_{S psd, rank <= r} ||S||^2/2 - <Y, S> + thresh Tr S: soft-threshold the eigenvalues at
    ``thresh``, clip at 0 and keep the ``rank`` largest. Returns the matrix and the divergence of Y -> f(Y)."""
    Y = 0.5 * (Y + Y.T)
    mu, U = np.linalg.eigh(Y)
    f = np.maximum(mu - thresh, 0.0)
    fp = (mu > thresh).astype(float)
    if rank is not None and rank < mu.size:
        f[: mu.size - rank] = 0.0  # eigh sorts ascending
        fp[: mu.size - rank] = 0.0
    F = (U * f) @ U.T
    return Denoised(0.5 * (F + F.T), mu, f, spectral_divergence(mu, f, fp))


# --------------------------------------------------------------------------------------------------
# Objective on the data (normalised by d^2, as everywhere in the project)
# --------------------------------------------------------------------------------------------------
def _losses(op: MeasurementOperator, S: np.ndarray, y: np.ndarray, beta: float) -> np.ndarray:
    r = y - _softmax_rows(beta * op.logits(S))
    return (r * r).sum(axis=(1, 2))


def objective(problem: Problem, X: np.ndarray, y: np.ndarray, S: np.ndarray) -> dict[str, float]:
    """F = alpha * train_error + penalty (factorised: lam (1/d) Tr S; direct: lam (1/d) ||S||_F^2)."""
    op = MeasurementOperator(X)
    return _objective(problem, op, np.asarray(y, float), np.asarray(S, float))


def _objective(problem: Problem, op: MeasurementOperator, y: np.ndarray, S: np.ndarray) -> dict[str, float]:
    d = op.d
    train = float(np.mean(_losses(op, S, y, problem.student.beta)))
    lam = problem.student.lam
    pen = lam * (float(np.trace(S)) if problem.student.model == "factorized" else float((S * S).sum())) / d
    return {"objective": op.n / d**2 * train + pen, "train_error": train, "penalty": pen}


# --------------------------------------------------------------------------------------------------
# GAMP
# --------------------------------------------------------------------------------------------------
@dataclass
class GAMPIterate:
    """Order parameters of iterate t (the SE's x_t): q = (1/d)Tr S_t^2, m = (1/d)Tr S_t S0 (NaN without S0),
    sigma = V_t; and what the output step made of them: q_hat, sigma_hat (the SE's conjugates, measured on
    the data), residual = (1/d)||S_{t+1} - S_t||^2 / q_{t+1};
    noise_correlation = <g_new, g_bar_old>/(|g_new| |g_bar_old|), the correlation of the new output message
    with the damped old one (NaN at t = 0): the two-time quantity that the single-time damped SE does not
    carry; the two-time SE predicts it (``theory.two_time.damped_state_evolution(...).rho``)."""

    t: int
    q: float
    m: float
    sigma: float
    q_hat: float
    sigma_hat: float
    residual: float
    noise_correlation: float = float("nan")


@dataclass
class GAMPResult:
    """Outcome of :func:`gamp`.

    S_hat : (d, d) the last iterate; sigma, sigma_hat : the last V and Sigma_hat (the SE's Sigma and Sigma_hat
    at input_weight 1; with c != 1, V = 2 div f/(d^2 c sigma_hat) belongs to the shorter step, S_hat does not
    depend on c); converged : the residual met ``tol`` (a step from 0 to 0 only if 0 is stationary);
    iterations; residual; message; damping : the final eta (adaptive damping may lower it);
    input_weight : the final c of the input step;
    history : one :class:`GAMPIterate` per iteration (t = 0 is the initialisation); kkt : fixed-point
    residual of the proximal-gradient map of the ERM at S_hat, (1/d)||S - prox_{tau pen}(S - tau grad)||^2 / q
    with tau = 2/(d c sigma_hat) (0 at a stationary point); objective, train_error, penalty at S_hat; seconds.
    """

    S_hat: np.ndarray
    sigma: float
    sigma_hat: float
    converged: bool
    iterations: int
    residual: float
    message: str
    history: list[GAMPIterate] = field(default_factory=list)
    kkt: float = float("nan")
    damping: float = float("nan")
    input_weight: float = 1.0
    objective: float = float("nan")
    train_error: float = float("nan")
    penalty: float = float("nan")
    seconds: float = 0.0

    def trajectory(self) -> np.ndarray:
        """(iterations + 1, 3) array of (q, m, sigma) per iterate."""
        return np.array([[h.q, h.m, h.sigma] for h in self.history])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("S_hat")
        return out


def _number(name: str, value: Any) -> float:
    """``value`` as a float (a number or a numpy scalar; not a bool or a string), else a ParameterError."""
    if isinstance(value, (bool, str)) or value is None:
        raise ParameterError(name, f"must be a number (got {value!r})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, f"must be a number (got {value!r})") from None


def _output_step(omega, y, V, beta, T, w=None):
    """g_out and the summed -dg/domega traces: (g (n, K), sum_mu w_mu tr(I - J_mu)/V_mu), V_mu = w_mu V."""
    if w is not None and V > 0.0:
        Vm = V * w
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            pr = prox_softmax(omega, y, Vm, beta, T)
        K = omega.shape[1]
        tr = float((w * (K - np.trace(pr.jac_z, axis1=1, axis2=2)) / Vm).sum())
        return pr.g, tr
    if V <= 0.0:  # Sigma = 0 limit: h* = omega, g = -grad l, -dg/domega = H
        _, grad, H = softmax_loss(omega, y, beta, T)
        return -grad, float(np.trace(H, axis1=1, axis2=2).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pr = prox_softmax(omega, y, V, beta, T)
    if not pr.converged and pr.residual > 1e-7:
        warnings.warn(f"GAMP: prox residual {pr.residual:.1e}", ConvergenceWarning, stacklevel=3)
    K = omega.shape[1]
    tr = float((K - np.trace(pr.jac_z, axis1=1, axis2=2)).sum()) / V
    return pr.g, tr


def gamp(
    problem: Problem,
    X: np.ndarray,
    y: np.ndarray,
    S0: np.ndarray | None = None,
    *,
    damping: float = 0.5,
    tol: float = 1e-11,
    max_iter: int = 1000,
    init: np.ndarray | None = None,
    sigma0: float = 1.0,
    row_variances: bool = False,
    patience: int = 40,
    min_damping: float = 0.05,
    callback: Callable[[int, np.ndarray, GAMPIterate], None] | None = None,
    input_weight: float | None = None,
    max_input_weight: float = 8.0,
    damp: str = "iterates",
) -> GAMPResult:
    """Run GAMP for the ERM of ``problem`` on tokens X (n, T, d) and labels y (n, T, T) (seq2lab).

    Parameters
    ----------
    S0 : the target, only used to report m = (1/d) Tr S_t S0 in the history (NaN without it).
    damping : eta in (0, 1] (1: no damping; the fixed points do not depend on it).
    damp : what is damped. "iterates": g, sigma_hat, S and V are replaced by eta * new + (1 - eta) * old.
        "effective": the Onsager-corrected effective observation Y = c sigma_hat S + (2/d) A^T g, with g and
        sigma_hat mixed with the same weights (the next Onsager term is V g_bar, the derivative of S_{t+1} with
        respect to every past g); S = f(Y_bar)/sigma_bar and V are not damped. Its state evolution is the SE
        with damped conjugates (:func:`se_trajectory` with ``damp="effective"``).
    patience, min_damping : adaptive step control: when the residual has not reached a new minimum for
        ``patience`` iterations, with a rank cut the input weight is raised (x 1.5, up to ``max_input_weight``),
        otherwise eta is halved (not below ``min_damping``); once both are exhausted a factorised student's input
        weight is raised (further) and eta set back to ``damping``. The direct model only halves eta.
        ``patience=0`` keeps eta and the input weight fixed. (At small d an eigenvalue of Y near the threshold
        2 lam can switch on and off in a limit cycle of f' and V that no damping ends; c > 1 moves it away from
        the threshold. With c != 1 the fixed point's V and sigma_hat are those of the step c sigma_hat, not the
        SE's Sigma and Sigma_hat: docs/theory/gamp.md.)
    input_weight : c >= 1: the input step uses c * sigma_hat (a proximal step tau = 2/(d c sigma_hat), c times
        shorter than GAMP's; the fixed points are the same stationary points). Default 1 without a rank cut
        and 1.5 with one (kappa < 1): at c = 1 the narrow student's fixed point is linearly unstable for every
        damping tried (measured), the likely cause being that the rank-constrained denoiser is expansive in the
        directions that rotate a kept eigenvector into a cut one (derivative (mu_i - 2 lam)/(mu_i - mu_j) > 1
        when the cut eigenvalue mu_j lies above the threshold); c > 1 pulls the kept eigenvalues of Y away from
        the cut ones. See docs/theory/gamp.md.
    row_variances : use per-sequence variances V_mu = w_mu V (w_mu the squared row norms of A relative to
        their mean, :meth:`MeasurementOperator.row_weights`) in the output step instead of one V; the same
        fixed points, a smaller finite-d mismatch of the Onsager term (an option; off by default).
    tol : stop when (1/d)||S_{t+1} - S_t||_F^2 / q_{t+1} < tol (q = (1/d) Tr S^2).
    init, sigma0 : the initial iterate S_0 (default 0) and V_0 (default 1); g_{-1} = 0.
    callback : ``callback(t, S_t, iterate)`` after each iteration.

    Returns a :class:`GAMPResult`; never NaN silently: a non-finite iterate stops the run with
    ``converged=False`` and the last finite iterate.
    """
    t_start = time.perf_counter()
    validate_problem(problem)
    if problem.task.task != "seq2lab":
        raise ParameterError("task", "GAMP is implemented for seq2lab (its loss is a function of the logits)")
    damping = _number("damping", damping)
    if not 0 < damping <= 1:
        raise ParameterError("damping", f"must be in (0, 1] (got {damping!r})")
    sigma0 = _number("sigma0", sigma0)
    if not 0 <= sigma0 < math.inf:
        raise ParameterError("sigma0", f"must be finite and >= 0 (got {sigma0!r})")
    min_damping = _number("min_damping", min_damping)
    if not 0 < min_damping <= 1:
        raise ParameterError("min_damping", f"must be in (0, 1] (got {min_damping!r})")
    max_input_weight = _number("max_input_weight", max_input_weight)
    if not 1 <= max_input_weight < math.inf:
        raise ParameterError("max_input_weight", f"must be finite and >= 1 (got {max_input_weight!r})")
    patience = validate_integer("patience", patience, 0)
    max_iter = validate_integer("max_iter", max_iter, 1)
    tol = _number("tol", tol)
    op = MeasurementOperator(X)
    n, T, d = op.n, op.T, op.d
    if n < 1 or d < 1:
        raise ParameterError("X", f"needs n >= 1 sequences of dimension d >= 1 (got shape {op.X.shape})")
    if T != problem.task.tokens:
        raise ParameterError("X", f"has T = {T} tokens, the problem has {problem.task.tokens}")
    y = np.asarray(y, float)
    if y.shape not in ((n, T, T), (n, T * T)):
        raise ParameterError("y", f"must have shape ({n}, {T}, {T}) for X of shape {X.shape} (got {y.shape})")
    y = y.reshape(n, T, T)
    if not (np.all(np.isfinite(op.X)) and np.all(np.isfinite(y))):
        raise ParameterError("X" if not np.all(np.isfinite(op.X)) else "y", "must be finite")
    for name, M in (("S0", S0), ("init", init)):
        if M is not None and (np.shape(M) != (d, d) or not np.all(np.isfinite(M))):
            raise ParameterError(name, f"must be a finite ({d}, {d}) matrix (got shape {np.shape(M)})")
    if not tol >= 0:  # 0: run max_iter iterations
        raise ParameterError("tol", f"must be >= 0 (got {tol!r})")
    beta = problem.student.beta
    lam = problem.student.lam
    direct = problem.student.model == "direct"
    p = problem.student.width(d)
    rank = None if direct or p >= d else p
    S = np.zeros((d, d)) if init is None else 0.5 * (np.asarray(init, float) + np.asarray(init, float).T)
    V = float(sigma0)
    g = np.zeros((n, op.K))
    s_hat_prev = None
    eta = float(damping)
    if input_weight is None:
        input_weight = 1.0 if rank is None else 1.5
    input_weight = _number("input_weight", input_weight)
    if not 1.0 <= input_weight <= max_input_weight:
        raise ParameterError("input_weight", f"must be in [1, {max_input_weight:g}] (got {input_weight!r})")
    c_in = float(input_weight)
    if damp not in ("iterates", "effective"):
        raise ParameterError("damp", f"must be 'iterates' or 'effective' (got {damp!r})")
    effective = damp == "effective"
    s_in = Ybar = None
    w = op.row_weights() if row_variances else None
    best, it_best = float("inf"), 0
    damping_changes: list[tuple[int, str]] = []

    def order(Sm: np.ndarray) -> tuple[float, float]:
        q = float((Sm * Sm).sum()) / d
        m = float((Sm * S0).sum()) / d if S0 is not None else float("nan")
        return q, m

    history: list[GAMPIterate] = []
    converged, message, resid = False, f"no convergence in {max_iter} iterations", float("inf")
    it = 0
    for it in range(1, max_iter + 1):
        q_t, m_t = order(S)
        # output step
        omega = op.forward(S) - (V * g if w is None else (V * w)[:, None] * g)
        g_new, tr = _output_step(omega, y, V, beta, T, w)
        s_hat_new = 2.0 * tr / d**2
        if not (np.isfinite(s_hat_new) and s_hat_new > 0 and np.all(np.isfinite(g_new))):
            message = f"output step left the admissible region at iteration {it} (sigma_hat={s_hat_new:g})"
            break
        q_hat = 2.0 * float((g_new * g_new).sum()) / d**2
        rho = float("nan")
        if s_hat_prev is not None:
            nrm = math.sqrt(float((g_new * g_new).sum()) * float((g * g).sum()))
            rho = float((g_new * g).sum()) / nrm if nrm > 0 else float("nan")
        if effective:
            # damp the Onsager-corrected observation Y = c sigma_hat S + (2/d) A^T g (and g, sigma_hat with the
            # same weights, so that the next Onsager term V g is the derivative of S wrt every past g)
            Y_new = (c_in * s_hat_new) * S + (2.0 / d) * op.adjoint(g_new)
            if s_hat_prev is None:
                g, s_in, Ybar = g_new, c_in * s_hat_new, Y_new
            else:
                g = eta * g_new + (1 - eta) * g
                s_in = eta * c_in * s_hat_new + (1 - eta) * s_in
                Ybar = eta * Y_new + (1 - eta) * Ybar
            s_hat = s_in / c_in
            s_hat_prev = s_hat
            S_next, V_new = _denoise(Ybar, s_in, d, lam, direct, rank)
            if not (np.all(np.isfinite(S_next)) and np.isfinite(V_new)):
                message = f"non-finite iterate at iteration {it}"
                break
        else:
            if s_hat_prev is None:
                g, s_hat = g_new, s_hat_new
            else:
                g = eta * g_new + (1 - eta) * g
                s_hat = eta * s_hat_new + (1 - eta) * s_hat_prev
            s_hat_prev = s_hat
            # input step
            S_new, V_new = _input_step(op, S, g, s_hat * c_in, lam, direct, rank)
            if not (np.all(np.isfinite(S_new)) and np.isfinite(V_new)):
                message = f"non-finite iterate at iteration {it}"
                break
            S_next = eta * S_new + (1 - eta) * S
        diff = S_next - S
        q_next = float((S_next * S_next).sum()) / d
        resid = float((diff * diff).sum()) / d / q_next if q_next > 0 else float((diff * diff).sum()) / d
        rec = GAMPIterate(it - 1, q_t, m_t, V, q_hat, s_hat, resid, rho)
        history.append(rec)
        S, V = S_next, (V_new if effective else eta * V_new + (1 - eta) * V)
        if callback is not None:
            callback(it, S, rec)
        # S_{t+1} = S_t = 0 says nothing about g and V (the denoiser clips every eigenvalue of Y whatever g is,
        # e.g. at the first iteration, where g is the prox's at V_0 and not yet -grad l): stop at 0 only if 0 is
        # a stationary point of the ERM, else iterate on (V decays, g -> -grad l(0), S leaves 0)
        if resid < tol and (q_next > 0 or _zero_is_stationary(problem, op, y, s_hat * c_in, direct, rank)):
            converged, message = True, f"residual {resid:.2e} < {tol:g}"
            break
        if resid < best:
            best, it_best = resid, it
        elif patience and it - it_best >= patience:
            # with a rank cut the input weight first (up to max_input_weight), then the damping. Without one the
            # damping first (a raised c changes V at the fixed point: V is then not the SE's Sigma), then c (x 1.5,
            # eta back to its initial value): at small d an eigenvalue of Y near the threshold 2 lam can switch f'
            # and V on and off in a limit cycle that no damping ends and c > 1 moves out of. The direct model's
            # denoiser is linear (no threshold): damping only.
            if rank is not None and c_in < max_input_weight:
                c_in, it_best = min(1.5 * c_in, max_input_weight), it
                damping_changes.append((it, f"input weight {c_in:g}"))
            elif eta > min_damping:
                eta, it_best = max(0.5 * eta, min_damping), it
                damping_changes.append((it, f"damping {eta:g}"))
            elif not direct and c_in < max_input_weight:
                c_in, eta, it_best = min(1.5 * c_in, max_input_weight), float(damping), it
                damping_changes.append((it, f"input weight {c_in:g}, damping {eta:g}"))
    q_t, m_t = order(S)
    history.append(GAMPIterate(len(history), q_t, m_t, V, float("nan"), float("nan"), float("nan")))
    if damping_changes:
        message += "; step control: " + ", ".join(f"{e} (iteration {i})" for i, e in damping_changes)
    res = GAMPResult(S, V, s_hat_prev if s_hat_prev is not None else float("nan"), converged, it,
                     resid, message, history, damping=eta, input_weight=c_in)
    _finish(problem, op, y, res, direct, rank)
    res.seconds = time.perf_counter() - t_start
    if not converged:
        warnings.warn(f"GAMP did not converge: {message}", ConvergenceWarning, stacklevel=2)
    return res


def _zero_is_stationary(problem, op, y, s_in, direct, rank) -> bool:
    """S = 0 is a fixed point of the proximal-gradient map of the ERM (KKT at 0): f(-(2/d) A^T grad l(0)) = 0."""
    _, grad, _ = softmax_loss(op.forward(np.zeros((op.d, op.d))), y, problem.student.beta, op.T)
    P, _ = _input_step(op, np.zeros((op.d, op.d)), -grad, s_in, problem.student.lam, direct, rank)
    return not np.any(P)


def _input_step(op, S, g, s_hat, lam, direct, rank):
    """Y = sigma_hat S + (2/d) A^T(g) -> (f(Y)/sigma_hat, V = 2 div f / (d^2 sigma_hat))."""
    d = op.d
    return _denoise(s_hat * S + (2.0 / d) * op.adjoint(g), s_hat, d, lam, direct, rank)


def _denoise(Yeff, s_hat, d, lam, direct, rank):
    """(f(Y)/sigma_hat, V = 2 div f / (d^2 sigma_hat)) for the student's denoiser f."""
    if direct:
        c = 1.0 / (s_hat + 4.0 * lam)
        return c * Yeff, 2.0 * s_hat * c * (d * (d + 1) / 2) / (d**2 * s_hat)
    den = spectral_denoiser(Yeff, 2.0 * lam, rank)
    return den.F / s_hat, 2.0 * den.divergence / (d**2 * s_hat)


def _finish(problem, op, y, res: GAMPResult, direct, rank) -> None:
    """Objective at S_hat and the KKT residual: S = prox_{tau pen}(S - tau grad) at a stationary point, which in
    the units above is S = f(Y*)/sigma_hat with Y* = sigma_hat S - (2/d) A^T(grad l(A S))."""
    S = res.S_hat
    if not np.all(np.isfinite(S)):
        return
    res.objective, res.train_error, res.penalty = _objective(problem, op, y, S).values()
    if not (np.isfinite(res.sigma_hat) and res.sigma_hat > 0):
        return
    _, grad, _ = softmax_loss(op.forward(S), y, problem.student.beta, op.T)
    P, _ = _input_step(op, S, -grad, res.sigma_hat * res.input_weight, problem.student.lam, direct, rank)
    diff = P - S
    q = float((S * S).sum()) / op.d
    res.kkt = float((diff * diff).sum()) / op.d / (q if q > 0 else 1.0)


# --------------------------------------------------------------------------------------------------
# State-evolution trajectory from the same initialisation
# --------------------------------------------------------------------------------------------------
def se_trajectory(problem: Problem, alpha: float, x0, iterations: int, d: int | None = None,
                  channel_options: dict | None = None, damping: float = 1.0, damp: str = "iterates",
                  noise_correlation=1.0, two_time_options: dict | None = None) -> np.ndarray:
    """SE iterates of GAMP run with a fixed damping eta from x0 = (q, m, Sigma): (iterations + 1, 3) array.

    damping = 1: the plain SE map x_{t+1} = F(x_t) (channel moments ``SoftmaxChannel.moments`` by the SE's
    quadrature, then the spectral denoiser ``matrix_update``), the prediction for undamped GAMP.

    damp = "effective" (GAMP damps the Onsager-corrected Y): the effective observation is the mixture
    sum_s w_s Y_s of the per-iteration observations Y_s = m_hat_s S0 + sqrt(q_hat_s) Z_s, so the conjugates
    are mixed: m_hat and sigma_hat linearly (exact), and the noise variance
    q_hat_bar_t = eta^2 q_hat_t + (1 - eta)^2 q_hat_bar_{t-1} + 2 eta (1 - eta) rho sqrt(q_hat_t q_hat_bar_{t-1})
    with rho = ``noise_correlation`` the correlation of the new noise with the mixed old one: the one closure
    (a single-time SE does not carry the two-time correlations). A number (rho = 1, the default, is exact at
    a fixed point and to first order around it) or a sequence, rho[t] used at step t + 1 (rho[0] unused), e.g.
    GAMP's measured ``[h.noise_correlation for h in res.history]`` (a diagnostic, not a prediction). Then
    (q, m, Sigma) = matrix_update(mixed conjugates), undamped, as in GAMP.
    ``noise_correlation="two-time"``: the closed prediction. The state evolution then carries the covariance
    of the noises of all iterations (two-time channel integrals and the overlap of two thresholded correlated
    noisy matrices, :func:`tiedattention.theory.two_time.damped_state_evolution`, options
    ``two_time_options``); it predicts rho_t instead of taking it (kappa >= 1 or direct, x0 with q = 0).

    damp = "iterates" (GAMP damps g, sigma_hat, S and V): the conjugates are mixed as above, then m and Sigma
    are damped linearly (exact) and q = (1/d)||eta S_new + (1 - eta) S_t||^2 with the fluctuations of S_new
    and S_t taken fully correlated, q_{t+1} = (eta sqrt(q_new) + (1 - eta) sqrt(q_t))^2. This is a cruder
    closure: GAMP's Y then also carries (1 - eta) sigma_hat (S_t - S_{t-1}), a memory term outside the SE.

    The first step is undamped in the conjugates, as in GAMP. The prediction is for GAMP's (q_t, m_t, V_t)
    with the same damping and ``patience=0`` (no adaptive change), input weight 1, started from an S_0 with
    the same q, m and V_0 = Sigma (GAMP's default S_0 = 0, V_0 = 1 is x0 = (0, 0, 1)).
    """
    from .theory.denoisers import matrix_update
    from .theory.state_evolution import StateEvolution

    validate_problem(problem)
    iterations = validate_integer("iterations", iterations, 0)
    damping = _number("damping", damping)
    if not 0 < damping <= 1:
        raise ParameterError("damping", f"must be in (0, 1] (got {damping!r})")
    if damp not in ("iterates", "effective"):
        raise ParameterError("damp", f"must be 'iterates' or 'effective' (got {damp!r})")
    try:
        x0 = np.asarray(x0, float)
    except (TypeError, ValueError):
        x0 = np.array([])
    if x0.shape != (3,):
        raise ParameterError("x0", f"must be the three numbers (q, m, Sigma) (got {x0.tolist() if x0.size else x0!r})")
    if isinstance(noise_correlation, str):
        if noise_correlation != "two-time" or damp != "effective":
            raise ParameterError("noise_correlation", "a number, one per iteration, or 'two-time' (damp='effective')")
        from .theory.two_time import damped_state_evolution

        opts = dict(two_time_options or {})
        known = {"memory", "qmc_log2", "replicas", "contour_nodes", "seed"}
        if not set(opts) <= known:
            raise ParameterError("two_time_options", f"unknown {sorted(set(opts) - known)} (known: {sorted(known)})")
        return damped_state_evolution(problem, alpha, x0, iterations, damping, d=d, channel_options=channel_options,
                                      **opts).x
    rhos = np.asarray(noise_correlation, float)
    if rhos.ndim > 1 or (rhos.ndim == 1 and rhos.size < iterations):
        raise ParameterError("noise_correlation", f"needs one number or one per iteration ({iterations}; got "
                             f"shape {rhos.shape})")
    rhos = np.broadcast_to(rhos[:iterations] if rhos.ndim else rhos, (iterations,))
    if not np.all(np.abs(rhos[1:]) <= 1):
        raise ParameterError("noise_correlation", "must be in [-1, 1] (one number or one per iteration)")
    se = StateEvolution(problem, d=d, channel_options=channel_options)
    eta = float(damping)
    x = np.asarray(x0, float)
    out = [x]
    conj = None  # (q_hat, m_hat, sigma_hat), mixed
    for t in range(iterations):
        ch = se.channel.moments(alpha, *x)
        new = np.array([ch.q_hat, ch.m_hat, ch.sigma_hat])
        rho = float(rhos[t])
        if conj is None:
            conj = new
        else:
            qh = (eta**2 * new[0] + (1 - eta) ** 2 * conj[0]
                  + 2 * eta * (1 - eta) * rho * math.sqrt(new[0] * conj[0]))
            conj = np.array([qh, *(eta * new[1:] + (1 - eta) * conj[1:])])
        ms = matrix_update(problem, se.measure, *conj)
        x_new = np.array([ms.q, ms.m, ms.sigma])
        if damp == "iterates":
            x_next = eta * x_new + (1 - eta) * x
            x_next[0] = (eta * math.sqrt(x_new[0]) + (1 - eta) * math.sqrt(x[0])) ** 2
            x = x_next
        else:
            x = x_new
        out.append(x)
    return np.array(out)


# --------------------------------------------------------------------------------------------------
# Solver registry adapter (simulation layer, torch)
# --------------------------------------------------------------------------------------------------
def solve_gamp(problem: Problem, obj, *, seed: int = 0, callback=None, **options):
    """``simulation`` solver: GAMP on ``obj.data.source`` (a numpy Dataset), returned as a Solution.

    ``callback(step, F, seconds)`` gets the normalised objective of each iterate (one extra pass over the
    data per iteration, only when a callback is given). Options go to :func:`gamp`. The initialisation is
    deterministic (S_0 = 0), so ``seed`` is not used.
    """
    import torch

    from .simulation import Solution

    data = obj.data.source
    op = MeasurementOperator(data.X) if callback is not None else None
    t0 = time.perf_counter()

    def cb(t, S, rec):
        F = _objective(problem, op, data.y, S)["objective"]
        callback(t, F, time.perf_counter() - t0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = gamp(problem, data.X, data.y, data.S0, callback=cb if callback is not None else None, **options)
    S = torch.as_tensor(res.S_hat, dtype=obj.data.dtype, device=obj.data.device)
    W = None
    if problem.student.model == "factorized":
        d = res.S_hat.shape[0]
        p = problem.student.width(d)
        mu, U = np.linalg.eigh(res.S_hat)
        mu, U = mu[::-1][:p], U[:, ::-1][:, :p]
        Wn = (p * d) ** 0.25 * (U * np.sqrt(np.clip(mu, 0.0, None))).T
        if Wn.shape[0] < p:
            Wn = np.vstack([Wn, np.zeros((p - Wn.shape[0], d))])
        W = torch.as_tensor(np.ascontiguousarray(Wn), dtype=obj.data.dtype, device=obj.data.device)
    msg = f"{res.message}; kkt {res.kkt:.1e}"
    return Solution(S, W, res.iterations, res.converged, msg)


def register() -> None:
    """Register :func:`solve_gamp` as the ``gamp`` solver of :mod:`tiedattention.simulation` (idempotent)."""
    from .simulation import SOLVERS, register_solver

    if SOLVERS.get("gamp") is not solve_gamp:
        register_solver("gamp", solve_gamp, overwrite=True)
