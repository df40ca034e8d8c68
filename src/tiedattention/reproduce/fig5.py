"""Figure 5: temperature, beta = beta0 in {0.5, 1, 2} (student and target at the same temperature).

Setting: MP target kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2, seq2lab, factorised student.
Simulations use the proximal solver on S, whose zero eigenvalues are exact (the rank panel; see fig1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import common
from .common import Sizes

TITLE = "temperature beta = beta0 in {0.5, 1, 2} (MP kappa0=0.5, Delta=0.5, lambda=0.01, T=2)"
BETAS = (0.5, 1.0, 2.0)
SOLVER = "prox"
PARAMS = {
    "quick": {"alphas": list(np.geomspace(0.03, 4.0, 9)), "sim_alphas": [0.05, 0.2, 1.0, 4.0], "d": 40, "seeds": 2},
    "full": {"alphas": list(np.geomspace(0.01, 8.0, 30)), "sim_alphas": [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0],
             "d": 100, "seeds": 8},
}


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
        cells += common.theory_curve_cells(_opts(b), p["alphas"] + p["sim_alphas"])
    for b in BETAS:
        cells += [common.sim_cell(_opts(b), a, _sizes(quick), solver=SOLVER) for a in p["sim_alphas"]]
    return cells


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for b in BETAS:
        t, s = common.select(th, beta=float(b)), common.select(sim, beta=float(b))
        for key in ("test_error", "mse", "rank"):
            frames.append(common.theory_points(t, key, f"beta={b:g}", "alpha", key, beta=b))
            frames.append(common.sim_points(s, key, f"beta={b:g}", "alpha", key, beta=b))
    return common.concat(frames)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    fig, axes, spare = common.figure(plt, 3, 2.7)
    ylabels = {"test_error": "test error  E‖y − ŷ‖²_F\n(noisy labels, per sequence)",
               "mse": "MSE on S  (1/d)‖Ŝ − S0‖²_F", "rank": "rank fraction of Ŝ\n(1/d)·#{eigenvalues > 0}"}
    titles = {"test_error": "(a) test error", "mse": "(b) estimation error of S0", "rank": "(c) rank of the minimiser"}
    for ax, key in zip(axes, ylabels, strict=True):
        for i, b in enumerate(BETAS):
            c = f"C{i}"
            common.plot_theory(ax, data, key, f"beta={b:g}", label=f"theory, β = β0 = {b:g}", color=c)
            common.plot_sim(ax, data, key, f"beta={b:g}", label=f"simulation, β = β0 = {b:g}", color=c)
        ax.set_xscale("log")
        ax.set_xlabel("sample complexity α = n/d²")
        ax.set_ylabel(ylabels[key])
        ax.set_title(titles[key], loc="left")
        ax.set_ylim(bottom=0)
    common.legend_in(spare, (None, axes[0]))
    common.suptitle(fig, "Temperature: factorised student, MP κ0 = 0.5, Δ = 0.5, λ = 0.01, T = 2 (logits scaled by β)")
    common.caption(fig, common.sim_caption(_sizes(quick), solver=SOLVER), y=-0.01)
    fig.tight_layout()
    return fig
