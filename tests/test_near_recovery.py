"""Near perfect recovery (noiseless, small lambda, alpha far above the threshold): rho = m/sqrt(q Qz) -> 1.

There the solver's correlation coordinate atanh(rho) is known only to the spectral rule's error over 1 - rho^2
(``_correlation_rounding``), and the free convolution of a discrete target at delta ~ 4e-5 is 100 bumps whose edges
are known only to rounding (tests/test_spectral.py). Before: the d = 100 power law at T = 2, lambda = 1e-4,
alpha = 2 took 403 evaluations (224 s under load), its order-12 comparison failed ("non-finite integrals at
delta = 3.9e-5": no fixed-point error estimate); at T = 3 it stalled unconverged (residual 5.0e-3, 322 s).
docs/theory/state_evolution.md, "Near perfect recovery".
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.errors import ParameterError
from tiedattention.theory import StateEvolution
from tiedattention.theory import state_evolution as sem

NOISELESS_PL = dict(target="powerlaw:1.25", noise=0.0, lam=1e-4)


def test_correlation_rounding_is_the_spectral_error_over_one_minus_rho_squared():
    ch = SimpleNamespace(m_hat=2.0, sigma_hat=3.0)
    ms = SimpleNamespace(spectral_error=4e-11, q=0.8)
    y = np.array([0.0, 9.0, 0.0])
    integral = 0.8 * (3.0 / 2.0) ** 2  # I = q (sigma_hat/m_hat)^2
    rho = math.tanh(9.0)
    assert sem._correlation_rounding(y, ch, ms) == pytest.approx(4e-11 / integral / (1 - rho * rho), rel=1e-6)
    # fixed spectral rules carry no error estimate: no rounding allowance
    assert sem._correlation_rounding(y, ch, SimpleNamespace(spectral_error=0.0, q=0.8)) == 0.0
    # S_hat = 0 (q = 0): nothing to resolve, and no division by zero
    assert sem._correlation_rounding(y, ch, SimpleNamespace(spectral_error=4e-11, q=0.0)) == 0.0
    # at a moderate correlation it is far below any tolerance
    assert sem._correlation_rounding(np.array([0.0, 1.0, 0.0]), ch, ms) < 1e-10


@pytest.mark.parametrize("f, accepted", [
    ([1e-12, 2e-3, -1e-12], True),  # only atanh(rho) is off, within its rounding (5e-3)
    ([1e-12, 8e-3, -1e-12], False),  # beyond it
    ([1e-6, 2e-3, -1e-12], False),  # q is not converged: the allowance is for atanh(rho) alone
])
def test_iterate_accepts_atanh_rho_within_its_rounding_only(f, accepted, monkeypatch):
    se = StateEvolution(Problem.from_options())
    f = np.array(f)
    y_fix = np.array([0.0, 9.0, 0.0])
    rounding = 5e-3
    err = rounding * (1 - math.tanh(9.0) ** 2)  # I = q (sigma_hat/m_hat)^2 = 1
    ch = SimpleNamespace(m_hat=1.0, sigma_hat=1.0, error_estimate={})
    ms = SimpleNamespace(spectral_error=err, q=1.0)
    monkeypatch.setattr(se, "_g", lambda alpha, y: (y + f, ch, ms))  # a map that never moves its residual
    st = se._iterate(0.5, y_fix.copy(), se.tol, max_iter=30, stall=3)
    assert st["converged"] is accepted
    if accepted:
        assert st["it"] == 1 and st["resid"] == pytest.approx(2e-3)


def test_noiseless_power_law_near_perfect_recovery_t2():
    """The default route (Stein forms) and the Jacobian forms alone reach the same point within the fixed-point error
    estimates, which the order-12 comparison now provides and which include the correlation's rounding (+-r in
    atanh rho: 1.2e-2 and 5.4e-3 here). Measured: test error 3.426457e-9 +- 7.9e-11 and 3.422900e-9 +- 3.7e-11, 126
    and 124 evaluations (session 20, without the rounding in the estimates: 3.42643e-9 +- 7.8e-12 after 242)."""
    problem = Problem.from_options(**NOISELESS_PL, tokens=2)
    stein = StateEvolution(problem, d=100).solve(2.0)
    jac = StateEvolution(problem, d=100, channel_options={"conjugates": "jacobian"}).solve(2.0)
    for r in (stein, jac):
        assert r.converged and r.phase == "regular", r.message
        assert 0.0 < r.test_error < 1e-8 and r.mse < 1e-7 and r.rank > 0.999
        assert "fixed_point_test_error" in r.errors, r.message
    assert stein.iterations < 150  # 403, then 242 before
    for r in (stein, jac):  # converged to the correlation's rounding, which the estimates include
        assert r.errors["correlation_rounding"] > 0 and "spectral rounding of the correlation" in r.message
    tol = stein.errors["fixed_point_test_error"] + jac.errors["fixed_point_test_error"]
    assert abs(stein.test_error - jac.test_error) <= tol
    assert abs(stein.mse - jac.mse) <= stein.errors["fixed_point_mse"] + jac.errors["fixed_point_mse"]


@pytest.mark.slow
def test_noiseless_power_law_near_perfect_recovery_t3():
    """T = 3 (QMC): converged to the rounding of atanh(rho) in 23 evaluations, 27.5 s (before: stalled at residual
    5.0e-3 after 126 evaluations, 322 s, test error 1.48e-9)."""
    problem = Problem.from_options(**NOISELESS_PL, tokens=3, kappa=2.0)
    r = StateEvolution(problem, d=100).solve(2.0)
    assert r.converged and r.phase == "regular", r.message
    assert "spectral rounding of the correlation" in r.message
    assert 0.0 < r.test_error < 1e-8 and abs(r.q - 1.0) < 1e-4


# the MP target (kappa0 = 0.5) without noise at lambda = 1e-4: 1 - rho^2 ~ 1e-8 from alpha ~ 1 on
NOISELESS_MP = dict(target="mp:0.5", noise=0.0, lam=1e-4, tokens=2)
# a point next to the alpha = 1.106 fixed point (y = log q, atanh rho, log Sigma): 1 - rho^2 = 1.2e-8
Y_NEAR = np.array([0.4047, 9.815, -0.3426])


def test_cond_var_is_q_minus_m_squared_over_qz_to_round_off():
    """Where q and m resolve it, the conditional variance handed in gives the same channel to round-off; a value that
    is not q - m^2/Qz is refused, naming it."""
    se = StateEvolution(Problem.from_options())
    q, m, sigma = 0.8, 0.5, 0.7
    qz = se.q0 + 0.25
    plain = se.channel_final.moments(1.0, q, m, sigma)
    given = se.channel_final.moments(1.0, q, m, sigma, cond_var=q - m * m / qz)
    for k in ("q_hat", "m_hat", "sigma_hat"):
        assert getattr(given, k) == pytest.approx(getattr(plain, k), rel=1e-13, abs=0.0)
    for k in ("m_hat", "sigma_hat"):
        assert given.stein[k] == pytest.approx(plain.stein[k], rel=1e-12, abs=0.0)
    with pytest.raises(ParameterError, match="cond_var"):
        se.channel_final.moments(1.0, q, m, sigma, cond_var=1.01 * (q - m * m / qz))


def test_stein_forms_are_smooth_in_the_correlation_near_perfect_recovery():
    """The Stein forms divide by det = Qz q - m^2 = Qz q (1 - rho^2). From q and m that difference keeps ~8 digits at
    1 - rho^2 = 1.2e-8, so m_hat and sigma_hat scattered by ~4e-9 relative under 1e-12 moves of the point and the
    solve stalled at residual ~1e-9 (then restarted from the Jacobian forms: 769 evaluations for one warm step).
    With the solver's exact q (1 - rho^2) they are smooth to round-off: along atanh(rho) they follow a straight line
    to < 1e-11 relative."""
    se = StateEvolution(Problem.from_options(**NOISELESS_MP))
    h = 1e-9
    rows = []
    for k in range(-3, 4):
        y = Y_NEAR + np.array([0.0, k * h, 0.0])
        _, ch, _ = se._map(1.106, se._to_x(y), final=True, cond_var=sem._cond_var(y))
        rows.append((ch.m_hat, ch.sigma_hat))
    t = np.arange(-3, 4, dtype=float)
    for col in np.array(rows).T:
        line = np.polyval(np.polyfit(t, col, 1), t)
        assert np.max(np.abs(col - line)) / abs(col[3]) < 1e-11


def test_cond_var_of_y_keeps_its_relative_precision():
    """Handed over below 1 - rho^2 = COND_VAR_BELOW only: elsewhere q and m resolve it and the channel is unchanged."""
    for y1 in (5.0, 9.815, 20.0, 400.0):
        y = np.array([0.4, y1, 0.0])
        exact = math.exp(0.4) / math.cosh(y1) ** 2 if y1 < 300 else 4.0 * math.exp(0.4 - 2.0 * y1)
        assert sem._cond_var(y) == pytest.approx(exact, rel=1e-14)
    assert sem._cond_var(np.array([0.4, 0.3, 0.0])) is None
    assert sem._cond_var(np.array([0.4, 4.0, 0.0])) is None  # 1 - rho^2 = 1.3e-3
    assert sem._cond_var(np.array([0.4, 4.5, 0.0])) is not None  # 4.9e-4
    assert sem._cond_var(np.array([0.4, -9.815, 0.0])) == sem._cond_var(np.array([0.4, 9.815, 0.0]))  # even in rho


def test_noiseless_mp_point_converges_with_the_stein_forms():
    """MP kappa0 = 0.5, Delta = 0, lambda = 1e-4, alpha = 2: the Stein forms converge (q and Sigma to tol, atanh rho
    to its rounding) without the Jacobian-forms restart. Before: 236 evaluations, accepted at the quadrature floor
    (residual 1.1e-6) on the Jacobian forms' point, test error 4.38604e-9. Now 44 evaluations, 4.42875e-9; order 24
    gives 4.42097e-9 and order 32 4.42013e-9: the Stein point is the nearer one, within its fixed-point estimate."""
    problem = Problem.from_options(**NOISELESS_MP)
    r = StateEvolution(problem).solve(2.0)
    assert r.converged and r.phase == "regular", r.message
    assert "spectral rounding of the correlation" in r.message and "started again" not in r.message
    assert r.iterations < 150
    fine = StateEvolution(problem, channel_options={"order": 24}).solve(2.0)
    assert fine.converged, fine.message
    assert abs(r.test_error - fine.test_error) <= r.errors["fixed_point_test_error"]
    assert abs(r.test_error - fine.test_error) / fine.test_error < 5e-3


def test_warm_step_near_perfect_recovery_needs_no_cold_retry():
    """A warm step along the noiseless curve (alpha 0.959 -> 1.106): the point converged to the correlation's rounding
    counts as converged, so solve_warm keeps it, and so does its order-12 comparison solve (before: a cold retry and
    Jacobian-forms restarts, 769 evaluations, 25 s; now 17, 0.8 s)."""
    se = StateEvolution(Problem.from_options(**NOISELESS_MP))
    start = se.solve(0.959)
    r = se.solve_warm(1.106, start)
    assert r.converged and "started again" not in r.message, r.message
    assert r.iterations < 100
    cold = StateEvolution(Problem.from_options(**NOISELESS_MP)).solve(1.106)
    assert abs(r.test_error - cold.test_error) <= r.errors["fixed_point_test_error"]


def test_cold_start_near_perfect_recovery_follows_the_drift():
    """MP kappa0 = 0.5, Delta = 0, lambda = 1e-4, alpha = 1 from the cold start: atanh rho drifts by ~0.55 an
    evaluation with no new best residual, and the stall rule (25) cut every stage short; the hybr fallbacks and the
    Jacobian-forms restart then took 1061 evaluations and 38 s. Near recovery the stall rule waits RECOVERY_STALL:
    164 evaluations, 3-4 s."""
    assert sem.RECOVERY_STALL > StateEvolution(Problem.from_options()).stall
    se = StateEvolution(Problem.from_options(**NOISELESS_MP))
    r = se.solve(1.0)
    assert r.converged and "started again" not in r.message, r.message
    assert r.iterations < 300
    warm = se.solve_warm(1.0, se.solve(0.959))  # the same point reached along the curve
    assert abs(r.test_error - warm.test_error) <= r.errors["fixed_point_test_error"]
