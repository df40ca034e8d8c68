"""`tiedattention simulate`: train tied attention at finite d on AIM data, one JSON object per alpha."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from ..cli_common import (
    JsonOpt,
    atomic_write,
    check_output_file,
    cli_errors,
    emit_json,
    parse_dimensions,
    parse_floats,
    print_table,
    problem_title,
    progress_bar,
    sigterm_as_interrupt,
    with_problem,
)
from ..errors import ParameterError
from ..problem import Problem


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


#: observables fitted by y(d) = a + b/d when several --d are given, and compared with the theory by --theory
EXTRAPOLATED = ("test_error", "test_error_clean", "train_error", "mse", "objective")
#: the keys of a per-d record that an extrapolated record keeps (the problem and the protocol, not the numbers)
_SHARED = ("alpha", "alpha_bar", "seeds", "seed0", "solver", "device", "n_test", "target", "tokens", "beta0",
           "noise", "noise_out", "task", "model", "kappa", "lam", "beta")


def extrapolated_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The d -> infinity estimate from one alpha's records at several d: for each observable of
    :data:`EXTRAPOLATED` the weighted fit y = a + b/d (:func:`..stats.extrapolate_inverse_d`, weights from the
    records' standard errors over seeds) as ``<key>_mean`` = a, ``<key>_sem``, ``<key>_slope``,
    ``<key>_slope_sem``, ``<key>_chi2``, ``<key>_p_value`` (nan, JSON null, for a key that some d has no finite
    value or standard error for); ``d`` and ``n`` are None, ``dims`` lists the dimensions, ``extrapolated`` is True
    and ``dof`` = len(dims) - 2."""
    from ..stats import extrapolate_inverse_d

    dims = [int(r["d"]) for r in records]
    out: dict[str, Any] = {k: records[0][k] for k in _SHARED if k in records[0]}
    out.update({"d": None, "n": None, "dims": dims, "extrapolated": True, "extrapolation": "a + b/d"})
    names = ("mean", "sem", "slope", "slope_sem", "chi2", "p_value")
    for key in EXTRAPOLATED:
        try:
            fit = extrapolate_inverse_d(dims, [r[f"{key}_mean"] for r in records], [r[f"{key}_sem"] for r in records])
        except (ParameterError, TypeError):  # a d without a finite value (failed seeds: null metrics) or sem
            out.update({f"{key}_{n}": math.nan for n in names})  # JSON null, "nan" in the table
            continue
        values = (fit.intercept, fit.intercept_sem, fit.slope, fit.slope_sem, fit.chi2, fit.p_value)
        out.update({f"{key}_{n}": v for n, v in zip(names, values, strict=True)})
    out["dof"] = len(dims) - 2
    out["converged_all"] = all(r["converged_all"] for r in records)
    out["seconds"] = float(sum(r["seconds"] for r in records))
    return out


def with_theory(record: dict[str, Any], se: dict[str, Any], se_d: int | None = None) -> dict[str, Any]:
    """``record`` plus the state evolution's values: ``se_<key>`` for the observables of :data:`EXTRAPOLATED`
    but the objective, ``se_converged``, and ``se_d`` (None: the d -> infinity SE; else the d at which the SE of a
    target whose spectrum depends on d was solved); and the z-score of the simulated test error,
    ``z_test_error`` = (simulated - SE)/sqrt(sem^2 + SE error^2). At a single finite d the z-score includes the
    finite-size bias (several standard errors of 8 seeds at d = 100, docs/user-guide/simulation.md); on an
    extrapolated record it compares the 1/d intercept with the d -> infinity theory."""
    out = dict(record)
    for key in ("test_error", "test_error_clean", "train_error", "mse"):
        out[f"se_{key}"] = se[key]
    out["se_converged"] = bool(se["converged"])
    out["se_d"] = se_d
    err = float(se.get("err_test_error", 0.0) or 0.0)
    sem = float(record["test_error_sem"])
    out["z_test_error"] = (record["test_error_mean"] - se["test_error"]) / math.hypot(sem, err)
    return out


def _warn_no_minimiser(problem: Problem, alphas: list[float], dims: list[int]) -> None:
    """One warning line where lambda = 0 with seq2lab output noise at an alpha_bar below the d -> infinity
    interpolation threshold: there the ERM has no minimiser (labels that output noise puts outside the simplex drive
    their logits to infinity), which the state evolution refuses; a trainer stops where its gradient is small and
    reports that point as converged (prox at d = 24, T = 3, alpha = 0.05: test error 3.41, session 16)."""
    if problem.student.lam != 0.0 or problem.task.noise_out == 0.0 or problem.task.task != "seq2lab":
        return  # (the same cheap test as lacks_minimiser, before importing the theory for the usual cases)
    from ..theory.state_evolution import StateEvolution

    se = StateEvolution(problem, d=min(dims) if problem.task.target.needs_d else None)
    below = [a for a in alphas if se.lacks_minimiser(a)]
    if below:
        thr = se.interpolation_alpha_bar()
        shown = ", ".join(f"{a:.4g}" for a in below)
        typer.echo(f"warning: α = {shown}: λ = 0 with output noise below the interpolation threshold (ᾱ < {thr:.4g}, "
                   "d → ∞): the ERM has no minimiser (noisy labels outside the simplex drive the logits to infinity), "
                   "so the trained point is where the solver stopped; use λ > 0", err=True)


def _write_figure(out: Path, problem: Problem, shown: list[dict[str, Any]], alphas: list[float], dims: list[int],
                  theory: bool, err: Any) -> None:
    """--out: the figure and its parquet from the records shown (per d and 1/d fits), with --theory the SE on a
    dense log grid over the simulated α range (reproduce.curves)."""
    from ..reproduce.curves import SE_POINTS, draw_simulation, se_curves, simulation_table, write_outputs

    curves = None
    if theory:
        n = SE_POINTS * (len(dims) if problem.task.target.needs_d else 1)
        with progress_bar(err) as bar:
            job = bar.add_task("state evolution for the figure", total=n)
            curves = se_curves(problem, alphas, dims, progress=lambda: bar.advance(job))
    paths = write_outputs(simulation_table(shown, problem, curves), out, draw_simulation)
    err.print(f"wrote {paths[0]} and {paths[1]}", markup=False, highlight=False)


def save_spectra(path: Path, records: list[dict[str, Any]]) -> None:
    """Write eigenvalues of S_hat and singular values of W/(pd)^{1/4} per alpha and seed to ``path`` (.npz),
    atomically (:func:`..cli_common.atomic_write`: a temporary file in the same directory, then os.replace).

    Arrays: ``alpha`` (A,), ``seeds`` (S,) the seed numbers, ``eigenvalues`` (A, S, d),
    ``singular_values`` (A, S, min(p, d)), ``d`` and ``p``.
    """
    import numpy as np

    first = records[0]
    seeds = np.arange(first["seed0"], first["seed0"] + first["seeds"])
    arrays = {
        "alpha": np.array([r["alpha"] for r in records]),
        "seeds": seeds,
        "eigenvalues": np.stack([np.asarray(r["eigenvalues"]) for r in records]),
        "singular_values": np.stack([np.asarray(r["singular_values"]) for r in records]),
        "d": np.array(first["d"]),
        "p": np.array(first["p"]),
    }

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append .npz to a name without it
            np.savez(fh, **arrays)

    atomic_write(path, write)


def _warn_large_norm_branch(se_records: dict[Any, dict[str, Any]], solver: str, scaled: bool) -> None:
    """One warning line where the state evolution of --theory chose a large-norm fixed point (its message says
    "two fixed points" or that the cold start stalled) and the run does not try scaled starts: the trainers start
    from S = 0 (prox) or a small random W, and end on the small-norm minimiser there (MP kappa0 = 0.2, Delta = 2,
    lambda = 1e-3, alpha = 0.5: test error 0.44-0.48 against the SE's 0.882; docs/theory/state_evolution.md, "Large
    logit noise: past the fold"), so the comparison would be with the other branch."""
    if scaled:
        return
    from ..theory.state_evolution import scaled_start_notes

    # (the exact notes: the Delta- and lambda-continuations' "cold start stalled, continued from ..." and "cold start
    # stalled (q = ...), continued from ..." are no large-norm branch)
    hit = sorted({r["alpha"] for r in se_records.values() if r.get("converged")
                  and scaled_start_notes(str(r.get("message", "")))})
    if hit:
        how = "add --scaled-starts 3" if solver == "prox" else "use --solver prox --scaled-starts 3"
        typer.echo(f"warning: α = {', '.join(f'{a:.4g}' for a in hit)}: the state evolution's fixed point is a "
                   f"large-norm branch (its message says why); a run from a small start can end on the small-norm "
                   f"minimiser instead: {how}", err=True)


def _check_writable(path: Path | None, name: str) -> None:
    """Before any training: a file can be created in ``path``'s directory (a read-only or full file system, no
    permission), else ParameterError(name) -- not a traceback after the whole run."""
    import os
    import tempfile

    if path is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=".write-check-", dir=Path(path).parent)
    except OSError as exc:
        raise ParameterError(name, f"cannot write to directory '{Path(path).parent}': {exc.strerror}") from None
    os.close(fd)
    os.unlink(tmp)


@with_problem
def simulate(
    problem: Problem,
    alpha: Annotated[str, typer.Option("--alpha", help="α = n/d² values: a,b,c or start:stop:num (log)")],
    d: Annotated[str, typer.Option("--d", help="token dimension d (n = round(α d²) sequences); several, "
                                   "e.g. 50,100,200: also the 1/d fit y = a + b/d per α (the d → ∞ estimate)")] = "100",
    seeds: Annotated[int, typer.Option("--seeds", help="independent data sets per α")] = 8,
    solver: Annotated[str, typer.Option("--solver", help="adam | lbfgs | prox | gamp | ...")] = "adam",
    device: Annotated[str, typer.Option("--device", help="cpu | cuda")] = "cpu",
    seed: Annotated[int, typer.Option("--seed", help="first seed (seeds seed .. seed+seeds-1)")] = 0,
    n_test: Annotated[int, typer.Option("--n-test", help="fresh test sequences per seed")] = 2000,
    save_spectra_to: Annotated[
        Path | None, typer.Option("--save-spectra", help="write eigenvalues/singular values to this .npz")
    ] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="torch CPU threads")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="adam: maximum steps")] = None,
    scaled_starts: Annotated[str | None, typer.Option(
        "--scaled-starts", help="prox: after the solve from S = 0 also solve from s × Ŝ for each s (e.g. 3 or 3,10) "
        "and keep the lowest objective (the objective is not convex: at large Δ and small λ S = 0 can miss the "
        "lower, large-norm minimiser)")] = None,
    theory: Annotated[bool, typer.Option("--theory", help="add the state evolution and the z-score of the "
                                         "simulated test error: d → ∞ for mp:K (also on the 1/d fit), the SE at "
                                         "each d for targets whose spectrum depends on d")] = False,
    out: Annotated[Path | None, typer.Option(
        "--out", help="also draw test and train error against α to this figure (.png, .pdf or .svg): mean ± s.e. "
        "per d, the 1/d fit, and with --theory the SE on a dense α grid; the plotted data goes to the same name "
        "with .parquet")] = None,
    json: JsonOpt = False,
) -> None:
    """Train the student at finite d (seeds independent data sets per α) and report errors, MSE and rank.

    With several --d, each α gets a record per d and then one with d = null: the weighted fit y = a + b/d of
    the test error, MSE, train error and objective (the d → ∞ estimate, with its standard error and χ²)."""
    from rich.console import Console
    from rich.table import Table

    with cli_errors():
        alphas = parse_floats(alpha, "alpha")
        dims = parse_dimensions(d)
        if seeds < 1:
            raise ParameterError("seeds", f"must be an integer >= 1 (got {seeds})")
        if seed < 0:
            raise ParameterError("seed", f"must be >= 0 (got {seed}): seeds are non-negative integers")
        if n_test < 2:
            raise ParameterError("n-test", f"must be an integer >= 2 (got {n_test})")
        if threads is not None and threads < 1:
            raise ParameterError("threads", f"must be >= 1 (got {threads})")
        if device not in ("cpu", "cuda"):
            raise ParameterError("device", f"must be cpu or cuda (got {device!r})")
        check_output_file(save_spectra_to, "save-spectra")
        _check_writable(save_spectra_to, "save-spectra")
        if out is not None:
            from ..reproduce.curves import check_out

            check_out(out)
            _check_writable(out, "out")
        if save_spectra_to is not None and len(dims) > 1:
            raise ParameterError("save-spectra", "writes one d at a time (got several --d)")
        if len(dims) > 1 and seeds < 2:
            raise ParameterError("seeds", "the 1/d fit over several --d needs standard errors: use --seeds >= 2")
        # a spectrum that depends on d (power law, spikes) has its SE at each record's d, mp:K the d -> inf one
        limit_theory = theory and not problem.task.target.needs_d
        from ..amp import register as register_gamp
        from ..simulation import SOLVERS, n_of, resolve_device, simulate_record
        from ..simulation.trainers import unknown_solver

        register_gamp()  # the "gamp" solver lives above the simulation layer (it uses the theory's channel)

        if solver not in SOLVERS:
            raise ParameterError("solver", unknown_solver(solver))
        if solver == "gamp" and problem.task.task != "seq2lab":  # before the SE of --theory, not at the first seed
            raise ParameterError("task", "GAMP is implemented for seq2lab (its loss is a function of the logits)")
        resolve_device(device)
        for a in alphas:
            for dd in dims:
                n_of(a, dd)
        options: dict[str, Any] = {}
        if max_steps is not None:
            if max_steps < 1:
                raise ParameterError("max-steps", f"must be >= 1 (got {max_steps})")
            if solver != "adam":
                raise ParameterError("max-steps", "applies to --solver adam only")
            options["max_steps"] = max_steps
        if scaled_starts is not None:
            from ..simulation import check_scaled_starts

            try:
                options["scaled_starts"] = check_scaled_starts(scaled_starts, solver)
            except ParameterError as exc:
                raise ParameterError("scaled-starts", exc.message) from None
        scaled = bool(options.get("scaled_starts"))

        _warn_no_minimiser(problem, alphas, dims)
        se_records: dict[tuple[float, int | None], dict[str, Any]] = {}
        if theory:
            from ..theory.api import theory_records

            try:
                for dd in [None] if limit_theory else dims:
                    se_records.update({(r["alpha"], dd): r for r in theory_records(problem, alphas, d=dd)})
            except KeyboardInterrupt:
                typer.echo("simulate: interrupted while solving the state evolution of --theory (before any "
                           "training)", err=True)
                raise typer.Exit(code=130) from None
            _warn_large_norm_branch(se_records, solver, scaled)

        def emit(rec: dict[str, Any]) -> dict[str, Any]:
            key = (rec["alpha"], None if limit_theory else rec["d"])
            if key in se_records:
                rec = with_theory(rec, se_records[key], key[1])
            if json:
                emit_json({k: v for k, v in rec.items() if k not in ("eigenvalues", "singular_values")})
            return rec

        label = f"d={','.join(map(str, dims))}"
        records, shown = [], []
        err = Console(stderr=True)
        interrupted = False
        with progress_bar(err) as bar:
            job = bar.add_task(f"{solver} {label}", total=len(alphas) * len(dims) * seeds)
            if solver in ("adam", "lbfgs", "prox"):  # their callbacks are free (gamp's costs a pass over the data)
                last = [0.0]

                def step_progress(step: int, F: float, seconds: float) -> None:
                    # a seed can take long (Adam at small lambda may run to --max-steps): show that it moves
                    if seconds - last[0] >= 0.5 or seconds < last[0]:
                        last[0] = seconds
                        bar.update(job, description=f"{solver} α={cur[0]:.4g} d={cur[1]}: step {step}, F={F:.4e}")

                options["callback"] = step_progress
            cur = [0.0, 0]
            try:
                with sigterm_as_interrupt():  # a batch system's SIGTERM stops the run like Ctrl-C
                    for a in alphas:
                        per_d = []
                        for dd in dims:
                            cur[:] = [a, dd]
                            rec = simulate_record(
                                problem, a, dd, seeds=seeds, solver=solver, device=device, seed0=seed,
                                n_test=n_test, return_spectra=save_spectra_to is not None,
                                progress=lambda info: bar.advance(job), threads=threads, **options,
                            )
                            records.append(rec)
                            per_d.append(rec)
                            shown.append(emit(rec))
                        if len(dims) > 1:
                            shown.append(emit(extrapolated_record(per_d)))
            except KeyboardInterrupt:  # Ctrl-C: keep what is finished (shown below), write no partial files
                interrupted = True
        if not interrupted:
            for name, path in (("save-spectra", save_spectra_to), ("out", out)):
                if path is None:
                    continue
                try:  # checked writable before training; a disk that fills up since still gets one line
                    if name == "out":
                        _write_figure(out, problem, shown, alphas, dims, theory, err)
                    else:
                        save_spectra(save_spectra_to, records)
                except OSError as exc:
                    raise ParameterError(name, f"cannot write '{path}': {exc.strerror or exc}") from None
    unconverged_se = sorted({r["alpha"] for r in se_records.values() if not r["converged"]})
    if unconverged_se:  # the record says se_converged: false; the table marks it; say it once here too
        typer.echo(f"warning: the state evolution of --theory did not converge at α = "
                   f"{', '.join(f'{a:.4g}' for a in unconverged_se)} (se_converged: false)", err=True)
    if not json and shown:
        title = label if len(dims) == 1 else f"{label} and the 1/d fit"
        table = Table(title=f"simulation ({solver}, {title}, {seeds} seeds): {problem_title(problem)}",
                      caption="test/clean: test error against noisy/clean labels; rank: fraction of eig > 1e-6 max"
                      + ("; d = ∞: intercept a of y = a + b/d over the d above" if len(dims) > 1 else "")
                      + ("; SE: state evolution " + ("(d → ∞)" if limit_theory else "at each d")
                         + ", z = (test − SE)/sem" if theory else "")
                      + ("; ?: the SE did not converge there" if unconverged_se else "")
                      + (f"; scaled: fraction of seeds whose lowest objective came from a start at s × Ŝ, s in "
                         f"{','.join(f'{v:g}' for v in options['scaled_starts'])}" if scaled else ""))
        cols = ["α", "d", "n", "test", "± sem", "clean", "train", "MSE S", "rank", "conv", "s"]
        if theory:
            cols[5:5] = ["SE", "z"]
        if scaled:
            cols.insert(-1, "scaled")
        for col in cols:
            table.add_column(col, justify="right")
        for r in shown:
            fit = r.get("extrapolated", False)
            row = [f"{r['alpha']:.4g}", "∞" if fit else str(r["d"]), "" if fit else str(r["n"]),
                   f"{r['test_error_mean']:.4f}", f"{r['test_error_sem']:.4f}",
                   f"{r['test_error_clean_mean']:.4f}", f"{r['train_error_mean']:.4f}", f"{r['mse_mean']:.4f}",
                   "" if fit else f"{r['rank_mean']:.3f}", "" if fit else f"{r['converged']:.2f}",
                   f"{r['seconds']:.1f}"]
            if theory:
                mark = "" if r.get("se_converged", True) else "?"
                row[5:5] = ([f"{r['se_test_error']:.4f}{mark}", f"{r['z_test_error']:+.1f}{mark}"]
                            if "se_test_error" in r else ["", ""])
            if scaled:
                row.insert(-1, "" if fit else f"{r['from_scaled_start']:.2f}")
            table.add_row(*row)
        print_table(table, min_width=120)
    if interrupted:
        skipped = [f"--{n}" for n, v in (("save-spectra", save_spectra_to), ("out", out)) if v is not None]
        typer.echo(f"simulate: interrupted; {len(records)} of {len(alphas) * len(dims)} (α, d) records finished"
                   + (" (shown above)" if records else "")
                   + (f"; nothing written to {', '.join(skipped)}" if skipped else ""), err=True)
        raise typer.Exit(code=130)
    if not all(r["converged_all"] for r in records):
        typer.echo("warning: some seeds did not converge (see 'converged')", err=True)
        raise typer.Exit(code=1)
