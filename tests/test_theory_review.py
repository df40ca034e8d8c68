"""Regressions found by the adversarial review of `tiedattention theory` / `thresholds` (session 11)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.targets import parse_target
from tiedattention.theory.denoisers import narrow_interpolation_alpha_bar
from tiedattention.theory.thresholds import interpolation_noiseless, interpolation_threshold

runner = CliRunner()


@pytest.mark.parametrize("noise", [0.0, 1e-15, 1e-12, 1e-10])
def test_interpolation_threshold_tiny_noise(noise):
    """Delta -> 0+: H(delta) = -Delta/2 + O(delta^3) has its root below the scan's first point (1e-3) for
    Delta <~ 1e-9, which raised "no bracket" (a traceback from `thresholds --noise 1e-10`). The threshold tends
    to the closed form (1 + 2 kappa0 - kappa0^2)/4 = 0.4375, from below (it decreases with Delta)."""
    mu = parse_target("mp:0.5").measure()
    wide = interpolation_threshold(mu, noise)
    assert wide == pytest.approx(interpolation_noiseless(0.5), abs=2e-4)  # 0.43738 at Delta = 1e-10
    assert wide <= interpolation_noiseless(0.5) + 1e-12
    # narrow students whose cut does not remove target energy (kappa >= kappa0): the same limit structure; at
    # kappa >= (1 + kappa0)/2 the cut does not bind at delta -> 0 and the value is the wide one
    assert narrow_interpolation_alpha_bar(mu, noise, 0.8) == pytest.approx(wide, abs=2e-5)
    k07 = narrow_interpolation_alpha_bar(mu, noise, 0.7)
    assert 0.4365 < k07 < wide + 1e-9  # the binding cut lowers it (0.43709 at Delta = 0)


def test_narrow_noiseless_limit_is_the_small_noise_limit():
    """Delta = 0 is the limit Delta -> 0+: the narrow value at Delta = 0 continues the noisy ones."""
    mu = parse_target("mp:0.5").measure()
    vals = [narrow_interpolation_alpha_bar(mu, n, 0.7) for n in (1e-4, 1e-6, 1e-10, 0.0)]
    assert vals[0] < vals[1] < vals[2] < vals[3]
    assert vals[3] - vals[2] < 2e-4  # the Delta^(1/3) approach: 0.43697 at 1e-10, 0.43709 at 0


@pytest.mark.parametrize("args", [["--noise", "0", "--kappa", "0.7"], ["--noise", "1e-12"]])
def test_thresholds_cli_noiseless_no_traceback(args):
    res = runner.invoke(app, ["thresholds", *args, "--json"])
    assert res.exit_code == 0, res.output
    th = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0.43 < th["interpolation"] <= 0.4375 + 1e-12
