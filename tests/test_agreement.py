"""Theory against simulation (slow): the SE against the ERM minimiser at finite d.

Issue 2's setting: MP kappa0 = 0.5, Delta = 0.5, T = 2, lambda in {0.01, 1e-4}, alpha in {0.05, 0.1, 0.25, 0.5}.
Measured (prox trainer, alpha = 0.5, lambda = 0.01, 6 seeds): test error 0.1466 (d = 40), 0.1410 (70), 0.1406
(100) against the SE's 0.1360; MSE on S 0.2215, 0.2117, 0.2056 against 0.2005; objective/d^2 0.02406, 0.02381,
0.02345 and, on a GPU at d = 400, 0.023287 against 0.023292. At d = 100 the finite-size bias of the test error
(~3 %) is about 3 standard errors of 8 seeds, so the SE can lie outside two standard errors of d = 100 alone; the
checks below therefore extrapolate in 1/d (fit a + b/d over d = 50, 100, 200) and require the intercept within two
of its standard errors (plus the SE's own quadrature error estimate) of the SE. Each case also reports the literal
d = 100 comparison issue 2 names (SE, mean +- s.e. over 8 seeds, gap in standard errors): printed (pytest -s) and
written to ``$TIEDATTENTION_AGREEMENT_DIR/report_alpha<a>_lam<l>.json`` (default /tmp/tiedattention_agreement).

Every seed's result is cached in ``$TIEDATTENTION_AGREEMENT_DIR/cache`` under (alpha, lambda, d, seed) (one seed
of ``simulate_record(..., seeds=1, seed0=s)`` is the s-th seed of the 8-seed record, the data depend on s alone),
so a rerun costs nothing; delete the directory to recompute. Seeds: 8 at d = 50 and 100; at d = 200 8 for
lambda = 0.01 (with 4 the objective's s.e. is underestimated: alpha = 0.25 failed its objective check at 3.7 "s.e."
and passes at 1.4 with 8) and 4 for lambda = 1e-4, the expensive point (thousands of prox steps, 400-800 s a seed
on a loaded core); env TIEDATTENTION_AGREEMENT_SEEDS_200 overrides both.
Recorded run and table: docs/theory/state_evolution.md, "Agreement with finite-size ERM".
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.theory import StateEvolution

simulation = pytest.importorskip("tiedattention.simulation")

DIMS = (50, 100, 200)
SEEDS_200 = os.environ.get("TIEDATTENTION_AGREEMENT_SEEDS_200")


def _seeds(d, lam):
    if d < 200:
        return 8
    return int(SEEDS_200) if SEEDS_200 else (8 if lam >= 0.01 else 4)
ROOT = Path(os.environ.get("TIEDATTENTION_AGREEMENT_DIR", "/tmp/tiedattention_agreement"))
KEYS = {"test_error": "test_error_mean", "test_error_sem": "test_error_sem", "objective": "objective_mean",
        "converged": "converged", "steps": "steps_mean", "seconds": "seconds_per_seed_mean"}


def _extrapolate(values, sems):
    """Weighted least squares of y = a + b/d; returns a and its standard error."""
    x = 1.0 / np.asarray(DIMS, float)
    w = 1.0 / np.asarray(sems) ** 2
    design = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    coef = cov @ design.T @ (w * np.asarray(values))
    return coef[0], float(np.sqrt(cov[0, 0]))


def _seed(problem, lam, alpha, d, seed):
    """One seed of the prox minimiser, cached on disk under (alpha, lambda, d, seed)."""
    path = ROOT / "cache" / f"alpha{alpha:g}_lam{lam:g}_d{d}_seed{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    rec = simulation.simulate_record(problem, alpha, d=d, seeds=1, seed0=seed, solver="prox", threads=1)
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
    quad = float(th.errors.get("test_error", 0.0))  # the SE's quadrature error estimate: the stated allowance
    sims = [_summary(problem, lam, alpha, d) for d in DIMS]
    a, se_a = _extrapolate([s["test_error_mean"] for s in sims], [s["test_error_sem"] for s in sims])
    b, se_b = _extrapolate([s["objective_mean"] for s in sims], [max(s["objective_sem"], 1e-6) for s in sims])
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
    ROOT.mkdir(parents=True, exist_ok=True)
    (ROOT / f"report_alpha{alpha:g}_lam{lam:g}.json").write_text(json.dumps(report, indent=1))
    dims = "; ".join(f"d={s['d']} {s['test_error_mean']:.5f} +- {s['test_error_sem']:.5f} ({s['seeds']})" for s in sims)
    print(f"\nalpha={alpha:g} lam={lam:g}: SE {th.test_error:.5f} (quad {quad:.1e}); "
          f"d=100 {s100['test_error_mean']:.5f} +- {s100['test_error_sem']:.5f} "
          f"({report['d100']['gap_in_sem']:+.2f} s.e.); "
          f"{dims}; intercept {a:.5f} +- {se_a:.5f} ({report['intercept_gap_in_sem']:+.2f} s.e.)")
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
