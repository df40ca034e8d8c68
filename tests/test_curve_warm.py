"""Warm starts along learning curves: quadratic extrapolation in log alpha and the secant pairs a converged point
hands to the next solve (docs/theory/state_evolution.md, "Warm starts along a curve")."""

import contextlib
import dataclasses
import math
import warnings

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.theory import StateEvolution
from tiedattention.theory import state_evolution as sem


def test_extrapolation_is_exact_for_polynomials_and_refuses_far_targets():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 3))
    ts = [0.0, 0.1, 0.25]
    ys = [a + b * t + c * t * t for t in ts]
    for t in (0.3, 0.45, 0.05):
        assert np.allclose(sem._extrapolate(ts, ys, t), a + b * t + c * t * t, rtol=0, atol=1e-13)
    lin = [a + b * t for t in ts[1:]]
    assert np.allclose(sem._extrapolate(ts[1:], lin, 0.4), a + b * 0.4, rtol=0, atol=1e-13)
    assert sem._extrapolate(ts, ys, 0.25 + 2.01 * 0.15) is None  # beyond twice the last spacing
    assert sem._extrapolate(ts[:1], ys[:1], 0.1) is None  # one point: nothing to extrapolate
    # a quadratic start is closer than a linear one on a curved path (the default problem: 5-10x, docs)
    t = 0.4
    quad, linear = sem._extrapolate(ts, ys, t), sem._extrapolate(ts[1:], ys[1:], t)
    exact = a + b * t + c * t * t
    assert np.max(np.abs(quad - exact)) < 1e-12 < np.max(np.abs(linear - exact))


@contextlib.contextmanager
def _priors():
    """The secant pairs (``prior``) each Anderson stage of the solves inside the block starts from, in order."""
    seen: list = []
    iterate = sem.StateEvolution._iterate

    def spy(self, alpha, y, tol, prior=None, **kw):
        seen.append(prior)
        return iterate(self, alpha, y, tol, prior=prior, **kw)

    sem.StateEvolution._iterate = spy
    try:
        yield seen
    finally:
        sem.StateEvolution._iterate = iterate


@pytest.fixture(scope="module")
def se():
    return StateEvolution(Problem.from_options())


def test_a_result_carries_its_secant_pairs_invisibly(se):
    r = se.solve(0.4)
    dy, df = r._secant_pairs
    assert dy.shape == df.shape and dy.shape[0] == 3 and 1 <= dy.shape[1] <= se.anderson
    assert np.all(np.isfinite(dy)) and np.all(np.isfinite(df))
    # the accurate stage took one evaluation (no pair of its own): the coarse stage's pairs were handed on, to the
    # low-order comparison solve as well
    assert dy.shape[1] >= 3
    assert "_secant_pairs" not in r.to_dict() and "_secant_pairs" not in dataclasses.asdict(r)
    assert "_secant_pairs" not in repr(r)
    # a copy with replaced fields is a plain result (nothing stale rides along)
    assert getattr(dataclasses.replace(r, alpha=0.5), "_secant_pairs", None) is None


def test_warm_start_seeds_anderson_with_the_pairs_and_reaches_the_same_point(se):
    r1 = se.solve(0.4)
    with _priors() as seen:
        warm = se.solve(0.45, init=r1)
    assert seen[0] is r1._secant_pairs  # the first stage starts from the carried pairs
    plain = se.solve(0.45, init=r1.x)  # a bare (q, m, sigma): no pairs
    assert warm.converged and plain.converged
    for key in ("test_error", "q", "m", "sigma"):
        assert getattr(warm, key) == pytest.approx(getattr(plain, key), rel=1e-9)


def test_learning_curve_needs_fewer_iterations_and_matches_cold_solves(se, monkeypatch):
    alphas = np.geomspace(0.05, 2.0, 12)
    curve = se.learning_curve(alphas)
    assert all(r.converged for r in curve)
    cold = [se.solve(alphas[i]) for i in (2, 7)]
    for i, c in zip((2, 7), cold, strict=True):
        assert curve[i].test_error == pytest.approx(c.test_error, abs=1e-9)
    # the same curve without the carried pairs (extrapolated starts only): more iterations in all (141 vs 155 when
    # written); same points
    warm_start = sem._warm_start
    monkeypatch.setattr(sem, "_warm_start", lambda x, pairs: warm_start(x, None))
    bare = se.learning_curve(alphas)
    assert sum(r.iterations for r in curve) < sum(r.iterations for r in bare)
    assert max(abs(a.test_error - b.test_error) for a, b in zip(curve, bare, strict=True)) < 1e-9


def test_learning_curve_extrapolates_quadratically_in_log_alpha(se, monkeypatch):
    starts = []
    solve_warm = sem.StateEvolution.solve_warm

    def spy(self, alpha, init):
        starts.append((alpha, init))
        return solve_warm(self, alpha, init)

    monkeypatch.setattr(sem.StateEvolution, "solve_warm", spy)
    alphas = [0.3, 0.4, 0.5, 0.6]
    curve = se.learning_curve(alphas)
    assert starts[0][1] is None and starts[1][1] is curve[0]  # cold, then the previous point
    ys = [se._to_y(r.x) for r in curve]
    linear = ys[1] + (math.log(0.5 / 0.4) / math.log(0.4 / 0.3)) * (ys[1] - ys[0])
    assert np.allclose(se._to_y(np.asarray(starts[2][1])), linear, rtol=0, atol=1e-12)
    t = [math.log(a) for a in alphas[:3]]
    quad = sem._extrapolate(t, ys[:3], math.log(0.6))
    assert np.allclose(se._to_y(np.asarray(starts[3][1])), quad, rtol=0, atol=1e-12)
    assert np.max(np.abs(quad - ys[3])) < np.max(np.abs(ys[2] + (ys[2] - ys[1]) * math.log(0.6 / 0.5)
                                                        / math.log(0.5 / 0.4) - ys[3]))
    assert starts[3][1]._secant_pairs is curve[2]._secant_pairs


def test_qmc_solves_neither_carry_nor_take_pairs():
    """QMC maps are noisy (replica error ~1e-5): their late secant pairs are noise, so they are not handed on."""
    se = StateEvolution(Problem.from_options(target="spikes:4,2.5,1.5"), d=400)  # Q0 = 0.061: the large-noise QMC
    r = se.solve(0.01)
    assert r.converged and r.quadrature.startswith("qmc")
    assert getattr(r, "_secant_pairs", None) is None
    gh = StateEvolution(Problem.from_options()).solve(0.4)
    qmc = se._noise_solver()
    with _priors() as seen:  # a Gauss-Hermite result's pairs offered to a QMC solve are not taken
        qmc._solve_regular(0.012, sem._warm_start(r.x, gh._secant_pairs), zero_test=False)
    assert seen and seen[0] is None


def _fake_regular(se, monkeypatch, warm_ok, cold_ok):
    """``_solve_regular`` replaced: a converged copy of a real point, or an unconverged one, by start (warm or cold);
    the warm solve also issues a RuntimeWarning. Returns the list of starts seen. (The failed cold solve stalls
    within LAM_FAR of a fixed point, so that solve() does not continue it in lambda: tests/test_lam_continuation.py.)"""
    real = se.solve(0.5)
    seen = []

    def fake(alpha, init):
        warm = init is not None
        seen.append("warm" if warm else "cold")
        if warm:
            warnings.warn("a warm-solve remark", RuntimeWarning, stacklevel=2)
        ok = warm_ok if warm else cold_ok
        return dataclasses.replace(real, converged=ok, residual=real.residual if ok else (1e-2 if warm else 5e-3),
                                   message="" if ok else f"stalled at residual {'1.00e-02' if warm else '5.00e-03'}")

    monkeypatch.setattr(se, "_solve_regular", fake)
    # (a failed cold solve is not solved again from scaled starts here: tests/test_stalled_scaled_starts.py)
    monkeypatch.setattr(se, "_scaled_starts", lambda alpha, solver, base, zero_test: base)
    return seen


@pytest.mark.parametrize("warm_ok, cold_ok, starts, kept, convergence", [
    (False, True, ["warm", "cold"], "cold", []),  # the cold solve replaces the warm one: no "did not converge"
    (False, False, ["warm", "cold"], "warm", ["1.00e-02"]),  # both fail: the warm one is returned, and its warning
    (True, True, ["warm"], "warm", []),  # a warm point that converges: no cold solve
])
def test_solve_warm_warns_only_about_the_returned_solve(warm_ok, cold_ok, starts, kept, convergence, monkeypatch):
    se = StateEvolution(Problem.from_options())
    seen = _fake_regular(se, monkeypatch, warm_ok, cold_ok)
    init = np.array([1.0, 0.5, 5.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = se.solve_warm(0.5, init)
    assert seen == starts
    assert res.converged == (warm_ok if kept == "warm" else cold_ok)
    assert res.residual == 1e-2 if kept == "warm" and not warm_ok else res.residual <= se.tol
    said = [str(w.message) for w in caught if issubclass(w.category, sem.ConvergenceWarning)]
    assert len(said) == len(convergence) and all(c in s for c, s in zip(convergence, said, strict=True)), said
    # the warm solve's other warnings are issued whichever solve is kept
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == ["a warm-solve remark"]


def test_solve_warm_keeps_the_warm_warnings_when_it_raises(monkeypatch):
    se = StateEvolution(Problem.from_options())

    def fake(alpha, init):
        warnings.warn("before the failure", RuntimeWarning, stacklevel=2)
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(se, "_solve_regular", fake)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ZeroDivisionError):
        warnings.simplefilter("always")
        se.solve_warm(0.5, np.array([1.0, 0.5, 5.0]))
    assert [str(w.message) for w in caught] == ["before the failure"]


def test_solve_warm_keeps_the_warm_warnings_when_the_cold_solve_raises(monkeypatch):
    se = StateEvolution(Problem.from_options())
    real = se.solve(0.5)

    def fake(alpha, init):
        if init is None:
            raise KeyError("cold boom")  # not an ArithmeticError/ValueError: it propagates
        warnings.warn("a warm-solve remark", RuntimeWarning, stacklevel=2)
        return dataclasses.replace(real, converged=False, residual=1e-2, message="stalled at residual 1.00e-02")

    monkeypatch.setattr(se, "_solve_regular", fake)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(KeyError):
        warnings.simplefilter("always")
        se.solve_warm(0.5, np.array([1.0, 0.5, 5.0]))
    said = [str(w.message) for w in caught]
    assert said[0] == "a warm-solve remark" and "did not converge" in said[1] and len(said) == 2
