"""Theory against finite-size training (slow: run with ``pytest -m slow tests/test_spectrum_sim.py``).

Same checks as benchmarks/spectra_device.py (numbers in docs/theory/spectra.md section 5), at CPU sizes. Where the
finite-size bias at the issue's d is larger than the statistical error (the direct model at alpha = 0.5, the
learned outliers of spikes 10, 8, 6.5 on MP(0.2)), the check extrapolates in 1/d like tests/test_agreement.py:
a weighted fit a + b/d over several d, with the intercept required within its error bars of the SE. The d = 100
test errors of the narrow and direct students are compared with the finite-size SE at d = 100
(theory/finite_size.py) where it is validated (n >= 2500), which carries that bias.

Each test prints its measured numbers (see them with ``-rA`` or ``-s``). With ``TIEDATTENTION_SIM_CACHE=DIR`` the
trainings are read from / written to DIR, one JSON per (problem, alpha, d, seed) in the format of the scripts that
produced the numbers of docs/theory/spectra.md section 5, so a rerun re-checks the assertions without retraining.
"""

import json
import os

import numpy as np
import pytest

from tiedattention.problem import Problem
from tiedattention.stats import extrapolate_inverse_d
from tiedattention.theory.finite_size import solve_finite_size
from tiedattention.theory.spectrum import kolmogorov_distance, learned_spectrum
from tiedattention.theory.state_evolution import StateEvolution

pytestmark = pytest.mark.slow
sim = pytest.importorskip("tiedattention.simulation")

# seeds 0 .. n - 1 of spikes 10, 8, 6.5 on MP(0.2), alpha = 0.1, at d = 100, 200, 400
D100_SEEDS, D200_SEEDS, D400_SEEDS = 24, 16, 16


def _cache_file(*parts):
    root = os.environ.get("TIEDATTENTION_SIM_CACHE")
    if not root:
        return None
    name = "_".join(str(x).replace(":", "").replace(",", "-").replace("+", "p") for x in parts)
    return os.path.join(root, name + ".json")


def _cached(parts, compute):
    """compute() -> JSON-able dict, read from / written to the cache when TIEDATTENTION_SIM_CACHE is set."""
    path = _cache_file(*parts)
    if path and os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    out = compute()
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(out, fh)
    return out


def _record(p, spec, alpha, d, seeds, **kw):
    """simulate_record over seeds 0 .. seeds-1 with the prox solver (cached as one record)."""

    def compute():
        rec = sim.simulate_record(p, alpha, d, seeds=seeds, solver="prox", **kw)
        return {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for k, v in rec.items()
                if isinstance(v, (int, float, str, bool, list, np.ndarray)) or v is None}

    options = tuple(f"{k}{v}" for k, v in sorted(kw.items()))
    parts = ("rec", p.student.model, p.student.kappa, spec, alpha, d, seeds) + options
    return _cached(parts, compute)


def _test_error(rec):
    return {"test_error_mean": float(rec["test_error_mean"]), "test_error_sem": float(rec["test_error_sem"])}


def _extrapolate(dims, values, sems):
    """The d -> infinity intercept of y = a + b/d and its standard error (the library's fit)."""
    fit = extrapolate_inverse_d(dims, values, sems)
    return fit.intercept, fit.intercept_sem


def _spectrum_seed(p, spec, alpha, d, s):
    """One seed of simulate_record (prox, one thread) with its spectra, cached per seed: eigenvalues of S_hat
    and singular values of W/(pd)^{1/4}, rank, steps, converged, seconds (the same numbers as seed s of a
    seeds=4 record: every stream depends on the seed only)."""

    def compute():
        rec = sim.simulate_record(p, alpha, d, seeds=1, seed0=s, solver="prox", return_spectra=True, threads=1)
        return {"eigenvalues": np.asarray(rec["eigenvalues"])[0].tolist(),
                "singular_values": np.asarray(rec["singular_values"])[0].tolist(),
                "rank": rec["rank_mean"], "test_error": rec["test_error_mean"], "steps": rec["steps_mean"],
                "converged": rec["converged_all"], "train_seconds": rec["seconds_per_seed_mean"]}

    return _cached(("spec", spec, alpha, d, s), compute)


@pytest.mark.parametrize("alpha", [0.1, 0.5, 4.0])
def test_learned_spectrum_against_training_mp(alpha, torch_one_thread):
    """MP kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2, d = 200, 4 seeds (proximal gradient = the ERM):
    rank fraction within 0.02, largest singular value of W/(pd)^{1/4} within 3 %, Kolmogorov distance of the
    eigenvalue histogram (atom at 0 included) to the predicted law < 0.05. alpha = 4 is n = 160 000 sequences
    per seed (prox converges in ~30 iterations there, ~3 min per seed on one shared core)."""
    p = Problem.from_options(target="mp:0.5")
    sp = learned_spectrum(p, alpha)
    recs = [_spectrum_seed(p, "mp:0.5", alpha, 200, s) for s in range(4)]
    assert all(r["converged"] for r in recs)
    ev = np.array([r["eigenvalues"] for r in recs])
    sv = np.array([r["singular_values"] for r in recs])
    tol = 1e-6 * np.abs(ev).max()
    rank, top = np.mean(ev > tol), np.mean(sv.max(axis=1))
    ks = kolmogorov_distance(np.where(np.abs(ev) <= tol, 0.0, ev).ravel(), sp.cdf)
    print(f"alpha={alpha}: rank {rank:.4f} (theory {sp.rank:.4f}), top singular value {top:.4f} "
          f"(theory {np.sqrt(sp.top):.4f}, {top / np.sqrt(sp.top) - 1:+.2%}), Kolmogorov distance {ks:.4f}; "
          f"steps {[r['steps'] for r in recs]}, seconds {[round(r['train_seconds']) for r in recs]}")
    assert rank == pytest.approx(sp.rank, abs=0.02)
    assert top == pytest.approx(np.sqrt(sp.top), rel=0.03)
    assert ks < 0.05


# n = alpha d^2 above which the finite-size SE at d = 100 is the reference (docs/theory/finite_size.md section 5:
# it meets d = 100 training from n = 2500 on; at n <= 1000 the AIM's small-alpha excess it does not carry remains)
_FINITE_SIZE_MIN_N = 2500


@pytest.mark.parametrize(
    "model,kappa,alpha",
    [("factorized", 0.25, 0.1), ("factorized", 0.25, 0.5), ("factorized", 0.25, 4.0),
     ("direct", 1.0, 0.1), ("direct", 1.0, 2.0)],
)
def test_narrow_and_direct_test_error_against_training(model, kappa, alpha, torch_one_thread):
    """kappa = 0.25 < kappa0 = 0.5 (the rank constraint binds) and the direct (ridge) model: d = 100 training
    (8 seeds) within two standard errors of the theory at d = 100, plus the theory's own error estimate (no other
    allowance). The theory at d = 100 is the finite-size SE (theory/finite_size.py) where n = alpha d^2 >= 2500,
    the range where it is validated; below, the d -> infinity SE. Against the d -> infinity SE the alpha >= 0.5
    points sit +1.8 to +2.6 s.e. high (kappa = 0.25, alpha = 0.5: +2.07, a failure by 3e-5; direct, alpha = 2:
    +2.58), the sign and size of the O(1/d) bias the finite-size SE carries; the direct model at alpha = 0.5 is
    checked by extrapolation in d below."""
    p = Problem.from_options(target="mp:0.5", kappa=kappa, model=model)
    se = StateEvolution(p)
    res = se.solve(alpha)
    assert res.converged
    rec = _record(p, "mp:0.5", alpha, 100, 8)
    mean, sem = rec["test_error_mean"], rec["test_error_sem"]
    # the theory's own error: the SE's fixed-point error (order 16 against 12) where reported; the finite-size SE's
    # combines its QMC error with the SE's quadrature error
    theory, name = res.test_error, "SE"
    err = res.errors.get("fixed_point_test_error", res.errors.get("test_error", 0.0))
    if alpha * 100**2 >= _FINITE_SIZE_MIN_N:
        fd = solve_finite_size(p, alpha, 100, se=se, se_result=res)
        assert fd.converged, fd.message
        assert fd.test_error > res.test_error  # the O(1/d) excess is positive at these points
        theory, err, name = fd.test_error, fd.errors["test_error"], "finite-size SE (d = 100)"
    line = f"{model} kappa={kappa} alpha={alpha}: simulation {mean:.5f} +- {sem:.5f}, SE {res.test_error:.5f} " \
           f"(z = {(mean - res.test_error) / sem:+.2f})"
    print(line if name == "SE" else f"{line}, {name} {theory:.5f} (z = {(mean - theory) / sem:+.2f})")
    assert abs(mean - theory) <= 2 * sem + err


def test_direct_model_alpha_half_is_the_large_d_limit(torch_one_thread):
    """Direct model, alpha = 0.5 (alpha_bar = 1, twice its interpolation threshold): the prox minimiser's test error
    at d = 50 / 100 / 200 (16 / 8 / 8 seeds, 10^4 test sequences each) was measured 0.16162 +- 0.00073,
    0.15984 +- 0.00095, 0.15687 +- 0.00096 against the SE's 0.15599: a finite-size bias of 0.0039 (4 standard
    errors) at d = 100, hence the failure of a d = 100 check; the 1/d fit's intercept 0.15605 +- 0.00113 agrees
    with the SE (same ridge constant 4: 3 or 5 give 0.16046 / 0.15334)."""
    p = Problem.from_options(target="mp:0.5", model="direct")
    th = StateEvolution(p).solve(0.5)
    assert th.converged
    dims, means, sems = [], [], []
    for d, seeds in ((50, 16), (100, 8), (200, 8)):
        # one record per seed (seed0 = s), combined as simulate_record does: the same numbers as seeds=seeds
        recs = [_cached(("direct", 1.0, "mp:0.5", 0.5, d, s), lambda d=d, s=s: _test_error(
            sim.simulate_record(p, 0.5, d, seeds=1, seed0=s, solver="prox", n_test=10_000))) for s in range(seeds)]
        vals = np.array([r["test_error_mean"] for r in recs])
        dims.append(d)
        means.append(float(vals.mean()))
        sems.append(sim.api.combined_sem(vals, [r["test_error_sem"] for r in recs]))
    a, se_a = _extrapolate(dims, means, sems)
    table = [(d, round(m, 5), round(e, 5)) for d, m, e in zip(dims, means, sems, strict=True)]
    print(f"direct alpha=0.5: (d, mean, sem) {table}, intercept {a:.5f} +- {se_a:.5f}, SE {th.test_error:.5f}")
    assert abs(a - th.test_error) <= 2 * se_a, (th.test_error, a, se_a, list(zip(dims, means, sems, strict=True)))


def _spike_runs(spec, alpha, d, seeds):
    """Per-seed cached trainings of :func:`_learned_outliers` (the ``outl`` records): list of dicts."""
    p = Problem.from_options(target=spec)
    n_spikes = p.task.target.spikes.size
    out = []
    for s in seeds:

        def compute(s=s):
            data = sim.sample_dataset(p, int(round(alpha * d * d)), d, s)
            tr = sim.train(p, data, solver="prox", seed=s)
            e, v = np.linalg.eigh(tr.S_hat)
            e0, v0 = np.linalg.eigh(data.S0)
            idx = [int(np.argmin(np.abs(e0 - th))) for th in p.task.target.spikes]
            return {"top": e[::-1][:10].tolist(),
                    "overlap": [[float((v[:, -1 - i] @ v0[:, -1 - j]) ** 2) for j in range(n_spikes)]
                                for i in range(n_spikes + 2)],
                    "eig": e[::-1].tolist(),
                    "spike_overlap": [((v[:, ::-1].T @ v0[:, i]) ** 2).tolist() for i in idx],
                    "steps": tr.steps, "converged": tr.converged, "train_seconds": tr.seconds}

        out.append(_cached(("outl", spec, alpha, d, s), compute))
    return out


def _learned_outliers(p, spec, alpha, d, seeds, k):
    """Top k + 1 eigenvalues of S_hat and the squared overlaps of its top k eigenvectors with the target's
    (matched by rank), one row per seed (seeds: a count, 0 .. seeds - 1, or a range)."""
    runs = _spike_runs(spec, alpha, d, range(seeds) if isinstance(seeds, int) else seeds)
    return (np.array([r["top"][: k + 1] for r in runs]),
            np.array([[r["overlap"][i][i] for i in range(k)] for r in runs]))


def test_outliers_and_overlaps_extrapolated(torch_one_thread):
    """Spikes 10, 8, 6.5 on MP(0.2), alpha = 0.1: the three learned outliers and their overlaps with the target
    eigenvectors, theory at each d (the spikes are atoms of mass 1/d) against training at d = 100 / 200 / 400
    (D100_SEEDS / D200_SEEDS / D400_SEEDS seeds). One sample fluctuates by s delta sqrt(2/d) ~ 0.09 at d = 400.
    The spread of each quantity is pooled over all runs as c/sqrt(d) (fluctuations of outliers scale like
    d^{-1/2}; the sample sd of 3 seeds alone can be 10x too small: measured 0.0008 for the top overlap at d = 400,
    against c/sqrt(d) = 0.008); the 1/d fit of each gap must have an intercept within 3 standard errors of 0
    (6 quantities: 3 sigma keeps the chance of a false alarm ~2 %). The measured gaps and intercepts are in
    docs/theory/spectra.md (the overlaps' gaps halve with each doubling of d; the top position's does not). With
    24 / 16 / 16 seeds the intercepts of the positions of 10 and 8 are -0.138 +- 0.044 and -0.098 +- 0.031 (3.1 and
    3.2 standard errors): not a finite-size bias, so only the position of 6.5 and the overlaps are asserted here (the
    other two are test_top_two_outliers_on_mp_at_d400, xfail)."""
    spec = "spikes:10,8,6.5+mp:0.2"
    p = Problem.from_options(target=spec)
    runs = []
    for d, seeds in ((100, D100_SEEDS), (200, D200_SEEDS), (400, D400_SEEDS)):
        sp = learned_spectrum(p, 0.1, d=d)
        rec = [o for o in sp.outliers if o.recovered]
        assert len(rec) == 3
        top, ov = _learned_outliers(p, spec, 0.1, d, seeds, 3)
        theory = np.array([o.eigenvalue for o in rec] + [o.overlap for o in rec])
        runs.append((d, np.concatenate([top[:, :3], ov], axis=1), theory))
    c2 = sum(d * ((got - got.mean(axis=0)) ** 2).sum(axis=0) for d, got, _ in runs)
    c = np.sqrt(c2 / sum(len(got) - 1 for _, got, _ in runs))
    dims = [d for d, _, _ in runs]
    gaps = np.array([got.mean(axis=0) - theory for _, got, theory in runs])
    sems = np.array([c / np.sqrt(d * len(got)) for d, got, _ in runs])
    fits = [_extrapolate(dims, gaps[:, j], sems[:, j]) for j in range(6)]
    print("gaps sim - theory (rows d = 100, 200, 400; 3 positions, 3 overlaps):", np.round(gaps, 4).tolist())
    print("1/d intercepts:", [f"{a:+.3f} +- {e:.3f}" for a, e in fits])
    for j in range(2, 6):  # not the positions of 10 and 8: intercepts -0.138 +- 0.044, -0.098 +- 0.031 (open)
        a, se_a = fits[j]
        assert abs(a) <= 3 * se_a, (j, a, se_a, gaps[:, j], sems[:, j])


@pytest.mark.parametrize("spec,n_rec", [("spikes:4,2.5,1.5", 1), ("spikes:10,8,6.5+mp:0.2", 2)])
def test_outlier_count_at_small_alpha(spec, n_rec, torch_one_thread):
    """alpha = 0.02, d = 400 (3 seeds): the theory recovers only the spikes with delta < delta_c (the finite-d
    detachment of the bump, docs/theory/spectra.md section 4): theta = 4 on zeros (2.5 has delta = 2.104 against
    delta_c = 2.047, inside the finite-d BBP window; 1.5 < delta), and 10, 8 on MP(0.2) (delta = 4.88 against
    delta_c(6.5) = 4.43). The test's old expectation of three outliers was wrong. In training the first
    non-recovered spike leaves no eigenvalue standing out of the theory's bulk edge (mean - 3 s.e. below it) and
    its overlap is below every recovered one's. (Whether the recovered ones stand out is not decided by 3
    seeds here: theta = 8 on MP sits 0.30 above the edge while one sample fluctuates by ~0.23.)"""
    d = 400
    p = Problem.from_options(target=spec)
    sp = learned_spectrum(p, 0.02, d=d)
    rec = [o for o in sp.outliers if o.recovered]
    assert len(rec) == n_rec
    edge = sp.bulks[-1][1]
    top, ov = _learned_outliers(p, spec, 0.02, d, 3, n_rec + 1)
    mean, sem = top.mean(axis=0), top.std(axis=0, ddof=1) / np.sqrt(3)
    print(f"{spec}: theory recovers {n_rec} (edge {edge:.3f}, outliers {[round(o.eigenvalue, 3) for o in rec]}); "
          f"training top {np.round(mean, 3).tolist()} +- {np.round(sem, 3).tolist()}, "
          f"overlaps {np.round(ov.mean(axis=0), 3).tolist()}")
    assert mean[n_rec] - 3 * sem[n_rec] < edge
    assert ov.mean(axis=0)[n_rec] < ov.mean(axis=0)[:n_rec].min()


def test_outliers_on_zeros_at_d400(torch_one_thread):
    """Spikes 4, 2.5, 1.5 on zeros, alpha = 0.1, d = 400 (3 seeds, fixed): learned outlier eigenvalues and
    overlaps within 0.05 of the theory (the issue's check; one sample fluctuates by s delta sqrt(2/d) ~ 0.08)."""
    d = 400
    spec = "spikes:4,2.5,1.5"
    p = Problem.from_options(target=spec)
    sp = learned_spectrum(p, 0.1, d=d)
    rec = [o for o in sp.outliers if o.recovered]
    assert len(rec) == 3
    top, ov = _learned_outliers(p, spec, 0.1, d, 3, 3)
    print(f"outliers {np.round(top[:, :3].mean(axis=0), 3).tolist()} (theory {[round(o.eigenvalue, 3) for o in rec]}), "
          f"overlaps {np.round(ov.mean(axis=0), 3).tolist()} (theory {[round(o.overlap, 3) for o in rec]})")
    np.testing.assert_allclose(top[:, :3].mean(axis=0), [o.eigenvalue for o in rec], atol=0.05)
    np.testing.assert_allclose(ov.mean(axis=0), [o.overlap for o in rec], atol=0.05)


# ------------------------------------------------------------------------------------------------------------------
# issue 3's spiked-target example, the outliers of spikes on MP(0.2) at d = 400, and the alpha at which each appears
# ------------------------------------------------------------------------------------------------------------------
def test_issue_example_spikes_sit_inside_the_mp_bulk(torch_one_thread):
    """The issue's example "eigenvalues 4, 2.5, 1.5 on an MP bulk with kappa0 = 0.2" in the target parser's
    normalisation (``spikes:4,2.5,1.5+mp:0.2``: S0 = W0^T W0 / sqrt(p0 d) on the complement of the spikes, so that
    (1/d) Tr S0^2 -> 1 + kappa0) has no outliers: the MP part of mp:K spans [(1 - sqrt K)^2, (1 + sqrt K)^2]/sqrt K,
    whose top edge is >= 4 for every K (= 4 at K = 1), 4.683 at K = 0.2, so all three spikes sit inside the bulk,
    delta_c = 0 (no detachment at any alpha) and the theory never recovers them. Training (d = 200, alpha = 0.1,
    4 seeds) agrees: no learned eigenvalue leaves the predicted bulk, and the target direction u_4 is spread over
    several learned eigenvectors (largest squared overlap below 1/2, where a detached outlier at this alpha would
    have ~0.9), unlike spikes 10, 8, 6.5 on the same bulk."""
    from tiedattention.targets import mp_edges
    from tiedattention.theory.spectrum import detachment_delta

    spec, d, alpha = "spikes:4,2.5,1.5+mp:0.2", 200, 0.1
    kappa = np.geomspace(1e-3, 1e3, 601)
    assert np.all(mp_edges(kappa)[1] >= 4.0 - 1e-12)
    assert mp_edges(0.2)[1] == pytest.approx((1 + np.sqrt(0.2)) ** 2 / np.sqrt(0.2), rel=1e-12)
    p = Problem.from_options(target=spec)
    m = p.task.target.measure(d)
    assert np.all(detachment_delta(m, p.task.target.spikes) == 0.0)
    assert np.all(detachment_delta(m, p.task.target.spikes, criterion="bbp") == 0.0)
    for a in (0.01, 0.1, 1.0, 4.0):
        assert learned_spectrum(p, a, d=d).n_recovered == 0
    sp = learned_spectrum(p, alpha, d=d)
    edge = sp.bulks[-1][1]
    runs = _spike_runs(spec, alpha, d, range(4))
    top = np.array([r["top"][0] for r in runs])
    best = np.array([[max(so) for so in r["spike_overlap"]] for r in runs])
    print(f"{spec}, alpha={alpha}, d={d}: predicted bulk edge {edge:.3f}, no outlier; learned top eigenvalue "
          f"{np.round(top, 3).tolist()}; largest squared overlap of u_4, u_2.5, u_1.5 with a learned eigenvector "
          f"{np.round(best.mean(axis=0), 3).tolist()}; steps {[r['steps'] for r in runs]}")
    assert np.all(top < edge * 1.05)
    assert np.all(best < 0.5)


def _rmt_monte_carlo(p, alpha, d, reps=100, seed=123):
    """The theory's own finite-d model of the learned outliers: S_hat = s (Y - eps)_+ with Y = S0 + delta Z (Z GOE,
    S0 drawn as in training) at the SE point of (alpha, d). Returns the mean and sd over ``reps`` draws of the top
    k + 1 learned eigenvalues and of the rank-matched squared overlaps of the top k eigenvectors with the spikes'
    (k spikes): (top_mean, top_sd, ov_mean, ov_sd). Its sd is the predicted seed-to-seed spread of a training run."""
    se = StateEvolution(p, d=d)
    res = se.solve(alpha)
    assert res.converged
    s, delta, eps = res.m_hat / res.sigma_hat, res.delta, res.eps
    k = p.task.target.spikes.size
    rng = np.random.default_rng(seed)
    tops, ovs = [], []
    for _ in range(reps):
        _, v0 = np.linalg.eigh(S0 := p.task.target.sample(d, rng))
        g = rng.standard_normal((d, d))
        e, v = np.linalg.eigh(S0 + delta * (g + g.T) / np.sqrt(2 * d))
        tops.append(s * np.maximum(e[::-1][: k + 1] - eps, 0.0))
        ovs.append([(v[:, -1 - i] @ v0[:, -1 - i]) ** 2 for i in range(k)])
    tops, ovs = np.array(tops), np.array(ovs)
    return tops.mean(axis=0), tops.std(axis=0), ovs.mean(axis=0), ovs.std(axis=0)


def _overlap_crossing(alphas, values, level):
    """First alpha (log-linear interpolation) at which ``values`` rises through ``level`` (nan if never)."""
    for a0, a1, v0, v1 in zip(alphas[:-1], alphas[1:], values[:-1], values[1:], strict=True):
        if v0 < level <= v1:
            return float(np.exp(np.log(a0) + (level - v0) / (v1 - v0) * np.log(a1 / a0)))
    return float("nan")


SCANS = {  # alpha -> seeds of the alpha scans at d = 400 (cached per seed)
    "spikes:4,2.5,1.5": {0.004: 2, 0.0065: 2, 0.012: 4, 0.02: 3, 0.035: 2, 0.06: 2, 0.1: 3},
    "spikes:10,8,6.5+mp:0.2": {0.006: 2, 0.013: 2, 0.02: 3, 0.03: 2, 0.1: 3},
}


@pytest.mark.parametrize("spec", list(SCANS))
def test_outlier_appearance_alpha_scan(spec, torch_one_thread):
    """The alpha at which each outlier appears, theory against an alpha scan of training at d = 400.

    Theory (lambda = 0.01): ``outlier_alphas`` gives two ends of the finite-d transition of each spike theta:
    alpha_BBP, where the d -> infinity overlap 1 - delta^2 int dnu/(theta - x)^2 becomes positive, and alpha_bump
    (> alpha_BBP), where the finite-d density rho_delta of the d atoms splits off the bump of theta (its outlier
    is then a separated eigenvalue; the overlap jumps from 0 to O_c = 1 - delta_c^2/delta_BBP^2 ~ 0.32-0.38 there).
    The window [alpha_BBP, alpha_bump] shrinks like d^{-1/3}: it is the finite-d resolution of "the alpha at which
    an outlier appears". (The theory's own finite-d model, :func:`_rmt_monte_carlo`, follows the overlap formula
    through the window to ~0.01 at d = 400.)
    Finite-d criterion in training: the outlier of theta (the i-th spike, matched to the i-th learned eigenvector)
    has appeared once its mean squared overlap |<u_i, u_hat_i>|^2 reaches L = 0.2 -- above the overlap that a
    non-detached spike leaves on the edge eigenvectors at d = 400 (<= 0.1 below alpha_BBP) and below every O_c,
    so the theory puts the crossing of L inside the window. The crossing is located by log-linear interpolation
    over the scanned alphas and must fall inside [alpha_BBP, alpha_bump] for every spike whose window lies inside
    the scanned range (the theory's own crossing of L, from the overlap formula along the SE curve, is printed).
    In addition, at every scanned alpha (>= 2 seeds each), each mean overlap must be within 0.1 + 2 standard
    errors of the theory's max(0, overlap formula): 0.1 ~ d^{-1/3}/1.4, the size of the finite-d smoothing of the
    transition; standard error = the larger of the sample sd over seeds and the sd of the theory's finite-d model,
    over sqrt(seeds) (2-3 seeds alone give a poor sd; the first version, 0.1 alone, failed on theta = 4 at
    alpha = 0.012 with two seeds, 0.42 +- 0.11 against 0.54)."""
    from scipy import optimize

    from tiedattention.theory.spectrum import outlier_alphas, spike_outlier

    d, level = 400, 0.2
    p = Problem.from_options(target=spec)
    spikes = p.task.target.spikes
    grid = sorted(SCANS[spec])
    se = StateEvolution(p, d=d)
    measure = se.measure
    bump = outlier_alphas(p, np.geomspace(0.003, 0.3, 25), d=d)
    bbp = outlier_alphas(p, np.geomspace(0.003, 0.3, 25), d=d, criterion="bbp")

    def formula(alpha):
        res = se.solve(alpha)
        assert res.converged
        return np.array([spike_outlier(measure, th, res.delta)[1] for th in spikes])

    theory = np.array([np.maximum(formula(a), 0.0) for a in grid])
    sim_ov, sim_sem = [], []
    for a in grid:
        runs = _spike_runs(spec, a, d, range(SCANS[spec][a]))
        ov = np.array([[r["overlap"][i][i] for i in range(spikes.size)] for r in runs])
        sim_ov.append(ov.mean(axis=0))
        mc_sd = _rmt_monte_carlo(p, a, d)[3]
        sim_sem.append(np.maximum(ov.std(axis=0, ddof=1), mc_sd) / np.sqrt(len(runs)))
    sim_ov, sim_sem = np.array(sim_ov), np.array(sim_sem)
    print(f"{spec}, d={d}: alphas {grid}")
    for i, th in enumerate(spikes):
        a_sim = _overlap_crossing(grid, sim_ov[:, i], level)
        lo, hi = bbp[float(th)], bump[float(th)]
        a_th = float("nan")
        if formula(lo * 1.0001)[i] < level < formula(hi)[i]:
            a_th = float(np.exp(optimize.brentq(lambda la, i=i: formula(np.exp(la))[i] - level, np.log(lo * 1.0001),
                                                np.log(hi), xtol=1e-6)))
        print(f"  theta={th:g}: window [alpha_BBP, alpha_bump] = [{lo:.5f}, {hi:.5f}], theory crossing of "
              f"L={level}: {a_th:.5f}, training crossing {a_sim:.5f}; overlaps sim {np.round(sim_ov[:, i], 3).tolist()}"
              f" theory {np.round(theory[:, i], 3).tolist()}")
        if grid[0] < lo and hi < grid[-1]:  # the window lies inside the scanned range: the appearance is resolved
            assert lo <= a_sim <= hi, (th, a_sim, lo, hi)
    assert np.all(np.abs(sim_ov - theory) <= 0.1 + 2 * sim_sem), (sim_ov, theory, sim_sem)


def _mp_spikes_at_d400():
    """(theory outliers, mean training, training sd, Monte Carlo sd of the theory's finite-d model) of the three
    learned outliers and overlaps of spikes 10, 8, 6.5 on MP(0.2), alpha = 0.1, d = 400, as 6-vectors
    (3 positions, 3 overlaps), plus the Monte Carlo mean."""
    spec, d = "spikes:10,8,6.5+mp:0.2", 400
    p = Problem.from_options(target=spec)
    rec = [o for o in learned_spectrum(p, 0.1, d=d).outliers if o.recovered]
    assert len(rec) == 3
    theory = np.array([o.eigenvalue for o in rec] + [o.overlap for o in rec])
    top, ov = _learned_outliers(p, spec, 0.1, d, D400_SEEDS, 3)
    got = np.concatenate([top[:, :3], ov], axis=1)
    mc_top, mc_top_sd, mc_ov, mc_ov_sd = _rmt_monte_carlo(p, 0.1, d, reps=200)
    mc = np.concatenate([mc_top[:3], mc_ov])
    mc_sd = np.concatenate([mc_top_sd[:3], mc_ov_sd])
    return theory, got.mean(axis=0), got.std(axis=0, ddof=1), mc_sd, mc


def test_outliers_on_mp_at_d400(torch_one_thread):
    """Spikes 10, 8, 6.5 on MP(0.2) (they stand out of the bulk [0.683, 4.683]), alpha = 0.1, d = 400: the issue's
    "outlier positions and overlaps predicted within 0.05 of d = 400 simulations", compared as the theory defines
    them (learned eigenvalue s (y_bump - eps) of S_hat, squared overlap of the rank-matched eigenvectors). The
    theory's own finite-d model (200 draws of s (S0 + delta GOE - eps)_+ at the SE point) reproduces the formulas
    (Monte Carlo mean within 3 of its standard errors) and predicts the seed-to-seed spread (sd 0.088, 0.075, 0.089
    for the positions; one seed cannot test 0.05). Asserted: the three overlaps and the position of 6.5 within
    0.05. The positions of 10 and 8 (-0.110 +- 0.021 and -0.074 +- 0.020 with 16 seeds) are the xfail test below."""
    theory, mean, sd, mc_sd, mc = _mp_spikes_at_d400()
    sem = np.maximum(sd, mc_sd) / np.sqrt(D400_SEEDS)
    r3, r4 = (lambda x: np.round(x, 3).tolist()), (lambda x: np.round(x, 4).tolist())
    print(f"d=400, {D400_SEEDS} seeds: positions {r3(mean[:3])} (theory {r3(theory[:3])}), overlaps "
          f"{r4(mean[3:])} (theory {r4(theory[3:])}); gaps {r4(mean - theory)}, s.e. {r4(sem)}; Monte Carlo "
          f"{r4(mc)} sd {r4(mc_sd)}")
    assert np.all(np.abs(mc - theory) <= 3 * mc_sd / np.sqrt(200) + 1e-3)
    assert np.all(np.abs(mean - theory)[2:] <= 0.05)


def test_top_two_outliers_on_mp_at_d400(torch_one_thread):
    """The outliers of theta = 10 and 8 of the previous test within 0.05 of the theory, with the SE's stationarity
    along each outlier solved under the exact (joint, non-Gaussian) law of the logits: a spike theta adds
    t (g_a g_b - delta_ab), t = theta/sqrt(d) = 0.5, to them, which the Gaussian channel misses
    (strong_modes.corrected_outliers, the three spikes and the MP bulk explicit; docs/theory/decomposition.md
    section 7.1). The SE's Gaussian-channel outliers themselves sit 0.110 +- 0.021 and 0.074 +- 0.020 above
    training (16 seeds); the joint law moves them by -0.118 and -0.064 (+- 0.013, 2^15 x 8 points) to within 0.01."""
    from tiedattention.theory.strong_modes import corrected_outliers

    theory, mean, sd, mc_sd, _ = _mp_spikes_at_d400()
    p = Problem.from_options(target="spikes:10,8,6.5+mp:0.2")
    se = StateEvolution(p, d=400)
    c = corrected_outliers(p, se.measure, se.solve(0.1), 400, 3, which=[0, 1], log2n=15)
    assert np.allclose(c.se[:2], theory[:2], atol=1e-9)
    sem = np.maximum(sd, mc_sd)[:2] / np.sqrt(D400_SEEDS)
    def r4(x):
        return np.round(x[:2], 4).tolist()

    print(f"outliers {r4(mean)} +- {r4(sem)}: SE {r4(theory)}, joint-law correction {r4(c.shift)} +- "
          f"{r4(c.shift_error)} -> {r4(c.corrected)} (Gaussian-law root - SE {r4(c.gaussian_check)})")
    assert np.all(np.abs(mean[:2] - theory[:2]) > 0.05)  # the Gaussian channel's outliers miss
    assert np.all(np.abs(mean[:2] - c.corrected[:2]) <= 0.05)
