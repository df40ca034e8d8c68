"""``tiedattention sweep SPEC --out STORE``: run a TOML grid into a resumable Parquet store."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from ..cli_common import cli_errors, emit_json, output_dir, resumable
from ..errors import ParameterError


def json_rows(table: Any) -> list[dict[str, Any]]:
    """The store's table as JSON-ready rows. An integer column that some rows lack (``d`` of the theory rows next
    to simulations) is float in a DataFrame (NaN upcast); its values are given back as integers (20, not 20.0):
    a float column with missing values whose other values are all integral. Missing values stay NaN (JSON null)."""
    upcast = [c for c in table.columns if table[c].dtype.kind == "f" and table[c].isna().any()
              and bool((table[c].dropna() % 1 == 0).all())]
    rows = table.to_dict(orient="records")
    for row in rows:
        row.update({c: int(row[c]) for c in upcast if row[c] == row[c]})
    return rows


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        spec: Annotated[Path, typer.Argument(help="TOML spec: a \\[grid] table of lists and a \\[run] table")],
        out: Annotated[str, typer.Option("--out", help="store directory (created; reused to resume)")],
        scheduler: Annotated[
            str | None, typer.Option("--scheduler", help="dask.distributed scheduler, tcp://HOST:PORT")
        ] = None,
        workers: Annotated[
            int | None, typer.Option("--workers", help="local worker processes (default: all cores)")
        ] = None,
        json_out: Annotated[
            bool, typer.Option("--json", help="print this spec's rows of the store as JSON Lines on stdout")
        ] = False,
        progress: Annotated[
            bool, typer.Option("--progress/--no-progress", help="progress bar on stderr")
        ] = True,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="validate, count cells and finished ones; compute nothing")
        ] = False,
    ) -> None:
        """Run every cell of a sweep not yet in the store (see docs/user-guide/sweeps.md).

        Interrupted sweeps (Ctrl-C, kill, a crashed worker) resume with the same command.
        """
        from ..sweep import Store, load_spec, run_sweep
        from ..sweep.executors import check_executor
        from ..sweep.routes import check_local_device, check_route

        with cli_errors():
            sweep_spec = load_spec(spec)
            out = output_dir(out, "out")
            check_executor(scheduler or "local", workers)
            if dry_run:  # (a real run checks the routes in run_sweep, before the store exists)
                for route in sweep_spec.routes:  # unknown solver or [run] key
                    check_route(route, sweep_spec.settings)
                if "simulate" in sweep_spec.routes and scheduler is None:
                    check_local_device(sweep_spec.settings)
                store = Store(out, create=False)
                done = store.done_keys() & set(sweep_spec.keys)
                typer.echo(
                    f"sweep: {len(sweep_spec)} cells ({', '.join(sweep_spec.routes)}), "
                    f"{len(done)} already in {out}, {len(sweep_spec) - len(done)} to compute",
                    err=True,
                )
                return
            again = f"tiedattention sweep {shlex.quote(str(spec))} --out {shlex.quote(str(out))}"  # (copy-pasteable)
            with resumable("sweep", again=again, failed_cells=False):
                try:
                    summary = run_sweep(sweep_spec, out, executor=scheduler or "local", max_workers=workers,
                                        progress=progress)
                except ParameterError as exc:  # run_sweep names its store argument; here it is --out
                    raise ParameterError("out" if exc.param == "store" else exc.param, exc.message) from None

        typer.echo(f"sweep: {summary.line()} in {summary.seconds:.1f} s", err=True)
        for problem in summary.corrupt:  # (moved to corrupt/ by run_sweep; only this spec's cells were recomputed)
            if problem.path.stem not in set(sweep_spec.keys):
                typer.echo(f"sweep: moved a corrupt cell file aside: {problem.path} (not a cell of this spec)",
                           err=True)
            elif problem.path.stem not in summary.failures:
                typer.echo(f"sweep: recomputed a corrupt cell file: {problem.path}", err=True)
        if summary.failures:
            by_key = {c.key: c for c in sweep_spec.cells}
            for i, (key, message) in enumerate(summary.failures.items()):
                if i == 5:
                    typer.echo(f"sweep: ... and {summary.failed - 5} more failures", err=True)
                    break
                cell = by_key[key]
                typer.echo(
                    f"sweep: failed {key[:12]} (route={cell.route}, alpha={cell.params['alpha']}): {message}",
                    err=True,
                )
        if json_out:
            for row in json_rows(summary.table()):
                emit_json(row)
        if summary.failures:
            typer.echo("sweep: failed cells are not stored; rerun the same command to retry them", err=True)
            raise typer.Exit(code=1)
