"""``tiedattention reproduce NAME|all --out DIR [--quick]``: the study's figures, theory and simulations."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from ..cli_common import cli_errors, output_dir, resumable
from ..errors import ParameterError


def register(app: typer.Typer) -> None:
    @app.command("reproduce")
    def reproduce(
        name: Annotated[str, typer.Argument(help="figure name (fig1 ... fig10) or 'all'", show_default=False)],
        out: Annotated[str, typer.Option("--out", help="output directory (PNG, PDF, Parquet; store/ to resume)")],
        quick: Annotated[
            bool, typer.Option("--quick", help="small d, few seeds, coarse grids (all figures in minutes)")
        ] = False,
        workers: Annotated[
            int | None, typer.Option("--workers", help="local worker processes (default: all cores)")
        ] = None,
        scheduler: Annotated[
            str | None, typer.Option("--scheduler", help="dask.distributed scheduler, tcp://HOST:PORT")
        ] = None,
        progress: Annotated[bool, typer.Option("--progress/--no-progress", help="progress on stderr")] = True,
    ) -> None:
        """Reproduce a figure of the study: state evolution as lines, simulations as points with standard errors.

        Simulations are trained with L-BFGS in fig2, fig3, fig4 and fig6, with the proximal solver on S in fig1,
        fig5 and fig7-fig10. Writes OUT/NAME.png, .pdf and .parquet (the plotted data); interrupted runs resume from
        OUT/store. Figures: see docs/gallery.md."""
        from ..reproduce import FIGURES, figure_module
        from ..reproduce import reproduce as run_figure
        from ..sweep.executors import check_executor

        with cli_errors():
            names = list(FIGURES) if name == "all" else [name]
            for n in names:
                figure_module(n)
            out = output_dir(out, "out")
            for n in names:  # the files each figure writes
                for ext in ("png", "pdf", "parquet"):
                    if (out / f"{n}.{ext}").is_dir():
                        raise ParameterError("out", f"'{out / f'{n}.{ext}'}' is a directory, not a file")
            check_executor(scheduler or "local", workers)
            again = f"tiedattention reproduce {name} --out {shlex.quote(str(out))}" + (" --quick" if quick else "")
            if workers is not None:  # the same command: where and on how many workers the cells run
                again += f" --workers {workers}"
            if scheduler is not None:
                again += f" --scheduler {shlex.quote(scheduler)}"
            failed = []
            with resumable("reproduce", again=again):
                for n in names:
                    try:
                        run_figure(n, out, quick=quick, workers=workers, executor=scheduler or "local",
                                   progress=progress)
                    except RuntimeError as exc:  # cells failed: say so, and go on with the other figures
                        if len(names) == 1:
                            raise
                        typer.echo(f"reproduce: {exc}", err=True)
                        failed.append(n)
        if failed:
            typer.echo(f"reproduce: cells failed in {', '.join(failed)} (the other figures are written); rerun the "
                       "same command to retry them", err=True)
            raise typer.Exit(code=1)
