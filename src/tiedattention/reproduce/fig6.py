"""Figure 6: the number of tokens T in {2, 3, 5}, against alpha_bar = alpha (T^2 + T - 2)/2.

Each sequence carries (T^2 + T - 2)/2 effective measurements of S, so curves for different T are compared at
equal alpha_bar. Setting: MP target kappa0 = 0.5, Delta = 0.5, lambda = 0.01, beta = beta0 = 1, seq2lab.

The SE channel for T >= 3 is a quasi-Monte Carlo integral (scrambled Sobol' points); quick mode uses fewer
points (2^10 x 2 for T = 3, 2^9 x 2 for T = 5, vs 2^12 x 4 in full mode) and only a few alphas. Where the T >= 3
theory is only a few points (joined by straight lines) it is computed at the simulated alpha_bar themselves, so
that every simulation point has its theory value.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem import alpha_from_bar
from . import common
from .common import Sizes

TITLE = "T in {2, 3, 5} against alpha_bar (MP kappa0=0.5, Delta=0.5, lambda=0.01)"
TOKENS = (2, 3, 5)
PARAMS = {
    "quick": {"abars": {2: list(np.geomspace(0.06, 10.0, 9)), 3: [0.3, 1.5, 5.0], 5: [0.3, 0.8, 1.5, 5.0]},
              "sim_abars": [0.3, 1.5, 5.0], "qmc": {3: {"qmc_log2": 10, "replicas": 2},
                                                          5: {"qmc_log2": 9, "replicas": 2}},
              "d": 40, "seeds": 2},
    "full": {"abars": {2: list(np.geomspace(0.02, 16.0, 30)), 3: list(np.geomspace(0.05, 10.0, 10)),
                       5: [0.05, 0.15, 0.3, 0.6, 1.0, 2.0, 5.0, 10.0]},
             "sim_abars": [0.05, 0.15, 0.3, 0.6, 1.0, 2.0, 5.0, 10.0], "qmc": {}, "d": 100, "seeds": 8},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _sizes(quick: bool) -> Sizes:
    return common.sizes_of(PARAMS, quick)


def _opts(T: int) -> dict:
    return common.options(target="mp:0.5", noise=0.5, lam=0.01, tokens=T)


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p = _p(quick)
    cells = []
    for T in TOKENS:
        alphas = [alpha_from_bar(ab, T) for ab in p["abars"][T]]
        # T >= 3 points take minutes: one cell each (parallel, and an interruption loses little)
        cells += common.theory_curve_cells(_opts(T), alphas, chunk=None if T == 2 else 1, **p["qmc"].get(T, {}))
    for T in TOKENS:
        cells += [common.sim_cell(_opts(T), alpha_from_bar(ab, T), _sizes(quick)) for ab in p["sim_abars"]]
    return cells


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for T in TOKENS:
        t, s = common.select(th, tokens=T), common.select(sim, tokens=T)
        t = t.assign(test_per_row=t["test_error"] / T) if len(t) else t
        if len(s):
            s = s.assign(test_per_row_mean=s["test_error_mean"] / T, test_per_row_sem=s["test_error_sem"] / T)
        for key, col in (("mse", "mse"), ("test_per_row", "test_per_row")):
            frames.append(common.theory_points(t, key, f"T={T}", "alpha_bar", col, tokens=T))
            frames.append(common.sim_points(s, key, f"T={T}", "alpha_bar", col, tokens=T))
    return common.concat(frames)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    fig, axes, _ = common.figure(plt, 2, 3.2)
    ylabels = {"mse": "MSE on S  (1/d)‖Ŝ − S0‖²_F",
               "test_per_row": "test error per token  E‖y − ŷ‖²_F / T\n(noisy labels)"}
    titles = {"mse": "(a) estimation error of S0", "test_per_row": "(b) test error per row of the attention matrix"}
    for ax, key in zip(axes, ylabels, strict=True):
        for i, T in enumerate(TOKENS):
            c = f"C{i}"
            common.plot_theory(ax, data, key, f"T={T}", label=f"theory, T = {T}", color=c,
                               marker="." if T > 2 else None, ms=5)
            common.plot_sim(ax, data, key, f"T={T}", label=f"simulation, T = {T}", color=c, xshift=1.06 ** (i - 1))
        ax.set_xscale("log")
        ax.set_xlabel("ᾱ = α(T² + T − 2)/2\n(effective measurements per d²)")
        ax.set_ylabel(ylabels[key])
        ax.set_title(titles[key], loc="left")
        ax.set_ylim(bottom=0)
    axes[0].legend(loc="upper right")
    qmc = ("; T ≥ 3 theory: points at the simulated ᾱ (and 0.8 for T = 5), quasi-Monte Carlo channel with "
           "2¹⁰×2 / 2⁹×2 points") if quick else ""
    qmc += "; simulation points of T = 2 and 5 drawn at ᾱ/1.06 and 1.06ᾱ for legibility"
    common.suptitle(fig, "Sequence length: factorised student, MP κ0 = 0.5, Δ = 0.5, λ = 0.01, β = β0 = 1")
    common.caption(fig, common.sim_caption(_sizes(quick)) + qmc, y=-0.01)
    fig.tight_layout()
    return fig
