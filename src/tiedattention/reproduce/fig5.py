"""Figure 5: temperature, beta = beta0 in {0.5, 1, 2} (student and target at the same temperature).

Setting: MP target kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2, seq2lab, factorised student.
Simulations use the proximal solver on S, whose zero eigenvalues are exact (the rank panel; see fig1).

At beta = beta0 = 2 the replica-symmetric SE fixed point is unstable (de Almeida-Thouless: regular replicon
AT > 1) for alpha ~ 0.68-0.97, where the SE overestimates the ERM (docs/theory/stability.md, summary item 1;
docs/theory/state_evolution.md, "beta = beta0 = 2"). That curve is computed with its RS stability
(``rs_stability``, the fields of ``theory --rs-stability``) and extra theory points inside the stretch
(``rs_alphas``); the tidy data carries ``rs_at``, ``rs_at_error``, ``rs_switching``, ``rs_stable``, and every panel
draws the points with AT > 1 as crosses on a dashed stretch of the beta = 2 line. Quick mode (2026-12-01): AT = 1.43
+- 0.39 at alpha = 0.75, 1.106 +- 0.011 at 0.87, 1.093 +- 0.009 at 0.95; 0.994 +- 0.014 at 0.64 and 0.778 +- 0.018
at 1.0. The prox also switches branches for 0.04-4.7 % of the sequences at alpha = 0.1-1 (``rs_switching`` > 0, so
``rs_stable`` is false there too: "replica symmetry not guaranteed"), which the SE survives where the ERM was
measured (alpha = 0.5: 0.3880 against 0.3866 +- 0.0060 at d = 100); the figure marks the AT > 1 stretch only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import common
from .common import Sizes

TITLE = "temperature beta = beta0 in {0.5, 1, 2} (MP kappa0=0.5, Delta=0.5, lambda=0.01, T=2)"
BETAS = (0.5, 1.0, 2.0)
SOLVER = "prox"
#: the curve whose RS stability is computed. The other two are far from AT = 1 (their quick curves through
#: theory_curve with rs_stability, 2026-12-01: beta = 0.5 at most 0.531 at alpha = 0.10-0.19, beta = 1 at most 0.643
#: at 0.19-0.2, no prox branch switching, rs_stable true at every point), so their cells are left as they were
RS_BETA = 2.0
PARAMS = {
    # rs_alphas: theory only, inside the AT > 1 stretch of beta = 2 (alpha ~ 0.68-0.97), on that curve only
    "quick": {"alphas": list(np.geomspace(0.03, 4.0, 9)), "sim_alphas": [0.05, 0.2, 1.0, 4.0], "d": 40, "seeds": 2,
              "rs_alphas": [0.75, 0.87, 0.95]},
    "full": {"alphas": list(np.geomspace(0.01, 8.0, 30)), "sim_alphas": [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0],
             "d": 100, "seeds": 8, "rs_alphas": [0.75, 0.87, 0.95]},
}
#: the RS stability fields the tidy data carries (theory rows of the beta = 2 curve; null elsewhere)
RS_COLUMNS = ("rs_at", "rs_at_error", "rs_switching", "rs_stable")
UNSTABLE_LABEL = "RS unstable (AT > 1)"


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _sizes(quick: bool) -> Sizes:
    return common.sizes_of(PARAMS, quick)


def _opts(beta: float) -> dict:
    return common.options(target="mp:0.5", noise=0.5, lam=0.01, beta=beta, beta0=beta)


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p = _p(quick)
    cells = []
    for b in BETAS:
        rs = b == RS_BETA
        cells += common.theory_curve_cells(_opts(b), p["alphas"] + p["sim_alphas"] + (p["rs_alphas"] if rs else []),
                                           rs_stability=rs)
    for b in BETAS:
        cells += [common.sim_cell(_opts(b), a, _sizes(quick), solver=SOLVER) for a in p["sim_alphas"]]
    return cells


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for b in BETAS:
        t, s = common.select(th, beta=float(b)), common.select(sim, beta=float(b))
        for key in ("test_error", "mse", "rank"):
            frames.append(common.theory_points(t, key, f"beta={b:g}", "alpha", key, carry=RS_COLUMNS, beta=b))
            frames.append(common.sim_points(s, key, f"beta={b:g}", "alpha", key, beta=b))
    data = common.concat(frames)
    for k in RS_COLUMNS:  # typed columns (nullable boolean), so that the parquet round-trips
        if k not in data.columns:
            data[k] = None
        data[k] = data[k].astype("boolean") if k == "rs_stable" else pd.to_numeric(data[k], errors="coerce")
    return data


def rs_unstable(sub: pd.DataFrame) -> np.ndarray:
    """Mask of the theory rows whose RS fixed point is AT-unstable (rs_at > 1; null: not computed, not marked)."""
    return common.above(sub, "rs_at", 1.0)


def _plot_theory_rs(ax, data: pd.DataFrame, panel: str, series: str, label: str, color: str) -> None:
    """The theory line of ``series``: solid where RS is stable, dashed on each segment that touches an AT-unstable
    point, and those points as crosses (one legend entry, :data:`UNSTABLE_LABEL`, for the whole figure)."""
    sub = data[(data["panel"] == panel) & (data["series"] == series) & (data["kind"] == "theory")].sort_values("x")
    if sub.empty:
        return
    x, y, bad = sub["x"].to_numpy(float), sub["y"].to_numpy(float), rs_unstable(sub)
    if not bad.any():
        ax.plot(x, y, label=label, color=color)
        return
    dashed = bad[:-1] | bad[1:]  # segment i joins points i and i + 1
    start, labelled = 0, False
    for i in range(1, len(dashed) + 1):  # runs of segments of one style
        if i == len(dashed) or dashed[i] != dashed[start]:
            ls = "--" if dashed[start] else "-"
            lab = label if not dashed[start] and not labelled else None
            labelled |= lab is not None
            ax.plot(x[start:i + 1], y[start:i + 1], ls=ls, color=color, label=lab)
            start = i
    mark = {"marker": "x", "ms": 4.5, "mew": 1.2, "color": color}
    ax.plot(x[bad], y[bad], ls="none", zorder=4, gid="rs_unstable", **mark)
    ax.plot([], [], ls="--", label=UNSTABLE_LABEL, **mark)  # the legend's entry: a dashed line with a cross


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    fig, axes, spare = common.figure(plt, 3, 2.7)
    ylabels = {"test_error": "test error  E‖y − ŷ‖²_F\n(noisy labels, per sequence)",
               "mse": "MSE on S  (1/d)‖Ŝ − S0‖²_F", "rank": "rank fraction of Ŝ\n(1/d)·#{eigenvalues > 0}"}
    titles = {"test_error": "(a) test error", "mse": "(b) estimation error of S0", "rank": "(c) rank of the minimiser"}
    for ax, key in zip(axes, ylabels, strict=True):
        for i, b in enumerate(BETAS):
            c = f"C{i}"
            _plot_theory_rs(ax, data, key, f"beta={b:g}", label=f"theory, β = β0 = {b:g}", color=c)
            common.plot_sim(ax, data, key, f"beta={b:g}", label=f"simulation, β = β0 = {b:g}", color=c)
        ax.set_xscale("log")
        ax.set_xlabel("sample complexity α = n/d²")
        ax.set_ylabel(ylabels[key])
        ax.set_title(titles[key], loc="left")
        ax.set_ylim(bottom=0)
    common.legend_in(spare, (None, axes[0]))
    common.suptitle(fig, "Temperature: factorised student, MP κ0 = 0.5, Δ = 0.5, λ = 0.01, T = 2 (logits scaled by β)")
    common.caption(fig, common.sim_caption(_sizes(quick), solver=SOLVER) + _rs_caption(data), y=-0.01)
    fig.tight_layout()
    return fig


def _rs_caption(data: pd.DataFrame) -> str:
    """What the crosses mean, with the AT values of the marked points (empty where none is marked)."""
    th = data[data["kind"] == "theory"]
    th = th[th["panel"] == th["panel"].iloc[0]] if len(th) else th
    bad = th[rs_unstable(th)].sort_values("x")
    if bad.empty:
        return ""
    ats = ", ".join(f"{r.rs_at:.2f} ± {r.rs_at_error:.2f} at α = {r.x:.2g}" for r in bad.itertuples())
    return (f". Crosses on a dashed stretch: the replica-symmetric SE is unstable (de Almeida–Thouless AT > 1: "
            f"{ats}) and lies above the ERM")
