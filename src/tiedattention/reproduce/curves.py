"""Learning-curve figures for any problem: ``tiedattention theory --out FIG`` and ``tiedattention simulate --out FIG``.

Both commands hand their JSON records to a table builder here and write the figure and ``FIG.parquet`` (the plotted
data, tidy: one row per plotted point, the columns :data:`.common.TIDY_COLUMNS` first) with :func:`write_outputs`;
the figure is drawn from that table only.

* :func:`theory_table` -- the state evolution's records (one per alpha): panel ``errors`` with the series
  ``test_error``, ``test_error_clean``, ``train_error`` and panel ``overlaps`` with ``mse`` (MSE on S) and ``rank``
  (rank fraction), kind ``theory``, ``y_err`` NaN; every alpha is a row, ``converged`` says whether it may be
  drawn; plus kind ``threshold`` rows (panel ``errors``, series ``interpolation`` / ``perfect_recovery``, ``x`` the
  lambda -> 0+ threshold in alpha units, :func:`threshold_alphas`) where the threshold is finite and positive.
  :func:`draw_learning_curve` draws it: non-converged points are left out of the lines (a gap), marked by a red x
  at the bottom of the axes and counted in the title.
* :func:`simulation_table` -- ``simulate``'s records: kind ``simulation`` (series ``d=D``: mean over seeds in
  ``y``, its standard error in ``y_err``; ``converged`` false when a seed did not converge), kind
  ``extrapolation`` (the ``d: null`` records of several ``--d``: the intercept of y = a + b/d and its standard
  error, series ``d→∞ (1/d fit)``), and with ``--theory`` kind ``theory`` (the state evolution on a dense log grid
  over the simulated alpha range, :func:`se_curves`; series ``SE`` for the d -> infinity curve, ``SE d=D`` per d
  for targets whose spectrum depends on d). Panels ``test_error`` and ``train_error``.
  :func:`draw_simulation` draws it.

Like the other figures, matplotlib is imported lazily (Agg backend, :func:`.common.pyplot`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..problem import Problem
from . import common

__all__ = [
    "SE_POINTS", "check_out", "threshold_alphas", "theory_table", "se_grid", "se_curves",
    "simulation_table", "draw_learning_curve", "draw_simulation", "write_outputs", "write_figure_and_table",
]

#: points of the state-evolution curve drawn behind simulations (``simulate --theory --out``)
SE_POINTS = 40
#: theory panels and their series (record fields)
THEORY_PANELS = {"errors": ("test_error", "test_error_clean", "train_error"), "overlaps": ("mse", "rank")}
#: simulation panels (record fields, ``<field>_mean`` / ``<field>_sem`` in the records)
SIM_PANELS = ("test_error", "train_error")
EXTRAPOLATED_SERIES = "d→∞ (1/d fit)"
_LABELS = {"test_error": "test error (noisy labels)", "test_error_clean": "test error (clean labels)",
           "train_error": "train error", "mse": "MSE on S", "rank": "rank fraction"}
_THRESHOLD_LABELS = {"interpolation": "interpolation", "perfect_recovery": "perfect recovery"}
_OPTION_COLUMNS = ("target", "noise", "noise_out", "lam", "tokens", "beta", "beta0", "kappa", "model", "task")


# --------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------
def check_out(out: Path | str | None) -> None:
    """The checks of ``--out`` before anything is computed: an existing directory, a figure suffix
    (:data:`tiedattention.cli_common.FIGURE_SUFFIXES`), neither the figure nor its ``.parquet`` a directory, and
    matplotlib importable. ParameterError("out") otherwise."""
    from ..cli_common import FIGURE_SUFFIXES, check_output_file

    if out is None:
        return
    out = Path(out)
    check_output_file(out, "out", suffix=FIGURE_SUFFIXES)
    check_output_file(out.with_suffix(".parquet"), "out")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ParameterError("out", "drawing a figure needs matplotlib: install tiedattention[plot]") from None


def threshold_alphas(problem: Problem, d: int | None = None) -> dict[str, Any]:
    """The lambda -> 0+ thresholds of ``problem`` in alpha units (:func:`tiedattention.theory.thresholds.thresholds`):
    ``interpolation`` and ``perfect_recovery`` (of the problem's model; NaN where there is none), and ``message``."""
    from .phase import threshold_record

    th = threshold_record(problem, d)
    return {"interpolation": float(th["interpolation_alpha"]), "perfect_recovery": float(th["perfect_recovery_alpha"]),
            "message": th["threshold_message"]}


# --------------------------------------------------------------------------------------------------
# tidy tables
# --------------------------------------------------------------------------------------------------
def _finish(rows: list[dict[str, Any]], problem: Problem) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for k, v in problem.options().items():
        df[k] = v
    df = df[list(common.TIDY_COLUMNS) + [c for c in df.columns if c not in common.TIDY_COLUMNS]]
    df["converged"] = df["converged"].astype("boolean")
    if "d" in df.columns:
        df["d"] = df["d"].astype("Int64")
    for col in ("x", "y", "y_err", "alpha_bar"):
        if col in df.columns:
            df[col] = df[col].astype(float)
    return df.reset_index(drop=True)


def _num(value: Any) -> float:
    """A record's number (None, JSON null, as NaN)."""
    return math.nan if value is None else float(value)


def theory_table(records: Sequence[dict[str, Any]], problem: Problem, d: int | None = None,
                 thresholds: dict[str, Any] | None = None) -> pd.DataFrame:
    """The tidy table of a learning curve (see the module docstring) from ``theory``'s records; ``thresholds`` as
    :func:`threshold_alphas` returns them (computed here when None). ``d`` is recorded (and used for the
    thresholds) only where the target's theory depends on it (power law, spikes, eigenvalue files). Records of
    ``theory --optimal-lam`` (with ``lam_opt``): the ``lam`` column is each alpha's own optimum and the column
    ``lam_optimal`` is True (the figure's title then says "λ optimal per α")."""
    from .phase import theory_dimension

    d = theory_dimension(problem, d)
    if thresholds is None:
        thresholds = threshold_alphas(problem, d)
    rows: list[dict[str, Any]] = []
    for panel, series in THEORY_PANELS.items():
        for key in series:
            for r in records:
                rows.append({"panel": panel, "kind": "theory", "series": key, "x": float(r["alpha"]),
                             "y": _num(r.get(key)), "y_err": math.nan, "alpha_bar": r["alpha_bar"],
                             "converged": bool(r["converged"]), "d": d})
    for key in ("interpolation", "perfect_recovery"):
        a = thresholds.get(key, math.nan)
        if a is not None and math.isfinite(a) and a > 0:
            rows.append({"panel": "errors", "kind": "threshold", "series": key, "x": float(a), "y": math.nan,
                         "y_err": math.nan, "alpha_bar": math.nan, "converged": None, "d": d,
                         "message": thresholds.get("message", "")})
    df = _finish(rows, problem)
    if "message" in df.columns:
        df["message"] = df["message"].fillna("").astype(str)
    if any("lam_opt" in r for r in records):  # theory --optimal-lam: each alpha's own lambda (NaN: none found)
        lam_of = {float(r["alpha"]): _num(r.get("lam_opt")) for r in records}
        df["lam"] = [lam_of[x] if k == "theory" else math.nan for x, k in zip(df["x"], df["kind"], strict=True)]
        df["lam_optimal"] = True
    return df


def se_grid(alphas: Iterable[float], num: int | None = None) -> list[float]:
    """``num`` (default :data:`SE_POINTS`) log-spaced alphas from the smallest to the largest of ``alphas``
    (a factor 2 either side of a single alpha)."""
    a = [float(x) for x in alphas]
    lo, hi = min(a), max(a)
    if lo == hi:
        lo, hi = lo / 2, hi * 2
    grid = np.geomspace(lo, hi, SE_POINTS if num is None else num)
    grid[0], grid[-1] = lo, hi
    return [float(x) for x in grid]


def se_curves(problem: Problem, alphas: Iterable[float], dims: Sequence[int],
              progress: Callable[[], None] | None = None,
              num: int | None = None) -> dict[int | None, list[dict[str, Any]]]:
    """The warm-started SE records on :func:`se_grid` of ``alphas``: one curve, key None (d -> infinity), or one per
    d for a target whose spectrum depends on d (``Target.needs_d``), as ``simulate --theory`` compares them."""
    from ..theory.api import theory_records

    grid = se_grid(alphas, num)
    keys: list[int | None] = list(dims) if problem.task.target.needs_d else [None]
    return {dd: theory_records(problem, grid, d=dd, progress=progress) for dd in keys}


def simulation_table(records: Sequence[dict[str, Any]], problem: Problem,
                     curves: dict[int | None, list[dict[str, Any]]] | None = None) -> pd.DataFrame:
    """The tidy table of simulations (see the module docstring) from ``simulate``'s records (the per-d ones and the
    ``d: null`` 1/d fits) and the SE curves of :func:`se_curves`."""
    rows: list[dict[str, Any]] = []
    for key in SIM_PANELS:
        for r in records:
            fit = r.get("d") is None
            row = {"panel": key, "kind": "extrapolation" if fit else "simulation",
                   "series": EXTRAPOLATED_SERIES if fit else f"d={int(r['d'])}", "x": float(r["alpha"]),
                   "y": _num(r.get(f"{key}_mean")), "y_err": _num(r.get(f"{key}_sem")), "alpha_bar": r["alpha_bar"],
                   "d": None if fit else int(r["d"]), "seeds": int(r["seeds"]), "solver": r.get("solver"),
                   "converged": bool(r["converged_all"]),
                   "converged_fraction": math.nan if fit else float(r["converged"])}
            if fit:
                row["dims"] = ",".join(str(x) for x in r["dims"])
            rows.append(row)
        for dd, curve in (curves or {}).items():
            for r in curve:
                rows.append({"panel": key, "kind": "theory", "series": "SE" if dd is None else f"SE d={dd}",
                             "x": float(r["alpha"]), "y": _num(r.get(key)), "y_err": math.nan,
                             "alpha_bar": r["alpha_bar"], "d": dd, "converged": bool(r["converged"])})
    df = _finish(rows, problem)
    for col in ("seeds",):
        if col in df.columns:
            df[col] = df[col].astype("Int64")
    for col in ("solver", "dims"):
        if col in df.columns:
            df[col] = df[col].astype("string")
    return df


# --------------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ParameterError("out", "drawing a figure needs matplotlib: install tiedattention[plot]") from None
    return common.pyplot()


def _problem_line(df: pd.DataFrame) -> str:
    o = df.iloc[0]
    lam = "λ optimal per α" if bool(o.get("lam_optimal", False)) else f"λ = {o['lam']:g}"
    parts = [str(o["target"]), f"Δ = {o['noise']:g}", lam, f"T = {int(o['tokens'])}"]
    if o["noise_out"]:
        parts.append(f"Δ_out = {o['noise_out']:g}")
    for k, sym in (("beta", "β"), ("beta0", "β0"), ("kappa", "κ")):
        if o[k] != 1:
            parts.append(f"{sym} = {o[k]:g}")
    parts.append(f"{o['model']}, {o['task']}")
    return ", ".join(parts)


def _line(ax, sub: pd.DataFrame, **kw: Any):
    """A theory line through the converged points of ``sub`` (a gap at the others); None if there are none."""
    sub = sub.sort_values("x")
    if len(sub) < 8:  # a few points: show them (a single one would draw nothing)
        kw = {"marker": "o", "ms": 3.0, **kw}
    ok = sub["converged"].fillna(False).to_numpy(bool)
    y = np.where(ok, sub["y"].to_numpy(float), np.nan)
    if not np.isfinite(y).any():
        return None
    (line,) = ax.plot(sub["x"].to_numpy(float), y, **kw)
    return line


def _mark_not_converged(ax, xs: Sequence[float]):
    """A red x at the bottom of the axes at each alpha of ``xs``; the handle, or None when there are none."""
    if len(xs) == 0:
        return None
    (h,) = ax.plot(xs, np.zeros(len(xs)), "x", color="red", ms=7, mew=1.8, transform=ax.get_xaxis_transform(),
                   clip_on=False, zorder=5, linestyle="none")
    return h


def _threshold_lines(ax, df: pd.DataFrame, label: bool, span: tuple[float, float]):
    styles = {"interpolation": "--", "perfect_recovery": ":"}
    handles = []
    for r in df[df["kind"] == "threshold"].itertuples(index=False):
        where = "" if span[0] <= r.x <= span[1] else " (outside the α range)"
        lab = f"{_THRESHOLD_LABELS.get(r.series, r.series)}, λ → 0+: α = {r.x:.4g}{where}" if label else None
        handles.append(ax.axvline(r.x, color="0.3", ls=styles.get(r.series, "-."), lw=1.1, label=lab, zorder=1))
    return handles


def _xlim(ax, xs: np.ndarray) -> None:
    lo, hi = float(np.min(xs)), float(np.max(xs))
    if lo == hi:
        lo, hi = lo / 2, hi * 2
    pad = (hi / lo) ** 0.03 * 1.06  # room for the shifted simulation points
    ax.set_xlim(lo / pad, hi * pad)


def draw_learning_curve(table: pd.DataFrame):
    """The learning curve of a :func:`theory_table`: test errors and the train error against alpha (log axis) with
    the lambda -> 0+ threshold lines (left), the MSE on S and the rank fraction (right, the rank on its own axis).
    Returns the matplotlib Figure."""
    plt = _pyplot()
    th = table[table["kind"] == "theory"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    colors = {"test_error": "tab:blue", "test_error_clean": "tab:green", "train_error": "tab:orange",
              "mse": "tab:purple", "rank": "tab:brown"}
    alphas = th[["x", "converged"]].drop_duplicates("x")
    bad = alphas.loc[~alphas["converged"].fillna(False).to_numpy(bool), "x"].to_numpy(float)
    for panel, axis in (("errors", ax), ("overlaps", ax2)):
        handles = []
        rank_ax = axis.twinx() if panel == "overlaps" else None
        for key in THEORY_PANELS[panel]:
            target = rank_ax if key == "rank" else axis
            h = _line(target, th[(th["panel"] == panel) & (th["series"] == key)], color=colors[key],
                      label=_LABELS[key], ls="-." if key == "rank" else "-")
            if h is not None:
                handles.append(h)
        span = (float(th["x"].min()), float(th["x"].max()))
        if panel == "errors":
            handles += _threshold_lines(axis, table, True, span)
        else:
            _threshold_lines(axis, table, False, span)
        h = _mark_not_converged(axis, bad)
        if h is not None:
            h.set_label(f"not converged ({len(bad)}): left out")
            handles.append(h)
        axis.set_xscale("log")
        _xlim(axis, th["x"].to_numpy(float))
        axis.set_xlabel("α = n/d²")
        axis.set_ylim(bottom=0)
        if rank_ax is not None:
            rank_ax.set_ylim(0, 1.02)
            rank_ax.set_ylabel("rank fraction")
            rank_ax.grid(False)
            axis.set_ylabel("MSE on S")
        else:
            axis.set_ylabel("error")
        axis.legend(handles=handles, loc="best", fontsize=7)
    n_bad, n = len(bad), len(alphas)
    status = (f"{n} point{'s' if n > 1 else ''}, all converged" if n_bad == 0
              else f"{n_bad} of {n} points not converged (red x)")
    dd = th["d"].dropna()
    where = "d → ∞" if dd.empty else f"spectrum at d = {int(dd.iloc[0])}"
    fig.suptitle(f"state evolution ({where}), λ → 0+ thresholds dashed/dotted; {status}\n{_problem_line(table)}",
                 fontsize=8.5)
    fig.tight_layout()
    return fig


def draw_simulation(table: pd.DataFrame):
    """Simulations of a :func:`simulation_table`: test and train error against alpha (log axis), mean ± s.e. over
    seeds per d, the 1/d fit's intercept, and the SE curve(s) as lines behind the points. Points with a seed that
    did not converge get a red x over them, SE points that did not converge are left out of the line and marked at
    the bottom. Returns the matplotlib Figure."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(SIM_PANELS), figsize=(10.0, 4.0))
    sim = table[table["kind"].isin(["simulation", "extrapolation"])]
    dims = sorted({int(x) for x in sim["d"].dropna()})
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {d: cycle[i % len(cycle)] for i, d in enumerate(dims)}
    series = [f"d={d}" for d in dims] + ([EXTRAPOLATED_SERIES] if (sim["kind"] == "extrapolation").any() else [])
    shift = {s: 1.0 + 0.025 * (i - (len(series) - 1) / 2) for i, s in enumerate(series)}  # separate the bars
    points = sim[(sim["panel"] == SIM_PANELS[0]) & (sim["kind"] == "simulation")]
    n_bad = int((~points["converged"].fillna(True).to_numpy(bool)).sum())  # (alpha, d) with a seed not converged
    n_se_bad = 0
    missing = int((~np.isfinite(sim["y"].to_numpy(float))).sum())  # no finite value (failed seeds): not drawn
    for key, ax in zip(SIM_PANELS, axes, strict=True):
        data = table[table["panel"] == key]
        handles = []
        theory = data[data["kind"] == "theory"]
        for name, sub in theory.groupby("series", sort=True):
            dd = sub["d"].dropna()
            c = color.get(int(dd.iloc[0]), "0.25") if len(dd) else "0.25"
            h = _line(ax, sub, color=c, lw=1.3, alpha=0.85, zorder=1,
                      label=("state evolution (d → ∞)" if name == "SE" else f"state evolution at {name[3:]}"))
            if h is not None:
                handles.append(h)
        bad_se = theory.loc[~theory["converged"].fillna(False).to_numpy(bool), "x"].drop_duplicates()
        for s in series:
            sub = data[data["series"] == s].sort_values("x")
            fit = s == EXTRAPOLATED_SERIES
            c = "black" if fit else color[int(s[2:])]
            label = "1/d fit: intercept a of a + b/d (d → ∞)" if fit else f"simulation, {s}"
            ok = np.isfinite(sub["y"].to_numpy(float))
            h = ax.errorbar(sub["x"].to_numpy(float)[ok] * shift[s], sub["y"].to_numpy(float)[ok],
                            yerr=np.nan_to_num(sub["y_err"].to_numpy(float)[ok]), fmt="D" if fit else "o", ms=4.5,
                            capsize=2.5, elinewidth=1.0, color=c, mfc="white" if not fit else c, mew=1.2,
                            label=label, zorder=3)
            handles.append(h)
            if not fit:
                bad = sub[~sub["converged"].fillna(True).to_numpy(bool) & np.isfinite(sub["y"].to_numpy(float))]
                ax.plot(bad["x"].to_numpy(float) * shift[s], bad["y"].to_numpy(float), "x", color="red", ms=8,
                        mew=1.8, zorder=4, linestyle="none")
        h = _mark_not_converged(ax, bad_se.to_numpy(float))
        if h is not None:
            h.set_label(f"SE not converged ({len(bad_se)}): left out")
            handles.append(h)
            n_se_bad = max(n_se_bad, len(bad_se))
        if n_bad:
            (h,) = ax.plot([], [], "x", color="red", ms=8, mew=1.8, linestyle="none",
                           label=f"a seed did not converge ({n_bad} of {len(points)} points)")
            handles.append(h)
        ax.set_xscale("log")
        _xlim(ax, data["x"].to_numpy(float))
        ax.set_xlabel("α = n/d²")
        ax.set_ylabel(_LABELS[key])
        ax.set_ylim(bottom=0)
        ax.legend(handles=handles, loc="best", fontsize=7)
    first = sim.iloc[0] if len(sim) else table.iloc[0]
    seeds = int(first["seeds"]) if "seeds" in table.columns and pd.notna(first.get("seeds")) else None
    solver = first.get("solver") if "solver" in table.columns else None
    head = f"simulation ({solver}, mean ± s.e. over {seeds} seeds)" if seeds else "simulation"
    notes = []
    if n_bad:
        notes.append(f"{n_bad} of {len(points)} points with a seed that did not converge (red x)")
    if missing:
        notes.append(f"{missing} values not finite (not drawn)")
    if n_se_bad:
        notes.append(f"{n_se_bad} SE points not converged")
    fig.suptitle(f"{head}{'; ' + ', '.join(notes) if notes else ''}\n{_problem_line(table)}", fontsize=8.5)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------------
def write_outputs(table: pd.DataFrame, out: str | Path, draw: Callable[[pd.DataFrame], Any]) -> list[Path]:
    """The figure ``draw(table)`` at ``out`` (format from its suffix) and ``table`` as ``out`` with suffix .parquet
    (:func:`write_figure_and_table`). Returns both paths."""
    _pyplot()
    return write_figure_and_table(draw(table), table, out)


def write_figure_and_table(fig: Any, data: pd.DataFrame, out: str | Path) -> list[Path]:
    """``fig`` at ``out`` (format from its suffix; the figure is closed) and ``data`` (its ``attrs`` dropped) as
    ``out`` with suffix .parquet, each written atomically (:func:`tiedattention.cli_common.atomic_write`): the
    figure commands' shared output step (theory/simulate --out, phase). Returns both paths."""
    from ..cli_common import atomic_write

    out = Path(out)
    try:
        atomic_write(out, lambda p: fig.savefig(p, format=out.suffix[1:].lower(), bbox_inches="tight"))
    finally:
        common.pyplot().close(fig)
    path = out.with_suffix(".parquet")
    data = data.copy()
    data.attrs = {}
    atomic_write(path, lambda p: data.to_parquet(p, index=False))
    return [out, path]
