"""Figure 9: scaling law of the excess test error for a power-law target, with fitted exponents
(issue 6; docs/theory/scaling.md sections 4-6).

Setting: theta_i = C i^{-1.25} (Q0 = 1), Delta = 0.5, T = 2, beta = beta0 = 1, factorised full-width student,
lambda tuned optimally at every n (minimum of the SE test error).

(a) e_test - e_0 against nu = n/d (log-log): the scaling-limit curve (d = infinity at fixed n/d,
    :func:`~tiedattention.theory.scaling.limit_curve`), finite-d SE curves
    (:func:`~tiedattention.theory.scaling.finite_d_curve`), and simulations at the smallest d at the SE's optimal
    lambda (a second stage: the simulations are built from the computed finite-d curve). Each legend entry
    carries the exponent f fitted to that series (excess ~ n^{-f}, 95 % OLS interval) and the derived
    f(gamma) = 1 - 1/(2 gamma). At fixed d the exponent in n equals the one in n/d.
(b) the local exponent -d log(e_test - e_0)/d log n of each SE curve, against f(gamma): the finite-d curves sit
    above it and drift up as k*/d grows; the scaling limit approaches it (section 6 of the doc).

The simulations' excess is over their own e_0 (min_c e(c S0) on the same test sequences, see
:mod:`.powerlaw`): the SE's absolute test errors are offset for power-law targets (non-Gaussian logits).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from . import common
from . import powerlaw as pl

TITLE = "scaling law of the excess test error, power law gamma=1.25, optimal lambda: d = inf, finite d, simulations"
TARGET = "powerlaw:1.25"
GAMMA = 1.25
RULE = "optimal"
PARAMS = {
    "quick": {"nus": list(np.geomspace(20.0, 3e4, 14)), "ds": [60], "fd_nus": [30.0, 60.0, 120.0, 240.0],
              "sim_nus": [30.0, 60.0, 120.0, 240.0], "d": 60, "seeds": 2, "n_test": 6000, "xatol": 0.1},
    "full": {"nus": list(np.geomspace(20.0, 1e5, 30)), "ds": [100, 200, 400],
             "fd_nus": list(np.geomspace(30.0, 3000.0, 12)), "sim_nus": [50.0, 100.0, 200.0, 400.0, 800.0],
             "d": 100, "seeds": 8, "n_test": 20000, "xatol": 0.03},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _f(x: float) -> float:
    return float(f"{x:.10g}")


def _opts(lam: float = 0.01) -> dict:
    return common.options(target=TARGET, noise=0.5, lam=lam)


def _fd_alphas(p: dict, d: int) -> list[float]:
    nus = sorted(set(p["fd_nus"]) | (set(p["sim_nus"]) if d == p["d"] else set()))
    return [_f(nu / d) for nu in nus]


def curve_cells(p: dict) -> list:
    cells = [pl.make_cell(pl.SCALING_CURVE, {**_opts(), "d": 0, "nus": [_f(v) for v in p["nus"]],
                                             "lam_rule": RULE})]
    for d in p["ds"]:
        cells.append(pl.make_cell(pl.SCALING_CURVE, {**_opts(), "d": int(d), "alphas": _fd_alphas(p, d),
                                                     "lam_rule": RULE, "xatol": float(p["xatol"])}))
    return cells


def curves(table: pd.DataFrame | None) -> dict[int, list[dict]]:
    """d (0 = infinity) -> records of its SE scaling curve."""
    out: dict[int, list[dict]] = {}
    for _, cell in common._route_rows(table, pl.SCALING_CURVE).iterrows():
        out[int(cell["d"])] = json.loads(cell["records"])
    return out


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p = _p(quick)
    cells = curve_cells(p)
    fd = curves(table).get(int(p["d"]))
    if fd:  # second stage: simulations at the SE's optimal lambda of each simulated n/d
        for nu in p["sim_nus"]:
            a = _f(nu / p["d"])
            rec = next((r for r in fd if np.isclose(r["alpha"], a, rtol=1e-9) and r["converged"]), None)
            if rec is None:
                continue
            lam = float(f"{rec['lam']:.4g}")
            cells.append(pl.make_cell(pl.SIM_MODES, {**_opts(lam), "alpha": a, "d": int(p["d"]),
                                                     "seeds": int(p["seeds"]), "n_modes": 4,
                                                     "n_test": int(p["n_test"]), "solver": "prox"}))
    return cells


def _fit(x, y) -> dict:
    from ..theory.scaling import fit_exponent

    try:
        return fit_exponent(x, y)
    except ValueError:
        return {"fitted_exponent": math.nan, "fitted_exponent_ci": [math.nan, math.nan]}


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    from ..theory.scaling import parse_lam_rule, predicted_exponent

    p = _p(quick)
    frames = []
    f_pred, regime = predicted_exponent(GAMMA, parse_lam_rule(RULE), d_inf=True)
    for d, recs in sorted(curves(table).items(), key=lambda kv: (kv[0] == 0, kv[0])):
        ok = [r for r in recs if r["converged"] and r["phase"] == "regular" and r["excess"] > 0]
        series = "d=inf" if d == 0 else f"d={d}"
        x = np.array([r["nu"] for r in ok])
        y = np.array([r["excess"] for r in ok])
        fit = _fit(x, y)
        lo, hi = fit["fitted_exponent_ci"]
        extra = {"d": d if d else np.inf, "fitted_exponent": fit["fitted_exponent"], "ci_lo": lo, "ci_hi": hi,
                 "predicted_exponent": f_pred, "regime": regime}
        frames.append(pd.DataFrame({"panel": "excess", "kind": "theory", "series": series, "x": x, "y": y,
                                    "y_err": np.nan, "k_star": [r["k_star"] for r in ok],
                                    "lam": [r.get("lam") if d else r.get("lam_t") for r in ok], **extra}))
        xs, sl = pl.local_slope(x, y)
        frames.append(pd.DataFrame({"panel": "slope", "kind": "theory", "series": series, "x": xs, "y": sl,
                                    "y_err": np.nan, "d": d if d else np.inf}))
    sims = common._route_rows(table, pl.SIM_MODES)
    if len(sims):
        sims = sims.sort_values("alpha")
        x = sims["alpha"].astype(float).to_numpy() * p["d"]
        y = sims["excess_mean"].astype(float).to_numpy()
        fit = _fit(x, y)
        lo, hi = fit["fitted_exponent_ci"]
        frames.append(pd.DataFrame({"panel": "excess", "kind": "simulation", "series": f"sim d={p['d']}", "x": x,
                                    "y": y, "y_err": sims["excess_sem"].astype(float).to_numpy(), "d": p["d"],
                                    "seeds": p["seeds"], "lam": sims["lam"].astype(float).to_numpy(),
                                    "converged_fraction": sims["converged"].astype(float).to_numpy(),
                                    "fitted_exponent": fit["fitted_exponent"], "ci_lo": lo, "ci_hi": hi,
                                    "predicted_exponent": f_pred, "regime": regime}))
    return common.concat(frames)


def _label(sub: pd.DataFrame, name: str) -> str:
    f = float(sub["fitted_exponent"].iloc[0])
    lo, hi = float(sub["ci_lo"].iloc[0]), float(sub["ci_hi"].iloc[0])
    return f"{name}: fitted f = {f:.3f} [{lo:.3f}, {hi:.3f}]" if math.isfinite(f) else name


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    p = _p(quick)
    fig, (ax, axs), spare = common.figure(plt, 2, 3.0, legend_row=0.85, width_ratios=[1.25, 1])
    th = data[(data["panel"] == "excess") & (data["kind"] == "theory")]
    series = sorted(th["series"].unique(), key=lambda s: (s == "d=inf", float(s[2:]) if s != "d=inf" else 0))
    colors = {s: ("k" if s == "d=inf" else f"C{i}") for i, s in enumerate(series)}
    for s in series:
        sub = th[th["series"] == s]
        name = "SE, d = ∞ (scaling limit)" if s == "d=inf" else f"SE, d = {s[2:]}"
        common.plot_theory(ax, data, "excess", s, label=_label(sub, name), color=colors[s],
                           ls="-" if s == "d=inf" else "--")
        common.plot_theory(axs, data, "slope", s, label=name, color=colors[s], ls="-" if s == "d=inf" else "--",
                           marker=".", ms=4)
    sim = data[(data["panel"] == "excess") & (data["kind"] == "simulation")]
    if len(sim):
        s = sim["series"].iloc[0]
        common.plot_sim(ax, data, "excess", s, label=_label(sim, f"simulation, d = {p['d']}"),
                        color=colors.get(f"d={p['d']}", "C3"))
    f_pred = float(data["predicted_exponent"].dropna().iloc[0]) if "predicted_exponent" in data else math.nan
    if math.isfinite(f_pred) and len(th):
        ref = th[th["series"] == "d=inf"]
        if len(ref):
            x0, y0 = float(ref["x"].iloc[len(ref) // 2]), float(ref["y"].iloc[len(ref) // 2])
            xx = np.geomspace(float(th["x"].min()), float(th["x"].max()), 50)
            ax.plot(xx, 0.6 * y0 * (xx / x0) ** (-f_pred), color="0.5", ls=":", lw=1.2,
                    label=f"predicted f(γ) = 1 − 1/(2γ) = {f_pred:.3f} (slope)")
        axs.axhline(f_pred, color="0.5", ls=":", lw=1.2, label=f"f(γ) = {f_pred:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n/d  (sequences per dimension; n = α d²)")
    ax.set_ylabel("excess test error  e_test − e_0\n(noisy labels)")
    ax.set_title("(a) excess test error, optimal λ at every n", loc="left")
    axs.set_xscale("log")
    axs.set_xlabel("n/d")
    axs.set_ylabel("local exponent  −d log(e − e_0)/d log n")
    axs.set_title("(b) local exponents → f(γ) as d → ∞", loc="left")
    common.legend_in(spare, ("(a)", ax), loc="upper left", bbox_to_anchor=(0.0, 1.0))
    common.legend_in(spare, ("(b)", axs), loc="upper left", bbox_to_anchor=(0.62, 1.0))
    common.suptitle(fig, "Scaling law: power-law target θ_i ∝ i^(-1.25) (Q0 = 1), Δ = 0.5, T = 2, factorised student")
    common.caption(fig, f"points: simulations, {common.SOLVER_NAMES['prox']}, d = {p['d']}, at the SE's optimal "
                   f"λ, mean ± s.e. over {p['seeds']} seeds, excess over the simulation's own e_0 = min_c e(c S0) "
                   "on the same test sequences; lines: state evolution (finite d, and d → ∞ at fixed n/d). "
                   "Fitted exponents: least squares of log excess on log n over each series (95 % OLS interval, "
                   "which ignores the correlated emergence steps).", y=-0.01)
    fig.tight_layout()
    return fig
