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
    assert list(rp.FIGURES) == ["fig1", "fig2", "fig3", "fig4", "fig5", "fig6"]
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
