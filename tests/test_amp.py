"""GAMP on actual data (tiedattention.amp): operator, spectral divergence, agreement with the ERM minimiser and
with the state evolution. Measured numbers and commands: docs/theory/gamp.md."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from tiedattention.amp import (  # noqa: E402
    MeasurementOperator,
    gamp,
    register,
    se_trajectory,
    spectral_denoiser,
)
from tiedattention.cli import app  # noqa: E402
from tiedattention.errors import ConvergenceWarning, ParameterError  # noqa: E402
from tiedattention.problem import Problem  # noqa: E402
from tiedattention.simulation import rng_for, sample_dataset, train  # noqa: E402
from tiedattention.simulation import test_errors as measure_errors  # noqa: E402
from tiedattention.simulation.sampler import logits  # noqa: E402
from tiedattention.theory.state_evolution import StateEvolution  # noqa: E402

REF = dict(target="mp:0.5", noise=0.5, lam=0.01, tokens=2)


def _data(pb: Problem, alpha: float, d: int, seed: int):
    S0 = pb.task.target.sample(d, rng_for(seed, "target"))
    return sample_dataset(pb, int(round(alpha * d * d)), d, seed, S0=S0)


def _quiet_gamp(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return gamp(*args, **kw)


# ------------------------------------------------------------------------------------------------ operator
def test_operator_is_the_channel_coordinates_and_its_adjoint():
    rng = np.random.default_rng(0)
    n, T, d = 7, 3, 9
    X = rng.standard_normal((n, T, d))
    S = rng.standard_normal((d, d))
    S = S + S.T
    op = MeasurementOperator(X)
    h = logits(X, S)
    iu, ju = np.triu_indices(T)
    expected = np.where(iu == ju, 1 / math.sqrt(2), 1.0) * h[:, iu, ju]  # h = D(v): v_aa = h_aa / sqrt2
    np.testing.assert_allclose(op.forward(S), expected, rtol=1e-12, atol=1e-12)
    # explicit measurement matrices A_mu,k and their Frobenius inner products
    A = np.zeros((n, iu.size, d, d))
    for k, (a, b) in enumerate(zip(iu, ju, strict=True)):
        xa, xb = X[:, a], X[:, b]
        if a == b:
            A[:, k] = (xa[:, :, None] * xa[:, None, :] - np.eye(d)) / math.sqrt(2 * d)
        else:
            A[:, k] = (xa[:, :, None] * xb[:, None, :] + xb[:, :, None] * xa[:, None, :]) / (2 * math.sqrt(d))
    np.testing.assert_allclose(op.forward(S), np.einsum("nkij,ij->nk", A, S), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal((n, iu.size))
    np.testing.assert_allclose(op.adjoint(g), np.einsum("nkij,nk->ij", A, g), rtol=1e-12, atol=1e-12)
    w = op.row_weights()
    np.testing.assert_allclose(w, (A**2).sum(axis=(2, 3)).mean(axis=1) / ((d + 1) / 2), rtol=1e-12)


def test_measurement_variance_is_q():
    """Every channel coordinate of A(S) has variance (1/d) Tr S^2 (the SE's q), diagonal logits included."""
    rng = np.random.default_rng(1)
    d, n = 60, 20000
    S = rng.standard_normal((d, d)) / math.sqrt(d)
    S = S + S.T
    q = (S * S).sum() / d
    v = MeasurementOperator(rng.standard_normal((n, 2, d))).forward(S)
    np.testing.assert_allclose(v.var(axis=0) / q, 1.0, atol=0.04)  # 3 sigma of the sample variance ~ 0.03
    np.testing.assert_allclose(v.mean(axis=0), 0.0, atol=0.04 * math.sqrt(q))


# ---------------------------------------------------------------------------------------- spectral denoiser
def _sym_basis(d: int):
    for i in range(d):
        for j in range(i, d):
            E = np.zeros((d, d))
            if i == j:
                E[i, i] = 1.0
            else:
                E[i, j] = E[j, i] = 1 / math.sqrt(2)
            yield E


@pytest.mark.parametrize("rank", [None, 4])
def test_spectral_divergence_matches_finite_differences(rank):
    rng = np.random.default_rng(2)
    d = 7
    G = rng.standard_normal((d, d))
    Y = (G + G.T) / 2 + np.diag(np.linspace(-1, 2, d))
    thresh = 0.3
    den = spectral_denoiser(Y, thresh, rank)
    assert 0 < np.count_nonzero(den.f) < d  # some eigenvalues thresholded
    eps = 1e-6
    fd = 0.0
    for E in _sym_basis(d):
        plus = spectral_denoiser(Y + eps * E, thresh, rank).F
        minus = spectral_denoiser(Y - eps * E, thresh, rank).F
        fd += float(((plus - minus) * E).sum()) / (2 * eps)
    assert den.divergence == pytest.approx(fd, rel=1e-6)
    # identity-like check: no threshold, no clipping -> divergence = d(d+1)/2
    assert spectral_denoiser(Y + 10 * np.eye(d), 0.0).divergence == pytest.approx(d * (d + 1) / 2, rel=1e-12)


# ------------------------------------------------------------------------------------- GAMP vs the ERM
@pytest.mark.parametrize("model", ["factorized", "direct"])
def test_gamp_reaches_the_prox_minimiser(model):
    pb = Problem.from_options(**REF, model=model)
    d, seed = 32, 0
    data = _data(pb, 0.5, d, seed)
    res = gamp(pb, data.X, data.y, data.S0)
    assert res.converged and res.residual < 1e-11
    assert res.kkt < 1e-8  # a stationary point of the ERM objective
    ref = train(pb, data, solver="prox")
    assert res.objective == pytest.approx(ref.objective, rel=1e-4)
    assert abs(res.objective - ref.objective) / ref.objective < 1e-6  # measured ~1e-10
    te_g = measure_errors(pb, res.S_hat, data.S0, seed, 2000)["test_error"]
    te_p = measure_errors(pb, ref.S_hat, data.S0, seed, 2000)["test_error"]
    assert te_g == pytest.approx(te_p, rel=1e-2)
    assert np.linalg.norm(res.S_hat - ref.S_hat) / np.linalg.norm(ref.S_hat) < 1e-3
    # the convergence report and the tracked order parameters
    assert len(res.history) == res.iterations + 1
    h0, hl = res.history[0], res.history[-1]
    assert (h0.q, h0.m, h0.sigma) == (0.0, 0.0, 1.0)
    assert hl.q == pytest.approx((res.S_hat**2).sum() / d, rel=1e-12)
    assert hl.m == pytest.approx((res.S_hat * data.S0).sum() / d, rel=1e-12)
    assert hl.sigma == res.sigma > 0 and res.sigma_hat > 0
    assert res.to_dict()["converged"] is True and "S_hat" not in res.to_dict()


def test_non_convergence_is_reported_not_hidden():
    pb = Problem.from_options(**REF)
    data = _data(pb, 0.5, 20, 0)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = gamp(pb, data.X, data.y, data.S0, max_iter=3)
    assert not res.converged and res.iterations == 3 and "no convergence" in res.message
    assert np.all(np.isfinite(res.S_hat)) and math.isfinite(res.objective) and res.kkt > 1e-6


def test_bad_input():
    pb = Problem.from_options(**REF)
    data = _data(pb, 0.5, 10, 0)
    with pytest.raises(ParameterError, match="damping"):
        gamp(pb, data.X, data.y, damping=0.0)
    with pytest.raises(ParameterError, match="task"):
        gamp(Problem.from_options(**REF, task="seq2seq"), data.X, data.y)
    with pytest.raises(ParameterError, match="tokens"):
        gamp(Problem.from_options(**{**REF, "tokens": 3}), data.X, data.y)


def test_simulate_cli_with_gamp():
    register()
    runner = CliRunner()
    res = runner.invoke(app, ["simulate", "--d", "20", "--alpha", "0.5", "--seeds", "2", "--n-test", "200",
                              "--solver", "gamp", "--threads", "1", "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    assert rec["solver"] == "gamp" and rec["converged_all"] and rec["n"] == 200
    pb = Problem.from_options(**REF)
    direct = [gamp(pb, *(lambda dt: (dt.X, dt.y))(_data(pb, 0.5, 20, s))).objective for s in (0, 1)]
    assert rec["objective_mean"] == pytest.approx(float(np.mean(direct)), rel=1e-9)


# --------------------------------------------------------------------------------- d = 100 (slow)
@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_gamp_test_error_equals_erm_at_d100(alpha):
    pb = Problem.from_options(**REF)
    for seed in range(4):
        data = _data(pb, alpha, 100, seed)
        res = gamp(pb, data.X, data.y, data.S0)
        ref = train(pb, data, solver="prox")
        assert res.converged and res.kkt < 1e-7  # measured up to 1.1e-8 (relative squared, at GAMP's step)
        assert abs(res.objective - ref.objective) / ref.objective < 1e-6
        te_g = measure_errors(pb, res.S_hat, data.S0, seed, 4000)["test_error"]
        te_p = measure_errors(pb, ref.S_hat, data.S0, seed, 4000)["test_error"]
        assert abs(te_g - te_p) / te_p < 1e-2  # measured < 1e-5


def _undamped(pb, alpha, d, seeds, iterations):
    out = []
    for seed in range(seeds):
        data = _data(pb, alpha, d, seed)
        out.append(_quiet_gamp(pb, data.X, data.y, data.S0, damping=1.0, patience=0, max_iter=iterations)
                   .trajectory()[: iterations + 1])
    return np.array(out)


@pytest.mark.slow
def test_gamp_tracks_the_state_evolution_alpha_05():
    """Undamped GAMP from S_0 = 0, V_0 = 1 against the undamped SE map from (0, 0, 1), 4 seeds at d = 100.
    Measured: max relative deviation of the seed mean over 25 iterations q 0.7%, m 1.1%, Sigma 2.3% (t = 3;
    the finite-d factor 2N/d^2 = (d+1)/d alone is 1%)."""
    pb = Problem.from_options(**REF)
    its = 25
    se = se_trajectory(pb, 0.5, (0.0, 0.0, 1.0), its)
    tr = _undamped(pb, 0.5, 100, 4, its).mean(axis=0)
    rel = np.abs(tr[1:] - se[1:]) / se[1:]
    assert rel[:, 0].max() < 0.015 and rel[:, 1].max() < 0.015 and rel[:, 2].max() < 0.035, rel.max(axis=0)
    # and the damped GAMP (= ERM) fixed point sits at the SE fixed point
    fp = StateEvolution(pb).solve(0.5)
    pts = []
    for seed in range(4):
        data = _data(pb, 0.5, 100, seed)
        pts.append(gamp(pb, data.X, data.y, data.S0).trajectory()[-1])
    rel_fp = np.abs(np.mean(pts, axis=0) - fp.x) / fp.x
    assert rel_fp.max() < 0.02, rel_fp


@pytest.mark.slow
def test_gamp_tracks_the_state_evolution_alpha_01_first_iterations():
    """At alpha = 0.1 (n/d = 10, Sigma ~ 19-30) the first iteration agrees to the O(1/(alpha d)) finite-size
    level (q -3.5%, m +1.6%, Sigma -0.3% at d = 100, 4 seeds)."""
    pb = Problem.from_options(**REF)
    se = se_trajectory(pb, 0.1, (0.0, 0.0, 1.0), 1)
    tr = _undamped(pb, 0.1, 100, 4, 1).mean(axis=0)
    rel = np.abs(tr[1] - se[1]) / se[1]
    assert rel.max() < 0.05, rel


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="undamped GAMP at alpha = 0.1, d = 100 leaves the SE trajectory from t ~ 2 "
                   "(t = 4: q 3.34 vs SE 2.33) and does not settle (q ~ 0.76 +- 0.01 vs SE 0.637 at t = 25); "
                   "the damped fixed point (the ERM) does approach the SE as d grows, see the next test")
def test_gamp_tracks_the_state_evolution_alpha_01_all_iterations():
    pb = Problem.from_options(**REF)
    its = 25
    se = se_trajectory(pb, 0.1, (0.0, 0.0, 1.0), its)
    tr = _undamped(pb, 0.1, 100, 4, its).mean(axis=0)
    rel = np.abs(tr[1:] - se[1:]) / se[1:]
    assert rel.max() < 0.05, rel.max(axis=0)


@pytest.mark.slow
def test_erm_fixed_point_approaches_the_se_with_d_alpha_01():
    """Damped GAMP (= the ERM minimiser) at alpha = 0.1: q = 0.656 (d = 100), 0.645 (d = 200) vs SE 0.637."""
    pb = Problem.from_options(**REF)
    fp = StateEvolution(pb).solve(0.1)
    pts = []
    for seed in range(2):
        data = _data(pb, 0.1, 200, seed)
        pts.append(gamp(pb, data.X, data.y, data.S0).trajectory()[-1])
    rel = np.abs(np.mean(pts, axis=0) - fp.x) / fp.x
    assert rel.max() < 0.03, rel


FIG1_ALPHAS = [0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0, 4.0]  # reproduce/fig1.py, "full" simulation grid


@pytest.mark.slow
def test_gamp_converges_on_the_fig1_grid():
    pb = Problem.from_options(**REF)
    for alpha in FIG1_ALPHAS:
        data = _data(pb, alpha, 100, 0)
        res = gamp(pb, data.X, data.y, data.S0)
        assert res.converged and res.kkt < 1e-7, (alpha, res.message, res.kkt)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="narrow student kappa = 0.5 (rank cut): GAMP drifts without converging "
                   "(d = 40, alpha = 0.5, 600 iterations at damping 0.3: residual 1.3e-4, objective 0.8% above "
                   "the prox minimiser); the hard cut makes the divergence jump when eigenvalues cross it")
def test_gamp_narrow_student_converges():
    pb = Problem.from_options(**REF, kappa=0.5)
    data = _data(pb, 0.5, 40, 0)
    res = _quiet_gamp(pb, data.X, data.y, data.S0, max_iter=600)
    ref = train(pb, data, solver="prox")
    assert res.converged and abs(res.objective - ref.objective) / ref.objective < 1e-6
