"""Figure 3: factorised vs direct (ridge) student, each at its best lambda per alpha, and the threshold
diagram vs the target rank kappa0.

Setting (a, b): MP target kappa0 = 0.05 (a low-rank target), Delta = 0.05, T = 2, beta = beta0 = 1, seq2lab.
For each alpha and each student the state evolution is solved on a grid of lambda and the lambda with the
lowest test error is kept; the simulations (second stage) run at that lambda.
(c) thresholds in alpha_bar units (THEORY.md section 4): Bayes-optimal perfect recovery, perfect recovery of
the factorised (minimum nuclear norm) and direct students, and the interpolation threshold (Delta -> 0+ closed
form, and Delta = 0.05 from the SE).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem import alpha_bar
from . import common
from .common import Sizes

TITLE = "factorised vs direct at the best lambda (MP kappa0=0.05, Delta=0.05), threshold diagram vs kappa0"
KAPPA0 = 0.05
NOISE = 0.05
MODELS = ("factorized", "direct")
PARAMS = {
    "quick": {"alphas": list(np.geomspace(0.01, 1.0, 9)), "sim_alphas": [0.02, 0.08, 0.2, 0.5],
              "lams": [1e-3, 1e-2, 1e-1, 1.0], "d": 60, "seeds": 2,
              "kappa0s": list(np.linspace(0.01, 0.99, 50)), "kappa0s_noisy": [0.05, 0.2, 0.4, 0.6, 0.8, 0.95]},
    "full": {"alphas": list(np.geomspace(0.005, 2.0, 30)), "sim_alphas": [0.01, 0.02, 0.05, 0.08, 0.12, 0.2, 0.35,
                                                                          0.5, 1.0],
             "lams": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0], "d": 100, "seeds": 8,
             "kappa0s": list(np.linspace(0.005, 0.995, 100)),
             "kappa0s_noisy": [0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _sizes(quick: bool) -> Sizes:
    return common.sizes_of(PARAMS, quick)


def _opts(model: str, lam: float) -> dict:
    return common.options(target=f"mp:{KAPPA0:g}", noise=NOISE, lam=lam, model=model)


def best_lambda(th: pd.DataFrame, model: str) -> pd.DataFrame:
    """Per alpha, the SE point of ``model`` with the lowest test error over the lambda grid (converged only)."""
    t = th[(th["model"] == model) & th["converged"].astype(bool)]
    if t.empty:
        return t
    return t.loc[t.groupby("alpha")["test_error"].idxmin()].sort_values("alpha")


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p = _p(quick)
    cells = [common.threshold_cell(p["kappa0s"], 0.0), common.threshold_cell(p["kappa0s_noisy"], NOISE)]
    for model in MODELS:
        for lam in p["lams"]:
            cells += common.theory_curve_cells(_opts(model, lam), p["alphas"] + p["sim_alphas"])
    th = common.theory_frame(table)
    if th.empty:
        return cells
    for model in MODELS:  # second stage: simulations at the best lambda of the theory
        best = best_lambda(th, model)
        for a in p["sim_alphas"]:
            row = common.select(best, alpha=float(a))
            if len(row):
                cells.append(common.sim_cell(_opts(model, float(row["lam"].iloc[0])), a, _sizes(quick)))
    return cells


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    p = _p(quick)
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for model in MODELS:
        best = best_lambda(th, model)
        best = best.assign(alpha_bar=[alpha_bar(a, 2) for a in best["alpha"]])
        for key in ("test_error", "mse"):
            frames.append(common.theory_points(best, key, f"{model} best", "alpha_bar", key, model=model)
                          .assign(lam=best["lam"].to_numpy()))
            for lam in p["lams"]:
                t = common.select(th, model=model, lam=float(lam))
                t = t.assign(alpha_bar=[alpha_bar(a, 2) for a in t["alpha"]])
                frames.append(common.theory_points(t, key, f"{model} lam={lam:g}", "alpha_bar", key, model=model,
                                                   lam=lam))
            s = common.select(sim, model=model)
            s = s.assign(alpha_bar=[alpha_bar(a, 2) for a in s["alpha"]])
            frames.append(common.sim_points(s, key, f"{model} best", "alpha_bar", key, model=model)
                          .assign(lam=s["lam"].to_numpy()))
    thr = common.threshold_frame(table)
    names = {"bayes_optimal": "Bayes-optimal perfect recovery",
             "perfect_recovery_factorized": "perfect recovery, factorised",
             "perfect_recovery_direct": "perfect recovery, direct",
             "interpolation_noiseless": "interpolation, factorised, Δ → 0+",
             "interpolation_noisy": f"interpolation, factorised, Δ = {NOISE:g}"}
    for col, label in names.items():
        if col in thr.columns:
            t = thr.dropna(subset=[col]).sort_values("kappa0")
            frames.append(pd.DataFrame({"panel": "thresholds", "kind": "theory", "series": label,
                                        "x": t["kappa0"].to_numpy(float), "y": t[col].to_numpy(float),
                                        "y_err": np.nan}))
    return common.concat(frames)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    fig, axes, spare = common.figure(plt, 3, 2.7)
    colors = {"factorized": "C0", "direct": "C1"}
    names = {"factorized": "factorised (PSD, nuclear norm)", "direct": "direct (free S, ridge)"}
    for ax, key in zip(axes[:2], ("test_error", "mse"), strict=True):
        for model in MODELS:
            c = colors[model]
            for lam in _p(quick)["lams"]:
                common.plot_theory(ax, data, key, f"{model} lam={lam:g}", color=c, lw=0.5, alpha=0.3)
            common.plot_theory(ax, data, key, f"{model} best", label=f"theory, {names[model]}", color=c, lw=1.7)
            common.plot_sim(ax, data, key, f"{model} best", label=f"simulation, {names[model]}", color=c,
                            marker="o" if model == "factorized" else "s")
        ax.plot([], [], color="0.5", lw=0.5, alpha=0.5, label="theory at each fixed λ of the grid")
        ax.set_xscale("log")
        ax.set_xlabel("ᾱ = α(T² + T − 2)/2  (= 2n/d² at T = 2)")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("test error  E‖y − ŷ‖²_F\n(noisy labels, per sequence)")
    axes[0].set_title("(a) test error at the best λ per α", loc="left")
    axes[1].set_ylabel("MSE on S  (1/d)‖Ŝ − S0‖²_F\n(Q0 = 1 + κ0)")
    axes[1].set_title("(b) MSE on S at the same λ", loc="left")
    ax = axes[2]
    styles = [("Bayes-optimal perfect recovery", "k", "-"), ("perfect recovery, factorised", "C0", "-"),
              ("perfect recovery, direct", "C1", "-"), ("interpolation, factorised, Δ → 0+", "C2", "--"),
              (f"interpolation, factorised, Δ = {NOISE:g}", "C2", ":")]
    for label, c, ls in styles:
        sub = data[(data["panel"] == "thresholds") & (data["series"] == label)].sort_values("x")
        if len(sub):
            mk = "o" if ls == ":" else None
            ax.plot(sub["x"], sub["y"], color=c, ls=ls, marker=mk, ms=3, label=label)
    ax.axvline(KAPPA0, color="0.5", lw=0.8, ls="-.", label=f"κ0 = {KAPPA0:g} of (a), (b)")
    ax.set_xlabel("target rank fraction κ0 = p0/d  (MP target)")
    ax.set_ylabel("threshold ᾱ = α(T² + T − 2)/2\n(λ → 0+)")
    ax.set_title("(c) threshold diagram (SE / closed forms)", loc="left")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 0.55)
    common.legend_in(spare, ("(a), (b)", axes[0]), ("(c)", ax))
    common.suptitle(fig, f"Factorised vs direct student: MP κ0 = {KAPPA0:g}, Δ = {NOISE:g}, T = 2")
    grid = ", ".join(f"{x:g}" for x in _p(quick)["lams"])
    extra = f", each at the λ that minimises the SE test error on the grid λ ∈ {{{grid}}}"
    common.caption(fig, common.sim_caption(_sizes(quick), extra), y=-0.01)
    fig.tight_layout()
    return fig
