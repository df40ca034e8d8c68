"""`tiedattention thresholds`: interpolation, perfect-recovery and Bayes-optimal thresholds."""

from __future__ import annotations

from typing import Annotated

import typer

from ..cli_common import (
    Beta0Opt,
    BetaOpt,
    JsonOpt,
    KappaOpt,
    LamOpt,
    ModelOpt,
    NoiseOpt,
    NoiseOutOpt,
    TargetOpt,
    TaskOpt,
    TokensOpt,
    cli_errors,
    emit_json,
    problem_from_cli,
)


def register(app: typer.Typer) -> None:
    app.command("thresholds")(thresholds_cmd)


def thresholds_cmd(
    target: TargetOpt = "mp:0.5",
    noise: NoiseOpt = 0.5,
    noise_out: NoiseOutOpt = 0.0,
    lam: LamOpt = 0.01,
    tokens: TokensOpt = 2,
    beta: BetaOpt = 1.0,
    beta0: Beta0Opt = 1.0,
    kappa: KappaOpt = 1.0,
    model: ModelOpt = "factorized",
    task: TaskOpt = "seq2lab",
    d: Annotated[int | None, typer.Option("--d", help="dimension for list-based targets")] = None,
    json: JsonOpt = False,
) -> None:
    """Thresholds of the λ → 0+ ERM in ᾱ = α(T²+T−2)/2 units and in α units."""
    from rich.console import Console
    from rich.table import Table

    from ..theory.thresholds import thresholds

    with cli_errors():
        problem = problem_from_cli(target, noise, noise_out, lam, tokens, beta, beta0, kappa, model, task)
        th = thresholds(problem, d=d).to_dict()
    if json:
        emit_json(th)
        return
    table = Table(title=f"thresholds: {problem.task.target} (κ0 = {th['kappa0']:.4g}), Δ = {noise}, T = {tokens}")
    for col in ("threshold", "ᾱ", "α = n/d²"):
        table.add_column(col, justify="right")
    for name in ("interpolation", "perfect_recovery_factorized", "perfect_recovery_direct", "bayes_optimal"):
        table.add_row(name.replace("_", " "), f"{th[name]:.6f}", f"{th[name + '_alpha']:.6f}")
    Console().print(table)
