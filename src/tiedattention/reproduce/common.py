"""Shared machinery of the figures: cells, the resumable runner, tidy tables and plotting helpers.

A figure module (``fig1.py`` ...) defines

* ``TITLE`` -- one line saying what the figure shows;
* ``build(quick, table) -> list[Cell]`` -- the cells to compute. It is called first with ``table=None``
  and then with the table of the cells computed so far, until it asks for nothing new (a figure whose
  simulations depend on theory results, e.g. the best lambda per alpha, asks for them in a second stage);
* ``tidy(table, quick) -> DataFrame`` -- the plotted data, one row per plotted point (columns
  :data:`TIDY_COLUMNS` plus figure-specific ones); it is written as ``<name>.parquet``;
* ``draw(data, quick) -> matplotlib Figure`` -- the figure, drawn from the tidy data only.

Cells go through :func:`tiedattention.sweep.run_sweep` into ``OUT/store``, so an interrupted ``reproduce``
computes only what is missing when run again. Theory curves are single cells (route
``tiedattention.reproduce.routes:theory_curve``), warm-started along alpha.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..problem import Problem
from ..sweep.spec import Cell, SweepSpec, cell_key

__all__ = [
    "THEORY_CURVE", "THRESHOLDS", "TIDY_COLUMNS", "options", "theory_curve_cells", "sim_cell", "threshold_cell",
    "theory_frame", "sim_frame", "threshold_frame", "spec_of", "atomic_write", "Sizes",
]

THEORY_CURVE = "tiedattention.reproduce.routes:theory_curve"
THRESHOLDS = "tiedattention.reproduce.routes:threshold_diagram"
#: columns every tidy table has: which panel and series a point belongs to, theory or simulation
TIDY_COLUMNS = ("panel", "kind", "series", "x", "y", "y_err")


class Sizes:
    """Simulation sizes of a mode: ``d``, ``seeds`` and the test-set size. The study: d = 100, 8 seeds."""

    def __init__(self, quick: bool, d_quick: int = 40, seeds_quick: int = 2):
        self.quick = quick
        self.d = d_quick if quick else 100
        self.seeds = seeds_quick if quick else 8
        self.n_test = 1000 if quick else 4000


def mode(params: dict[str, dict], quick: bool) -> dict:
    """A figure's parameter set for the mode: ``params["quick"]`` or ``params["full"]``."""
    return params["quick" if quick else "full"]


def sizes_of(params: dict[str, dict], quick: bool) -> Sizes:
    """Simulation sizes of the mode, with ``d`` and ``seeds`` taken from the figure's parameter set."""
    p = mode(params, quick)
    s = Sizes(quick)
    s.d, s.seeds = p["d"], p["seeds"]
    return s


# --------------------------------------------------------------------------------------------------
# cells
# --------------------------------------------------------------------------------------------------
def options(**changes: Any) -> dict[str, Any]:
    """Canonical problem options (defaults filled in, validated) with ``changes`` applied."""
    return Problem.from_options(**changes).options()


def _cell(route: str, params: dict[str, Any]) -> Cell:
    params = {**params, "route": route}
    return Cell(key=cell_key(params), route=route, params=params, device="auto")


def theory_curve_cells(opts: dict[str, Any], alphas: Iterable[float], chunk: int | None = None,
                       rs_stability: bool = False, **channel: int) -> list[Cell]:
    """Warm-started SE curve(s) over ``alphas`` (sorted); ``chunk`` splits it into cells of that many
    consecutive alphas (for slow settings, T >= 3, so that an interruption loses little); ``channel`` may set
    ``qmc_log2`` and ``replicas`` (the quasi-Monte Carlo rule of T >= 3); ``rs_stability`` adds the RS (AT)
    stability fields to every point (the cell key changes only when it is set)."""
    a = sorted({float(f"{x:.10g}") for x in alphas})
    if chunk is None or chunk >= len(a):
        parts = [a]
    else:
        parts = [a[i:i + chunk] for i in range(0, len(a), chunk)]
    rs = {"rs_stability": True} if rs_stability else {}
    return [_cell(THEORY_CURVE, {**opts, **channel, **rs, "alphas": p}) for p in parts]


def sim_cell(opts: dict[str, Any], alpha: float, sizes: Sizes, solver: str = "lbfgs", seed0: int = 0,
             return_spectra: bool = False, d: int | None = None) -> Cell:
    """One ``simulate`` cell (``sizes.seeds`` seeds at dimension ``d`` or ``sizes.d``)."""
    params = {**opts, "alpha": float(f"{alpha:.10g}"), "d": int(d or sizes.d), "seeds": int(sizes.seeds),
              "solver": solver, "n_test": int(sizes.n_test), "seed0": int(seed0)}
    if return_spectra:
        params["return_spectra"] = True
    return _cell("simulate", params)


def threshold_cell(kappa0s: Sequence[float], noise: float) -> Cell:
    return _cell(THRESHOLDS, {"kappa0s": [float(f"{k:.10g}") for k in kappa0s], "noise": float(noise)})


def spec_of(name: str, cells: Sequence[Cell]) -> SweepSpec:
    """A sweep spec made of explicit cells (the figures do not come from a TOML grid)."""
    routes = tuple(dict.fromkeys(c.route for c in cells))
    return SweepSpec(grid={"figure": [name]}, routes=routes, settings={}, cells=tuple(cells))


# --------------------------------------------------------------------------------------------------
# reading the store back
# --------------------------------------------------------------------------------------------------
_OPTION_COLUMNS = ("target", "noise", "noise_out", "lam", "tokens", "beta", "beta0", "kappa", "model", "task")


def _route_rows(table: pd.DataFrame | None, route: str) -> pd.DataFrame:
    if table is None or table.empty or "route" not in table.columns:
        return pd.DataFrame()
    return table[table["route"] == route]


def theory_frame(table: pd.DataFrame | None) -> pd.DataFrame:
    """One row per SE point of every theory-curve cell: the problem options and the record's fields."""
    rows = []
    for _, cell in _route_rows(table, THEORY_CURVE).iterrows():
        opts = {k: cell[k] for k in _OPTION_COLUMNS}
        for rec in json.loads(cell["records"]):
            rows.append({**opts, **rec})
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.sort_values(list(_OPTION_COLUMNS) + ["alpha"]).drop_duplicates(list(_OPTION_COLUMNS) + ["alpha"])
        df = df.reset_index(drop=True)
    return df


def sim_frame(table: pd.DataFrame | None) -> pd.DataFrame:
    """The ``simulate`` cells (one row per (problem, alpha, d)), sorted by alpha."""
    df = _route_rows(table, "simulate")
    return df.sort_values("alpha").reset_index(drop=True) if not df.empty else df


def threshold_frame(table: pd.DataFrame | None) -> pd.DataFrame:
    rows = []
    for _, cell in _route_rows(table, THRESHOLDS).iterrows():
        rows.extend(json.loads(cell["records"]))
    return pd.DataFrame(rows)


def select(df: pd.DataFrame, **eq: Any) -> pd.DataFrame:
    """Rows of ``df`` whose columns equal the given values (floats compared to 1e-12 relative)."""
    if df.empty:
        return df
    mask = np.ones(len(df), bool)
    for k, v in eq.items():
        col = df[k]
        if isinstance(v, float):
            mask &= np.isclose(col.astype(float), v, rtol=1e-12, atol=0.0)
        else:
            mask &= (col == v).to_numpy()
    return df[mask]


def kappa0_of(target: str) -> float:
    """kappa0 of an ``mp:K`` target spec."""
    return float(target.split(":", 1)[1]) if target.startswith("mp:") else math.nan


# --------------------------------------------------------------------------------------------------
# tidy tables
# --------------------------------------------------------------------------------------------------
def theory_points(df: pd.DataFrame, panel: str, series: str, x: str, y: str, carry: Sequence[str] = (),
                  **extra: Any) -> pd.DataFrame:
    """Tidy rows (kind = theory) of SE records: converged points only (the others are reported). ``carry``: record
    fields copied into columns of the same name (None where a record lacks one)."""
    ok = df[df["converged"].astype(bool)] if not df.empty else df
    out = pd.DataFrame({
        "panel": panel, "kind": "theory", "series": series, "x": ok[x].astype(float).to_numpy(),
        "y": ok[y].astype(float).to_numpy(), "y_err": np.nan,
    })
    for k in carry:
        out[k] = ok[k].to_numpy() if k in ok.columns else None
    for k, v in extra.items():
        out[k] = v
    return out


def sim_points(df: pd.DataFrame, panel: str, series: str, x: str, y: str, **extra: Any) -> pd.DataFrame:
    """Tidy rows (kind = simulation): mean over seeds and its standard error."""
    out = pd.DataFrame({
        "panel": panel, "kind": "simulation", "series": series, "x": df[x].astype(float).to_numpy(),
        "y": df[f"{y}_mean"].astype(float).to_numpy(), "y_err": df[f"{y}_sem"].astype(float).to_numpy(),
        "d": df["d"].astype(int).to_numpy() if len(df) else [], "seeds": df["seeds"].astype(int).to_numpy()
        if len(df) else [],
        "converged_fraction": df["converged"].astype(float).to_numpy() if len(df) else [],
    })
    for k, v in extra.items():
        out[k] = v
    return out


def concat(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and not f.empty]
    if not frames:
        return pd.DataFrame(columns=list(TIDY_COLUMNS))
    df = pd.concat(frames, ignore_index=True)
    return df[list(TIDY_COLUMNS) + [c for c in df.columns if c not in TIDY_COLUMNS]]


# --------------------------------------------------------------------------------------------------
# plotting
# --------------------------------------------------------------------------------------------------
#: width of every figure in inches: a paper's text width, so that a figure set at that width prints each font
#: at its own size (a 14 in figure at 7 in halves them); fonts below are in points
WIDTH = 7.0
#: the smallest font of any figure (legends, insets, captions, mode numbers): legible in print
SMALL_PT = 6.5
#: PNG resolution: 1400 px across at WIDTH
DPI = 200
#: the figure's title (suptitle)
TITLE_PT = 8.5


#: rcParams of the study's figures (``pyplot(paper=True)``): sized for :data:`WIDTH`, fonts in points as printed
PAPER_STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 7.5, "legend.fontsize": SMALL_PT, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "figure.titlesize": TITLE_PT, "savefig.dpi": DPI, "figure.dpi": 100, "lines.linewidth": 1.3,
    "lines.markersize": 4.0, "legend.handlelength": 1.8, "legend.borderaxespad": 0.4, "legend.labelspacing": 0.35,
    "axes.titlepad": 4.0, "axes.labelpad": 2.5,
}
#: the same keys for the screen plots of ``theory`` / ``simulate`` / ``phase --out`` (``pyplot()``): 10 in wide
SCREEN_STYLE = {
    "font.size": 9, "axes.titlesize": 9.5, "axes.labelsize": 9, "legend.fontsize": 7.5, "xtick.labelsize": 8,
    "ytick.labelsize": 8, "figure.titlesize": "large", "savefig.dpi": 110, "figure.dpi": 110, "lines.linewidth": 1.5,
    "lines.markersize": 6.0, "legend.handlelength": 2.0, "legend.borderaxespad": 0.5, "legend.labelspacing": 0.5,
    "axes.titlepad": 6.0, "axes.labelpad": 4.0,
}


def pyplot(paper: bool = False):
    """matplotlib.pyplot on the Agg backend (imported lazily: matplotlib is an optional dependency) with the
    style of the screen plots, or with ``paper`` that of the study's figures (:data:`PAPER_STYLE`: 8 pt text
    and titles, 7 pt ticks, :data:`SMALL_PT` legends, legible when a :data:`WIDTH` in figure is printed)."""
    try:
        import matplotlib
    except ImportError:
        raise ParameterError("plot", "reproduce needs matplotlib: install tiedattention[plot]") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"axes.grid": True, "grid.alpha": 0.25, **(PAPER_STYLE if paper else SCREEN_STYLE)})
    return plt


def figure(plt, panels: int, height: float, legend_row: float = 0.0, **grid: Any):
    """A figure :data:`WIDTH` wide with ``panels`` axes of ``height`` inches per row: one row of one or two
    panels; three in two rows of two, the fourth cell left empty for legends (:func:`legend_in`). With
    ``legend_row`` (inches), one or two panels get an empty row of that height under them, for their legends.
    Returns (fig, axes, spare) with ``spare`` the empty cell (axis off) or None."""
    rows = 1 if panels <= 2 else 2
    heights = [height] * rows + ([legend_row] if legend_row and panels <= 2 else [])
    fig = plt.figure(figsize=(WIDTH, sum(heights)))
    gs = fig.add_gridspec(len(heights), 2 if panels > 1 else 1, height_ratios=heights, **grid)
    axes = [fig.add_subplot(gs[i // 2, i % 2] if panels > 1 else gs[0, 0]) for i in range(panels)]
    spare = None
    if panels == 3:
        spare = fig.add_subplot(gs[1, 1])
    elif len(heights) > rows:
        spare = fig.add_subplot(gs[rows, :])
    if spare is not None:
        spare.axis("off")
    return fig, axes, spare


def legend_in(cell, *groups: tuple[str | None, Any], **kw: Any):
    """One legend in the empty grid cell ``cell`` (off the data) with the entries of each ``(title, ax)`` of
    ``groups`` in turn, each under its title (e.g. "(a)") when it has one."""
    from matplotlib.lines import Line2D

    handles, labels, titles = [], [], []
    for title, ax in groups:
        h, lab = ax.get_legend_handles_labels()
        if title:
            handles.append(Line2D([], [], lw=0))
            labels.append(title)
            titles.append(len(labels) - 1)
        handles += h
        labels += lab
    before = cell.get_legend()
    legend = cell.legend(handles, labels, **{"loc": "center left", "frameon": False, **kw})
    texts = legend.get_texts()
    for i in titles:
        texts[i].set_fontweight("bold")
    if before is not None:  # a second legend beside the first (give each its loc / bbox_to_anchor)
        cell.add_artist(before)
    return legend


def suptitle(fig, text: str) -> None:
    """The figure's title: one line of the setting, left-aligned, wrapped to the width."""
    fig.suptitle(_wrap(text, _chars(fig, TITLE_PT)), x=0.01, ha="left", fontsize=TITLE_PT)


def plot_theory(ax, data: pd.DataFrame, panel: str, series: str, label: str | None = None, **kw: Any):
    sub = data[(data["panel"] == panel) & (data["series"] == series) & (data["kind"] == "theory")]
    sub = sub.sort_values("x")
    if sub.empty:
        return None
    (line,) = ax.plot(sub["x"], sub["y"], label=label, **kw)
    return line


#: record field: the share of E||g||^2 on channel nodes whose prox has two local minima (theory ``err_branch_share``)
BRANCH_SHARE = "err_branch_share"
SWITCHING_LABEL = "two prox minima: RS not guaranteed"
#: the marker of :func:`mark_switching` (and of a figure's legend entry for it)
SWITCH_MARK = {"ls": "none", "marker": "D", "ms": 3.2, "mfc": "none", "mew": 0.9}


def above(sub: pd.DataFrame, column: str, threshold: float) -> np.ndarray:
    """Mask of the rows whose ``column`` exceeds ``threshold`` (False where the value is null or the column absent:
    a field not computed, or a parquet written before it existed)."""
    if column not in sub.columns:
        return np.zeros(len(sub), bool)
    return (pd.to_numeric(sub[column], errors="coerce") > threshold).fillna(False).to_numpy(bool)


def branch_switching(sub: pd.DataFrame) -> np.ndarray:
    """Mask of the theory rows whose prox has two local minima on more than the state evolution's
    ``BRANCH_SWITCH`` share of E||g||^2 (where the replica-symmetric SE can miss the ERM; null: not marked)."""
    from ..theory.state_evolution import BRANCH_SWITCH  # (the theory is imported where it is used, as in routes)

    return above(sub, BRANCH_SHARE, BRANCH_SWITCH)


def mark_switching(ax, data: pd.DataFrame, panel: str, series: str, color=None) -> bool:
    """Open diamonds (gid ``rs_switching``) on the theory points of ``series`` where :func:`branch_switching`;
    True where any was drawn (the caller adds one legend entry, :data:`SWITCHING_LABEL`, for the figure)."""
    sub = data[(data["panel"] == panel) & (data["series"] == series) & (data["kind"] == "theory")].sort_values("x")
    bad = branch_switching(sub)
    if not bad.any():
        return False
    ax.plot(sub["x"].to_numpy(float)[bad], sub["y"].to_numpy(float)[bad], color=color, zorder=4, gid="rs_switching",
            **SWITCH_MARK)
    return True


def switching_caption() -> str:
    """The caption's sentence for :func:`mark_switching`'s diamonds."""
    from ..theory.state_evolution import BRANCH_SWITCH

    return (f". Open diamonds: the channel's prox has two local minima on more than {BRANCH_SWITCH:.1%} of E‖g‖²; "
            "the replica-symmetric SE is not guaranteed there and can miss the ERM (docs/theory/stability.md)")


def plot_sim(ax, data: pd.DataFrame, panel: str, series: str, label: str | None = None, color=None,
             marker: str = "o", xshift: float = 1.0, **kw: Any):
    """Simulation points with standard-error bars; ``xshift`` multiplies x (to separate overlapping series)."""
    sub = data[(data["panel"] == panel) & (data["series"] == series) & (data["kind"] == "simulation")]
    if sub.empty:
        return None
    return ax.errorbar(sub["x"] * xshift, sub["y"], yerr=sub["y_err"].fillna(0.0), fmt=marker, ms=3.8, capsize=2.0,
                       elinewidth=0.9, color=color, mfc="white", mew=1.0, label=label, zorder=3, **kw)


SOLVER_NAMES = {
    "lbfgs": "L-BFGS on W to convergence (exact minimiser)",
    "prox": "accelerated proximal gradient on S to convergence (exact minimiser, exact zero eigenvalues)",
    "adam": "Adam",
}


def sim_caption(sizes: Sizes, extra: str = "", solver: str = "lbfgs") -> str:
    return (f"points: simulations, {SOLVER_NAMES.get(solver, solver)}, d = {sizes.d}, mean ± s.e. over "
            f"{sizes.seeds} seeds{extra}; lines: state evolution (d → ∞)")


def _chars(fig, fontsize: float) -> int:
    """How many characters of ``fontsize`` points fit across the figure (DejaVu Sans averages 0.5 em a
    character in these captions; 0.56 leaves room for wide ones)."""
    return max(20, int(0.97 * fig.get_figwidth() * 72 / (0.56 * fontsize)))


def _wrap(text: str, width: int) -> str:
    """``textwrap.fill`` that keeps relations together: no line break inside "d = 40", "T ≥ 3", "0.3 ± 0.1"."""
    import re
    import textwrap

    glued = re.sub(r" ([=≥≤±∈→×<>]) ", "\u00a0\\1\u00a0", text)
    return textwrap.fill(glued, width).replace("\u00a0", " ")


def caption(fig, text: str, y: float = -0.01) -> None:
    """A caption under the figure, wrapped to its width (so that it never widens the saved image)."""
    fig.text(0.01, y, _wrap(text, _chars(fig, SMALL_PT)), fontsize=SMALL_PT, ha="left", va="top")


# --------------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------------
def atomic_write(path: Path, write) -> None:
    """:func:`tiedattention.cli_common.atomic_write` (``write(tmp)``, fsync, rename over ``path``) into a
    directory that is created first if missing."""
    from ..cli_common import atomic_write as write_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, write)
