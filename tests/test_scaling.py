"""Scaling laws of power-law targets: the scaling-limit SE, e_0, exponent fits, lambda rules, CLI."""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.errors import ParameterError
from tiedattention.problem import Problem
from tiedattention.theory.scaling import (
    LamRule,
    PowerLawModes,
    ScalingLimit,
    fit_exponent,
    limit_curve,
    parse_lam_rule,
    predicted_exponent,
    saturation_error,
)


def _problem(gamma=1.25, **kw):
    return Problem.from_options(target=f"powerlaw:{gamma}", noise=0.5, **kw)


def test_modes_normalisation_and_counts():
    m = PowerLawModes(1.25)
    t = m.theta(10)
    assert t[0] == pytest.approx(1 / math.sqrt(1.341487257250917), rel=1e-12)  # zeta(2.5)
    # sum of all t_i^2 is Q0 = 1: first 10 plus the Hurwitz tail
    assert float(np.sum(t**2)) + m.tail_energy(10) == pytest.approx(1.0, abs=1e-13)
    for tau in (0.3, 0.05, 1e-3, 1e-5):
        k = m.count_above(tau)
        th = m.theta(k + 1)
        assert th[k - 1] > tau >= th[k]
    with pytest.raises(ParameterError):
        PowerLawModes(0.5)
    assert PowerLawModes(0.5, cutoff=10).tail_energy(10) == 0.0


def test_lam_rules_parse():
    assert parse_lam_rule("optimal").kind == "optimal"
    r = parse_lam_rule("power:0.75:0.3")
    assert (r.p, r.value) == (0.75, 0.3)
    assert r.lam(16.0, 4.0) == pytest.approx(0.3 * 8 / 2)
    assert parse_lam_rule("fixed:0.01").lam(1e3, 100) == 0.01
    for bad in ("fixed:-1", "power:x", "best", "optimal:1"):
        with pytest.raises(ParameterError):
            parse_lam_rule(bad)


def test_fit_exponent_recovers_slope():
    n = np.geomspace(1e2, 1e6, 12)
    fit = fit_exponent(n, 3.0 * n**-0.6 * (1 + 0.01 * np.sin(np.arange(12))))
    assert fit["fitted_exponent"] == pytest.approx(0.6, abs=5e-3)
    lo, hi = fit["fitted_exponent_ci"]
    assert lo < 0.6 < hi and hi - lo < 0.02
    with pytest.raises(ValueError):
        fit_exponent([1, 2], [1, 0.5])


def test_predicted_exponents():
    assert predicted_exponent(1.25, LamRule("optimal"))[0] == pytest.approx(0.6)
    assert predicted_exponent(2.0, LamRule("power", 1.0, 0.75))[0] == pytest.approx(0.375)
    assert predicted_exponent(2.0, LamRule("fixed", 0.01))[0] == 1.0
    assert predicted_exponent(2.0, LamRule("optimal"), kappa=0.5)[0] == 0.0


def test_saturation_error_is_the_minimum_on_the_ray_and_off_it():
    """e_0 = min_c e(c^2, c); moving off the ray (q > m^2/Q0) only increases the error (the excess is linear in
    the orthogonal error V = q - m^2/Q0), which is what makes e_test - e_0 track the MSE's scaling."""
    sl = ScalingLimit(_problem())
    e0, c0 = saturation_error(sl)
    ch = sl.channel_final
    assert 0.5 < c0 < 1.0  # noisy labels: the best S is a shrunk S0
    for c in (c0 * 0.9, c0 * 1.1):
        assert ch.test_error(c * c, c)[0] > e0
    slopes = [(ch.test_error(c0**2 + v, c0)[0] - e0) / v for v in (1e-3, 1e-2)]
    assert slopes[0] > 0 and slopes[1] == pytest.approx(slopes[0], rel=0.05)


def test_limit_spike_matrix_side_consistency():
    """Limit matrix side: q, m, Sigma are finite sums over the recovered spikes; m equals the Stein-identity
    form s[I - (delta/2) dI/ddelta - (eps/2) dI/deps] of the finite-d denoiser, in scaling units."""
    sl = ScalingLimit(_problem())
    sl._ratio, sl._lam_t = 2.5, None
    qh, mh, sh = 0.04, 1.3, 2.0
    ms = sl.limit_side(qh, mh, sh)
    tau = math.sqrt(qh) / mh
    sp = sl.spikes(tau, 2.5 * tau)
    f = sp["y"] - 2.5 * tau
    s = mh / sh
    i_ = np.sum(f**2)
    di_ddelta_half = 2 * tau**2 * np.sum(f / sp["theta"])  # (delta/2) dI/ddelta in scaling units
    ei = -2.5 * tau * np.sum(f)  # (eps/2) dI/deps
    assert ms.m == pytest.approx(s * (i_ - di_ddelta_half - ei), rel=1e-12)
    assert ms.q == pytest.approx(s * s * i_, rel=1e-12)
    # r > 2: the weakest detected modes (y = t + tau^2/t < eps) are cut; r = 2 keeps every detected mode
    assert 1 <= sp["k_star"] < sl.modes.count_above(tau) == sl.spikes(tau, 2 * tau)["k_star"]
    sl._ratio = 1.5
    with pytest.raises(FloatingPointError):  # the bulk would be fitted: excess of order d
        sl.limit_side(qh, mh, sh)


@pytest.fixture(scope="module")
def limit125():
    return limit_curve(_problem(1.25), np.geomspace(1e3, 1e7, 9), LamRule("optimal"))


def test_limit_curve_optimal_exponent_and_sequential_recovery(limit125):
    """gamma = 1.25, optimal lambda, d = inf: exponent within 0.03 of 1 - 1/(2 gamma) = 0.6; the optimum sits at
    the bulk edge (eps = 2 delta); k* grows like nu^(1/(2 gamma)); the excess decreases monotonically."""
    recs = limit125
    assert all(r["converged"] for r in recs)
    assert all(r["ratio"] == 2.0 for r in recs)
    fit = fit_exponent([r["nu"] for r in recs], [r["excess"] for r in recs])
    assert abs(fit["fitted_exponent"] - 0.6) < 0.03
    ex = [r["excess"] for r in recs]
    assert all(a > b > 0 for a, b in zip(ex, ex[1:], strict=False))
    ks = np.array([r["k_star"] for r in recs])
    kfit = np.polyfit(np.log([r["nu"] for r in recs]), np.log(ks), 1)[0]
    assert kfit == pytest.approx(1 / 2.5, abs=0.03)
    # lambda_opt ~ nu^(1/2) (lambda sqrt(d) = delta m_hat = sqrt(q_hat))
    lfit = np.polyfit(np.log([r["nu"] for r in recs]), np.log([r["lam_t"] for r in recs]), 1)[0]
    assert lfit == pytest.approx(0.5, abs=0.03)


def test_limit_curve_over_regularised_exponent():
    recs = limit_curve(_problem(1.25), np.geomspace(1e4, 1e8, 7), LamRule("power", 0.3, 0.75))
    assert all(r["converged"] and r["ratio"] > 2 for r in recs)
    fit = fit_exponent([r["nu"] for r in recs], [r["excess"] for r in recs])
    assert abs(fit["fitted_exponent"] - 0.3) < 0.03


def test_limit_rejects_fixed_rule_and_non_powerlaw():
    with pytest.raises(ParameterError):
        limit_curve(_problem(), [1e3, 1e4], LamRule("fixed", 0.01))
    with pytest.raises(ParameterError):
        ScalingLimit(Problem.from_options(target="mp:0.5"))


def test_cli_scaling_json():
    res = CliRunner().invoke(app, ["scaling", "--target", "powerlaw:2", "--d", "inf", "--n-range", "1e3:1e6",
                                   "--points", "6", "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert len(lines) == 7
    last = lines[-1]
    assert last["predicted_exponent"] == pytest.approx(0.75)
    assert abs(last["fitted_exponent"] - 0.75) < 0.05
    assert "optimal" in last["regime"]
    assert all(r["converged"] for r in lines[:-1])


def test_cli_scaling_bad_input():
    r = CliRunner().invoke(app, ["scaling", "--target", "mp:0.5", "--json"])
    assert r.exit_code == 2 and "--target" in r.output
    r = CliRunner().invoke(app, ["scaling", "--lam-rule", "best", "--json"])
    assert r.exit_code == 2 and "--lam-rule" in r.output
    r = CliRunner().invoke(app, ["scaling", "--n-range", "5:1", "--json"])
    assert r.exit_code == 2 and "--n-range" in r.output
