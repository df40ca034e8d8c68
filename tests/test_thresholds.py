"""Thresholds: closed forms, their limits, and the SE route to the interpolation threshold."""

import numpy as np
import pytest
from typer.testing import CliRunner

from tiedattention import Problem
from tiedattention.cli import app
from tiedattention.targets import parse_target
from tiedattention.theory.thresholds import (
    _semicircle_partial,
    bayes_optimal,
    interpolation_noiseless,
    interpolation_threshold,
    perfect_recovery_factorized,
    thresholds,
)


def test_semicircle_partials_against_quadrature():
    from scipy import integrate

    for k in range(3):
        for x in (-1.7, -0.2, 0.9, 2.0):
            ref, _ = integrate.quad(lambda t, k=k: np.sqrt(4 - t * t) * t**k, -2, x, epsabs=1e-12)
            assert _semicircle_partial(k, x) == pytest.approx(ref / (2 * np.pi), abs=1e-12)


def test_closed_form_limits_and_ordering():
    # kappa0 -> 1: everything meets at 1/2; kappa0 -> 0: interpolation 1/4 (PSD cone), PR and BO -> 0
    assert perfect_recovery_factorized(1.0) == 0.5
    assert perfect_recovery_factorized(0.999999) == pytest.approx(0.5, abs=1e-9)
    assert interpolation_noiseless(1e-9) == pytest.approx(0.25, abs=1e-8)
    assert perfect_recovery_factorized(1e-6) == pytest.approx(0.0, abs=1e-3)
    for k0 in (0.1, 0.3, 0.5, 0.8):
        bo, pr, inter = bayes_optimal(k0), perfect_recovery_factorized(k0), interpolation_noiseless(k0)
        assert bo < pr < inter < 0.5


def test_perfect_recovery_value():
    # c solves c - (1-k)[c P0(c) - P1(c)] = 0; check the equation holds and the value at kappa0 = 0.5
    assert perfect_recovery_factorized(0.5) == pytest.approx(0.42217498218, abs=1e-10)


def test_se_route_recovers_noiseless_interpolation_closed_form():
    """The SE equation I - (delta/2) dI/ddelta = Q0 + Delta/2 at eps = 0, as Delta -> 0+."""
    mu = parse_target("mp:0.5").measure()
    vals = [interpolation_threshold(mu, delta_noise) for delta_noise in (1e-2, 1e-4, 1e-8)]
    assert vals[0] < vals[1] < vals[2]  # the threshold decreases with the noise
    assert vals[2] == pytest.approx(interpolation_noiseless(0.5), abs=1e-3)


def test_interpolation_threshold_full_rank_is_half():
    mu = parse_target("mp:4").measure()
    assert interpolation_threshold(mu, 1e-6) == pytest.approx(0.5, abs=2e-3)


def test_thresholds_units():
    th = thresholds(Problem.from_options(tokens=3))
    assert th.bayes_optimal_alpha == pytest.approx(th.bayes_optimal / 5.0)  # (9 + 3 - 2)/2 = 5
    assert th.perfect_recovery_direct == 0.5


def test_cli_thresholds_json_and_errors():
    runner = CliRunner()
    res = runner.invoke(app, ["thresholds", "--json"])
    assert res.exit_code == 0
    import json

    rec = json.loads(res.stdout)
    for key in ("interpolation", "perfect_recovery_factorized", "perfect_recovery_direct", "bayes_optimal"):
        assert key in rec and key + "_alpha" in rec
    assert rec["interpolation_alpha"] == pytest.approx(0.1535, abs=1e-3)
    for bad, name in ((["--lam", "-1"], "--lam"), (["--noise", "-0.1"], "--noise"),
                      (["--target", "mp:0"], "--target"), (["--tokens", "1"], "--tokens"),
                      (["--target", "nope"], "--target"), (["--target", "file:/nonexistent.npy"], "--target")):
        res = runner.invoke(app, ["thresholds", *bad])
        assert res.exit_code == 2, bad
        assert name in res.stderr and res.stderr.count("\n") == 1, res.stderr
    res = runner.invoke(app, ["thresholds"], env={"COLUMNS": "80"})  # the table whole in 80 columns
    assert res.exit_code == 0 and "…" not in res.stdout and f"{rec['interpolation_alpha']:.6f}" in res.stdout


def test_narrow_student_thresholds_respect_the_parameter_count():
    """kappa < 1: the RS narrow threshold (0.24854 at kappa = 0.25, above the parameter count 0.21875, where the
    rank cut binds and RS is unstable) is reported as interpolation_rs; interpolation is capped by the count and
    perfect recovery is impossible below the target's rank. A non-binding cut (kappa = 0.75) changes nothing."""
    wide = thresholds(Problem.from_options())
    th = thresholds(Problem.from_options(kappa=0.25))
    assert th.parameter_count == pytest.approx(0.25 - 0.25**2 / 2, abs=1e-15)
    assert th.interpolation_rs == pytest.approx(0.24854, abs=1e-5)
    assert th.interpolation == th.parameter_count < th.interpolation_rs
    assert th.interpolation_alpha == pytest.approx(th.interpolation / 2)
    assert th.perfect_recovery_factorized is None and th.perfect_recovery_factorized_alpha is None
    assert "parameter count" in th.message and "kappa0" in th.message
    loose = thresholds(Problem.from_options(kappa=0.75))
    assert loose.interpolation == pytest.approx(wide.interpolation, rel=1e-9)
    assert loose.parameter_count > loose.interpolation
    assert wide.message == "" and wide.interpolation_rs is None and wide.kappa == 1.0
    res = CliRunner().invoke(app, ["thresholds", "--kappa", "0.25"])
    assert res.exit_code == 0 and "none" in res.output and "parameter" in res.output
