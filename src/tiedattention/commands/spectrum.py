"""`tiedattention spectrum`: the predicted spectrum of the learned S_hat (atom at 0, bulks, outliers), and
with ``--d`` simulated spectra overlaid (histogram) and compared (rank, top singular value, Kolmogorov)."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ..cli_common import (
    FIGURE_SUFFIXES,
    JsonOpt,
    atomic_write,
    check_dimension,
    check_output_file,
    cli_errors,
    emit_json,
    problem_title,
    progress_bar,
    with_problem,
)
from ..errors import ParameterError
from ..problem import Problem, validate_alpha

SPECTRUM_SEEDS = 4  # simulated students with --d when --seeds is not given


def register(app: typer.Typer) -> None:
    app.command("spectrum")(spectrum_cmd)


@with_problem
def spectrum_cmd(
    problem: Problem,
    alpha: Annotated[float, typer.Option("--alpha", help="α = n/d²")],
    d: Annotated[int | None, typer.Option("--d", help="simulate at this d and overlay the spectra")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="simulated students (with --d; default 4)")] = None,
    solver: Annotated[str | None, typer.Option(
        "--solver", help="simulation solver, with --d: prox (default) | adam | lbfgs")] = None,
    device: Annotated[str | None, typer.Option("--device", help="simulation device, with --d: cpu (default) | cuda")
                      ] = None,
    theory_d: Annotated[
        int | None, typer.Option("--theory-d", help="d of the eigenvalue list for list targets (default: --d)")
    ] = None,
    joint_law: Annotated[int, typer.Option(
        "--joint-law", help="K > 0: treat the top K target modes (and the target's MP part) exactly, not as "
        "Gaussian logits, and correct every recovered outlier among them; take K >= the number of strong modes "
        "(every spike). Needs a finite d (--d or --theory-d); ~10-60 s per outlier")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="write the figure here (.png, .pdf or .svg)")] = None,
    json: JsonOpt = False,
) -> None:
    """Law of the learned spectrum at one α: atom at 0, bulk(s), outliers and overlaps; optional simulation."""
    with cli_errors():
        alpha = validate_alpha(alpha)
        if problem.student.model != "factorized":
            raise ParameterError("model", "the learned-spectrum law is implemented for the factorized student")
        check_dimension(d)
        check_dimension(theory_d, "theory-d")
        for name, value in (("seeds", seeds), ("solver", solver), ("device", device)):
            if d is None and value is not None:  # (it was silently ignored: no simulation without --d)
                raise ParameterError(name, "sets the simulation, which needs --d D")
        seeds = SPECTRUM_SEEDS if seeds is None else seeds
        solver = solver or "prox"
        device = device or "cpu"
        if seeds < 1:
            raise ParameterError("seeds", f"must be >= 1 (got {seeds})")
        if joint_law < 0:
            raise ParameterError("joint-law", f"must be >= 0 (got {joint_law})")
        if joint_law and (theory_d if theory_d is not None else d) is None:
            raise ParameterError("joint-law", "needs a finite dimension: give --d or --theory-d")
        if joint_law > (theory_d if theory_d is not None else d or 0) > 0:  # (was "--k: must be <= d", after the SE)
            raise ParameterError("joint-law", f"must be <= d = {theory_d if theory_d is not None else d} "
                                              f"(got {joint_law})")
        check_output_file(out, "out", suffix=FIGURE_SUFFIXES)  # (.png only before, unlike theory and scaling)
        if d is not None:  # the simulation's options, before the theory is computed (not after it)
            from ..simulation import SOLVERS, n_of, resolve_device

            if solver not in SOLVERS:
                raise ParameterError("solver", f"unknown solver {solver!r} (known: {', '.join(sorted(SOLVERS))})")
            resolve_device(device)
            n_of(alpha, d)
        with contextlib.ExitStack() as stack:
            tick = None
            if d is not None:  # the trainings take minutes at d = 200-400: say where the run is (stderr, transient)
                bar = stack.enter_context(progress_bar())
                job = bar.add_task(f"ERM runs at d={d}", total=seeds)

                def tick(info: dict[str, Any]) -> None:
                    bar.advance(job)

            record = spectrum_record(problem, alpha, d=d, seeds=seeds, solver=solver, device=device,
                                     theory_d=theory_d, out=out, joint_law=joint_law, progress=tick)
    if record["theory"] is None:  # says so (and nothing is drawn or simulated) instead of a traceback
        if json:
            emit_json(record)
        elif not record["converged"]:
            typer.echo(f"alpha={alpha:g}: the state evolution did not converge ({record['message']}): no spectrum",
                       err=True)
        else:
            typer.echo(f"{record['message']}: no spectrum", err=True)
        raise typer.Exit(code=1)
    if json:
        emit_json(record)
        return
    th = record["theory"]
    typer.echo(f"alpha={alpha:g}: atom at 0 {th['atom_zero']:.4f}, rank {th['rank']:.4f}, "
               f"{th['n_bulks']} bulk(s), top eigenvalue {th['top_eigenvalue']:.4f} "
               f"(singular value {th['top_singular_value']:.4f}), recovered outliers {th['n_recovered']}")
    for b in th["bulks"]:
        typer.echo(f"  bulk [{b['lo']:.4f}, {b['hi']:.4f}] mass {b['mass']:.4f}")
    # every detached one; of the target eigenvalues inside the bulk the top 3 and a count (a d = 2000 power law
    # printed 2000 lines of "not recovered")
    inside = [o for o in th["outliers"] if not o["detached"]]
    for o in [o for o in th["outliers"] if o["detached"]] + inside[:3]:
        dc = f", detached while delta < {o['delta_c']:.4g}" if o["detached"] else ""
        jl = (f", joint law {o['eigenvalue_joint_law']:.4f} +- {o['eigenvalue_joint_law_error']:.4f}"
              if "eigenvalue_joint_law" in o else "")
        mult = f" (x{o['multiplicity']})" if o["multiplicity"] > 1 else ""
        typer.echo(f"  theta={o['theta']:.4g}{mult}: eigenvalue {o['eigenvalue']:.4f}{jl} overlap {o['overlap']:.4f} "
                   f"{'recovered' if o['recovered'] else 'not recovered'} (delta = {th['delta']:.4g}{dc})")
    if len(inside) > 3:
        typer.echo(f"  ... and {len(inside) - 3} smaller target eigenvalues inside the bulk, not recovered (--json)")
    if th.get("joint_law", {}).get("message"):
        typer.echo(f"  joint law: {th['joint_law']['message']}")
    if "simulation" in record:
        s = record["simulation"]
        typer.echo(f"simulation d={d} ({seeds} seeds): rank {s['rank_mean']:.4f}, top singular value "
                   f"{s['top_singular_value_mean']:.4f}, Kolmogorov distance {s['kolmogorov']:.4f}")
    if out is not None:
        typer.echo(f"figure: {out}")


def spectrum_record(problem, alpha: float, d: int | None = None, seeds: int = 4, solver: str = "prox",
                    device: str = "cpu", theory_d: int | None = None, out: Path | None = None,
                    joint_law: int = 0, progress=None) -> dict[str, Any]:
    """Theory (and, with d, simulation) of the learned spectrum as one JSON-ready record; draws ``out``.
    ``progress(info)``: called after each simulated seed (simulate_record's). ``converged`` and ``message`` are
    the SE point's; where it did not converge ``theory`` is None and nothing is
    simulated or drawn.

    ``joint_law`` = K > 0: the recovered outliers among the top K target modes are also given corrected for the
    exact law of the strong modes' logits (the top K modes and the target's MP part explicit):
    ``eigenvalue_joint_law`` and its QMC error per outlier, the whole correction under ``theory.joint_law``
    (theory.strong_modes.corrected_outliers, docs/theory/decomposition.md 7.1)."""
    from ..theory.spectrum import kolmogorov_distance, perfect_recovery_message, spectrum_from_result
    from ..theory.state_evolution import StateEvolution

    se = StateEvolution(problem, d=theory_d if theory_d is not None else d)
    res = se.solve(alpha)
    record: dict[str, Any] = {"alpha": alpha, "target": str(problem.task.target), "converged": bool(res.converged),
                              "message": res.message}
    if not res.converged or res.delta == 0.0:  # no law to give (spectrum_from_result refuses): the caller reports it
        record["theory"] = None
        if res.converged:
            record["message"] = perfect_recovery_message(problem, alpha)
        return record
    sp = spectrum_from_result(problem, se.measure, res)
    record["theory"] = sp.to_dict()
    if joint_law:
        _add_joint_law(problem, se, res, record["theory"], theory_d if theory_d is not None else d, joint_law)
    sim = None
    if d is not None:
        from ..simulation import simulate_record

        sim = simulate_record(problem, alpha, d, seeds=seeds, solver=solver, device=device, return_spectra=True,
                              progress=progress)
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
        _draw(sp, record.get("eigenvalues"), out, problem, alpha,
              [o["eigenvalue_joint_law"] for o in record["theory"]["outliers"] if "eigenvalue_joint_law" in o])
    record.pop("eigenvalues", None)
    return record


def _add_joint_law(problem, se, res, theory: dict[str, Any], d: int, k: int) -> None:
    """Attach the joint-law correction of the top ``k`` recovered outliers to the theory record (in place)."""
    from ..theory.strong_modes import corrected_outliers

    if not any(o["recovered"] for o in theory["outliers"]):
        theory["joint_law"] = {"solved": [], "message": "no recovered outlier to correct"}
        return
    if res.phase != "regular":  # (was "error: --alpha: outlier stationarity needs a regular SE point", exit 2)
        theory["joint_law"] = {"solved": [], "message": f"not computed: the outlier stationarity needs a regular SE "
                                                        f"point (lambda > 0), this one is in the {res.phase} phase"}
        return
    # the top k target modes explicit (and the MP part of the target); every recovered one among them solved
    c = corrected_outliers(problem, se.measure, res, d, k)
    for j in np.flatnonzero(np.isfinite(c.shift)):
        o = min(theory["outliers"], key=lambda o: abs(o["theta"] - float(c.theta[j])))
        if not math.isclose(o["theta"], float(c.theta[j]), rel_tol=1e-9):
            raise RuntimeError(f"joint-law mode {c.theta[j]} is not an outlier of the spectrum record")
        o["eigenvalue_joint_law"] = float(c.corrected[j])
        o["eigenvalue_joint_law_error"] = float(c.shift_error[j])
    theory["joint_law"] = c.to_dict()


def _draw(sp, ev, out: Path, problem, alpha: float, joint: list[float] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    top = max(sp.top, float(np.max(ev)) if ev is not None and ev.size else 0.0, 1e-12)
    lam = np.linspace(0.0, 1.05 * top, 600)[1:]
    dens = sp.density(lam)
    ax1.plot(lam, dens, color="C0", label=f"theory (atom at 0: {sp.atom_zero:.3f})")
    sv = np.linspace(0.0, math.sqrt(1.05 * top), 600)[1:]  # (sqrt of the eigenvalue grid left a gap below 0.08)
    ax2.plot(sv, sp.singular_density(sv), color="C0", label="theory")
    if ev is not None:
        nz = ev[ev > 0]
        w = np.full(nz.size, 1.0 / ev.size)  # histogram area = simulated rank fraction, like the density
        # bins on [0, 1.05 top] (the width the weights assume; numpy's default range is the data's min..max)
        ax1.hist(nz, bins=50, range=(0.0, 1.05 * top), weights=w / (1.05 * top / 50), color="C1", alpha=0.5,
                 label=f"simulation (zero: {1 - nz.size / ev.size:.3f})")
        snz = np.sqrt(nz)
        ax2.hist(snz, bins=50, range=(0.0, math.sqrt(1.05 * top)), weights=w / (math.sqrt(1.05 * top) / 50),
                 color="C1", alpha=0.5, label="simulation")
    for o in sp.outliers:
        if o.recovered:
            ax1.axvline(o.eigenvalue, color="C3", ls="--", lw=0.8)
            ax2.axvline(o.singular_value, color="C3", ls="--", lw=0.8)
    for j, e in enumerate(joint or []):
        lab = "outliers, joint law" if j == 0 else None
        ax1.axvline(e, color="C2", ls=":", lw=1.0, label=lab)
        ax2.axvline(math.sqrt(max(e, 0.0)), color="C2", ls=":", lw=1.0, label=lab)
    ax1.set_xlabel("eigenvalue of Ŝ")
    ax1.set_ylabel("density")
    ax2.set_xlabel("singular value of W/(pd)$^{1/4}$")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.suptitle(f"learned spectrum at α={alpha:g}: "
                 f"{problem_title(problem, always=('target', 'noise', 'lam', 'tokens', 'kappa'))}")
    fig.tight_layout()
    try:
        atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=120, format=Path(out).suffix[1:].lower()))
    finally:
        plt.close(fig)
