"""Figure 1: learning curve of the factorised student with the learned spectra as insets, and the rank of
the minimiser vs alpha.

Setting (THEORY.md section 3, reference behaviour): MP target kappa0 = 0.5, Delta = 0.5, lambda = 0.01,
T = 2, beta = beta0 = 1, seq2lab, full-width student (kappa = 1).

(a) test error vs alpha = n/d^2 (noisy and clean labels); insets: eigenvalues of S_hat at three alphas,
    simulated histogram vs the predicted density (m_hat/sigma_hat)(y - eps)_+, y ~ rho_delta (THEORY.md
    section 5), with the atom at zero of mass 1 - rank;
(b) rank fraction of S_hat vs alpha for kappa0 in {0.2, 0.5, 0.8}.

The simulations use the proximal solver on S (``solver="prox"``): its soft-thresholded eigenvalues are
exactly zero, so the rank and the atom at zero are measured without a tolerance. L-BFGS on W reaches the same
objective (to ~1e-7) but leaves the eigenvalues that should vanish at 1e-9 ... 1e-4 of the largest one, and
the rank counted with a relative tolerance of 1e-6 then comes out too high by a few eigenvalues at d = 40.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import common
from .common import Sizes

SOLVER = "prox"
TITLE = "learning curve + learned spectra (MP kappa0=0.5, Delta=0.5, lambda=0.01), rank vs alpha"
KAPPA0S = (0.2, 0.5, 0.8)
MAIN = 0.5
#: the scale of the simulations (tests shrink it)
PARAMS = {
    "quick": {"alphas": np.geomspace(0.02, 5.0, 10), "sim_alphas": [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0],
              "rank_alphas": [0.1, 0.5, 2.0], "rank_theory": np.geomspace(0.02, 5.0, 8),
              "insets": [0.1, 0.5, 4.0], "d": 40, "seeds": 2},
    "full": {"alphas": np.geomspace(0.01, 8.0, 40), "sim_alphas": [0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0, 4.0],
             "rank_alphas": [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0], "rank_theory": np.geomspace(0.01, 8.0, 30),
             "insets": [0.1, 0.5, 4.0], "d": 100, "seeds": 8},
}


def _p(quick: bool) -> dict:
    return common.mode(PARAMS, quick)


def _sizes(quick: bool) -> Sizes:
    return common.sizes_of(PARAMS, quick)


def _opts(kappa0: float) -> dict:
    return common.options(target=f"mp:{kappa0:g}", noise=0.5, lam=0.01)


def build(quick: bool, table: pd.DataFrame | None = None) -> list:
    p, sizes = _p(quick), _sizes(quick)
    cells = []
    for k0 in KAPPA0S:
        alphas = list(p["alphas"]) + list(p["sim_alphas"]) if k0 == MAIN else list(p["rank_theory"]) + list(
            p["rank_alphas"])
        cells += common.theory_curve_cells(_opts(k0), alphas)
    for k0 in KAPPA0S:
        sim_alphas = p["sim_alphas"] if k0 == MAIN else p["rank_alphas"]
        for a in sim_alphas:
            cells.append(common.sim_cell(_opts(k0), a, sizes, solver=SOLVER,
                                         return_spectra=(k0 == MAIN and a in p["insets"])))
    return cells


def _density(rec: pd.Series, kappa0: float, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Predicted density of the non-zero eigenvalues of S_hat: l = (m_hat/sigma_hat)(y - eps), y > eps."""
    from ..targets import parse_target
    from ..theory.spectral import FreeConvolution

    scale = float(rec["m_hat"]) / float(rec["sigma_hat"])
    fc = FreeConvolution(parse_target(f"mp:{kappa0:g}").measure(), float(rec["delta"]))
    top = fc.support()[-1][1]
    eps = float(rec["eps"])
    y = eps + (top - eps) * (1 - np.cos(np.linspace(0, np.pi, n))) / 2  # denser near both ends
    return scale * (y - eps), fc.density(y) / scale


def tidy(table: pd.DataFrame, quick: bool) -> pd.DataFrame:
    p = _p(quick)
    th, sim = common.theory_frame(table), common.sim_frame(table)
    frames = []
    for k0 in KAPPA0S:
        t = common.select(th, target=f"mp:{k0:g}")
        s = common.select(sim, target=f"mp:{k0:g}")
        frames.append(common.theory_points(t, "rank", f"kappa0={k0:g}", "alpha", "rank", kappa0=k0))
        frames.append(common.sim_points(s, "rank", f"kappa0={k0:g}", "alpha", "rank", kappa0=k0))
        if k0 != MAIN:
            continue
        for key in ("test_error", "test_error_clean"):
            frames.append(common.theory_points(t, "error", key, "alpha", key, kappa0=k0))
            frames.append(common.sim_points(s, "error", key, "alpha", key, kappa0=k0))
        for a in p["insets"]:
            panel = f"spectrum:{a:g}"
            rec = common.select(t, alpha=float(a))
            srow = common.select(s, alpha=float(a))
            if len(rec) and bool(rec.iloc[0]["converged"]) and rec.iloc[0]["phase"] == "regular":
                r = rec.iloc[0]
                x, y = _density(r, k0)
                frames.append(pd.DataFrame({"panel": panel, "kind": "theory", "series": "density", "x": x, "y": y,
                                            "y_err": np.nan, "alpha": a}))
                frames.append(pd.DataFrame({"panel": [panel], "kind": "theory", "series": "atom", "x": [0.0],
                                            "y": [1.0 - float(r["rank"])], "y_err": np.nan, "alpha": a}))
            if len(srow) and "eigenvalues" in srow.columns:
                row = srow.iloc[0]
                ev = np.concatenate([np.asarray(e, float) for e in row["eigenvalues"]])
                frames.append(pd.DataFrame({"panel": panel, "kind": "simulation", "series": "eigenvalues", "x": ev,
                                            "y": np.nan, "y_err": np.nan, "alpha": a, "d": int(row["d"]),
                                            "seeds": int(row["seeds"])}))
                frames.append(pd.DataFrame({"panel": [panel], "kind": "simulation", "series": "atom", "x": [0.0],
                                            "y": [1.0 - float(row["rank_mean"])],
                                            "y_err": [float(row["rank_sem"])], "alpha": a, "d": int(row["d"]),
                                            "seeds": int(row["seeds"]),
                                            "converged_fraction": float(row["converged"])}))
    return common.concat(frames)


ROMAN = ("i", "ii", "iii", "iv")


def _inset(ax, data: pd.DataFrame, a: float, tag: str) -> None:
    panel = f"spectrum:{a:g}"
    sub = data[data["panel"] == panel]
    ev = sub[(sub["kind"] == "simulation") & (sub["series"] == "eigenvalues")]["x"].to_numpy()
    dens = sub[(sub["kind"] == "theory") & (sub["series"] == "density")].sort_values("x")
    atom_th = sub[(sub["kind"] == "theory") & (sub["series"] == "atom")]["y"]
    atom_sim = sub[(sub["kind"] == "simulation") & (sub["series"] == "atom")]["y"]
    if ev.size:
        nz = ev[ev > 1e-6 * np.abs(ev).max()]
        top = max(nz.max() if nz.size else 0.0, dens["x"].max() if len(dens) else 0.0)
        bins = np.linspace(0, top * 1.02, 16)
        w = np.full(nz.size, 1.0 / ev.size)  # histogram of the non-zero part: area = simulated rank
        ax.hist(nz, bins=bins, weights=w / np.diff(bins)[0], color="0.75", edgecolor="0.45", lw=0.5)
    if len(dens):
        ax.plot(dens["x"], dens["y"], color="C3", lw=1.2)
    ymax = ax.get_ylim()[1]
    if len(atom_th):
        ax.annotate("", xy=(0, ymax * 0.98), xytext=(0, 0), arrowprops={"arrowstyle": "-|>", "color": "C3", "lw": 1.2})
    txt = [f"({tag}) α = {a:g}"]
    if len(atom_th):
        txt.append(f"atom at 0: {atom_th.iloc[0]:.2f}")
    if len(atom_sim):
        txt.append(f"sim: {atom_sim.iloc[0]:.2f}")
    ax.text(0.97, 0.95, "\n".join(txt), transform=ax.transAxes, ha="right", va="top", fontsize=common.SMALL_PT,
            bbox={"fc": "white", "ec": "none", "alpha": 0.75, "pad": 0.6})
    ax.set_ylim(0, ymax)
    ax.tick_params(labelsize=common.SMALL_PT, length=2, pad=1)
    ax.set_xlabel("eigenvalue of Ŝ", fontsize=common.SMALL_PT, labelpad=1)
    ax.set_ylabel("density", fontsize=common.SMALL_PT, labelpad=1)
    ax.grid(False)


def draw(data: pd.DataFrame, quick: bool):
    plt = common.pyplot(paper=True)
    p, sizes = _p(quick), _sizes(quick)
    fig = plt.figure(figsize=(common.WIDTH, 6.6))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.35, 1])
    ax, axr, spare = fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    spare.axis("off")
    styles = {"test_error": ("C0", "-", "noisy labels"), "test_error_clean": ("C1", "--", "clean labels")}
    for key, (c, ls, lab) in styles.items():
        common.plot_theory(ax, data, "error", key, label=f"theory, {lab}", color=c, ls=ls)
        common.plot_sim(ax, data, "error", key, label=f"simulation, {lab}", color=c,
                        marker="o" if key == "test_error" else "s")
    sims = data[(data["panel"] == "error") & (data["series"] == "test_error") & (data["kind"] == "simulation")]
    for tag, a in zip(ROMAN, p["insets"], strict=False):
        row = sims[np.isclose(sims["x"], a)]
        if len(row):
            ax.annotate(tag, (a, row["y"].iloc[0]), xytext=(0, 7), textcoords="offset points", ha="center",
                        color="0.2")
    ax.set_xscale("log")
    ax.set_ylim(0, 0.95)
    ax.set_xlabel("sample complexity α = n/d²")
    ax.set_ylabel("test error  E‖y − ŷ‖²_F\n(per sequence, T² entries)")
    ax.set_title("(a) learning curve, factorised student: MP κ0 = 0.5, Δ = 0.5, λ = 0.01, T = 2", loc="left")
    ax.legend(loc="lower left", frameon=True, framealpha=0.9)
    n = len(p["insets"])
    for i, (tag, a) in enumerate(zip(ROMAN, p["insets"], strict=False)):
        w = 0.86 / n
        ins = ax.inset_axes([0.09 + i * (w + 0.02), 0.56, w - 0.06, 0.38])
        _inset(ins, data, a, tag)
    for i, k0 in enumerate(KAPPA0S):
        c = f"C{i + 2}"
        common.plot_theory(axr, data, "rank", f"kappa0={k0:g}", label=f"theory, κ0 = {k0:g}", color=c)
        common.plot_sim(axr, data, "rank", f"kappa0={k0:g}", label=f"simulation, κ0 = {k0:g}", color=c)
        axr.axhline(k0, color=c, ls=":", lw=0.9)
    axr.plot([], [], color="0.4", ls=":", lw=0.9, label="target rank κ0")
    axr.set_xscale("log")
    axr.set_ylim(0, 1.02)
    axr.set_xlabel("sample complexity α = n/d²")
    axr.set_ylabel("rank fraction of Ŝ\n(1/d)·#{eigenvalues > 0}")
    axr.set_title("(b) rank of the minimiser (Δ = 0.5, λ = 0.01)", loc="left")
    common.legend_in(spare, ("(b)", axr))
    insets = ("; insets: eigenvalues of Ŝ pooled over seeds (grey histogram of the non-zero part, area = rank), "
              "SE density (red line) and SE atom at 0 (red arrow)")
    common.caption(fig, common.sim_caption(sizes, extra=insets, solver=SOLVER), y=-0.02)
    fig.tight_layout()
    return fig
