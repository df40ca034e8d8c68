"""Review of the reproduced figures (helper-45): every simulation point has theory to be compared with, and
the drawn figures keep their legends off the data. Fast: the figures are drawn from small tidy tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tiedattention.problem import alpha_from_bar
from tiedattention.reproduce import common, fig6


@pytest.mark.parametrize("quick", [True, False])
def test_fig6_every_simulated_alpha_bar_has_a_theory_point(quick):
    """fig6's theory for T >= 3 is a handful of quasi-Monte Carlo points joined by straight lines: a simulation
    at an alpha_bar between two of them has nothing to be compared with (quick mode drew T = 5 at 0.8 and 5 only,
    so its simulations at 0.3 and 1.5 sat off a chord, or off the curve's end)."""
    p = fig6._p(quick)
    cells = fig6.build(quick, None)
    for T in fig6.TOKENS:
        theory = sorted(a for c in cells if c.route == common.THEORY_CURVE and c.params["tokens"] == T
                        for a in c.params["alphas"])
        sims = sorted(c.params["alpha"] for c in cells if c.route == "simulate" and c.params["tokens"] == T)
        assert sims, T
        assert theory[0] <= min(sims) * (1 + 1e-9) and max(sims) <= theory[-1] * (1 + 1e-9), T
        if len(theory) < 8:  # sparse: the theory must sit at the simulated alphas themselves
            for a in sims:
                assert np.isclose(theory, a, rtol=1e-9).any(), (T, a, theory)
        # and the simulated alphas are the alpha_bar grid of the figure
        np.testing.assert_allclose(sims, sorted(alpha_from_bar(ab, T) for ab in p["sim_abars"]), rtol=1e-9)


# --------------------------------------------------------------------------------------------------
# drawn from the gallery's own data (docs/gallery/<fig>.parquet, written by `reproduce <fig> --quick`)
# --------------------------------------------------------------------------------------------------
GALLERY = Path(__file__).resolve().parents[1] / "docs" / "gallery"
DRAWN = sorted(p.stem for p in GALLERY.glob("fig*.parquet"))


def _data_vertices(ax):
    """(line, display coordinates) of every data-space line of ``ax`` drawn in the foreground: curves, markers
    and error bars; thin context lines (alpha < 0.5, e.g. fig3's fixed-lambda curves) and guides in axes
    coordinates (axvline) are left out."""
    out = []
    for ln in ax.get_lines():
        if ln.get_transform() != ax.transData or (ln.get_alpha() is not None and ln.get_alpha() < 0.5):
            continue
        xy = np.asarray(ln.get_xydata(), float)
        xy = xy[np.isfinite(xy).all(axis=1)] if xy.size else xy
        if len(xy):
            pts = ax.transData.transform(xy)
            out.append((ln, pts[np.isfinite(pts).all(axis=1)]))
    return out


def test_the_gallery_has_the_data_of_every_figure():
    import pandas as pd

    from tiedattention import reproduce as rp

    assert DRAWN == sorted(rp.FIGURES)  # each figure's plotted data sits next to its PNG
    for name in DRAWN:
        assert (GALLERY / f"{name}.png").exists(), name
        data = pd.read_parquet(GALLERY / f"{name}.parquet")
        assert bool(data["quick"].all()) and set(data["figure"]) == {name}
        assert {"theory", "simulation"} <= set(data["kind"]), name
        sims = data[(data["kind"] == "simulation") & (data["series"] != "eigenvalues")]  # fig1's raw eigenvalues
        assert len(sims) and sims["y"].notna().all() and (sims["y_err"] >= 0).all(), name
        assert (sims["d"] >= 8).all() and (sims["seeds"] >= 1).all(), name  # at which d, over how many seeds
        assert sims["converged_fraction"].between(0, 1).all(), name


@pytest.mark.parametrize("name", DRAWN)
def test_no_legend_covers_the_data(name):
    """Redraw each figure from its gallery data: no legend box may hide a point of a curve, a marker or an error
    bar (fig8 (a)'s legend in the lower left covered the clean-label curve, fig10 (b)'s covered E_over's curve)."""
    import pandas as pd

    from tiedattention.reproduce import figure_module

    plt = common.pyplot()
    fig = figure_module(name).draw(pd.read_parquet(GALLERY / f"{name}.parquet"), True)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        covered = []
        for i, ax in enumerate(fig.axes):
            legend = ax.get_legend()
            if legend is None:
                continue
            box = legend.get_window_extent(renderer)
            pad = 4.0 * fig.dpi / 72  # half a marker: a point at the box's edge is half hidden
            box = type(box).from_extents(box.x0 - pad, box.y0 - pad, box.x1 + pad, box.y1 + pad)
            for ln, pts in _data_vertices(ax):
                inside = ((pts[:, 0] > box.x0) & (pts[:, 0] < box.x1) & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1))
                if inside.any():
                    covered.append(f"axes {i}: {int(inside.sum())} points of {ln.get_label()!r}")
        assert not covered, covered
    finally:
        plt.close(fig)


def test_the_resume_hint_repeats_workers_and_scheduler(monkeypatch, tmp_path):
    """An interrupted `reproduce` prints the command to run again; it must be the same command: a run on a dask
    cluster resumed with the printed line ran on the local machine (--scheduler was dropped), --workers too."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from tiedattention import reproduce as rp
    from tiedattention.cli import app
    from tiedattention.sweep import SweepInterrupted

    def interrupted(*args, **kwargs):
        raise SweepInterrupted(SimpleNamespace(skipped=1, computed=2, total=9, store=SimpleNamespace(root="S")))

    monkeypatch.setattr(rp, "reproduce", interrupted)
    out = tmp_path / "my figs"
    for extra, expect in ((["--workers", "3"], "--workers 3"),
                          (["--scheduler", "tcp://head:8786"], "--scheduler tcp://head:8786")):
        res = CliRunner().invoke(app, ["reproduce", "fig8", "--quick", "--out", str(out), *extra])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 130 and len(lines) == 1, res.output
        assert "3 of 9 cells" in lines[0] and f"--out '{out}'" in lines[0] and lines[0].endswith(expect + ")")
