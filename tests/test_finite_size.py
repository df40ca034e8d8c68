"""The finite-size SE (theory/finite_size.py): the AIM's design Gram matrix, the Gram channel, its d -> infinity
limit, and (slow) agreement with d = 100 ERM where the d -> infinity SE misses by 4 standard errors.
"""

import math

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.theory import StateEvolution
from tiedattention.theory.finite_size import FiniteSizeChannel, design_gram, solve_finite_size, wishart_tokens


def _sensing_matrices(x: np.ndarray) -> list[np.ndarray]:
    """The AIM's sensing matrices of one sequence x (T, d), pairs a <= b: sym(x_a x_b^T), x_a x_a^T - I."""
    T, d = x.shape
    out = []
    for a, b in zip(*np.triu_indices(T), strict=True):
        M = 0.5 * (np.outer(x[a], x[b]) + np.outer(x[b], x[a]))
        out.append(M - np.eye(d) if a == b else M)
    return out


@pytest.mark.parametrize("T", [2, 3])
def test_design_gram_is_the_gram_of_the_sensing_matrices(T):
    """design_gram from the tokens' Gram matrix = <M_k, M_l>_F/(D c_k c_l) from the explicit d x d matrices, and
    the logits' law: Var <M_k, S>/sqrt(d) for a GOE-like S follows Gamma (checked through the identity
    <M_k, S> for S = I: the diagonal pairs carry |x_a|^2 - d)."""
    d = 7
    rng = np.random.default_rng(3)
    x = rng.standard_normal((T, d))
    Ms = _sensing_matrices(x)
    a, b = np.triu_indices(T)
    c = np.where(a == b, math.sqrt(2.0), 1.0)
    D = d * (d + 1) / 2
    want = np.array([[np.sum(Mk * Ml) for Ml in Ms] for Mk in Ms]) / (D * np.outer(c, c))
    got = design_gram((x @ x.T)[None], d)[0]
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.allclose(got, got.T)
    assert np.all(np.linalg.eigvalsh(got) > 0)


def test_design_gram_has_mean_identity():
    """E Gamma = I exactly (E <M_k, M_l> = D c_k c_l delta_kl): Monte Carlo over Wishart token Gram matrices from
    Bartlett's construction, within 4 standard errors entry by entry; and Bartlett's G has E G = d I."""
    d, T, n = 30, 2, 200_000
    u = np.random.default_rng(11).random((n, T * (T + 1) // 2))
    G = wishart_tokens(u, d, T)
    assert np.allclose(G.mean(axis=0), d * np.eye(T), atol=4 * math.sqrt(2 * d / n) * 1.5)
    Gam = design_gram(G, d)
    mean, sem = Gam.mean(axis=0), Gam.std(axis=0) / math.sqrt(n)
    assert np.all(np.abs(mean - np.eye(3)) <= 4 * sem + 1e-12), (mean, sem)
    # the fluctuations are O(1/sqrt(d)): Var Gamma_11,11 = Var(|x|^4 - 2|x|^2 + d)/(2D)^2 ~ 8/d
    assert Gam[:, 0, 0].var() * d == pytest.approx(8.0, rel=0.25)


@pytest.fixture(scope="module")
def se_point():
    p = Problem.from_options(lam=0.01)
    se = StateEvolution(p)
    return p, se, se.solve(0.5)


def test_identity_gram_reproduces_the_se_channel(se_point):
    """With Gamma = I the QMC channel is the SE's channel: q_hat, m_hat, sigma_hat, the train error and the Stein
    form of m_hat agree with SoftmaxChannel.moments within 4 of their replica errors (+1e-4 relative)."""
    p, se, r = se_point
    ch = se.channel_final.moments(0.5, r.q, r.m, r.sigma)
    f = FiniteSizeChannel(se.channel_final.params, 100, qmc_log2=12, replicas=8)
    reps = f.evaluate(0.5, r.q, r.m, r.sigma, gram=False)
    want = {"q_hat": ch.q_hat, "m_hat": ch.m_hat, "sigma_hat": ch.sigma_hat, "train_error": ch.train_error,
            "m_hat_stein": ch.m_hat}
    for k, v in want.items():
        vals = np.array([x[k] for x in reps])
        mean, err = vals.mean(), vals.std(ddof=1) / math.sqrt(vals.size)
        assert abs(mean - v) <= 4 * err + 1e-4 * abs(v), (k, mean, err, v)
    assert max(x["prox_residual"] for x in reps) < 1e-7


def test_correction_vanishes_like_one_over_d(se_point):
    """The Gram correction of the conjugates and of the test error scales like 1/d: d x correction at d = 200 and
    800 agree within 25 % (and the sign is the d = 100 sign); deterministic (same digits twice)."""
    p, se, r = se_point
    params = se.channel_final.params
    out = {}
    for d in (200, 800):
        f = FiniteSizeChannel(params, d, qmc_log2=10, replicas=8)
        corr, err = f.correction(0.5, r.q, r.m, r.sigma)
        out[d] = (corr, err, f.test_error_correction(r.q, r.m))
    for k in ("m_hat", "sigma_hat", "train_error"):
        a, b = 200 * out[200][0][k], 800 * out[800][0][k]
        assert a == pytest.approx(b, rel=0.25), (k, a, b)
    te200, te800 = 200 * out[200][2][0], 800 * out[800][2][0]
    assert te200 > 0 and te800 > 0 and te200 == pytest.approx(te800, rel=0.3)
    again = FiniteSizeChannel(params, 200, qmc_log2=10, replicas=8).correction(0.5, r.q, r.m, r.sigma)[0]
    assert again == out[200][0]


def test_finite_size_channel_rejects_bad_input():
    from tiedattention.errors import ParameterError
    from tiedattention.theory.channel import ChannelParams

    with pytest.raises(ParameterError, match="d"):
        FiniteSizeChannel(ChannelParams(tokens=2), 2)
    with pytest.raises(ParameterError, match="replicas"):
        FiniteSizeChannel(ChannelParams(tokens=2), 50, replicas=1)


# --------------------------------------------------------------------------------------------------
# slow: the finite-size SE against d = 100 ERM
# --------------------------------------------------------------------------------------------------
# measured (session 5; prox ERM at d = 100, seeds 0-7, 4e4 test sequences each; mean +- s.e. over seeds) against
# the finite-size SE at d = 100 and the d -> infinity SE (docs/theory/finite_size.md, table):
# (finite-size SE on the order-16 SE, 2026-11-30 /tmp/s6/fd_points.py; the d = 100 ERM values are this test's)
#   factorised 0.5: 0.13819 +- 0.00046 | 0.13808 (+0.2) | 0.13600 (+4.7)
#   direct 0.1:     0.34468 +- 0.00214 | 0.34647 (-0.8) | 0.34771 (-1.4)
#   direct 0.5:     0.15950 +- 0.00088 | 0.15878 (+0.8) | 0.15603 (+4.0)
#   direct 2:       0.09146 +- 0.00032 | 0.09168 (-0.7) | 0.09049 (+3.0)
#   factorised 0.25, 32 seeds (2026-11-30): 0.19223 +- 0.00076 | 0.19232 (-0.1) | 0.18841 (+5.0); with seeds 0-7
#   alone 0.19524 +- 0.00100 (+2.9): a high draw. Not here: alpha <= 0.1, where the finite-size SE misses training by
#   +2 to +9 s.e. with 32 seeds (finite_size.md section 5)
CASES = [("factorized", 0.5, 8), ("factorized", 0.25, 32), ("direct", 0.1, 8), ("direct", 0.5, 8), ("direct", 2.0, 8)]


@pytest.mark.slow
@pytest.mark.parametrize("model,alpha,seeds", CASES)
def test_finite_size_se_meets_d100_training(model, alpha, seeds, torch_one_thread):
    """MP kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2: the finite-size SE at d = 100 lies within two standard
    errors (plus its own QMC error) of the d = 100 prox ERM, re-trained here (8 or 32 seeds, 4e4 test sequences),
    where the d -> infinity SE does not (direct alpha = 0.5: +4 s.e.; factorised alpha = 0.5: +5 s.e., 0.25: +5)."""
    sim = pytest.importorskip("tiedattention.simulation")
    p = Problem.from_options(lam=0.01, model=model)
    fd = solve_finite_size(p, alpha, 100)
    assert fd.converged, fd.message
    rows = [sim.simulate_record(p, alpha, 100, seeds=1, seed0=s, solver="prox", threads=1, n_test=40_000)
            for s in range(seeds)]
    te = np.array([r["test_error_mean"] for r in rows])
    mean, sem = te.mean(), te.std(ddof=1) / math.sqrt(te.size)
    z_fd, z_se = (mean - fd.test_error) / sem, (mean - fd.se["test_error"]) / sem
    print(f"\n{model} alpha={alpha}: ERM d=100 {mean:.5f} +- {sem:.5f}; finite-size SE {fd.test_error:.5f} "
          f"({z_fd:+.2f} s.e.); SE {fd.se['test_error']:.5f} ({z_se:+.2f} s.e.)")
    assert abs(mean - fd.test_error) <= 2 * sem + fd.errors["test_error"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["factorized", "direct"])
def test_gram_matched_design_meets_finite_size_se(model, torch_one_thread):
    """The finite-size SE describes the Gram-matched Gaussian design (Gaussian sensing vectors mixed by the AIM's
    per-sequence Gram factors, simulation.gaussian_design(gram=True)) at d = 100, alpha = 0.5, lambda = 0.01: its
    prox ERM test error (8 seeds, 1e5 fresh Gram-matched test sequences) lies within two standard errors (plus the
    QMC error) of the finite-size SE, and its excess over the d -> infinity SE is positive (measured, factorised:
    0.13825 +- 0.00082 with 8 seeds, 0.13859 +- 0.00059 with 16; the plain Gaussian design 0.13690 +- 0.00056)."""
    gd = pytest.importorskip("tiedattention.simulation.gaussian_design")
    p = Problem.from_options(lam=0.01, model=model)
    fd = solve_finite_size(p, 0.5, 100)
    assert fd.converged, fd.message
    vals = []
    for s in range(8):
        data = gd.sample_gaussian_design(p, 5000, 100, s, gram=True)
        S0 = data.S0
        out = gd.train_gaussian(p, data, seed=s)
        del data
        q, m, Q0 = gd.overlaps(out["S_hat"], S0)
        vals.append(gd.gaussian_test_errors(p, q, m, Q0, s, n_test=100_000, gram=True, d=100)["test_error"])
    vals = np.array(vals)
    mean, sem = vals.mean(), vals.std(ddof=1) / math.sqrt(vals.size)
    print(f"\nGram-matched design, {model}: {mean:.5f} +- {sem:.5f}; finite-size SE {fd.test_error:.5f} "
          f"({(mean - fd.test_error) / sem:+.2f} s.e.); SE {fd.se['test_error']:.5f} "
          f"({(mean - fd.se['test_error']) / sem:+.2f})")
    assert abs(mean - fd.test_error) <= 2 * sem + fd.errors["test_error"]
    assert fd.test_error > fd.se["test_error"]


def test_cli_finite_d_bad_input_and_non_regular_points():
    """`theory --finite-d`: a dimension <= T is one error line naming the option (exit 2); at a lambda -> 0+
    interpolating point the fd_* fields are null with a message and the exit status stays 0."""
    import json

    from typer.testing import CliRunner

    from tiedattention.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["theory", "--alpha", "0.5", "--finite-d", "2"])
    assert bad.exit_code == 2 and "--finite-d" in bad.output and len(bad.output.strip().splitlines()) == 1
    ok = runner.invoke(app, ["theory", "--alpha", "0.05", "--lam", "0", "--finite-d", "100", "--json"])
    assert ok.exit_code == 0, ok.output
    rec = json.loads(ok.output.strip().splitlines()[-1])
    assert rec["phase"] == "interpolating" and rec["fd_converged"] is None and rec["fd_test_error"] is None
    assert "not computed" in rec["fd_message"] and rec["fd_d"] == 100
