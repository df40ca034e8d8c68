"""`tiedattention theory`: the state-evolution learning curve, one JSON object per alpha."""

from __future__ import annotations

from typing import Annotated

import typer

from ..cli_common import JsonOpt, check_dimension, cli_errors, emit_json, parse_floats, with_problem
from ..errors import ParameterError
from ..problem import Problem


def register(app: typer.Typer) -> None:
    app.command("theory")(theory)


@with_problem
def theory(
    problem: Problem,
    alpha: Annotated[str, typer.Option("--alpha", help="α = n/d² values: a,b,c or start:stop:num (log)")],
    d: Annotated[int | None, typer.Option("--d", help="dimension for list-based targets (power law, spikes)")] = None,
    tol: Annotated[float, typer.Option("--tol", help="fixed-point tolerance (relative residual)")] = 1e-10,
    order: Annotated[int | None, typer.Option("--order", help="Gauss-Hermite order per dimension (T=2)")] = None,
    json: JsonOpt = False,
) -> None:
    """Exact high-dimensional prediction (state evolution) along a list of α, warm-started."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from ..theory.api import theory_records

    with cli_errors():
        alphas = sorted(parse_floats(alpha, "alpha"))
        check_dimension(d)
        if not tol > 0:
            raise ParameterError("tol", f"must be > 0 (got {tol})")
        options = {"tol": tol}
        if order is not None:
            if order < 2:
                raise ParameterError("order", f"must be >= 2 (got {order})")
            options["channel_options"] = {"order": order}
        err = Console(stderr=True)
        with Progress(console=err, transient=True, disable=len(alphas) < 2) as bar:
            job = bar.add_task("state evolution", total=len(alphas))
            records = theory_records(problem, alphas, d=d, progress=lambda: bar.advance(job), **options)
    if json:
        for rec in records:
            emit_json(rec)
        return
    o = problem.options()
    table = Table(title=f"state evolution: {o['target']} Δ={o['noise']} λ={o['lam']} T={o['tokens']}")
    for col in ("α", "ᾱ", "test error", "test (clean)", "train error", "MSE on S", "rank", "conv", "s"):
        table.add_column(col, justify="right")
    for r in records:
        table.add_row(
            f"{r['alpha']:.4g}", f"{r['alpha_bar']:.4g}", f"{r['test_error']:.6f}", f"{r['test_error_clean']:.6f}",
            f"{r['train_error']:.6f}", f"{r['mse']:.6f}", f"{r['rank']:.4f}", "yes" if r["converged"] else "NO",
            f"{r['seconds']:.2f}",
        )
    Console().print(table)
    if not all(r["converged"] for r in records):
        raise typer.Exit(code=1)
