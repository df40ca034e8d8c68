"""theory.optimal: the weight decay that minimises the SE test error per alpha (``theory --optimal-lam``).

The optimum is checked against the SE itself: a minimum (its two neighbours at lambda e^{+-0.05} are not lower), the
argmin of an independent grid of cold solves, the cold ``theory_record`` at lambda_opt, and fixed-lambda learning
curves (which it must not lose to). A noiseless problem above perfect recovery wants lambda -> 0+: the boundary is
reported. Sizes: two alphas (1 and 3) of the default problem (MP 0.5, noise 0.5, T = 2), each SE solve ~0.2 s.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.problem import Problem
from tiedattention.theory import optimal
from tiedattention.theory.api import CONTRACT_KEYS, theory_record, theory_records
from tiedattention.theory.optimal import FIELDS, optimal_curve, optimal_lambda
from tiedattention.theory.state_evolution import StateEvolution

P = Problem.from_options()
ALPHAS = [1.0, 3.0]
SE = {"tol": 1e-10, "accuracy": 1e-3}  # the options theory's CLI passes (so its records are comparable)
VOLATILE = ("seconds", "lam_seconds")


@pytest.fixture(scope="module")
def curve():
    return optimal_curve(P, ALPHAS, **SE)


def _te(lam: float, alpha: float, problem: Problem = P) -> float:
    rec = theory_record(problem.replace_student(lam=float(lam)), alpha, **SE)
    assert rec["converged"] and rec["phase"] == "regular"
    return rec["test_error"]


def test_the_optimum_is_an_interior_bracketed_minimum(curve):
    for rec in curve:
        assert rec["converged"] and rec["lam_converged"] and not rec["lam_opt_at_boundary"], rec["lam_message"]
        lam = rec["lam_opt"]
        assert rec["lam"] == lam and 1e-5 < lam < 10
        for step in (-0.05, 0.05):  # the solver's tolerance: 1e-10 on the fixed point, far below the curvature
            assert _te(lam * math.exp(step), rec["alpha"]) >= rec["test_error"] - 1e-8
        # no scan point is lower than the optimum, and at least one scan point is a local minimum
        assert min(v for v in rec["test_error_scan"] if v is not None) >= rec["test_error"] - 1e-8
        assert rec["lam_scan_local_minima"] >= 1 and rec["lam_evaluations"] > len(rec["lam_scan"])
    assert curve[0]["lam_scan_kind"] == "full" and len(curve[0]["lam_scan"]) == optimal.GRID
    assert curve[0]["lam_scan"][0] == 1e-5 and curve[0]["lam_scan"][-1] == 10.0


def test_the_record_is_theory_record_at_the_optimum(curve):
    for rec in curve:
        ref = theory_record(P.replace_student(lam=rec["lam_opt"]), rec["alpha"], **SE)
        for k, v in ref.items():
            if k in VOLATILE:
                continue
            if isinstance(v, float) and math.isfinite(v):
                assert rec[k] == pytest.approx(v, rel=1e-8, abs=1e-12), k
            else:
                assert rec[k] == v, k
        assert set(CONTRACT_KEYS) | set(FIELDS) | {"lam"} <= set(rec)


def test_agrees_with_a_fine_grid_of_cold_solves(curve):
    """9 cold solves over lambda_opt e^{+-0.4} (spacing 0.1 in log lambda): the grid's argmin is within one spacing
    of lambda_opt, and lambda_opt (refined to xatol = 0.01) is not worse than the grid's best."""
    rec = curve[0]
    logs = math.log(rec["lam_opt"]) + np.linspace(-0.4, 0.4, 9)
    values = [_te(math.exp(x), rec["alpha"]) for x in logs]
    k = int(np.argmin(values))
    assert 0 < k < 8  # a minimum inside the grid
    assert abs(logs[k] - math.log(rec["lam_opt"])) <= 0.1 + optimal.XATOL
    assert rec["test_error"] <= min(values) + 1e-8


@pytest.mark.slow
def test_agrees_with_a_dense_grid_of_cold_solves(curve):
    """40 cold solves over lambda_opt e^{+-1} per alpha (spacing 0.051)."""
    for rec in curve:
        logs = math.log(rec["lam_opt"]) + np.linspace(-1.0, 1.0, 40)
        values = [_te(math.exp(x), rec["alpha"]) for x in logs]
        k = int(np.argmin(values))
        assert 0 < k < 39
        assert abs(logs[k] - math.log(rec["lam_opt"])) <= 2.0 / 39 + optimal.XATOL
        assert rec["test_error"] <= min(values) + 1e-8


def test_the_optimal_curve_is_below_fixed_lambda_curves(curve):
    # the second alpha comes from the narrow scan around the first's optimum, which contains neither fixed lambda
    assert curve[1]["lam_scan_kind"] == "narrow"
    assert not any(np.isclose(curve[1]["lam_scan"], 0.01, rtol=1e-6))
    assert not any(np.isclose(curve[1]["lam_scan"], 1e-3, rtol=1e-6))
    for lam in (0.01, 1e-3):
        fixed = theory_records(P.replace_student(lam=lam), ALPHAS, **SE)
        for rec, ref in zip(curve, fixed, strict=True):
            assert ref["converged"]
            assert rec["test_error"] <= ref["test_error"] + 1e-8, (lam, rec["alpha"])
            assert rec["test_error"] < ref["test_error"] - 1e-4  # and strictly better: lambda_opt is ~0.06-0.08


def test_noiseless_above_perfect_recovery_wants_lambda_to_zero():
    """Delta = 0, alpha = 0.6 (perfect recovery at alpha = 0.211 for MP 0.5): the test error falls like lambda^2 as
    lambda -> 0+, so the optimum is the lower end of any range, reported as such (not bracketed)."""
    problem = P.with_options(noise=0.0)
    rec = optimal_lambda(problem, 0.6, lam_range=(1e-3, 0.1), grid=3, xatol=0.05, **SE)
    assert rec["converged"] and rec["lam_opt"] == 1e-3 and rec["lam"] == 1e-3
    assert rec["lam_opt_at_boundary"] and not rec["lam_converged"]
    assert "lower end of lam_range" in rec["lam_message"] and "towards smaller lambda" in rec["lam_message"]
    assert "lambda -> 0+ may be optimal" in rec["lam_message"]
    scan = rec["test_error_scan"]
    assert scan[0] < scan[1] < scan[2]  # monotone over the range
    assert rec["test_error"] < 1e-4  # nearly perfect recovery
    assert rec["test_error"] == pytest.approx(_te(1e-3, 0.6, problem), rel=1e-8)


def test_no_converged_lambda_is_reported_not_a_silent_nan(monkeypatch):
    def fail(self, alpha, init):
        raise FloatingPointError("forced failure")

    monkeypatch.setattr(StateEvolution, "solve_warm", fail)
    rec = optimal_lambda(P, 1.0, lam_range=(0.01, 1.0), grid=3)
    assert rec["converged"] is False and rec["lam_converged"] is False
    assert rec["lam_opt"] is None and rec["lam"] is None
    assert rec["test_error_scan"] == [None] * 3 and rec["lam_scan_phase"] == ["failed"] * 3
    assert "no lambda in [0.01, 1] gave a converged regular SE point" in rec["lam_message"]
    assert rec["lam_evaluations"] == 3


class _Fake(optimal._Search):
    """The search on an analytic test error f(log lambda); lambdas in ``bad`` do not converge."""

    def __init__(self, f, bad=()):
        self.f, self.bad, self.results, self.evaluations = f, bad, {}, 0

    def solve(self, lam):
        if lam not in self.results:
            self.evaluations += 1
            ok = not any(math.isclose(lam, b, rel_tol=1e-9) for b in self.bad)
            self.results[lam] = SimpleNamespace(converged=ok, phase="regular", residual=0.0,
                                                test_error=self.f(math.log(lam)) if ok else math.nan)
        return self.results[lam]


def _search(f, bad=(), lam_range=(1e-5, 10.0), grid=13):
    found = optimal._optimise(_Fake(f, bad), lam_range, lam_range, grid, 0.01)
    return found


def test_search_logic_on_analytic_curves():
    """The scan + Brent logic on known curves (no SE): an interior minimum, two minima, both boundaries, a minimum
    between the range's end and the next scan point, and a non-converged neighbour of the best scan point."""
    lm = math.log
    found = _search(lambda x: (x - lm(0.05)) ** 2 + 0.1)
    assert found["lam_converged"] and not found["lam_opt_at_boundary"] and found["lam_message"] == ""
    assert abs(lm(found["lam_opt"] / 0.05)) < 0.01 and found["lam_scan_local_minima"] == 1
    # two basins: the deeper one (at 0.1) wins over the one at 1e-4 that a local search from below would find
    found = _search(lambda x: min((x - lm(1e-4)) ** 2 + 0.2, (x - lm(0.1)) ** 2 + 0.1))
    assert found["lam_converged"] and abs(lm(found["lam_opt"] / 0.1)) < 0.01
    assert found["lam_scan_local_minima"] == 2 and "2 local minima" in found["lam_message"]
    found = _search(lambda x: x)  # increasing: lambda -> 0+
    assert found["lam_opt"] == 1e-5 and found["lam_opt_at_boundary"] and not found["lam_converged"]
    assert "lower end" in found["lam_message"]
    found = _search(lambda x: -x)  # decreasing: the upper end
    assert found["lam_opt"] == 10.0 and found["lam_opt_at_boundary"] and "upper end" in found["lam_message"]
    found = _search(lambda x: (x - lm(1e-5) - 0.4) ** 2)  # inside the first scan interval (step 1.15)
    assert found["lam_converged"] and not found["lam_opt_at_boundary"]
    assert abs(lm(found["lam_opt"] / 1e-5) - 0.4) < 0.01
    lams = list(np.geomspace(1e-5, 10, 13))
    found = _search(lambda x: (x - lm(0.05)) ** 2, bad=[lams[8]])  # best scan point 0.0316, its neighbour 0.1 fails
    assert not found["lam_converged"] and "did not converge" in found["lam_message"]
    assert found["lam_scan_phase"][8] == "not converged" and found["test_error_scan"][8] is None


def test_curve_falls_back_to_the_full_scan_where_the_narrow_one_does_not_bracket(monkeypatch):
    """Analytic optima per alpha (no SE): 1e-3 at alpha 1, then a jump by three decades to 1 (beyond the narrow
    scan's decade: the full scan follows and finds it), then 1.5 (the narrow scan suffices)."""
    centre = {1.0: 1e-3, 2.0: 1.0, 3.0: 1.5}

    def search(problem, alpha, d, options):
        return _Fake(lambda x: (x - math.log(centre[alpha])) ** 2 + 0.1)

    monkeypatch.setattr(optimal, "_Search", search)
    monkeypatch.setattr(optimal, "theory_record", lambda problem, alpha, d=None, **o: {
        "alpha": alpha, "converged": True, "phase": "regular",
        "test_error": (math.log(problem.student.lam / centre[alpha])) ** 2 + 0.1})
    recs = optimal_curve(P, [1.0, 2.0, 3.0])
    assert [r["lam_scan_kind"] for r in recs] == ["full", "full (narrow scan not bracketed)", "narrow"]
    for r in recs:
        assert r["lam_converged"] and abs(math.log(r["lam_opt"] / centre[r["alpha"]])) < 0.01
    assert recs[1]["lam_evaluations"] > recs[0]["lam_evaluations"] > recs[2]["lam_evaluations"]
    assert len(recs[1]["lam_scan"]) == optimal.GRID and len(recs[2]["lam_scan"]) == optimal.NARROW_GRID


def test_local_minima_count_and_lam_range_checks():
    inf = math.inf
    assert optimal._local_minima([3.0, 2.0, 3.0, 1.0, 2.0]) == 2
    assert optimal._local_minima([1.0, 2.0, 3.0]) == 1 and optimal._local_minima([inf, inf]) == 0
    assert optimal._local_minima([inf, 2.0, inf]) == 1
    assert optimal.parse_lam_range("1e-5:10") == (1e-5, 10.0)
    for bad in ((1.0, 0.5), (0.0, 1.0), (1.0, math.inf)):
        with pytest.raises(ValueError, match="lam-range"):
            optimal.check_lam_range(bad)


def test_cli_json_is_the_api_record_to_the_digit_and_lam_is_ignored(curve):
    """theory --alpha 1 --optimal-lam --json in a fresh run gives the fixture's first record digit for digit
    (determinism: same inputs, same digits); a non-default --lam is ignored with one warning line."""
    r = CliRunner().invoke(app, ["theory", "--alpha", "1", "--optimal-lam", "--lam", "0.5", "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = [json.loads(x) for x in r.stdout.strip().splitlines()]
    ref = json.loads(json.dumps({k: v for k, v in curve[0].items() if k not in VOLATILE}))  # JSON round trip
    assert {k: v for k, v in rec.items() if k not in VOLATILE} == ref
    warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert warnings == ["warning: --lam 0.5 is ignored with --optimal-lam (each α gets its own optimal λ)"]


@pytest.mark.parametrize("text", ["1e-5", "10:1e-5", "0:1", "-1:1", "a:b", "1:1", "1:inf", "1:2:3"])
def test_cli_bad_lam_range_is_one_line_exit_2(text):
    r = CliRunner().invoke(app, ["theory", "--alpha", "1", "--optimal-lam", "--lam-range", text, "--json"])
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --lam-range: "), r.stderr


def test_the_figure_says_lambda_is_optimal_per_alpha(curve):
    pytest.importorskip("matplotlib")
    from tiedattention.reproduce import curves

    table = curves.theory_table(curve, P)
    th = table[table["kind"] == "theory"]
    for rec in curve:
        assert set(th.loc[th["x"] == rec["alpha"], "lam"]) == {rec["lam_opt"]}
    fig = curves.draw_learning_curve(table)
    try:
        title = fig._suptitle.get_text()
    finally:
        curves.common.pyplot().close(fig)
    assert "λ optimal per α" in title and "λ = 0.01" not in title


@pytest.mark.slow
def test_rs_stability_is_computed_at_the_optimum(curve):
    from tiedattention.theory.stability import rs_fields

    r = CliRunner().invoke(app, ["theory", "--alpha", "1", "--optimal-lam", "--rs-stability", "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = [json.loads(x) for x in r.stdout.strip().splitlines()]
    ref = rs_fields(P.replace_student(lam=rec["lam_opt"]), curve[0], None, None)
    assert rec["rs_at"] == pytest.approx(ref["rs_at"], rel=1e-10) and rec["rs_stable"] == ref["rs_stable"]
