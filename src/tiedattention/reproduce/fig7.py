"""Figure 7: sequential recovery of a power-law target's modes (issue 6; docs/theory/scaling.md section 3).

Setting: power-law target theta_i = C i^{-1.25} (Q0 = 1), Delta = 0.5, fixed lambda, T = 2, beta = beta0 = 1,
factorised full-width student, at a finite d (the target is a list of d eigenvalues, so the SE is the finite-d
one with atoms of mass 1/d).

(a) the top eigenvalues of S_hat vs alpha: SE outlier positions s (y_i - eps) of each recovered target mode
    (lines), the SE top edge of the bulk of S_hat (shaded) and the detection threshold edge + margin (dotted,
    :func:`.powerlaw.edge_margin`); simulations: the i-th largest eigenvalue of the trained S_hat;
(b) squared overlaps |<u_i, u_hat_i>|^2 of the first target eigenvectors with the learned ones;
(c) k*(alpha): recovered modes from the SE (finite-d criterion: the mode's bump is a component of its own
    above the cut; dashed: the d -> infinity spike criterion) against the number of detached eigenvalues of
    the simulated S_hat (above the SE bulk edge + margin, :func:`.powerlaw.count_detached`).

fig8 uses the same cells (same SE curve and simulations), and fig10 the same simulations (they carry the
finite-d estimator of the error decomposition), so the figures share their store.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from . import common
from . import powerlaw as pl

TITLE = "sequential recovery of a power-law target (gamma=1.25): outliers, overlaps, k*(alpha)"
TARGET = "powerlaw:1.25"
N_MODES = 8  # modes carried in the records
SHOW = 6  # modes drawn in (a)
SHOW_OVERLAP = 4
PARAMS = {
    "quick": {"alphas": list(np.geomspace(0.03, 5.0, 10)), "sim_alphas": [0.1, 0.3, 1.0], "d": 100,
              "seeds": 2, "lam": 0.05, "n_test": 4000},
    "full": {"alphas": list(np.geomspace(0.01, 10.0, 60)), "sim_alphas": [0.03, 0.1, 0.3, 1.0, 3.0], "d": 200,
             "seeds": 8, "lam": 0.05, "n_test": 10000},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _opts(quick: bool) -> dict:
    return common.options(target=TARGET, noise=0.5, lam=_p(quick)["lam"])


def _f(x: float) -> float:
    return float(f"{x:.10g}")


def build_cells(p: dict, opts: dict) -> list:
    """The SE-with-spectrum curve (its grid includes the simulated alphas) and one simulation cell per alpha."""
    alphas = sorted({_f(a) for a in list(p["alphas"]) + list(p["sim_alphas"])})
    cells = [pl.make_cell(pl.SE_MODES, {**opts, "d": int(p["d"]), "alphas": alphas, "n_modes": N_MODES})]
    for a in p["sim_alphas"]:
        cells.append(pl.make_cell(pl.SIM_MODES, {**opts, "alpha": _f(a), "d": int(p["d"]), "seeds": int(p["seeds"]),
                                                 "n_modes": N_MODES, "n_test": int(p["n_test"]), "solver": "prox",
                                                 "decompose": True}))
    return cells


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    return build_cells(_p(quick), _opts(quick))


def se_records(table: pd.DataFrame | None) -> list[dict]:
    rows = common._route_rows(table, pl.SE_MODES)
    out = []
    for _, cell in rows.iterrows():
        out.extend(json.loads(cell["records"]))
    return sorted(out, key=lambda r: r["alpha"])


def sim_records(table: pd.DataFrame | None) -> list[tuple[dict, list[dict]]]:
    """(cell summary, per-seed rows) of every simulation cell, sorted by alpha."""
    rows = common._route_rows(table, pl.SIM_MODES)
    out = [(cell.to_dict(), json.loads(cell["records"])) for _, cell in rows.iterrows()]
    return sorted(out, key=lambda x: float(x[0]["alpha"]))


def _mean_sem(v) -> tuple[float, float]:
    v = np.asarray(v, float)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0


def _closest(recs: list[dict], alpha: float) -> dict | None:
    ok = [r for r in recs if np.isclose(r["alpha"], alpha, rtol=1e-9)]
    return ok[0] if ok else None


def detached_counts(se: list[dict], sims: list[tuple[dict, list[dict]]], d: int) -> list[dict]:
    """Per simulated alpha: SE k*, spike k*, and the per-seed counts of detached eigenvalues of S_hat."""
    out = []
    for summary, seeds in sims:
        a = float(summary["alpha"])
        r = _closest(se, a)
        if r is None or not r.get("converged"):
            continue
        counts = [pl.count_detached(s["eigenvalues"], r["bulk_top"], r["margin"]) for s in seeds]
        out.append({"alpha": a, "k_star": r["k_star"], "k_star_spike": r["k_star_spike"], "counts": counts,
                    "bulk_top": r["bulk_top"], "margin": r["margin"], "d": d,
                    "converged": float(summary["converged"])})
    return out


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    p = _p(quick)
    d = int(p["d"])
    se, sims = se_records(table), sim_records(table)
    ok = [r for r in se if r.get("converged") and r.get("phase") == "regular"]
    frames = []

    def th(panel, series, xs, ys, **extra):
        frames.append(pd.DataFrame({"panel": panel, "kind": "theory", "series": series, "x": xs, "y": ys,
                                    "y_err": np.nan, **extra}))

    def sm(panel, series, xs, ys, errs, **extra):
        frames.append(pd.DataFrame({"panel": panel, "kind": "simulation", "series": series, "x": xs, "y": ys,
                                    "y_err": errs, "d": d, "seeds": int(p["seeds"]), **extra}))

    a = np.array([r["alpha"] for r in ok])
    for i in range(1, N_MODES + 1):
        ev = np.array([r["modes"][i - 1]["eigenvalue"] if r["modes"][i - 1]["recovered"] else np.nan for r in ok])
        th("eigenvalues", f"mode {i}", a, ev, mode=i)
        ov = np.array([r["modes"][i - 1]["overlap"] if r["modes"][i - 1]["detached"] else 0.0 for r in ok])
        th("overlap", f"mode {i}", a, ov, mode=i)
    th("eigenvalues", "bulk edge", a, [r["bulk_top"] for r in ok])
    th("eigenvalues", "bulk edge + margin", a, [r["bulk_top"] + r["margin"] for r in ok])
    th("kstar", "k* (finite-d SE)", a, [r["k_star"] for r in ok])
    th("kstar", "k* (spike criterion)", a, [r["k_star_spike"] for r in ok])
    for summary, seeds in sims:
        x, conv = float(summary["alpha"]), float(summary["converged"])  # the share of seeds that converged
        for i in range(1, N_MODES + 1):
            m, e = _mean_sem([s["eigenvalues"][i - 1] for s in seeds])
            sm("eigenvalues", f"mode {i}", [x], [m], [e], mode=i, converged_fraction=conv)
            m, e = _mean_sem([s["overlaps"][i - 1] for s in seeds])
            sm("overlap", f"mode {i}", [x], [m], [e], mode=i, converged_fraction=conv)
    for c in detached_counts(se, sims, d):
        m, e = _mean_sem(c["counts"])
        sm("kstar", "detached eigenvalues", [c["alpha"]], [m], [e], k_star_se=c["k_star"],
           converged_fraction=c["converged"])
    return common.concat(frames)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    p = _p(quick)
    fig, axes, spare = common.figure(plt, 3, 2.7)
    ax = axes[0]
    edge = data[(data["panel"] == "eigenvalues") & (data["series"] == "bulk edge")].sort_values("x")
    if len(edge):
        ax.fill_between(edge["x"], 1e-3, edge["y"], color="0.85", label="SE bulk of Ŝ")
    common.plot_theory(ax, data, "eigenvalues", "bulk edge + margin", label="bulk edge + margin (detection)",
                       color="0.4", ls=":", lw=1.0)
    for i in range(1, SHOW + 1):
        c = f"C{(i - 1) % 10}"
        common.plot_theory(ax, data, "eigenvalues", f"mode {i}", label=f"SE outlier, mode {i}", color=c)
        common.plot_sim(ax, data, "eigenvalues", f"mode {i}", label=None, color=c)
    ax.plot([], [], "o", color="0.3", mfc="white", label="simulation: i-th largest eigenvalue")
    ax.set_xscale("log")
    ax.set_yscale("log")
    top = data[(data["panel"] == "eigenvalues")]["y"].max()
    ax.set_ylim(0.25, 1.6 * top if np.isfinite(top) else None)
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("eigenvalue of Ŝ")
    ax.set_title("(a) outliers of Ŝ detach one by one", loc="left")
    common.legend_in(spare, ("(a), and the colours of modes 1-4 in (b)", ax))
    ax = axes[1]
    for i in range(1, SHOW_OVERLAP + 1):
        c = f"C{(i - 1) % 10}"
        common.plot_theory(ax, data, "overlap", f"mode {i}", color=c)
        common.plot_sim(ax, data, "overlap", f"mode {i}", color=c)
    ax.plot([], [], color="0.3", label="SE")
    ax.plot([], [], "o", color="0.3", mfc="white", label="simulation")
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("squared overlap |⟨u_i, û_i⟩|²")
    ax.set_title("(b) overlaps with the target's modes", loc="left")
    ax.legend(loc="lower right")  # coloured by mode as in (a)
    ax = axes[2]
    sub = data[(data["panel"] == "kstar") & (data["kind"] == "theory")]
    for series, kw in (("k* (finite-d SE)", {"color": "C0"}), ("k* (spike criterion)", {"color": "C1", "ls": "--"})):
        s = sub[sub["series"] == series].sort_values("x")
        if len(s):
            ax.step(s["x"], s["y"], where="post", label=series, **kw)
    common.plot_sim(ax, data, "kstar", "detached eigenvalues", label="simulation: eigenvalues\nabove edge + margin",
                    color="C3")
    ax.set_xscale("log")
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("number of recovered modes k*")
    ax.set_title("(c) recovered modes k*(α)", loc="left")
    ax.legend(loc="upper left")
    common.suptitle(fig, f"Sequential recovery: power-law target θ_i ∝ i^(-1.25) (Q0 = 1), d = {p['d']}, Δ = 0.5, "
                    f"λ = {p['lam']:g}, T = 2, factorised student")
    common.caption(fig, f"points: simulations, {common.SOLVER_NAMES['prox']}, d = {p['d']}, mean ± s.e. over "
                   f"{p['seeds']} seeds; lines: finite-d state evolution with the learned-spectrum law (target = "
                   f"the list of d eigenvalues). Margin = 4 s δ d^(-2/3) (Tracy–Widom scale of the bulk edge).",
                   y=-0.01)
    fig.tight_layout()
    return fig
