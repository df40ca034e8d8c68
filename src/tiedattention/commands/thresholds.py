"""`tiedattention thresholds`: interpolation, perfect-recovery and Bayes-optimal thresholds."""

from __future__ import annotations

from typing import Annotated

import typer

from ..cli_common import JsonOpt, check_dimension, cli_errors, emit_json, print_table, problem_title, with_problem
from ..problem import Problem


def register(app: typer.Typer) -> None:
    app.command("thresholds")(thresholds_cmd)


@with_problem
def thresholds_cmd(
    problem: Problem,
    d: Annotated[int | None, typer.Option("--d", help="dimension for list-based targets")] = None,
    json: JsonOpt = False,
) -> None:
    """Thresholds of the λ → 0+ ERM in ᾱ = α(T²+T−2)/2 units and in α units."""
    from rich.console import Console
    from rich.table import Table

    from ..theory.thresholds import thresholds

    with cli_errors():
        check_dimension(d)  # (--d 0 and --d -5 died with a ZeroDivisionError / ValueError traceback)
        th = thresholds(problem, d=d).to_dict()
    if json:
        emit_json(th)
        return
    title = problem_title(problem, always=("target", "noise", "tokens"), skip=("lam", "beta", "beta0"))
    table = Table(title=f"thresholds: {title} (κ0 = {th['kappa0']:.4g})")
    for col in ("threshold", "ᾱ", "α = n/d²"):
        table.add_column(col, justify="right")
    for name in ("interpolation", "perfect_recovery_factorized", "perfect_recovery_direct", "bayes_optimal"):
        if th[name] is None:
            table.add_row(name.replace("_", " "), "none", "none")
        else:
            table.add_row(name.replace("_", " "), f"{th[name]:.6f}", f"{th[name + '_alpha']:.6f}")
    print_table(table)
    if th["message"]:
        Console().print(f"[yellow]note:[/] {th['message']}")
