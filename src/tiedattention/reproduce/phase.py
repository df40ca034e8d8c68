"""Theory phase diagrams: a state-evolution quantity over alpha and one more problem parameter.

One row of the diagram (one value of the second parameter) is one sweep cell: the warm-started learning curve
of :func:`tiedattention.reproduce.routes.theory_curve` along alpha, run by :func:`tiedattention.sweep.run_sweep`
into a store, so that a second run computes only the rows not yet there and Ctrl-C keeps the finished rows.

    from tiedattention.problem import Problem
    from tiedattention.reproduce.phase import phase_diagram
    df = phase_diagram(Problem.from_options(noise=0.5), [0.5, 1, 2], "lam", [0.01, 0.1, 1], store="phase.store")
    df.attrs["summary"]      # grid shape, points converged / not, cells computed now, seconds

The table is tidy: one row per (row value, alpha) with the theory record's fields, the problem's options, the row
parameter (``over``, ``value``) and the row's overlays:

* ``train_zero_alpha`` -- the alpha at which the train error of this row leaves zero for good (first rises above
  ``train_zero`` and stays there), interpolated linearly in log alpha between the two grid points around it;
  NaN where the grid does not contain such a crossing (at a large lambda the train error never is zero);
* ``interpolation_alpha``, ``perfect_recovery_alpha`` -- the lambda -> 0+ thresholds of this row's problem
  (:func:`tiedattention.theory.thresholds.thresholds`; perfect recovery of the problem's model, NaN where there
  is none); ``threshold_message`` says why a threshold is missing or how it was capped.

:func:`draw_phase` draws the figure from that table only. The theory package itself stays free of the store and of
matplotlib: both live here.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ParameterError
from ..problem import Problem
from ..sweep.spec import Cell
from . import common

__all__ = [
    "OVER_NAMES", "PHASE_ROW", "TRAIN_ZERO", "phase_diagram", "phase_cells", "phase_row", "quantities",
    "check_over", "parse_over", "train_zero_alpha", "draw_phase", "summary_of", "theory_dimension",
    "threshold_record",
]

#: the problem options a phase diagram can run over (its second axis)
OVER_NAMES = ("lam", "noise", "noise_out", "beta", "beta0", "kappa", "tokens")
#: the route of one row: the warm-started theory curve, plus the RS stability of each point when asked for
PHASE_ROW = "tiedattention.reproduce.phase:phase_row"
#: the train error below which a point counts as interpolating, for the finite-lambda boundary
TRAIN_ZERO = 1e-4
_SYMBOLS = {"lam": "λ", "noise": "Δ", "noise_out": "Δ_out", "beta": "β", "beta0": "β0", "kappa": "κ", "tokens": "T"}
_RS_FIELDS = ("rs_at", "rs_at_error", "rs_switching")
_OVERLAYS = ("train_zero_alpha", "interpolation_alpha", "perfect_recovery_alpha")


# --------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------
def quantities(rs_stability: bool = False) -> tuple[str, ...]:
    """The numeric fields of the theory record that a diagram can show (the axes alpha, alpha_bar excluded)."""
    from ..theory.state_evolution import SEResult

    names = [f.name for f in fields(SEResult) if f.type in ("float", "int", float, int)
             and f.name not in ("alpha", "alpha_bar")]
    names += ["err_test_error", "err_test_error_clean"]
    if rs_stability:
        names += list(_RS_FIELDS)
    return tuple(names)


def check_over(problem: Problem, name: str, values: Sequence[float]) -> list[float]:
    """The row values of ``name`` validated as the problem option they are (sorted, duplicates dropped).
    ParameterError("over") for an unknown name, ParameterError(name) for a bad value (through Problem)."""
    if name not in OVER_NAMES:
        raise ParameterError("over", f"unknown parameter {name!r} (one of {', '.join(OVER_NAMES)})")
    out = []
    for v in values:
        out.append(problem.with_options(**{name: v}).options()[name])
    out = sorted(set(out))
    if not out:
        raise ParameterError("over", "needs at least one value")
    return out


def parse_over(text: str, problem: Problem) -> tuple[str, list[float]]:
    """``NAME=VALUES`` (VALUES a list a,b,c or start:stop:num, log-spaced) -> (name, validated sorted values).

    ``tokens`` takes integers: a list of them, or a range whose log-spaced values are rounded (duplicates dropped).
    A bad value raises ParameterError("over") naming the value and saying what is wrong with it."""
    from ..cli_common import parse_floats

    name, sep, rest = str(text).partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name or not rest.strip():
        raise ParameterError("over", f"cannot read '{text}' (expected NAME=VALUES, e.g. lam=1e-4:1:25 or "
                                     "noise=0,0.5,1)")
    if name not in OVER_NAMES:
        raise ParameterError("over", f"unknown parameter {name!r} (one of {', '.join(OVER_NAMES)})")
    try:
        values = parse_floats(rest, name, positive=False)
    except ParameterError as exc:
        raise ParameterError("over", f"{name}: {exc.message}") from None
    if name == "tokens" and ":" in rest:
        values = [float(round(v)) for v in values]
    for v in values:
        try:
            check_over(problem, name, [v])
        except ParameterError as exc:
            raise ParameterError("over", f"{name} = {v:g}: {exc.message}") from None
    return name, check_over(problem, name, values)


# --------------------------------------------------------------------------------------------------
# the route and the cells
# --------------------------------------------------------------------------------------------------
def phase_row(params: dict[str, Any]) -> dict[str, Any]:
    """Sweep route of one row: :func:`.routes.theory_curve` (warm-started along ``alphas``), and with
    ``rs_stability`` the RS (AT) stability of every converged point (``tiedattention theory --rs-stability``),
    which the curve route computes itself."""
    from .routes import theory_curve

    return theory_curve(params)


def theory_dimension(problem: Problem, d: int | None) -> int | None:
    """``d`` where the target's theory depends on it (power law, spikes, eigenvalue files), else None."""
    tgt = problem.task.target
    if d is not None and (tgt.needs_d or tgt.spec.startswith("file:")):
        return int(d)
    return None


def phase_cells(problem: Problem, alphas: Sequence[float], over: str, values: Sequence[float],
                d: int | None = None, rs_stability: bool = False) -> list[Cell]:
    """One cell per row value, in the order of ``values``."""
    a = sorted({float(f"{x:.10g}") for x in alphas})
    cells = []
    for v in values:
        row = problem.with_options(**{over: v})
        params: dict[str, Any] = {**row.options(), "alphas": a}
        if row.task.target.spec.startswith("file:"):  # the file's content enters the key, as in a sweep spec
            from ..sweep.spec import _normalise_target

            params["target"], params["target_sha256"] = _normalise_target(row.task.target.spec)
        rd = theory_dimension(row, d)
        if rd is not None:
            params["d"] = rd
        if rs_stability:
            params["rs_stability"] = True
        cells.append(common._cell(PHASE_ROW, params))
    return cells


# --------------------------------------------------------------------------------------------------
# the diagram
# --------------------------------------------------------------------------------------------------
def train_zero_alpha(alphas: Sequence[float], train_errors: Sequence[float], level: float = TRAIN_ZERO) -> float:
    """The alpha where the train error leaves zero for good: between the last point at or below ``level`` that is
    followed only by points above it, and the next one (linear in log alpha). NaN where the grid has no such pair
    (never below the level, or not above it at the last point). Non-finite errors are left out."""
    pts = sorted((float(a), float(e)) for a, e in zip(alphas, train_errors, strict=True) if math.isfinite(e))
    if len(pts) < 2 or pts[-1][1] <= level:
        return math.nan
    k = max((i for i, (_, e) in enumerate(pts) if e <= level), default=None)
    if k is None:
        return math.nan
    (a0, e0), (a1, e1) = pts[k], pts[k + 1]
    t = (level - e0) / (e1 - e0)
    return math.exp(math.log(a0) + t * (math.log(a1) - math.log(a0)))


def threshold_record(problem: Problem, d: int | None) -> dict[str, Any]:
    """The lambda -> 0+ thresholds of ``problem`` in alpha units: ``interpolation_alpha``,
    ``perfect_recovery_alpha`` (of the problem's model; NaN where there is none) and ``threshold_message``; a
    failure of :func:`~tiedattention.theory.thresholds.thresholds` gives NaNs and the reason, not an error."""
    from ..theory.thresholds import thresholds

    try:
        th = thresholds(problem, d)
    except (ArithmeticError, ValueError) as exc:
        return {"interpolation_alpha": math.nan, "perfect_recovery_alpha": math.nan,
                "threshold_message": f"thresholds failed: {type(exc).__name__}: {exc}"}
    pr = th.perfect_recovery_direct_alpha if problem.student.model == "direct" else th.perfect_recovery_factorized_alpha
    return {"interpolation_alpha": th.interpolation_alpha,
            "perfect_recovery_alpha": math.nan if pr is None else pr, "threshold_message": th.message}


def phase_diagram(problem: Problem, alphas: Sequence[float], over: str, values: Sequence[float], *,
                  d: int | None = None, rs_stability: bool = False, store: str | Path | None = None,
                  workers: int | None = None, executor: Any = "local", progress: bool = True,
                  train_zero: float = TRAIN_ZERO) -> pd.DataFrame:
    """The state evolution of ``problem`` on the grid ``alphas`` x (``over`` = each of ``values``), as a tidy table.

    Rows are computed through :func:`tiedattention.sweep.run_sweep` into ``store`` (a temporary directory, removed
    afterwards, when None): a run over an existing store computes only the missing rows. ``df.attrs["summary"]``
    holds the grid shape, the points converged and not, the cells (rows) computed now and skipped, the seconds.
    Raises ParameterError on bad input (before anything is written), SweepInterrupted on Ctrl-C (finished rows are
    kept) and RuntimeError when a row failed (it is not stored; running again retries it).
    """
    from ..cli_common import check_dimension
    from ..problem import validate_alpha
    from ..sweep import run_sweep

    t0 = time.perf_counter()
    alphas = sorted({float(f"{validate_alpha(a, 'alpha'):.10g}") for a in alphas})
    if not alphas:
        raise ParameterError("alpha", "needs at least one value")
    values = check_over(problem, over, values)
    check_dimension(d)
    if not (math.isfinite(train_zero) and train_zero > 0):
        raise ParameterError("train-zero", f"must be > 0 (got {train_zero})")
    for v in values:  # a target that needs d says so here, before any store exists
        problem.with_options(**{over: v}).task.target.measure(theory_dimension(problem, d))
    cells = phase_cells(problem, alphas, over, values, d=d, rs_stability=rs_stability)
    spec = common.spec_of(f"phase-{over}", cells)
    temporary = tempfile.TemporaryDirectory(prefix="tiedattention-phase-") if store is None else None
    with temporary or contextlib.nullcontext(str(store)) as root:
        summary = run_sweep(spec, Path(root), executor=executor, max_workers=workers, progress=progress)
        if summary.failures:
            by_key = {c.key: c for c in cells}
            lines = [f"{over} = {by_key[k].params[over]}: {msg}" for k, msg in summary.failures.items()]
            raise RuntimeError(f"{summary.failed} rows failed (run again to retry them):\n  " + "\n  ".join(lines))
        table = summary.table()
    df = _tidy(table, cells, problem, over, values, d, train_zero)
    conv = df["converged"].astype(bool)
    df.attrs["summary"] = {
        "summary": True, "over": over, "grid": [len(values), len(alphas)], "points": int(len(df)),
        "converged": int(conv.sum()), "not_converged": int((~conv).sum()), "cells": summary.total,
        "computed": summary.computed, "skipped": summary.skipped, "store": None if store is None else str(store),
        "train_zero": train_zero, "seconds": time.perf_counter() - t0,
    }
    return df


def _tidy(table: pd.DataFrame, cells: list[Cell], problem: Problem, over: str, values: list[float],
          d: int | None, train_zero: float) -> pd.DataFrame:
    by_key = {row["key"]: row for _, row in table.iterrows()}
    thresholds_cache: dict[str, dict[str, Any]] = {}
    frames = []
    for cell, v in zip(cells, values, strict=True):
        row_problem = problem.with_options(**{over: v})
        opts = row_problem.options()
        records = json.loads(by_key[cell.key]["records"])
        df = pd.DataFrame(records)
        te = np.where(df["converged"].astype(bool), df.get("train_error", np.nan), np.nan).astype(float)
        tkey = json.dumps({k: x for k, x in opts.items() if k != "lam"}, sort_keys=True)  # lambda -> 0+: no lam
        if tkey not in thresholds_cache:
            thresholds_cache[tkey] = threshold_record(row_problem, theory_dimension(row_problem, d))
        df.insert(0, "over", over)
        df.insert(1, "value", float(v))
        for k, val in opts.items():
            df[k] = val
        if d is not None:
            df["d"] = int(d)
        df["train_zero_alpha"] = train_zero_alpha(df["alpha"], te, train_zero)
        for k, val in thresholds_cache[tkey].items():
            df[k] = val
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(["value", "alpha"], kind="stable").reset_index(drop=True)
    return out


def summary_of(df: pd.DataFrame) -> dict[str, Any]:
    """The summary object of a phase table (``df.attrs["summary"]``)."""
    return dict(df.attrs.get("summary", {}))


# --------------------------------------------------------------------------------------------------
# the figure
# --------------------------------------------------------------------------------------------------
def _edges(pos: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around sorted centres: midpoints (geometric on a log axis), the outer ones mirrored."""
    x = np.log(pos) if log else np.asarray(pos, float)
    if len(x) == 1:  # a single row: half a decade (log) or half its size (at least 0.5) either side
        half = 0.5 * math.log(10.0) if log else 0.5 * max(abs(x[0]), 1.0)
        e = np.array([x[0] - half, x[0] + half])
    else:
        mid = 0.5 * (x[1:] + x[:-1])
        e = np.concatenate([[x[0] - (mid[0] - x[0])], mid, [x[-1] + (x[-1] - mid[-1])]])
    return np.exp(e) if log else e


def row_positions(values: Sequence[float]) -> tuple[np.ndarray, bool, float | None]:
    """Where the rows are drawn: (positions, log axis?, position of a zero row or None).

    Positive values go on a log axis at their own value. A row at 0 (lambda = 0, noise = 0) cannot: it is drawn as
    a strip one grid step (the ratio of the two smallest positive values, a decade when there is only one) below
    the smallest positive value and its tick is labelled 0. Only zeros: a linear axis."""
    v = np.asarray(values, float)
    pos_v = v[v > 0]
    if len(pos_v) == 0:
        return v.copy(), False, None
    if len(pos_v) == len(v):
        return v.copy(), True, None
    step = pos_v[1] / pos_v[0] if len(pos_v) > 1 else 10.0
    zero_at = pos_v[0] / step
    return np.where(v > 0, v, zero_at), True, zero_at


def _title(problem_opts: dict[str, Any], over: str, quantity: str) -> str:
    sym = {**_SYMBOLS, "target": "target", "model": "", "task": ""}
    parts = []
    for k in ("target", "noise", "noise_out", "lam", "tokens", "beta", "beta0", "kappa"):
        if k == over:
            continue
        parts.append(f"{sym[k]} = {problem_opts[k]:g}" if k != "target" else str(problem_opts[k]))
    parts.append(f"{problem_opts['model']}, {problem_opts['task']}")
    return f"{quantity} (state evolution) over α and {_SYMBOLS[over]}\n" + ", ".join(parts)


def draw_phase(df: pd.DataFrame, quantity: str = "test_error", contours: int = 5):
    """The heatmap of ``quantity`` over (alpha, row value) from a :func:`phase_diagram` table, with labelled contours
    and the physics overlays (see the module docstring); points that did not converge are masked (grey), cells whose
    RS solution is unstable (``rs_stable`` false) hatched. Returns the matplotlib Figure."""
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator, NullLocator

    plt = common.pyplot()
    over = str(df["over"].iloc[0])
    alphas = np.array(sorted(df["alpha"].unique()), float)
    values = np.array(sorted(df["value"].unique()), float)
    pos, log_y, zero_at = row_positions(values)
    ia = {a: j for j, a in enumerate(alphas)}
    iv = {v: i for i, v in enumerate(values)}
    z = np.full((len(values), len(alphas)), np.nan)
    unstable = np.zeros_like(z, bool)
    for r in df.itertuples(index=False):
        i, j = iv[r.value], ia[r.alpha]
        val = getattr(r, quantity, np.nan)
        if bool(r.converged) and val is not None and np.isfinite(float(val)):
            z[i, j] = float(val)
        if "rs_stable" in df.columns and r.rs_stable is not None and not pd.isna(r.rs_stable):
            unstable[i, j] = not bool(r.rs_stable)
    zm = np.ma.masked_invalid(z)
    xe, ye = _edges(alphas, True), _edges(pos, log_y)

    fig, ax = plt.subplots(figsize=(6.6, 4.8))
    ax.grid(False)
    ax.set_facecolor("0.8")
    mesh = ax.pcolormesh(xe, ye, zm, cmap="viridis", shading="flat")
    fig.colorbar(mesh, ax=ax, label=quantity)
    if len(alphas) > 1 and len(values) > 1 and zm.count() > 3 and np.nanmax(z) > np.nanmin(z):
        try:
            cs = ax.contour(alphas, pos, zm, levels=MaxNLocator(contours).tick_values(np.nanmin(z), np.nanmax(z)),
                            colors="white", linewidths=0.7, alpha=0.9)
            ax.clabel(cs, fmt="%.3g", fontsize=7)
        except (ValueError, TypeError):  # too few valid points for a contour: the heatmap alone
            pass
    handles = []
    rows = df.drop_duplicates("value").set_index("value").loc[values]
    tz = rows["train_zero_alpha"].to_numpy(float)
    if np.isfinite(tz).any():
        level = df.attrs.get("summary", {}).get("train_zero", TRAIN_ZERO)
        (h,) = ax.plot(tz, pos, "o-", color="tab:red", ms=3.5, lw=1.2,
                       label=f"train error leaves zero (> {level:g}) at this {_SYMBOLS[over]}")
        handles.append(h)
    for col, style, label in (("interpolation_alpha", "--", "interpolation threshold, λ → 0+"),
                              ("perfect_recovery_alpha", ":", "perfect recovery, λ → 0+")):
        th = rows[col].to_numpy(float)
        if not np.isfinite(th).any():
            continue
        kw = {"color": "white", "label": label}
        if over == "lam":  # the lambda -> 0+ value does not depend on the row: the limit the bottom rows approach
            h = ax.axvline(th[np.isfinite(th)][0], ls=style, lw=1.3, **kw)
        else:
            (h,) = ax.plot(th, pos, style, lw=1.5, **kw)
        handles.append(h)
    if unstable.any():
        for i, j in zip(*np.nonzero(unstable), strict=True):
            ax.add_patch(Rectangle((xe[j], ye[i]), xe[j + 1] - xe[j], ye[i + 1] - ye[i], fill=False, hatch="///",
                                   edgecolor="0.15", lw=0.0))
        handles.append(Patch(fill=False, hatch="///", edgecolor="0.15", label="RS unstable"))
    masked = np.ma.getmaskarray(zm)
    if masked.any():
        handles.append(Patch(color="0.8", label=f"not converged ({int(masked.sum())})"))
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(ye[0], ye[-1])
    if len(values) <= 12:  # few rows: a tick at each row, labelled with its value
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_yticks(pos, [f"{v:g}" for v in values])
    elif zero_at is not None:  # many: the axis's own ticks, and the zero row's
        ticks = [t for t in ax.get_yticks() if ye[0] <= t <= ye[-1] and t > zero_at * 1.5]
        ax.set_yticks([zero_at, *ticks], ["0", *[f"{t:g}" for t in ticks]])
    if zero_at is not None:
        ax.axhline(math.sqrt(zero_at * values[values > 0][0]), color="k", lw=0.8)
    ax.set_xlabel("α = n/d²")
    ax.set_ylabel(f"{_SYMBOLS[over]} ({over})")
    ax.set_title(_title(df.iloc[0].to_dict(), over, quantity), fontsize=8.5)
    if handles:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=7,
                  facecolor="0.6", edgecolor="0.6", framealpha=1.0)  # grey: the white lines show
    fig.tight_layout()
    return fig


def write_outputs(df: pd.DataFrame, out: str | Path, quantity: str = "test_error") -> list[Path]:
    """The figure at ``out`` (format from its suffix) and the table as ``out`` with suffix .parquet (atomically,
    :func:`tiedattention.reproduce.curves.write_figure_and_table`)."""
    from .curves import write_figure_and_table

    fig = draw_phase(df, quantity)
    data = df.copy()
    for col in data.columns:  # mixed None/bool/float columns (rs_*) as Parquet can type them
        if col == "rs_stable":
            data[col] = data[col].astype("boolean")
        elif data[col].dtype == object and col not in ("over", "target", "model", "task", "phase", "message",
                                                       "quadrature", "threshold_message", "rs_message"):
            data[col] = pd.to_numeric(data[col], errors="coerce")
    return write_figure_and_table(fig, data, out)
