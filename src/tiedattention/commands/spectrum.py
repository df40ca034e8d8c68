"""`tiedattention spectrum`: the predicted spectrum of the learned S_hat (atom at 0, bulks, outliers), and
with ``--d`` simulated spectra overlaid (histogram) and compared (rank, top singular value, Kolmogorov)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ..cli_common import JsonOpt, check_dimension, cli_errors, emit_json, with_problem
from ..errors import ParameterError
from ..problem import Problem, validate_alpha


def register(app: typer.Typer) -> None:
    app.command("spectrum")(spectrum_cmd)


@with_problem
def spectrum_cmd(
    problem: Problem,
    alpha: Annotated[float, typer.Option("--alpha", help="α = n/d²")],
    d: Annotated[int | None, typer.Option("--d", help="simulate at this d and overlay the spectra")] = None,
    seeds: Annotated[int, typer.Option("--seeds", help="simulated students (with --d)")] = 4,
    solver: Annotated[str, typer.Option("--solver", help="simulation solver: prox | adam | lbfgs")] = "prox",
    device: Annotated[str, typer.Option("--device", help="cpu | cuda")] = "cpu",
    theory_d: Annotated[
        int | None, typer.Option("--theory-d", help="d of the eigenvalue list for list targets (default: --d)")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the figure here (PNG)")] = None,
    json: JsonOpt = False,
) -> None:
    """Law of the learned spectrum at one α: atom at 0, bulk(s), outliers and overlaps; optional simulation."""
    with cli_errors():
        alpha = validate_alpha(alpha)
        if problem.student.model != "factorized":
            raise ParameterError("model", "the learned-spectrum law is implemented for the factorized student")
        check_dimension(d)
        if seeds < 1:
            raise ParameterError("seeds", f"must be >= 1 (got {seeds})")
        if out is not None and out.suffix.lower() != ".png":
            raise ParameterError("out", f"must be a .png file (got '{out}')")
        if out is not None and not out.parent.exists():
            raise ParameterError("out", f"directory '{out.parent}' does not exist")
        record = spectrum_record(problem, alpha, d=d, seeds=seeds, solver=solver, device=device,
                                 theory_d=theory_d, out=out)
    if json:
        emit_json(record)
        return
    th = record["theory"]
    typer.echo(f"alpha={alpha:g}: atom at 0 {th['atom_zero']:.4f}, rank {th['rank']:.4f}, "
               f"{th['n_bulks']} bulk(s), top eigenvalue {th['top_eigenvalue']:.4f} "
               f"(singular value {th['top_singular_value']:.4f}), recovered outliers {th['n_recovered']}")
    for b in th["bulks"]:
        typer.echo(f"  bulk [{b['lo']:.4f}, {b['hi']:.4f}] mass {b['mass']:.4f}")
    for o in th["outliers"]:
        dc = f", detached while delta < {o['delta_c']:.4g}" if o["detached"] else ""
        typer.echo(f"  theta={o['theta']:.4g}: eigenvalue {o['eigenvalue']:.4f} overlap {o['overlap']:.4f} "
                   f"{'recovered' if o['recovered'] else 'not recovered'} (delta = {th['delta']:.4g}{dc})")
    if "simulation" in record:
        s = record["simulation"]
        typer.echo(f"simulation d={d} ({seeds} seeds): rank {s['rank_mean']:.4f}, top singular value "
                   f"{s['top_singular_value_mean']:.4f}, Kolmogorov distance {s['kolmogorov']:.4f}")
    if out is not None:
        typer.echo(f"figure: {out}")


def spectrum_record(problem, alpha: float, d: int | None = None, seeds: int = 4, solver: str = "prox",
                    device: str = "cpu", theory_d: int | None = None, out: Path | None = None) -> dict[str, Any]:
    """Theory (and, with d, simulation) of the learned spectrum as one JSON-ready record; draws ``out``."""
    from ..theory.spectrum import kolmogorov_distance, learned_spectrum

    sp = learned_spectrum(problem, alpha, d=theory_d if theory_d is not None else d)
    record: dict[str, Any] = {"alpha": alpha, "target": str(problem.task.target), "theory": sp.to_dict()}
    sim = None
    if d is not None:
        from ..simulation import simulate_record

        sim = simulate_record(problem, alpha, d, seeds=seeds, solver=solver, device=device, return_spectra=True)
        ev = np.asarray(sim["eigenvalues"], float)
        sv = np.asarray(sim["singular_values"], float)
        tol = 1e-6 * max(float(np.max(np.abs(ev))), 1e-300)
        ev_clean = np.where(np.abs(ev) <= tol, 0.0, ev)
        record["simulation"] = {
            "d": d, "seeds": seeds, "solver": solver,
            "rank_mean": float(np.mean(ev > tol)),
            "top_eigenvalue_mean": float(np.mean(ev.max(axis=1))),
            "top_singular_value_mean": float(np.mean(sv.max(axis=1))),
            "top_singular_value_std": float(np.std(sv.max(axis=1))),
            "kolmogorov": kolmogorov_distance(ev_clean.ravel(), sp.cdf),
            "test_error_mean": sim.get("test_error_mean"),
        }
        record["eigenvalues"] = ev_clean
    if out is not None:
        _draw(sp, record.get("eigenvalues"), out, problem, alpha)
    record.pop("eigenvalues", None)
    return record


def _draw(sp, ev, out: Path, problem, alpha: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    top = max(sp.top, float(np.max(ev)) if ev is not None and ev.size else 0.0, 1e-12)
    lam = np.linspace(0.0, 1.05 * top, 600)[1:]
    dens = sp.density(lam)
    ax1.plot(lam, dens, color="C0", label=f"theory (atom at 0: {sp.atom_zero:.3f})")
    sv = np.sqrt(lam)
    ax2.plot(sv, sp.singular_density(sv), color="C0", label="theory")
    if ev is not None:
        nz = ev[ev > 0]
        w = np.full(nz.size, 1.0 / ev.size)  # histogram area = simulated rank fraction, like the density
        ax1.hist(nz, bins=50, weights=w / (1.05 * top / 50), color="C1", alpha=0.5,
                 label=f"simulation (zero: {1 - nz.size / ev.size:.3f})")
        snz = np.sqrt(nz)
        ax2.hist(snz, bins=50, weights=w / (math.sqrt(1.05 * top) / 50), color="C1", alpha=0.5, label="simulation")
    for o in sp.outliers:
        if o.recovered:
            ax1.axvline(o.eigenvalue, color="C3", ls="--", lw=0.8)
            ax2.axvline(o.singular_value, color="C3", ls="--", lw=0.8)
    ax1.set_xlabel("eigenvalue of Ŝ")
    ax1.set_ylabel("density")
    ax2.set_xlabel("singular value of W/(pd)^{1/4}")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.suptitle(f"learned spectrum: {problem.task.target}, α={alpha:g}, λ={problem.student.lam:g}, "
                 f"Δ={problem.task.noise:g}, κ={problem.student.kappa:g}")
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=str(out.parent))
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
