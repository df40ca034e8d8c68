"""Error decomposition (docs/theory/decomposition.md): exact sums, signs, limits, the finite-d estimator, the CLI.

Slow checks (``pytest -m slow tests/test_decomposition.py``): each part against its finite-d estimator from
proximal-gradient ERM runs.
"""

import json
import math
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.problem import Problem
from tiedattention.targets import haar_orthogonal
from tiedattention.theory.decomposition import (
    PARTS,
    decompose_matrices,
    decompose_point,
    decomposition_curve,
    goe,
    model_matrix,
    rank_tail_energy,
    saturation_point,
    shapley,
    spectral_parts,
)
from tiedattention.theory.state_evolution import SEResult, StateEvolution

KEYS4 = ("over", "under", "approx", "mismatch")


# --------------------------------------------------------------------------------------------------
# the finite-d estimator on matrices with a known answer
# --------------------------------------------------------------------------------------------------
def test_estimator_on_a_constructed_matrix():
    """S0 = sum theta_i u_i u_i^T; S_hat has an outlier l1 along u1, a direction u2 shrunk to l2 < c theta2, a
    pure-noise direction w (orthogonal to every target mode) with eigenvalue b, the rest null."""
    d, c = 12, 0.8
    rng = np.random.default_rng(0)
    O = haar_orthogonal(d, rng)
    theta = np.array([5.0, 3.0, 2.0, 1.0, 0.5] + [0.0] * (d - 5))
    S0 = (O * theta) @ O.T
    l1, l2, b = 4.5, 1.0, 0.7
    w = O[:, 6]  # a null direction of S0
    S_hat = l1 * np.outer(O[:, 0], O[:, 0]) + l2 * np.outer(O[:, 1], O[:, 1]) + b * np.outer(w, w)
    r = decompose_matrices(S_hat, S0, c, n_outliers=1, smooth=0)
    assert r["dist_approx"] == pytest.approx((l1 - c * theta[0]) ** 2 / d, rel=1e-12)
    assert r["dist_over"] == pytest.approx(b**2 / d, rel=1e-12)
    under = ((c * theta[1] - l2) ** 2 + c**2 * np.sum(theta[2:] ** 2)) / d
    assert r["dist_under"] == pytest.approx(under, rel=1e-12)
    # MSE parts: (dq - 2 dm) of each part, plus (1 - c)^2 Q0
    q0 = np.sum(theta**2) / d
    assert r["mse_approx"] == pytest.approx(((l1**2 - c**2 * theta[0] ** 2) - 2 * (l1 - c * theta[0]) * theta[0]) / d)
    assert r["mse_over"] == pytest.approx(b**2 / d)
    assert r["mse_mismatch"] == pytest.approx((1 - c) ** 2 * q0)
    mse = np.sum((S_hat - S0) ** 2) / d
    assert sum(r[f"mse_{k}"] for k in KEYS4) == pytest.approx(mse, rel=1e-12)
    # rank limit p = 3 < d: the tail of S0 beyond its 3 largest modes moves from under to approx
    rp = decompose_matrices(S_hat, S0, c, n_outliers=1, rank=3, smooth=0)
    tail = c**2 * np.sum(theta[3:] ** 2) / d
    assert rp["dist_approx"] == pytest.approx(r["dist_approx"] + tail, rel=1e-12)
    assert rp["dist_under"] == pytest.approx(r["dist_under"] - tail, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_identities_on_random_matrices(seed):
    """Any PSD S_hat of rank <= p: dist = (1/d)||S_hat - c S0||^2 exactly, every dist part >= 0 (the under part
    by Ky Fan), the pairs add up to (q - c^2 Q0, m - c Q0), the MSE parts to the MSE."""
    d, p, c = 40, 10, 0.9
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, d))
    S0 = (A + A.T) / math.sqrt(8 * d) + np.diag(rng.uniform(0, 2, d))
    W = rng.standard_normal((p, d)) / math.sqrt(d)
    S_hat = W.T @ W + 0.5 * np.outer(S0[:, 0], S0[:, 0]) / d
    lam, U = np.linalg.eigh(S_hat)
    lam[: d - p] = 0.0  # rank p
    S_hat = (U * lam) @ U.T
    r = decompose_matrices(S_hat, S0, c, n_outliers=2, rank=p, smooth=0)
    assert r["dist"] == pytest.approx(np.sum((S_hat - c * S0) ** 2) / d, rel=1e-10)
    assert sum(r[f"dist_{k}"] for k in PARTS) == pytest.approx(r["dist"], rel=1e-10)
    assert min(r[f"dist_{k}"] for k in PARTS) >= 0
    dq = sum(r["pairs"][k][0] for k in PARTS)
    dm = sum(r["pairs"][k][1] for k in PARTS)
    assert dq == pytest.approx(np.sum(S_hat**2) / d - c**2 * r["q0"], abs=1e-12)
    assert dm == pytest.approx(np.sum(S_hat * S0) / d - c * r["q0"], abs=1e-12)
    assert sum(r[f"mse_{k}"] for k in KEYS4) == pytest.approx(np.sum((S_hat - S0) ** 2) / d, rel=1e-10)
    # the smoothed over/under split keeps the exact total and a non-negative E_over
    rs = decompose_matrices(S_hat, S0, c, n_outliers=2, rank=p, smooth=5)
    assert sum(rs[f"dist_{k}"] for k in PARTS) == pytest.approx(r["dist"], rel=1e-10)
    assert rs["dist_over"] >= 0 and rs["dist_approx"] == r["dist_approx"]
    # so does the debiased one (the over part moves c^2 V_j to the under part)
    rd = decompose_matrices(S_hat, S0, c, n_outliers=2, rank=p, debias=True)
    assert sum(rd[f"dist_{k}"] for k in PARTS) == pytest.approx(r["dist"], rel=1e-10)
    assert rd["dist_over"] <= r["dist_over"] and rd["dist_approx"] == pytest.approx(r["dist_approx"], rel=1e-12)
    with pytest.raises(ValueError):
        decompose_matrices(S_hat, S0, c, n_outliers=p + 1)
    with pytest.raises(ValueError):
        decompose_matrices(S_hat, S0, c, smooth=5, debias=True)


def test_debiased_over_part_on_haar_directions():
    """S_hat = U diag(l) U^T with U Haar and l_j = c mean(theta) + b_j: each xi_j = u_j^T S0 u_j is the quadratic
    form of a uniform unit vector, E xi_j = mean(theta), Var xi_j = 2/(d + 2) var(theta) exactly, so the raw
    over part is mean(b^2) + c^2 Var xi in expectation (all directions over for b >> c sd(xi)) and the debiased
    one mean(b^2): the centred Porter-Thomas estimate removes the bias (the uncentred one, sum theta_i^2 w^4,
    would remove 2/(d + 2) mean(theta^2) instead, here 1.9x too much). 24 draws: s.e. 0.03 of the bias."""
    d, c, draws = 100, 0.9, 24
    rng = np.random.default_rng(1)
    theta = np.concatenate([np.zeros(d // 2), rng.uniform(1.0, 3.0, d - d // 2)])
    S0 = np.diag(theta)
    b = np.linspace(0.5, 0.7, d)  # distinct: the eigenbasis of S_hat is U
    var = 2 / (d + 2) * np.var(theta)
    raw, deb = [], []
    for _ in range(draws):
        U = haar_orthogonal(d, rng)
        S_hat = (U * (c * theta.mean() + b)) @ U.T
        raw.append(decompose_matrices(S_hat, S0, c)["dist_over"])
        deb.append(decompose_matrices(S_hat, S0, c, debias=True)["dist_over"])
    bias = c * c * var
    assert np.mean(raw) == pytest.approx(np.mean(b * b) + bias, abs=0.1 * bias)  # measured +1.00 bias
    assert np.mean(deb) == pytest.approx(np.mean(b * b), abs=0.15 * bias)  # +0.06 +- 0.03 bias


def test_estimate_record_limits():
    """The estimator record on an MP sample (its Q0_d differs from Q0: the per-sample channel): S_hat = c_inf S0
    has no over/under/approx and a mismatch equal to that of the ray; S_hat = 0 is all under-fitting."""
    from tiedattention.theory.decomposition import estimate_record

    p = Problem.from_options(target="mp:0.5")
    se = StateEvolution(p, channel_options={"order": 8})
    d = 80
    S0 = p.task.target.sample(d, np.random.default_rng(0))
    c = 0.876
    r = estimate_record(se, c * S0, S0, c, 0)
    assert r["q0"] != se.q0
    assert r["dist"] == pytest.approx(0.0, abs=1e-12)
    for k in PARTS:
        assert r[f"E_{k}"] == pytest.approx(0.0, abs=1e-12) and r[f"mse_{k}"] == pytest.approx(0.0, abs=1e-12)
    assert 0 <= r["E_mismatch"] < 1e-4  # c is within 1e-3 of the ray minimiser
    assert r["E_mismatch_clean"] > 1e-3
    z = estimate_record(se, np.zeros((d, d)), S0, c, 3)  # k* larger than the rank: clamped
    assert z["n_outliers_used"] == 0
    assert z["E_under"] == pytest.approx(z["e_test_qm"] - z["e_0"] - z["E_mismatch"], abs=1e-12)
    assert z["E_over"] == 0 and z["E_approx"] == 0


def test_shapley_is_exact_and_symmetric():
    v = {frozenset(): 0.0, frozenset("a"): 1.0, frozenset("b"): 2.0, frozenset("c"): 0.0,
         frozenset("ab"): 5.0, frozenset("ac"): 1.0, frozenset("bc"): 2.0, frozenset("abc"): 6.0}
    phi = shapley(v.__getitem__, "abc")
    assert sum(phi.values()) == pytest.approx(6.0)
    assert phi["c"] == pytest.approx(1 / 3)  # c adds 0 alone, 0 to a, 0 to b, and 1 to ab (weight 1/3)
    assert phi["a"] == pytest.approx(1 / 3 * 1 + 1 / 6 * 3 + 1 / 6 * 1 + 1 / 3 * 4)


def test_rank_tail_energy():
    from tiedattention.targets import parse_target

    t = parse_target("powerlaw:1.25")
    mu = t.measure(300)
    th2 = np.sort(t.eigenvalues(300) ** 2)
    assert rank_tail_energy(mu, 0.1) == pytest.approx(np.sum(th2[:270]) / 300, rel=1e-9)
    assert rank_tail_energy(mu, 1.0) == 0.0
    mp = parse_target("mp:0.5").measure()
    assert rank_tail_energy(mp, 0.5) == pytest.approx(0.0, abs=1e-9)  # only the atom at 0 is cut
    ev = np.sort(parse_target("mp:0.5").eigenvalues(1000, np.random.default_rng(0)) ** 2)
    assert rank_tail_energy(mp, 0.3) == pytest.approx(np.sum(ev[:700]) / 1000, rel=0.03)


# --------------------------------------------------------------------------------------------------
# the SE side against diagonalisation of s f(S0 + delta Z) (the overlap kernel, independently)
# --------------------------------------------------------------------------------------------------
def _point(delta, eps, scale):
    return SEResult(alpha=0.5, alpha_bar=1.0, q=0.0, m=0.0, sigma=1.0, q_hat=1.0, m_hat=scale, sigma_hat=1.0,
                    delta=delta, eps=eps, mse=0.0, test_error=0.0, test_error_clean=0.0, train_error=0.0,
                    objective=0.0, rank=0.0, converged=True, iterations=1, residual=0.0, seconds=0.0)


@pytest.mark.parametrize(
    "spec,kappa,delta,eps",
    [("spikes:10,8,6.5+mp:0.2", 1.0, 0.6, 0.5), ("mp:0.5", 0.3, 0.4, 0.1), ("powerlaw:1.25", 1.0, 2.0, 1.0)],
)
def test_spectral_parts_match_diagonalisation(spec, kappa, delta, eps):
    """The per-direction integrals (xi(y) = y - 2 delta^2 Re g, a(y) = delta^2 - |omega|^2 + 2 u xi) against the
    estimator applied to S_hat = s f(S0 + delta Z) at d = 600 (one sample; fluctuations ~1e-3)."""
    d, s, c = 600, 0.8, 0.9
    p = Problem.from_options(target=spec, kappa=kappa)
    th = spectral_parts(p, p.task.target.measure(d), _point(delta, eps, s), c)
    rng = np.random.default_rng(3)
    S0 = p.task.target.sample(d, rng)
    rng_model = np.random.default_rng()
    rng_model.bit_generator.state = rng.bit_generator.state
    lam, U = np.linalg.eigh(S0 + delta * goe(d, rng))
    cut = eps if kappa >= 1 else max(eps, np.sort(lam)[::-1][p.student.width(d) - 1])
    S_hat = (U * np.where(lam >= cut, s * (lam - eps), 0.0)) @ U.T
    # model_matrix (the same-d theory of the slow test) is this construction
    assert np.allclose(model_matrix(p, _point(delta, eps, s), S0, rng_model), S_hat, rtol=0, atol=1e-12)
    est = decompose_matrices(S_hat, S0, c, n_outliers=th["k_star"], rank=p.student.width(d))
    if spec.startswith("spikes"):
        assert th["k_star"] == 3
    for k in ("q", "m", "dist", "dist_over", "dist_under", "dist_approx", "mse_over", "mse_under", "mse_approx"):
        assert est[k] == pytest.approx(th[k], abs=4e-3 + 0.01 * abs(th[k])), k


@pytest.mark.parametrize("spec", ["mp:0.5", "spikes:10,8,6.5+mp:0.2", "powerlaw:1.25"])
def test_overlap_kernel_moments(spec):
    """Over the whole support (direct model: f(y) = y, no null space) int a(y) rho = Q0, so the null energy is 0;
    and int l xi rho = s int xi y rho is the SE's m of the linear denoiser, s (Q0 + 0) (Stein: int xi y = Q0)."""
    d = 300
    p = Problem.from_options(target=spec, model="direct", lam=0.0)
    mu = p.task.target.measure(d)
    r = spectral_parts(p, mu, _point(0.7, 0.0, 0.9), c=1.0)
    assert r["a_null"] == pytest.approx(0.0, abs=1e-9)
    assert r["m"] == pytest.approx(0.9 * mu.q0, rel=1e-9)
    assert r["q"] == pytest.approx(0.81 * (mu.q0 + 0.49), rel=1e-9)  # s^2 (Q0 + delta^2)


# --------------------------------------------------------------------------------------------------
# SE points: sums, signs, limits
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spiked_curve():
    p = Problem.from_options(target="spikes:4,2.5,1.5")
    # order 8: the same parts to 5 digits as the default 12, 2.5x faster
    return decomposition_curve(p, [0.02, 0.1, 1.0], d=100, tol=1e-6, channel_options={"order": 8})


def test_parts_add_up_and_signs(spiked_curve):
    for r in spiked_curve:
        assert r["converged"]
        for tag in ("", "_clean"):
            total = sum(r[f"E_{k}{tag}"] for k in KEYS4)
            # exact: the parts add up to e(q, m) - e_0 at the (q, m) of the spectrum, which is the SE's point
            # up to its fixed-point residual (tol 1e-6 here, 1e-10 by default)
            assert total == pytest.approx(r[f"e_test{tag}_qm"] - r[f"e_0{tag}"], abs=1e-13)
            assert total == pytest.approx(r[f"e_test{tag}"] - r[f"e_0{tag}"], abs=1e-6)
            assert r[f"E_mismatch{tag}"] >= -1e-12
            assert min(r[f"E_{k}_alone"] for k in PARTS) >= -1e-12  # P_inf minimises the noisy error
        assert r["E_mismatch"] == pytest.approx(0.0, abs=1e-12)  # the matched loss saturates at the minimiser
        assert r["E_mismatch_clean"] > 1e-4  # ... which is not the clean-label minimiser (c_inf < 1)
        assert sum(r[f"mse_{k}"] for k in KEYS4) == pytest.approx(r["mse"], abs=1e-9)
        assert sum(r[f"dist_{k}"] for k in PARTS) == pytest.approx(r["dist"], abs=1e-12)
        assert min(r[f"dist_{k}"] for k in PARTS) >= 0
        # q, m recomputed from the spectrum are the SE's: e(q, m) there is the SE test error
        assert r["e_test_qm"] == pytest.approx(r["e_test"], abs=1e-6)  # (SE tolerance 1e-6)
        assert r["mse_mismatch"] == pytest.approx((1 - r["c_inf"]) ** 2 * r["q0"], rel=1e-12)


def test_large_alpha_recovers_modes_and_cuts_the_bulk(spiked_curve):
    """alpha 0.02 -> 0.1 -> 1 (d = 100): the spikes are recovered one by one (k* = 1, 2, 3) and E_under falls;
    with all three recovered the noise bulk is cut back and E_over falls too."""
    k = [r["k_star"] for r in spiked_curve]
    assert k == [1, 2, 3]
    under = [r["E_under"] for r in spiked_curve]
    assert under[0] > under[1] > under[2]
    assert spiked_curve[2]["E_over"] < spiked_curve[1]["E_over"]
    assert spiked_curve[2]["E_approx"] < spiked_curve[1]["E_approx"]
    assert spiked_curve[0]["dist_approx"] > 0 and spiked_curve[0]["E_approx"] > 0  # one outlier at 0.02


def test_small_alpha_is_all_under_fitting():
    """lambda > 0 and few samples: S_hat = 0 (zero phase), the whole excess is E_under (and the mismatch)."""
    p = Problem.from_options(target="mp:0.5", lam=0.1)
    se = StateEvolution(p)
    res = se.solve(1e-3)
    assert res.phase == "zero"
    r = decompose_point(se, res)
    assert r["E_over"] == 0.0 and r["E_approx"] == 0.0
    assert r["E_under"] == pytest.approx(r["e_test"] - r["e_0"], rel=1e-12)
    assert r["dist_under"] == pytest.approx(r["c_inf"] ** 2 * (1.5), rel=1e-12)  # c^2 Q0, Q0 = 1 + kappa0
    e0, c0, e0c = saturation_point(se)
    assert r["c_inf"] == c0 and r["e_0"] == e0 and r["e_0_clean"] == e0c


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------
def test_cli_json():
    """Two points in the zero phase (cheap): the JSON Lines contract and the exact sum."""
    out = CliRunner().invoke(app, ["decompose", "--lam", "0.1", "--alpha", "0.001,0.002", "--json"])
    assert out.exit_code == 0, out.output
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert [r["alpha"] for r in recs] == [0.001, 0.002]
    r = recs[0]
    for key in ("alpha", "e_test", "e_0", "converged", "E_over", "E_under", "E_approx", "E_mismatch", "mse_over",
                "mse_under", "mse_approx", "mse_mismatch", "E_over_clean", "k_star"):
        assert key in r
    assert sum(r[f"E_{k}"] for k in KEYS4) == pytest.approx(r["e_test"] - r["e_0"], abs=1e-9)
    # the table in 80 columns (piped output): no number cut to '…'
    out = CliRunner().invoke(app, ["decompose", "--lam", "0.1", "--alpha", "0.001,0.002"], env={"COLUMNS": "80"})
    assert out.exit_code == 0 and "…" not in out.stdout
    assert all(f"{q['e_test']:.5f}" in out.stdout and f"{q['E_under']:.5f}" in out.stdout for q in recs)


@pytest.mark.parametrize(
    "args,param",
    [(["--alpha", "-1"], "--alpha"), (["--alpha", "x"], "--alpha"), (["--alpha", "0.1", "--lam", "-1"], "--lam"),
     (["--alpha", "0.1", "--seeds", "2"], "--d"), (["--alpha", "0.1", "--target", "powerlaw:1.25"], "--d"),
     (["--alpha", "0.1", "--c-inf", "0"], "--c-inf"), (["--alpha", "0.1", "--seeds", "-1"], "--seeds")],
)
def test_cli_bad_input(args, param):
    out = CliRunner().invoke(app, ["decompose", *args])
    assert out.exit_code == 2
    lines = [s for s in out.output.splitlines() if s.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {param}:"), out.output


# --------------------------------------------------------------------------------------------------
# slow: theory against the finite-d estimators of ERM runs
# --------------------------------------------------------------------------------------------------
SIM_BIG = ("E_under", "E_under_clean", "E_mismatch_clean", "mse", "mse_under", "dist_under", "e_test_qm")
SIM_APPROX = ("E_approx", "E_approx_clean", "mse_approx", "dist_approx")
SIM_OVER = ("E_over", "E_over_clean", "mse_over", "dist_over")
SIM_SPEC, MODEL_SAMPLES = "spikes:6,5+mp:0.5", 16
SIM_SEEDS = {100: 12, 200: 12, 400: 4}  # seeds per d (d = 400: 7-12 min per seed at alpha = 0.3, loaded CPU)
SIM_DIMS = tuple(SIM_SEEDS)


def _seed_row(p, se, alpha, d, s, r, sat):
    """Seed s of the proximal ERM through the estimator (the record of ``simulate_parts``, and ``debiased``: the
    same with debias=True), cached as one JSON per seed when TIEDATTENTION_SIM_CACHE is set (an interrupted run
    loses nothing; a rerun re-checks the assertions without training)."""
    root = os.environ.get("TIEDATTENTION_SIM_CACHE")
    path = os.path.join(root, f"decomp_spikes6-5pmp0.5_{alpha}_{d}_{s}.json") if root else None
    if path and os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    from tiedattention.commands.decompose import simulate_parts
    from tiedattention.theory.decomposition import estimate_record

    out = {}

    def keep(seed, S_hat, S0, row):
        out.update(row)
        out["debiased"] = estimate_record(se, S_hat, S0, r["c_inf"], r["k_star"], sat, debias=True)

    simulate_parts(p, se, alpha, d, 1, r["c_inf"], r["k_star"], sat, seed0=s, on_seed=keep)
    if path:
        os.makedirs(root, exist_ok=True)
        with open(path, "w") as fh:
            json.dump(out, fh)
    return out


def _gaps(alpha, d):
    """SE record at d and, per key, (mean, s.e.) over seeds of: the raw estimator minus the SE ('raw'), the
    debiased estimator minus the SE ('debiased'), and the raw estimator minus the same estimator on the SE's
    model s f(S0 + delta Z) at the same d and the same S0 ('same_d', paired per seed; model_record with
    MODEL_SAMPLES draws, GOE seeds fixed)."""
    from tiedattention.simulation import rng_for
    from tiedattention.theory.decomposition import model_record

    p = Problem.from_options(target=SIM_SPEC)
    se = StateEvolution(p, d=d)
    sat = saturation_point(se)
    res = se.solve(alpha)
    r = decompose_point(se, res, None, sat)
    assert r["converged"] and r["k_star"] == 2
    raw, deb, same = [], [], []
    for s in range(SIM_SEEDS[d]):
        row = _seed_row(p, se, alpha, d, s, r, sat)
        S0 = p.task.target.sample(d, rng_for(s, "target"))
        model = model_record(se, res, S0, r["c_inf"], r["k_star"], sat, samples=MODEL_SAMPLES, seed=s)
        raw.append([row[k] - r[k] for k in SIM_BIG + SIM_APPROX + SIM_OVER])
        deb.append([row["debiased"][k] - r[k] for k in SIM_BIG + SIM_APPROX + SIM_OVER])
        same.append([row[k] - model[k] for k in SIM_BIG + SIM_APPROX + SIM_OVER])
    out = {}
    for tag, x in (("raw", raw), ("debiased", deb), ("same_d", same)):
        x = np.array(x)
        mean, sem = x.mean(axis=0), x.std(axis=0, ddof=1) / math.sqrt(len(x))
        out[tag] = {k: (float(mean[i]), float(sem[i])) for i, k in enumerate(SIM_BIG + SIM_APPROX + SIM_OVER)}
    return r, out


def _misses(r, gaps, alpha, d, tag):
    """Lines of the check: large parts within 3 s.e. + 2 %, approx and over parts within 3 s.e. + 10 % + 5e-4."""
    lines, bad = [], []
    for key in SIM_BIG + SIM_APPROX + SIM_OVER:
        gap, sem = gaps[tag][key]
        th = r[key]
        tol = 3 * sem + (0.02 * abs(th) if key in SIM_BIG else 0.1 * abs(th) + 5e-4)
        line = f"alpha={alpha} d={d} {tag:8s} {key:16s} SE {th:.5f} gap {gap:+.5f} +- {sem:.5f} (tol {tol:.5f})"
        lines.append(line)
        if abs(gap) > tol:
            bad.append(line)
    return lines, bad


@pytest.fixture(scope="module")
def decomposition_gaps():
    cache = {}

    def get(alpha, d):
        if (alpha, d) not in cache:
            cache[alpha, d] = _gaps(alpha, d)
        return cache[alpha, d]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.6, 1.0])
def test_parts_match_simulations(alpha, torch_one_thread, decomposition_gaps):
    """Spikes 6, 5 on an MP(0.5) bulk (outliers, a fitted bulk and a null space: every part present), Delta = 0.5,
    lambda = 0.01, T = 2; proximal ERM (the exact minimiser), 12 seeds at d = 100, 200 and 4 at d = 400, the SE at
    the same d (both spikes recovered; alpha = 0.6 added 2026-11-30: d = 400 seeds 7-9 min, d = 200 20-50 s;
    alpha = 1.0 added in session 8: 31 min for its 28 seeds at load 3). Uncached about 2.5 h on a loaded 2-core
    CPU, 2-3 min from the cache
    (TIEDATTENTION_SIM_CACHE). At d = 400 every part of the *debiased* estimator (decompose_matrices(debias=True),
    the over/under split's O(1/d) bias removed to first order) agrees with the SE: the large parts (under, mismatch,
    MSE, e(q, m)) within 3 s.e. + 2 %, the approx and over parts within 3 s.e. + 10 % + 5e-4. The raw estimator's
    over gaps (E_over, E_over_clean, mse_over, dist_over against the SE) at d = 100, 200, 400 extrapolate to 0
    within 3 s.e. (weighted fit a + b/d; every fit printed, docs/theory/decomposition.md section 7)."""
    pytest.importorskip("torch")
    table = {d: decomposition_gaps(alpha, d) for d in SIM_DIMS}
    not_closing = []
    for key in SIM_OVER + ("E_under", "E_approx", "e_test_qm", "mse_approx", "mse_under", "dist_approx", "dist_under"):
        for tag in ("raw", "debiased", "same_d"):
            g = [table[d][1][tag][key] for d in SIM_DIMS]
            a, se_a, chi2 = _fit_inverse_d(SIM_DIMS, [x[0] for x in g], [x[1] for x in g])
            line = (f"alpha={alpha} {tag:8s} {key:16s} gaps " + ", ".join(f"{m:+.5f}+-{e:.5f}" for m, e in g)
                    + f"  1/d intercept {a:+.5f}+-{se_a:.5f} (chi2 {chi2:.1f}, 1 dof)")
            print(line)
            if tag == "raw" and key in SIM_OVER and abs(a) > 3 * se_a:
                not_closing.append(line)
    r, gaps = table[400]
    lines, bad = _misses(r, gaps, alpha, 400, "debiased")
    print("\n".join(lines))
    assert not bad, bad
    # the raw over gaps close with d: their 1/d extrapolation is 0 within 3 s.e.
    assert not not_closing, not_closing


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.6, 1.0])
def test_parts_match_the_same_d_model(alpha, torch_one_thread, decomposition_gaps):
    """The raw estimator on the trained S_hat against the same estimator on the SE's own finite-d model
    s f(S0 + delta Z) (same d = 400, same S0 per seed, 16 GOE draws): both sides carry the estimator's O(1/d)
    bias, so this tests only whether the ERM's S_hat is distributed as the SE says. Same tolerances."""
    pytest.importorskip("torch")
    r, gaps = decomposition_gaps(alpha, 400)
    lines, bad = _misses(r, gaps, alpha, 400, "same_d")
    print("\n".join(lines))
    assert not bad, bad


def _fit_inverse_d(dims, values, sems):
    """Weighted least squares of y = a + b/d: (a, standard error of a, chi^2 of the fit)."""
    x = 1.0 / np.asarray(dims, float)
    y = np.asarray(values, float)
    w = 1.0 / np.maximum(np.asarray(sems, float), 1e-12) ** 2
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    coef = cov @ design.T @ (w * y)
    return float(coef[0]), float(np.sqrt(cov[0, 0])), float(np.sum(w * (y - design @ coef) ** 2))
