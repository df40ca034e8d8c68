"""lambda = 0 runaways (docs/theory/state_evolution.md, "Runaways at lambda = 0").

With no penalty and a bounded loss the ERM can have no finite minimiser: the SE's iterates then run to ever larger q,
where every softmax is one-hot in double precision, the map is scale-invariant and its residual falls to the
quadrature floor. Such a point used to be reported converged (direct spiked seq2seq, Delta = 20, alpha = 0.5, lambda =
0: q = 4.1e8). ``solve`` now reports a lambda = 0 point whose logit scale beta sqrt(q) reaches RUNAWAY_LOGIT as not
converged, with the reason; and the channel's Jacobian forms, singular to round-off on such iterates, no longer print
numpy's divide/invalid warnings."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory import state_evolution as se_mod
from tiedattention.theory.state_evolution import NOISE_QMC, RUNAWAY_LOGIT, SEResult, StateEvolution

# the point the randomised sweep of session 16 found (docs): reported converged at q = 4.1e8 before
SPIKED = Problem.from_options(target="spikes:3,2,1", noise=20, lam=0, tokens=2, beta=0.3, model="direct",
                              task="seq2seq")


def _point(q: float, converged: bool = True, phase: str = "regular", message: str = "solver's note") -> SEResult:
    nan = float("nan")
    return SEResult(0.5, 1.0, q, 1.0, 3.0 * q, nan, nan, nan, nan, nan, nan, 1.7, nan, 0.02, nan, 1.0, converged, 236,
                    6.4e-4, 0.0, phase, message)


@pytest.mark.parametrize("beta", [0.3, 1.0, 2.0])
def test_a_point_at_the_runaway_logit_scale_is_not_converged_and_keeps_its_values(beta):
    q = (RUNAWAY_LOGIT / beta) ** 2 * (1 + 1e-12)  # beta sqrt(q) just at the bound
    res = _point(q)
    se_mod._refuse_runaway(res, beta)
    assert not res.converged
    assert res.q == q and res.test_error == 1.7 and res.iterations == 236  # the last iterate stays, it says how far
    assert res.message.startswith(f"ran off to q = {q:.3g} at lambda = 0")
    assert "no finite minimiser" in res.message and "use lambda > 0" in res.message
    assert res.message.endswith("(solver: solver's note)")  # the solver's own message is kept, after the reason


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_points_below_the_bound_or_outside_the_regular_phase_are_left_alone(beta):
    below = _point((RUNAWAY_LOGIT / beta) ** 2 * 0.99)
    zero = _point((RUNAWAY_LOGIT / beta) ** 2 * 4, phase="interpolating")
    failed = _point(float("nan"), converged=False, phase="failed")
    for res in (below, zero, failed):
        before = dataclasses.replace(res)
        se_mod._refuse_runaway(res, beta)
        assert res.converged == before.converged and res.message == before.message


def _fake_regular(q: float):
    def solve_regular(self, alpha, init, zero_test=True):
        return _point(q, message="converged to the quadrature accuracy (residual 6.4e-04, quadrature error 1.5e-03)")

    return solve_regular


def test_solve_refuses_a_runaway_at_lambda_zero_only(monkeypatch):
    """solve() applies the test at lambda = 0 (with the ConvergenceWarning every unconverged point gives) and not at
    lambda > 0, where the penalty bounds q (a large q there is a genuine fixed point)."""
    q = 4.12e8  # the measured runaway: beta sqrt(q) = 6.1e3 at beta = 0.3
    monkeypatch.setattr(StateEvolution, "_solve_regular", _fake_regular(q))
    with pytest.warns(ConvergenceWarning, match="ran off to q = 4.12e"):
        res = StateEvolution(SPIKED, d=100).solve(0.5)
    assert not res.converged and res.q == q
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        kept = StateEvolution(SPIKED.with_options(lam=1e-6), d=100).solve(0.5)
    assert kept.converged and kept.q == q


def test_moments_on_a_runaway_iterate_print_no_numpy_warnings():
    """At q ~ 2e17 (an iterate the runaway passed through) I + sigma H is singular to round-off on some nodes: the
    Jacobian forms are NaN there, which the channel keeps to itself (the Stein forms in use are finite; a NaN in use
    raises FloatingPointError), instead of printing numpy's divide/invalid warnings on the CLI."""
    se = StateEvolution(SPIKED, d=100, channel_options={**NOISE_QMC, "qmc_log2": 10})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ch = se.channel_final.moments(0.5, 2e17, 1e4, 6e17)
    numpy_warnings = [str(w.message) for w in caught
                      if issubclass(w.category, RuntimeWarning) and not issubclass(w.category, ConvergenceWarning)]
    assert not numpy_warnings  # (the prox's own ConvergenceWarning may come: a RuntimeWarning subclass, with words)
    assert math.isnan(ch.stein["m_hat_jacobian"])  # the case is exercised: some node's solve was singular
    assert np.isfinite([ch.q_hat, ch.m_hat, ch.sigma_hat]).all()


def test_the_direct_model_at_delta_2_runs_off_and_is_reported_not_converged():
    """A real solve (~25 s): direct model, MP kappa0 = 0.5, Delta = 2, T = 2, alpha = 0.5 at lambda = 0 was accepted at
    the quadrature floor at q = 1.35e8 (beta sqrt(q) = 1.2e4); lambda = 1e-3, 1e-5, 1e-7 converge at q = 7.6, 147,
    2.8e3 with train errors 0.044, 0.020, 0.016 falling towards the runaway's 0.015: no finite minimiser at 0."""
    problem = Problem.from_options(noise=2, lam=0, model="direct")
    with pytest.warns(ConvergenceWarning, match="ran off to q"):
        res = StateEvolution(problem).solve(0.5)
    assert not res.converged and res.phase == "regular" and math.sqrt(res.q) >= RUNAWAY_LOGIT
    assert "converged to the quadrature accuracy" in res.message  # the floor test had accepted it: kept, in brackets
    assert 0.0 < res.train_error < 0.02


@pytest.mark.slow
def test_the_spiked_seq2seq_runaway_is_reported_not_converged():
    """The real point (~2.5 min): q runs to ~4e8 (beta sqrt(q) ~ 6e3) and the point is not converged, while at
    lambda = 1e-5 the same problem converges at q ~ 1.1e3 (q grows like lambda^-0.75: no finite minimiser at 0)."""
    with pytest.warns(ConvergenceWarning, match="ran off to q"):
        res = StateEvolution(SPIKED, d=100).solve(0.5)
    assert not res.converged and res.phase == "regular"
    assert 0.3 * math.sqrt(res.q) >= RUNAWAY_LOGIT
    small = StateEvolution(SPIKED.with_options(lam=1e-5), d=100).solve(0.5)
    assert small.converged and 100 < small.q < 1e4


class _MS:
    """The matrix side of the fake map below: no spectral error."""

    spectral_error = 0.0


class _Ch:
    """A channel call of the fake map below: no branch switching, a relative quadrature error of 1e-3."""

    q_hat = m_hat = sigma_hat = 1.0
    branch_share = 0.0
    error_estimate = {"q_hat": 1e-3, "m_hat": 1e-3, "sigma_hat": 1e-3}


@pytest.mark.parametrize("lam", [0.0, 1e-3])
def test_an_iteration_at_lambda_0_stops_past_the_runaway_stop(monkeypatch, lam):
    """At lambda = 0 an iteration whose q passes (RUNAWAY_STOP / beta)^2 stops there with a message instead of running
    on (a T = 4 Stein re-solve ran to q ~ 1e17 at 10 s per evaluation, 2026-12-02); the hybr fallback does not
    evaluate such trial points. At lambda > 0 (the penalty bounds q) there is no such stop."""
    beta = 0.3
    se = StateEvolution(Problem.from_options(lam=lam, beta=beta), max_iter=300)
    calls = []

    def running_off(alpha, y):  # q and Sigma grow by e^0.5 per evaluation, the correlation stays
        calls.append(y.copy())
        return y + np.array([0.5, 0.0, 0.5]), _Ch(), _MS

    monkeypatch.setattr(se, "_g", running_off)
    monkeypatch.setattr(se, "damping", 1.0)
    monkeypatch.setattr(se, "anderson", 0)
    st = se._iterate(0.5, np.array([0.0, 0.3, 0.0]), 1e-10, stall=10**6)
    q_stop = (se_mod.RUNAWAY_STOP / beta) ** 2
    if lam == 0.0:
        assert not st["converged"] and st["message"].startswith("ran off past q = ")
        assert math.log(q_stop) < st["y"][0] <= math.log(q_stop) + 0.5 + 1e-12
        assert max(y[0] for y in calls) <= math.log(q_stop)
        n = len(calls)
        assert se._hybr(0.5, np.array([math.log(q_stop) + 1.0, 0.3, 0.0]))["converged"] is False
        assert all(y[0] <= math.log(q_stop) for y in calls[n:])  # its trial points past the stop were not evaluated
    else:
        assert len(calls) == 300 and st["message"] == "no convergence in 300 iterations"
