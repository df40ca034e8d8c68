"""`theory --out` and `simulate --out`: the learning-curve and simulation figures (reproduce/curves.py).

The parquet beside each figure is read back and compared with the JSON records the same run printed; threshold lines
with thresholds(); the dense SE curve with independent cold solves. Sizes: 3 SE points, d = 20, 30 with 2 seeds
(prox), a 6-point SE curve (SE_POINTS monkeypatched from 40)."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.problem import Problem
from tiedattention.reproduce import curves

THEORY = ["theory", "--alpha", "0.1,0.3,1", "--noise", "0.25"]
VOLATILE = ("seconds", "seconds_per_seed_mean", "seconds_per_seed_std", "seconds_per_seed_sem")


def _records(stdout: str) -> list[dict]:
    return [json.loads(x) for x in stdout.strip().splitlines()]


def _stable(recs: list[dict]) -> list[dict]:
    """The records without their timings (the only fields that change from one run to the next)."""
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in recs]


@pytest.fixture(scope="module")
def theory_run(tmp_path_factory):
    """theory --json without and with --out (the same records), the figure's path and its table."""
    tmp = tmp_path_factory.mktemp("theory")
    plain = CliRunner().invoke(app, [*THEORY, "--json"])
    out = tmp / "curve.png"
    drawn = CliRunner().invoke(app, [*THEORY, "--json", "--out", str(out)])
    assert plain.exit_code == 0 and drawn.exit_code == 0, drawn.output
    return _records(plain.stdout), _records(drawn.stdout), out, pd.read_parquet(tmp / "curve.parquet")


def test_theory_out_keeps_the_json_and_tabulates_every_record(theory_run):
    plain, drawn, out, table = theory_run
    assert _stable(drawn) == _stable(plain) and len(drawn) == 3
    assert out.stat().st_size > 5000 and sorted(p.name for p in out.parent.iterdir()) == ["curve.parquet",
                                                                                         "curve.png"]
    assert tuple(table.columns[:6]) == ("panel", "kind", "series", "x", "y", "y_err")
    th = table[table["kind"] == "theory"]
    assert len(th) == 5 * 3  # five series, every alpha
    for panel, series in (("errors", "test_error"), ("errors", "test_error_clean"), ("errors", "train_error"),
                          ("overlaps", "mse"), ("overlaps", "rank")):
        sub = th[(th["panel"] == panel) & (th["series"] == series)].sort_values("x")
        assert sub["x"].tolist() == [r["alpha"] for r in drawn]
        assert sub["y"].tolist() == [r[series] for r in drawn]  # exactly the printed numbers
        assert sub["alpha_bar"].tolist() == [r["alpha_bar"] for r in drawn]
        assert sub["converged"].tolist() == [True] * 3
    assert (table["noise"] == 0.25).all() and (table["target"] == "mp:0.5").all()


def test_theory_threshold_lines_are_the_lambda_to_zero_thresholds(theory_run):
    """The table's threshold rows and the figure's vertical lines sit at thresholds()'s alpha values of this problem
    (noise 0.25: not the default problem's), labelled in the legend."""
    import matplotlib.pyplot as plt

    from tiedattention.theory.thresholds import thresholds

    table = theory_run[3]
    th = thresholds(Problem.from_options(noise=0.25))
    default = thresholds(Problem.from_options())
    assert th.interpolation_alpha != pytest.approx(default.interpolation_alpha, rel=1e-3)
    rows = table[table["kind"] == "threshold"].set_index("series")["x"]
    assert rows.to_dict() == {"interpolation": th.interpolation_alpha,
                              "perfect_recovery": th.perfect_recovery_factorized_alpha}
    fig = curves.draw_learning_curve(table)
    try:
        ax = fig.axes[0]
        vertical = {ln.get_label(): ln.get_xdata()[0] for ln in ax.get_lines()
                    if len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1]}
        assert sorted(vertical.values()) == sorted(rows.tolist())
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith("interpolation") and f"{th.interpolation_alpha:.4g}" in t for t in legend)
        assert any(t.startswith("perfect recovery") for t in legend)
    finally:
        plt.close(fig)


def test_theory_non_converged_point_left_out_marked_and_counted(theory_run, monkeypatch, tmp_path):
    """A point reported converged: false stays in the table (flagged), is a gap in every line, gets a red x and
    is counted in the title and legend; the command still exits 1 as without --out."""
    import matplotlib.pyplot as plt

    import tiedattention.theory.api as api

    recs = copy.deepcopy(theory_run[0])
    recs[1]["converged"] = False
    monkeypatch.setattr(api, "theory_records", lambda *a, **k: copy.deepcopy(recs))
    out = tmp_path / "bad.svg"
    r = CliRunner().invoke(app, [*THEORY, "--out", str(out)])
    assert r.exit_code == 1 and out.stat().st_size > 5000
    table = pd.read_parquet(tmp_path / "bad.parquet")
    th = table[table["kind"] == "theory"]
    assert (th.loc[~th["converged"].astype(bool), "x"] == recs[1]["alpha"]).all()
    assert (~th["converged"].astype(bool)).sum() == 5  # one alpha, five series
    fig = curves.draw_learning_curve(table)
    try:
        assert "1 of 3 points not converged" in fig._suptitle.get_text()
        ax = fig.axes[0]
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for label in ("test error (noisy labels)", "test error (clean labels)", "train error"):
            y = np.asarray(lines[label].get_ydata(), float)
            assert np.isnan(y[1]) and np.isfinite(y[[0, 2]]).all()
        marks = lines["not converged (1): left out"]
        assert list(marks.get_xdata()) == [recs[1]["alpha"]] and marks.get_color() == "red"
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------------
SIM = ["simulate", "--alpha", "0.5,1", "--d", "20,30", "--seeds", "2", "--solver", "prox", "--n-test", "500",
       "--threads", "1", "--theory", "--json"]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("sim")
    mp = pytest.MonkeyPatch()
    mp.setattr(curves, "SE_POINTS", 6)
    try:
        plain = CliRunner().invoke(app, SIM)
        drawn = CliRunner().invoke(app, [*SIM, "--out", str(tmp / "sim.pdf")])
    finally:
        mp.undo()
    assert plain.exit_code == 0 and drawn.exit_code == 0, drawn.output
    return _records(plain.stdout), _records(drawn.stdout), tmp, pd.read_parquet(tmp / "sim.parquet")


def test_simulate_out_keeps_the_json_and_tabulates_means_sems_and_fits(sim_run):
    plain, drawn, tmp, table = sim_run
    assert _stable(drawn) == _stable(plain) and len(drawn) == 2 * 3
    assert sorted(p.name for p in tmp.iterdir()) == ["sim.parquet", "sim.pdf"]
    for key in ("test_error", "train_error"):
        panel = table[table["panel"] == key]
        for rec in drawn:
            if rec["d"] is None:
                row = panel[(panel["kind"] == "extrapolation") & (panel["x"] == rec["alpha"])]
                assert row["series"].tolist() == [curves.EXTRAPOLATED_SERIES] and row["d"].isna().all()
            else:
                row = panel[(panel["kind"] == "simulation") & (panel["x"] == rec["alpha"]) & (panel["d"] == rec["d"])]
                assert row["series"].tolist() == [f"d={rec['d']}"] and row["seeds"].tolist() == [2]
            assert len(row) == 1
            assert row["y"].iloc[0] == rec[f"{key}_mean"] and row["y_err"].iloc[0] == rec[f"{key}_sem"]
        assert len(panel[panel["kind"] != "theory"]) == len(drawn)


def test_simulate_theory_curve_is_the_state_evolution_on_a_dense_grid(sim_run):
    """The SE curve spans the simulated alphas on a log grid (6 points here) and equals independent cold solves."""
    from tiedattention.theory.api import theory_record

    table = sim_run[3]
    problem = Problem.from_options()
    for key in ("test_error", "train_error"):
        se = table[(table["kind"] == "theory") & (table["panel"] == key)].sort_values("x")
        assert (se["series"] == "SE").all() and se["d"].isna().all() and se["converged"].all()
        x = se["x"].to_numpy(float)
        assert len(x) == 6 and x[0] == 0.5 and x[-1] == 1.0
        np.testing.assert_allclose(np.diff(np.log(x)), math.log(2) / 5, rtol=1e-12)
    se = table[(table["kind"] == "theory")]
    for a in sorted(set(se["x"]))[2:4]:
        ref = theory_record(problem, a)
        for key in ("test_error", "train_error"):
            got = se[(se["panel"] == key) & (se["x"] == a)]["y"].iloc[0]
            assert got == pytest.approx(ref[key], rel=1e-8)


def test_se_curves_one_per_d_where_the_spectrum_depends_on_d(monkeypatch):
    """mp:K: one d -> infinity curve (key None, series SE); a power law: one curve per d (series SE d=D)."""
    import tiedattention.theory.api as api

    calls = []

    def fake(problem, alphas, d=None, progress=None, **_):
        calls.append(d)
        return [{"alpha": a, "alpha_bar": 2 * a, "test_error": 0.1, "train_error": 0.05, "converged": True}
                for a in alphas]

    monkeypatch.setattr(api, "theory_records", fake)
    assert list(curves.se_curves(Problem.from_options(), [0.5, 1], [20, 30], num=3)) == [None]
    got = curves.se_curves(Problem.from_options(target="powerlaw:1.25"), [0.5, 1], [20, 30], num=3)
    assert list(got) == [20, 30] and calls == [None, 20, 30]
    sim = [{"alpha": 0.5, "alpha_bar": 1.0, "d": 20, "seeds": 2, "solver": "prox", "converged": 0.5,
            "converged_all": False, "test_error_mean": 0.2, "test_error_sem": 0.01, "train_error_mean": 0.1,
            "train_error_sem": 0.02},
           {"alpha": 0.5, "alpha_bar": 1.0, "d": None, "dims": [20, 30], "seeds": 2, "converged_all": False,
            "test_error_mean": math.nan, "test_error_sem": math.nan, "train_error_mean": None, "train_error_sem": None}]
    table = curves.simulation_table(sim, Problem.from_options(target="powerlaw:1.25"), got)
    assert table.loc[table["kind"] == "extrapolation", "y"].isna().all()
    se = table[table["kind"] == "theory"]
    assert set(se["series"]) == {"SE d=20", "SE d=30"} and set(se["d"]) == {20, 30}
    assert table.loc[table["kind"] == "simulation", "converged"].tolist() == [False, False]
    import matplotlib.pyplot as plt

    fig = curves.draw_simulation(table)  # a seed that did not converge: a red x over the point, counted
    try:
        title = fig._suptitle.get_text()
        assert "1 of 1 points with a seed that did not converge" in title and "2 values not finite" in title
    finally:
        plt.close(fig)


@pytest.mark.parametrize("command", ["theory", "simulate"])
@pytest.mark.parametrize("out, words", [
    ("missing/curve.png", "does not exist"),
    ("curve.txt", ".png, .pdf or .svg"),
    ("adir", "is a directory"),
    ("adir.png", "is a directory"),
])
def test_bad_out_one_line_nothing_written(tmp_path, monkeypatch, command, out, words):
    """Checked before anything is computed: one line naming --out, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.png").mkdir()
    argv = [command, "--alpha", "0.5", "--out", out]
    if command == "simulate":
        argv += ["--d", "20", "--seeds", "2", "--solver", "prox"]
    r = CliRunner().invoke(app, argv)
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: --out:"), r.output
    assert words in lines[0] and r.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "adir.png"]
    assert list((tmp_path / "adir").iterdir()) == []
