"""`tiedattention reproduce`: the figure registry, a shrunken fig1 end to end (PNG, PDF, Parquet), resume
without recomputation, and one clear line for a bad figure name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from typer.testing import CliRunner  # noqa: E402

from tiedattention import reproduce as rp  # noqa: E402
from tiedattention.cli import app  # noqa: E402
from tiedattention.reproduce import common, fig1  # noqa: E402
from tiedattention.sweep import Store  # noqa: E402

runner = CliRunner()


def test_registry_lists_the_figures():
    assert list(rp.FIGURES) == [f"fig{i}" for i in range(1, 11)]
    for name in rp.FIGURES:
        mod = rp.figure_module(name)
        for attr in ("TITLE", "build", "tidy", "draw"):
            assert hasattr(mod, attr), (name, attr)
        # quick and full builds are valid cell lists with distinct keys
        for quick in (True, False):
            cells = mod.build(quick, None)
            assert cells and len({c.key for c in cells}) == len(cells)


def test_quick_is_smaller_than_full():
    for name in rp.FIGURES:
        mod = rp.figure_module(name)
        sims = {q: [c for c in mod.build(q, None) if c.route == "simulate"] for q in (True, False)}
        if sims[False]:
            assert max(c.params["d"] for c in sims[True]) < max(c.params["d"] for c in sims[False]) == 100
            assert max(c.params["seeds"] for c in sims[False]) == 8


@pytest.fixture
def tiny_fig1(monkeypatch):
    tiny = {"alphas": [0.5, 1.0], "sim_alphas": [0.5], "rank_alphas": [0.5], "rank_theory": [1.0],
            "insets": [0.5], "d": 8, "seeds": 1}
    monkeypatch.setitem(fig1.PARAMS, "quick", tiny)
    return tiny


def test_tiny_fig1_writes_png_pdf_parquet_and_resumes(tiny_fig1, tmp_path):
    out = tmp_path / "figs"
    res = rp.reproduce("fig1", out, quick=True, workers=1, progress=False)
    assert [p.name for p in res.paths] == ["fig1.png", "fig1.pdf", "fig1.parquet"]
    assert res.computed == res.cells == 6  # 3 theory curves, 3 simulations
    png, pdf = (out / "fig1.png").read_bytes(), (out / "fig1.pdf").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and pdf[:5] == b"%PDF-"
    data = pd.read_parquet(out / "fig1.parquet")
    for col in ("figure", "panel", "kind", "series", "x", "y", "y_err", "quick"):
        assert col in data.columns
    assert set(data["kind"]) == {"theory", "simulation"}
    assert {"error", "rank", "spectrum:0.5"} <= set(data["panel"])
    sim = data[(data["panel"] == "error") & (data["kind"] == "simulation")]
    assert len(sim) == 2 and np.all(np.isfinite(sim["y"])) and np.all(sim["d"] == 8)
    # every simulation row says at which d, over how many seeds, and whether they converged (the inset's atom too)
    every = data[data["kind"] == "simulation"]
    assert (every["d"] == 8).all() and (every["seeds"] == 1).all(), every[every["d"].isna()]
    atoms = every[every["series"] == "atom"]
    assert len(atoms) == 1 and atoms["converged_fraction"].between(0, 1).all()
    th = data[(data["panel"] == "error") & (data["kind"] == "theory") & (data["series"] == "test_error")]
    assert sorted(th["x"]) == [0.5, 1.0]
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp")]

    # interrupted run: a cell that never reached the store is computed again, and only that one
    store = Store(out / "store")
    key = next(iter(sorted(store.done_keys())))
    store.path_for(key).unlink()
    again = rp.reproduce("fig1", out, quick=True, workers=1, progress=False)
    assert again.computed == 1 and key in store.done_keys()
    third = rp.reproduce("fig1", out, quick=True, workers=1, progress=False)
    assert third.computed == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out / "fig1.parquet"), data)


def test_cells_are_stable_and_theory_curves_are_single_cells():
    a, b = fig1.build(True, None), fig1.build(True, None)
    assert [c.key for c in a] == [c.key for c in b]
    curves = [c for c in a if c.route == common.THEORY_CURVE]
    assert len(curves) == len(fig1.KAPPA0S)
    assert all(c.params["alphas"] == sorted(c.params["alphas"]) for c in curves)
    chunked = common.theory_curve_cells(common.options(), [0.1, 0.2, 0.3, 0.4, 0.5], chunk=2)
    assert [c.params["alphas"] for c in chunked] == [[0.1, 0.2], [0.3, 0.4], [0.5]]


def test_bad_name_one_line_exit_2(tmp_path):
    res = runner.invoke(app, ["reproduce", "fig99", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2
    lines = [x for x in res.output.strip().splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith("error: --name:") and "fig99" in lines[0]
    assert not (tmp_path / "x").exists()
    res = runner.invoke(app, ["reproduce", "fig1", "--out", str(tmp_path / "x"), "--workers", "0"])
    assert res.exit_code == 2 and "--workers" in res.output


def test_out_that_is_a_file_is_one_line_before_computing(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    for out, fragment in ((afile, "is a file, not a directory"), (afile / "sub", "is a file")):
        res = runner.invoke(app, ["reproduce", "fig8", "--quick", "--out", str(out), "--no-progress"])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert lines[0].startswith("error: --out: ") and fragment in lines[0]
    assert afile.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_help_names_each_figures_solver():
    """The help says which solver trains each figure's simulations; check it against the figures' cells."""
    import re

    import typer

    text = " ".join(typer.main.get_command(app).commands["reproduce"].help.split())
    found = re.search(r"L-BFGS in (.*?), with the proximal solver on S in (.*?)\.", text)
    assert found, text

    def names(group: str) -> set[str]:
        out = set()
        for part in re.split(r", | and ", group):
            lo, _, hi = part.partition("-")
            out |= {f"fig{i}" for i in range(int(lo[3:]), int((hi or lo)[3:]) + 1)}
        return out

    lbfgs, prox = names(found.group(1)), names(found.group(2))
    assert lbfgs | prox == set(rp.FIGURES) and not lbfgs & prox
    for name in rp.FIGURES:  # the simulations of fig3 and fig9 are built in a second stage: checked where present
        solvers = {c.params["solver"] for c in rp.figure_module(name).build(True, None) if "solver" in c.params}
        assert solvers <= {"lbfgs" if name in lbfgs else "prox"}, (name, solvers)


def test_theory_curve_records_a_failing_point_instead_of_failing(monkeypatch):
    from tiedattention.reproduce import routes
    from tiedattention.theory.state_evolution import StateEvolution

    real = StateEvolution.solve

    def solve(self, alpha, init=None):
        if alpha == 0.2:
            raise ValueError("boom")
        return real(self, alpha, init=init)

    monkeypatch.setattr(StateEvolution, "solve", solve)
    params = {**common.options(), "alphas": [0.1, 0.2, 0.3]}
    out = routes.theory_curve(params)
    import json

    recs = json.loads(out["records"])
    assert [r["alpha"] for r in recs] == [0.1, 0.2, 0.3]
    assert [r["converged"] for r in recs] == [True, False, True]
    assert "boom" in recs[1]["message"] and out["n_converged"] == 2


# --------------------------------------------------------------------------------------------------
# the power-law figures (fig7-fig10), shrunk: tiny d, one or two seeds
# --------------------------------------------------------------------------------------------------
@pytest.fixture
def tiny_powerlaw(monkeypatch):
    from tiedattention.reproduce import fig7, fig10

    monkeypatch.setitem(fig7.PARAMS, "quick", {"alphas": [0.3, 1.0], "sim_alphas": [1.0], "d": 16, "seeds": 2,
                                               "lam": 0.05, "n_test": 500})
    monkeypatch.setitem(fig10.PARAMS, "quick", {"alphas": [1.0]})


@pytest.mark.slow  # ~170 s on the loaded 2-core machine: the finite-d SE with spectra at tiny d is not cheap
def test_tiny_fig7_fig8_fig10_share_cells_and_count_detached_outliers(tiny_powerlaw, tmp_path):
    from tiedattention.reproduce import powerlaw as pl

    out = tmp_path / "figs"
    r7 = rp.reproduce("fig7", out, quick=True, workers=1, progress=False)
    assert r7.computed == r7.cells == 2  # the SE curve with its spectra, one simulation cell
    r8 = rp.reproduce("fig8", out, quick=True, workers=1, progress=False)
    assert r8.computed == 0  # the same cells
    r10 = rp.reproduce("fig10", out, quick=True, workers=1, progress=False)
    assert r10.computed == 1  # only the decomposition curve is new
    d7 = pd.read_parquet(out / "fig7.parquet")
    assert {"eigenvalues", "overlap", "kstar"} <= set(d7["panel"])
    for data in (d7, pd.read_parquet(out / "fig10.parquet")):  # the share of seeds that converged, on every point
        sims = data[data["kind"] == "simulation"]
        assert len(sims) and sims["converged_fraction"].between(0, 1).all()
    sim = d7[(d7["panel"] == "kstar") & (d7["kind"] == "simulation")]
    assert len(sim) == 1 and sim["d"].iloc[0] == 16
    # the count is the number of eigenvalues above the SE bulk edge + margin, between 0 and d
    assert 0 <= sim["y"].iloc[0] <= 16
    ov = d7[(d7["panel"] == "overlap") & (d7["kind"] == "simulation")]["y"]
    assert ov.between(0, 1).all()
    d8 = pd.read_parquet(out / "fig8.parquet")
    exc = d8[(d8["panel"] == "excess") & (d8["kind"] == "simulation")]
    assert len(exc) == 1 and np.isfinite(exc["y"]).all() and (exc["y_err"] > 0).all()
    d10 = pd.read_parquet(out / "fig10.parquet")
    th = d10[(d10["panel"] == "error") & (d10["kind"] == "theory")]
    parts = th[th["series"].isin(["over", "under", "approx", "mismatch"])].groupby("x")["y"].sum()
    total = th[th["series"] == "excess"].set_index("x")["y"]
    np.testing.assert_allclose(parts.loc[total.index], total, rtol=1e-6, atol=1e-9)  # the parts add up exactly
    assert (d10[d10["kind"] == "simulation"]["y"].dropna() >= -1e-9).all()
    # detached-eigenvalue rule: above edge + margin, margin = 4 s delta d^(-2/3)
    assert pl.count_detached([3.0, 1.2, 1.0, 0.0], 1.0, 0.1) == 2
    assert pl.edge_margin(1.0, 1.0, 8) == pytest.approx(1.0)


def test_detachment_alphas_and_local_slope():
    from tiedattention.reproduce import powerlaw as pl

    def rec(a, flags):
        return {"alpha": a, "converged": True, "modes": [{"recovered": f} for f in flags]}

    recs = [rec(0.1, [True, False]), rec(0.4, [True, False]), rec(1.6, [True, True])]
    marks = pl.detachment_alphas(recs, 2)
    assert marks[1] == 0.1 and marks[2] == pytest.approx(0.8)
    x, s = pl.local_slope([1.0, 10.0, 100.0], [1.0, 0.1, 0.001])
    np.testing.assert_allclose(s, [1.0, 2.0])
    np.testing.assert_allclose(x, [10**0.5, 10**1.5])


@pytest.mark.slow  # the finite-d SE with the optimal-lambda search, even at tiny d
def test_tiny_fig9_two_stage_simulations_at_the_optimal_lambda(monkeypatch, tmp_path):
    from tiedattention.reproduce import fig9

    monkeypatch.setitem(fig9.PARAMS, "quick", {"nus": [100.0, 300.0, 1000.0], "ds": [20], "fd_nus": [20.0, 40.0],
                                               "sim_nus": [20.0, 40.0, 80.0], "d": 20, "seeds": 2, "n_test": 500,
                                               "xatol": 0.3})
    out = tmp_path / "figs"
    res = rp.reproduce("fig9", out, quick=True, workers=1, progress=False)
    assert res.cells == 2 + 3  # two SE curves, then one simulation per simulated n/d (second stage)
    data = pd.read_parquet(out / "fig9.parquet")
    sim = data[data["kind"] == "simulation"]
    assert sorted(sim["x"]) == [20.0, 40.0, 80.0]
    curve = data[(data["kind"] == "theory") & (data["series"] == "d=20") & (data["panel"] == "excess")]
    # the simulations ran at the SE's optimal lambda of their n/d (rounded to 4 digits)
    for _, row in sim.iterrows():
        lam = curve[np.isclose(curve["x"], row["x"])]["lam"].iloc[0]
        assert row["lam"] == pytest.approx(lam, rel=1e-3)
    lim = data[(data["series"] == "d=inf") & (data["panel"] == "excess")]
    assert len(lim) == 3 and (np.diff(lim.sort_values("x")["y"]) < 0).all()  # the excess falls with n
    assert lim["predicted_exponent"].iloc[0] == pytest.approx(0.6)
