"""Legibility of the reproduced figures in print (helper-50): a figure set at a paper's text width (7 in) is
scaled by 7 / (its width in inches); every text it draws must still be at least 6 pt after that scaling. The
figures used to be 11-14 in wide with 6-9.5 pt fonts: 3.0-4.5 pt on paper. Also: no text reaches past the
figure's edges (captions wrap to its width) and no two texts overlap. Fast: each figure is redrawn once from its
gallery data (docs/gallery/<fig>.parquet), nothing is solved."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiedattention.reproduce import common

GALLERY = Path(__file__).resolve().parents[1] / "docs" / "gallery"
DRAWN = sorted(p.stem for p in GALLERY.glob("fig*.parquet"))

TEXT_WIDTH_IN = 7.0  # a paper's text width
MIN_PRINTED_PT = 6.0  # the smallest font a reader can be asked to read in print
PAD_IN = 0.1  # savefig's pad_inches around the tight bounding box (matplotlib's default)


def _drawn_texts(fig):
    """Every Text artist that drawing ``fig`` puts on the canvas (visible, non-empty; tick labels only of the
    ticks inside the view, which is what matplotlib draws): Text.draw is watched while the figure is drawn."""
    from unittest import mock

    from matplotlib.text import Text

    drawn = []
    original = Text.draw

    def draw(self, renderer):
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)
        return original(self, renderer)

    with mock.patch.object(Text, "draw", draw):
        fig.canvas.draw()
    return list(dict.fromkeys(drawn))


@pytest.fixture(scope="module", params=DRAWN)
def drawn(request):
    """(name, figure, its drawn texts) of each gallery figure, redrawn once from its parquet for all checks."""
    import pandas as pd

    from tiedattention.reproduce import figure_module

    plt = common.pyplot()
    name = request.param
    fig = figure_module(name).draw(pd.read_parquet(GALLERY / f"{name}.parquet"), True)
    try:
        yield name, fig, _drawn_texts(fig)
    finally:
        plt.close(fig)


def _saved_width_in(fig) -> float:
    """Width in inches of the image ``reproduce`` writes (savefig with bbox_inches="tight")."""
    return fig.get_tightbbox(fig.canvas.get_renderer()).width + 2 * PAD_IN


def test_the_drawn_texts_are_what_a_figure_shows():
    """The record behind the criterion: a title, tick labels, a legend entry, a figure text and a suptitle are
    found with their own sizes; hidden ones (an invisible axes, an invisible text, ticks out of view) are not."""
    plt = common.pyplot()
    fig, (ax, hidden) = plt.subplots(1, 2, figsize=(4, 3))
    try:
        ax.plot([1, 2], [3, 4], label="curve")
        ax.set_title("title", fontsize=11)
        ax.legend(fontsize=5)
        ax.text(0.5, 0.5, "gone", visible=False)
        fig.text(0, 0, "caption", fontsize=4)
        fig.suptitle("top", fontsize=12)
        hidden.set_title("not drawn", fontsize=1)
        hidden.set_visible(False)
        ax.set_xlim(1.2, 1.8)
        drawn = _drawn_texts(fig)
        sizes = {t.get_text(): t.get_fontsize() for t in drawn}
        assert sizes["title"] == 11 and sizes["curve"] == 5 and sizes["caption"] == 4 and sizes["top"] == 12
        assert "gone" not in sizes and "not drawn" not in sizes
        ticks = [float(t.get_text()) for t in drawn if t in {tick.label1 for tick in ax.xaxis.majorTicks}]
        assert ticks and all(1.2 <= t <= 1.8 for t in ticks), ticks  # the ticks in view only
    finally:
        plt.close(fig)


def test_every_text_is_legible_at_a_papers_text_width(drawn):
    name, fig, texts = drawn
    width = max(fig.get_figwidth(), _saved_width_in(fig))
    scale = min(1.0, TEXT_WIDTH_IN / width)
    small = sorted({(round(t.get_fontsize() * scale, 2), t.get_text()[:40]) for t in texts
                    if t.get_fontsize() * scale < MIN_PRINTED_PT})
    assert not small, f"{name}: {width:.2f} in wide, x{scale:.2f} at {TEXT_WIDTH_IN} in: {small[:8]}"


def test_nothing_sticks_out_of_the_figure(drawn):
    """Captions wrap to the figure's width and no label, legend or title reaches past its edges: the saved image
    (bbox_inches="tight") is then no wider than the figure, so the width the fonts were sized for is the width
    a reader scales."""
    name, fig, texts = drawn
    renderer = fig.canvas.get_renderer()
    right = fig.bbox.x1
    out = [(t.get_text()[:40], round((t.get_window_extent(renderer).x1 - right) / fig.dpi, 2))
           for t in texts if t.get_window_extent(renderer).x1 > right + 1 or t.get_window_extent(renderer).x0 < -1]
    assert not out, f"{name}: texts past the figure's edge (inches past the right edge): {out}"


def _collisions(fig, texts):
    """Pairs of drawn texts whose boxes overlap by more than half a point both ways (boxes that merely touch
    are not a collision)."""
    renderer = fig.canvas.get_renderer()
    boxes = [(t, t.get_window_extent(renderer)) for t in texts]
    shrink = 0.5 * fig.dpi / 72
    hits = []
    for i, (t, a) in enumerate(boxes):
        for u, b in boxes[i + 1:]:
            if min(a.x1, b.x1) - max(a.x0, b.x0) > shrink and min(a.y1, b.y1) - max(a.y0, b.y0) > shrink:
                hits.append((t.get_text()[:30], u.get_text()[:30]))
    return hits


def test_a_collision_is_found():
    """Two panel titles that run into each other are a collision, the same titles short enough are not."""
    plt = common.pyplot()
    for title, collide in (("(a) a title far too long for its own narrow panel", True), ("(a) short", False)):
        fig, (a, b) = plt.subplots(1, 2, figsize=(3, 2))
        try:
            a.set_title(title, loc="left")
            b.set_title("(b) next", loc="left")
            assert bool(_collisions(fig, _drawn_texts(fig))) == collide, title
        finally:
            plt.close(fig)


def test_no_text_runs_into_another(drawn):
    """No two drawn texts overlap: tick labels not crowded, neighbouring panels' titles and axis labels apart,
    fig8's mode numbers of close detachments readable, legends off the titles."""
    name, fig, texts = drawn
    hits = _collisions(fig, texts)
    assert not hits, f"{name}: overlapping texts: {hits[:8]}"


def test_redraw_writes_the_gallery_png_at_the_papers_width(tmp_path):
    """reproduce.redraw draws a figure from its parquet alone (how the gallery is redrawn): the PNG is at most
    7 in plus savefig's padding wide at common.DPI (the tight box crops the figure's own margins a little), the
    PDF is written beside it; a table that is not a figure's plotted data is a ParameterError naming it."""
    import pandas as pd
    from PIL import Image

    from tiedattention.errors import ParameterError
    from tiedattention.reproduce import redraw

    paths = redraw(GALLERY / "fig4.parquet", tmp_path)
    assert [p.name for p in paths] == ["fig4.png", "fig4.pdf"]
    width_px = Image.open(paths[0]).size[0]
    assert common.WIDTH - 0.5 <= width_px / common.DPI <= common.WIDTH + 2 * PAD_IN + 0.01, width_px
    pd.DataFrame({"x": [1.0]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(ParameterError) as err:
        redraw(tmp_path / "other.parquet", tmp_path)
    assert err.value.param == "parquet"


def test_fig2_full_mode_legend_keeps_off_the_points():
    """Full mode simulates all four λ of fig2 (quick mode two): the legend then has ten entries, and placed in
    panel (b) (as a 7 in layout first did) it hid points. Drawn from the gallery's data with the two missing
    λ's simulations stood in by their theory values: no legend box of any panel holds a data point."""
    import numpy as np
    import pandas as pd

    from tiedattention.reproduce import fig2

    plt = common.pyplot()
    data = pd.read_parquet(GALLERY / "fig2.parquet")
    extra = []
    for lam in (1e-3, 1e-5):
        for key in ("test_error", "train_error"):
            th = data[(data.panel == key) & (data.series == f"lam={lam:g}") & (data.kind == "theory")]
            sim = data[(data.panel == key) & (data.series == "lam=0.01") & (data.kind == "simulation")].copy()
            sim["series"] = f"lam={lam:g}"
            sim["y"] = np.interp(np.log(sim["x"]), np.log(th["x"]), th["y"])
            extra.append(sim)
    fig = fig2.draw(pd.concat([data, *extra], ignore_index=True), False)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        sims = sum(len(ax.containers) for ax in fig.axes)
        assert sims == 2 * 4, sims  # four λ simulated in both panels
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        # theory x5, threshold, simulations x4, the diamonds of the points whose prox has two minima
        assert sum(len(lg.get_texts()) for lg in legends) == 5 + 1 + 4 + 1
        for ax in fig.axes:
            pts = [ax.transData.transform(ln.get_xydata()) for ln in ax.get_lines()
                   if ln.get_transform() == ax.transData]
            for lg in legends:
                box = lg.get_window_extent(renderer)
                pad = 4.0 * fig.dpi / 72  # half a marker, as in test_reproduce_review's legend check
                x0, x1, y0, y1 = box.x0 - pad, box.x1 + pad, box.y0 - pad, box.y1 + pad
                for p in pts:
                    assert not ((p[:, 0] > x0) & (p[:, 0] < x1) & (p[:, 1] > y0) & (p[:, 1] < y1)).any()
    finally:
        plt.close(fig)
