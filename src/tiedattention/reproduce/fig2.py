"""Figure 2: test and train error of the factorised student for lambda in {1e-2, 1e-3, 1e-4, 1e-5} and
lambda -> 0+, with the interpolation peak.

Setting: MP target kappa0 = 0.5, Delta = 0.5, T = 2, beta = beta0 = 1, seq2lab, kappa = 1. As lambda -> 0+
the training error is exactly zero below the interpolation threshold alpha_bar_inter (= 0.307 at
Delta = 0.5, i.e. alpha = 0.1535) and the test error peaks there (docs/theory/state_evolution.md).
Theory points where the channel's prox has two local minima on more than ``BRANCH_SWITCH`` of E||g||^2 (the
record's ``err_branch_share``, carried into the tidy data) are marked with open diamonds: there the
replica-symmetric SE is not guaranteed (at lambda = 1e-4, alpha = 0.25 it lies 0.027 above d = 100 training).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import common
from .common import Sizes

TITLE = "test/train error for lambda = 1e-2 ... 1e-5 and lambda -> 0+ (MP kappa0=0.5, Delta=0.5): interpolation peak"
LAMS = (1e-2, 1e-3, 1e-4, 1e-5, 0.0)
PEAK = [0.13, 0.145, 0.15, 0.153, 0.156, 0.16, 0.17]
PARAMS = {
    "quick": {"alphas": list(np.geomspace(0.03, 2.0, 11)) + PEAK, "sim_alphas": [0.05, 0.1, 0.15, 0.3, 1.0],
              "sim_lams": [1e-2, 1e-4], "d": 40, "seeds": 2, "fill": [0.19, 0.215]},
    "full": {"alphas": list(np.geomspace(0.02, 5.0, 30)) + PEAK, "sim_alphas": [0.03, 0.05, 0.1, 0.13, 0.15, 0.18,
                                                                              0.25, 0.5, 1.0, 2.0],
             "sim_lams": [1e-2, 1e-3, 1e-4, 1e-5], "d": 100, "seeds": 8, "fill": []},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _sizes(quick: bool) -> Sizes:
    return common.sizes_of(PARAMS, quick)


def _opts(lam: float) -> dict:
    return common.options(target="mp:0.5", noise=0.5, lam=lam)


def _label(lam: float) -> str:
    return "λ → 0+" if lam == 0 else f"λ = {lam:.0e}".replace("e-0", "e-")


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p = _p(quick)
    cells = [common.threshold_cell([0.5], 0.5)]
    for lam in LAMS:
        cells += common.theory_curve_cells(_opts(lam), list(p["alphas"]) + list(p["sim_alphas"]))
        if p["fill"]:  # a few more points just above the peak, as their own small curve
            cells += common.theory_curve_cells(_opts(lam), p["fill"])
    for lam in p["sim_lams"]:
        cells += [common.sim_cell(_opts(lam), a, _sizes(quick)) for a in p["sim_alphas"]]
    return cells


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for lam in LAMS:
        t, s = common.select(th, lam=float(lam)), common.select(sim, lam=float(lam))
        for key in ("test_error", "train_error"):
            frames.append(common.theory_points(t, key, f"lam={lam:g}", "alpha", key, carry=(common.BRANCH_SHARE,),
                                               lam=lam))
            frames.append(common.sim_points(s, key, f"lam={lam:g}", "alpha", key, lam=lam))
    thr = common.threshold_frame(table)
    if not thr.empty:
        frames.append(pd.DataFrame({"panel": ["threshold"], "kind": "theory", "series": "interpolation",
                                    "x": [float(thr["interpolation_noisy"].iloc[0]) / 2.0], "y": np.nan,
                                    "y_err": np.nan}))
    data = common.concat(frames)
    # a typed column (null on simulation rows and on records without the field), so that the parquet round-trips
    share = data[common.BRANCH_SHARE] if common.BRANCH_SHARE in data.columns else np.nan
    data[common.BRANCH_SHARE] = pd.to_numeric(share, errors="coerce")
    return data


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    fig, axes, spare = common.figure(plt, 2, 3.1, legend_row=0.75)
    thr = data[data["panel"] == "threshold"]["x"]
    switching = False
    for ax, key in zip(axes, ("test_error", "train_error"), strict=True):
        for i, lam in enumerate(LAMS):
            c = "k" if lam == 0 else f"C{i}"
            common.plot_theory(ax, data, key, f"lam={lam:g}", label=f"theory, {_label(lam)}", color=c,
                               ls="--" if lam == 0 else "-", lw=1.1 if lam == 0 else 1.3)
            switching |= common.mark_switching(ax, data, key, f"lam={lam:g}", color=c)
            common.plot_sim(ax, data, key, f"lam={lam:g}", label=f"simulation, {_label(lam)}", color=c)
        if len(thr):
            ax.axvline(thr.iloc[0], color="0.3", ls=":", lw=1.0,
                       label=f"interpolation threshold (λ → 0+), α = {thr.iloc[0]:.4f}")
        ax.set_xscale("log")
        ax.set_xlabel("sample complexity α = n/d²")
    axes[0].set_ylabel("test error  E‖y − ŷ‖²_F\n(noisy labels, per sequence)")
    axes[0].set_title("(a) test error: the peak at the\ninterpolation threshold", loc="left")
    axes[1].set_ylabel("train error  (1/n)Σ‖y − ŷ‖²_F\nat the minimiser")
    axes[1].set_title("(b) train error: exactly 0 below the\nthreshold as λ → 0+", loc="left")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    if switching:  # one legend entry for the diamonds of every curve
        axes[1].plot([], [], color="0.3", label=common.SWITCHING_LABEL, **common.SWITCH_MARK)
    # under the panels: with the four simulated λ of full mode a legend in (b) covered points
    common.legend_in(spare, (None, axes[1]), loc="upper left", ncol=3)
    common.suptitle(fig, "Factorised student, MP κ0 = 0.5, Δ = 0.5, T = 2, β = β0 = 1")
    common.caption(fig, common.sim_caption(_sizes(quick)) + (common.switching_caption() if switching else ""), y=-0.01)
    fig.tight_layout()
    return fig
