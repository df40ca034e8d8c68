"""A QMC point whose warm-started fixed point fails the cold map's check is re-solved on the cold map
(StateEvolution._cold_gap_resolve; docs/theory/state_evolution.md, "Continuation in λ, and the cold-map re-solve
of a QMC point").

Warm-started proxes can keep minima that the cold map's starts improve on, so the warm iteration converges (to 4.7e-14
at the point below) where the cold map does not (2.5e-3): T = 3, MP kappa0 = 1.419, Delta = 1.076, lambda = 9.5e-3,
beta = 1.73, beta0 = 2.48, kappa = 2, alpha = 0.797 (found by a randomised sweep, seed 23), reported unconverged
before. The fast tests drive the mechanism on a T = 2 point with output noise (a QMC rule, ~10 s), by making its warm
solve report the cold gap.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory.state_evolution import COLD_GAP, StateEvolution

REAL_STAGED = StateEvolution._staged
QMC_POINT = {"noise_out": 0.1}  # T = 2 with output noise: the QMC rule, warm-started proxes, Jacobian forms
ALPHA = 0.5


def _gap_at_first_solve(monkeypatch, shift=1.0):
    """The first (outermost) _staged call reports its point, moved by ``shift`` in q, as failing the cold check;
    every other call is the real one. Returns the list of the solvers _staged ran on."""
    seen = []

    def fake(self, alpha, init, zero_test):
        res = REAL_STAGED(self, alpha, init, zero_test)
        seen.append(self)
        if len(seen) == 1:
            gap = dataclasses.replace(res, q=shift * res.q, converged=False, residual=2.5e-3,
                                      message=f"{COLD_GAP}2.5e-03 > tol at the warm-started fixed point")
            gap._cold_gap = 2.5e-3  # what _solve_regular_staged sets beside the message (replace drops it)
            return gap
        return res

    monkeypatch.setattr(StateEvolution, "_staged", fake)
    return seen


def test_the_cold_map_is_iterated_from_a_warm_point_it_misses(monkeypatch):
    ref = StateEvolution(Problem.from_options(**QMC_POINT)).solve(ALPHA)
    assert ref.converged and ref.quadrature.startswith("qmc")
    seen = _gap_at_first_solve(monkeypatch, shift=1.02)
    solver = StateEvolution(Problem.from_options(**QMC_POINT))
    res = solver.solve(ALPHA)
    assert res.converged and res.quadrature == ref.quadrature
    assert "cold map from the warm-started fixed point (cold map residual 2.5e-03" in res.message
    # the re-solve ran on the cold-map solver (cold accurate stage), from the reported point
    assert len(seen) >= 2 and seen[0] is solver and seen[1] is solver._cold_qmc and seen[1]._cold_accurate
    # the same fixed point as the ordinary solve, within the QMC rule's own error
    err = max(ref.errors.get("fixed_point_test_error", 0.0), ref.errors.get("test_error", 0.0))
    assert abs(res.test_error - ref.test_error) <= 3 * err, (res.test_error, ref.test_error, err)
    assert res.q == pytest.approx(ref.q, rel=2e-3) and res.sigma == pytest.approx(ref.sigma, rel=2e-3)
    assert res.iterations > ref.iterations  # the warm solve's and the cold re-solve's


def test_a_cold_re_solve_that_fails_leaves_the_point_unconverged(monkeypatch):
    def failing(self, alpha, init, zero_test=True):
        raise FloatingPointError("matrix side returned q=nan")

    seen = _gap_at_first_solve(monkeypatch)
    solver = StateEvolution(Problem.from_options(**QMC_POINT))
    solver._cold_qmc = solver._qmc_resolver(solver._channel_options)
    monkeypatch.setattr(solver._cold_qmc, "_solve_regular", failing.__get__(solver._cold_qmc))
    # (nor is the point then solved from scaled starts, which converge here: tests/test_stalled_scaled_starts.py)
    monkeypatch.setattr(solver, "_scaled_starts", lambda alpha, solver, base, zero_test: base)
    with pytest.warns(ConvergenceWarning, match="the cold map from it raised FloatingPointError"):
        res = solver.solve(ALPHA)
    assert not res.converged and res.message.startswith(COLD_GAP) and len(seen) == 1


def test_the_warnings_of_a_cold_re_solve_not_returned_stay_quiet(monkeypatch):
    """A cold re-solve that does not converge is not returned, so neither are its ConvergenceWarnings (its prox
    residuals say nothing about the point reported); the point's own "did not converge" warning still is."""
    import warnings

    def stalling(self, alpha, init, zero_test=True):
        warnings.warn("prox residual of the cold re-solve", ConvergenceWarning, stacklevel=2)
        return SimpleNamespace(converged=False, phase="regular", q=float(init[0]), message="stalled", iterations=9)

    _gap_at_first_solve(monkeypatch)
    solver = StateEvolution(Problem.from_options(**QMC_POINT))
    solver._cold_qmc = solver._qmc_resolver(solver._channel_options)
    monkeypatch.setattr(solver._cold_qmc, "_solve_regular", stalling.__get__(solver._cold_qmc))
    monkeypatch.setattr(solver, "_scaled_starts", lambda alpha, solver, base, zero_test: base)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = solver.solve(ALPHA)
    said = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert not res.converged and "the cold map from it did not converge" in res.message
    assert not any("cold re-solve" in w for w in said) and any("did not converge" in w for w in said), said


def test_no_cold_re_solve_for_gauss_hermite_points(monkeypatch):
    """Gauss-Hermite points iterate the cold map in their last stage already: the message never arises there, and a
    point that carried it is not re-solved by the QMC cold map (the default problem, T = 2 without output noise,
    restarts from the Jacobian forms' point instead)."""
    _gap_at_first_solve(monkeypatch)
    solver = StateEvolution(Problem.from_options())
    assert not solver._qmc
    res = solver.solve(ALPHA)
    assert solver._cold_qmc is None and "cold map from the warm-started" not in res.message
    assert res.converged and "started again from the Jacobian forms" in res.message


def _point(q, converged=True, phase="regular", message=""):
    return SimpleNamespace(q=q, x=np.array([q, 0.5 * q, 1.0]), converged=converged, phase=phase, message=message)


@pytest.mark.parametrize("solved, why", [
    (_point(2.0), ""),
    (_point(9.9), ""),  # within COLD_STEIN_SPAN = 10 of q_ref = 1
    (_point(2.0, converged=False, message="stalled at residual 3.1e-03"), "stalled at residual 3.1e-03"),
    (_point(2.0, converged=False), "not converged"),
    (_point(0.0, phase="zero"), "phase zero"),
    (_point(12.0), "ran off to q = 12 from q = 1.5 (more than 10x the warm-started point's q = 1), not accepted"),
    (_point(0.09), "ran off to q = 0.09 from q = 1.5"),
    (_point(float("nan")), "phase regular"),  # not a regular point: no finite (q, m, sigma)
    (FloatingPointError("matrix side returned q=nan"), "FloatingPointError: matrix side returned q=nan"),
    (OverflowError("math range error"), "OverflowError: math range error"),  # math.exp far out
    (np.linalg.LinAlgError("Singular matrix"), "LinAlgError: Singular matrix"),
])
def test_the_cold_map_solve_accepts_only_a_converged_regular_point_near_the_reference(solved, why):
    """The one cold-map solve that _cold_gap_resolve and _stein_cold_resolve share (_cold_map_solve): what it accepts
    ("") and the reason it gives otherwise; a solve that raises is reported (None), never raised."""
    from tiedattention.theory.state_evolution import _cold_map_solve

    def solve_regular(alpha, x0, zero_test=True):
        assert alpha == 0.3 and x0[0] == 1.5 and zero_test is False
        if isinstance(solved, Exception):
            raise solved
        return solved

    out, got = _cold_map_solve(SimpleNamespace(_solve_regular=solve_regular), 0.3, np.array([1.5, 0.7, 1.0]), 1.0,
                               "warm-started point's")
    assert got.startswith(why) and bool(got) is bool(why)
    assert out is (None if isinstance(solved, Exception) else solved)


@pytest.mark.slow  # 1-2 min: the T = 3 point of the module docstring
def test_the_t3_point_that_missed_its_cold_map_converges():
    p = Problem.from_options(target="mp:1.419", noise=1.076, lam=0.009454, tokens=3, beta=1.73, beta0=2.48,
                             kappa=2.0)
    res = StateEvolution(p).solve(0.7973)
    assert res.converged, res.message
    assert "cold map from the warm-started fixed point" in res.message
    # the cold map's own fixed point, iterated to 1.4e-14 by hand (_iterate on the cold stage, 2026-12-02):
    # (q, m, Sigma) = (2.80461, 2.46704, 0.571955); the warm point was q = 2.80624
    assert np.allclose(res.x, [2.80461, 2.46704, 0.571955], rtol=1e-3)
    assert res.test_error == pytest.approx(0.6724, abs=3 * res.errors.get("fixed_point_test_error", 1e-3))


def test_the_cold_gap_rides_on_the_result_invisibly():
    """``_cold_gap`` is not a field: annotated plainly it was one, and every JSON record of ``theory`` (and every
    stored curve) carried a "_cold_gap" key (session 27)."""
    from tiedattention.theory.api import record_of, result_of
    from tiedattention.theory.state_evolution import SEResult

    nan = float("nan")
    res = SEResult(0.5, 1.0, 2.0, 1.0, 3.0, nan, nan, nan, nan, 1.7, nan, nan, nan, nan, nan, 1.0, False, 12, 2.5e-3,
                   0.0, "regular", f"{COLD_GAP}2.5e-03 > tol at the warm-started fixed point")
    res._cold_gap = 2.5e-3
    assert res._cold_gap == 2.5e-3 and SEResult._cold_gap is None  # the instance's own, the class keeps None
    assert "_cold_gap" not in res.to_dict() and "_cold_gap" not in record_of(res)
    assert not [k for k in record_of(res) if k.startswith("_")]
    assert result_of(record_of(res))._cold_gap is None and dataclasses.replace(res)._cold_gap is None
