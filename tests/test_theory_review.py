"""Regressions found by the adversarial review of `tiedattention theory` / `thresholds` (session 11)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.targets import parse_target
from tiedattention.theory.denoisers import narrow_interpolation_alpha_bar
from tiedattention.theory.thresholds import interpolation_noiseless, interpolation_threshold

runner = CliRunner()


@pytest.mark.parametrize("noise", [0.0, 1e-12, pytest.param(1e-10, marks=pytest.mark.slow)])
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
    vals = [narrow_interpolation_alpha_bar(mu, n, 0.7) for n in (1e-10, 0.0)]
    assert 0 < vals[1] - vals[0] < 2e-4  # the Delta^(1/3) approach: 0.43697 at 1e-10, 0.43709 at 0


@pytest.mark.parametrize("args", [["--noise", "0", "--kappa", "0.7"], ["--noise", "1e-12"]])
def test_thresholds_cli_noiseless_no_traceback(args):
    res = runner.invoke(app, ["thresholds", *args, "--json"])
    assert res.exit_code == 0, res.output
    th = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0.43 < th["interpolation"] <= 0.4375 + 1e-12


def _solve(alpha, **options):
    from tiedattention import Problem
    from tiedattention.theory import solve

    d = options.pop("d", None)
    return solve(Problem.from_options(**options), alpha, d=d)


@pytest.mark.parametrize("alpha", [0.215, 0.5, 1.0])
def test_noiseless_lambda0_above_perfect_recovery(alpha):
    """Delta = 0, lambda -> 0+ above perfect recovery (alpha_bar_PR = 0.4222): S_hat = S0 exactly, rank kappa0.

    Before: alpha = 0.215 (alpha_bar in [PR, interpolation)) reported rank NaN ("nan" in the table); alpha = 0.5, 1
    went through the lambda = 0 regular SE with eps = 0 exactly, which counts half of the target's null space as
    fitted: rank 0.75 (solved at lambda = 1e-3 and 1e-6, alpha = 1 has rank 0.5; at alpha = 0.5, lambda = 1e-3 and
    1e-4, 0.56: eigenvalues vanishing with lambda), after 70 iterations "converged to the quadrature accuracy"."""
    r = _solve(alpha, noise=0.0, lam=0.0)
    assert r.converged and r.phase == "interpolating"
    assert r.mse == pytest.approx(0.0, abs=1e-12) and r.q == pytest.approx(1.5) and r.m == pytest.approx(1.5)
    assert r.test_error == pytest.approx(0.0, abs=1e-12) and r.train_error == 0.0
    assert r.rank == pytest.approx(0.5, abs=1e-12)
    assert "perfect recovery" in r.message


def test_noiseless_lambda0_perfect_recovery_other_students():
    """Narrow students with kappa >= kappa0 recover S0 too (kappa = 0.7: a traceback before; kappa = 0.5: 60 s and
    not converged), a spiked target (d = 50: "matrix side returned q=-inf"), and beta != beta0: S_hat = (beta0/beta)
    S0, so the MSE on S is Q0 (1 - beta0/beta)^2 while the predictions are exact."""
    r = _solve(0.5, noise=0.0, lam=0.0, kappa=0.7)
    assert r.converged and r.mse == pytest.approx(0.0, abs=1e-12) and r.rank == pytest.approx(0.5)
    r = _solve(0.5, noise=0.0, lam=0.0, target="spikes:3,2,1", d=50)
    assert r.converged and r.mse == pytest.approx(0.0, abs=1e-12) and r.rank == pytest.approx(3 / 50)
    r = _solve(0.5, noise=0.0, lam=0.0, beta=2.0, beta0=1.0)
    assert r.converged and r.q == pytest.approx(1.5 / 4) and r.m == pytest.approx(1.5 / 2)
    assert r.mse == pytest.approx(1.5 / 4) and r.test_error == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
def test_noiseless_lambda0_perfect_recovery_slow_cases():
    r = _solve(0.5, noise=0.0, lam=0.0, kappa=0.5)  # kappa = kappa0
    assert r.converged and r.mse == pytest.approx(0.0, abs=1e-12) and r.rank == pytest.approx(0.5)
    # below perfect recovery (alpha_bar = 0.4 < 0.4222) the interpolating phase itself: MSE > 0, rank > kappa0
    r = _solve(0.2, noise=0.0, lam=0.0)
    assert r.converged and r.phase == "interpolating" and r.mse > 1e-3 and r.rank > 0.5


def test_order_bounds_and_ignored_at_t3():
    """--order 1000 was accepted and died with a numpy MemoryError traceback (a 1000^4 index grid); it is refused
    in one line. At T >= 3 the channel is a QMC rule and --order is ignored: a warning says so."""
    res = runner.invoke(app, ["theory", "--alpha", "1", "--order", "1000", "--json"])
    assert res.exit_code == 2 and "error: --order:" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["theory", "--alpha", "1", "--order", "65", "--json"])
    assert res.exit_code == 2 and "error: --order:" in res.output
    res = runner.invoke(app, ["theory", "--alpha", "2", "--tokens", "3", "--order", "8", "--lam", "100",
                              "--json"])
    assert res.exit_code == 0, res.output
    assert "--order" in res.stderr and "ignores it" in res.stderr


def test_seq2seq_output_noise_lambda0_direct():
    """The same for the direct model, whose interpolating phase is in closed form (the fast default check)."""
    ref = _solve(0.1, lam=0.0, task="seq2seq", model="direct")
    r = _solve(0.1, lam=0.0, task="seq2seq", model="direct", noise_out=0.1)
    assert r.converged and r.phase == "interpolating" == ref.phase
    assert (r.q, r.m) == (ref.q, ref.m) and r.train_error == pytest.approx(0.2, abs=1e-12)
    assert r.test_error == pytest.approx(ref.test_error + 0.2, abs=1e-12)


@pytest.mark.slow
def test_seq2seq_output_noise_lambda0_is_the_interpolating_phase():
    """seq2seq's output noise only adds T Delta_out to its errors (the estimator is seq2lab's), so lambda -> 0+
    below the interpolation threshold is the interpolating phase. It was skipped whenever Delta_out > 0 (right for
    seq2lab only, whose labels leave the simplex): the lambda = 0 regular SE ran instead, with hundreds of prox
    ConvergenceWarnings, and `theory --alpha 0.05 --lam 0 --task seq2seq --noise-out 0.1` ran for minutes."""
    ref = _solve(0.05, lam=0.0, task="seq2seq")
    r = _solve(0.05, lam=0.0, task="seq2seq", noise_out=0.1)
    assert r.converged and r.phase == "interpolating" == ref.phase
    assert (r.q, r.m, r.rank) == (ref.q, ref.m, ref.rank)
    assert r.test_error == pytest.approx(ref.test_error + 2 * 0.1, abs=1e-12)
    assert r.train_error == pytest.approx(0.2, abs=1e-12) and r.test_error_clean == ref.test_error_clean


def test_rs_fields_output_noise_switching_not_claimed():
    """`theory --rs-stability --noise-out 0.1` reported rs_switching 0.0 and rs_stable true, but the switching
    fraction was never computed with seq2lab output noise (not implemented): it is None (unknown), so is rs_stable,
    and rs_message says why. seq2seq's output noise does not enter the prox: its switching is computed."""
    from tiedattention import Problem
    from tiedattention.theory.api import theory_record
    from tiedattention.theory.stability import rs_fields

    p = Problem.from_options(noise_out=0.1)
    rec = theory_record(p, 1.0)
    out = rs_fields(p, rec)
    assert out["rs_switching"] is None and out["rs_stable"] is None
    assert "output noise" in out["rs_message"] and 0 < out["rs_at"] < 1
    p = Problem.from_options(noise_out=0.1, task="seq2seq")
    out = rs_fields(p, theory_record(p, 1.0))
    assert out["rs_switching"] == 0.0 and out["rs_stable"] is True


def test_thresholds_output_noise_says_why_interpolation_is_zero():
    """`thresholds --noise-out 0.1` printed interpolation 0.000000 without a word; the message now says why."""
    res = runner.invoke(app, ["thresholds", "--noise-out", "0.1", "--json"])
    th = json.loads(res.stdout)
    assert th["interpolation"] == 0.0 and "output noise" in th["message"]
    th = json.loads(runner.invoke(app, ["thresholds", "--noise-out", "0.1", "--task", "seq2seq", "--json"]).stdout)
    assert th["interpolation"] > 0.3 and th["message"] == ""


def test_theory_json_exit_status_on_non_convergence():
    """The table exited 1 where a point did not converge, --json exited 0 (as if all was well): both exit 1 now,
    with one warning line on stderr; the records are printed either way."""
    args = ["theory", "--alpha", "0.5,1", "--lam", "100"]  # the zero phase: instant solves
    for extra in ([], ["--json"]):
        res = runner.invoke(app, [*args, *extra])
        assert res.exit_code == 0, res.output
    # force one non-converged point
    from unittest import mock

    from tiedattention.theory import state_evolution as se_mod

    real = se_mod.StateEvolution.solve

    def failing(self, alpha, init=None):
        res = real(self, alpha, init)
        if alpha == 1.0:
            res.converged, res.message = False, "forced"
        return res

    with mock.patch.object(se_mod.StateEvolution, "solve", failing):
        for extra in ([], ["--json"]):
            res = runner.invoke(app, [*args, *extra])
            assert res.exit_code == 1, res.output
            assert "1 of 2 points did not converge (α = 1):\n  α = 1: forced" in res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [r["converged"] for r in lines] == [True, False]


def test_gauss_hermite_order_is_bounded():
    """The T = 2 channel's tensor rule has order^4 nodes (~100 bytes each while built). channel_setup asked for order
    12 beta, so beta = beta0 = 10 meant order 120 (~20 GB); StateEvolution(channel_options={"order": 1000}) died
    of a MemoryError. The automatic order is capped at 64, a larger one is refused in one line."""
    from tiedattention import Problem
    from tiedattention.errors import ParameterError
    from tiedattention.theory import StateEvolution
    from tiedattention.theory.channel import MAX_GH_ORDER
    from tiedattention.theory.state_evolution import channel_setup

    assert MAX_GH_ORDER == 64
    assert channel_setup(Problem.from_options(beta=10, beta0=10), 1.5)[1]["order"] == 64
    assert channel_setup(Problem.from_options(beta=2, beta0=1), 1.5)[1]["order"] == 24  # unchanged below the cap
    for order in (1, 65, 1000):
        with pytest.raises(ParameterError, match="between 2 and 64"):
            StateEvolution(Problem.from_options(), channel_options={"order": order})


def test_accuracy_not_met_at_max_order_is_said():
    """Where the order cannot be raised any further (max_order; beta = beta0 = 10 starts at the cap 64 and gave a
    fixed-point error 1.2e-3 > accuracy 1e-3 with an empty message) the message says the accuracy was not met."""
    from tiedattention import Problem
    from tiedattention.theory import StateEvolution

    r = StateEvolution(Problem.from_options(), accuracy=1e-7, max_order=16).solve(1.0)
    assert r.converged and r.quadrature == "gh16" and r.errors["fixed_point_test_error"] > 1e-7
    assert "> accuracy 1e-07 at Gauss-Hermite order 16 (max_order 16)" in r.message


def test_indefinite_target_is_not_recovered_by_a_psd_student():
    """A target with negative eigenvalues (spikes:3,-2, file:eig.npy with signs) cannot be represented by the PSD
    student: `thresholds` reported perfect_recovery_factorized (0.0767 here) and, noiseless, the PSD closed form
    (1 - w^2/2)/2 = 0.2696 for the interpolation threshold while its Delta -> 0+ limit is 0.25029 (for an indefinite
    target I(0, 0) = int y_+^2 < Q0, so H(0+) < 0 even at Delta = 0)."""
    from tiedattention import Problem
    from tiedattention.theory import thresholds

    th = [thresholds(Problem.from_options(target="spikes:3,-2", noise=n), d=50) for n in (0.0, 1e-6)]
    assert th[0].perfect_recovery_factorized is None and "negative eigenvalues" in th[0].message
    assert th[0].interpolation == pytest.approx(th[1].interpolation, abs=1e-7)
    assert th[0].interpolation < 0.26
    psd = thresholds(Problem.from_options(target="spikes:3,2", noise=0.0), d=50)
    assert psd.perfect_recovery_factorized is not None and psd.message == ""
    r = _solve(1.0, noise=0.0, lam=0.0, target="spikes:3,-2", d=50)
    assert "perfect recovery" not in r.message and not (r.converged and r.mse < 1e-6)


def test_rs_stability_of_the_interpolating_phase():
    """`theory --lam 0 --rs-stability` left every point below the interpolation threshold at "not computed" (Sigma
    is infinite there) although the lambda -> 0+ AT value D2/(2 alpha_bar) exists (interpolating_phase_at;
    docs/theory/stability.md: 0.668 at alpha_bar = 0.1, as the full SE at lambda = 1e-6, 0.667)."""
    from tiedattention import Problem
    from tiedattention.theory.stability import rs_fields

    p = Problem.from_options(lam=0.0)
    # theory_record(p, 0.05) (an 8 s solve): the phase's (delta, eps) at alpha_bar = 0.1
    rec = {"alpha": 0.05, "alpha_bar": 0.1, "q": 0.8873, "m": 0.5875, "sigma": math.inf, "converged": True,
           "phase": "interpolating", "delta": 2.703992696016352, "eps": 2.8837974735059646, "quadrature": "gh16"}
    out = rs_fields(p, rec)
    assert out["rs_at"] == pytest.approx(0.668, abs=2e-3) and out["rs_stable"] is True
    assert out["rs_switching"] == 0.0


def test_seq2lab_output_noise_lambda0_below_threshold_fails_fast():
    """seq2lab output noise at lambda = 0 below the interpolation threshold: the labels pushed outside the simplex
    cannot be fitted while the student fits everything else, so the ERM has no minimiser. The lambda = 0 SE ran for
    12.7 min without an answer (stopped; 17 GB peak, hundreds of prox warnings) at alpha = 0.05; it now says so at
    once. Above the threshold the lambda = 0 SE is solved as before."""
    import warnings

    from tiedattention.errors import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        r = _solve(0.05, lam=0.0, noise_out=0.1)
    assert not r.converged and r.phase == "failed" and "no minimiser" in r.message and r.iterations == 0
    assert math.isnan(r.test_error)


def test_lam_range_without_optimal_lam_is_flagged():
    """--lam-range without --optimal-lam was silently ignored; a warning line says so."""
    res = runner.invoke(app, ["theory", "--alpha", "1", "--lam", "100", "--lam-range", "1e-3:1", "--json"])
    assert res.exit_code == 0 and "--lam-range is only used with --optimal-lam" in res.stderr
    res = runner.invoke(app, ["theory", "--alpha", "1", "--lam", "100", "--json"])
    assert res.exit_code == 0 and "warning" not in res.stderr


@pytest.mark.parametrize("d", ["0", "-5", "1"])
def test_thresholds_checks_d(d):
    """`thresholds --target powerlaw:1.25 --d 0` died with a ZeroDivisionError traceback (--d -5: ValueError);
    `theory` checked --d, `thresholds` did not."""
    res = runner.invoke(app, ["thresholds", "--target", "powerlaw:1.25", "--d", d])
    assert res.exit_code == 2 and res.output.strip() == f"error: --d: must be an integer >= 2 (got {d})"


@pytest.mark.parametrize("kw", [{"tol": float("nan")}, {"tol": -1.0}, {"max_iter": 0}, {"damping": 0.0},
                                {"accuracy": 0.0}, {"accuracy": float("inf")}])
def test_state_evolution_checks_its_options(kw):
    """StateEvolution(problem, tol=nan) (or -1) solved and reported converged points; such options are refused."""
    from tiedattention import Problem
    from tiedattention.errors import ParameterError
    from tiedattention.theory import StateEvolution

    with pytest.raises(ParameterError, match=next(iter(kw))):
        StateEvolution(Problem.from_options(), **kw)


def test_spectral_refinement_is_bounded():
    """A degenerate SE iterate (seq2lab output noise at lambda = 0, Sigma -> 1e14) asked for the free convolution at
    delta = 4e12, whose adaptive quadrature halved its panels level after level (1e6 panels and counting): the run
    grew to 17 GB. The refinement now stops at a bounded number of panels, the rest goes into the error."""
    from tiedattention.theory.spectral import FreeConvolution

    fc = FreeConvolution(parse_target("mp:0.5").measure(), 4.15e12)
    si = fc.integrals(3.04e9)
    assert si.nodes < 1_000_000 and si.rank == pytest.approx(0.5, abs=1e-3)
    assert si.error < 1e-3 * si.I  # the accepted panels' disagreement is reported, and small here


def test_a_final_evaluation_that_raises_is_a_failed_point(monkeypatch):
    """The final rule's evaluation at an iteration's best point raised FloatingPointError through `theory` (direct
    model, T = 2, lambda = 0, output noise 0.136, beta = 2.77, alpha = 0.48: "conjugates left the admissible region";
    a traceback, session 27). Now a failed point with both reasons; the JSON record keeps no private key."""
    from tiedattention.problem import Problem
    from tiedattention.theory.api import record_of
    from tiedattention.theory.state_evolution import StateEvolution

    se = StateEvolution(Problem.from_options(lam=0.01), max_iter=3)
    real = se._map

    def final_raises(alpha, x, final=False, **kw):
        if final:
            raise FloatingPointError("conjugates left the admissible region (q_hat=2.4e-16, ...)")
        return real(alpha, x, **kw)

    monkeypatch.setattr(se, "_map", final_raises)
    monkeypatch.setattr(se, "root_fallback", False)
    res = se._solve_regular_staged(0.5, None)
    assert res.phase == "failed" and not res.converged and math.isnan(res.q)
    assert res.message == ("no convergence in 3 iterations; the map at the iteration's best point could not be "
                           "evaluated (conjugates left the admissible region (q_hat=2.4e-16, ...))")
    assert not [k for k in record_of(res) if k.startswith("_")]
