"""Theory against simulation (slow): the SE against the ERM minimiser at finite d.

Issue 2's setting: MP kappa0 = 0.5, Delta = 0.5, T = 2, lambda in {0.01, 1e-4}, alpha in {0.05, 0.1, 0.25, 0.5}.
Measured (prox trainer, alpha = 0.5, lambda = 0.01, 6 seeds): test error 0.1466 (d = 40), 0.1410 (70), 0.1406
(100) against the SE's 0.1360; MSE on S 0.2215, 0.2117, 0.2056 against 0.2005; objective/d^2 0.02406, 0.02381,
0.02345 and, on a GPU at d = 400, 0.023287 against 0.023292. At d = 100 the finite-size bias of the test error
(~3 %) is about 3 standard errors of 8 seeds, so the SE can lie outside two standard errors of d = 100 alone; the
checks below therefore extrapolate in 1/d (fit a + b/d over d = 50, 100, 200) and require the intercept within two
of its standard errors (plus the SE's own quadrature error estimate) of the SE. (A larger d alone would not do:
the seed spread is O(1/d) like the bias, so the gap in s.e. of 8 seeds stays near +3 from d = 50 to 400 at
alpha = 0.1, docs/theory/state_evolution.md.) Each case also reports the literal
d = 100 comparison issue 2 names (SE, mean +- s.e. over 8 seeds, gap in standard errors; the gap at every d in
``sims``): printed (pytest -s) and
written to ``$TIEDATTENTION_AGREEMENT_DIR/report_alpha<a>_lam<l>.json`` (default /tmp/tiedattention_agreement).

Every seed's result is cached in ``$TIEDATTENTION_AGREEMENT_DIR/cache`` under (alpha, lambda, d, seed) (one seed
of ``simulate_record(..., seeds=1, seed0=s)`` is the s-th seed of the 8-seed record, the data depend on s alone),
so a rerun costs nothing; delete the directory to recompute. Seeds: 8 at d = 50 and 100; at d = 200 8 for
lambda = 0.01 (with 4 the objective's s.e. is underestimated: alpha = 0.25 failed its objective check at 3.7 "s.e."
and passes at 1.4 with 8) and 4 for lambda = 1e-4, the expensive point (thousands of prox steps, 400-800 s a seed
on a loaded core); env TIEDATTENTION_AGREEMENT_SEEDS_200 overrides both.
Test sequences per seed: 4e4 (``TIEDATTENTION_AGREEMENT_NTEST``; the cache file names carry it unless it is
simulate's default 2e3, the n_test of the runs recorded before 2026-11-30). lambda = 1e-4, alpha = 0.25 is a strict
expected failure (``RS_BROKEN``): the replica-symmetric SE is not the theory of that glassy ERM landscape, checked
by ``test_rs_broken_point_has_many_minima_and_the_reference_point_one``.
Recorded run and table: docs/theory/state_evolution.md, "Agreement with finite-size ERM".
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.stats import extrapolate_inverse_d
from tiedattention.theory import StateEvolution

simulation = pytest.importorskip("tiedattention.simulation")

DIMS = (50, 100, 200)
SEEDS_200 = os.environ.get("TIEDATTENTION_AGREEMENT_SEEDS_200")
# test sequences per seed: 4e4 (simulate's default 2e3 leaves +-0.004 of test-set noise per seed, more than the
# seed-to-seed spread at alpha >= 0.25; it hid the lambda = 1e-4, alpha = 0.5 gap). Cache files of another n_test
# carry it in their name; the 2e3 cache of the earlier recorded runs is "..._seed<s>.json".
N_TEST = int(os.environ.get("TIEDATTENTION_AGREEMENT_NTEST", "40000"))
# Where the replica-symmetric SE is not the ERM's theory: the ERM landscape is glassy (docs/theory/state_evolution.md,
# "Several minima at small lambda"): a strict expected failure.
RS_BROKEN = {
    (1e-4, 0.25): "RS broken past the interpolation peak: the channel's prox has several local minima at 3.44 % "
                  "of the sequences at the SE point (rs_switching; ~1 % at the earlier Jacobian-form points), a "
                  "divergent replicon, and the d = 100 ERM has 6-14 distinct local minima in 6-15 starts "
                  "(docs/theory/state_evolution.md, 'Several minima at small lambda'); the SE (0.3815 with the Stein "
                  "forms, objective 0.00125) sits above the ERM's intercept 0.3543 +- 0.0073 and below its objectives "
                  "(section 'The conjugates: Stein forms')",
}


def _seeds(d, lam):
    if d < 200:
        return 8
    return int(SEEDS_200) if SEEDS_200 else (8 if lam >= 0.01 else 4)
ROOT = Path(os.environ.get("TIEDATTENTION_AGREEMENT_DIR", "/tmp/tiedattention_agreement"))
KEYS = {"test_error": "test_error_mean", "test_error_sem": "test_error_sem", "objective": "objective_mean",
        "converged": "converged", "steps": "steps_mean", "seconds": "seconds_per_seed_mean"}


def _extrapolate(values, sems):
    """The d -> infinity intercept of y = a + b/d over DIMS and its standard error (the library's fit)."""
    fit = extrapolate_inverse_d(DIMS, values, sems)
    return fit.intercept, fit.intercept_sem


def _seed(problem, lam, alpha, d, seed):
    """One seed of the prox minimiser, cached on disk under (alpha, lambda, d, seed)."""
    tag = "" if N_TEST == 2000 else f"_nt{N_TEST}"
    path = ROOT / "cache" / f"alpha{alpha:g}_lam{lam:g}_d{d}_seed{seed}{tag}.json"
    if path.exists():
        return json.loads(path.read_text())
    rec = simulation.simulate_record(problem, alpha, d=d, seeds=1, seed0=seed, solver="prox", threads=1,
                                     n_test=N_TEST)
    row = {k: float(rec[key]) for k, key in KEYS.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)
    return row


def _summary(problem, lam, alpha, d):
    rows = [_seed(problem, lam, alpha, d, s) for s in range(_seeds(d, lam))]
    te = np.array([r["test_error"] for r in rows])
    obj = np.array([r["objective"] for r in rows])
    return {
        "d": d, "seeds": len(rows),
        "test_error_mean": float(te.mean()),
        "test_error_sem": simulation.combined_sem(te, np.array([r["test_error_sem"] for r in rows])),
        "objective_mean": float(obj.mean()),
        "objective_sem": float(obj.std(ddof=1) / np.sqrt(obj.size)),
        "converged": float(np.mean([r["converged"] for r in rows])),
        "steps_mean": float(np.mean([r["steps"] for r in rows])),
        "seconds_per_seed": float(np.mean([r["seconds"] for r in rows])),
    }


@pytest.mark.slow
@pytest.mark.parametrize("lam", [0.01, 1e-4])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.25, 0.5])
def test_se_test_error_is_the_large_d_limit_of_the_erm(lam, alpha, torch_one_thread):
    problem = Problem.from_options(lam=lam)
    th = StateEvolution(problem).solve(alpha)
    assert th.converged, th.message
    # the allowance: the SE's quadrature error -- the fixed point's own where reported (Gauss-Hermite points),
    # else the estimate at the point (the QMC re-solve past the peak)
    quad = float(th.errors.get("fixed_point_test_error", th.errors.get("test_error", 0.0)))
    sims = [_summary(problem, lam, alpha, d) for d in DIMS]
    a, se_a = _extrapolate([s["test_error_mean"] for s in sims], [s["test_error_sem"] for s in sims])
    b, se_b = _extrapolate([s["objective_mean"] for s in sims], [max(s["objective_sem"], 1e-6) for s in sims])
    for s in sims:  # the literal comparison at every d: bias and seed spread are both O(1/d), so it stays put
        s["gap_in_sem"] = (s["test_error_mean"] - th.test_error) / s["test_error_sem"]
    s100 = sims[DIMS.index(100)]
    report = {
        "alpha": alpha, "lam": lam, "se_test_error": th.test_error, "se_quadrature_error": quad,
        "se_objective": th.objective, "sims": sims,
        "d100": {"mean": s100["test_error_mean"], "sem": s100["test_error_sem"], "seeds": s100["seeds"],
                 "gap_in_sem": (s100["test_error_mean"] - th.test_error) / s100["test_error_sem"]},
        "intercept": a, "intercept_sem": se_a, "intercept_gap_in_sem": (a - th.test_error) / se_a,
        "objective_intercept": b, "objective_intercept_sem": se_b,
    }
    report["passed"] = bool(abs(a - th.test_error) <= 2 * se_a + quad)
    report["rs_broken"] = RS_BROKEN.get((lam, alpha))
    ROOT.mkdir(parents=True, exist_ok=True)
    (ROOT / f"report_alpha{alpha:g}_lam{lam:g}.json").write_text(json.dumps(report, indent=1))
    dims = "; ".join(f"d={s['d']} {s['test_error_mean']:.5f} +- {s['test_error_sem']:.5f} ({s['seeds']}, "
                     f"{s['gap_in_sem']:+.1f} s.e.)" for s in sims)
    print(f"\nalpha={alpha:g} lam={lam:g}: SE {th.test_error:.5f} (quad {quad:.1e}); "
          f"d=100 {s100['test_error_mean']:.5f} +- {s100['test_error_sem']:.5f} "
          f"({report['d100']['gap_in_sem']:+.2f} s.e.); "
          f"{dims}; intercept {a:.5f} +- {se_a:.5f} ({report['intercept_gap_in_sem']:+.2f} s.e.)")
    if (lam, alpha) in RS_BROKEN:  # a strict expected failure: if it passed, the explanation would be wrong
        assert not report["passed"], report
        pytest.xfail(RS_BROKEN[(lam, alpha)])
    assert report["passed"], report
    # the objective/d^2 converges too (a quantity with much smaller fluctuations)
    assert abs(b - th.objective) <= max(2 * se_b, 2e-3 * th.objective), (th.objective, b, se_b)


@pytest.mark.slow
def test_objective_approaches_se_at_d100(torch_one_thread):
    """Objective/d^2 at d = 100 within 1 % of the SE (its finite-size bias is ~0.7 %)."""
    problem = Problem.from_options(lam=0.01)
    th = StateEvolution(problem).solve(0.5)
    sim = _summary(problem, 0.01, 0.5, 100)
    assert sim["objective_mean"] == pytest.approx(th.objective, rel=0.01)


def _minima(lam, alpha, d=100, seed=0, n_starts=4):
    """Objectives and test errors of the prox ERM from S = 0 and from ``n_starts - 1`` random Wishart starts of
    growing scale (rank d/4), on one data set (docs/theory/state_evolution.md, "Several minima at small lambda")."""
    import torch

    torch.set_num_threads(1)
    problem = Problem.from_options(lam=lam)
    S0 = problem.task.target.sample(d, simulation.rng_for(seed, "target"))
    data = simulation.sample_dataset(problem, round(alpha * d * d), d, seed, S0=S0)
    rng = np.random.default_rng(1000 + seed)
    starts = [None]
    for scale in (1.0, 2.0, 4.0)[: n_starts - 1]:
        G = rng.standard_normal((d, d // 4))
        starts.append(scale * G @ G.T / np.sqrt(d * d // 4))
    out = []
    for init in starts:
        res = simulation.train(problem, data, solver="prox", init=init, rtol=1e-13, patience=20)
        assert res.converged, res.message
        out.append((res.objective, res.S_hat))
    return out


@pytest.mark.slow
def test_rs_broken_point_has_many_minima_and_the_reference_point_one(torch_one_thread):
    """The strict expected failure above is a glassy landscape: at lambda = 1e-4, alpha = 0.25 (d = 100, seed 0)
    four starts end in four different minima (objectives >= 1e-4 apart, relative; measured 17 starts: 13 minima,
    spread 6 %), while at the reference point lambda = 0.01, alpha = 0.5 they end at one minimiser (objectives to
    1e-6, S_hat to 1e-3)."""
    glassy = _minima(1e-4, 0.25)
    F = np.sort([f for f, _ in glassy])
    assert np.all(np.diff(F) / F[1:] > 1e-4), F
    single = _minima(0.01, 0.5)
    F1 = np.array([f for f, _ in single])
    assert np.ptp(F1) / F1.min() < 1e-6, F1
    ref = single[0][1]
    for _, S in single[1:]:
        assert np.linalg.norm(S - ref) / np.linalg.norm(ref) < 1e-3
