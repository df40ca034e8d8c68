r"""State evolution (SE) of the tied-attention ERM: the fixed point of THEORY.md section 3.

Order parameters x = (q, m, Sigma) and conjugates (q_hat, m_hat, sigma_hat):

* channel side (``channel.SoftmaxChannel``): (q, m, Sigma) -> (q_hat, m_hat, sigma_hat) by Gaussian
  quadrature of the softmax prox;
* matrix side (:func:`matrix_update`): (q_hat, m_hat, sigma_hat) -> (q, m, Sigma) by the spectral
  denoiser, through the free convolution rho_delta = mu_{S0} boxplus semicircle(delta^2).

The map x -> F(x) is deterministic (fixed quadrature rules) and smooth where the softmax prox is unique;
its fixed point is found by damped iteration with Anderson acceleration (type II, memory 5, history
dropped when the residual grows tenfold) in log/atanh coordinates with a trust region. Near the
interpolation peak the prox switches branch and the map jumps at the level of the quadrature error; a
stalled point is accepted only within that noise floor. At T = 2 the Gauss-Hermite rule cannot resolve that
switch where it carries much of the integral (small lambda past the peak); such points are re-solved with a
QMC rule (``branch_switch``; the result's ``quadrature`` names the rule). The result records converged /
iterations / residual / message and is never a silent NaN.

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

import contextlib
import inspect
import math
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from scipy import optimize

from ..errors import ConvergenceWarning, ParameterError
from ..problem import (
    Problem,
    alpha_bar,
    validate_alpha,
    validate_flag,
    validate_integer,
    validate_number,
    validate_problem,
)
from .channel import MAX_GH_ORDER, PROX_WARNING, ChannelParams, SoftmaxChannel, check_channel_options
from .denoisers import matrix_update
from .spectral import FreeConvolution

__all__ = ["SEResult", "StateEvolution", "solve", "learning_curve"]

# coarse stage of a Gauss-Hermite rule (T = 2): this fraction of the accurate order
COARSE_GH_FRACTION = 1.0
PRE_GH_FRACTION = 0.5
# the default branch_switch: the branch share (ChannelMoments) above which the prox's jumps decide the point (T = 2:
# QMC re-solve; T >= 3: Stein re-solve; the theory command's replica-symmetry note)
BRANCH_SWITCH = 1e-3
# the QMC rule of the T = 2 points that Gauss-Hermite cannot resolve (branch_switch), and its stopping rule
ROUGH_QMC = {"rule": "qmc", "qmc_log2": 14, "replicas": 4}
ROUGH_FLOOR_STOP = 0.1
ROUGH_STALL = 15
ROUGH_MAX_ITER = 80  # per stage; then the floor_factor acceptance decides (each cold call ~0.1-0.4 s)
# T = 2 with labels dominated by logit noise (Delta/2 >= NOISE_STEIN * Q0): the Jacobian forms of m_hat and sigma_hat
# are wrong there (docs/theory/state_evolution.md, "Large logit noise"); the point is solved with the QMC rule of
# ROUGH_QMC and the Stein forms of the conjugates instead
NOISE_STEIN = 0.5
NOISE_QMC = {**ROUGH_QMC, "conjugates": "stein"}
# ... and starts at these multiples of the first solve's q and Sigma (_scaled_starts: all where it stalled, the
# largest where it converged), of which the lowest objective is reported
NOISE_SCALES = (10.0, 100.0)
NOISE_SAME = 1.1  # ... a start ending within this factor of the first point's q found that point again
# the notes that open _scaled_starts' message where it reports a point other than the cold solve's (the large-norm
# branch: simulate --theory warns on them, as a trainer from a small start can end on the other minimiser)
NOTE_TWO_POINTS = "two fixed points: "
NOTE_STALLED_START = "cold start stalled at q = "
NOTE_STEIN_STALLED = "Stein re-solve stalled at q = "  # (T >= 3: _stein_scaled_starts)
NOTE_JACOBIAN_KEPT = "Jacobian forms kept although the "  # (T >= 3: the Stein re-solve failed; theory's note)
NOTE_STEIN_RAN_OFF = "the Stein forms ran off to q = "  # (T >= 3, lambda = 0: refused)
# ... the lower of two fixed points (docs/theory/state_evolution.md, "Two fixed points and RS stability")
NOTE_UNSTABLE = "but it is RS-unstable "
ROUGH_GH_STALL = 5  # a Gauss-Hermite solve that stalls where the QMC re-solve will follow gives up sooner
# next to perfect recovery (1 - rho^2 < COND_VAR_BELOW) a cold solve drifts in atanh rho by a near-constant step
# (F(y) ~ y + 0.55 at MP kappa0 = 0.5, Delta = 0, lambda = 1e-4, alpha = 1) with no new best residual for dozens of
# iterations: the stall rule waits this long there (docs/theory/state_evolution.md, "The Stein forms' own rounding")
RECOVERY_STALL = 60
# a Gauss-Hermite solve with the Stein forms (T = 2 default) that does not converge is started again from the
# Gauss-Hermite point of the Jacobian forms, whose map is tamer far from the fixed point (docs/theory/
# state_evolution.md, "The conjugates: Stein forms"); that point anchors the restart if its residual is below this
FORMS_START = 1e-2
# the cold-map Stein re-solve of a T >= 3 QMC point (_stein_cold_resolve) keeps to points whose q is within this factor
# of the Jacobian forms' point: at lambda = 0 the map is nearly scale-invariant far out, and a cold solve that ran off
# to q ~ 2e9 was accepted at the quadrature floor (T = 4 with output noise, alpha = 0.05: test error 4.49 against 3.16)
COLD_STEIN_SPAN = 10.0
# (at lambda = 0 only: at lambda > 0 the penalty bounds q, and the Stein map can have its fixed point far out, where the
# warm re-solve leads. T = 3, direct, MP 1.488, Delta = 0.350, beta = 2.18, beta0 = 2.77, kappa = 1.5, lambda = 1e-5,
# alpha = 0.5515: the warm re-solve went from the Jacobian forms' q = 2.26 to 181, and the Stein fixed point is at
# q = 195, of lower objective; the span kept the Jacobian forms' point, which is no Stein fixed point. Session 28)
# a cold start that stalls is continued from the fixed point at LAM_STEP x lambda (LAM_ZERO_START at lambda = 0;
# solved cold, and by continuation where that stalls too, up to LAM_LEVELS decades up): Sigma grows like 1/lambda,
# and the cold start (Sigma = 1) can wander off to a large-q point where the map stalls (T = 2, spikes, Delta_out =
# 0.045, lambda = 6.4e-5, alpha = 0.0536: stalled at q = 4e3; the fixed point has q = 0.156, Sigma = 1.3e3;
# docs/theory/state_evolution.md, "Continuation in λ, and the cold-map re-solve of a QMC point")
LAM_STEP = 10.0
LAM_LEVELS = 2
LAM_FAR = 1e-2  # ... only where it stalled this far from a fixed point (a T = 3 point stalled at 1.5e-3 next to its
# Jacobian-forms fixed point gained nothing from it, and spent 4x the time)
# lambda = 0 is continued from this lambda (T = 4, beta = 3, alpha = 2.14 stalled cold at q = 5.1 (residual 0.13) while
# its lambda -> 0+ fixed point, q = 0.217, is reached in 11 iterations from the one at lambda = 1e-3)
LAM_ZERO_START = 1e-3
# the message of a QMC point whose warm-started fixed point fails the cold map's check (_cold_gap_resolve)
COLD_GAP = "cold map residual "
# a warm-started solve whose cold-map residual exceeds this multiple of its own (warm) residual failed on the
# warm/cold branch mismatch, not on the iteration: the hybr fallback (same warm map) is not tried there
WARM_GAP = 10.0
# below this 1 - rho^2 the solver hands the channel q (1 - rho^2) from its coordinate atanh rho (_cond_var): computed
# from q and m it keeps only ~eps / (1 - rho^2) of its digits, which the Stein forms' det carries (docs/theory/
# state_evolution.md, "The Stein forms' own rounding")
COND_VAR_BELOW = 1e-3
# lambda = 0: a point of the regular phase is a runaway, not a fixed point, where its logit scale beta sqrt(q) reaches
# RUNAWAY_RATIO x the teacher's, beta0 sqrt(Q0 + Delta/2) (at least 1). As the logits grow the softmaxes saturate, only
# a fraction ~ 1 / (beta sqrt(q)) of the samples still sees the scale of S, and the map's residual falls to the
# quadrature floor, where the floor test accepts the point (direct model, MP 0.5, Delta = 0.5, T = 2, alpha = 0.2525:
# accepted at q = 8.4e3, beta sqrt(q) = 92, Sigma = 1.3e8, while lambda = 1e-3 ... 1e-7 give q = 1.5, 2.7, 4.4, 7.6, 14:
# no finite minimiser). Measured (session 27, random lambda = 0 sweeps): converged points at ratio <= 3.0, the runaways
# the floor test accepted at ratio 41-123 (docs/theory/state_evolution.md, "Runaways at lambda = 0"). Not on Sigma: it
# diverges at the interpolation threshold with q finite (factorised, MP 0.5, Delta = 0.5, T = 2: Sigma = 1.8e5, 4.7e6,
# 1.1e8 at 1e-2, 1e-3, 1e-4 above it, q = 5.0). At lambda > 0 the penalty bounds q: no test there.
RUNAWAY_RATIO = 10.0
# ... and at lambda = 0 an iteration stops where beta sqrt(q) passes RUNAWAY_STOP, or where beta^2 Sigma passes
# RUNAWAY_SIGMA_STOP with beta sqrt(q) past the runaway bound: a T = 4 Stein re-solve ran on to q ~ 1e17, its
# evaluations 1-10 s past beta sqrt(q) ~ 3e4 (an hour; docs/theory/state_evolution.md, "A Stein fixed point far from
# the Jacobian forms'"), and a T = 3 one ran off in Sigma to 1e15 with q stuck near 2e5 (beta sqrt(q) ~ 450), its
# evaluations 3-34 s there (13 min of a 14 min solve)
RUNAWAY_STOP = 1e5
RUNAWAY_SIGMA_STOP = 1e12
RAN_OFF_PAST = "ran off past q = "  # (the message of an iteration stopped there)
# a lambda = 0 point that stalls at beta sqrt(q) >= RUNAWAY_NEAR x the runaway bound says it may be a runaway (the
# default problem's direct model at alpha = 0.2525 stalled at beta sqrt(q) = 11.9, 9x the teacher's logit scale, its
# lambda > 0 points growing as lambda falls; the stalls of three random lambda = 0 sweeps sat at 0.97-3.3x)
RUNAWAY_NEAR = 0.5
GH_ORDER = 16  # default Gauss-Hermite order of the T = 2 channel at beta = beta0 = 1 (channel_setup)
FP_STEP = 0.02  # central-difference step in y of the map's Jacobian for the fixed-point error (fixed_point_errors)
# what a solve of the map may raise where it cannot be evaluated (a re-solve that raises is reported or skipped,
# not raised): FloatingPointError (np.errstate raise), OverflowError (math.exp far out), ValueError (with its
# subclasses ParameterError and np.linalg.LinAlgError)
_SOLVE_ERRORS = (ArithmeticError, ValueError)


def unknown_option(name: str) -> ParameterError:
    """A keyword the state evolution does not take: name it, list those it takes, and say which was meant."""
    import difflib

    known = [n for n in inspect.signature(StateEvolution.__init__).parameters if n not in ("self", "problem", "d")]
    if name in ("order", "gh_order", "quadrature_order"):
        hint = "; the Gauss-Hermite order (the CLI's --order) is channel_options={'order': N}"
    else:
        close = difflib.get_close_matches(name, known, n=1) or [k for k in known if name.startswith(k)]
        hint = f"; did you mean {close[0]!r}?" if close else ""
    return ParameterError(name, f"is not an option of the state evolution (its options: {', '.join(known)}){hint}")


def _check_init(init: Any) -> None:
    """A warm start is None, an SEResult or the overlaps (q, m, Sigma): three numbers, q >= 0, Sigma >= 0 (a point's
    own x, e.g. an interpolating point's Sigma = inf, is accepted: the phases that do not iterate ignore it)."""
    if init is None or isinstance(init, SEResult):
        return
    try:
        x = np.asarray(init, dtype=float) if not isinstance(init, (str, bytes)) else np.array([])
    except (TypeError, ValueError):
        x = np.array([])
    if not (x.shape == (3,) and not np.any(np.isnan(x)) and x[0] >= 0 and x[2] >= 0):
        raise ParameterError("init", f"must be None, an SEResult or (q, m, sigma): three numbers, q >= 0, sigma >= 0 "
                             f"(got {init!r:.60})")


def _alphas(alphas: Any) -> list[float]:
    """The alphas of a learning curve: a list / array of numbers, or one number (a one-point curve)."""
    if isinstance(alphas, (str, bytes)):
        raise ParameterError("alpha", f"must be a number or a list of numbers (got {alphas!r:.60}); the CLI's "
                             "'a,b,c' and 'start:stop:num' are strings of the shell, here write [a, b, c] or "
                             "numpy.geomspace(start, stop, num)")
    if isinstance(alphas, Iterable):
        return [validate_alpha(a) for a in alphas]
    return [validate_alpha(alphas)]


class _WarmStart(np.ndarray):
    """(q, m, sigma) of a warm start (learning_curve's extrapolated point) with ``_secant_pairs``, the last secant
    pairs of the solve it came from; anywhere else it is the plain array."""

    _secant_pairs = None


def _warm_start(x: np.ndarray, pairs) -> np.ndarray:
    out = np.array(x, dtype=float).view(_WarmStart)
    out._secant_pairs = pairs
    return out


def _recent_pairs(prior, pairs, keep: int):
    """The last ``keep`` secant pairs (dY, dF), each (3, k), of ``prior`` (or None) followed by ``pairs``."""
    if prior is not None and pairs[0].shape[1] < keep:
        pairs = tuple(np.hstack([a, b]) for a, b in zip(prior, pairs, strict=True))
    return tuple(p[:, p.shape[1] - min(keep, p.shape[1]):] for p in pairs)


@dataclass
class SEResult:
    """A state-evolution point (d -> infinity at fixed alpha = n/d^2). Field names follow the ``theory --json``
    contract; every field is a plain float / int / bool / str (``to_dict()`` is JSON-ready). Normalisations
    (THEORY.md, docs/user-guide/theory.md):

    * ``alpha`` = n/d^2; ``alpha_bar`` = alpha (T^2 + T - 2)/2, the effective measurements per d^2 (2 alpha at T = 2).
    * order parameters: ``q`` = (1/d) Tr S_hat^2, ``m`` = (1/d) Tr S_hat S0, ``sigma`` = Sigma (the response);
      conjugates ``q_hat``, ``m_hat``, ``sigma_hat``. ``delta`` = sqrt(q_hat)/m_hat and ``eps`` = 2 lambda/m_hat
      are the spectral denoiser's effective noise and threshold (S_hat = (m_hat/sigma_hat) (S0 + delta Z - eps)_+,
      Z a GOE matrix): ``delta`` is this *effective spectral* delta, not the label noise Delta (the problem's
      ``noise``).
    * errors per sequence, summed over the T^2 entries of the attention matrix: ``test_error`` against fresh noisy
      labels, ``test_error_clean`` against the clean teacher softmax, ``train_error`` at the minimiser;
      ``objective`` = objective/d^2 = alpha train_error + lambda (1/d) Tr S_hat; ``mse`` = (1/d)||S_hat - S0||_F^2
      = Q0 - 2m + q; ``rank`` = the fraction of non-zero eigenvalues of S_hat.
    * the solve: ``converged``, ``iterations``, ``residual`` (max relative |F(x) - x|), ``seconds``, ``phase``
      ("regular", "zero": S_hat = 0, "interpolating": lambda -> 0+ below the interpolation threshold, where
      ``sigma`` is inf, also the noiseless perfect-recovery point; "failed": no answer, every value nan, with the
      reason in ``message``: the lambda = 0 refusal without a minimiser, a map that could not be evaluated),
      ``message`` (why, where not converged), ``errors`` (quadrature error estimates of the
      observables, same units; ``fixed_point_<obs>`` for the fixed point's own) and ``quadrature`` (the rule).

    ``repr`` shows the key observables and the solve; the fields, ``to_dict()`` and ``dataclasses.asdict`` have
    everything.
    """

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
    # the channel rule of the reported point, e.g. "gh16", "gh24" (order raised), "qmc4x2^14", or "qmc4x2^12+stein"
    # (T >= 3: re-solved with the Stein forms of m_hat, sigma_hat where the prox jumps)
    quadrature: str = ""
    # not fields (to_dict, repr and == do not see them; dataclasses.replace drops them): the cold map's residual at a
    # warm-started point that fails its check, set by _solve_regular_staged on an unconverged point (a QMC point
    # is then re-solved on the cold map, _cold_gap_resolve); the last secant pairs (_staged) are set the same way.
    # ClassVar: annotated plainly it was a field, and every JSON record and stored curve carried "_cold_gap"
    _cold_gap: ClassVar[float | None] = None
    # the stop message of an iteration that ran off past the runaway stops (lambda = 0), set by _ran_off; "" else.
    # What _solve_regular and _stein_resolve decide on (before: the message's prefix, which any note could disturb)
    _stopped: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __repr__(self) -> str:
        # short: the dataclass repr was a screenful (every field, the errors dict, np.float64(...) wrappers)
        def num(v: Any) -> str:
            return f"{float(v):.6g}" if isinstance(v, (float, np.floating)) else repr(v)

        keys = ("alpha", "test_error", "test_error_clean", "train_error", "mse", "q", "m", "sigma", "rank")
        body = ", ".join(f"{k}={num(getattr(self, k))}" for k in keys)
        solve = (f"phase={self.phase!r}, converged={bool(self.converged)}, iterations={int(self.iterations)}, "
                 f"residual={float(self.residual):.2g}")
        extra = f", quadrature={self.quadrature!r}" if self.quadrature else ""
        extra += f", message={self.message[:60]!r}{'...' if len(self.message) > 60 else ''}" if self.message else ""
        return f"SEResult({body}, {solve}{extra})"

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
    anderson : int
        Anderson memory; ``max_step`` caps a step in log coordinates.
    stall, floor_factor : int, float
        stop after ``stall`` iterations without a new best residual; such a point still counts as
        converged when its residual is within ``floor_factor`` times the relative quadrature error of
        the conjugates (the map's own noise floor; see docs/theory/state_evolution.md) and below
        ``max_floor``.
    channel_options : dict
        passed to :class:`SoftmaxChannel` (quadrature order, QMC points ``qmc_log2`` and ``replicas``: the
        accuracy knob; the reported ``errors`` are the quadrature error estimates of this rule).
    coarse_options, coarse_tol : dict or None, float or None
        the iteration first runs with cheaper maps until its residual is below ``coarse_tol``, then continues
        with the accurate map from there (Anderson seeded with the cheap stage's secant pairs);
        ``coarse_options=False`` gives the single-stage solve. QMC rules (T >= 3 or output noise): a cheaper
        rule (default 2 replicas of 2^(qmc_log2 - 3) points, ``coarse_options`` overrides), ``coarse_tol``
        default 1e-3. Gauss-Hermite rules (T = 2): the accurate channel rule with warm-started proxes and
        the fixed spectral rule (``coarse_spectral_nodes`` points per panel, ``denoisers._fixed_integrals``),
        ``coarse_tol`` default max(0.3 tol, 1e-9); before it, on cold starts only, a pre stage at half the
        Gauss-Hermite order (``PRE_GH_FRACTION``) until ``pre_tol`` (``pre_tol=0`` skips it). The last
        Gauss-Hermite stage iterates the cold documented map; the point reported is the one it evaluated last.
    root_fallback : bool
        when the Anderson iteration fails (and the point is not within the quadrature floor), try MINPACK
        hybr on F(y) - y from the best and from the starting point (needed just above the zero phase).
    branch_switch, rough_options : float or None, dict or None
        T = 2 Gauss-Hermite rules: where the solved point's cold map has a ``branch_share`` (the share of
        E||g||^2 that depends on the choice between two distinct prox minima, ``ChannelMoments``) above
        ``branch_switch`` (default 1e-3; None disables), the Gauss-Hermite fixed point is not reliable (the
        integrand jumps across the surface where the prox's global minimiser switches basin, and a few heavy
        nodes decide where the map lands); the point is then re-solved from there with the QMC rule
        ``rough_options`` (default 4 scrambled replicas of 2^14 Sobol' points), coarse stage warm, accurate
        stage cold, stopped once the residual is below ``floor_stop`` (0.1) times the QMC rule's own relative
        error estimate of the conjugates (reported as such in ``message``). docs/theory/state_evolution.md.
        T >= 3 (QMC, Jacobian forms of m_hat, sigma_hat by default): where the Jacobian forms' fixed point has a
        ``branch_share`` above ``branch_switch``, those forms drop the surface terms of the prox's jumps and the
        point is biased (up to 0.037 in the test error at T = 3, lambda = 1e-4); it is re-solved from there with
        the Stein forms (same rule), and that point is reported (``quadrature`` "qmcRx2^L+stein", ``message``
        says so); where the Stein re-solve does not converge, the Jacobian point is kept and ``message`` says
        why. An explicit ``channel_options={"conjugates": ...}`` or ``branch_switch=None`` turns this off.
        docs/theory/state_evolution.md, "T >= 3: the Stein re-solve".
    fixed_point_errors : bool or None
        QMC points: add the quadrature error of the fixed point itself to ``errors`` (``fixed_point_<observable>``,
        ``map_spectral_radius``, ``fixed_point_amplification``): the map's quadrature error propagated through
        (I - J)^-1 (:meth:`_add_fixed_point_errors`; 6 more map evaluations a point). None (default): only for
        sharp channels, max(beta, beta0) > 1, where the fixed point is ill-conditioned (rho(J) ~0.9 at beta = 2).
    accuracy, max_order : float or None, int
        Gauss-Hermite points (T = 2) report the fixed point's own quadrature error, ``fixed_point_<obs>`` in
        ``errors``: the difference to the fixed point re-solved at ``order_low`` = 0.75 x order (an error size; the
        per-evaluation estimates ``test_error``, ``channel_*`` miss the fixed point's amplification of the map's
        error). Where ``fixed_point_test_error`` exceeds ``accuracy`` (default 1e-3; None: never), the point is
        re-solved at 1.5x the order, repeatedly up to ``max_order`` (default 54), each estimate then being the
        difference to the previous order; ``quadrature`` and ``message`` say so. ``fixed_point_errors=False`` turns
        both off. docs/theory/state_evolution.md, "Quadrature order".
    warm_start : bool
        channel evaluations of the cheaper stages (and every one with QMC rules) start each node's Newton prox
        at the minimiser of the previous evaluation of the same stage (``SoftmaxChannel.moments(warm=...)``),
        and the spectral cut point at the previous one (``matrix_update(warm=...)``); a solve is still
        deterministic (the warm states are reset at the start of each solve). The stages that a later stage
        refines skip the T = 2 start pool's fixed starts where a warm branch is known
        (``moments(refresh_pool=False)``); the stage that decides the answer is cold or refreshes them.
    """

    # the two-order fixed-point error and the raised order re-solve with plain StateEvolution solvers; subclasses
    # with another matrix side (theory.scaling) turn them off
    _order_checks = True

    def __init__(
        self,
        problem: Problem,
        d: int | None = None,
        tol: float = 1e-10,
        max_iter: int = 400,
        damping: float = 0.7,
        anderson: int = 5,
        max_step: float = 1.0,
        stall: int = 25,
        floor_factor: float = 10.0,
        max_floor: float = 1e-3,
        channel_options: dict | None = None,
        coarse_options: dict | bool | None = None,
        coarse_tol: float | None = None,
        coarse_spectral_nodes: int | None = 16,
        pre_tol: float = 3e-3,
        warm_start: bool = True,
        root_fallback: bool = True,
        branch_switch: float | None = BRANCH_SWITCH,
        rough_options: dict | None = None,
        fixed_point_errors: bool | None = None,
        accuracy: float | None = 1e-3,
        max_order: int = 54,
        **unknown: Any,
    ):
        # every argument is checked before any work, each bad one a ParameterError naming it: a problem that is not
        # a Problem was an AttributeError, tolerance= a TypeError, tol='a' a TypeError and max_iter=2.5 accepted;
        # tol = nan or -1 used to give "converged" points, accuracy = 0 raised the order to its maximum everywhere
        if unknown:
            raise unknown_option(sorted(unknown)[0])
        validate_problem(problem)
        tol = validate_number("tol", tol, 0.0)
        max_iter = validate_integer("max_iter", max_iter, 1)
        damping = validate_number("damping", damping, 0.0, upper=1.0)
        anderson = validate_integer("anderson", anderson, 0)
        max_step = validate_number("max_step", max_step, 0.0)
        stall = validate_integer("stall", stall, 1)
        floor_factor = validate_number("floor_factor", floor_factor, 0.0, closed=True)
        max_floor = validate_number("max_floor", max_floor, 0.0, closed=True)
        coarse_tol = validate_number("coarse_tol", coarse_tol, 0.0, none=True)
        if coarse_spectral_nodes is not None:
            coarse_spectral_nodes = validate_integer("coarse_spectral_nodes", coarse_spectral_nodes, 1)
        pre_tol = validate_number("pre_tol", pre_tol, 0.0, closed=True)
        branch_switch = validate_number("branch_switch", branch_switch, 0.0, closed=True, none=True)
        accuracy = validate_number("accuracy", accuracy, 0.0, none=True)
        max_order = validate_integer("max_order", max_order, 2)
        for name, value in (("channel_options", channel_options), ("rough_options", rough_options),
                            ("coarse_options", coarse_options)):
            if not (value is None or isinstance(value, dict) or (name == "coarse_options" and isinstance(value, bool))):
                also = " or a bool" if name == "coarse_options" else ""
                raise ParameterError(name, f"must be a dict of channel options{also} or None (got {value!r:.60})")
            if isinstance(value, dict):
                check_channel_options(value, name)
        if coarse_options is True:  # (was update(True)'s TypeError): the default cheaper stages
            coarse_options = None
        self.problem = problem
        self.measure = problem.task.target.measure(d)
        self.q0 = self.measure.q0
        _warn_degenerate(problem, self.q0, channel_options)
        self.tol = tol
        self.max_iter = max_iter
        self.damping = damping
        self.anderson = anderson
        self.max_step = max_step
        self.stall = stall
        self.floor_factor = floor_factor
        self.max_floor = max_floor
        task = problem.task
        self.error_offset = task.tokens * task.noise_out if task.task == "seq2seq" else 0.0
        params, options = channel_setup(problem, self.q0, channel_options)
        # iterations do not need quadrature error estimates; the final evaluation (same rule) does
        self.channel = SoftmaxChannel(params, **{**options, "estimate_error": False})
        self.channel_final = SoftmaxChannel(params, **{**options, "estimate_error": True})
        # Gauss-Hermite: the final rule's second (error-estimate) panel alone
        self.channel_low = None
        if self.channel_final.rule == "gh" and len(self.channel_final.panels) > 1:
            self.channel_low = SoftmaxChannel(
                params, **{**options, "order": self.channel_final.order_low, "estimate_error": False})
        self._qmc = self.channel.rule == "qmc"
        # QMC: the coarse rule's own error (~1e-3); GH: the coarse stage differs only by its spectral rule (~1e-7)
        self.coarse_tol = float(coarse_tol) if coarse_tol is not None else 1e-3 if self._qmc else max(0.3 * tol, 1e-9)
        self.root_fallback = validate_flag("root_fallback", root_fallback)
        self.warm_start = validate_flag("warm_start", warm_start)
        # T = 2 Gauss-Hermite: a QMC rule for the points where the prox's basin switch makes GH unreliable
        self.branch_switch = None if branch_switch is None or self._qmc else float(branch_switch)
        self.rough_options = {**ROUGH_QMC, **(rough_options or {})}
        self._rough: StateEvolution | None = None
        # T = 2 Gauss-Hermite with noise-dominated labels (the user chose neither the rule nor the conjugates' form):
        # solved by the QMC rule with the Stein forms (_noise_solver)
        user = channel_options or {}
        self._noisy = (not self._qmc and "rule" not in user and "conjugates" not in user
                       and problem.task.noise / 2 >= NOISE_STEIN * self.q0)
        self._noise: StateEvolution | None = None
        self._lam_levels = LAM_LEVELS  # decades of the continuation in lambda left to this solver (_lam_continuation)
        # T = 2 Gauss-Hermite with the Stein forms by default: a failed cold start is retried from the Jacobian
        # forms' fixed point (_jacobian_start)
        self._forms_start = not self._qmc and self.channel.conjugates == "stein" and "conjugates" not in user
        self._jacobian: StateEvolution | None = None
        # T >= 3 (QMC with the Jacobian forms by default): where the Jacobian fixed point's branch share exceeds
        # this, the point is re-solved with the Stein forms from there (_stein_resolve); None: never. Subclasses with
        # another matrix side (_order_checks False) keep their own solve.
        self.stein_switch = (float(branch_switch) if branch_switch is not None and self._qmc and self._order_checks
                             and self.channel.conjugates == "jacobian" and "conjugates" not in user else None)
        self._stein: StateEvolution | None = None
        self._stein_cold: StateEvolution | None = None
        self._cold_qmc: StateEvolution | None = None  # the cold-map re-solve of a QMC point (_cold_gap_resolve)
        self._orders: dict = {}  # Gauss-Hermite solvers at other orders (fixed-point error, raised order)
        # secant pairs of the last stage of the last solve, and those to seed the next solve's first stage with:
        # a neighbouring order's map has nearly the same Jacobian (a re-solve from the answer then takes ~2 steps)
        self._pairs_out = None
        self._prior_in = None
        self._estimate_at_point = True  # the low-order comparison solve needs no per-evaluation estimate
        # the low-order comparison solve: its warm stages' fixed point suffices (_solve_regular_staged), and its
        # first channel evaluation, at the point, is the one the accurate solve's error estimate made (_seed_in)
        self._estimate_only = False
        self._low_seed = None
        self._seed_in = None
        self._channel_options = dict(channel_options or {})
        self.d = d
        self.accuracy = None if accuracy is None else float(accuracy)
        self.max_order = int(max_order)
        # (the keyword arguments of the solvers built from this one: the QMC re-solve, other orders)
        self._solver_args = dict(tol=tol, max_iter=max_iter, damping=damping, anderson=anderson, max_step=max_step,
                                 floor_factor=floor_factor, max_floor=max_floor)
        # QMC re-solve of a rough point (set on the instance that does it): cold accurate stage, stop at a
        # residual below this fraction of the rule's relative error estimate
        self._cold_accurate = False
        self._floor_stop = 0.0
        self._quadrature = (f"qmc{self.channel.replicas}x2^{self.channel.qmc_log2}" if self._qmc
                            else f"gh{self.channel.order}")
        self.channel_coarse = None
        if coarse_options is not False:
            fine = self.channel
            if self._qmc:
                coarse = {"qmc_log2": max(6, fine.qmc_log2 - 3), "replicas": 2}
            else:
                coarse = {"order": max(4, int(round(COARSE_GH_FRACTION * fine.order)))}
            coarse.update(coarse_options or {})
            self.channel_coarse = SoftmaxChannel(params, **{**options, **coarse, "estimate_error": False})
        # Gauss-Hermite: a first stage at half the order (through the slow start of a cold solve)
        self.channel_pre = None
        self.pre_tol = float(pre_tol)
        # Gauss-Hermite converges root-exponentially in the distance ~pi/beta of the softmax's poles, so the
        # nodes per dimension needed for a given accuracy grow like sharp^2 while the accurate order grows like
        # sharp: the pre stage keeps half the order at sharp = 1 and is dropped once it would reach the
        # accurate order (beta = beta0 = 2: the order-12 pre stage led cold solves into spurious fixed points
        # of the order-24 map, docs/theory/state_evolution.md, "beta = beta0 = 2")
        self.sharp = max(1.0, problem.student.beta, problem.task.beta0)
        pre_order = max(4, int(round(PRE_GH_FRACTION * self.channel.order * self.sharp))) if not self._qmc else 0
        if not self._qmc and coarse_options is not False and pre_tol > 0 and pre_order < self.channel.order:
            self.channel_pre = SoftmaxChannel(params, **{**options, "order": pre_order, "estimate_error": False})
        self.coarse_spectral_nodes = coarse_spectral_nodes
        self._spectral_nodes: int | None = None  # fixed spectral rule of the current stage (None: adaptive)
        self._spectral_warm: dict | None = None  # warm start of the spectral cut point within a solve
        self._stage: tuple[SoftmaxChannel, dict | None] = (self.channel, None)
        self._warm_fine: dict | None = None
        # False in the stages that a later stage of the same solve refines: their warm proxes follow their
        # branches without rerunning the T = 2 pool's fixed starts (SoftmaxChannel.moments(refresh_pool=...))
        self._refresh_pool = True
        self._inter_abar: float | None = None
        # None: propagate the quadrature errors to the fixed point for sharp channels; True / False: always / never
        self.fixed_point_errors = validate_flag("fixed_point_errors", fixed_point_errors, none=True)

    @property
    def channel_options(self) -> dict:
        """The ``channel_options`` the solver was built with (its rule: those over the problem's defaults)."""
        return dict(self._channel_options)

    @property
    def quadrature(self) -> str:
        """Name of the solver's own channel rule, e.g. "gh16" (a point's ``quadrature`` can differ)."""
        return self._quadrature

    # -------------------------------------------------------------------------------------------
    def _map(self, alpha: float, x: np.ndarray, final: bool = False, cond_var: float | None = None):
        q, m, sigma = x
        if final:  # cold: the documented map, also after warm-started iterations
            ch = self.channel_final.moments(alpha, q, m, sigma, cond_var=cond_var)
        else:
            channel, warm = self._stage
            ch = self._seeded(alpha, x, channel, warm)
            if ch is None:
                ch = channel.moments(alpha, q, m, sigma, warm=warm, refresh_pool=self._refresh_pool,
                                     cond_var=cond_var)
        nodes, swarm = (None, None) if final else (self._spectral_nodes, self._spectral_warm)
        ms = matrix_update(self.problem, self.measure, ch.q_hat, ch.m_hat, ch.sigma_hat, fixed_nodes=nodes,
                           warm=swarm)
        return np.array([ms.q, ms.m, ms.sigma]), ch, ms

    def _seeded(self, alpha: float, x: np.ndarray, channel: SoftmaxChannel, warm: dict | None):
        """The channel moments handed over in ``_seed_in`` (by the accurate solve, which evaluated the same rule at
        the same point with a fresh warm dict: bit-identical to what this call would compute) if this is that
        evaluation: the first of the solve, same alpha, same rule, x equal to 1e-13 (the y <-> x round trip).
        The seed is consumed by the first evaluation either way; its warm dict is adopted with it."""
        seed, self._seed_in = self._seed_in, None
        if seed is None or warm is None or warm:
            return None
        s_alpha, s_x, s_ch, s_warm, s_rule = seed
        if s_alpha != alpha or s_rule != _rule_key(channel) or not np.allclose(x, s_x, rtol=1e-13, atol=0.0):
            return None
        warm.update(s_warm)
        return s_ch

    # the iteration runs in unconstrained coordinates y = (log q, atanh(m / sqrt(q Qz)), log Sigma), in
    # which every iterate is admissible (q > 0, |m| < sqrt(q Qz), Sigma > 0) and residuals are relative.
    def _to_y(self, x: np.ndarray) -> np.ndarray:
        q, m, sigma = x
        qz = self.q0 + self.problem.task.noise / 2
        rho = np.clip(m / math.sqrt(q * qz), -1 + 1e-15, 1 - 1e-15)
        return np.array([math.log(q), math.atanh(rho), math.log(sigma)])

    def _to_x(self, y: np.ndarray) -> np.ndarray:
        qz = self.q0 + self.problem.task.noise / 2
        q = math.exp(y[0])
        return np.array([q, math.tanh(y[1]) * math.sqrt(q * qz), math.exp(y[2])])

    def initial_guess(self) -> np.ndarray:
        return np.array([0.5 * self.q0, 0.4 * self.q0, 1.0])

    def solve(self, alpha: float, init: np.ndarray | SEResult | None = None) -> SEResult:
        """Solve the SE at one alpha (warm start from ``init``, an SEResult or (q, m, sigma), if given)."""
        alpha = validate_alpha(alpha)
        _check_init(init)
        t0 = time.perf_counter()
        # the channel's prox warnings wait for the answer: those of iterates on the way (a re-solve's excursion, a
        # stalled start continued from elsewhere) said nothing about a converged point; its own evaluation's do
        try:
            with _recording() as caught:
                res = self._solve_point(alpha, init)
        except BaseException:  # (a solve that raises keeps every warning it gave)
            _reissue(caught, convergence=True)
            raise
        _reissue_prox(caught, res)
        res.seconds = time.perf_counter() - t0
        res.quadrature = res.quadrature or self._quadrature
        if not res.converged:
            warnings.warn(
                f"state evolution did not converge at alpha={alpha:g}: {res.message}", ConvergenceWarning,
                stacklevel=2,
            )
        return res

    def _solve_point(self, alpha: float, init: np.ndarray | SEResult | None) -> SEResult:
        """:meth:`solve`'s body (``seconds``, ``quadrature`` and the warnings are set there)."""
        lam = self.problem.student.lam
        abar = alpha_bar(alpha, self.problem.task.tokens)
        # lambda -> 0+ interpolating phase (narrow students: denoisers.solve_narrow_interpolating_phase); seq2lab's
        # output noise leaves the simplex (no interpolation), seq2seq's only adds T Delta_out (error_offset)
        fits = lam == 0.0 and (self.problem.task.noise_out == 0.0 or self.problem.task.task == "seq2seq")
        if fits and self._recovers(abar):
            res = self._perfect_recovery(alpha)
        elif fits and abar < self.interpolation_alpha_bar():
            res = self._solve_interpolating(alpha)
        elif self.lacks_minimiser(alpha):
            # the lambda = 0 SE ran for many minutes on failing proxes without an answer there (alpha = 0.05:
            # stopped after 12.7 min at a 17 GB peak)
            res = self._failed(alpha, 0, float("nan"), (
                f"lambda = 0 with seq2lab output noise below the interpolation threshold (alpha_bar {abar:.4g} < "
                f"{self.interpolation_alpha_bar():.4g}): the ERM has no minimiser (noisy labels outside the simplex "
                "drive the logits to infinity); use lambda > 0"))
        else:
            res = self._solve_regular(alpha, init)
            # a cold start that failed gets further starts (not in subclasses with another matrix side,
            # _order_checks False: the scaling routes fix eps by a rule)
            rescue = init is None and self._order_checks
            if rescue and not res.converged and res.phase == "regular" and res.residual > LAM_FAR and self._lam_levels:
                res = self._lam_continuation(alpha, res)
            if rescue and not res.converged and _regular(res) and self.problem.task.tokens == 2 and not self._noisy:
                # a T = 2 cold start that still stalls can sit by a small-norm point beside a large-norm branch,
                # as with large logit noise (where _solve_regular tries these starts itself): T = 2, output noise
                # 0.37, alpha = 3.03 stalled at q = 11 (residual 8.5e-3, objective 4.35) beside q = 1469 (4.20);
                # at lambda = 0 that branch can be a runaway (refused below: no finite minimiser)
                res = self._scaled_starts(alpha, self, res, zero_test=False)
            self._add_rounding_errors(res)
            if lam == 0.0:
                _refuse_runaway(res, self.problem.student.beta, self._runaway_logit())
                _note_near_runaway(res, self.problem.student.beta, self._runaway_logit())
        return res

    def _lam_continuation(self, alpha: float, stalled: SEResult) -> SEResult:
        """A cold start that stalled far from a fixed point (residual > LAM_FAR): solve the point at LAM_STEP x
        lambda (at LAM_ZERO_START for lambda = 0; cold, and by continuation itself where that stalls too, up to
        LAM_LEVELS decades up) and solve again from that fixed point. Returns the new point if it converged
        (``message`` says so), else ``stalled``; the iterations of every solve are counted (the hop from lambda = 0
        to LAM_ZERO_START does not count as one of the LAM_LEVELS). A base point in the zero
        phase (S_hat = 0 at the larger lambda) is no start. At lambda = 0 the answer is still a lambda = 0 fixed point
        (the one the lambda -> 0+ branch leads to), and a start that runs off is refused by :meth:`solve`."""
        lam = self.problem.student.lam
        lam_above = LAM_STEP * lam if lam > 0.0 else LAM_ZERO_START
        with _inner_solver(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            above = StateEvolution(self.problem.replace_student(lam=lam_above), d=self.d,
                                   channel_options=self._channel_options, warm_start=self.warm_start,
                                   fixed_point_errors=False, accuracy=None, stall=self.stall, **self._solver_args)
            above._lam_levels = self._lam_levels - (1 if lam > 0.0 else 0)  # (the hop from 0 is not a decade)
            try:
                base = above.solve(alpha)
            except _SOLVE_ERRORS:
                base = None
        spent = stalled.iterations + (base.iterations if base is not None else 0)
        if base is None or not (base.converged and base.phase == "regular"):
            stalled.iterations = spent
            return stalled
        try:
            again = self._solve_regular(alpha, base.x)
        except _SOLVE_ERRORS:
            stalled.iterations = spent
            return stalled
        again.iterations += spent
        if not again.converged:
            stalled.iterations = again.iterations
            return stalled
        # (not NOTE_STALLED_START, which marks a large-norm branch for simulate --theory: this point is the one the
        # lambda -> lambda_above branch leads to, not a start scaled up from the stall)
        _add_note(again, f"cold start stalled (q = {stalled.q:.3g}, residual {stalled.residual:.1e}), continued "
                         f"from the fixed point at lambda = {lam_above:.3g}")
        return again

    def _g(self, alpha: float, y: np.ndarray):
        """Fixed-point map in y coordinates; None where it cannot be evaluated (Shat = 0 exactly, ...)."""
        x = self._to_x(y)
        fx, ch, ms = self._map(alpha, x, cond_var=_cond_var(y))
        if not np.all(np.isfinite(fx)) or fx[0] < 0 or fx[2] < 0:
            raise FloatingPointError(f"matrix side returned q={fx[0]:g}, sigma={fx[2]:g}")
        # S_hat = 0 exactly at this iterate (eps above the spectrum): a tiny positive floor keeps the
        # log coordinates finite; a genuine zero fixed point is detected by _zero_phase instead.
        tiny = 1e-30 * self.q0
        fx = np.array([max(fx[0], tiny), fx[1], max(fx[2], tiny)])
        return self._to_y(fx), ch, ms

    def _zero_phase(self, alpha: float) -> SEResult | None:
        """If S_hat = 0 is a fixed point (strong penalty, few samples), return it; else None.

        At x = 0 the prox is the identity (Sigma = 0), and S_hat = 0 is self-consistent iff the
        threshold eps = 2 lambda/m_hat lies above the top edge of rho_delta.
        """
        if self.problem.student.lam == 0 or self.problem.student.model == "direct":
            return None
        x = np.zeros(3)
        if self.problem.student.kappa >= 1:
            # cheap test first: S_hat = 0 needs eps = 2 lambda/m_hat at or above the top edge of rho_delta
            # (matrix_update integrates only the support above eps); the full map below decides
            channel, warm = self._stage
            try:
                c0 = channel.moments(alpha, 0.0, 0.0, 0.0, warm=warm)
            except (ParameterError, FloatingPointError):
                return None
            if c0.q_hat > 0 and c0.m_hat > 0:
                delta, eps = math.sqrt(c0.q_hat) / c0.m_hat, 2.0 * self.problem.student.lam / c0.m_hat
                if eps < FreeConvolution(self.measure, delta).support()[-1][1]:
                    return None
        try:
            fx, ch, ms = self._map(alpha, x)
        except (ParameterError, FloatingPointError):  # channel without a Sigma = 0 limit
            return None
        if fx[0] != 0.0:
            return None
        return self._observables(alpha, x, ch, ms, True, 1, 0.0, "", phase="zero")

    def _solve_regular(self, alpha: float, init, zero_test: bool = True) -> SEResult:
        if self._noisy:
            noisy = self._noise_solver()
            out = noisy._solve_regular(alpha, init, zero_test)
            note = (f"{noisy._quadrature} rule with the Stein forms of m_hat, sigma_hat: logit noise Delta/2 = "
                    f"{self.problem.task.noise / 2:.3g} >= {NOISE_STEIN:g} Q0 (Q0 = {self.q0:.3g})")
            lower = self.problem.task.noise / 10
            if not out.converged and init is None and lower / 2 >= NOISE_STEIN * self.q0:
                # the cold start can oscillate far from the fixed point (Delta = 1e6, docs): continuation in Delta,
                # from the point solved at Delta / 10 (itself by continuation if its cold start fails)
                with _inner_solver():
                    below = StateEvolution(self.problem.with_options(noise=lower), d=self.d,
                                           channel_options=self._channel_options, warm_start=self.warm_start,
                                           fixed_point_errors=self.fixed_point_errors, **self._solver_args)
                base = below._solve_regular(alpha, None, zero_test)
                if base.converged and base.phase == "regular":
                    again = noisy._solve_regular(alpha, base.x, zero_test)
                    again.iterations += out.iterations + base.iterations
                    if again.converged:
                        out = again
                        note += f"; cold start stalled, continued from the fixed point at Delta = {lower:g}"
            if init is None or out.converged:  # (a failed warm start is solved cold by solve_warm)
                out = self._scaled_starts(alpha, noisy, out, zero_test)
            _add_note(out, note)
            return out
        res = self._staged(alpha, init, zero_test)
        if self._forms_start and res.phase == "regular" and not self._tight(res):
            # (a point accepted at the quadrature floor counts as not converged here: lambda = 0, alpha = 0.156 ran
            # off to q ~ 1.6e7, where the map is nearly scale-invariant, and was accepted at residual 9.8e-4)
            res = self._jacobian_start(alpha, init, res)
        res.quadrature = self._quadrature
        if not res.converged and res._stopped:
            # stopped past the runaway stops (lambda = 0): no Stein, cold-map or QMC re-solve from out there (the QMC
            # re-solve of a rough T = 2 point that ran off to q = 5.5e7 ran on to q = 2.7e6, accepted at the
            # quadrature floor and refused as a runaway: 227 s); solve refuses it, after its continuation in lambda
            return res
        share = res.errors.get("branch_share", 0.0)
        if self.stein_switch is not None and _regular(res) and share > self.stein_switch:
            res = self._stein_resolve(alpha, res)
            if res.quadrature != self._quadrature:  # the Stein point (its solver added its own error estimates)
                return res
        if (self._qmc and self._order_checks and not self._cold_accurate and _regular(res) and not res.converged
                and res._cold_gap is not None):
            out = self._cold_gap_resolve(alpha, res)
            if out is not res:  # the cold map's point (its solver added its own error estimates)
                return out
        if self.branch_switch is None or res.phase == "zero" or not share > self.branch_switch:
            if (self._order_checks and not self._qmc and self.fixed_point_errors is not False
                    and self.channel_low is not None):
                self._add_two_order_errors(alpha, res)
                res = self._raise_order(alpha, res)
            elif self._propagate_errors():
                self._add_fixed_point_errors(alpha, res)
            return res
        # T = 2 past the interpolation peak at small lambda: the Gauss-Hermite point is decided by a few heavy
        # nodes on either side of the basin-switching surface; re-solve it with the QMC rule from there
        rough = self._rough_solver()
        start = res.x if _regular(res) else init
        out = rough._solve_regular(alpha, start, zero_test=False)
        out.iterations += res.iterations
        floor = _relative_floor(out, out.errors, "channel_")
        if _regular(out) and not out.residual <= ROUGH_FLOOR_STOP * floor:
            # the accurate stage ran out of iterations (or was accepted at the looser floor test): Anderson can
            # wander on the jumps of a QMC map; a fresh history from its end point usually stops in a few steps
            # (lambda = 1e-4, alpha = 0.23: accepted at residual 8.5e-4 with test error 0.4023; restarted: 10
            # iterations to 3.2e-5, 0.3955)
            again = rough._solve_regular(alpha, out.x, zero_test=False)
            again.iterations += out.iterations
            if again.converged and (not out.converged or again.residual < out.residual):
                _add_note(again, f"restarted from the end point of a first QMC solve (residual {out.residual:.1e})")
                out = again
            else:
                out.iterations = again.iterations
        note = (f"{rough._quadrature} rule: Gauss-Hermite branch share {share:.1e} > {self.branch_switch:g} "
                f"(gh{self.channel.order}: test error {res.test_error:.5f}, residual {res.residual:.1e})")
        if res.message:
            note += f"; Gauss-Hermite: {res.message}"
        _add_note(out, note)
        return out

    def _staged(self, alpha: float, init, zero_test: bool) -> SEResult:
        self._pairs_out = None
        try:
            res = self._solve_regular_staged(alpha, init, zero_test)
            if res.phase == "regular" and res.converged and self._pairs_out is not None and not self._qmc:
                # the last secant pairs of a Gauss-Hermite solve ride along with the result (not a field: to_dict,
                # repr and == do not see them); a warm start from this result seeds Anderson with them
                # (_solve_regular_staged). Not those of a QMC map, whose replica noise (~1e-5 relative) swamps the
                # small late differences: carried to the next point they stalled a warm solve (docs)
                res._secant_pairs = self._pairs_out
            return res
        finally:  # outside a solve, _map is the plain cold map (amp.py uses it)
            self._stage, self._warm_fine, self._spectral_warm = (self.channel, None), None, None

    def _tight(self, res: SEResult) -> bool:
        """Converged to ``tol`` (or, in atanh rho alone, to the spectral rounding of the correlation), not merely
        accepted at a quadrature floor."""
        return bool(res.converged and (res.residual <= self.tol or "correlation_rounding" in res.errors))

    def _add_rounding_errors(self, res: SEResult) -> None:
        """A point converged to the spectral rounding of the correlation (``errors["correlation_rounding"]``, the
        allowance r in atanh rho) is known in atanh rho only to about +-r: add to ``fixed_point_<obs>`` the largest
        change of q, m, mse and the test errors over y +- r (in atanh rho; two test-error evaluations, no prox). Near
        perfect recovery with a discrete target this is what limits the digits (d = 100 power law, T = 2, alpha = 2:
        r = 1.2e-2 at 1 - rho^2 = 7e-9, ~2 % of the test error; MP kappa0 = 0.5, alpha = 2: r = 6e-6)."""
        r = res.errors.get("correlation_rounding")
        if r is None or res.phase != "regular" or not res.converged or "fixed_point_test_error" not in res.errors:
            return
        y = self._to_y(res.x)
        band: dict[str, float] = {}
        for sign in (-1.0, 1.0):
            q, m, _ = self._to_x(y + np.array([0.0, sign * r, 0.0]))
            vals = {"q": q, "m": m, **self._errors_at(q, m)[0]}
            for k, v in vals.items():
                band[k] = max(band.get(k, 0.0), abs(v - getattr(res, k)))
        for k, v in band.items():
            if f"fixed_point_{k}" in res.errors:
                res.errors[f"fixed_point_{k}"] += v

    def _jacobian_start(self, alpha: float, init, failed: SEResult) -> SEResult:
        """The Gauss-Hermite solve with the Stein forms did not converge: it may have run off (lambda = 1e-5,
        alpha = 0.2 cold: residual 1.7e-2 at q ~ 44; lambda = 0, alpha = 0.17 warm: q ~ 2e9 at residual 1e-3, where
        the map is nearly scale-invariant) or only stalled on the jumps of a rough point. Solve the same stages with
        the Jacobian forms (same rule and branch switch, no re-solve), whose map is tamer far from the fixed point,
        and start the Stein forms again from there. Where that start is sound (converged, or stalled below
        FORMS_START like any rough point), the new solve is kept whatever its residual, since a runaway can stall at
        a small relative residual too; else the lower residual wins."""
        if self._jacobian is None:
            self._jacobian = self._forms_solver("jacobian", branch_switch=self.branch_switch, fixed_point_errors=False,
                                                accuracy=None)
        start = self._jacobian._staged(alpha, init, zero_test=False)
        if not _regular(start):
            return failed
        again = self._staged(alpha, start.x, zero_test=False)
        again.iterations += failed.iterations + start.iterations
        note = (f"started again from the Jacobian forms' Gauss-Hermite point (test error {start.test_error:.5f}, "
                f"residual {start.residual:.1e}) after the Stein forms stopped at residual {failed.residual:.1e} "
                f"(q = {failed.q:.3g})")
        _add_note(again, note)
        if again.converged or start.residual <= FORMS_START or not again.residual > failed.residual:
            return again
        failed.iterations = again.iterations
        return failed

    def _forms_solver(self, conjugates: str, **options: Any) -> StateEvolution:
        """This problem's solver (same channel options and tolerances) with the ``conjugates`` form of m_hat and
        sigma_hat given explicitly, so that it takes no forms route of its own: the Jacobian start of a T = 2 Stein
        solve (_jacobian_start), the Stein re-solve of a T >= 3 point (_stein_resolve)."""
        with _inner_solver():
            return StateEvolution(self.problem, d=self.d,
                                  channel_options={**self._channel_options, "conjugates": conjugates},
                                  warm_start=self.warm_start, **self._solver_args, **options)

    def _stein_resolve(self, alpha: float, res: SEResult) -> SEResult:
        """T >= 3: the Jacobian forms' fixed point ``res`` has a branch share above ``stein_switch``: there the
        Jacobian forms drop the surface terms of the prox's jumps (T = 3, lambda = 1e-4, alpha_bar = 0.46: test error
        0.5454 against the Stein forms' 0.5824, which the averaged Moreau envelope follows; docs/theory/
        state_evolution.md, "T >= 3: the Stein re-solve"). Re-solve with the Stein forms (same rule and solver
        settings) from that point, from which their solve converged where cold ones could run off, and return the
        Stein point (``quadrature`` "<rule>+stein"); where it does not converge, return ``res`` with a message."""
        if self._stein is None:
            self._stein = self._forms_solver("stein", stall=self.stall, root_fallback=self.root_fallback,
                                             fixed_point_errors=self.fixed_point_errors)
        share = res.errors["branch_share"]
        why = (f"branch share {share:.1e} > {self.stein_switch:g} at the Jacobian forms' fixed point (test error "
               f"{res.test_error:.5f}, residual {res.residual:.1e})")
        # the re-solves' warnings wait until it is known whether their point is returned: a re-solve that fails can
        # run off (direct model, T = 3, lambda = 0, output noise, alpha = 0.14: to q ~ 2e5, Sigma ~ 1e15), and the
        # prox-residual warnings of its excursion (34, up to 0.38) said nothing about the Jacobian point returned
        out, kept = None, True  # (kept while unknown: a re-solve that raises keeps its warnings)
        try:
            with _recording() as caught:
                out, fail = self._stein_attempts(alpha, res)
            kept = out is not None and out.converged and out.phase == "regular"
        finally:
            _reissue(caught, convergence=kept)
        if kept:
            out.iterations += res.iterations
            note = f"Stein forms of m_hat, sigma_hat: {why}"
            if res.message:
                note += f"; Jacobian forms: {res.message}"
            _add_note(out, note)
            return out
        if out is not None:
            res.iterations += out.iterations
        ran_off = "" if out is None else (self._runaway_of(out) or out._stopped or _drifted_off(out, res))
        if self.problem.student.lam == 0.0 and ran_off:
            # the equations this branch share calls for have no finite fixed point near the Jacobian one: at lambda =
            # 0 a runaway, refused as solve refuses one (T = 4, output noise 0.1, beta = 0.3, alpha = 0.05: the warm
            # Stein re-solve ran to q ~ 1e11; reported converged on the Jacobian forms after 290 s, 2026-12-02)
            res.converged, res._cold_gap = False, None  # (no cold-map re-solve of the Jacobian forms either)
            _add_note(res, f"{NOTE_STEIN_RAN_OFF}{out.q:.3g} at lambda = 0 ({ran_off}) from the Jacobian forms' "
                           f"fixed point, where the {why}: no finite minimiser is reported, as for a runaway; use "
                           f"lambda > 0 ({fail})")
            return res
        note = f"{NOTE_JACOBIAN_KEPT}{why}: the Stein re-solve from it did not converge ({fail})"
        _add_note(res, note)
        return res

    def _stein_attempts(self, alpha: float, res: SEResult) -> tuple[SEResult | None, str]:
        """The Stein re-solves of :meth:`_stein_resolve`: warm from the Jacobian forms' point, then (QMC) on the
        cold map. Returns (the last result, None where the warm one raised and no cold one converged; why the warm
        one failed, with the cold map's reason where that failed too). Iterations of failed cold solves are added
        to ``res``."""
        try:
            out = self._stein._solve_regular(alpha, res.x, zero_test=False)
        except _SOLVE_ERRORS as exc:
            out, fail = None, f"{type(exc).__name__}: {exc}"
        else:
            fail = (out.message or "not converged") if not out.converged else f"phase {out.phase}"
            out.quadrature = f"{self._stein._quadrature}+stein"
        if not (out is not None and out.converged and out.phase == "regular") and self._qmc:
            cold, cold_fail, spent = self._stein_cold_resolve(alpha, res, out, fail)
            if cold is not None:
                out = cold
            else:
                fail += f"; {cold_fail}"
                res.iterations += spent
                far = self._stein_scaled_starts(alpha, res, out)
                if far is not None:
                    out = far
        return out, fail

    def _stein_scaled_starts(self, alpha: float, res: SEResult, warm: SEResult | None) -> SEResult | None:
        """The warm Stein re-solve from the Jacobian forms' point ``res`` stalled (``warm``) and the cold map found
        nothing within COLD_STEIN_SPAN of it: the Stein map may have no fixed point near the Jacobian one. At T = 4,
        output noise 0.48, lambda = 6.4e-3, alpha = 0.35 (docs/theory/state_evolution.md, "A Stein fixed point far
        from the Jacobian forms'") the Stein map raises q by 5-20 % per damped step from the Jacobian point
        (q = 3.04, branch share 0.013) all the way to its fixed point at q = 197 (branch share 1.6), which training
        reaches too (prox from scaled starts). Solve the cold Stein map from the warm end point scaled up
        (:meth:`_scaled_starts`: the lowest objective, its AT in the note). Not at lambda = 0, where such a start can
        run off (the span rule's reason), nor where the warm re-solve itself ran past the span (the cold map is not
        tried there either). Returns the converged point (``quadrature`` set) or None."""
        if (self.problem.student.lam == 0.0 or warm is None or not _regular(warm) or warm.converged
                or not _q_within(warm.q, res.q, COLD_STEIN_SPAN)):
            return None
        out = self._scaled_starts(alpha, self._stein_cold, warm, zero_test=False, stalled=NOTE_STEIN_STALLED)
        if out is warm or not (out.converged and _regular(out)):
            return None
        out.quadrature = f"{self._stein_cold._quadrature}+stein"
        return out

    def _cold_gap_resolve(self, alpha: float, res: SEResult) -> SEResult:
        """A QMC point whose warm-started iteration converged (or stalled far below the gap) but whose cold map misses
        it (``res._cold_gap``, set by :meth:`_solve_regular_staged`; ``message`` COLD_GAP): the warm proxes kept
        minima that the cold map's starts improve on (T = 3, MP kappa0 = 1.419, Delta = 1.076, lambda = 9.5e-3,
        beta = 1.73, beta0 = 2.48, kappa = 2, alpha = 0.797: warm residual 4.7e-14, cold 2.5e-3, branch share 0).
        Iterate the cold map itself from there, as the T = 2 QMC re-solve does (:func:`_cold_map_solve`). Returns the
        cold point (``message`` says so) or ``res`` with why not; every iteration is counted."""
        if self._cold_qmc is None:
            self._cold_qmc = self._qmc_resolver(self._channel_options)
        out, why = None, ""
        try:  # (reissued as in _stein_resolve)
            with _recording() as caught:
                out, why = _cold_map_solve(self._cold_qmc, alpha, res.x, res.q, "warm-started point's")
        finally:
            _reissue(caught, convergence=not why)  # (why is "" for a point returned, or an exception let through)
        if out is None:
            _add_note(res, f"the cold map from it raised {why}")
            return res
        out.iterations += res.iterations
        if not why:
            out.quadrature = self._quadrature
            _add_note(out, f"cold map from the warm-started fixed point ({res.message})")
            return out
        res.iterations = out.iterations
        _add_note(res, f"the cold map from it did not converge ({why})")
        return res

    def _stein_cold_resolve(self, alpha: float, res: SEResult, warm: SEResult | None,
                            warm_fail: str) -> tuple[SEResult | None, str, int]:
        """The warm Stein re-solve of a QMC point failed: where many proxes have two minima, warm-started proxes keep
        the branches they had while the cold map's starts pick others, so the warm fixed point misses the cold map's
        (T = 4, output noise 0.1, Delta = 0.01, beta = 0.3, lambda = 1e-3, alpha = 0.05: branch share 0.2, cold map
        residual 3.3e-3 at the warm fixed point, > 2 min unconverged). Iterate the cold map itself
        (:func:`_cold_map_solve`) from the warm Stein end point, then from the Jacobian forms' point; a point whose q
        is more than COLD_STEIN_SPAN away from the Jacobian forms' is a runaway (lambda = 0) and not accepted, and
        where the warm re-solve itself ran that far the cold map is not tried. At lambda > 0 neither guard applies
        (the penalty bounds q): a point that far is a large-norm branch, and its message says so (NOTE_STEIN_STALLED,
        which ``theory`` and ``simulate --theory`` read as such). ``warm``: the warm re-solve's result
        (None where it raised), ``warm_fail`` why it failed. Returns (the converged point with ``quadrature`` and
        ``iterations`` set, "", 0) or (None, why it failed, the cold solves' iterations)."""
        if self._stein_cold is None:
            self._stein_cold = self._qmc_resolver({**self._channel_options, "conjugates": "stein"})
        warm_end = warm is not None and _regular(warm)
        span = COLD_STEIN_SPAN if self.problem.student.lam == 0.0 else math.inf
        if warm_end and not _q_within(warm.q, res.q, span):
            # the Stein map itself runs off here (lambda = 0 above: the cold map from the Jacobian point ran off
            # too, to q ~ 1.2e4 in 334 s), not a warm/cold branch mismatch
            return None, (f"cold map not tried: the warm re-solve ran off to q = {warm.q:.3g} (Jacobian forms' "
                          f"q = {res.q:.3g})"), 0
        iterations, why = 0, "no start"
        for x0 in ([warm.x] if warm_end else []) + [res.x]:
            out, why = _cold_map_solve(self._stein_cold, alpha, x0, res.q, "Jacobian forms'", span)
            if out is None:
                continue
            iterations += out.iterations
            if not why:
                out.iterations = iterations + (warm.iterations if warm is not None else 0)
                out.quadrature = f"{self._stein_cold._quadrature}+stein"
                _add_note(out, f"cold map (the warm Stein re-solve did not converge: {warm_fail})")
                if not _q_within(out.q, res.q, COLD_STEIN_SPAN):  # (lambda > 0) a large-norm branch: say so
                    at = self._rs_at(alpha, out)
                    _add_note(out, f"{NOTE_STEIN_STALLED}{warm.q if warm_end else res.q:.3g}, converged on the cold "
                                   f"map at q = {out.q:.3g}, {out.q / res.q:.3g}x the Jacobian forms' q = {res.q:.3g} "
                                   f"(objective {out.objective:.5g} against {res.objective:.5g}, AT = {at:.3g}"
                                   f"{': RS-unstable' if not at < 1.0 else ''})")
                return out, "", 0
        return None, f"cold map: {why}", iterations

    def _propagate_errors(self) -> bool:
        # QMC points (Gauss-Hermite points compare two orders instead, _add_two_order_errors). Default: on for
        # sharp channels (max(beta, beta0) > 1), where the fixed point is ill-conditioned and the rules are rough;
        # off at beta = beta0 = 1 (6 more map evaluations per point; same values either way)
        return bool(self.fixed_point_errors) or (self.fixed_point_errors is None and self.sharp > 1)

    def _order_solver(self, order: int, tol: float | None = None) -> StateEvolution:
        """The same Gauss-Hermite solver at another order (no branch switch, no error estimates of its own)."""
        key = (order, tol)
        if key not in self._orders:
            d, kw = self.d, self._solver_args
            kw = {**kw, "tol": tol if tol is not None else kw["tol"]}
            with _inner_solver():
                self._orders[key] = StateEvolution(
                    self.problem, d=d, channel_options={**self.channel_options, "order": order},
                    branch_switch=None, fixed_point_errors=False, accuracy=None, root_fallback=False, pre_tol=0.0,
                    warm_start=self.warm_start, **kw)
        return self._orders[key]

    def _low_solver(self) -> StateEvolution:
        """The solver at the error-estimate order (``channel_final.order_low``), for the fixed point's error. It
        stops after its warm stages (``_estimate_only``: the fixed spectral rule, then 1-2 evaluations with the
        adaptive one, to tol 1e-7; the fixed point is within the warm proxes' ~1e-9 of the cold map's, and the
        estimates equal those of fully converged solves at both orders to 1e-8), skips its own per-evaluation
        error estimate, and takes its first channel evaluation from the accurate solve's estimate at the point
        (``_seed_in``)."""
        low = self._order_solver(self.channel_final.order_low, max(self.tol, 1e-7))
        low._estimate_at_point = False
        low._estimate_only = True
        return low

    def _raise_order(self, alpha: float, res: SEResult) -> SEResult:
        """Where the fixed point's error estimate of the test error exceeds ``accuracy``, re-solve from the point
        at 1.5x the order, and again, up to ``max_order``; the estimate of a raised point is its difference to the
        previous order's point (plus its own quadrature error). Near the interpolation peak at small lambda the
        map's Jacobian has an eigenvalue ~0.9 and low orders scatter by ~5e-3 (docs/theory/state_evolution.md,
        "Quadrature order")."""
        est = res.errors.get("fixed_point_test_error")
        order, path = self.channel.order, [self.channel.order]
        while (self.accuracy is not None and est is not None and est > self.accuracy
               and int(1.5 * order) <= self.max_order):
            order = int(1.5 * order)
            solver = self._order_solver(order)
            solver._prior_in = self._pairs_out
            try:
                hi = solver._solve_regular(alpha, res.x, zero_test=False)
            except _SOLVE_ERRORS:
                hi = None
            finally:
                solver._prior_in = None  # never carried into another solve (determinism)
            if hi is None or not hi.converged or hi.phase != "regular":
                note = f"order {order} did not converge; kept order {path[-1]}"
                _add_note(res, note)
                return res
            err = _order_difference(hi, res)
            hi.errors.update(err)
            hi.iterations += res.iterations
            path.append(order)
            note = (f"Gauss-Hermite order raised {' -> '.join(map(str, path))}: fixed-point error estimate of "
                    f"the test error {est:.1e} > accuracy {self.accuracy:g}")
            _add_note(hi, note)
            est, res = err["fixed_point_test_error"], hi
        if self.accuracy is not None and est is not None and est > self.accuracy:  # order at its maximum
            note = (f"fixed-point error estimate of the test error {est:.1e} > accuracy {self.accuracy:g} at "
                    f"Gauss-Hermite order {order} (max_order {self.max_order})")
            _add_note(res, note)
        return res

    def _add_two_order_errors(self, alpha: float, res: SEResult) -> None:
        """Add to ``res.errors`` the quadrature error of the Gauss-Hermite fixed point itself.

        The per-evaluation estimates (``test_error``, ``channel_*``: |I(order) - I(order_low)| at the point) miss
        what matters most: the fixed point moves by (I - J)^-1 times the map's error, and the integrand is not
        smooth (prox kinks and basin switches), so the rule converges slowly in the order. Measured against order
        32, they understated the test error's error by 10-400x (docs/theory/state_evolution.md, "Quadrature
        order"). So the point is re-solved at ``order_low`` (0.75 x order) from the answer (warm: a few cheap
        map evaluations), and ``fixed_point_<obs>`` = |obs(order) - obs(order_low)| for obs = q, m, sigma, mse,
        test_error, test_error_clean (the last two plus their own quadrature error at the point): the error of
        the lower rule, so usually above the reported one's (measured against order 32 on a 50-point curve: above
        it at 42 points, within 2.7e-4 of it everywhere, where orders 20-32 scatter by 2.2e-4): an error size, not
        a guaranteed bound. Not added (and said in ``message``) where the low-order solve does not converge.
        """
        if res.phase != "regular" or not res.converged or not np.all(np.isfinite(res.x)):
            return
        solver = self._low_solver()
        solver._prior_in = self._pairs_out
        solver._seed_in, self._low_seed = self._low_seed, None
        try:
            low = solver._solve_regular(alpha, res.x, zero_test=False)
        except _SOLVE_ERRORS as exc:
            low, why = None, str(exc)
        else:
            why = low.message if not low.converged else f"phase {low.phase}"
        finally:
            solver._prior_in = solver._seed_in = None  # never carried into another solve (determinism)
        if low is None or not low.converged or low.phase != "regular":
            note = f"no fixed-point error estimate (order {self.channel_final.order_low}: {why})"
            _add_note(res, note)
            return
        res.errors.update(_order_difference(res, low))

    def _add_fixed_point_errors(self, alpha: float, res: SEResult) -> None:
        """Add to ``res.errors`` the quadrature error of the fixed point itself, linearised.

        The reported quadrature errors (``test_error``, ``channel_*``) are those of the map *at* the point; a
        map error dG moves the fixed point by (I - J)^-1 dG, J the map's Jacobian in the solver's coordinates
        y, which is large where J has an eigenvalue near 1 (beta = beta0 = 2: 0.86 at alpha = 1.19, i.e. ~10x).
        J by central differences of the cold map with step ``FP_STEP`` in y (a solver device, as hybr's: wide
        enough to average over the jumps of a rough map, ~1e-4 relative), dG from the conjugates' relative
        error estimates through the matrix side (forward differences, step 1e-5 in log), combined by the
        triangle inequality; observables by forward differences in y. Keys: ``fixed_point_<obs>`` (obs =
        q, m, sigma, mse, test_error, test_error_clean; for the test errors plus their own quadrature error),
        ``map_spectral_radius`` (max |eig J|) and ``fixed_point_amplification`` (||(I - J)^-1||_inf).
        Nothing is added where a step cannot be evaluated (e.g. the map leaves the regular phase).
        """
        if res.phase != "regular" or not res.converged or not np.all(np.isfinite(res.x)):
            return
        self._stage, self._spectral_nodes = (self.channel, None), None
        y = self._to_y(res.x)
        try:
            jac = np.empty((3, 3))
            for i in range(3):
                e = np.zeros(3)
                e[i] = FP_STEP
                jac[:, i] = (self._g(alpha, y + e)[0] - self._g(alpha, y - e)[0]) / (2 * FP_STEP)
            conj = np.array([res.q_hat, res.m_hat, res.sigma_hat])
            rel = np.array([res.errors.get(f"channel_{k}", math.nan) for k in ("q_hat", "m_hat", "sigma_hat")])
            rel = rel / np.maximum(np.abs(conj), 1e-300)
            if not np.all(conj > 0) or not np.all(np.isfinite(rel)):
                return

            def side(c: np.ndarray) -> np.ndarray:
                ms = matrix_update(self.problem, self.measure, *c)
                return self._to_y(np.array([ms.q, ms.m, ms.sigma]))

            base, h = side(conj), 1e-5
            jm = np.column_stack([(side(conj * np.exp(h * np.eye(3)[k])) - base) / h for k in range(3)])
        except (FloatingPointError, ParameterError, ValueError):
            return
        amp = np.linalg.inv(np.eye(3) - jac)
        dy = np.abs(amp @ jm) @ rel  # per coordinate of y
        q, m, sigma = res.x
        qz = self.q0 + self.problem.task.noise / 2
        dm_dy = np.array([m / 2, (1 - (m / math.sqrt(q * qz)) ** 2) * math.sqrt(q * qz), 0.0])
        err = {"fixed_point_q": q * dy[0], "fixed_point_sigma": sigma * dy[2],
               "fixed_point_m": float(np.abs(dm_dy) @ dy),
               "fixed_point_mse": float(np.abs(np.array([q, 0.0, 0.0]) - 2 * dm_dy) @ dy)}
        for key, clean in (("test_error", False), ("test_error_clean", True)):
            t0 = self.channel_final.test_error(q, m, clean=clean)[0]
            grad = []
            for i in range(2):
                e = np.zeros(3)
                e[i] = 1e-4
                xq = self._to_x(y + e)
                grad.append((self.channel_final.test_error(xq[0], xq[1], clean=clean)[0] - t0) / 1e-4)
            err[f"fixed_point_{key}"] = float(np.abs(grad) @ dy[:2]) + res.errors.get(key, 0.0)
        err["map_spectral_radius"] = float(np.max(np.abs(np.linalg.eigvals(jac))))
        err["fixed_point_amplification"] = float(np.max(np.abs(amp).sum(axis=1)))
        res.errors.update(err)

    def _qmc_resolver(self, channel_options: dict) -> StateEvolution:
        """A QMC solver of this problem (same tolerances) that re-solves points the Gauss-Hermite rule cannot:
        warm stages, then a cold accurate stage stopped at a tenth of the rule's own error."""
        d, kw = self.d, self._solver_args
        kw = {**kw, "max_iter": min(kw["max_iter"], ROUGH_MAX_ITER)}
        with _inner_solver():
            solver = StateEvolution(self.problem, d=d, channel_options=channel_options, stall=ROUGH_STALL,
                                    root_fallback=False, branch_switch=None, warm_start=self.warm_start,
                                    fixed_point_errors=self.fixed_point_errors, **kw)
        solver._cold_accurate = True
        solver._floor_stop = ROUGH_FLOOR_STOP
        return solver

    def _rough_solver(self) -> StateEvolution:
        """The QMC solver of the points the Gauss-Hermite rule cannot resolve (``rough_options``)."""
        if self._rough is None:
            self._rough = self._qmc_resolver(self.rough_options)
        return self._rough

    def _scaled_starts(self, alpha: float, solver: StateEvolution, base: SEResult, zero_test: bool,
                       stalled: str = NOTE_STALLED_START) -> SEResult:
        """Large logit noise (and any T = 2 cold start that stalls, :meth:`solve`): solve again from
        ``base`` scaled up (q, Sigma x s, m x sqrt(s), which keeps the correlation m / sqrt(q)) and return, of
        ``base`` (if converged) and the starts that converge, the fixed point with the lowest objective: the
        zero-temperature free energy, so the ERM's minimiser is the lowest one where both are RS-stable (an
        unstable branch's RS objective can lie below the ERM's: the note of two fixed points gives their AT values,
        :meth:`_rs_at`).

        A stalled ``base`` tries every s in NOISE_SCALES; a converged one the largest only, and not at lambda = 0 (a
        larger start may run off there, and a runaway is no minimiser). At lambda = 0 a start that runs off
        (:func:`_runaway_why`) competes by its objective too: if it is the lowest, it is returned (and refused by
        :meth:`solve`: the ERM's infimum is at infinity, no finite minimiser). A start that ends within NOISE_SAME
        of ``base``'s q is the same fixed point (``base`` is kept). The small-norm branch can end in a fold (the cold
        start then stalls at its ghost) or coexist with a large-norm branch of lower objective: MP kappa0 = 0.2,
        Delta = 2, alpha = 0.5 has the small branch at lambda = 3e-3 (q = 2.5, objective 0.0698) beside the large one
        (q = 41, 0.0650), only the large one at 1e-3 (q = 145), only one fixed point at 1e-2 (docs/theory/
        state_evolution.md, "Large logit noise: past the fold"). Every iteration spent is counted. ``stalled``
        begins the note of a stalled ``base`` (the T >= 3 Stein re-solve's: NOTE_STEIN_STALLED)."""
        if not _regular(base):
            return base
        if base.converged and self.problem.student.lam == 0.0:
            return base
        scales = NOISE_SCALES[-1:] if base.converged else NOISE_SCALES
        q, m, sigma = base.x
        found, spent = ([(None, base)] if base.converged else []), base.iterations
        issued: dict[float, list[warnings.WarningMessage]] = {}  # each start's warnings, until one is chosen
        for s in scales:
            with _recording() as issued[s]:
                try:
                    cand = solver._solve_regular(alpha, np.array([s * q, math.sqrt(s) * m, s * sigma]), zero_test)
                except _SOLVE_ERRORS:
                    continue
            spent += cand.iterations
            if not (cand.converged and cand.phase == "regular" and cand.q > 0.0):
                continue
            if not (base.converged and _q_within(cand.q, q, NOISE_SAME)):  # not base found again
                found.append((s, cand))
        s, out = min(found, key=lambda f: f[1].objective) if found else (None, base)
        out.iterations = spent
        runaway = self.problem.student.lam == 0.0 and bool(self._runaway_of(out))
        # issued again under the caller's filters, but for the ConvergenceWarnings of the starts not chosen and of a
        # runaway (whose softmaxes are one-hot: a prox warning per evaluation, 115 at the point of the docs)
        for t, caught in issued.items():
            _reissue(caught, convergence=t == s and not runaway)
        if s is None:
            return out
        if runaway:
            _add_note(out, f"{stalled}{q:.3g} (residual {base.residual:.1e}), a start at {s:g}x its q and "
                           f"Sigma ran off with the lowest objective of the scaled starts {NOISE_SCALES}, "
                           f"{out.objective:.5g}")
        elif base.converged:
            note = (f"{NOTE_TWO_POINTS}this one (from a start at {s:g}x the cold solve's q and Sigma) has the lower "
                    f"objective, {out.objective:.5g} against {base.objective:.5g} at q = {q:.3g} (test error "
                    f"{base.test_error:.5g})")
            at, at_other = self._rs_at(alpha, out), self._rs_at(alpha, base)
            # (one note, no "; " inside: the theory command prints it whole)
            if at < 1.0:
                note += f", so it is the ERM's (AT = {at:.3g}, the other's {at_other:.3g})"
            else:  # (nan: no verdict either)
                note += (f", {NOTE_UNSTABLE}(AT = {at:.3g}, the other's {at_other:.3g}): an unstable branch's RS "
                         "objective can lie below the ERM's, so the ERM may sit on the other")
            _add_note(out, note)
        else:
            at = self._rs_at(alpha, out)
            _add_note(out, f"{stalled}{q:.3g} (residual {base.residual:.1e}), converged from a start "
                           f"at {s:g}x its q and Sigma (the lowest objective of the scaled starts {NOISE_SCALES}, "
                           f"AT = {at:.3g}{': RS-unstable' if not at < 1.0 else ''})")
        return out

    def _rs_at(self, alpha: float, res: SEResult) -> float:
        """The de Almeida-Thouless value of a regular fixed point (:func:`stability.rs_stability`, with the point's
        own rule); nan where it cannot be evaluated. AT >= 1: the RS fixed point is unstable, and its RS objective is
        not the ERM's (it can lie below it)."""
        from .stability import rs_stability  # (stability builds on this module)

        try:
            return rs_stability(self.problem, res, alpha, d=self.d).at
        except _SOLVE_ERRORS:
            return math.nan

    def _noise_solver(self) -> StateEvolution:
        """The solver of the T = 2 points with noise-dominated labels: the QMC rule NOISE_QMC with the Stein forms
        of the conjugates (and the user's QMC and prox options). docs/theory/state_evolution.md, "Large logit
        noise"."""
        if self._noise is None:
            keep = ("qmc_log2", "replicas", "seed", "tol", "max_iter")
            self._noise = self._qmc_resolver(
                {**NOISE_QMC, **{k: v for k, v in self._channel_options.items() if k in keep}})
        return self._noise

    def _solve_regular_staged(self, alpha: float, init, zero_test: bool = True) -> SEResult:
        self._low_seed = None
        self._warm_fine = {} if self.warm_start else None
        self._spectral_warm = {} if self.warm_start else None
        self._stage = (self.channel, self._warm_fine)
        zero = self._zero_phase(alpha) if zero_test else None
        if zero is not None:
            return zero
        # a converged point (or learning_curve's extrapolation from one) hands over its position and its last secant
        # pairs (its map's Jacobian at a nearby alpha): the first stage's Anderson starts as a quasi-Newton step
        # instead of a plain damped one
        carried = getattr(init, "_secant_pairs", None)
        if isinstance(init, SEResult):
            init = init.x if init.phase == "regular" and init.converged else None
            carried = carried if init is not None else None
        x0 = np.asarray(init, float) if init is not None else self.initial_guess()
        y = self._to_y(x0)
        it0 = 0
        # cheaper stages first (channel, its warm starts, fixed spectral nodes, tolerance); each stage's
        # fixed point is within its quadrature error of the accurate one, and its secant pairs approximate
        # the next map's Jacobian: they seed Anderson there
        stages = []
        if self.channel_pre is not None and init is None:  # (a warm start is already past the slow start)
            stages.append((self.channel_pre, {} if self.warm_start else None, self.coarse_spectral_nodes,
                           self.pre_tol))
        if self.channel_coarse is not None:
            # QMC: a cheap rule; Gauss-Hermite: the accurate rule with the fixed spectral rule
            warm = {} if self.warm_start else None
            nodes = None if self._qmc else self.coarse_spectral_nodes
            stages.append((self.channel_coarse, warm, nodes, self.coarse_tol))
            if self._estimate_only and nodes is not None:
                # the low-order comparison solve stops after this stage, continued with the adaptive spectral
                # rule (1-2 evaluations), so that its fixed point carries the channel rule's difference alone (a
                # d = 2000 power law's fixed spectral rule moved the estimate by 6.5e-6)
                stages.append((self.channel_coarse, warm, None, self.tol))
        prior, self._prior_in = self._prior_in, None  # secant pairs handed over by the solver of another order
        if prior is None and not self._qmc:
            prior = carried
        for i, (channel, warm, nodes, tol) in enumerate(stages):
            self._stage = (channel, warm)
            self._spectral_nodes = nodes
            # the pool's fixed starts are rerun in warm calls only in a stage no later stage refines (the last of
            # the low-order comparison solve); the accurate stage below refreshes them or is cold
            self._refresh_pool = self._estimate_only and i == len(stages) - 1
            try:
                st = self._iterate(alpha, y, tol, prior=prior)
            finally:
                self._spectral_nodes = None
                self._refresh_pool = True
            it0 += st["it"]
            prior = None
            if st["ran_off"]:
                return self._ran_off(alpha, st, it0)
            if st["last_good"] is not None:
                y = st["y"] if st["converged"] else st["best_y"]
                prior = st["pairs"]
        if self._estimate_only and stages and st["converged"] and st["final"] is not None:
            # the low-order comparison solve: the warm stages' fixed point (adaptive spectral rule last) differs
            # from the cold map's by the warm proxes' branch choice (~1e-9), far below what it resolves
            y_eval, ch, ms = st["final"]
            self._pairs_out = st.get("pairs")
            return _with_rounding(self._observables(alpha, self._to_x(y_eval), ch, ms, True, it0, st["resid"], ""),
                                  st["rounding"])
        # Gauss-Hermite: the last stage iterates the cold map itself (warm-started proxes may follow another
        # branch at a few nonconvex nodes, which moves the map by ~1e-9); QMC: warm, checked cold below
        self._stage = (self.channel, self._warm_fine if self._qmc and not self._cold_accurate else None)
        y_start = y
        st = self._iterate(alpha, y, self.tol, prior=prior)
        # handed to the low-order comparison solve, a raised order and the next point of a curve: this stage's pairs,
        # preceded by the earlier stage's where it made fewer than `anderson` (usually 1 evaluation, no pair)
        self._pairs_out = _recent_pairs(prior, st["pairs"], self.anderson)
        it, converged, message, resid = st["it"] + it0, st["converged"], st["message"], st["resid"]
        if st["ran_off"]:
            return self._ran_off(alpha, st, it)
        y = st["y"]
        if st["last_good"] is None and not converged:
            return self._failed(alpha, it, resid, message or "map could not be evaluated")
        if converged and self._cold_accurate and st["final"] is not None:
            # QMC re-solve: the accurate stage iterated the cold map; report the point it evaluated last
            y_eval, ch, ms = st["final"]
            return _with_rounding(self._observables(alpha, self._to_x(y_eval), ch, ms, True, it, resid, message),
                                  st["rounding"])
        if converged and self.channel_low is not None and st["final"] is not None:
            # Gauss-Hermite: the last stage evaluated the cold map; report the point it was evaluated at
            # (residual <= tol there) with that evaluation, plus the quadrature error estimate of the final rule
            y_eval, ch, ms = st["final"]
            x = self._to_x(y_eval)
            if self._estimate_at_point:
                ch = self._with_error_estimate(alpha, x, ch, cond_var=_cond_var(y_eval))
            return _with_rounding(
                self._observables(alpha, x, ch, ms, True, it, resid, message), st["rounding"])
        if not converged:
            y, resid = st["best_y"], st["best_resid"]
        rounding = st["rounding"]  # the allowance in atanh(rho) the accurate stage was accepted at (0: none)
        x = self._to_x(y)
        # observables at the final point, with the quadrature error estimates
        try:
            fx, ch, ms = self._map(alpha, x, final=True, cond_var=_cond_var(y))
        except FloatingPointError as exc:
            # the iteration's best point need not be one the final rule can evaluate (direct model, T = 2, lambda = 0,
            # output noise 0.136, beta = 2.77, alpha = 0.48: the matrix side's conjugates left the admissible region
            # there, and the CLI printed the traceback): a failed point, with both reasons
            return self._failed(alpha, it, resid, f"{message or 'not converged'}; the map at the iteration's best "
                                                  f"point could not be evaluated ({exc})")
        warm_gap = False  # the warm map's fixed point is known far better than its distance to the cold map's
        # the cold map's residual where the point reported fails its check (message COLD_GAP); kept on the result
        # only if it ends unconverged (the floor acceptance and hybr can still converge it)
        cold_gap = None
        if self.warm_start and np.all(np.isfinite(fx)) and fx[0] > 0 and fx[2] > 0:
            # the iterations used warm-started proxes; report the residual of the cold map at the result
            f_cold = self._to_y(fx) - y
            cold = float(np.max(np.abs(f_cold)))
            warm_gap = cold > WARM_GAP * max(resid, self.tol)  # resid: the warm iteration's (final or best)
            if cold > resid:
                resid = cold
                # a point accepted at the correlation's rounding passes the cold check by the same rule (T = 3: the
                # cold map's atanh(rho) was 1.7e-3 off, within an allowance of 0.19)
                if rounding:
                    rounding = max(rounding, _correlation_rounding(y, ch, ms))
                if converged and cold > self.tol and not (rounding and _within_rounding(f_cold, self.tol, rounding)):
                    converged, rounding, cold_gap = False, 0.0, cold
                    message = f"{COLD_GAP}{cold:.1e} > tol at the warm-started fixed point"
                elif not converged and warm_gap:
                    # stalled, but far closer to the warm map's fixed point than to the cold map's: the same
                    # mismatch (a learning curve on a rough large-norm branch, T = 2, output noise 0.37, alpha =
                    # 1.57: warm stall 9.8e-5, cold 2.8e-3), re-solved on the cold map like a converged one
                    cold_gap = cold
                    message = f"{COLD_GAP}{cold:.1e} > tol at the warm iteration's end point ({message})"
        if not converged:
            # With a nonconvex prox (large Sigma) the global minimiser switches branch across a surface;
            # a fixed quadrature rule then makes the map jump by about its own error, and no solver can
            # go below that floor. Accept the point when the residual is within the quadrature error.
            floor = max(
                ch.error_estimate.get(k, 0.0) / max(abs(getattr(ch, k)), 1e-300)
                for k in ("q_hat", "m_hat", "sigma_hat")
            )
            if np.isfinite(floor) and resid <= min(self.floor_factor * floor, self.max_floor):
                converged = True
                message = f"converged to the quadrature accuracy (residual {resid:.1e}, quadrature error {floor:.1e})"
        rough = self.branch_switch is not None and ch.branch_share > self.branch_switch
        if not converged and self.root_fallback and not rough and not warm_gap:
            # Anderson fails where the map is steep and repelling (just above the zero phase: docs); a
            # dogleg root finder on F(y) - y gets there from the stalled or the starting point. Not tried at a rough
            # point (re-solved with QMC instead) nor where the warm iteration found its fixed point and only the cold
            # map disagrees (warm_gap): hybr iterates the same warm map, so its root fails the same cold check (T = 3,
            # MP kappa0 = 0.2, Delta = 2, lambda = 1e-3, alpha = 0.1: 87 + 107 evaluations of 290, for nothing)
            anderson = message
            for y0 in (st["best_y"], y_start):
                sol = self._hybr(alpha, y0)
                it += sol["nfev"]
                if sol["converged"]:
                    x_root = self._to_x(sol["y"])
                    try:
                        fx, ch_root, ms_root = self._map(alpha, x_root, final=True, cond_var=_cond_var(sol["y"]))
                    except FloatingPointError:
                        continue  # (as at the iteration's best point above: not a point to report)
                    cold = float(np.max(np.abs(self._to_y(fx) - sol["y"]))) if fx[0] > 0 and fx[2] > 0 else np.inf
                    if self.warm_start and not np.isfinite(cold):
                        continue  # no cold map there to check it against: not a point to report
                    y, x, ch, ms = sol["y"], x_root, ch_root, ms_root
                    resid = max(sol["resid"], cold) if self.warm_start else sol["resid"]
                    if resid <= self.tol:
                        converged = True
                        message = f"converged by the hybr fallback after Anderson ({anderson})"
                        break
                    if self.warm_start:
                        cold_gap = cold
                        # hybr's root of the warm map, which the cold map misses: the point is the one reported
                        # now, and its message says so (a QMC point is then re-solved on the cold map from it,
                        # _cold_gap_resolve; before, it kept Anderson's "stalled at residual 3.9e-01" beside a
                        # residual of 1.9e-3: T = 3, seq2seq, beta0 = 2.3, lambda = 7.9e-4, alpha = 0.034)
                        message = (f"{COLD_GAP}{cold:.1e} > tol at the warm-started fixed point (the hybr fallback's "
                                   f"root; Anderson: {anderson})")
        out = _with_rounding(self._observables(alpha, x, ch, ms, converged, it, resid, message), rounding)
        if cold_gap is not None and not converged:
            out._cold_gap = cold_gap
        return out

    def _rough_point(self, ch) -> bool:
        """Gauss-Hermite, cold map (last stage): does this evaluation's branch share call for the QMC re-solve?
        Such a stalled point stops after ROUGH_GH_STALL iterations without progress instead of ``stall``."""
        return (self.branch_switch is not None and self._stage[0] is self.channel and self._stage[1] is None
                and ch.branch_share > self.branch_switch)

    def _with_error_estimate(self, alpha: float, x: np.ndarray, ch, cond_var: float | None = None):
        """``channel_final.moments(alpha, *x)`` from ``ch = channel.moments(alpha, *x)`` (cold, the same
        Gauss-Hermite panel): the error estimates |order - order_low| from one evaluation of the low rule."""
        warm: dict = {}  # (fresh: the cold evaluation, recorded for the low-order solve's first evaluation)
        low = self.channel_low.moments(alpha, *x, warm=warm, cond_var=cond_var)
        self._low_seed = (alpha, np.array(x, float), low, warm, _rule_key(self.channel_low))
        err = {k: abs(getattr(ch, k) - getattr(low, k)) for k in ch.error_estimate}
        stein = {**ch.stein, "m_hat_err": abs(ch.stein["m_hat"] - low.stein["m_hat"]),
                 "sigma_hat_err": abs(ch.stein["sigma_hat"] - low.stein["sigma_hat"])}
        return replace(ch, error_estimate=err, stein=stein, prox_residual=max(ch.prox_residual, low.prox_residual),
                       prox_iterations=max(ch.prox_iterations, low.prox_iterations))

    def _hybr(self, alpha: float, y0: np.ndarray) -> dict[str, Any]:
        """MINPACK hybr (Powell dogleg; forward-difference Jacobian of the map, then Broyden updates) on
        F(y) - y in the solver's coordinates; the map's own value decides convergence (residual <= tol)."""
        nfev = 0

        stops = self._runaway_stops()

        def fun(y: np.ndarray) -> np.ndarray:
            nonlocal nfev
            if _past(y, stops):  # (lambda = 0, past a runaway stop: not evaluated, a bad trial point)
                return np.full(3, 1e3)
            nfev += 1
            try:
                gy, _, _ = self._g(alpha, y)
            except (ArithmeticError, ParameterError, np.linalg.LinAlgError):
                # far out: an OverflowError of exp(y) was a traceback, and a singular prox Newton system at sigma
                # ~ 1e44 (T = 4) aborted the whole solve
                return np.full(3, 1e3)
            return gy - y

        sol = optimize.root(fun, y0, method="hybr", options={"xtol": 1e-14, "maxfev": min(200, self.max_iter)})
        f = fun(sol.x)
        resid = float(np.max(np.abs(f)))
        return {"y": sol.x + f, "resid": resid, "converged": bool(np.isfinite(resid) and resid <= self.tol),
                "nfev": nfev}

    def _runaway_stops(self) -> tuple[float, float, float]:
        """(log q, log Sigma, log q) of an iteration's stops at lambda = 0 (:func:`_past`): beta sqrt(q) =
        RUNAWAY_STOP; beta^2 Sigma = RUNAWAY_SIGMA_STOP where beta sqrt(q) is past the runaway bound too. Infinite
        at lambda > 0."""
        if self.problem.student.lam > 0.0:
            return math.inf, math.inf, math.inf
        log_beta = math.log(self.problem.student.beta)
        return (2.0 * (math.log(RUNAWAY_STOP) - log_beta), math.log(RUNAWAY_SIGMA_STOP) - 2.0 * log_beta,
                2.0 * (math.log(self._runaway_logit()) - log_beta))

    def _runaway_logit(self) -> float:
        """The logit scale beta sqrt(q) at which a lambda = 0 point of the regular phase is a runaway (no finite
        minimiser): RUNAWAY_RATIO x the teacher's logit scale beta0 sqrt(Q0 + Delta/2), at least RUNAWAY_RATIO."""
        task = self.problem.task
        return RUNAWAY_RATIO * max(1.0, task.beta0 * math.sqrt(self.q0 + task.noise / 2))

    def _runaway_of(self, res: SEResult) -> str:
        """:func:`_runaway_why` with this problem's beta and runaway bound ("" where ``res`` is no runaway)."""
        return _runaway_why(res, self.problem.student.beta, self._runaway_logit())

    def _iterate(self, alpha: float, y: np.ndarray, tol: float, prior=None, max_iter: int | None = None,
                 stall: int | None = None) -> dict[str, Any]:
        """Damped Anderson iteration of the map (current stage's channel) from y until residual <= tol.

        ``prior``: secant pairs (dY, dF) of a previous stage (columns), used by Anderson mixing alongside
        the new ones until the history is reset; the result's ``pairs`` are the last ones of this stage.
        ``max_iter`` / ``stall`` override the solver's cap and stall rule for this call (an explicit ``stall``
        also replaces the shorter stall of a rough Gauss-Hermite point); the fast scaling route uses them.
        """
        max_iter = self.max_iter if max_iter is None else int(max_iter)
        prior_dy, prior_df = prior if prior is not None else (np.zeros((3, 0)), np.zeros((3, 0)))
        hist_y: list[np.ndarray] = []
        hist_f: list[np.ndarray] = []
        message = ""
        converged = False
        at_rounding = 0.0  # accepted at the spectral rounding of the correlation (q and Sigma to tol): that rounding
        final = None  # (y, channel moments, matrix side) of the evaluation that met tol
        resid = np.inf
        best_resid = np.inf
        last_good: tuple[np.ndarray, np.ndarray] | None = None  # (y, f) of the last evaluable point
        last_eval = None  # (y, channel moments, matrix side) of the last evaluation (reported by a run-off)
        ran_off = False  # stopped past the runaway stops (lambda = 0)
        best_y = y.copy()
        it_best = 0
        eta = self.damping
        it = 0
        stops = self._runaway_stops()
        while it < max_iter:
            if _past(y, stops):
                message, ran_off = _ran_off_past(y, self.problem.student.beta), True
                break
            it += 1
            try:
                gy, ch, ms = self._g(alpha, y)
                last_eval = (y.copy(), ch, ms)
            except FloatingPointError as exc:
                message = str(exc)
                if last_good is None:
                    break
                # step back towards the last good point with a smaller damped step, forget the history
                hist_y.clear()
                hist_f.clear()
                eta *= 0.5
                y = last_good[0] + eta * last_good[1]
                continue
            f = gy - y
            resid = float(np.max(np.abs(f)))
            if not np.isfinite(resid):
                message = "non-finite residual"
                break
            floor = _relative_floor(ch) if self._floor_stop else 0.0
            rounding = _correlation_rounding(y, ch, ms)
            resolved = _within_rounding(f, tol, rounding)
            if resid <= tol or resid <= self._floor_stop * floor or resolved:
                converged = True
                last_good = (y.copy(), f.copy())
                final = (y.copy(), ch, ms)
                y = gy
                if resid <= tol:
                    message = ""
                elif resolved:
                    at_rounding = rounding
                    message = (f"converged to the spectral rounding of the correlation: residual {resid:.1e} in "
                               f"atanh(rho) <= its rounding {rounding:.1e} (spectral error / (1 - rho^2), "
                               f"1 - rho^2 = {1.0 / math.cosh(y[1]) ** 2:.1e}); q and Sigma to {tol:g}")
                else:
                    message = (f"converged to the quadrature accuracy: residual {resid:.1e} <= {self._floor_stop:g} x "
                               f"the relative quadrature error {floor:.1e} of the conjugates (replica estimate)")
                break
            last_good = (y.copy(), f.copy())
            if resid > 10 * best_resid:  # acceleration went astray: restart the history
                hist_y.clear()
                hist_f.clear()
                prior_dy, prior_df = np.zeros((3, 0)), np.zeros((3, 0))
            if resid < best_resid:
                best_resid, best_y, it_best = resid, y.copy(), it
            elif it - it_best >= (stall if stall is not None else
                                  ROUGH_GH_STALL if self._rough_point(ch) else
                                  max(self.stall, RECOVERY_STALL) if _cond_var(y) is not None else self.stall):
                message = f"stalled at residual {best_resid:.2e}"
                break
            hist_y.append(y.copy())
            hist_f.append(f.copy())
            if len(hist_y) > self.anderson + 1:
                hist_y.pop(0)
                hist_f.pop(0)
            y_new = y + eta * f
            if len(hist_y) >= 2 or prior_dy.shape[1]:
                # (transposed views as before when there is no prior: the same BLAS calls, the same bits)
                dY = np.diff(np.array(hist_y), axis=0).T
                dF = np.diff(np.array(hist_f), axis=0).T
                keep_prior = min(prior_dy.shape[1], max(0, self.anderson - dY.shape[1]))
                if keep_prior:
                    dY = np.hstack([prior_dy[:, -keep_prior:], dY.reshape(3, -1)])
                    dF = np.hstack([prior_df[:, -keep_prior:], dF.reshape(3, -1)])
                gamma, *_ = np.linalg.lstsq(dF, f, rcond=None)
                y_new = y_new - (dY + eta * dF) @ gamma
            step = float(np.max(np.abs(y_new - y)))
            if step > self.max_step:  # trust region in log coordinates: at most a factor e^max_step
                y_new = y + (y_new - y) * (self.max_step / step)
            y = y_new
        else:
            message = f"no convergence in {max_iter} iterations"
        pairs = (np.diff(np.array(hist_y), axis=0).T.reshape(3, -1), np.diff(np.array(hist_f), axis=0).T.reshape(3, -1))
        if len(hist_y) < 2:
            pairs = (np.zeros((3, 0)), np.zeros((3, 0)))
        return {"y": y, "converged": converged, "it": it, "resid": resid, "best_y": best_y,
                "best_resid": best_resid, "last_good": last_good, "message": message, "pairs": pairs,
                "final": final, "rounding": at_rounding, "ran_off": ran_off, "last_eval": last_eval}

    def _ran_off(self, alpha: float, st: dict[str, Any], it: int) -> SEResult:
        """The result of an iteration ``st`` stopped past the runaway stops (lambda = 0): not converged, at its last
        evaluation (that stage's rule), its message. No later stage, hybr fallback or evaluation of the final rule
        follows: past the stops one evaluation took 13-17 s (T = 3, Sigma ~ 1e11), and such a point is a runaway."""
        if st["last_eval"] is None:
            out = self._failed(alpha, it, st["resid"], st["message"])
        else:
            y_eval, ch, ms = st["last_eval"]
            out = self._observables(alpha, self._to_x(y_eval), ch, ms, False, it, st["resid"], st["message"])
        out._stopped = st["message"]
        return out

    def _errors_at(self, q: float, m: float) -> tuple[dict[str, float], tuple[float, float]]:
        """mse, test_error and test_error_clean at (q, m), and the two test errors' quadrature errors."""
        te, te_err = self.channel_final.test_error(q, m, clean=False)
        tc, tc_err = self.channel_final.test_error(q, m, clean=True)
        values = {"mse": self.q0 - 2 * m + q, "test_error": te + self.error_offset, "test_error_clean": tc}
        return values, (te_err, tc_err)

    def _observables(self, alpha, x, ch, ms, converged, it, resid, message, phase="regular") -> SEResult:
        q, m, sigma = x
        at, (te_err, tc_err) = self._errors_at(q, m)
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
            mse=at["mse"],
            test_error=at["test_error"],
            test_error_clean=at["test_error_clean"],
            train_error=train,
            objective=alpha * train + penalty,
            rank=ms.rank,
            converged=bool(converged),
            iterations=it,
            residual=resid,
            seconds=0.0,
            phase=phase,
            message=message,
            errors={
                "test_error": te_err,
                "test_error_clean": tc_err,
                "spectral": ms.spectral_error,
                "branch_share": ch.branch_share,
                "prox_excess": ch.prox_excess,
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

            st = self.problem.student
            if st.model == "factorized" and st.kappa < 1:
                from .denoisers import narrow_interpolation_alpha_bar

                self._inter_abar = narrow_interpolation_alpha_bar(self.measure, self.problem.task.noise, st.kappa)
            else:
                self._inter_abar = interpolation_threshold(self.measure, self.problem.task.noise, model=st.model)
        return self._inter_abar

    def lacks_minimiser(self, alpha: float) -> bool:
        """lambda = 0 with seq2lab output noise below the interpolation threshold: the student can fit any labels
        inside the simplex, and the rows that output noise puts outside it drive their logits to infinity, so the
        ERM has no minimiser (:meth:`solve` refuses the point; ``simulate`` warns)."""
        task = self.problem.task
        return (self.problem.student.lam == 0.0 and task.noise_out > 0.0 and task.task == "seq2lab"
                and alpha_bar(alpha, task.tokens) < self.interpolation_alpha_bar())

    def _recovers(self, abar: float) -> bool:
        """Noiseless factorised lambda -> 0+ at or above perfect recovery (a PSD target; a student of rank >= its)."""
        from .thresholds import negative_mass, perfect_recovery_factorized, rank_fraction

        st = self.problem.student
        if self.problem.task.noise != 0.0 or st.model != "factorized" or negative_mass(self.measure) > 0:
            return False
        kappa0 = rank_fraction(self.measure)
        return st.kappa >= kappa0 and abar >= perfect_recovery_factorized(kappa0)

    def _perfect_recovery(self, alpha: float) -> SEResult:
        """Noiseless, lambda -> 0+, alpha_bar >= alpha_bar_PR: the minimum-nuclear-norm interpolator is
        S_hat = (beta0/beta) S0 exactly (also for a narrow student of rank >= the target's, whose feasible set holds
        it), so q = r^2 Q0, m = r Q0 and its rank is the target's kappa0. Below the Delta -> 0+ interpolation
        threshold Sigma diverges like 1/lambda (inf, conjugates 0, as in the interpolating phase); above it Sigma
        and the conjugates stay finite in the limit but are not computed here (NaN; the lambda = 0 SE with eps = 0
        exactly is another fixed point, rank 0.75 for MP 0.5 instead of the limit's 0.5)."""
        from .thresholds import rank_fraction

        abar = alpha_bar(alpha, self.problem.task.tokens)
        r = self.problem.task.beta0 / self.problem.student.beta
        below = abar < self.interpolation_alpha_bar()
        nan = float("nan")
        sigma, conj = (math.inf, 0.0) if below else (nan, nan)
        return self._interpolating_result(
            alpha, r * r * self.q0, r * self.q0, delta=0.0, eps=0.0, rank=rank_fraction(self.measure),
            iterations=0, residual=0.0, converged=True, sigma=sigma, conj=conj,
            message="perfect recovery (noiseless, lambda -> 0+): S_hat = (beta0/beta) S0" + (
                "" if below else "; Sigma and the conjugates (finite in this limit) are not computed"))

    def _interpolating_result(self, alpha: float, q: float, m: float, *, delta: float, eps: float, rank: float,
                              iterations: int, residual: float, converged: bool, message: str,
                              sigma: float = math.inf, conj: float = 0.0) -> SEResult:
        """The SEResult of a lambda -> 0+ point given its overlaps (q, m): zero train error (plus the output noise's
        offset), the test errors from the channel at (q, m); Sigma diverges (inf) and the conjugates vanish unless
        given."""
        at, (te_err, tc_err) = self._errors_at(q, m)
        return SEResult(
            alpha=alpha, alpha_bar=alpha_bar(alpha, self.problem.task.tokens), q=q, m=m, sigma=sigma, q_hat=conj,
            m_hat=conj, sigma_hat=conj, delta=delta, eps=eps, mse=at["mse"],
            test_error=at["test_error"], test_error_clean=at["test_error_clean"], train_error=self.error_offset,
            objective=alpha * self.error_offset, rank=rank, converged=converged, iterations=iterations,
            residual=residual, seconds=0.0, phase="interpolating", message=message,
            errors={"test_error": te_err, "test_error_clean": tc_err},
        )

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
            if self.problem.student.kappa < 1:
                from .denoisers import solve_narrow_interpolating_phase

                sol = solve_narrow_interpolating_phase(self.measure, qz, abar, self.problem.student.kappa)
            else:
                sol = solve_interpolating_phase(self.measure, qz, abar)
            delta, eps = sol["delta"], sol["eps"]
            q = r * r * sol["I"]
            m = r * sol["m_over_r"]
            rank = sol["rank"]
            it, resid, ok, msg = sol["iterations"], sol["residual"], sol["converged"], sol["message"]
            if not np.isfinite(q) or not np.isfinite(m):
                return self._failed(alpha, it, resid, msg or "interpolating phase: no solution")
        return self._interpolating_result(alpha, q, m, delta=delta, eps=eps, rank=rank, iterations=it, residual=resid,
                                          converged=ok, message=msg)

    # ----------------------------------------------------------------- sweeps ------------------
    def solve_warm(self, alpha: float, init: np.ndarray | SEResult | None) -> SEResult:
        """Solve from a warm start, and cold as well when the warm solve failed or was only accepted at the
        quadrature-noise floor; the better-converged of the two is returned.

        Where the map jumps (nonconvex prox, small lambda past the interpolation peak) a warm start can stall
        on the wrong side of a jump that a cold start does not meet (docs/theory/state_evolution.md, "Known
        limitation"). An exception of the warm solve propagates; one of the optional cold solve keeps the warm
        result. Warnings are issued once the answer is chosen, and only the returned solve's ConvergenceWarning (a
        warm solve that the cold one replaces does not report "did not converge" for a converged point).
        """
        if init is None:
            return self.solve(alpha)
        # the solves' warnings wait until the answer is known: a ConvergenceWarning of a warm solve that the cold one
        # then replaces said "did not converge" about a point reported converged (theory --noise 0 --lam 1e-5
        # --alpha 0.5,1,2 printed it at alpha = 1)
        n_warm = None  # how many of ``caught`` the warm solve issued
        kept_cold = False
        try:
            with _recording() as caught:
                res = self.solve(alpha, init=init)
                n_warm = len(caught)
                # (a QMC re-solve is at its own noise floor: no cold solve either)
                if not (self._tight(res) or (res.converged and res.quadrature != self._quadrature)):
                    try:
                        cold = self.solve(alpha, init=None)
                    except _SOLVE_ERRORS:
                        cold = None
                    if cold is not None and cold.converged and (not res.converged or cold.residual < res.residual):
                        res, kept_cold = cold, True
        finally:
            # issued again in order under the caller's filters, but for the ConvergenceWarning of the solve not
            # returned (the cold one's also where it raised)
            n_warm = len(caught) if n_warm is None else n_warm
            _reissue(caught[:n_warm], convergence=not kept_cold)
            _reissue(caught[n_warm:], convergence=kept_cold)
        return res

    def learning_curve(self, alphas, progress=None) -> list[SEResult]:
        """Solve along a sequence of alphas (a list or array of alpha = n/d^2, or one number: a one-point curve),
        warm-starting each point from the previous one; one :class:`SEResult` per alpha, in their order. Every
        alpha is checked before the first point is solved."""
        alphas = _alphas(alphas)
        if progress is not None and not callable(progress):  # (was 'int' object is not callable after a point)
            raise ParameterError("progress", f"must be a function or None (got {progress!r:.60})")
        out: list[SEResult] = []
        path = CurvePath()
        for a in alphas:
            res = self.solve_warm(a, path.start(self, a))
            out.append(res)
            path.add(res)
            if progress is not None:
                progress()
        return out


class CurvePath:
    """The warm starts of a curve solved point by point (:meth:`StateEvolution.learning_curve`, the figures'
    ``theory_curve`` route): :meth:`start` is the next point's start, :meth:`add` records each result.

    The start is the last converged point, or, from two converged regular points on, the polynomial extrapolation
    in log alpha of the solver's coordinates through the last (up to) three of them, with the last point's secant
    pairs (docs/theory/state_evolution.md, "Warm starts along a curve")."""

    def __init__(self) -> None:
        self.prev: SEResult | None = None  # the last converged point
        self.past: list[SEResult] = []  # the last (up to) three converged regular points, in order

    def start(self, se: StateEvolution, alpha: float) -> SEResult | np.ndarray | None:
        y = _extrapolate([math.log(r.alpha) for r in self.past], [se._to_y(r.x) for r in self.past],
                         math.log(alpha))
        if y is None:
            return self.prev
        return _warm_start(se._to_x(y), getattr(self.prev, "_secant_pairs", None))

    def add(self, res: SEResult) -> None:
        if not res.converged:
            return
        self.prev = res
        if not _extrapolable(res):
            self.past = []
        elif self.past and res.alpha == self.past[-1].alpha:  # (a repeated alpha: the same point)
            self.past[-1] = res
        else:
            self.past = [*self.past[-2:], res]


# beyond these the SE is slow (minutes a point) and its answer rough: StateEvolution warns before it starts
SHARP_WARN = 4 * MAX_GH_ORDER / 12  # max(beta, beta0) whose Gauss-Hermite order 12 beta is 4x the cap (~21)
NOISE_WARN = 1e6  # Delta / (2 Q0): logit-noise variance over the signal's


_INNER = [0]  # > 0 while a solver builds its helper solvers (other orders, the QMC re-solve): they do not warn again


@contextlib.contextmanager
def _inner_solver():
    _INNER[0] += 1
    try:
        yield
    finally:
        _INNER[0] -= 1


def _warn_degenerate(problem: Problem, q0: float, channel_options: dict | None) -> None:
    """A RuntimeWarning, before any work, for problems where one SE point takes minutes (measured at alpha = 0.5,
    the default problem otherwise): a softmax far sharper than the channel quadrature resolves (beta = 12: 54 s at
    order 64, converged; beta = 1000: order 12000 wanted, 64 used, 30 s to build the rules and 1-3 s per map
    evaluation, > 2 min without converging) and labels that are pure noise (Delta = 1e7: 50 s, 1e8: 77 s on
    2026-11-30, by continuation in Delta where a cold start stalls; 1e8 took 36 s from a cold start on 2026-12-01;
    docs/theory/state_evolution.md, "Large logit noise"; the observables hardly change beyond Delta ~ 1e4)."""
    if _INNER[0]:
        return
    task, sharp = problem.task, max(problem.student.beta, problem.task.beta0)
    options = channel_options or {}
    gauss_hermite = (task.tokens == 2 and (task.noise_out == 0 or task.task == "seq2seq")
                     and options.get("rule", "auto") != "qmc")
    if sharp > SHARP_WARN and gauss_hermite:
        which = "beta" if problem.student.beta >= task.beta0 else "beta0"
        warnings.warn(f"{which} = {sharp:g}: the softmax is far sharper than the channel quadrature resolves "
                      f"(Gauss-Hermite order {math.ceil(12 * sharp)} wanted, {options.get('order') or MAX_GH_ORDER} "
                      "used): each point can take minutes and its error estimates (errors, message) are large",
                      RuntimeWarning, stacklevel=3)
    if task.noise > 2 * NOISE_WARN * q0:
        warnings.warn(f"noise = {task.noise:g}: the labels are pure noise (logit-noise variance Delta/2 = "
                      f"{task.noise / 2:.3g} vs the target's Q0 = {q0:.3g}): the state evolution converges "
                      "slowly there (10-30 s a point, by continuation in Delta); its observables hardly "
                      "change beyond Delta ~ 1e4 (the default problem at alpha = 0.5: test error 1.881 at Delta = 1e4, "
                      "1.9025 at 1e7)",
                      RuntimeWarning, stacklevel=3)


# __init__ takes **unknown only to name a misspelt option (a ParameterError, not Python's TypeError); its signature,
# which help() shows and theory.api.check_options lists the options from, has the options alone
_sig = inspect.signature(StateEvolution.__init__)
StateEvolution.__init__.__signature__ = _sig.replace(
    parameters=[p for p in _sig.parameters.values() if p.kind is not p.VAR_KEYWORD])


def channel_setup(problem: Problem, q0: float, channel_options: dict | None = None) -> tuple[ChannelParams, dict]:
    """The SE's channel for ``problem`` (target energy ``q0``): its parameters and its default quadrature
    options, overridden by ``channel_options`` (any :class:`SoftmaxChannel` keyword)."""
    task = problem.task
    # seq2seq: (1/d)||(A - A_hat) X||^2 -> ||A - A_hat||^2, output noise only adds T*Delta_out (error_offset)
    noise_out = task.noise_out if task.task == "seq2lab" else 0.0
    params = ChannelParams(tokens=task.tokens, beta=problem.student.beta, beta0=task.beta0, noise=task.noise,
                           noise_out=noise_out, q0=q0)
    # Gauss-Hermite (T = 2): order GH_ORDER = 16 at beta = beta0 = 1. The integrand is not smooth (the prox has
    # kinks and, at a few nodes, two minima), so the rule converges slowly in the order and the fixed point
    # amplifies the map's error (up to ~14x near the interpolation peak): measured against order 32 on a
    # 50-point curve (lambda = 0.01), the test error is off by <= 1.0e-3 at order 12, 4.2e-4 at 16, 1.5e-4 at 20,
    # for 7.0, 11.2, 15.9 s CPU (docs/theory/state_evolution.md, "Quadrature order"); every point reports the
    # fixed point's own error, the difference to the fixed point of order 0.75 x order (fixed_point_<obs>).
    # The softmax's poles sit at imaginary distance ~pi/beta, so the rule needs ~beta times more nodes
    # per dimension at low temperature (beta = beta0 = 2 at order 12 lands ~20 % off, measured): 12 beta.
    sharp = max(1.0, problem.student.beta, task.beta0)
    # (capped at MAX_GH_ORDER = 64, whose order^4 grid still fits in memory: from beta = 5.4 on the point's own
    # fixed-point error estimate says what that costs)
    # the Stein forms of m_hat and sigma_hat (T = 2): the Jacobian forms differentiate g pointwise and so miss the
    # jumps of the prox's global minimiser, and their Gauss-Hermite sums converge slowly near the prox's folds;
    # the Stein forms need g alone and agree with the derivatives of the averaged Moreau envelope
    # (docs/theory/state_evolution.md, "The conjugates: Stein forms")
    options = {"order": min(MAX_GH_ORDER, max(GH_ORDER, int(math.ceil(12 * sharp)))),
               **({"conjugates": "stein"} if task.tokens == 2 else {}), **(channel_options or {})}
    # QMC (T >= 3): 4 scrambled replicas of 2^12 Sobol' points, 2^11 from T = 5 on (cost ~ T^3 per node;
    # relative error of the conjugates ~4e-3 at T = 5, reported in ``errors``; raise qmc_log2 for more)
    if task.tokens >= 5 and "qmc_log2" not in options:
        options["qmc_log2"] = 11
    return params, options


def _rule_key(channel: SoftmaxChannel) -> tuple:
    """What decides a channel call's value besides its arguments: the parameters and the rule (two channels with
    equal keys give bit-identical moments)."""
    return (channel.params, channel.rule, channel.order, channel.tol, channel.max_iter, channel.conjugates)


def _order_difference(res: SEResult, other: SEResult) -> dict[str, float]:
    """``fixed_point_<obs>``: |obs(res) - obs(other)| of two fixed points of the same problem under two quadrature
    orders (obs = q, m, sigma, mse; the test errors plus ``res``'s own per-evaluation estimate)."""
    err = {f"fixed_point_{k}": abs(getattr(res, k) - getattr(other, k)) for k in ("q", "m", "sigma", "mse")}
    for key in ("test_error", "test_error_clean"):
        err[f"fixed_point_{key}"] = abs(getattr(res, key) - getattr(other, key)) + res.errors.get(key, 0.0)
    return err


def _regular(res: SEResult) -> bool:
    """A point of the regular phase with finite (q, m, sigma): one that can start or anchor another solve."""
    return res.phase == "regular" and bool(np.all(np.isfinite(res.x)))


def _q_within(q: float, q_ref: float, factor: float) -> bool:
    """q is positive and within ``factor`` of ``q_ref`` on a log scale (q_ref > 0)."""
    return q > 0.0 and abs(math.log(q / q_ref)) <= math.log(factor)


def _cold_map_solve(solver: StateEvolution, alpha: float, x0: np.ndarray, q_ref: float,
                    ref: str, span: float = COLD_STEIN_SPAN) -> tuple[SEResult | None, str]:
    """One solve of a QMC point on the cold map by ``solver`` (a :meth:`StateEvolution._qmc_resolver`: cold
    accurate stage, stopped at a tenth of the rule's own error) from ``x0`` = (q, m, sigma), the re-solve that
    ``_cold_gap_resolve`` and ``_stein_cold_resolve`` share. Accepted where it converged in the regular phase with q
    within ``span`` of ``q_ref`` (further off is a runaway at lambda = 0; ``ref`` names the reference point in the
    reason; ``_stein_cold_resolve`` passes inf at lambda > 0).
    Returns (the result, "") where accepted, (the result, why not) where not, (None, "<Error>: <text>") where the
    solve raised."""
    try:
        out = solver._solve_regular(alpha, x0, zero_test=False)
    except _SOLVE_ERRORS as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if not out.converged:
        return out, out.message or "not converged"
    if not _regular(out):
        return out, f"phase {out.phase}"
    if not _q_within(out.q, q_ref, span):
        return out, (f"ran off to q = {out.q:.3g} from q = {x0[0]:.3g} (more than {span:g}x the {ref} "
                     f"q = {q_ref:.3g}), not accepted")
    return out, ""


@contextlib.contextmanager
def _recording() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning of the block (filter "always"), to be issued again by :func:`_reissue` or
    :func:`_reissue_prox` once it is known whether the block's solve gives the answer."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def scaled_start_notes(message: str) -> list[str]:
    """The notes of ``message`` ("; "-separated) that :meth:`StateEvolution._scaled_starts` wrote where it reports a
    point other than the cold solve's (NOTE_TWO_POINTS, NOTE_STALLED_START, or NOTE_STEIN_STALLED for the Stein
    re-solve of a T >= 3 point): a large-norm branch that a trainer from a small start may not reach. No such note
    holds "; "."""
    return [note for note in message.split("; ")
            if note.startswith((NOTE_TWO_POINTS, NOTE_STALLED_START, NOTE_STEIN_STALLED))]


def _reissue(caught: list[warnings.WarningMessage], convergence: bool) -> None:
    """Issue recorded warnings again, in order, under the caller's filters; their ConvergenceWarnings only if
    ``convergence`` (those of a solve whose result was not returned say nothing about the answer)."""
    for w in caught:
        if convergence or not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _reissue_prox(caught: list[warnings.WarningMessage], res: SEResult) -> None:
    """:meth:`StateEvolution.solve`'s warnings, issued again in order under the caller's filters; for a converged
    point without the channel's PROX_WARNINGs of the evaluations on the way, and with one where the point's own
    evaluation has a prox above its allowance (``errors["prox_excess"]`` > 1). Hard sweep seed 37: a stalled cold
    start (q = 719) warned of a prox residual of 1.0, then the point converged by continuation in lambda; seed 38: 10
    such warnings (up to 3.8e-7) on the way of a point solved with Gauss-Hermite and re-solved with the QMC rule."""
    converged = bool(res.converged)
    for w in caught:
        if converged and issubclass(w.category, ConvergenceWarning) and str(w.message).startswith(PROX_WARNING):
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    excess = res.errors.get("prox_excess", 0.0)
    if converged and excess > 1.0:
        warnings.warn(f"state evolution at alpha={res.alpha:g}: {PROX_WARNING} at the reported fixed point "
                      f"({excess:.3g} times its allowance)", ConvergenceWarning, stacklevel=3)


def _runaway_why(res: SEResult, beta: float, logit_bound: float) -> str:
    """Why a point of the regular phase is a runaway (at lambda = 0: a run-off to infinity, no minimiser): its logit
    scale beta sqrt(q) reached ``logit_bound`` (:meth:`StateEvolution._runaway_logit`); "" where not (and outside the
    regular phase, or where q is not a number)."""
    if res.phase != "regular" or not res.q >= 0.0:
        return ""
    logit = beta * math.sqrt(res.q)
    if logit < logit_bound:
        return ""
    return (f"logit scale beta sqrt(q) = {logit:.3g} >= {logit_bound:.3g} = {RUNAWAY_RATIO:g} x max(1, the teacher's "
            "beta0 sqrt(Q0 + Delta/2))")


def _drifted_off(out: SEResult, res: SEResult) -> str:
    """Why a Stein re-solve ``out`` that did not converge counts as a run-off from the Jacobian forms' point ``res``
    though below the runaway bound: it ended more than COLD_STEIN_SPAN times farther out ("" where not). Direct, T = 3,
    MP 1.488, Delta = 0.350, beta = 2.18, beta0 = 2.77, kappa = 1.5, alpha = 0.5515 at lambda = 0: the warm re-solve
    went from q = 2.26 to 45.2 and stalled, and the Jacobian forms' point was reported converged; at lambda = 1e-4,
    3e-5, 1e-5, 3e-6 the Stein fixed point lies out there, q = 42.8, 91.7, 195, 455 (q ~ lambda^-0.7: no finite
    limit), of lower objective than the Jacobian forms' point, and prox training from scaled starts sits on a
    large-norm branch (session 28)."""
    if not (_regular(out) and out.q > COLD_STEIN_SPAN * res.q):
        return ""
    return (f"stalled there, more than {COLD_STEIN_SPAN:g}x the Jacobian forms' q = {res.q:.3g}: the Stein map has "
            "no fixed point near that one")


def _past(y: np.ndarray, stops: tuple[float, float, float]) -> bool:
    """Is the iterate y (log q, atanh rho, log Sigma) past the runaway stops (:meth:`StateEvolution._runaway_stops`):
    q past the first, or Sigma past the second with q past the third?"""
    return bool(y[0] > stops[0] or (y[2] > stops[1] and y[0] >= stops[2]))


def _ran_off_past(y: np.ndarray, beta: float) -> str:
    """The message of an iteration stopped at RUNAWAY_STOP or RUNAWAY_SIGMA_STOP (lambda = 0, :func:`_past`)."""
    q, sigma = math.exp(min(y[0], 700.0)), math.exp(min(y[2], 700.0))
    return (f"{RAN_OFF_PAST}{q:.3g}, Sigma = {sigma:.3g} at lambda = 0 (logit scale beta sqrt(q) = "
            f"{beta * math.sqrt(q):.3g}, response beta^2 Sigma = {beta * beta * sigma:.3g}; the iteration stops past "
            f"{RUNAWAY_STOP:g}, {RUNAWAY_SIGMA_STOP:g}): stopped")


def _refuse_runaway(res: SEResult, beta: float, logit_bound: float) -> None:
    """lambda = 0: mark a runaway (:func:`_runaway_why`) as not converged, in place (its values stay: the last
    iterate, which says how far it ran); the message says why, before the solver's own."""
    why = _runaway_why(res, beta, logit_bound)
    if not why:
        return
    res.converged = False
    why = (f"ran off to q = {res.q:.3g} at lambda = 0 ({why}, where the softmaxes saturate): the ERM has no finite "
           "minimiser here (the bounded loss keeps falling as the logits grow); use lambda > 0")
    res.message = f"{why} (solver: {res.message})" if res.message else why


def _note_near_runaway(res: SEResult, beta: float, logit_bound: float) -> None:
    """lambda = 0: a point of the regular phase that did not converge with its logit scale beta sqrt(q) between
    RUNAWAY_NEAR x ``logit_bound`` and the bound (a stall on the way out, not refused as a runaway) says so, and how
    to tell, in place. Nothing changes for a converged point, a runaway, or one farther in."""
    if res.converged or res.phase != "regular" or not res.q >= 0.0 or _runaway_why(res, beta, logit_bound):
        return
    logit = beta * math.sqrt(res.q)
    if logit >= RUNAWAY_NEAR * logit_bound:
        _add_note(res, f"stopped at logit scale beta sqrt(q) = {logit:.3g}, near the runaway bound {logit_bound:.3g}: "
                       "the ERM may have no finite minimiser here; solve at small lambda > 0 (q growing without "
                       "bound as lambda falls means a runaway)")


def _add_note(res: SEResult, note: str) -> None:
    """Append ``note`` to ``res.message`` ("; "-separated), in place."""
    res.message = f"{res.message}; {note}" if res.message else note


def _within_rounding(f: np.ndarray, tol: float, rounding: float) -> bool:
    """F(y) - y meets tol in log q and log Sigma, and tol plus the correlation's rounding in atanh rho."""
    return bool(max(abs(f[0]), abs(f[2])) <= tol and abs(f[1]) <= tol + rounding)


def _with_rounding(res: SEResult, rounding: float) -> SEResult:
    """``res``, with ``errors["correlation_rounding"]`` = ``rounding`` where its solve was accepted there (> 0)."""
    if rounding:
        res.errors["correlation_rounding"] = rounding
    return res


def _cond_var(y: np.ndarray) -> float | None:
    """q - m^2/Qz = q (1 - rho^2) = q / cosh^2(atanh rho) at y, to full relative precision also as rho -> 1 (for
    ``SoftmaxChannel.moments(cond_var=)``); None where 1 - rho^2 >= COND_VAR_BELOW: there q and m resolve it to ~1e-13
    and the channel computes it from them as before, bit for bit."""
    t = math.exp(-2.0 * abs(float(y[1])))
    one_minus_rho2 = 4.0 * t / (1.0 + t) ** 2
    return math.exp(float(y[0])) * one_minus_rho2 if one_minus_rho2 < COND_VAR_BELOW else None


def _correlation_rounding(y: np.ndarray, ch, ms) -> float:
    """How well one evaluation of the map resolves its correlation coordinate atanh(rho), rho = m/sqrt(q Qz): the
    adaptive spectral rule's error (``ms.spectral_error``, absolute on integrals of size I = q (sigma_hat/m_hat)^2)
    divided by 1 - rho^2 = 1/cosh^2. Near perfect recovery rho -> 1 and 1 - rho^2 = (q Qz - m^2)/(q Qz) is the
    difference of two O(1) spectral integrals: at a noiseless d = 100 power law (lambda = 1e-4, alpha = 2, T = 2)
    1 - rho^2 = 7.3e-9 and a spectral error of 3.4e-11 leave atanh(rho) to +-5e-3, and the map's value of it jumped
    by ~1e-3 from call to call while q and Sigma had converged to 1e-11 (403 evaluations, 224 s). Zero for the fixed
    spectral rules (no error estimate; their nodes do not move) and wherever it is not finite."""
    err = ms.spectral_error
    if not err > 0.0 or not ch.m_hat > 0.0:
        return 0.0
    integral = ms.q * (ch.sigma_hat / ch.m_hat) ** 2
    if not integral > 0.0:  # (S_hat = 0: nothing to resolve)
        return 0.0
    out = err / integral * math.cosh(float(y[1])) ** 2
    return out if math.isfinite(out) else 0.0


def _relative_floor(ch, errors: dict | None = None, prefix: str = "") -> float:
    """Largest relative quadrature error estimate of the conjugates (q_hat, m_hat, sigma_hat) of a channel call
    (``ch.error_estimate``), or of an SEResult (``errors=res.errors, prefix="channel_"``)."""
    errors = ch.error_estimate if errors is None else errors
    out = 0.0
    for k in ("q_hat", "m_hat", "sigma_hat"):
        e = errors.get(prefix + k, float("nan"))
        if math.isfinite(e):
            out = max(out, e / max(abs(getattr(ch, k)), 1e-300))
    return out


def _extrapolate(ts: list[float], ys: list[np.ndarray], t: float) -> np.ndarray | None:
    """Polynomial (Lagrange) extrapolation through the points (ts[i], ys[i]) to t (learning_curve: t = log alpha, y
    the solver's coordinates, where every value is admissible): quadratic from three points, linear from two; None
    from fewer, or where t lies more than twice the last spacing beyond the last point (too far to help).
    Measured on the default 50-point curve: the start's distance to the fixed point 0.0015-0.018 linear,
    0.0002-0.0033 quadratic."""
    if len(ts) < 2 or abs(t - ts[-1]) > 2.0 * abs(ts[-1] - ts[-2]):
        return None
    out = np.zeros_like(ys[-1])
    for i, (ti, yi) in enumerate(zip(ts, ys, strict=True)):
        out += yi * math.prod((t - tj) / (ti - tj) for j, tj in enumerate(ts) if j != i)
    return out


def _extrapolable(r: SEResult | None) -> bool:
    return r is not None and r.converged and r.phase == "regular" and bool(np.all(np.isfinite(r.x)))


def solve_interpolating_phase(measure, qz: float, abar: float) -> dict[str, Any]:
    """Factorised lambda -> 0+ in the interpolating phase: find (delta, eps) (see module docstring).

    For fixed delta, dI/ddelta(delta, eps) decreases monotonically in eps from 2 delta (eps below the
    support) to 0 (eps above it), so eps(delta) solving dI/ddelta = 4 delta alpha_bar is a bracketed
    root for alpha_bar < 1/2. The outer equation G(delta) = Q' - I + 2 alpha_bar delta^2 + eps dI/deps
    starts at G(0+) = Delta/2 and becomes negative at large delta; its root is bracketed on a geometric
    grid. Noiseless (Delta = 0): G(0+) = 0, and a root delta > 0 exists only below perfect recovery;
    above it the solution is delta = 0 (S_hat = S0 / r exactly, "perfect recovery").
    """

    def eps_of(delta: float) -> tuple[float, Any]:
        fc = FreeConvolution(measure, delta)
        lo_y, hi_y = fc.support()[0][0], fc.support()[-1][1]
        target = 4 * delta * abar

        def h(eps: float) -> float:
            return fc.integrals(eps).dI_ddelta - target

        eps = optimize.brentq(h, lo_y - 1.0, hi_y, xtol=1e-15, rtol=1e-14)
        return eps, fc.integrals(eps)

    def g_raw(delta: float) -> tuple[float, float]:
        eps, si = eps_of(delta)
        return qz - si.I + 2 * abar * delta**2 + eps * si.dI_deps, eps

    def g_eq(delta: float) -> float:
        # eps(delta) decreases through 0 at some delta_0; eps < 0 (a negative nuclear-norm multiplier) is
        # not a lambda -> 0+ solution, and there G turns back up: count it as negative, so that a root with
        # eps >= 0 is bracketed even when G > 0 again at the next grid point (within ~1e-3 of the
        # threshold); a bracket that only holds the jump at delta_0 is rejected below (residual check).
        g, eps = g_raw(delta)
        return g if eps >= 0 else -(1.0 + abs(g))

    nan = float("nan")
    if not 0 < abar < 0.5:
        return {"delta": nan, "eps": nan, "I": nan, "m_over_r": nan, "rank": nan, "trace": nan,
                "iterations": 0, "residual": nan, "converged": False,
                "message": "interpolating phase needs 0 < alpha_bar < 1/2"}
    q0 = measure.q0
    from .thresholds import negative_mass, rank_fraction

    recoverable = negative_mass(measure) == 0.0  # a PSD estimator cannot equal an indefinite S0
    recovered = {"delta": 0.0, "eps": 0.0, "I": q0, "m_over_r": q0, "rank": rank_fraction(measure),
                 "trace": measure.moment(1), "iterations": 0, "residual": 0.0, "converged": True,
                 "message": "perfect recovery (delta = 0)"}
    # scan delta upwards on a geometric grid for the first sign change of G (> 0 at small delta)
    grid = np.geomspace(1e-3, 1e3, 43)
    b = nb = None
    g_prev = g_eq(grid[0])
    for lo_d, hi_d in zip(grid[:-1], grid[1:], strict=True):
        g_next = g_eq(hi_d)
        if g_prev > 0 >= g_next:
            b, nb = lo_d, hi_d
            break
        g_prev = g_next
    if b is None:
        if qz == q0 and recoverable:  # noiseless: delta -> 0 is the solution, S_hat = r S0 (perfect recovery)
            return recovered
        return {"delta": nan, "eps": nan, "I": nan, "m_over_r": nan, "rank": nan, "trace": nan,
                "iterations": 0, "residual": nan, "converged": False,
                "message": "no interpolating solution (above the interpolation threshold?)"}
    delta, rr = optimize.brentq(g_eq, b, nb, xtol=1e-14, rtol=1e-13, full_output=True)
    eps, si = eps_of(delta)
    resid = abs(g_raw(delta)[0])
    if eps < 0 or resid > 1e-8 * max(1.0, qz):  # only the jump at eps = 0: no solution with eps >= 0
        if qz == q0 and recoverable:
            return recovered
        return {"delta": nan, "eps": nan, "I": nan, "m_over_r": nan, "rank": nan, "trace": nan,
                "iterations": rr.iterations, "residual": resid, "converged": False,
                "message": "no interpolating solution with eps >= 0 (above the interpolation threshold?)"}
    m_over_r = si.I - 0.5 * delta * si.dI_ddelta - 0.5 * eps * si.dI_deps
    return {"delta": delta, "eps": eps, "I": si.I, "m_over_r": m_over_r, "rank": si.rank,
            "trace": -0.5 * si.dI_deps, "iterations": rr.iterations, "residual": resid,
            "converged": bool(rr.converged), "message": ""}


def solve(problem: Problem, alpha: float, d: int | None = None, **options) -> SEResult:
    """One SE point (convenience): ``StateEvolution(problem, d, **options).solve(alpha)``, an :class:`SEResult`.
    Every argument is checked first; a bad one, or an option :class:`StateEvolution` does not take, is a
    ParameterError naming it."""
    validate_problem(problem)
    alpha = validate_alpha(alpha)
    return StateEvolution(problem, d=d, **options).solve(alpha)


def learning_curve(problem: Problem, alphas, d: int | None = None, **options) -> list[SEResult]:
    """Warm-started SE along ``alphas`` (convenience): a list of :class:`SEResult`, one per alpha in their order.

    ``alphas`` is a list or array of alpha = n/d^2 (not alpha_bar), or one number (a one-point curve); ``d`` the
    dimension of a list-based target's spectrum (power law, spikes; None: d -> infinity); ``options`` go to
    :class:`StateEvolution` (``tol``, ``accuracy``, ``channel_options``, ...). Each result's ``test_error`` and
    ``train_error`` are per sequence summed over the T^2 attention entries, ``mse`` is (1/d)||S_hat - S0||_F^2, and
    ``delta`` is the effective spectral delta = sqrt(q_hat)/m_hat, not the label noise Delta (``noise``): see
    :class:`SEResult`. ``theory.api.theory_records`` gives the same curve as flat JSON-ready dicts. Every argument
    is checked before the first point is solved (a ParameterError naming it)."""
    validate_problem(problem)
    alphas = _alphas(alphas)
    return StateEvolution(problem, d=d, **options).learning_curve(alphas)
