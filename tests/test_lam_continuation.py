"""Continuation in lambda of a cold start that stalls far from a fixed point (StateEvolution._lam_continuation;
docs/theory/state_evolution.md, "Continuation in λ, and the cold-map
re-solve of a QMC point").

At small lambda Sigma grows like 1/lambda, and the cold start (Sigma = 1) can wander off to a large-q point where the
map stalls: T = 2, spikes:3.5 (d = 100), Delta = 0, Delta_out = 0.045, kappa = 0.5, beta = 2.57, beta0 = 1.07,
lambda = 3e-4, alpha = 0.0536 stalled at q = 6.1 (residual 0.37); its fixed point has q = 0.066, Sigma = 176. Where the
cold solve stalls (residual > LAM_FAR), the point is solved at 10 lambda (at LAM_ZERO_START = 1e-3 for lambda = 0;
cold, and by continuation itself, up to LAM_LEVELS decades up) and again from there.

The fast tests drive the mechanism on the default problem, where the cold start converges by itself, by making the
cold solve at the user's lambda report a stall; the slow test is the point above.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tiedattention.commands.simulate import _warn_large_norm_branch
from tiedattention.commands.theory import _note_branches
from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory.state_evolution import (
    LAM_FAR,
    LAM_LEVELS,
    LAM_STEP,
    LAM_ZERO_START,
    NOTE_STALLED_START,
    StateEvolution,
)

ALPHA = 0.5
REAL_SOLVE = StateEvolution._solve_regular


def _stall_cold_at(monkeypatch, lams, residual=0.5):
    """Make the cold solve (init None) at each lambda of ``lams`` report a stall at ``residual`` (its real point
    scaled to q x 50, not converged, 7 iterations); record every outermost call of _solve_regular (the calls of
    solve and of the continuation, not those nested in a solve: the low-order comparison, re-solves) as
    (lambda, cold?)."""
    real = REAL_SOLVE
    calls = []
    depth = [0]

    def fake(self, alpha, init, zero_test=True):
        if depth[0]:
            return real(self, alpha, init, zero_test)
        lam = self.problem.student.lam
        calls.append((lam, init is None))
        depth[0] += 1
        try:
            res = real(self, alpha, init, zero_test)
        finally:
            depth[0] -= 1
        if init is None and any(np.isclose(lam, x, rtol=1e-12) for x in lams):
            return dataclasses.replace(res, q=50.0 * res.q, converged=False, residual=residual, iterations=7,
                                       message=f"stalled at residual {residual:.2e}")
        return res

    monkeypatch.setattr(StateEvolution, "_solve_regular", fake)
    # a stall that remains is then solved from scaled starts (T = 2): tested in tests/test_scaled_starts.py
    monkeypatch.setattr(StateEvolution, "_scaled_starts", lambda self, alpha, solver, base, zero_test: base)
    return calls


def test_a_stalled_cold_start_is_continued_from_ten_lambda(monkeypatch, capsys):
    lam = 1e-3
    ref = StateEvolution(Problem.from_options(lam=lam)).solve(ALPHA)
    assert ref.converged
    calls = _stall_cold_at(monkeypatch, [lam])
    res = StateEvolution(Problem.from_options(lam=lam)).solve(ALPHA)
    assert calls == [(lam, True), (LAM_STEP * lam, True), (lam, False)]
    assert res.converged and res.phase == "regular"
    assert f"continued from the fixed point at lambda = {LAM_STEP * lam:.3g}" in res.message
    assert "cold start stalled (q = " in res.message and "residual 5.0e-01" in res.message
    # not the scaled starts' note: simulate --theory would warn of a large-norm branch, theory print a note
    assert NOTE_STALLED_START not in res.message
    _warn_large_norm_branch({(ALPHA, None): {"alpha": ALPHA, "converged": True, "message": res.message}}, "adam",
                            False)
    _note_branches([{"alpha": ALPHA, "converged": True, "message": res.message}])
    assert capsys.readouterr().err == ""
    # the same fixed point as the cold start that converges by itself (the default problem has one)
    for name in ("q", "m", "sigma", "test_error", "train_error"):
        assert getattr(res, name) == pytest.approx(getattr(ref, name), rel=1e-7, abs=1e-12), name
    # every solve's iterations are counted: the stall's 7, the base's and the warm solve's
    assert res.iterations > 7 + 2


def test_the_continuation_goes_up_at_most_lam_levels_decades(monkeypatch):
    lam = 1e-4
    stalls = [lam * LAM_STEP**k for k in range(LAM_LEVELS + 1)]  # the user's lambda and every level above
    calls = _stall_cold_at(monkeypatch, stalls)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = StateEvolution(Problem.from_options(lam=lam)).solve(ALPHA)
    assert calls == [(x, True) for x in stalls]  # no warm solve: no level converged
    assert not res.converged and res.message == "stalled at residual 5.00e-01"
    assert res.iterations == 7 * len(stalls)
    # one level less to stall: the top level's fixed point is carried down decade by decade
    calls = _stall_cold_at(monkeypatch, stalls[:-1])
    res = StateEvolution(Problem.from_options(lam=lam)).solve(ALPHA)
    assert res.converged
    assert calls == [(x, True) for x in stalls] + [(x, False) for x in reversed(stalls[:-1])]


def test_no_continuation_near_a_fixed_point_or_from_the_zero_phase(monkeypatch):
    # stalled close to a fixed point (residual <= LAM_FAR): another start is not what it needs
    calls = _stall_cold_at(monkeypatch, [1e-3], residual=0.5 * LAM_FAR)
    with pytest.warns(ConvergenceWarning):
        res = StateEvolution(Problem.from_options(lam=1e-3)).solve(ALPHA)
    assert calls == [(1e-3, True)] and not res.converged
    # S_hat = 0 at 10 lambda (lambda = 0.5: the zero phase from lambda ~ 2 at alpha = 0.5) is no start
    calls = _stall_cold_at(monkeypatch, [0.5])
    with pytest.warns(ConvergenceWarning):
        res = StateEvolution(Problem.from_options(lam=0.5)).solve(ALPHA)
    assert calls == [(0.5, True), (5.0, True)] and not res.converged and res.iterations == 7 + 1


def test_lambda_zero_is_continued_from_lam_zero_start_with_every_level(monkeypatch):
    """lambda = 0 (session 24): continued from the fixed point at LAM_ZERO_START, which may itself be continued
    LAM_LEVELS decades up (the hop from 0 is not a decade): T = 4, beta = 3, alpha = 2.14 stalled cold at lambda = 0,
    1e-3 and 1e-2 and converged from 0.1 down."""
    ref = StateEvolution(Problem.from_options(lam=0.0)).solve(ALPHA)
    stalls = [0.0] + [LAM_ZERO_START * LAM_STEP**k for k in range(LAM_LEVELS)]
    calls = _stall_cold_at(monkeypatch, stalls)
    res = StateEvolution(Problem.from_options(lam=0.0)).solve(ALPHA)
    top = LAM_ZERO_START * LAM_STEP**LAM_LEVELS
    assert calls == [(x, True) for x in stalls] + [(top, True)] + [(x, False) for x in reversed(stalls)]
    assert res.converged and f"continued from the fixed point at lambda = {LAM_ZERO_START:.3g}" in res.message
    for name in ("q", "m", "sigma", "test_error"):  # the lambda = 0 fixed point, not the lambda > 0 one
        assert getattr(res, name) == pytest.approx(getattr(ref, name), rel=1e-7, abs=1e-12), name
    # one level more to stall: no start, the stall is reported
    calls = _stall_cold_at(monkeypatch, stalls + [top])
    with pytest.warns(ConvergenceWarning):
        res = StateEvolution(Problem.from_options(lam=0.0)).solve(ALPHA)
    assert calls == [(x, True) for x in stalls + [top]] and not res.converged


@pytest.mark.slow  # ~30 s: the stalled cold start, two solves at 10 lambda, the warm solve
def test_the_spike_point_that_stalled_cold_converges_by_continuation():
    """The point of the module docstring (found by a randomised sweep, seed 22-23): converged, and the same fixed
    point as a solve started next to it (q x 1.3, Sigma x 0.7), an independent start."""
    p = Problem.from_options(target="spikes:3.5", noise=0.0, noise_out=0.045, lam=3e-4, kappa=0.5, beta=2.57,
                             beta0=1.07)
    res = StateEvolution(p, d=100).solve(0.0536)
    assert res.converged, res.message
    assert "continued from the fixed point at lambda = 0.003" in res.message
    assert res.q == pytest.approx(0.0661, rel=0.01) and res.sigma == pytest.approx(176.0, rel=0.01)
    near = StateEvolution(p, d=100).solve(0.0536, init=np.array([1.3 * res.q, res.m, 0.7 * res.sigma]))
    assert near.converged
    tol = 3 * max(res.errors.get("fixed_point_test_error", 0.0), res.errors.get("test_error", 0.0), 1e-6)
    assert near.test_error == pytest.approx(res.test_error, abs=tol)
    assert near.q == pytest.approx(res.q, rel=1e-3) and near.sigma == pytest.approx(res.sigma, rel=1e-3)


@pytest.mark.slow  # ~2-3 min: cold stalls at lambda = 0, 1e-3 and 1e-2, the chain down from 0.1 (T = 4)
def test_the_t4_point_that_stalled_at_lambda_zero_converges_by_continuation():
    """Found by a randomised sweep (seed 34): T = 4, MP kappa0 = 0.998, Delta = 0.0997, kappa = 1.66, beta = 2.99,
    alpha = 2.142, lambda = 0 stalled cold at q = 5.1 (residual 0.13); the fixed point of the lambda -> 0+ branch is
    q = 0.2163, test error 0.0357 (lambda = 1e-3: q = 0.2162)."""
    p = Problem.from_options(target="mp:0.998", noise=0.09973001959779307, lam=0.0, tokens=4,
                             kappa=1.6630689482346896, beta=2.993759067836944)
    res = StateEvolution(p).solve(2.1422211955594332)
    assert res.converged, res.message
    assert f"continued from the fixed point at lambda = {LAM_ZERO_START:.3g}" in res.message
    assert res.q == pytest.approx(0.2163, rel=2e-3) and res.test_error == pytest.approx(0.03566, rel=2e-3)
