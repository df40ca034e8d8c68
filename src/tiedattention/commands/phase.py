"""`tiedattention phase`: a theory phase diagram, a state-evolution quantity over alpha and one more parameter.

One row per value of ``--over NAME=VALUES`` is one warm-started SE learning curve along ``--alpha``, computed through
the sweep machinery into a store (``--store``; by default ``FIG.store/`` next to ``--out FIG.png``), so a second run
computes only the rows not yet there and Ctrl-C keeps the finished ones. Writes the figure and ``FIG.parquet``
(one row per point); ``--json`` prints JSON Lines, one object per (row value, alpha), then a summary object.
The work is :func:`tiedattention.reproduce.phase.phase_diagram`; see docs/user-guide/phase.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..cli_common import (
    FIGURE_SUFFIXES,
    JsonOpt,
    check_output_file,
    cli_errors,
    emit_json,
    output_dir,
    parse_floats,
    print_table,
    resumable,
    with_problem,
)
from ..errors import ParameterError
from ..problem import Problem


def register(app: typer.Typer) -> None:
    app.command("phase")(phase)


@with_problem
def phase(
    problem: Problem,
    alpha: Annotated[str, typer.Option("--alpha", help="α = n/d² values: a,b,c or start:stop:num (log)")],
    over: Annotated[str, typer.Option(
        "--over", help="the second axis NAME=VALUES: NAME one of lam, noise, noise_out, beta, beta0, kappa, tokens; "
        "VALUES a,b,c or start:stop:num (log); e.g. lam=1e-4:1:25")],
    d: Annotated[int | None, typer.Option("--d", help="dimension for list-based targets (power law, spikes)")] = None,
    quantity: Annotated[str, typer.Option(
        "--quantity", help="the record field drawn: test_error, train_error, mse, rank, test_error_clean, ...")
    ] = "test_error",
    rs_stability: Annotated[bool, typer.Option(
        "--rs-stability", help="add the RS (AT) stability of each point and hatch the unstable cells (~1-3 s a point)")
    ] = False,
    train_zero: Annotated[float, typer.Option(
        "--train-zero", help="train error counted as zero, for the per-row boundary where it leaves zero")] = 1e-4,
    out: Annotated[Path | None, typer.Option(
        "--out", help="figure (.png, .pdf or .svg); the data goes to the same name with .parquet")] = None,
    store: Annotated[str | None, typer.Option(
        "--store", help="store directory of the finished rows (default: FIG.store next to --out; required without "
        "--out)")] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", help="local worker processes (default: all cores)")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="progress bar on stderr")] = True,
    json: JsonOpt = False,
) -> None:
    """Phase diagram of the state evolution over α and one more parameter (docs/user-guide/phase.md)."""

    from ..reproduce.phase import parse_over, phase_diagram, quantities, write_outputs

    with cli_errors():
        alphas = sorted(set(parse_floats(alpha, "alpha")))
        name, values = parse_over(over, problem)
        valid = quantities(rs_stability)
        if quantity not in valid:
            extra = "" if rs_stability else " (rs_at, rs_switching need --rs-stability)"
            raise ParameterError("quantity", f"unknown field {quantity!r}; valid: {', '.join(valid)}{extra}")
        check_output_file(out, "out", suffix=FIGURE_SUFFIXES)
        if out is not None:  # the table next to the figure
            check_output_file(out.with_suffix(".parquet"), "out")
        if store is None:
            if out is None:
                raise ParameterError("store", "give --store DIR (where finished rows are kept) when there is no --out")
            store = out.with_suffix(".store")
        store = output_dir(store, "store")
        # phase_diagram (and run_sweep) check --d, --train-zero, --workers and the rows' targets against --d before
        # the store is created
        with resumable("phase"):
            df = phase_diagram(problem, alphas, name, values, d=d, rs_stability=rs_stability, store=store,
                               workers=workers, progress=progress, train_zero=train_zero)
    summary = dict(df.attrs["summary"], quantity=quantity)
    if summary["not_converged"]:
        bad = df[~df["converged"].astype(bool)]
        where = ", ".join(f"(α={r.alpha:.4g}, {name}={r.value:g})" for r in bad.head(6).itertuples())
        more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
        typer.echo(f"warning: {summary['not_converged']} of {summary['points']} points did not converge: {where}{more}"
                   "; they are masked (grey) in the map and listed as converged: false", err=True)
    if out is not None:
        with cli_errors(), resumable("phase"):  # (a write that fails now: one line, the rows are in the store)
            paths = write_outputs(df, out, quantity)
        summary["files"] = [str(p) for p in paths]
    if json:
        for rec in df.to_dict(orient="records"):
            emit_json(rec)
        emit_json(summary)
        return
    _table(df, name, quantity, summary)


def _table(df, name: str, quantity: str, summary: dict) -> None:
    """One line per row value: points converged, the quantity's range, the row's boundaries."""
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"phase diagram: {quantity} over α × {name} ({summary['grid'][0]} × {summary['grid'][1]})")
    for col in (name, "converged", f"min {quantity}", f"max {quantity}", "α train>0", "α interp λ→0+",
                "α PR λ→0+"):
        table.add_column(col, justify="right")

    def f(x: float) -> str:
        return "-" if x is None or not np.isfinite(x) else f"{x:.4g}"

    for v, g in df.groupby("value", sort=True):
        ok = g[g["converged"].astype(bool)]
        q = ok[quantity].astype(float) if quantity in ok and len(ok) else None
        table.add_row(f"{v:g}", f"{len(ok)}/{len(g)}", f(q.min() if q is not None else None),
                      f(q.max() if q is not None else None), f(g["train_zero_alpha"].iloc[0]),
                      f(g["interpolation_alpha"].iloc[0]), f(g["perfect_recovery_alpha"].iloc[0]))
    print_table(table)
    Console(stderr=True, highlight=False).print(
        f"phase: {summary['computed']} of {summary['cells']} rows computed now ({summary['skipped']} from "
        f"{summary['store']}) in {summary['seconds']:.1f} s", markup=False)
