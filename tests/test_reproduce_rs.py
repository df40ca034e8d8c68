"""RS (AT) stability on the theory curves of ``reproduce`` (helper-57): the ``rs_stability`` cell param of the
``theory_curve`` route (off when absent: records and cell keys as before), and fig5's mark of the AT-unstable
stretch of the beta = beta0 = 2 curve (docs/theory/stability.md, summary item 1). Fast: the stability call is
stubbed and the figure drawn from a synthetic store table; the real AT values are one slow test."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from tiedattention.reproduce import common, fig5, routes  # noqa: E402
from tiedattention.theory import stability  # noqa: E402
from tiedattention.theory.state_evolution import StateEvolution  # noqa: E402

RS_KEYS = set(stability.RS_FIELDS)
ALPHAS = [0.1, 0.2, 0.3]


def _records(params):
    return json.loads(routes.theory_curve(params)["records"])


def _without_time(recs):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in recs]


@pytest.fixture
def stub(monkeypatch):
    """stability.rs_fields replaced by a recorder that returns AT = alpha (stable below 1)."""
    calls = []

    def rs_fields(problem, rec, d=None, channel_options=None):
        calls.append((rec["alpha"], d, channel_options))
        return {"rs_at": rec["alpha"], "rs_at_error": 0.0, "rs_switching": 0.0, "rs_stable": rec["alpha"] < 1,
                "rs_message": ""}

    monkeypatch.setattr(stability, "rs_fields", rs_fields)
    return calls


def test_absent_param_leaves_records_and_keys_as_before(stub):
    params = {**common.options(), "alphas": ALPHAS[:2]}
    plain, off = _records(params), _records({**params, "rs_stability": False})
    assert not stub and all(not RS_KEYS & set(r) for r in plain + off)
    assert _without_time(plain) == _without_time(off)
    on = _records({**params, "rs_stability": True})
    # the points are solved exactly as without it; the rs fields come on top
    assert _without_time([{k: v for k, v in r.items() if k not in RS_KEYS} for r in on]) == _without_time(plain)
    assert [c[0] for c in stub] == ALPHAS[:2] and all(c[1:] == (None, None) for c in stub)  # as the CLI: its options
    assert all(RS_KEYS <= set(r) and r["rs_at"] == r["alpha"] for r in on)
    # the cells of curves without it keep their keys (fig5's beta = 0.5 and 1 curves, every other figure)
    opts = common.options()
    assert common.theory_curve_cells(opts, ALPHAS)[0].params == {**opts, "alphas": ALPHAS, "route": common.THEORY_CURVE}
    assert common.theory_curve_cells(opts, ALPHAS, rs_stability=True)[0].params["rs_stability"] is True


def test_a_failed_solve_and_a_raising_check_give_null_fields_and_the_reason(monkeypatch, stub):
    real_solve, real_rs = StateEvolution.solve, stability.rs_fields

    def solve(self, alpha, init=None):
        if alpha == 0.2:
            raise ValueError("boom")
        return real_solve(self, alpha, init=init)

    def rs_fields(problem, rec, d=None, channel_options=None):
        if rec["alpha"] == 0.3:
            raise FloatingPointError("overflow in the replicon")
        return real_rs(problem, rec, d, channel_options)

    monkeypatch.setattr(StateEvolution, "solve", solve)
    monkeypatch.setattr(stability, "rs_fields", rs_fields)
    out = routes.theory_curve({**common.options(), "alphas": ALPHAS, "rs_stability": True})
    recs = json.loads(out["records"])
    assert out["n_points"] == 3 and out["n_converged"] == 2  # the curve does not fail
    assert recs[0]["rs_at"] == 0.1 and recs[0]["rs_stable"] is True
    for rec, why in ((recs[1], "not computed (solve failed)"),
                     (recs[2], "not computed (FloatingPointError: overflow in the replicon)")):
        assert all(rec[k] is None for k in ("rs_at", "rs_at_error", "rs_switching", "rs_stable"))
        assert rec["rs_message"] == why
    assert recs[2]["converged"] is True  # the record itself is kept


def test_phase_rows_compute_the_stability_once(stub):
    from tiedattention.reproduce.phase import phase_row

    recs = json.loads(phase_row({**common.options(), "alphas": ALPHAS[:2], "rs_stability": True})["records"])
    assert [c[0] for c in stub] == ALPHAS[:2] and [r["rs_at"] for r in recs] == ALPHAS[:2]


# --------------------------------------------------------------------------------------------------
# fig5: cells, tidy data and the mark, from a synthetic store table
# --------------------------------------------------------------------------------------------------
def test_fig5_asks_for_the_stability_of_the_beta2_curve_only():
    for quick in (True, False):
        curves = [c for c in fig5.build(quick, None) if c.route == common.THEORY_CURVE]
        rs = {c.params["beta"]: c.params.get("rs_stability", False) for c in curves}
        assert rs == {0.5: False, 1.0: False, 2.0: True}
        by_beta = {c.params["beta"]: c.params["alphas"] for c in curves}
        assert {0.75, 0.87, 0.95} <= set(by_beta[2.0]) and not {0.75, 0.87, 0.95} & set(by_beta[1.0])


AT_BETA2 = {0.05: 0.55, 0.2: 0.69, 0.5: 0.90, 0.75: 1.43, 0.87: 1.11, 0.95: 1.09, 1.0: 0.78, 4.0: 0.13}
SIM_ALPHAS = (0.05, 1.0)


def _table() -> pd.DataFrame:
    """A store table as run_sweep returns it: fig5's three theory curves (rs fields on beta = 2 only; at
    alpha = 0.2 the check failed: null fields) and a few simulation cells."""
    rows = []
    for b in fig5.BETAS:
        opts = fig5._opts(b)
        recs = []
        for a, at in AT_BETA2.items():
            rec = {"alpha": a, "alpha_bar": 2 * a, "converged": True, "test_error": 0.5 / (1 + a) + b / 10,
                   "mse": 1 / (1 + a), "rank": a / (1 + a), "phase": "regular"}
            if b == 2.0:
                fail = a == 0.2
                rec.update(rs_at=None if fail else at, rs_at_error=None if fail else 0.01,
                           rs_switching=None if fail else 0.01, rs_stable=None if fail else False,
                           rs_message="not computed (ValueError: x)" if fail else "")
            recs.append(rec)
        rows.append({"route": common.THEORY_CURVE, **opts, "records": json.dumps(recs)})
        for a in SIM_ALPHAS:
            rows.append({"route": "simulate", **opts, "alpha": a, "d": 40, "seeds": 2, "converged": 1.0,
                         **{f"{k}_{s}": 0.1 for k in ("test_error", "mse", "rank") for s in ("mean", "sem")}})
    return pd.DataFrame(rows)


def _panel_marks(fig, gid: str, panels: int) -> list:
    """(axes, its lines with ``gid``) for each titled panel of ``fig``, asserting there are ``panels`` of them."""
    axes = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert len(axes) == panels
    return [(ax, [ln for ln in ax.get_lines() if ln.get_gid() == gid]) for ax in axes]


def test_fig5_tidy_carries_the_rs_fields_and_draw_marks_exactly_the_at_unstable_points(tmp_path):
    data = fig5.tidy(_table(), True)
    data.insert(0, "figure", "fig5")
    data["quick"] = True
    data.to_parquet(tmp_path / "fig5.parquet", index=False)  # redraw works from the parquet alone
    data = pd.read_parquet(tmp_path / "fig5.parquet")
    th2 = data[(data["kind"] == "theory") & (data["beta"] == 2.0)]
    assert len(th2) == 3 * len(AT_BETA2) and th2["rs_at"].notna().sum() == 3 * (len(AT_BETA2) - 1)
    assert str(data["rs_stable"].dtype) == "boolean"
    assert data[data["beta"] != 2.0][list(fig5.RS_COLUMNS)].isna().all().all()
    unstable = sorted(a for a, at in AT_BETA2.items() if at > 1)
    # rs_stable is false at every beta = 2 point here (as where the prox switches): the mark follows AT > 1
    assert unstable == [0.75, 0.87, 0.95]
    plt = common.pyplot()
    fig = fig5.draw(data, True)
    try:
        for ax, marks in _panel_marks(fig, "rs_unstable", 3):
            assert len(marks) == 1 and list(marks[0].get_xdata()) == unstable
            dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]
            assert len(dashed) == 1  # 0.5 -> 0.75 -> 0.87 -> 0.95 -> 1.0, green (and the legend's empty proxy)
            assert list(dashed[0].get_xdata()) == [0.5, 0.75, 0.87, 0.95, 1.0] and dashed[0].get_color() == "C2"
        labels = fig.axes[-1].get_legend().get_texts()
        assert [t.get_text() for t in labels].count(fig5.UNSTABLE_LABEL) == 1
    finally:
        plt.close(fig)
    # without AT > 1 anywhere (or without the columns at all) nothing is marked and no dashed line drawn
    for cut in (data.assign(rs_at=0.5), data.drop(columns=list(fig5.RS_COLUMNS))):
        fig = fig5.draw(cut, True)
        try:
            assert not [ln for ax in fig.axes for ln in ax.get_lines()
                        if ln.get_gid() == "rs_unstable" or ln.get_linestyle() == "--"]
        finally:
            plt.close(fig)


@pytest.mark.slow  # 33-37 s on the loaded 2-core machine (2026-12-01): two beta = 2 points and their stability
def test_real_at_at_beta2_crosses_one_between_alpha_05_and_087():
    """theory_curve with rs_stability at fig5's beta = beta0 = 2: AT < 1 at alpha = 0.5, > 1 at 0.87 (stability.md:
    0.902 +- 0.011 and 1.25 +- 0.13; 0.9021 and 1.1058 +- 0.011 measured here, the point's test error 0.3732)."""
    recs = _records({**fig5._opts(2.0), "alphas": [0.5, 0.87], "rs_stability": True})
    lo, hi = recs
    assert lo["converged"] and hi["converged"]
    assert lo["rs_at"] + 3 * lo["rs_at_error"] < 1.0 < hi["rs_at"] - 3 * hi["rs_at_error"]
    assert lo["rs_at"] == pytest.approx(0.902, abs=0.02) and hi["rs_at"] == pytest.approx(1.106, abs=0.05)
    # the prox switches branches at both (a few % of the sequences): rs_stable is false at both
    assert lo["rs_switching"] > 0 and hi["rs_switching"] > 0 and lo["rs_stable"] is False
    assert np.isfinite(lo["test_error"]) and hi["test_error"] == pytest.approx(0.3735, abs=0.002)


# --------------------------------------------------------------------------------------------------
# fig2: theory points whose prox has two local minima (err_branch_share > BRANCH_SWITCH) get open diamonds
# --------------------------------------------------------------------------------------------------
SHARE_1E4 = {0.1: 0.0, 0.2: 2e-4, 0.25: 0.09, 0.5: 0.03, 1.0: None}  # None: a record without the field


def _fig2_table() -> pd.DataFrame:
    from tiedattention.reproduce import fig2

    rows = []
    for lam in fig2.LAMS:
        recs = []
        for a, share in SHARE_1E4.items():
            rec = {"alpha": a, "converged": True, "test_error": 0.3 + a / 10, "train_error": a / 10}
            if lam == 1e-4 and share is not None:
                rec["err_branch_share"] = share
            elif lam != 1e-4:
                rec["err_branch_share"] = 0.0
            recs.append(rec)
        rows.append({"route": common.THEORY_CURVE, **fig2._opts(lam), "records": json.dumps(recs)})
        rows.append({"route": "simulate", **fig2._opts(lam), "alpha": 0.25, "d": 40, "seeds": 2, "converged": 1.0,
                     **{f"{k}_{s}": 0.1 for k in ("test_error", "train_error") for s in ("mean", "sem")}})
    return pd.DataFrame(rows)


def test_fig2_marks_exactly_the_points_whose_prox_switches_branch(tmp_path):
    from tiedattention.reproduce import fig2
    from tiedattention.theory.state_evolution import BRANCH_SWITCH

    data = fig2.tidy(_fig2_table(), True)
    data.insert(0, "figure", "fig2")
    data["quick"] = True
    data.to_parquet(tmp_path / "fig2.parquet", index=False)  # the column round-trips (float, nulls)
    data = pd.read_parquet(tmp_path / "fig2.parquet")
    assert str(data[common.BRANCH_SHARE].dtype) == "float64"
    marked = sorted(a for a, s in SHARE_1E4.items() if s is not None and s > BRANCH_SWITCH)
    assert marked == [0.25, 0.5]
    plt = common.pyplot()
    fig = fig2.draw(data, True)
    try:
        for _, marks in _panel_marks(fig, "rs_switching", 2):
            assert len(marks) == 1 and list(marks[0].get_xdata()) == marked and marks[0].get_color() == "C2"
        labels = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
        assert labels.count(common.SWITCHING_LABEL) == 1
        assert "two local minima" in " ".join(t.get_text() for t in fig.texts)  # the caption says what they mean
    finally:
        plt.close(fig)
    # no share above the threshold, or data without the column (a parquet written before it): nothing marked
    for cut in (data.assign(err_branch_share=BRANCH_SWITCH), data.drop(columns=[common.BRANCH_SHARE])):
        fig = fig2.draw(cut, True)
        try:
            assert not [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "rs_switching"]
            assert common.SWITCHING_LABEL not in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
        finally:
            plt.close(fig)
