"""State evolution: limits, thresholds through the SE route, determinism, task equivalences."""

import json
import math
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from tiedattention import Problem
from tiedattention.cli import app
from tiedattention.targets import parse_target
from tiedattention.theory import StateEvolution
from tiedattention.theory.state_evolution import solve_interpolating_phase
from tiedattention.theory.thresholds import perfect_recovery_factorized, perfect_recovery_se


@pytest.fixture(scope="module")
def se_default():
    return StateEvolution(Problem.from_options())


def test_reference_point_converges_and_is_sane(se_default):
    r = se_default.solve(0.5)
    assert r.converged and r.residual <= 1e-10 and r.phase == "regular"
    uniform = se_default.channel_final.uniform_error()
    assert uniform == pytest.approx(0.444, abs=2e-3)  # THEORY.md: about 0.44 for uniform attention
    assert 0.07 < r.test_error < uniform
    assert r.test_error_clean < r.test_error
    assert r.mse == pytest.approx(se_default.q0 - 2 * r.m + r.q)
    assert 0 < r.rank < 1 and 0 < r.train_error < r.test_error
    # objective/d^2 = alpha * train + lambda (1/d) Tr S_hat with (1/d) Tr S_hat > 0
    assert r.objective > 0.5 * r.train_error


def test_learning_curve_decreases_to_plateau(se_default):
    res = se_default.learning_curve([0.05, 0.2, 1.0, 4.0])
    te = [r.test_error for r in res]
    assert all(r.converged for r in res)
    assert te == sorted(te, reverse=True)
    assert 0.06 < te[-1] < 0.09  # THEORY.md: plateau near 0.07 at large alpha


def test_alpha_to_zero_estimator_vanishes(se_default):
    """lambda > 0, alpha -> 0: S_hat = 0 exactly; the test error is that of uniform attention."""
    r = se_default.solve(1e-5)  # eps/delta grows like alpha^(-1/2): above the spectrum's edge here
    assert r.phase == "zero" and r.converged
    assert r.q == 0 and r.m == 0 and r.rank == 0
    assert r.test_error == pytest.approx(se_default.channel_final.uniform_error(), rel=1e-12)
    assert r.mse == pytest.approx(se_default.q0)
    # larger alpha: a non-zero estimator, still close to uniform attention
    r2 = se_default.solve(2e-2)
    assert r2.converged and r2.phase == "regular" and 0 < r2.q < 0.5
    assert r2.test_error == pytest.approx(r.test_error, abs=0.02)


def test_determinism():
    a = StateEvolution(Problem.from_options()).solve(0.3)
    b = StateEvolution(Problem.from_options()).solve(0.3)
    for key in ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "test_error", "train_error", "rank"):
        assert getattr(a, key) == getattr(b, key), key
    assert a.iterations == b.iterations


def test_seq2seq_is_seq2lab_with_output_noise_offset():
    """(1/d)||(A - A_hat) X||^2 -> ||A - A_hat||^2: same fixed point; output noise on Y adds T * Delta_out."""
    lab = StateEvolution(Problem.from_options()).solve(0.5)
    seq = StateEvolution(Problem.from_options(task="seq2seq", noise_out=0.1)).solve(0.5)
    assert seq.q == pytest.approx(lab.q, rel=1e-12) and seq.m == pytest.approx(lab.m, rel=1e-12)
    assert seq.test_error == pytest.approx(lab.test_error + 2 * 0.1, rel=1e-12)
    assert seq.test_error_clean == pytest.approx(lab.test_error_clean, rel=1e-12)


def test_output_noise_changes_the_seq2lab_fixed_point():
    base = StateEvolution(Problem.from_options()).solve(0.5)
    noisy = StateEvolution(Problem.from_options(noise_out=0.05)).solve(0.5)
    assert noisy.converged
    assert noisy.mse > base.mse  # noisier labels, worse estimate
    assert noisy.test_error > base.test_error + 4 * 0.05 * 0.9  # T^2 Delta_out added to noisy labels


def test_noiseless_perfect_recovery_through_the_se():
    """Delta = 0, lambda -> 0+: on the interpolating phase the MSE vanishes (like delta^2) as alpha_bar
    reaches the perfect-recovery closed form."""
    mu = parse_target("mp:0.5").measure()
    pr = perfect_recovery_factorized(0.5)
    ab1, mse1 = perfect_recovery_se(mu, 0.01)
    ab2, mse2 = perfect_recovery_se(mu, 0.002)
    assert ab1 < ab2 < pr + 1e-6
    assert ab2 == pytest.approx(pr, abs=1e-3)
    assert mse2 < mse1 < 1e-3 and mse2 / mse1 == pytest.approx((0.002 / 0.01) ** 2, rel=0.2)


def test_lambda_zero_interpolating_phase():
    """lambda = 0 below the interpolation threshold: zero train error, positive MSE; the MSE grows
    towards the interpolation peak and the phase ends at the SE threshold."""
    se = StateEvolution(Problem.from_options(lam=0.0))
    inter = se.interpolation_alpha_bar()
    r = se.solve(0.3 * inter)  # alpha = alpha_bar/2 at T = 2
    assert r.phase == "interpolating" and r.converged
    assert r.train_error == 0 and math.isinf(r.sigma)
    mu = parse_target("mp:0.5").measure()
    sol = solve_interpolating_phase(mu, mu.q0 + 0.25, 0.9 * inter)
    assert sol["converged"] and sol["eps"] > 0
    assert mu.q0 - 2 * sol["m_over_r"] + sol["I"] > r.mse  # closer to the peak: larger error


def test_direct_model_lambda_zero_closed_form():
    """Direct model, lambda -> 0+: shrinkage s = 2 alpha_bar, q = s^2 (Q0 + delta^2), m = s Q0."""
    se = StateEvolution(Problem.from_options(model="direct", lam=0.0))
    r = se.solve(0.1)  # alpha_bar = 0.2 < 1/2
    s, q0, qz = 0.4, 1.5, 1.75
    delta2 = (qz - 2 * s * q0 + s * s * q0) / (s * (1 - s))
    assert r.m == pytest.approx(s * q0) and r.q == pytest.approx(s * s * (q0 + delta2))


def test_direct_model_regular_point_converges():
    r = StateEvolution(Problem.from_options(model="direct", lam=0.01)).solve(0.5)
    assert r.converged and r.rank == 1.0
    # the linear denoiser: Sigma = 1/(sigma_hat + 4 lambda)
    assert r.sigma == pytest.approx(1.0 / (r.sigma_hat + 0.04), rel=1e-6)


def test_non_convergence_is_reported_not_hidden():
    se = StateEvolution(Problem.from_options(), max_iter=2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = se.solve(0.5)
    assert not r.converged and r.message and any("did not converge" in str(x.message) for x in w)


def test_cli_theory_json_contract():
    res = CliRunner().invoke(app, ["theory", "--alpha", "0.1,0.5", "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.strip().splitlines()]
    assert [r["alpha"] for r in lines] == [0.1, 0.5]
    for key in ("alpha", "alpha_bar", "q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "mse", "test_error",
                "test_error_clean", "train_error", "rank", "converged", "iterations", "seconds"):
        assert key in lines[0]
    assert lines[0]["alpha_bar"] == pytest.approx(0.2)
    assert lines[1]["test_error"] < lines[0]["test_error"]
    res = CliRunner().invoke(app, ["theory", "--alpha", "-1"])
    assert res.exit_code == 2 and "--alpha" in res.stderr
    # the fixed point's own quadrature error, in JSON and in the table; a bad accuracy names the option
    assert 0 < lines[1]["err_fixed_point_test_error"] < 1e-3 and lines[1]["quadrature"] == "gh16"
    res = CliRunner().invoke(app, ["theory", "--alpha", "0.5"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and f"{lines[1]['err_fixed_point_test_error']:.1e}" in res.stdout
    res = CliRunner().invoke(app, ["theory", "--alpha", "0.5", "--accuracy", "0"])
    assert res.exit_code == 2 and "--accuracy" in res.stderr
    # piped or in 80 columns the table keeps its numbers whole (it used to cut them to '0.388…')
    res = CliRunner().invoke(app, ["theory", "--alpha", "0.1,0.5"], env={"COLUMNS": "80"})
    assert res.exit_code == 0 and "…" not in res.stdout
    assert all(f"{r['test_error']:.6f}" in res.stdout and f"{r['test_error_clean']:.6f}" in res.stdout for r in lines)
    # click's own usage errors are one line naming the option, exit 2
    for args, name in ((["--alpha", "0.5", "--d", "abc"], "--d"), (["--alpha", "0.5", "--bogus"], "--bogus"),
                       ([], "--alpha"), (["--alpha", "0.1:0.1:3"], "--alpha")):
        res = CliRunner().invoke(app, ["theory", *args])
        err = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(err) == 1 and err[0].startswith(f"error: {name}: "), res.output


def test_records_invert_to_the_results():
    """api.result_of(record_of(r)) == r for regular, raised-order, QMC re-solved and zero-phase points (the
    finite-size route rebuilds its starting point from a ``theory`` record instead of re-solving it)."""
    from tiedattention.theory.api import record_of, result_of

    for lam, alpha in ((0.01, 0.5), (1e-4, 0.5), (1.0, 0.05)):
        r = StateEvolution(Problem.from_options(lam=lam)).solve(alpha)
        rec = record_of(r) | {"rs_at": 0.5, "fd_test_error": 0.1}  # fields added later are ignored
        assert result_of(rec) == r
    assert {r.quadrature, r.phase} == {"gh16", "zero"}


def test_phase_structure_against_thresholds():
    """rank fraction below 1 (low-rank collapse) and increasing with alpha along the curve."""
    se = StateEvolution(Problem.from_options())
    ranks = [r.rank for r in se.learning_curve([0.1, 0.5, 2.0])]
    assert ranks == sorted(ranks) and ranks[-1] < 1
    assert np.all(np.diff(ranks) > 0)


# ------------------------------------------------------------------------------------------------
# T >= 3 (QMC rules): two-stage iteration with warm-started proxes, alpha -> 0 at T = 5
# ------------------------------------------------------------------------------------------------
def test_t3_two_stage_warm_solve_equals_plain_solve():
    """The coarse-rule stage and the warm-started proxes only change the path: the fixed point is that of
    the plain iteration of the same (accurate) rule, to the solver tolerance."""
    prob = Problem.from_options(tokens=3)
    small = {"qmc_log2": 8, "replicas": 2}
    fast = StateEvolution(prob, tol=1e-9, channel_options=small, coarse_options={"qmc_log2": 6})
    plain = StateEvolution(prob, tol=1e-9, channel_options=small, coarse_options=False, warm_start=False)
    a, b = fast.solve(0.2), plain.solve(0.2)
    assert a.converged and b.converged and a.residual <= 1e-9
    for key in ("q", "m", "sigma", "test_error", "train_error"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-7), key
    # the reported quadrature errors are those of the accurate rule, and they are not negligible here
    assert 1e-5 < a.errors["channel_q_hat"] / a.q_hat < 0.05
    assert fast.solve(0.2).q == a.q  # deterministic: warm states are reset per solve


def test_t5_alpha_to_zero_is_uniform_attention():
    """T = 5, lambda > 0, alpha -> 0: S_hat = 0 and the test error is that of uniform attention, which an
    independent Monte Carlo in the full K = 15 logit coordinates reproduces within its error bars."""
    from tiedattention.theory.channel import logit_design

    se = StateEvolution(Problem.from_options(tokens=5))
    r = se.solve(1e-6)
    assert r.phase == "zero" and r.converged and r.q == 0 and r.rank == 0
    uniform = se.channel_final.uniform_error()
    assert r.test_error == pytest.approx(uniform, rel=1e-12)
    rng = np.random.default_rng(3)
    T, N = 5, 200_000
    zeta = math.sqrt(se.q0 + 0.25) * rng.standard_normal((N, 15))
    u = (zeta @ logit_design(T).T).reshape(N, T, T)
    s = np.exp(u - u.max(axis=2, keepdims=True))
    s /= s.sum(axis=2, keepdims=True)
    v = ((s - 1 / T) ** 2).sum(axis=(1, 2))
    err = math.hypot(v.std() / math.sqrt(N), r.errors["test_error"])
    assert abs(v.mean() - uniform) < 4 * err
    assert err < 2e-3 * uniform


@pytest.mark.slow
def test_t5_point_converges():
    """T = 5 at alpha_bar = 1 (alpha = 1/14): the default solver converges (the benchmark times it)."""
    se = StateEvolution(Problem.from_options(tokens=5))
    r = se.solve(1 / 14)
    assert r.converged and r.residual <= 1e-10 and r.phase == "regular"
    assert 0.05 < r.test_error < se.channel_final.uniform_error()
    assert r.errors["channel_q_hat"] / r.q_hat < 0.01


@pytest.mark.slow
def test_interpolating_phase_up_to_the_threshold():
    """lambda -> 0+ within 1e-4 of the interpolation threshold (the scan used to miss the root there: G turns
    positive again where eps < 0): a root with eps -> 0+, growing MSE, and no solution just above."""
    mu = parse_target("mp:0.5").measure()
    se = StateEvolution(Problem.from_options(lam=0.0))
    inter = se.interpolation_alpha_bar()
    near = [solve_interpolating_phase(mu, mu.q0 + 0.25, inter - d) for d in (1e-3, 1e-4)]
    assert all(s["converged"] and s["residual"] < 1e-12 for s in near)
    assert 0 < near[1]["eps"] < near[0]["eps"] < 0.1
    assert near[1]["eps"] / near[0]["eps"] == pytest.approx(10 ** -0.5, rel=0.1)  # eps ~ sqrt(distance)
    mse = [mu.q0 - 2 * s["m_over_r"] + s["I"] for s in near]
    assert mse[1] > mse[0]
    assert not solve_interpolating_phase(mu, mu.q0 + 0.25, inter + 1e-4)["converged"]


def test_just_above_the_zero_phase_converges():
    """lambda = 0.01, alpha = 3e-4 (between the zero phase, alpha <= 5e-5, and alpha ~ 3e-3): the map is steep
    and repelling there and Anderson stalls at residual O(1); the hybr fallback finds the fixed point. A
    genuine one: tiny residual, a small non-zero estimator, test error near uniform attention."""
    se = StateEvolution(Problem.from_options())
    r = se.solve(3e-4)
    assert r.converged and r.residual <= 1e-10 and r.phase == "regular"
    assert 0 < r.rank < 0.02 and 0 < r.q < 0.05
    x = r.x
    fx, _, _ = se._map(3e-4, x, final=True)
    assert np.max(np.abs(fx / x - 1)) < 1e-9  # F(x) = x in the original coordinates
    assert r.test_error == pytest.approx(se.channel_final.uniform_error(), abs=0.01)


def test_staged_gauss_hermite_solve_equals_single_stage_cold_solve():
    """T = 2: the pre/coarse/accurate stages (warm proxes, fixed spectral rule, warm cut point) land on the
    fixed point of the documented cold map: against the single-stage cold solve within tol; deterministic."""
    from tiedattention.theory.denoisers import matrix_update

    p = Problem.from_options()
    staged = StateEvolution(p, tol=1e-10).solve(0.5)
    again = StateEvolution(p, tol=1e-10).solve(0.5)
    plain = StateEvolution(p, tol=1e-10, coarse_options=False, warm_start=False).solve(0.5)
    assert staged.converged and plain.converged and staged.residual <= 1e-10
    assert staged.to_dict() | {"seconds": 0} == again.to_dict() | {"seconds": 0}  # identical digits
    np.testing.assert_allclose(staged.x, plain.x, rtol=1e-9)
    assert staged.test_error == pytest.approx(plain.test_error, abs=1e-9)
    assert staged.errors["test_error"] == pytest.approx(plain.errors["test_error"], rel=1e-6)
    assert staged.errors["channel_q_hat"] == pytest.approx(plain.errors["channel_q_hat"], rel=1e-6)
    # the cheap matrix sides against the adaptive one at the solution: fixed composite rule, warm cut point
    se = StateEvolution(p)
    ref = matrix_update(p, se.measure, staged.q_hat, staged.m_hat, staged.sigma_hat)
    warm: dict = {}
    matrix_update(p, se.measure, 1.02 * staged.q_hat, staged.m_hat, staged.sigma_hat, warm=warm)
    hot = matrix_update(p, se.measure, staged.q_hat, staged.m_hat, staged.sigma_hat, warm=warm)
    fixed = matrix_update(p, se.measure, staged.q_hat, staged.m_hat, staged.sigma_hat, fixed_nodes=16)
    for other, tol in ((hot, 1e-13), (fixed, 1e-8)):
        np.testing.assert_allclose([other.q, other.m, other.sigma], [ref.q, ref.m, ref.sigma], rtol=tol)


# ------------------------------------------------------------------------------------------------
# T = 2 past the interpolation peak at small lambda: Gauss-Hermite cannot resolve the prox's basin switch
# ------------------------------------------------------------------------------------------------
WINDOW = [0.24, 0.25, 0.26]  # lambda = 1e-4: Sigma = 25 ... 37, branch share 2-5 % under Gauss-Hermite


def _second_differences(res) -> np.ndarray:
    te = np.array([r.test_error for r in res])
    return np.abs(te[:-2] - 2 * te[1:-1] + te[2:])


def _check_floor_honest(r):
    """A point stopped at the QMC noise floor says so, and its residual is within 0.1 x the reported relative
    quadrature error of the conjugates (the evaluation that stopped the iteration is the one reported)."""
    floor = max(r.errors[f"channel_{k}"] / abs(getattr(r, k)) for k in ("q_hat", "m_hat", "sigma_hat"))
    assert r.converged and 1e-4 < floor < 1e-2
    assert r.residual <= 1e-10 or ("quadrature accuracy" in r.message and r.residual <= 0.1 * floor)
    assert "branch share" in r.message


def test_small_lambda_curve_is_smooth_past_the_peak():
    """lambda = 1e-4: the Gauss-Hermite fixed points scatter by ~0.01-0.02 in the test error (second difference
    0.030 on this grid, test below, slow); the QMC re-solve of the points with a large branch share gives a
    smooth curve (second differences <= ~4e-3 on 0.01 steps over alpha = 0.21 ... 0.35, ~5e-4 here;
    docs/theory/state_evolution.md)."""
    se = StateEvolution(Problem.from_options(lam=1e-4))
    res = se.learning_curve(WINDOW)
    for r in res:
        assert r.quadrature == "qmc4x2^14" and r.errors["branch_share"] > 1e-3
        _check_floor_honest(r)
    assert np.max(_second_differences(res)) < 6e-3
    te = [r.test_error for r in res]
    assert te == sorted(te, reverse=True)
    # the reference point (lambda = 0.01, alpha = 0.5) keeps the fast Gauss-Hermite path
    ref = StateEvolution(Problem.from_options()).solve(0.5)
    assert ref.quadrature == "gh16" and ref.errors["branch_share"] < 1e-5 and ref.residual <= 1e-10


def test_qmc_re_solve_is_deterministic():
    """The QMC re-solve is a deterministic function of its input (fixed scrambling seeds, cold accurate stage);
    a smaller QMC rule keeps this check cheap (4 x 2^12: from the order-16 Gauss-Hermite point, 4 x 2^11 stalls at
    1.4e-3, below its own floor test)."""
    p = Problem.from_options(lam=1e-4)
    a = StateEvolution(p, rough_options={"qmc_log2": 12}).solve(0.25)
    b = StateEvolution(p, rough_options={"qmc_log2": 12}).solve(0.25)
    assert a.quadrature == "qmc4x2^12"
    assert a.to_dict() | {"seconds": 0} == b.to_dict() | {"seconds": 0}
    _check_floor_honest(a)


@pytest.mark.slow
def test_gauss_hermite_alone_is_not_smooth_past_the_peak():
    """The check above fails with the old rule (branch_switch=None: Gauss-Hermite order 12 everywhere, without the
    fixed-point checks of 2026-11-30)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = StateEvolution(Problem.from_options(lam=1e-4), branch_switch=None, channel_options={"order": 12},
                             fixed_point_errors=False).learning_curve(WINDOW)
    assert np.max(_second_differences(res)) > 1e-2


# ------------------------------------------------------------------ beta = beta0 = 2 (issue 2) ---------------
BETA2 = {"beta": 2.0, "beta0": 2.0}


def _fixed_point_errors_sane(r):
    e = r.errors
    assert 0 < e["map_spectral_radius"] < 1  # a contraction at the fixed point: no limit cycle
    assert e["fixed_point_amplification"] > 1
    # the fixed point's error exceeds the map's own quadrature error at it (amplified by (I - J)^-1)
    assert e["fixed_point_test_error"] > e["test_error"] > 0
    assert all(math.isfinite(e[f"fixed_point_{k}"]) and e[f"fixed_point_{k}"] > 0 for k in ("q", "m", "sigma", "mse"))


def test_beta2_alpha_half_converges_and_is_stable_against_a_finer_rule():
    """beta = beta0 = 2, alpha = 0.5 (MP 0.5, Delta = 0.5, lambda = 0.01): Gauss-Hermite alone stalls at residual
    ~3e-3 (the prox's basin switch carries 3-4.5 % of E||g||^2 and the map jumps across its fixed point); the QMC
    re-solve converges to its noise floor. A finer QMC rule, started at that point, lands within the reported
    fixed-point error estimates (docs/theory/state_evolution.md, "beta = beta0 = 2"). Order 16 and 4 x 2^11
    (2^12) points keep it cheap (the Gauss-Hermite stage only detects the basin switch and provides the start)."""
    p = Problem.from_options(**BETA2)
    se = StateEvolution(p, channel_options={"order": 16}, rough_options={"qmc_log2": 11})
    r = se.solve(0.5)
    assert r.quadrature == "qmc4x2^11" and r.errors["branch_share"] > 1e-3
    _check_floor_honest(r)
    _fixed_point_errors_sane(r)
    fine_se = StateEvolution(p, channel_options={"order": 16}, rough_options={"qmc_log2": 12})
    fine = fine_se._rough_solver()._solve_regular(0.5, r.x, zero_test=False)  # the re-solve alone, from r
    assert fine.converged and fine.quadrature == "qmc4x2^12"
    _fixed_point_errors_sane(fine)
    for k in ("test_error", "q", "sigma", "mse"):  # QMC estimates are 1 s.e. (4 replicas): a 2 s.e. test
        bound = 2 * math.hypot(r.errors[f"fixed_point_{k}"], fine.errors[f"fixed_point_{k}"])
        assert abs(getattr(r, k) - getattr(fine, k)) <= bound, k
    # the reported fixed-point errors are not vacuous: below 8 % of the test error at 4 x 2^11 points (6.7 %: with
    # the Stein forms the map's spectral radius there is 0.91 and ||(I - J)^-1|| ~ 31; the rules 2^11 ... 2^16
    # read 0.3849, 0.3873, 0.3880, 0.3876, so the estimate, 0.025, is ~9x conservative)
    assert r.errors["fixed_point_test_error"] < 0.08 * r.test_error
    # the Stein fixed point, not the Jacobian forms' 0.309 (the ERM at d = 80 / 100: 0.394 / 0.387 +- 0.006)
    # (0.3876: the 4 x 2^16 rule; the two values are far apart in units of the estimate)
    two_se = 2 * r.errors["fixed_point_test_error"]
    assert abs(r.test_error - 0.3876) < two_se and 0.3876 - 0.309 > two_se


@pytest.mark.slow
def test_beta2_learning_curve_converges_everywhere():
    """beta = beta0 = 2 on alpha in [0.05, 8] (17 points): every point converges (Gauss-Hermite order 24, or the
    QMC re-solve at 0.13 <= alpha <= 0.87 where the branch share exceeds 1e-3), the test error decreases up to the
    fixed-point errors (with the Stein forms the curve has a plateau at 0.38-0.39 for alpha = 0.34 ... 0.87, where
    0.3841 at alpha = 0.34 lies below 0.3877 at 0.46, each +- 1e-2 or more), cold solves land on the warm curve
    (the half-order pre stage used to lead them to spurious fixed points of the order-24 map at alpha = 1.19 and
    2.25: 0.238 instead of 0.220 and 0.171), alpha = 0.5 is deterministic and agrees with a 4 x 2^16 QMC rule
    within the fixed-point error estimates."""
    p = Problem.from_options(**BETA2)
    alphas = np.round(np.geomspace(0.05, 8, 17), 4)
    se = StateEvolution(p)
    res = se.learning_curve(alphas)
    assert all(r.converged and r.phase == "regular" for r in res)
    te = [r.test_error for r in res]
    err = [r.errors["fixed_point_test_error"] for r in res]
    for i in range(len(res) - 1):
        assert te[i + 1] < te[i] + 2 * math.hypot(err[i], err[i + 1]), alphas[i + 1]
    assert te[0] > 0.6 and te[3] > te[4] > te[5] and 0.3 > te[10] > te[11] > te[-1]
    rules = {r.quadrature for r in res}
    assert {"gh24", "qmc4x2^14"} <= rules <= {"gh24", "gh36", "gh54", "qmc4x2^14"}  # (raised orders since 11-30)
    for r in res:
        if r.quadrature.startswith("qmc"):  # linearised propagation of the replica errors
            _fixed_point_errors_sane(r)
            # accepted at the QMC floor by either documented rule: residual <= 0.1 x the replica error (stop) or,
            # after a stall, <= floor_factor (10) x it (alpha = 0.6325 since the warm curve passes raised points:
            # residual 8.6e-4 against 2.2e-3)
            floor = max(r.errors[f"channel_{k}"] / abs(getattr(r, k)) for k in ("q_hat", "m_hat", "sigma_hat"))
            assert r.residual <= 1e-10 or ("quadrature accuracy" in r.message and r.residual <= 10 * floor)
        else:  # Gauss-Hermite: the two-order difference, below the accuracy unless the order cap was reached
            e = r.errors["fixed_point_test_error"]
            assert e > r.errors["test_error"] > 0 and (e <= 1e-3 or r.quadrature == "gh54")
    for i in (10, 12):  # alpha = 1.1927, 2.2494
        cold = StateEvolution(p).solve(alphas[i])
        assert abs(cold.test_error - res[i].test_error) <= res[i].errors["fixed_point_test_error"]
    half = StateEvolution(p).solve(0.5)
    again = StateEvolution(p).solve(0.5)  # deterministic, fixed-point errors included
    assert half.to_dict() | {"seconds": 0} == again.to_dict() | {"seconds": 0}
    fine = StateEvolution(p, rough_options={"qmc_log2": 16}).solve(0.5)
    assert half.quadrature == "qmc4x2^14" and fine.quadrature == "qmc4x2^16"
    for k in ("test_error", "q", "sigma", "mse"):  # 2 s.e. of the difference, as above
        bound = 2 * math.hypot(half.errors[f"fixed_point_{k}"], fine.errors[f"fixed_point_{k}"])
        assert abs(getattr(half, k) - getattr(fine, k)) <= bound, k


def test_fixed_point_error_is_reported_and_the_order_raised_where_it_is_large():
    """Every Gauss-Hermite point carries the fixed point's own quadrature error (difference to the fixed point at
    0.75 x the order), of the size of the actual error against a much finer rule; where it exceeds ``accuracy``
    the order is raised (lambda = 1e-4, alpha = 0.45, accuracy 2e-4: order 16's estimate is 4.8e-4; the raised
    point agrees with orders 32, 40, 48, which read 0.174107, 0.174116, 0.174126). With the Jacobian forms of the
    conjugates (before session 13) lambda = 1e-4, alpha = 0.5 needed a raise at the default accuracy 1e-3; with the
    Stein forms no point measured does (docs/theory/state_evolution.md, "The conjugates: Stein forms")."""
    p = Problem.from_options()
    r = StateEvolution(p).solve(0.5)
    fine = StateEvolution(p, channel_options={"order": 32}, accuracy=None).solve(0.5)
    est = r.errors["fixed_point_test_error"]
    assert r.quadrature == "gh16" and est < 1e-3  # no raise needed at the reference point
    assert abs(r.test_error - fine.test_error) <= est  # an honest (conservative) estimate
    assert abs(r.mse - fine.mse) <= r.errors["fixed_point_mse"]
    assert est > 3 * r.errors["test_error"]  # what the per-evaluation estimate misses
    small = Problem.from_options(lam=1e-4)
    hard = StateEvolution(small, accuracy=2e-4).solve(0.45)
    assert hard.converged and hard.quadrature in ("gh24", "gh36", "gh54")
    assert "order raised 16 -> 24" in hard.message and hard.errors["fixed_point_test_error"] < 2e-4
    high = StateEvolution(small, channel_options={"order": 40}, accuracy=None, fixed_point_errors=False).solve(0.45)
    assert abs(hard.test_error - high.test_error) <= 2 * hard.errors["fixed_point_test_error"]
    plain = StateEvolution(small, accuracy=None).solve(0.45)
    assert plain.quadrature == "gh16" and plain.errors["fixed_point_test_error"] > 2e-4
    off = StateEvolution(p, fixed_point_errors=False).solve(0.5)
    assert "fixed_point_test_error" not in off.errors and off.test_error == r.test_error


@pytest.mark.parametrize("target, d", [("mp:0.5", None), ("powerlaw:1.25", 300)])
def test_low_order_comparison_equals_a_full_low_order_solve(target, d):
    """The fixed point's error estimate re-solves at 0.75 x the order cheaply: its first channel evaluation is the
    one the accurate solve's per-evaluation estimate made at the point (handed over, bit-identical to a cold call),
    and it stops after its warm stages (fixed, then adaptive spectral rule; tol 1e-7). Against an independent full
    cold solve at order 12 the estimate agrees to 1e-8 (a discrete spectrum too: with the fixed spectral rule alone
    the power law's estimate was 5e-6 off); the per-evaluation estimate is |I(16) - I(12)| at the point exactly."""
    from tiedattention.theory.channel import SoftmaxChannel

    p = Problem.from_options(target=target)
    se = StateEvolution(p, d=d)
    r = se.solve(0.5)
    full12 = StateEvolution(p, d=d, channel_options={"order": 12}, fixed_point_errors=False).solve(0.5)
    for key in ("test_error", "test_error_clean"):
        expect = abs(getattr(r, key) - getattr(full12, key)) + r.errors[key]
        assert abs(r.errors[f"fixed_point_{key}"] - expect) < 1e-8
    for key in ("q", "m", "sigma", "mse"):
        diff = abs(r.errors[f"fixed_point_{key}"] - abs(getattr(r, key) - getattr(full12, key)))
        assert diff < 1e-7 * abs(getattr(r, key))
    cold12 = SoftmaxChannel(se.channel.params, order=12, estimate_error=False,
                            conjugates=se.channel.conjugates).moments(0.5, r.q, r.m, r.sigma)
    cold16 = se.channel.moments(0.5, r.q, r.m, r.sigma)
    for key in ("q_hat", "m_hat", "sigma_hat"):
        assert r.errors[f"channel_{key}"] == abs(getattr(cold16, key) - getattr(cold12, key))
    assert se._low_solver()._seed_in is None and se._low_seed is None  # nothing carried into a later solve
