"""Figure 10: decomposition of the excess test error (and of the MSE on S) into E_over, E_under, E_approx and
E_mismatch for a power-law target (issue 6; docs/theory/decomposition.md).

Same setting as fig7 (power law gamma = 1.25, Delta = 0.5, fixed lambda, T = 2, finite d):

(a) the parts of e_test - e_0 (noisy labels) from the SE
    (:func:`~tiedattention.theory.decomposition.decomposition_curve`; they add up to e_test - e_0 exactly)
    against their finite-d estimators from the trained S_hat of fig7's simulations
    (:func:`~tiedattention.theory.decomposition.estimate_record`, with the recovered outliers counted as the
    detached eigenvalues of S_hat, :func:`.powerlaw.count_detached`);
(b) the same for the MSE on S, (1/d)||S_hat - S0||^2 = mse_over + mse_under + mse_approx + mse_mismatch.

As alpha grows E_under falls (modes are recovered) and E_over falls (the noise bulk is cut); E_approx is the
error left along the recovered outliers. E_mismatch = e(c_inf S0) - e_0 is 0 here: the noisy-label test error
with the matched loss saturates at its minimum on the ray.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from . import common, fig7
from . import powerlaw as pl

TITLE = "error decomposition E_over / E_under / E_approx / E_mismatch (power law gamma=1.25)"
PARTS = ("over", "under", "approx", "mismatch")
COLORS = {"over": "C3", "under": "C0", "approx": "C2", "mismatch": "C4"}
NAMES = {"over": "E_over (bulk / noise fitted)", "under": "E_under (modes not recovered, shrunk)",
         "approx": "E_approx (along recovered outliers)", "mismatch": "E_mismatch (saturation off the minimum)"}
PARAMS = {
    "quick": {"alphas": [0.05, 0.1, 0.3, 1.0, 3.0]},
    "full": {"alphas": list(np.geomspace(0.01, 10.0, 30))},
}


def _alphas(quick: bool) -> list[float]:
    p7 = fig7._p(quick)
    return sorted({float(f"{a:.10g}") for a in list(common.mode(PARAMS, quick)["alphas"]) + list(p7["sim_alphas"])})


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p7 = fig7._p(quick)
    cells = [pl.make_cell(pl.DECOMPOSITION, {**fig7._opts(quick), "d": int(p7["d"]), "alphas": _alphas(quick)})]
    return cells + [c for c in fig7.build(quick, table) if c.route == pl.SIM_MODES]


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    p7 = fig7._p(quick)
    recs = []
    for _, cell in common._route_rows(table, pl.DECOMPOSITION).iterrows():
        recs.extend(json.loads(cell["records"]))
    ok = sorted([r for r in recs if r.get("converged")], key=lambda r: r["alpha"])
    a = np.array([r["alpha"] for r in ok])
    frames = []
    for panel, prefix, total in (("error", "E_", "excess"), ("mse", "mse_", "mse")):
        for k in PARTS:
            frames.append(pd.DataFrame({"panel": panel, "kind": "theory", "series": k, "x": a,
                                        "y": [r.get(f"{prefix}{k}", np.nan) for r in ok], "y_err": np.nan}))
        y = [r["e_test"] - r["e_0"] for r in ok] if panel == "error" else [r["mse"] for r in ok]
        frames.append(pd.DataFrame({"panel": panel, "kind": "theory", "series": total, "x": a, "y": y,
                                    "y_err": np.nan, "k_star": [r.get("k_star") for r in ok]}))
    for summary, seeds in fig7.sim_records(table):
        decs = [s["decomposition"] for s in seeds if "decomposition" in s]
        if not decs:
            continue
        x, conv = float(summary["alpha"]), float(summary["converged"])  # the share of seeds that converged
        for panel, prefix in (("error", "E_"), ("mse", "mse_")):
            for k in PARTS:
                v = np.array([dd.get(f"{prefix}{k}", np.nan) for dd in decs], float)
                err = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0
                frames.append(pd.DataFrame({"panel": [panel], "kind": "simulation", "series": [k], "x": [x],
                                            "y": [float(v.mean())], "y_err": [err], "d": int(p7["d"]),
                                            "seeds": len(decs), "converged_fraction": conv,
                                            "k_detached": [float(np.mean(
                                                [dd.get("k_star", np.nan) for dd in decs]))]}))
        frames.append(pd.DataFrame({"panel": ["mse"], "kind": "simulation", "series": ["mse"], "x": [x],
                                    "y": [float(summary["mse_mean"])], "y_err": [float(summary["mse_sem"])],
                                    "d": int(p7["d"]), "seeds": len(seeds), "converged_fraction": conv}))
    return common.concat(frames)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    p7 = fig7._p(quick)
    fig, axes, spare = common.figure(plt, 2, 3.0, legend_row=0.75)
    for ax, panel, total, ylabel, title in (
        (axes[0], "error", "excess", "part of the excess test error\ne_test − e_0  (noisy labels)",
         "(a) excess test error = E_over + E_under\n+ E_approx + E_mismatch"),
        (axes[1], "mse", "mse", "part of the MSE on S  (1/d)‖Ŝ − S0‖²_F",
         "(b) MSE on S, the same split"),
    ):
        common.plot_theory(ax, data, panel, total, label="SE total (excess in (a), MSE in (b))", color="k", lw=1.2)
        if panel == "mse":
            common.plot_sim(ax, data, panel, "mse", label="simulation, MSE in (b)", color="k", marker="D")
        for k in PARTS:
            common.plot_theory(ax, data, panel, k, label=f"SE, {NAMES[k]}", color=COLORS[k])
            common.plot_sim(ax, data, panel, k, label=None, color=COLORS[k])
        ax.plot([], [], "o", color="0.3", mfc="white", label="simulation estimator (same colour)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        vals = data[(data["panel"] == panel) & (data["y"] > 0)]["y"]
        if len(vals):
            ax.set_ylim(max(vals.min() * 0.5, vals.max() * 3e-3), vals.max() * 2)
        ax.set_xlabel("sample complexity α = n/d²")
        ax.set_ylabel(ylabel)
        ax.set_title(title, loc="left")
    # one legend for both panels (the parts have the same colours), the MSE's simulation entry from (b)
    common.legend_in(spare, (None, axes[1]), loc="upper left", ncol=2)
    common.suptitle(fig, f"Error decomposition: power-law target θ_i ∝ i^(-1.25), d = {p7['d']}, Δ = 0.5, "
                    f"λ = {p7['lam']:g}, T = 2, factorised student (fig7's simulations)")
    common.caption(fig, f"points: finite-d estimators from the trained Ŝ ({common.SOLVER_NAMES['prox']}), d = "
                   f"{p7['d']}, mean ± s.e. over {p7['seeds']} seeds, the parts' (Δq, Δm) pushed through the SE's "
                   "e(q, m); recovered outliers = eigenvalues above the SE bulk edge + 4 s δ d^(-2/3); lines: "
                   "state evolution. Parts that are exactly 0 (E_mismatch for noisy labels) are not drawn on the "
                   "log scale.", y=-0.01)
    fig.tight_layout()
    return fig
