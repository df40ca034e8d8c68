"""`tiedattention phase`: the theory phase diagram over alpha and one more parameter (reproduce/phase.py).

The grids are tiny (3 alpha x 3 lambda, 2 x 2 in the CLI test) at settings where each SE point takes ~0.2 s; rows
are computed once per module into a store that the resume tests reuse."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tiedattention.cli import app
from tiedattention.problem import Problem
from tiedattention.reproduce.phase import (
    draw_phase,
    parse_over,
    phase_diagram,
    row_positions,
    train_zero_alpha,
)

ALPHAS = [0.5, 1.0, 2.0]
LAMS = [0.01, 0.1, 1.0]


@pytest.fixture(scope="module")
def lam_grid(tmp_path_factory):
    store = tmp_path_factory.mktemp("phase") / "store"
    df = phase_diagram(Problem.from_options(), ALPHAS, "lam", LAMS, store=store, workers=2, progress=False)
    return df, store


def _grid(df: pd.DataFrame, col: str) -> np.ndarray:
    """(lambda, alpha) array of a column."""
    return df.pivot(index="value", columns="alpha", values=col).loc[LAMS, ALPHAS].to_numpy(float)


def test_grid_shape_and_summary(lam_grid):
    df, store = lam_grid
    s = df.attrs["summary"]
    assert s["grid"] == [3, 3] and s["points"] == 9 and s["converged"] == 9 and s["not_converged"] == 0
    assert s["cells"] == 3 and s["computed"] == 3 and s["skipped"] == 0
    assert len(list((store / "cells").glob("*.parquet"))) == 3  # one cell per row value
    assert sorted(df["value"].unique()) == LAMS and (df["lam"] == df["value"]).all() and (df["over"] == "lam").all()


def test_warm_rows_equal_cold_points(lam_grid):
    """Two routes to the same fixed point: every point of the warm-started rows against an independent cold solve
    of theory_record at that row's problem."""
    from tiedattention.theory.api import theory_record

    df, _ = lam_grid
    for r in df.itertuples():
        cold = theory_record(Problem.from_options(lam=r.value), r.alpha)
        assert cold["converged"]
        for k in ("test_error", "train_error", "mse"):
            assert getattr(r, k) == pytest.approx(cold[k], rel=1e-7, abs=0.0), (r.value, r.alpha, k)


def test_physics_along_lambda_and_alpha(lam_grid):
    """At fixed alpha a larger weight decay fits the training set worse (train error up) with a lower-rank minimiser
    (rank fraction down); at fixed lambda the test error falls with alpha on this regular stretch."""
    df, _ = lam_grid
    train, rank, test = _grid(df, "train_error"), _grid(df, "rank"), _grid(df, "test_error")
    assert (np.diff(train, axis=0) > 0).all(), train
    assert (np.diff(rank, axis=0) <= 0).all(), rank
    assert (np.diff(test, axis=1) < 0).all(), test
    assert ((rank > 0) & (rank < 1)).all()


def test_resume_computes_only_missing_rows(lam_grid):
    df, store = lam_grid
    again = phase_diagram(Problem.from_options(), ALPHAS, "lam", LAMS, store=store, progress=False)
    assert again.attrs["summary"]["computed"] == 0 and again.attrs["summary"]["skipped"] == 3
    pd.testing.assert_frame_equal(again[["value", "alpha", "test_error", "train_error"]],
                                  df[["value", "alpha", "test_error", "train_error"]])
    more = phase_diagram(Problem.from_options(), ALPHAS, "lam", [*LAMS, 0.3], store=store, workers=1, progress=False)
    s = more.attrs["summary"]
    assert s["computed"] == 1 and s["skipped"] == 3 and s["grid"] == [4, 3]
    assert len(list((store / "cells").glob("*.parquet"))) == 4
    # the new row sits between its neighbours in train error (monotone in lambda at each alpha)
    train = more.pivot(index="value", columns="alpha", values="train_error").loc[[0.1, 0.3, 1.0]].to_numpy()
    assert (np.diff(train, axis=0) > 0).all()


def test_train_zero_alpha_is_the_last_upward_crossing():
    a = [0.1, 0.2, 0.4, 0.8]
    # crossing of 1e-4 halfway between 0.2 (0) and 0.4 (2e-4) in log alpha
    assert train_zero_alpha(a, [0.0, 0.0, 2e-4, 1e-3], 1e-4) == pytest.approx(math.sqrt(0.2 * 0.4), rel=1e-12)
    # above the level at small alpha (a finite-lambda plateau), below, then above for good: the last crossing counts
    assert train_zero_alpha(a, [3e-4, 5e-5, 1e-4, 2e-3], 1e-4) == pytest.approx(0.4, rel=1e-12)
    assert math.isnan(train_zero_alpha(a, [1e-2, 1e-2, 2e-2, 3e-2], 1e-4))  # never zero in the grid
    assert math.isnan(train_zero_alpha(a, [0.0, 0.0, 0.0, 0.0], 1e-4))  # never leaves zero in the grid
    assert train_zero_alpha(a, [0.0, float("nan"), 2e-4, 1e-3], 1e-4) == pytest.approx(math.sqrt(0.1 * 0.4))


def test_over_values_parsed_and_validated():
    p = Problem.from_options()
    assert parse_over("lam=0,0.1,0.01,0.1", p) == ("lam", [0.0, 0.01, 0.1])  # lambda = 0 allowed, sorted, unique
    name, values = parse_over("lam=1e-4:1:5", p)
    assert name == "lam" and values == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1, 1.0], rel=1e-12)
    assert parse_over("tokens=2:8:3", p) == ("tokens", [2, 4, 8])  # geomspace(2, 8, 3), integers
    assert parse_over("tokens=2:5:6", p) == ("tokens", [2, 3, 4, 5])  # a range is rounded, duplicates dropped
    assert parse_over("noise-out=0,0.1", p) == ("noise_out", [0.0, 0.1])


def test_zero_row_is_drawn_one_step_below_with_tick_0(lam_grid):
    pos, log, zero_at = row_positions([0.0, 0.01, 0.1])
    assert log and zero_at == pytest.approx(0.001) and pos == pytest.approx([0.001, 0.01, 0.1])
    df = lam_grid[0].copy()
    df.loc[df["value"] == 0.01, "value"] = 0.0
    fig = draw_phase(df, "train_error")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "0" and ax.get_yscale() == "log"
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_cli_over_noise_json_figure_parquet_and_thresholds(tmp_path):
    """--over noise: JSON Lines = grid + summary, figure and parquet written, and the overlaid lambda -> 0+
    interpolation threshold of each row is thresholds() at that row's noise (not the base problem's)."""
    from tiedattention.theory.thresholds import thresholds

    out = tmp_path / "n.png"
    args = ["phase", "--alpha", "1,2", "--over", "noise=0.25,1", "--lam", "0.1", "--out", str(out), "--json",
            "--workers", "2", "--no-progress"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert len(lines) == 2 * 2 + 1
    recs, summary = lines[:-1], lines[-1]
    assert summary["summary"] and summary["grid"] == [2, 2] and summary["converged"] == 4
    assert summary["not_converged"] == 0 and summary["computed"] == 2 and summary["quantity"] == "test_error"
    expected = {v: thresholds(Problem.from_options(noise=v, lam=0.1)).interpolation_alpha for v in (0.25, 1.0)}
    assert expected[0.25] != pytest.approx(expected[1.0], rel=1e-3)
    for rec in recs:
        assert rec["noise"] == rec["value"] and rec["over"] == "noise"
        assert rec["interpolation_alpha"] == pytest.approx(expected[rec["value"]], rel=1e-12)
    assert out.stat().st_size > 5000
    table = pd.read_parquet(tmp_path / "n.parquet")
    assert len(table) == 4 and {"alpha", "value", "test_error", "interpolation_alpha"} <= set(table.columns)
    assert (tmp_path / "n.store" / "cells").is_dir()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and json.loads(again.stdout.strip().splitlines()[-1])["computed"] == 0


def test_not_converged_points_masked_counted_and_warned(lam_grid, monkeypatch, tmp_path):
    """A point that did not converge is masked in the map, counted in the summary and named on stderr."""
    import matplotlib.pyplot as plt

    import tiedattention.reproduce.phase as phase_mod

    df = lam_grid[0].copy()
    df.attrs = {"summary": {**lam_grid[0].attrs["summary"], "converged": 8, "not_converged": 1}}
    df.loc[(df["value"] == 0.1) & (df["alpha"] == 1.0), "converged"] = False
    fig = draw_phase(df, "test_error")
    mesh = fig.axes[0].collections[0].get_array()
    assert np.ma.getmaskarray(mesh).sum() == 1
    plt.close(fig)
    monkeypatch.setattr(phase_mod, "phase_diagram", lambda *a, **k: df)
    r = CliRunner().invoke(app, ["phase", "--alpha", "0.5,1,2", "--over", "lam=0.01,0.1,1", "--store",
                                 str(tmp_path / "s"), "--json"])
    assert r.exit_code == 0, r.output
    warn = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
    assert len(warn) == 1 and "1 of 9 points did not converge" in warn[0] and "lam=0.1" in warn[0]
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert lines[-1]["not_converged"] == 1 and sum(not x["converged"] for x in lines[:-1]) == 1


@pytest.mark.parametrize("args, name, words", [
    (["--over", "temperature=1,2"], "--over", "lam, noise"),
    (["--over", "lam=-1,0.1"], "--over", "lam"),
    (["--over", "tokens=2.5"], "--over", "tokens"),
    (["--over", "lam"], "--over", "NAME=VALUES"),
    (["--quantity", "accuracy"], "--quantity", "test_error"),
    (["--out", "/nonexistent/dir/p.png"], "--out", "does not exist"),
    (["--out", "p.txt"], "--out", ".png"),
    ([], "--store", "--out"),
    (["--alpha", "0,1"], "--alpha", ""),
])
def test_cli_bad_input_one_line_nothing_written(tmp_path, monkeypatch, args, name, words):
    monkeypatch.chdir(tmp_path)
    base = {"--alpha": "1,2", "--over": "lam=0.1,1"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    argv = ["phase", *[x for kv in base.items() for x in kv]]
    if "--out" not in base and args:
        argv += ["--store", "s"]
    r = CliRunner().invoke(app, argv)
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {name}:"), r.output
    assert words in lines[0] and r.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_rs_stability_fields_and_hatching(tmp_path):
    """--rs-stability: every converged point carries rs_stable; the figure draws (hatching only where unstable)."""
    df = phase_diagram(Problem.from_options(), [1.0, 2.0], "lam", [0.1], store=tmp_path / "s", rs_stability=True,
                       workers=1, progress=False)
    assert df["rs_stable"].notna().all() and df["rs_at"].notna().all()
    fig = draw_phase(df, "rs_at")
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.slow
def test_lambda_zero_rows_leave_zero_at_the_noise_threshold(tmp_path):
    """At lambda = 0 the train error of each noise row is exactly 0 below thresholds(...).interpolation_alpha at that
    noise and positive above it (two routes: the SE rows on a grid around the threshold, the lambda -> 0+ closed
    route of thresholds), so the row's train_zero_alpha lies in the grid interval that holds the threshold."""
    alphas = [0.1, 0.125, 0.19, 0.24]
    df = phase_diagram(Problem.from_options(lam=0.0), alphas, "noise", [0.25, 1.0], store=tmp_path / "s", workers=2,
                       progress=False)
    assert df["converged"].all()
    for noise, g in df.groupby("value"):
        th = g["interpolation_alpha"].iloc[0]
        assert 0.125 < th < 0.19, (noise, th)
        below, above = g[g["alpha"] < th], g[g["alpha"] > th]
        assert (below["train_error"] == 0).all() and (below["phase"] == "interpolating").all()
        assert (above["train_error"] > 1e-4).all()
        assert 0.125 < g["train_zero_alpha"].iloc[0] < 0.19
