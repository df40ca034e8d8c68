"""lambda = 0 runaways (docs/theory/state_evolution.md, "Runaways at lambda = 0").

With no penalty and a bounded loss the ERM can have no finite minimiser: the SE's iterates then run to ever larger q,
where every softmax is one-hot in double precision, the map is scale-invariant and its residual falls to the
quadrature floor. Such a point used to be reported converged (direct spiked seq2seq, Delta = 20, alpha = 0.5, lambda =
0: q = 4.1e8). ``solve`` now reports a lambda = 0 point whose logit scale beta sqrt(q) reaches RUNAWAY_RATIO x the
teacher's (at least 1) as not converged, with the reason (the bound was beta sqrt(q) >= 1e3 until session 27, when
the floor test was found accepting runaways at beta sqrt(q) = 55-292); and the channel's Jacobian forms, singular
to round-off on such iterates, no longer print numpy's divide/invalid warnings."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory import state_evolution as se_mod
from tiedattention.theory.state_evolution import NOISE_QMC, RUNAWAY_RATIO, SEResult, StateEvolution

# the point the randomised sweep of session 16 found (docs): reported converged at q = 4.1e8 before
SPIKED = Problem.from_options(target="spikes:3,2,1", noise=20, lam=0, tokens=2, beta=0.3, model="direct",
                              task="seq2seq")


def _point(q: float, converged: bool = True, phase: str = "regular", message: str = "solver's note",
           sigma: float = 1.0) -> SEResult:
    nan = float("nan")
    return SEResult(0.5, 1.0, q, 1.0, sigma, nan, nan, nan, nan, nan, nan, 1.7, nan, 0.02, nan, 1.0, converged, 236,
                    6.4e-4, 0.0, phase, message)


def test_the_runaway_logit_is_ten_times_the_teachers_at_least_ten():
    """RUNAWAY_RATIO x beta0 sqrt(Q0 + Delta/2), the teacher's logit scale in the units of beta sqrt(q) (the SE's
    correlation is m / sqrt(q (Q0 + Delta/2))), and never below RUNAWAY_RATIO (a near-uniform teacher with output
    noise still needs O(1) logits)."""
    sharp = StateEvolution(Problem.from_options(lam=0.0, beta0=3.0, noise=0.5, beta=0.3))
    assert sharp._runaway_logit() == pytest.approx(RUNAWAY_RATIO * 3.0 * math.sqrt(sharp.q0 + 0.25), rel=1e-14)
    assert 1.0 < sharp.q0 < 2.0  # (MP kappa0 = 0.5: the bound is between 35 and 47, not the floor)
    flat = StateEvolution(Problem.from_options(lam=0.0, beta0=0.3, noise=0.5))
    assert flat._runaway_logit() == RUNAWAY_RATIO


@pytest.mark.parametrize("beta", [0.3, 1.0, 2.0])
def test_a_point_at_the_runaway_bound_is_not_converged_and_keeps_its_values(beta):
    bound = 35.0  # the logit bound handed in (StateEvolution._runaway_logit)
    q = (bound / beta) ** 2 * (1 + 1e-12)  # beta sqrt(q) just at the bound
    res = _point(q)
    se_mod._refuse_runaway(res, beta, bound)
    assert not res.converged
    assert res.q == q and res.test_error == 1.7 and res.iterations == 236  # the last iterate stays, it says how far
    assert res.message.startswith(f"ran off to q = {q:.3g} at lambda = 0 (logit scale beta sqrt(q) = 35 >= 35 = 10 x "
                                  "max(1, the teacher's beta0 sqrt(Q0 + Delta/2)), where the softmaxes saturate)")
    assert "no finite minimiser" in res.message and "use lambda > 0" in res.message
    assert res.message.endswith("(solver: solver's note)")  # the solver's own message is kept, after the reason


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_points_below_the_bound_or_outside_the_regular_phase_are_left_alone(beta):
    """Not on Sigma: it diverges at the interpolation threshold with q finite (factorised, MP 0.5, Delta = 0.5, T = 2:
    Sigma = 1.1e8 at 1e-4 above it, q = 5.0, a converged point)."""
    bound = 35.0
    below = _point((bound / beta) ** 2 * 0.99, sigma=1e20)
    zero = _point((bound / beta) ** 2 * 4, phase="interpolating", sigma=math.inf)
    failed = _point(float("nan"), converged=False, phase="failed", sigma=float("nan"))
    for res in (below, zero, failed):
        before = dataclasses.replace(res)
        se_mod._refuse_runaway(res, beta, bound)
        assert res.converged == before.converged and res.message == before.message


@pytest.mark.parametrize("beta", [0.3, 1.0])
def test_a_stall_near_the_bound_says_it_may_be_a_runaway(beta):
    """An unconverged lambda = 0 point between RUNAWAY_NEAR x the bound and the bound gets a note saying how to tell a
    runaway (the default direct problem at alpha = 0.2525 stalled at beta sqrt(q) = 11.9 under the bound 13.2); a
    stall farther in, a converged point, a runaway (its own message) and the other phases are left alone."""
    bound = 35.0

    def at(logit: float, **kw) -> SEResult:
        return _point((logit / beta) ** 2, **kw)

    near = at(se_mod.RUNAWAY_NEAR * bound * 1.01, converged=False, message="stalled at residual 6.90e-02")
    se_mod._note_near_runaway(near, beta, bound)
    assert near.message.startswith("stalled at residual 6.90e-02; stopped at logit scale beta sqrt(q) = 17.7, near the")
    assert "runaway bound 35: the ERM may have no finite minimiser here" in near.message and near.converged is False
    for res in (at(se_mod.RUNAWAY_NEAR * bound * 0.99, converged=False), at(0.9 * bound),
                at(1.01 * bound, converged=False), at(0.9 * bound, converged=False, phase="interpolating"),
                _point(float("nan"), converged=False, phase="failed")):
        before = dataclasses.replace(res)
        se_mod._note_near_runaway(res, beta, bound)
        assert res.message == before.message and res.converged == before.converged


def test_solve_notes_a_stall_near_the_bound_at_lambda_zero_only(monkeypatch):
    """solve() adds the note at lambda = 0, after the runaway test, and not at lambda > 0 (the penalty bounds q)."""
    se = StateEvolution(SPIKED, d=100)
    q = (0.8 * se._runaway_logit() / SPIKED.student.beta) ** 2
    monkeypatch.setattr(StateEvolution, "_solve_regular", lambda self, alpha, init, zero_test=True: _point(
        q, converged=False, message="stalled at residual 6.90e-02"))
    monkeypatch.setattr(StateEvolution, "_lam_continuation", lambda self, alpha, res: res)
    with pytest.warns(ConvergenceWarning, match="near the runaway bound"):
        se.solve(0.5)
    with pytest.warns(ConvergenceWarning) as caught:
        StateEvolution(SPIKED.with_options(lam=1e-6), d=100).solve(0.5)
    assert not any("near the runaway bound" in str(w.message) for w in caught)


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
    assert not res.converged and res.phase == "regular" and math.sqrt(res.q) >= StateEvolution(problem)._runaway_logit()
    assert "converged to the quadrature accuracy" in res.message  # the floor test had accepted it: kept, in brackets
    assert 0.0 < res.train_error < 0.02


@pytest.mark.slow
def test_the_spiked_seq2seq_runaway_is_reported_not_converged():
    """The real point (~2.5 min): q runs to ~4e8 (beta sqrt(q) ~ 6e3) and the point is not converged, while at
    lambda = 1e-5 the same problem converges at q ~ 1.1e3 (q grows like lambda^-0.75: no finite minimiser at 0)."""
    with pytest.warns(ConvergenceWarning, match="ran off to q"):
        res = StateEvolution(SPIKED, d=100).solve(0.5)
    assert not res.converged and res.phase == "regular"
    assert 0.3 * math.sqrt(res.q) >= 1e3
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
@pytest.mark.parametrize("coord", [0, 2])
def test_an_iteration_at_lambda_0_stops_past_the_runaway_stop(monkeypatch, lam, coord):
    """At lambda = 0 an iteration whose q passes (RUNAWAY_STOP / beta)^2, or whose Sigma passes RUNAWAY_SIGMA_STOP /
    beta^2 with q past the runaway bound, stops there with a message instead of running on (a T = 4 Stein re-solve
    ran to q ~ 1e17 at 10 s per evaluation; a T = 3 one ran off in Sigma to 1e15 with q stuck near 2e5, at 3-34 s per
    evaluation, session 27); the hybr fallback does not evaluate such trial points. At lambda > 0 (the penalty bounds
    q) there is no such stop."""
    beta = 0.3
    se = StateEvolution(Problem.from_options(lam=lam, beta=beta), max_iter=300)
    calls = []
    # the coordinate that runs off; Sigma with q past the runaway bound (log q from 2 log(bound / beta) + 0.1)
    step = np.array([0.5, 0.0, 0.01]) if coord == 0 else np.array([0.0, 0.0, 0.5])
    y0 = np.array([0.0, 0.3, 0.0]) if coord == 0 else np.array([2 * math.log(se._runaway_logit() / beta) + 0.1, 0.3, 0])

    def running_off(alpha, y):  # grows by e^0.5 per evaluation in one coordinate, the correlation stays
        calls.append(y.copy())
        return y + step, _Ch(), _MS

    monkeypatch.setattr(se, "_g", running_off)
    monkeypatch.setattr(se, "damping", 1.0)
    monkeypatch.setattr(se, "anderson", 0)
    st = se._iterate(0.5, y0.copy(), 1e-10, stall=10**6)
    stop = math.log((se_mod.RUNAWAY_STOP / beta) ** 2 if coord == 0 else se_mod.RUNAWAY_SIGMA_STOP / beta**2)
    if lam == 0.0:
        assert not st["converged"] and st["message"].startswith("ran off past q = ")
        assert "; the iteration stops past 100000, 1e+12): stopped" in st["message"]
        assert stop < st["y"][coord] <= stop + 0.5 + 1e-12
        assert max(y[coord] for y in calls) <= stop
        n = len(calls)
        start = y0.copy()
        start[coord] = stop + 1.0
        assert se._hybr(0.5, start)["converged"] is False
        assert all(y[coord] <= stop for y in calls[n:])  # its trial points past the stop were not evaluated
    else:
        assert len(calls) == 300 and st["message"] == "no convergence in 300 iterations"


def test_sigma_alone_does_not_stop_an_iteration_at_lambda_0(monkeypatch):
    """Sigma past RUNAWAY_SIGMA_STOP with q below the runaway bound is what the interpolation threshold does (Sigma
    diverges there, q stays finite): the iteration goes on."""
    beta = 1.0
    se = StateEvolution(Problem.from_options(lam=0.0, beta=beta), max_iter=60)
    calls = []

    def sigma_only(alpha, y):
        calls.append(y.copy())
        return y + np.array([0.0, 0.0, 1.0]), _Ch(), _MS

    monkeypatch.setattr(se, "_g", sigma_only)
    monkeypatch.setattr(se, "damping", 1.0)
    monkeypatch.setattr(se, "anderson", 0)
    st = se._iterate(0.5, np.array([0.0, 0.3, 0.0]), 1e-10, stall=10**6)
    assert len(calls) == 60 and st["message"] == "no convergence in 60 iterations"
    assert max(y[2] for y in calls) > math.log(se_mod.RUNAWAY_SIGMA_STOP) + 20


class _FullCh(_Ch):
    """... with what a reported point reads from its channel call."""

    train_error = 0.1
    prox_excess = 0.0


class _FullMS(_MS):
    delta, eps, rank, trace = 1.0, 0.0, 1.0, 1.0


def test_a_stage_that_runs_off_ends_the_solve_at_its_last_evaluation(monkeypatch):
    """A stage stopped past the runaway stops returns at once, at its last evaluation: no later stage, no hybr
    fallback, no evaluation of the final rule (past the stops one took 13-17 s at T = 3, Sigma ~ 1e11; session 27), and
    no Stein, cold-map or QMC re-solve either (_solve_regular)."""
    beta = 1.0
    se = StateEvolution(Problem.from_options(lam=0.0, beta=beta))
    stages, calls = [], []

    def running_off(alpha, y):
        stages.append(se._stage[0])
        calls.append(y.copy())
        return y + np.array([0.5, 0.0, 0.5]), _FullCh(), _FullMS

    monkeypatch.setattr(se, "_g", running_off)
    monkeypatch.setattr(se, "stall", 10**6)  # (a constant residual would count as a stall)
    monkeypatch.setattr(se, "damping", 1.0)
    monkeypatch.setattr(se, "anderson", 0)
    monkeypatch.setattr(se, "_forms_start", False)  # (the Jacobian start after a Stein run-off is kept: not here)
    monkeypatch.setattr(se, "_map", lambda *a, **k: pytest.fail("the final rule was evaluated"))
    monkeypatch.setattr(se, "_hybr", lambda *a, **k: pytest.fail("hybr was tried"))
    monkeypatch.setattr(se, "_stein_resolve", lambda *a, **k: pytest.fail("a Stein re-solve was tried"))
    monkeypatch.setattr(se, "_rough_solver", lambda *a, **k: pytest.fail("a QMC re-solve was tried"))
    res = se._solve_regular(0.5, None)
    assert len(set(map(id, stages))) == 1  # one stage
    assert not res.converged and res.phase == "regular" and res.message.startswith(se_mod.RAN_OFF_PAST)
    assert res._stopped == res.message and "_stopped" not in res.to_dict()  # the marker, not a field
    assert math.log(res.q) == pytest.approx(calls[-1][0], abs=1e-12)  # the last evaluation, not the iterate past it
    assert math.log(res.sigma) == pytest.approx(calls[-1][2], abs=1e-12)
    assert res.iterations == len(calls)


def test_a_stopped_stein_re_solve_refuses_the_point_at_lambda_0(monkeypatch):
    """A warm Stein re-solve stopped by RUNAWAY_SIGMA_STOP reports its last evaluation, whose q can lie just below the
    runaway bound: its marker (``_stopped``, set by _ran_off) says it ran off all the same. The marker decides, not
    the message's text: a result whose message merely reads like a stop is not refused for it."""
    import dataclasses

    se = StateEvolution(Problem.from_options(lam=0.0, tokens=3, model="direct", noise_out=0.1))
    bound = se._runaway_logit()
    jac = _point((0.5 * bound) ** 2, message="")  # (the stop's q within COLD_STEIN_SPAN of it: no drift, _drifted_off)
    jac.errors = {"branch_share": 0.34}
    stop = se_mod._ran_off_past(np.array([2 * math.log(bound) + 0.3, 0.2, 28.0]), 1.0)
    stopped = dataclasses.replace(jac, q=(0.9 * bound) ** 2, converged=False, message=f"{stop}; cold map not tried")
    look_alike = dataclasses.replace(stopped)  # (replace drops the marker)
    stopped._stopped = stop
    monkeypatch.setattr(se, "_stein_attempts", lambda alpha, res: (stopped, stop))
    res = se._stein_resolve(0.14, dataclasses.replace(jac))
    assert not res.converged and se_mod.NOTE_STEIN_RAN_OFF in res.message
    assert f"({stop}) from the Jacobian forms' fixed point" in res.message and "use lambda > 0" in res.message
    assert look_alike._stopped == "" and jac._stopped == ""
    monkeypatch.setattr(se, "_stein_attempts", lambda alpha, res: (look_alike, "stalled"))
    kept = se._stein_resolve(0.14, dataclasses.replace(jac))
    assert kept.converged and se_mod.NOTE_JACOBIAN_KEPT in kept.message
    assert se_mod.NOTE_STEIN_RAN_OFF not in kept.message


@pytest.mark.parametrize("lam", [0.0, 1e-5])
def test_a_stein_re_solve_that_drifts_far_out_refuses_the_point_at_lambda_0(monkeypatch, lam):
    """A warm Stein re-solve that stalls more than COLD_STEIN_SPAN x the Jacobian forms' q farther out, below the
    runaway bound: at lambda = 0 the point is refused (the Stein map has no fixed point near the Jacobian one, whose
    point solves the wrong equations; at lambda > 0 the Stein fixed point of such a point lay far out, q ~ lambda^-0.7);
    at lambda > 0 the Jacobian forms are kept with their note. A stall within the span keeps them at lambda = 0 too."""
    se = StateEvolution(Problem.from_options(lam=lam, tokens=3, model="direct"))
    jac = _point(2.26, message="")
    jac.errors = {"branch_share": 0.014}
    drifted = dataclasses.replace(jac, q=45.2, converged=False, message="stalled at residual 2.48e-02")
    assert not se._runaway_of(drifted)  # (below the bound)
    monkeypatch.setattr(se, "_stein_attempts", lambda alpha, res: (drifted, "stalled at residual 2.48e-02"))
    res = se._stein_resolve(0.5515, dataclasses.replace(jac))
    if lam == 0.0:
        assert not res.converged and se_mod.NOTE_STEIN_RAN_OFF in res.message and res.q == 2.26
        assert "ran off to q = 45.2 at lambda = 0 (stalled there, more than 10x the Jacobian forms' q = 2.26" in \
            res.message
    else:
        assert res.converged and se_mod.NOTE_JACOBIAN_KEPT in res.message
    near = dataclasses.replace(drifted, q=20.0)
    monkeypatch.setattr(se, "_stein_attempts", lambda alpha, res: (near, "stalled at residual 2.48e-02"))
    kept = se._stein_resolve(0.5515, dataclasses.replace(jac))
    assert kept.converged and se_mod.NOTE_JACOBIAN_KEPT in kept.message


@pytest.mark.slow
def test_a_runaway_below_the_old_bound_is_not_converged():
    """~1 min. Direct model, MP 0.5, Delta = 0.5, T = 2, lambda = 0, alpha = 0.2525 (alpha_bar just above the direct
    model's interpolation threshold 0.5): reported converged at q = 8.4e3 (beta sqrt(q) = 92, below the old bound 1e3),
    Sigma = 1.3e8, test error 1.409, accepted at the quadrature floor; lambda = 1e-3, 1e-4, 1e-5, 1e-6, 1e-7 converge at
    q = 1.5, 2.7, 4.4, 7.6, 14.0: no finite minimiser at 0 (session 27)."""
    problem = Problem.from_options(lam=0.0, model="direct")
    with pytest.warns(ConvergenceWarning):
        res = StateEvolution(problem).solve(0.2525)
    assert not res.converged and "near the runaway bound" in res.message  # (q = 141, beta sqrt(q) = 11.9 < 13.2)
    small = StateEvolution(problem.with_options(lam=1e-5)).solve(0.2525)
    assert small.converged and small.q == pytest.approx(4.42, rel=0.05)


@pytest.mark.slow
def test_a_t3_stein_run_off_in_sigma_is_stopped_and_refused():
    """~40 s (was 9-14 min). Direct model, MP 0.345, Delta = 0.0458, output noise 0.105, T = 3, lambda = 0, alpha =
    0.14: the Jacobian forms converge at q = 9.92 with branch share 0.34, and the warm Stein re-solve ran off in Sigma
    (to 1e15, q stuck near 2e5), at 3-34 s an evaluation out there; reported converged on the Jacobian forms (q =
    10.09, test error 2.3857). lambda = 1e-3, 1e-4, 1e-5 converge at q = 5.74, 24.1, 109: no finite minimiser at 0.
    Now the Stein re-solve stops at beta^2 Sigma = 1e12 and the point is refused as a runaway."""
    problem = Problem.from_options(target="mp:0.345", noise=0.0458, noise_out=0.105, lam=0.0, tokens=3, model="direct")
    with pytest.warns(ConvergenceWarning, match="no finite minimiser"):
        res = StateEvolution(problem).solve(0.14)
    assert not res.converged and se_mod.NOTE_STEIN_RAN_OFF in res.message
    assert se_mod.RAN_OFF_PAST in res.message and "Sigma = 1.83e+12" in res.message
    assert res.q == pytest.approx(9.92, rel=0.01)  # the Jacobian forms' point stays, as the values reported
