"""Figure 4: seq2seq (label Y = y X, attention with identity values) vs seq2lab (label = the attention matrix).

Setting: MP target kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2, beta = beta0 = 1. The seq2seq loss is
divided by d, and (1/d)||(A - A_hat) X||_F^2 -> ||A - A_hat||_F^2, so both tasks have the same state evolution
(THEORY.md section 1); the simulations of the two tasks differ at finite d only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import common
from .common import Sizes

TITLE = "seq2seq vs seq2lab (MP kappa0=0.5, Delta=0.5, lambda=0.01, T=2)"
TASKS = ("seq2lab", "seq2seq")
PARAMS = {
    "quick": {"alphas": list(np.geomspace(0.03, 4.0, 10)), "sim_alphas": [0.05, 0.15, 0.5, 1.5, 4.0],
              "d": 40, "seeds": 2},
    "full": {"alphas": list(np.geomspace(0.01, 8.0, 30)), "sim_alphas": [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0],
             "d": 100, "seeds": 8},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _sizes(quick: bool) -> Sizes:
    return common.sizes_of(PARAMS, quick)


def _opts(task: str) -> dict:
    return common.options(target="mp:0.5", noise=0.5, lam=0.01, task=task)


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p = _p(quick)
    # one SE curve: it is the same for both tasks (seq2seq's SE is seq2lab's when there is no output noise)
    cells = common.theory_curve_cells(_opts("seq2lab"), p["alphas"] + p["sim_alphas"])
    for task in TASKS:
        cells += [common.sim_cell(_opts(task), a, _sizes(quick)) for a in p["sim_alphas"]]
    return cells


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for key in ("test_error", "train_error", "mse"):
        frames.append(common.theory_points(th, key, "both tasks", "alpha", key))
        for task in TASKS:
            frames.append(common.sim_points(common.select(sim, task=task), key, task, "alpha", key, task=task))
    return common.concat(frames)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    fig, axes, spare = common.figure(plt, 3, 2.7)
    ylabels = {
        "test_error": "test error (noisy labels)\nseq2lab: E‖y − ŷ‖²_F\nseq2seq: E‖Y − ŷX‖²_F / d",
        "train_error": "train error at the minimiser\n(same normalisations)",
        "mse": "MSE on S  (1/d)‖Ŝ − S0‖²_F",
    }
    titles = {"test_error": "(a) test error", "train_error": "(b) train error", "mse": "(c) estimation error of S0"}
    for ax, key in zip(axes, ylabels, strict=True):
        common.plot_theory(ax, data, key, "both tasks", label="theory (same SE for both tasks)", color="k")
        common.plot_sim(ax, data, key, "seq2lab", label="simulation, seq2lab", color="C0", marker="o")
        common.plot_sim(ax, data, key, "seq2seq", label="simulation, seq2seq", color="C3", marker="D", xshift=1.07)
        ax.set_xscale("log")
        ax.set_xlabel("sample complexity α = n/d²")
        ax.set_ylabel(ylabels[key])
        ax.set_title(titles[key], loc="left")
        ax.set_ylim(bottom=0)
    common.legend_in(spare, (None, axes[0]))
    common.suptitle(fig, "seq2seq vs seq2lab: factorised student, MP κ0 = 0.5, Δ = 0.5, λ = 0.01, T = 2")
    common.caption(fig, common.sim_caption(_sizes(quick), "; seq2seq points drawn at 1.07 α for legibility"))
    fig.tight_layout()
    return fig
