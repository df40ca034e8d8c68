"""Figure 8: emergence -- each recovered mode of a power-law target is a step (a kink) of the test error
(issue 6; docs/theory/scaling.md sections 3-4).

Same setting and the same cells as fig7 (power law gamma = 1.25, Delta = 0.5, fixed lambda, T = 2, finite d):

(a) test error vs alpha on the fine SE grid, noisy and clean labels, with the alpha at which each target mode
    becomes a recovered outlier marked (dotted verticals, :func:`.powerlaw.detachment_alphas`); simulations;
(b) the excess test error e_test - e_0 (log-log), theory against the SE's own e_0 and simulations against theirs
    (paired: min_c e(c S0) on the same test sequences, see :mod:`.powerlaw`);
(c) the local exponent -d log(e_test - e_0)/d log alpha of the SE curve: each detachment shows as a change of
    slope. Its size quantifies how sharp an emergence step is at this d (at d = infinity in the scaling
    variables it is a kink, docs/theory/scaling.md section 3).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import common, fig7
from . import powerlaw as pl

TITLE = "emergence: test-error steps at each mode's detachment (power law gamma=1.25)"
MARKS = 6


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    return fig7.build(quick, table)


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    p = fig7._p(quick)
    d = int(p["d"])
    se, sims = fig7.se_records(table), fig7.sim_records(table)
    ok = [r for r in se if r.get("converged") and r.get("phase") == "regular"]
    frames = []
    a = np.array([r["alpha"] for r in ok])
    for key in ("test_error", "test_error_clean"):
        frames.append(pd.DataFrame({"panel": "error", "kind": "theory", "series": key, "x": a,
                                    "y": [r[key] for r in ok], "y_err": np.nan}))
    exc = np.array([r["excess"] for r in ok])
    frames.append(pd.DataFrame({"panel": "excess", "kind": "theory", "series": "excess", "x": a, "y": exc,
                                "y_err": np.nan}))
    xs, slope = pl.local_slope(a, exc)
    frames.append(pd.DataFrame({"panel": "slope", "kind": "theory", "series": "local exponent", "x": xs,
                                "y": slope, "y_err": np.nan}))
    marks = pl.detachment_alphas(ok, fig7.N_MODES)
    frames.append(pd.DataFrame({"panel": "marks", "kind": "theory", "series": [f"mode {i}" for i in marks],
                                "x": list(marks.values()), "y": np.nan, "y_err": np.nan, "mode": list(marks)}))
    for summary, _seeds in sims:
        x = float(summary["alpha"])
        for key in ("test_error", "test_error_clean", "excess"):
            panel = "excess" if key == "excess" else "error"
            frames.append(pd.DataFrame({
                "panel": [panel], "kind": "simulation", "series": [key], "x": [x],
                "y": [float(summary[f"{key}_mean"])], "y_err": [float(summary[f"{key}_sem"])], "d": d,
                "seeds": int(p["seeds"]), "converged_fraction": float(summary["converged"])}))
    return common.concat(frames)


def _marks(ax, data: pd.DataFrame, label: bool = False) -> None:
    m = data[data["panel"] == "marks"].sort_values("x")
    last, low = -math.inf, False
    for k, (_, row) in enumerate(m.iterrows()):
        if k >= MARKS or not math.isfinite(row["x"]):
            continue
        ax.axvline(row["x"], color="0.55", ls=":", lw=0.9, label="detachment of mode i (SE)" if label and k == 0
                   else None)
        # a number closer than a factor 1.6 in α to the previous one goes a line lower (they would touch)
        low = (not low) and row["x"] < 1.6 * last
        last = row["x"]
        ax.text(row["x"], 0.94 if low else 1.0, f" {int(row['mode'])}", transform=ax.get_xaxis_transform(),
                fontsize=common.SMALL_PT, color="0.35", va="top", ha="left")


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    p = fig7._p(quick)
    fig, axes, spare = common.figure(plt, 3, 2.7)
    ax = axes[0]
    for key, c, lab in (("test_error", "C0", "noisy labels"), ("test_error_clean", "C1", "clean labels")):
        common.plot_theory(ax, data, "error", key, label=f"SE, {lab}", color=c)
        common.plot_sim(ax, data, "error", key, label=f"simulation, {lab}", color=c)
    _marks(ax, data, label=True)
    ax.set_xscale("log")
    err = data[data["panel"] == "error"]
    top = float((err["y"] + err["y_err"].fillna(0.0)).max()) if len(err) else math.nan
    # headroom above the curves for the strip at the top where the detachments are numbered
    ax.set_ylim(0, 1.25 * top if math.isfinite(top) and top > 0 else None)
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("test error  E‖y − ŷ‖²_F\n(per sequence, T² entries)")
    ax.set_title("(a) learning curve, detachments marked", loc="left")
    ax = axes[1]
    common.plot_theory(ax, data, "excess", "excess", label="SE: e_test − e_0(SE)", color="C0")
    common.plot_sim(ax, data, "excess", "excess", label="simulation: e_test − min_c e(c S0), paired", color="C3")
    _marks(ax, data)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("excess test error  e_test − e_0\n(noisy labels)")
    ax.set_title("(b) excess over the α → ∞ floor e_0", loc="left")
    ax = axes[2]
    common.plot_theory(ax, data, "slope", "local exponent", label="SE: −d log(e − e_0)/d log α", color="C2",
                       marker=".", ms=4)
    _marks(ax, data)
    ax.set_xscale("log")
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("local exponent of the excess error")
    ax.set_title("(c) local exponent of the excess", loc="left")
    common.legend_in(spare, ("(a)", axes[0]), ("(b)", axes[1]), ("(c)", ax))
    common.suptitle(fig, f"Emergence: power-law target θ_i ∝ i^(-1.25), d = {p['d']}, Δ = 0.5, λ = {p['lam']:g}, "
                    "T = 2 (same cells as fig7)")
    common.caption(fig, f"points: simulations, {common.SOLVER_NAMES['prox']}, d = {p['d']}, mean ± s.e. over "
                   f"{p['seeds']} seeds; lines: finite-d state evolution. Detachment α of mode i: where the SE "
                   "first lists it as a recovered outlier (geometric midpoint of the bracketing grid points). "
                   "The SE assumes Gaussian logits; for γ > 1/2 the top modes carry O(1) of the logit variance, "
                   "so absolute test errors of simulations sit ~0.01 above it; excesses are over each route's "
                   "own e_0.", y=-0.01)
    fig.tight_layout()
    return fig
