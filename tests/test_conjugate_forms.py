"""The conjugates m_hat and sigma_hat are derivatives of the Gaussian average of the Moreau envelope M (the prox
objective at the global minimiser): with Psi(q, m, Sigma) = E[M],

    q_hat = -4 alpha dPsi/dSigma,   m_hat = -2 alpha dPsi/dm,   sigma_hat = 4 alpha dPsi/dq

(envelope theorem and the Gaussian derivatives in the covariance). Psi is a smooth function of (q, m, Sigma) even
where the prox's minimiser jumps between basins, so central differences of it are an independent route to the
conjugates. The Stein forms (g alone) follow it; the Jacobian forms (d g pointwise) drop the surface terms of the
jumps (docs/theory/state_evolution.md, "The conjugates: Stein forms"). This is why the state evolution uses the
Stein forms at T = 2.
"""

from __future__ import annotations

import pytest

from tiedattention.problem import Problem
from tiedattention.theory.channel import SoftmaxChannel
from tiedattention.theory.state_evolution import StateEvolution, channel_setup


def _channel(problem: Problem, order: int) -> SoftmaxChannel:
    params, opts = channel_setup(problem, problem.task.target.measure(None).q0)
    return SoftmaxChannel(params, **{**opts, "order": order, "estimate_error": False, "conjugates": "jacobian"})


def _envelope_route(ch: SoftmaxChannel, alpha: float, q: float, m: float, sigma: float, h: float) -> dict:
    """The conjugates from relative central differences (step h) of E[M]."""
    env = lambda a, b, c: ch.moments(alpha, a, b, c).envelope  # noqa: E731
    d_q = (env(q * (1 + h), m, sigma) - env(q * (1 - h), m, sigma)) / (2 * h * q)
    d_m = (env(q, m * (1 + h), sigma) - env(q, m * (1 - h), sigma)) / (2 * h * m)
    d_s = (env(q, m, sigma * (1 + h)) - env(q, m, sigma * (1 - h))) / (2 * h * sigma)
    return {"q_hat": -4 * alpha * d_s, "m_hat": -2 * alpha * d_m, "sigma_hat": 4 * alpha * d_q}


def test_both_forms_are_the_envelope_derivatives_where_the_prox_is_convex():
    """Convex prox (small Sigma, no second minimum anywhere), GH order 32, step 3e-4: q_hat and the Stein forms equal
    the envelope route to 3e-9, 3e-9 and 1.2e-8 (relative); the Jacobian m_hat to 2.5e-6 (1.4e-7 at order 48: the
    label derivative t0 (1 - t0) it integrates is a narrower ridge than g)."""
    ch = _channel(Problem.from_options(), 32)
    alpha, q, m, sigma = 2.0, 1.2, 1.3, 0.3
    mo = ch.moments(alpha, q, m, sigma)
    assert mo.branch_share == 0.0
    fd = _envelope_route(ch, alpha, q, m, sigma, 3e-4)
    assert mo.q_hat == pytest.approx(fd["q_hat"], rel=5e-8)
    assert mo.stein["m_hat"] == pytest.approx(fd["m_hat"], rel=5e-8)
    assert mo.stein["sigma_hat"] == pytest.approx(fd["sigma_hat"], rel=5e-8)
    assert mo.m_hat == pytest.approx(fd["m_hat"], rel=1e-5) and mo.sigma_hat == pytest.approx(fd["sigma_hat"], rel=1e-6)


def test_the_stein_forms_follow_the_envelope_where_the_minimiser_jumps():
    """beta = beta0 = 2, alpha = 0.5, at (q, m, Sigma) = (1.308, 1.246, 1.628): the prox has two minima at a few % of
    the weight (branch share 4.5e-2). Measured (GH 32, steps 0.01 ... 0.08): the envelope route gives m_hat 0.3720 ...
    0.3735 and sigma_hat 0.4246 ... 0.4272; the Stein forms 0.3700 and 0.4221 (within 1 %); the Jacobian forms 0.3530
    and 0.4377 (5 % and 3 % off). The envelope route's own error here is ~0.6 % (it reads q_hat, which has one form,
    0.6 % high), so the test asks for the Stein forms within 1.5 % and the Jacobian m_hat beyond 4 %."""
    ch = _channel(Problem.from_options(beta=2, beta0=2), 32)
    alpha, q, m, sigma = 0.5, 1.308, 1.246, 1.628
    mo = ch.moments(alpha, q, m, sigma)
    assert mo.branch_share > 1e-2
    fd = _envelope_route(ch, alpha, q, m, sigma, 0.04)
    assert mo.q_hat == pytest.approx(fd["q_hat"], rel=0.01)  # the route's own accuracy
    assert mo.stein["m_hat"] == pytest.approx(fd["m_hat"], rel=0.015)
    assert mo.stein["sigma_hat"] == pytest.approx(fd["sigma_hat"], rel=0.015)
    assert abs(mo.m_hat / fd["m_hat"] - 1) > 0.04  # the Jacobian form misses the jumps' surface terms
    assert abs(mo.sigma_hat / fd["sigma_hat"] - 1) > 0.02


def test_the_state_evolution_uses_the_stein_forms_at_two_tokens():
    """T = 2: the SE's channel (and its QMC re-solve) return the Stein forms unless the user asks otherwise; the
    default fixed point's conjugates are therefore those of a Stein channel at the point."""
    p = Problem.from_options()
    se = StateEvolution(p)
    assert se.channel.conjugates == "stein" and se._rough_solver().channel.conjugates == "stein"
    assert StateEvolution(p, channel_options={"conjugates": "jacobian"}).channel.conjugates == "jacobian"
    r = se.solve(0.5)
    mo = se.channel.moments(0.5, r.q, r.m, r.sigma)
    assert mo.m_hat == mo.stein["m_hat"] and mo.sigma_hat == mo.stein["sigma_hat"]
    assert mo.stein["m_hat_jacobian"] != mo.m_hat  # (the other form is kept as the check)


@pytest.mark.slow
def test_a_stalled_stein_solve_starts_again_from_the_jacobian_forms(monkeypatch):
    """lambda = 1e-5, alpha = 0.2 (cold): the Gauss-Hermite solve with the Stein forms runs off (residual 1.7e-2,
    q ~ 44, branch share 0.75) and the QMC re-solve from there ends at test error 0.749, unconverged. Started again
    from the Jacobian forms' fixed point it converges on the curve (4 x 2^14: 0.4588, q 5.89). ~45 s with both
    runs (4 x 2^11 points). Since the SE's cheaper stages follow their warm prox branches (session 14, 7703b99) the
    Gauss-Hermite Stein solve still stops short of tol here (the fallback fires), but no longer runs off (it stalls
    at q = 3.83): without the fallback the QMC re-solve from its end point now converges on the curve too (0.4583,
    q 5.87, against 0.4592, q 5.90 with it)."""


    p = Problem.from_options(lam=1e-5)
    r = StateEvolution(p, rough_options={"qmc_log2": 11}).solve(0.2)
    assert r.converged and "started again from the Jacobian forms' Gauss-Hermite point" in r.message
    assert abs(r.test_error - 0.4588) < 3e-3 and abs(r.q - 5.89) < 0.1
    monkeypatch.setattr(StateEvolution, "_jacobian_start", lambda self, alpha, init, failed: failed)  # no fallback
    off = StateEvolution(p, rough_options={"qmc_log2": 11}).solve(0.2)
    assert "started again" not in off.message
    assert off.converged and abs(off.test_error - r.test_error) < 3e-3 and abs(off.q - r.q) < 0.1


@pytest.mark.slow
def test_a_runaway_accepted_at_the_quadrature_floor_is_solved_again():
    """lambda = 0, alpha = 0.156 (just above the interpolation threshold 0.1535), cold: the Gauss-Hermite solve with
    the Stein forms ran off to q ~ 1.6e7, Sigma ~ 6e9, where the map is nearly scale-invariant, and was accepted
    at the quadrature floor (residual 9.8e-4); the QMC re-solve from there reported test error 1.037, converged.
    Floor-accepted Stein solves now start again from the Jacobian forms' point too: 0.4994, q = 5.08 (~40 s).
    Since the SE's cheaper stages follow their warm prox branches (session 14, 7703b99) the Gauss-Hermite solve no
    longer runs off at this point (the QMC re-solve from its point gives 0.4994 without the fallback); the test
    keeps the answer, whichever route reaches it. No test forces the floor-accepted fallback now."""
    r = StateEvolution(Problem.from_options(lam=0)).solve(0.156)
    assert r.converged and r.q < 20 and 0.45 < r.test_error < 0.55 and abs(r.test_error - 0.4994) < 3e-3


@pytest.mark.slow
def test_a_qmc_re_solve_that_runs_out_of_iterations_restarts_from_its_end_point(monkeypatch):
    """The QMC re-solve's accurate stage is capped (ROUGH_MAX_ITER = 80); Anderson can wander on the jumps of a QMC
    map and end above a tenth of the rule's error (lambda = 1e-4, alpha = 0.23 was accepted 7e-3 off the curve).
    It then restarts once from its end point with a fresh history. Forced here with a cap of 3 iterations at
    lambda = 1e-4, alpha = 0.25 (4 x 2^12 points): without the restart the point ends unconverged; with it, it
    converges near the curve (0.3815 at 4 x 2^14). ~25 s for both runs."""
    import math

    import tiedattention.theory.state_evolution as se_module

    monkeypatch.setattr(se_module, "ROUGH_MAX_ITER", 3)
    p = Problem.from_options(lam=1e-4)
    r = StateEvolution(p, rough_options={"qmc_log2": 12}).solve(0.25)
    assert r.converged and "restarted from the end point of a first QMC solve" in r.message
    assert abs(r.test_error - 0.3815) < 0.01
    real_floor = se_module._relative_floor
    monkeypatch.setattr(se_module, "_relative_floor",  # a floor so high that no restart is asked for
                        lambda ch, errors=None, prefix="": math.inf if prefix else real_floor(ch, errors, prefix))
    off = StateEvolution(p, rough_options={"qmc_log2": 12}).solve(0.25)
    assert not off.converged and "restarted from" not in off.message
