"""Issue 6 against simulations (slow): power-law target gamma = 1.25, Delta = 0.5, T = 2, factorised student,
proximal solver (the exact minimiser, with exact zero eigenvalues), one torch thread per run.

(a) k*(alpha) from the finite-d SE (a target mode is recovered when its bump of rho_delta is a component of
    its own above the cut) against the number of detached eigenvalues of trained S_hat at d = 400: eigenvalues
    above the SE's bulk edge of S_hat plus the margin 4 s delta d^{-2/3} (three Tracy-Widom standard
    deviations of the bulk's top eigenvalue; :mod:`tiedattention.reproduce.powerlaw`), within +-1 mode, at
    three alphas, for every seed; and the squared overlaps of the well-detached modes.
(b) the excess test error along n at d = 100 with lambda tuned optimally (from the finite-d SE) against the
    finite-d SE curve (within 15 % + 2 s.e., the same relative offset at every n), and the fitted exponent
    against the SE's at the same d (inside the simulations' 95 % interval) and against f(gamma) (inside the
    interval widened by the SE's own finite-d offset f_SE(d) - f(gamma)).
(c) the relative offset from the SE at d = 200 against d = 100 (n/d = 50, 100).
(d) 32 seeds at d = 100 and d = 200 along n/d = 50..400: the simulated exponent against the finite-d SE's at
    each d (three sampling s.e., from the per-seed exponents), and its drop from d = 100 to d = 200 against the
    SE's. Its cells are filled in blocks of two seeds (``along_n_sim_cells``), ~25 min of one core at d = 200.
(e) 12 seeds at d = 400 on the same n/d: the simulated exponent against the SE's at d = 400 and its fall from
    d = 100; and f(gamma): the simulations' exponent minus the SE's, pooled over d = 100, 200, 400, smaller than
    the 0.03 the issue allows between the scaling-limit route and f(gamma), with f_SE(d) falling towards the limit
    route's exponent on the same n/d (within 0.03 of f(gamma)). ~90 min of one core uncached.
    And the level: at all twelve points of (d) and (e) the joint-law SE with its top outlier corrected
    (``joint_law_point``, ``scaling --joint-law``) meets the simulated excess within 2.5 % + two s.e.

The simulations' excess is e_test(S_hat) - min_c e_test(c S0) on the same test sequences (a paired
difference): for gamma > 1/2 the logits are not Gaussian (the top modes carry O(1) of their variance) and the
SE's absolute test errors are offset, so each route's excess is taken over its own e_0.

Numbers of the recorded run: docs/theory/scaling.md, section "Simulations". Set TIEDATTENTION_SIM_CACHE to a
directory to keep the computed cells between runs (they are keyed by their parameters and the package version).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

pytest.importorskip("torch")

from tiedattention.reproduce import common  # noqa: E402
from tiedattention.reproduce import powerlaw as pl  # noqa: E402
from tiedattention.sweep import Store, run_sweep  # noqa: E402

pytestmark = pytest.mark.slow

TARGET = "powerlaw:1.25"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = os.environ.get("TIEDATTENTION_SIM_CACHE")
    return Store(root if root else tmp_path_factory.mktemp("scaling_sim"))


def _rows(store, name, cells):
    summary = run_sweep(common.spec_of(name, cells), store, max_workers=int(os.environ.get("TIEDATTENTION_WORKERS",
                                                                                             "1")),
                        progress=False)
    assert not summary.failures, summary.failures
    return summary.table()


# --------------------------------------------------------------------------------------------------
# (a) k* against detached outliers at d = 400
# --------------------------------------------------------------------------------------------------
D_A, LAM_A, ALPHAS_A, SEEDS_A = 400, 0.1, (0.02, 0.05, 0.1), 2


def test_k_star_matches_detached_outliers_at_d400(store):
    opts = common.options(target=TARGET, noise=0.5, lam=LAM_A)
    cells = [pl.make_cell(pl.SE_MODES, {**opts, "d": D_A, "alphas": list(ALPHAS_A), "n_modes": 12})]
    cells += [pl.make_cell(pl.SIM_MODES, {**opts, "alpha": a, "d": D_A, "seeds": SEEDS_A, "n_modes": 12,
                                          "n_test": 4000}) for a in ALPHAS_A]
    table = _rows(store, "issue6-kstar", cells)
    se = json.loads(table[table["route"] == pl.SE_MODES].iloc[0]["records"])
    sims = table[table["route"] == pl.SIM_MODES]
    assert len(sims) == len(ALPHAS_A)
    k_seen = []
    for _, cell in sims.iterrows():
        a = float(cell["alpha"])
        rec = next(r for r in se if math.isclose(r["alpha"], a, rel_tol=1e-12))
        assert rec["converged"] and rec["phase"] == "regular"
        seeds = json.loads(cell["records"])
        assert all(s["converged"] for s in seeds)
        counts = [pl.count_detached(s["eigenvalues"], rec["bulk_top"], rec["margin"]) for s in seeds]
        print(f"alpha={a}: SE k*={rec['k_star']} (spike criterion {rec['k_star_spike']}), edge={rec['bulk_top']:.3f} "
              f"margin={rec['margin']:.3f}, detached per seed={counts}")
        assert rec["k_star"] >= 2
        for c in counts:
            assert abs(c - rec["k_star"]) <= 1, (a, counts, rec["k_star"])
        # eigenvector overlaps of the well-detached modes (SE overlap >= 0.7)
        for i, m in enumerate(rec["modes"]):
            if m["recovered"] and m["overlap"] >= 0.7:
                sim = np.mean([s["overlaps"][i] for s in seeds])
                assert abs(sim - m["overlap"]) <= 0.05, (a, i + 1, sim, m["overlap"])
        k_seen.append(rec["k_star"])
    assert len(set(k_seen)) == len(k_seen)  # three different k*: the count follows the recovery, not a constant


# --------------------------------------------------------------------------------------------------
# (b) the excess test error along n at d = 100, optimal lambda
# --------------------------------------------------------------------------------------------------
D_B, NUS_B, SEEDS_B = 100, (50.0, 100.0, 200.0, 400.0, 800.0), 4


def test_simulations_follow_the_finite_d_se_scaling_curve(store):
    from tiedattention.theory.scaling import fit_exponent

    base = common.options(target=TARGET, noise=0.5)
    alphas = [nu / D_B for nu in NUS_B]
    curve = _rows(store, "issue6-curve", [pl.make_cell(pl.SCALING_CURVE, {**base, "d": D_B, "alphas": alphas,
                                                                           "lam_rule": "optimal"})])
    recs = json.loads(curve.iloc[0]["records"])
    assert all(r["converged"] for r in recs)
    cells = []
    for r in recs:
        lam = float(f"{r['lam']:.4g}")
        cells.append(pl.make_cell(pl.SIM_MODES, {**common.options(target=TARGET, noise=0.5, lam=lam),
                                                 "alpha": float(r["alpha"]), "d": D_B, "seeds": SEEDS_B,
                                                 "n_modes": 4, "n_test": 20000}))
    sims = _rows(store, "issue6-sims", cells).sort_values("alpha")
    assert (sims["converged"] == 1.0).all()
    se_exc = np.array([r["excess"] for r in recs])
    sim_exc = sims["excess_mean"].to_numpy(float)
    sim_err = sims["excess_sem"].to_numpy(float)
    n = np.array([r["n"] for r in recs], float)
    rel = sim_exc / se_exc - 1.0
    z = (sim_exc - se_exc) / sim_err
    for r, e, s, zz in zip(recs, sim_exc, sim_err, z, strict=True):
        print(f"nu={r['nu']:g} lam={r['lam']:.4g} k*={r['k_star']}: SE excess {r['excess']:.5f}, simulation "
              f"{e:.5f} +- {s:.5f} (z = {zz:.1f}, relative {e / r['excess'] - 1:+.3f})")
    # Allowance: a relative 15 % on top of two standard errors. Measured (docs/theory/scaling.md, "Simulations"):
    # the simulations sit 9-11 % above the SE at every n at d = 100 and 7-9 % above it at d = 400 (test (a)'s
    # runs), and the test error of S0 itself is 10 % above the Gaussian channel at d = 100 and 400 alike: an
    # offset of the SE's Gaussian-logit channel for this target (the top mode carries 1/zeta(2.5) = 75 % of the
    # logit variance), not a 1/d effect. It is a constant factor along n, so the exponents agree (below).
    assert np.all(np.abs(sim_exc - se_exc) <= 2 * sim_err + 0.15 * se_exc), rel
    assert np.ptp(rel) <= 0.06, rel  # the same factor at every n
    f_se = fit_exponent(n, se_exc)
    f_sim = fit_exponent(n, sim_exc)
    from tiedattention.theory.scaling import parse_lam_rule, predicted_exponent

    f_pred, _ = predicted_exponent(1.25, parse_lam_rule("optimal"))
    lo, hi = f_sim["fitted_exponent_ci"]
    print(f"exponents: simulation {f_sim['fitted_exponent']:.3f} [{lo:.3f}, {hi:.3f}], SE at d = {D_B}: "
          f"{f_se['fitted_exponent']:.3f}, f(gamma) = {f_pred:.3f}")
    # compatible with the SE's exponent at the same d
    assert lo <= f_se["fitted_exponent"] <= hi
    # compatible with f(gamma) once the finite-d offset of the SE at this d is allowed for
    offset = f_se["fitted_exponent"] - f_pred
    assert lo - abs(offset) <= f_pred <= hi + abs(offset)


D_C, NUS_C, SEEDS_C = 200, (50.0, 100.0), 2


def test_the_offset_from_the_se_is_not_a_finite_size_effect(store):
    """The relative offset sim/SE - 1 of the excess at d = 200 agrees with the one at d = 100 (same n/d,
    optimal lambda; averaged over the two n/d) within two standard errors, and is more than two standard errors
    above half the d = 100 offset, which a 1/d correction would give. (A first version asserted a fixed 0.04 per
    n/d: it failed at n/d = 50 by 0.001, with a standard error of 0.044 on the d = 200 value from 2 seeds.)"""
    rel, rel_err = {}, {}
    for d, seeds in ((D_B, SEEDS_B), (D_C, SEEDS_C)):
        base = common.options(target=TARGET, noise=0.5)
        nus = NUS_B if d == D_B else NUS_C
        curve = _rows(store, f"issue6-curve-{d}", [pl.make_cell(pl.SCALING_CURVE, {
            **base, "d": d, "alphas": [nu / d for nu in nus], "lam_rule": "optimal"})])
        recs = [r for r in json.loads(curve.iloc[0]["records"]) if r["nu"] in NUS_C]
        cells = [pl.make_cell(pl.SIM_MODES, {**common.options(target=TARGET, noise=0.5, lam=float(f"{r['lam']:.4g}")),
                                             "alpha": float(r["alpha"]), "d": d, "seeds": seeds, "n_modes": 4,
                                             "n_test": 20000}) for r in recs]
        sims = _rows(store, f"issue6-sims-{d}", cells).sort_values("alpha")
        rel[d] = sims["excess_mean"].to_numpy(float) / np.array([r["excess"] for r in recs]) - 1.0
        err = sims["excess_sem"].to_numpy(float) / np.array([r["excess"] for r in recs])
        rel_err[d] = err
        print(f"d={d}: relative offset of the simulated excess at n/d = {NUS_C}: {np.round(rel[d], 3)} "
              f"(+- {np.round(err, 3)})")
    m = {d: float(np.mean(rel[d])) for d in rel}
    e = {d: float(np.sqrt(np.sum(rel_err[d] ** 2)) / rel_err[d].size) for d in rel}
    print(f"mean offsets: d={D_B}: {m[D_B]:.3f} +- {e[D_B]:.3f}, d={D_C}: {m[D_C]:.3f} +- {e[D_C]:.3f}")
    assert abs(m[D_C] - m[D_B]) <= 2 * math.hypot(e[D_C], e[D_B]), (m, e)
    assert m[D_C] - 0.5 * m[D_B] > 2 * math.hypot(e[D_C], 0.5 * e[D_B]), (m, e)


# --------------------------------------------------------------------------------------------------
# (d) the excess along n at d = 200 and d = 100, 32 seeds
# --------------------------------------------------------------------------------------------------
D_D, NUS_D, SEED_BLOCKS_D = 200, (50.0, 100.0, 200.0, 400.0), tuple(range(0, 32, 2))  # 32 seeds


def along_n_curve_cell(d: int):
    """The finite-d SE curve at dimension d along NUS_D with lambda tuned optimally (one cell)."""
    base = common.options(target=TARGET, noise=0.5)
    return pl.make_cell(pl.SCALING_CURVE, {**base, "d": d, "alphas": [nu / d for nu in NUS_D], "lam_rule": "optimal"})


def along_n_sim_cells(d: int, recs, seed0: int):
    """Two seeds (seed0, seed0 + 1) per point of the SE curve ``recs``, at its optimal lambda (4 digits). The
    block seed0 = 0 has no ``seed0`` key: with the same lambda it is the same cell as test (c)'s."""
    cells = []
    for r in recs:
        params = {**common.options(target=TARGET, noise=0.5, lam=float(f"{r['lam']:.4g}")),
                  "alpha": float(r["alpha"]), "d": d, "seeds": 2, "n_modes": 4, "n_test": 20000}
        if seed0:
            params["seed0"] = seed0
        cells.append(pl.make_cell(pl.SIM_MODES, params))
    return cells


def _along_n(store, d: int, blocks=SEED_BLOCKS_D):
    """(n, SE excess, per-seed simulated excess (points x seeds), per-seed within-seed s.e.) at dimension d, seeds
    of the two-seed ``blocks``."""
    curve = _rows(store, f"issue6-curve-{d}-along-n", [along_n_curve_cell(d)])
    recs = json.loads(curve.iloc[0]["records"])
    assert all(r["converged"] for r in recs) and [r["nu"] for r in recs] == list(NUS_D)
    cells = [c for b in blocks for c in along_n_sim_cells(d, recs, b)]
    table = _rows(store, f"issue6-sims-{d}-along-n", cells)
    assert (table["converged"] == 1.0).all()
    per: dict[float, dict[int, dict]] = {nu: {} for nu in NUS_D}
    for _, row in table.iterrows():
        for s in json.loads(row["records"]):
            per[float(row["alpha"]) * d][int(s["seed"])] = s
    seeds = sorted(per[NUS_D[0]])
    assert seeds == sorted(b + i for b in blocks for i in (0, 1)) and all(sorted(per[nu]) == seeds for nu in NUS_D)
    exc = np.array([[per[nu][s]["excess"] for s in seeds] for nu in NUS_D])
    within = np.array([[per[nu][s]["excess_sem"] for s in seeds] for nu in NUS_D])
    return (np.array([r["n"] for r in recs], float), np.array([r["excess"] for r in recs]), exc, within,
            [float(f"{r['lam']:.4g}") for r in recs])


def _mean_sem(exc, within):
    """Per point of NUS_D: the mean over seeds of the simulated excess and its standard error (spread over seeds
    combined with the seeds' own test-set errors, simulation.api.combined_sem)."""
    from tiedattention.simulation.api import combined_sem

    return exc.mean(axis=1), np.array([combined_sem(exc[i], within[i]) for i in range(exc.shape[0])])

def _exponent_at(store, d: int, blocks=SEED_BLOCKS_D) -> dict:
    """The simulated excess along NUS_D at dimension d against the finite-d SE: prints every point, asserts each is
    above the Gaussian SE and within 15 % + 2 s.e. of it (test (b)'s allowance), and returns the relative offset
    (weighted mean, "rel", "rel_err"; per point, "rel_points", "rel_points_err"), the SE's exponent "f_se", the
    simulations' fit "f_sim" and its sampling error "f_err" (the spread of the per-seed exponents: seed s keeps its
    S0 and test sequences at every n)."""
    from tiedattention.theory.scaling import fit_exponent

    n, se_exc, exc, within, lams = _along_n(store, d, blocks)
    mean, sem = _mean_sem(exc, within)
    rel, rel_err = mean / se_exc - 1.0, sem / se_exc
    w = 1.0 / rel_err**2
    rbar, rbar_err = float(np.sum(w * rel) / np.sum(w)), float(1.0 / math.sqrt(np.sum(w)))
    chi2 = float(np.sum(w * (rel - rbar) ** 2))
    f_se, f_sim = fit_exponent(n, se_exc), fit_exponent(n, mean)
    per_seed = np.array([fit_exponent(n, exc[:, j])["fitted_exponent"] for j in range(exc.shape[1])])
    f_err = float(per_seed.std(ddof=1) / math.sqrt(per_seed.size))
    for nu, lam, s, e, er, r, rr in zip(NUS_D, lams, se_exc, mean, sem, rel, rel_err, strict=True):
        print(f"d={d} nu={nu:g} lam={lam}: SE excess {s:.5f}, simulation {e:.5f} +- {er:.5f} "
              f"(relative {r:+.3f} +- {rr:.3f})")
    lo, hi = f_sim["fitted_exponent_ci"]
    print(f"d={d} ({exc.shape[1]} seeds): offset {rbar:+.4f} +- {rbar_err:.4f} (chi2 {chi2:.2f} on 3 dof); exponents: "
          f"SE {f_se['fitted_exponent']:.4f}, simulation {f_sim['fitted_exponent']:.4f} [{lo:.4f}, {hi:.4f}] "
          f"(95 % OLS), sampling s.e. {f_err:.4f} (per-seed mean {per_seed.mean():.4f})")
    assert np.all(mean > se_exc) and np.all(mean - se_exc <= 2 * sem + 0.15 * se_exc), rel
    return {"rel": rbar, "rel_err": rbar_err, "rel_points": rel, "rel_points_err": rel_err,
            "f_se": f_se["fitted_exponent"], "f_sim": f_sim, "f_err": f_err}


def test_exponent_along_n_at_d200_against_d100(store):
    """32 seeds at d = 200 and d = 100 along n/d = 50, 100, 200, 400 (optimal lambda of the finite-d SE at each d;
    docs/theory/scaling.md "Simulations" (d)). The exponent's sampling error comes from the per-seed exponents
    (seed s keeps its target S0 and its test sequences at every n, so a seed's four points are correlated)."""
    out = {d: _exponent_at(store, d) for d in (D_B, D_D)}
    lo_d, hi_d = out[D_B], out[D_D]
    drop_sim = lo_d["f_sim"]["fitted_exponent"] - hi_d["f_sim"]["fitted_exponent"]
    drop_err = math.hypot(lo_d["f_err"], hi_d["f_err"])
    drop_se = lo_d["f_se"] - hi_d["f_se"]
    d_rel, d_rel_err = hi_d["rel"] - lo_d["rel"], math.hypot(hi_d["rel_err"], lo_d["rel_err"])
    print(f"f_sim(100) - f_sim(200) = {drop_sim:.4f} +- {drop_err:.4f}; f_SE(100) - f_SE(200) = {drop_se:.4f}; "
          f"offsets d=200 - d=100: {d_rel:+.4f} +- {d_rel_err:.4f}")
    # Measured (32 seeds): f_sim - f_SE = +0.0054 +- 0.0057 (d = 100), +0.0085 +- 0.0038 (d = 200); the drop
    # 0.0218 +- 0.0069 against the SE's 0.0249; offsets 0.085 +- 0.004 and 0.091 +- 0.004. With 2 seeds d = 200
    # gave 0.732 against the SE's 0.692, with 8 seeds 0.720, with 16 seeds 0.708: seeds 0-1 are steep ones.
    for d in (D_B, D_D):  # the simulated exponent is the finite-d SE's at the same d (three sampling s.e.)
        assert abs(out[d]["f_sim"]["fitted_exponent"] - out[d]["f_se"]) <= 3 * out[d]["f_err"], out[d]
    # it falls from d = 100 to d = 200 (by more than two s.e.) by the SE's amount (within two s.e.)
    assert drop_sim > 2 * drop_err and abs(drop_sim - drop_se) <= 2 * drop_err, (drop_sim, drop_err, drop_se)
    # the relative offset from the Gaussian SE is the same at both d (not a finite-size effect)
    assert abs(d_rel) <= 2 * d_rel_err, (d_rel, d_rel_err)


# --------------------------------------------------------------------------------------------------
# (e) a third d along n, and f(gamma)
# --------------------------------------------------------------------------------------------------
# 12 seeds by default (~15 min of one core per two seeds at load 2-3); TIEDATTENTION_SEEDS_400=24 uses the 24 of the
# session-9 record (scaling.md (e)) when they are in the cache
D_E = 400
SEED_BLOCKS_E = tuple(range(0, int(os.environ.get("TIEDATTENTION_SEEDS_400", "12")), 2))
TOL_EXPONENT = 0.03  # issue 6's tolerance between the scaling-limit exponent and f(gamma)


def test_exponent_along_n_at_d400_and_f_gamma(store):
    """12 seeds at d = 400 on (d)'s four n/d, next to (d)'s 32 seeds at d = 100 and 200 (docs/theory/scaling.md
    "Simulations" (e)).

    * d = 400: the simulated exponent is the finite-d SE's (three sampling s.e.), and it has fallen from d = 100 by
      the SE's amount (the fall larger than two s.e., and the SE's within two s.e. of it). The relative offset of
      the excess from the Gaussian SE at n/d >= 100 is the d = 100 one (two s.e.); at n/d = 50 it grows with d
      (0.090, 0.102, 0.121: printed, not asserted).
    * f(gamma): f_sim(d) - f(gamma) = [f_SE(d) - f(gamma)] + Delta(d). The bracket is the theory's finite-d
      offset: f_SE(d) falls monotonically with d, towards the scaling-limit route's exponent f_lim on the same n/d,
      itself within 0.03 of f(gamma) (the issue's tolerance for the limit route; test_scaling checks it on the
      issue's window). Delta, pooled over the three d, is below 0.03 by more than two of its standard errors: the
      simulations' exponent is the theory's at every d, to better than the tolerance the issue puts on f(gamma).
      (f_lim + Delta, the simulations carried to d -> infinity with the theory's offset, is printed: 0.630 +- 0.003
      with 12 seeds at d = 400; it presumes Delta does not change with d.)
    * Delta does not resolvably grow with d: its weighted slope against log2(d/100) is within 2.5 of its standard
      errors of 0 (24 seeds at d = 400: +0.0044 +- 0.0038 per doubling). f_sim - [f_SE - f(gamma)] = f(gamma) +
      Delta is printed per d (24 seeds: 0.605, 0.609, 0.614; pooled 0.609 +- 0.003): the reading under which
      issue 6 is closed (scaling.md "Simulations" (e)).
    """
    from tiedattention.problem import Problem
    from tiedattention.theory.scaling import fit_exponent, limit_curve, parse_lam_rule, predicted_exponent

    out = {d: _exponent_at(store, d) for d in (D_B, D_D)}
    out[D_E] = _exponent_at(store, D_E, SEED_BLOCKS_E)
    rule = parse_lam_rule("optimal")
    lim = limit_curve(Problem.from_options(target=TARGET, noise=0.5), list(NUS_D), rule)
    assert all(r["converged"] for r in lim)
    f_lim = fit_exponent(np.array([r["nu"] for r in lim]), np.array([r["excess"] for r in lim]))["fitted_exponent"]
    f_gamma, regime = predicted_exponent(1.25, rule)
    dims = (D_B, D_D, D_E)
    f_sim = np.array([out[d]["f_sim"]["fitted_exponent"] for d in dims])
    f_se = np.array([out[d]["f_se"] for d in dims])
    f_err = np.array([out[d]["f_err"] for d in dims])
    w = 1.0 / f_err**2
    delta, delta_err = float(np.sum(w * (f_sim - f_se)) / np.sum(w)), float(1.0 / math.sqrt(np.sum(w)))
    chi2 = float(np.sum(w * (f_sim - f_se - delta) ** 2))
    drop_sim, drop_err = f_sim[0] - f_sim[2], math.hypot(f_err[0], f_err[2])
    drop_se = f_se[0] - f_se[2]
    d_rel = out[D_E]["rel_points"] - out[D_B]["rel_points"]
    d_rel_err = np.hypot(out[D_E]["rel_points_err"], out[D_B]["rel_points_err"])
    print(f"f(gamma) = {f_gamma:.4f} ({regime}); limit route on n/d = {NUS_D}: {f_lim:.4f}")
    print("f_sim - f_SE per d: " + ", ".join(f"d={d}: {a - b:+.4f} +- {e:.4f}" for d, a, b, e in
                                              zip(dims, f_sim, f_se, f_err, strict=True))
          + f"; pooled Delta {delta:+.4f} +- {delta_err:.4f} (chi2 {chi2:.2f} on 2 dof)")
    print(f"f_sim(100) - f_sim(400) = {drop_sim:.4f} +- {drop_err:.4f} (SE {drop_se:.4f}); f_lim + Delta = "
          f"{f_lim + delta:.4f} +- {delta_err:.4f}; relative offsets d=400 - d=100 per n/d: "
          + ", ".join(f"{nu:g}: {a:+.3f} +- {e:.3f}" for nu, a, e in zip(NUS_D, d_rel, d_rel_err, strict=True)))
    assert abs(f_sim[2] - f_se[2]) <= 3 * f_err[2], out[D_E]
    assert drop_sim > 2 * drop_err and abs(drop_sim - drop_se) <= 2 * drop_err, (drop_sim, drop_err, drop_se)
    assert np.all(np.abs(d_rel[1:]) <= 2 * d_rel_err[1:]), (d_rel, d_rel_err)
    assert np.all(np.diff(f_se) < 0) and f_se[-1] > f_lim and abs(f_lim - f_gamma) <= TOL_EXPONENT, (f_se, f_lim)
    assert abs(delta) + 2 * delta_err < TOL_EXPONENT, (delta, delta_err)
    # Delta against log2(d/100): a growth with d would undo the reading above; the data must not resolve one.
    design = np.vstack([np.ones(3), np.log2(np.array(dims) / dims[0])]).T
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    a_b = cov @ design.T @ (w * (f_sim - f_se))
    slope, slope_err = float(a_b[1]), float(math.sqrt(cov[1, 1]))
    print(f"Delta per doubling of d {slope:+.4f} +- {slope_err:.4f}; f_sim - (f_SE - f(gamma)) per d: "
          + ", ".join(f"{f_gamma + a - b:.4f}" for a, b in zip(f_sim, f_se, strict=True))
          + f", pooled {f_gamma + delta:.4f} +- {delta_err:.4f}")
    assert abs(slope) <= 2.5 * slope_err, (slope, slope_err)


def test_joint_law_level_meets_the_simulations(store):
    """The level of the excess: at each of the twelve (d, n/d) points of (d) and (e), the finite-d SE point
    re-solved at its lambda and evaluated under the exact law of its top 10 modes with its top outlier corrected
    (strong_modes.joint_law_point, the `scaling --joint-law` route) lies within 2.5 % (+ two combined s.e.:
    simulations and QMC) of the simulated excess. The Gaussian channel's excess sits 8-12 % lower (printed);
    the joint law without the outlier correction misses n/d = 50 at d = 400 by 5.4 % (scaling.md (e))."""
    from tiedattention.problem import Problem
    from tiedattention.theory.state_evolution import StateEvolution
    from tiedattention.theory.strong_modes import exact_saturation, joint_law_point

    bad = []
    for d, blocks in ((D_B, SEED_BLOCKS_D), (D_D, SEED_BLOCKS_D), (D_E, SEED_BLOCKS_E)):
        n, se_exc, exc, within, lams = _along_n(store, d, blocks)
        mean, sem = _mean_sem(exc, within)
        sat = None
        for nu, lam, g, m, e in zip(NUS_D, lams, se_exc, mean, sem, strict=True):
            p = Problem.from_options(target=TARGET, noise=0.5, lam=lam)
            se = StateEvolution(p, d=d)
            if sat is None:
                sat, _ = exact_saturation(p, d, 10)
            j = joint_law_point(p, se.measure, se.solve(nu / d), d, 10, saturation=sat)
            th, th_err = j["excess_joint_law"], j["excess_joint_law_err"]
            rel, tol = m / th - 1.0, 0.025 + 2.0 * math.hypot(e / th, th_err / th)
            line = (f"d={d} nu={nu:g}: simulation {m:.5f} +- {e:.5f}, joint law {th:.5f} +- {th_err:.5f} "
                    f"(top outlier {j['outliers_joint_law'][0]:.3f}): {rel:+.3f} (tol {tol:.3f}); Gaussian "
                    f"{g:.5f} ({m / g - 1.0:+.3f})")
            print(line)
            if abs(rel) > tol:
                bad.append(line)
    assert not bad, bad
