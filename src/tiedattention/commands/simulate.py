"""`tiedattention simulate`: train tied attention at finite d on AIM data, one JSON object per alpha."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from ..cli_common import JsonOpt, check_dimension, cli_errors, emit_json, parse_floats, with_problem
from ..errors import ParameterError
from ..problem import Problem


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def save_spectra(path: Path, records: list[dict[str, Any]]) -> None:
    """Write eigenvalues of S_hat and singular values of W/(pd)^{1/4} per alpha and seed to ``path`` (.npz),
    atomically (temporary file in the same directory, then os.replace).

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
    fd, tmp = tempfile.mkstemp(prefix=".spectra-", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@with_problem
def simulate(
    problem: Problem,
    alpha: Annotated[str, typer.Option("--alpha", help="α = n/d² values: a,b,c or start:stop:num (log)")],
    d: Annotated[int, typer.Option("--d", help="token dimension d (n = round(α d²) sequences)")] = 100,
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
    json: JsonOpt = False,
) -> None:
    """Train the student at finite d (seeds independent data sets per α) and report errors, MSE and rank."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    with cli_errors():
        alphas = parse_floats(alpha, "alpha")
        check_dimension(d)
        if seeds < 1:
            raise ParameterError("seeds", f"must be an integer >= 1 (got {seeds})")
        if n_test < 2:
            raise ParameterError("n-test", f"must be an integer >= 2 (got {n_test})")
        if threads is not None and threads < 1:
            raise ParameterError("threads", f"must be >= 1 (got {threads})")
        if device not in ("cpu", "cuda"):
            raise ParameterError("device", f"must be cpu or cuda (got {device!r})")
        if save_spectra_to is not None and not save_spectra_to.parent.resolve().is_dir():
            raise ParameterError("save-spectra", f"directory {save_spectra_to.parent} does not exist")

        from ..amp import register as register_gamp
        from ..simulation import SOLVERS, n_of, resolve_device, simulate_record

        register_gamp()  # the "gamp" solver lives above the simulation layer (it uses the theory's channel)

        if solver not in SOLVERS:
            raise ParameterError("solver", f"unknown solver {solver!r} (known: {', '.join(sorted(SOLVERS))})")
        resolve_device(device)
        for a in alphas:
            n_of(a, d)
        options: dict[str, Any] = {}
        if max_steps is not None:
            if max_steps < 1:
                raise ParameterError("max-steps", f"must be >= 1 (got {max_steps})")
            if solver != "adam":
                raise ParameterError("max-steps", "applies to --solver adam only")
            options["max_steps"] = max_steps

        records = []
        err = Console(stderr=True)
        with Progress(console=err, transient=True) as bar:
            job = bar.add_task(f"{solver} d={d}", total=len(alphas) * seeds)
            for a in alphas:
                rec = simulate_record(
                    problem, a, d, seeds=seeds, solver=solver, device=device, seed0=seed, n_test=n_test,
                    return_spectra=save_spectra_to is not None, progress=lambda info: bar.advance(job),
                    threads=threads, **options,
                )
                records.append(rec)
                if json:
                    emit_json({k: v for k, v in rec.items() if k not in ("eigenvalues", "singular_values")})
        if save_spectra_to is not None:
            save_spectra(save_spectra_to, records)
    if not json:
        table = Table(title=f"simulation ({solver}, d={d}, {seeds} seeds): {problem.task.target} "
                      f"Δ={problem.task.noise} λ={problem.student.lam}",
                      caption="test/clean: test error against noisy/clean labels; rank: fraction of eig > 1e-6 max")
        for col in ("α", "n", "test", "± sem", "clean", "train", "MSE S", "rank", "conv", "s"):
            table.add_column(col, justify="right")
        for r in records:
            table.add_row(
                f"{r['alpha']:.4g}", str(r["n"]), f"{r['test_error_mean']:.4f}", f"{r['test_error_sem']:.4f}",
                f"{r['test_error_clean_mean']:.4f}", f"{r['train_error_mean']:.4f}", f"{r['mse_mean']:.4f}",
                f"{r['rank_mean']:.3f}", f"{r['converged']:.2f}", f"{r['seconds']:.1f}",
            )
        Console(width=max(Console().width, 100)).print(table)
    if not all(r["converged_all"] for r in records):
        typer.echo("warning: some seeds did not converge (see 'converged')", err=True)
        raise typer.Exit(code=1)
