"""`tiedattention theory`: the state-evolution learning curve, one JSON object per alpha."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..cli_common import (
    LAM_DEFAULT,
    JsonOpt,
    check_dimension,
    cli_errors,
    emit_json,
    parse_floats,
    print_table,
    problem_title,
    progress_bar,
    with_problem,
)
from ..errors import ParameterError
from ..problem import Problem

LAM_RANGE_DEFAULT = "1e-5:10"


def register(app: typer.Typer) -> None:
    app.command("theory")(theory)


@with_problem
def theory(
    problem: Problem,
    alpha: Annotated[str, typer.Option("--alpha", help="α = n/d² values: a,b,c or start:stop:num (log)")],
    d: Annotated[int | None, typer.Option("--d", help="dimension for list-based targets (power law, spikes)")] = None,
    tol: Annotated[float, typer.Option("--tol", help="fixed-point tolerance (relative residual)")] = 1e-10,
    order: Annotated[int | None, typer.Option(
        "--order", help="Gauss-Hermite order per dimension (T=2; 2-64; default max(16, 12·β, 12·β0) up to 64, "
        "raised per --accuracy)")] = None,
    accuracy: Annotated[float, typer.Option(
        "--accuracy", help="T=2: raise the Gauss-Hermite order (x1.5, up to 54) where the fixed point's own "
        "quadrature error of the test error (err_fixed_point_test_error) exceeds this")] = 1e-3,
    rs_stability: Annotated[bool, typer.Option(
        "--rs-stability", help="add the RS (AT) stability of each point: rs_at, rs_at_error, rs_switching, rs_stable "
        "(docs/theory/stability.md; ~1-3 s a point)")] = False,
    finite_d: Annotated[int | None, typer.Option(
        "--finite-d", help="add the finite-size SE at this dimension (the AIM's design-Gram correction, "
        "docs/theory/finite_size.md): fd_test_error, fd_train_error, fd_mse, ... (~1-2 min a point)")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="also draw the learning curve to this figure (.png, .pdf or .svg): errors, MSE and rank "
        "against α with the λ → 0+ thresholds; the plotted data goes to the same name with .parquet")] = None,
    optimal_lam: Annotated[bool, typer.Option(
        "--optimal-lam", help="each α at its own optimal λ (minimum of the SE test error over --lam-range: scan, then "
        "Brent in log λ); --lam is ignored (a warning if set). Adds lam_opt, lam_converged, ... "
        "(docs/user-guide/theory.md, Optimal regularisation)")] = False,
    lam_range: Annotated[str, typer.Option(
        "--lam-range", help="with --optimal-lam: the λ range searched, lo:hi")] = LAM_RANGE_DEFAULT,
    json: JsonOpt = False,
) -> None:
    """Exact high-dimensional prediction (state evolution) along a list of α, warm-started."""
    from rich.console import Console
    from rich.table import Table

    from ..theory.api import theory_records
    from ..theory.optimal import parse_lam_range

    with cli_errors():
        alphas = sorted(parse_floats(alpha, "alpha"))
        check_dimension(d)
        if finite_d is not None and finite_d < problem.task.tokens + 1:
            raise ParameterError("finite-d", f"must be an integer > T = {problem.task.tokens} (got {finite_d})")
        if not tol > 0:
            raise ParameterError("tol", f"must be > 0 (got {tol})")
        if not accuracy > 0:
            raise ParameterError("accuracy", f"must be > 0 (got {accuracy})")
        lam_bounds = parse_lam_range(lam_range)
        options = {"tol": tol, "accuracy": accuracy}
        if order is not None:
            from ..theory.channel import MAX_GH_ORDER  # the T = 2 rule is an order^4 grid: 1000 died of a MemoryError

            if not 2 <= order <= MAX_GH_ORDER:
                raise ParameterError("order", f"must be between 2 and {MAX_GH_ORDER} (got {order})")
            if problem.task.tokens > 2:
                typer.echo(f"warning: --order is the Gauss-Hermite order of T = 2; T = {problem.task.tokens} uses a "
                           "QMC rule and ignores it", err=True)
            options["channel_options"] = {"order": order}
        if out is not None:
            from ..reproduce.curves import check_out

            check_out(out)
        err = Console(stderr=True)
        if not optimal_lam and lam_range != LAM_RANGE_DEFAULT:
            typer.echo("warning: --lam-range is only used with --optimal-lam (ignored)", err=True)
        if optimal_lam and problem.student.lam != LAM_DEFAULT:
            typer.echo(f"warning: --lam {problem.student.lam:g} is ignored with --optimal-lam (each α gets its own "
                       "optimal λ)", err=True)
        with progress_bar(err, disable=len(alphas) < 2 and not optimal_lam) as bar:
            if optimal_lam:
                from ..theory.optimal import optimal_curve

                job = bar.add_task("optimal λ (state evolution)", total=len(alphas))
                records = optimal_curve(problem, alphas, d=d, lam_range=lam_bounds,
                                        progress=lambda: bar.advance(job), **options)
            else:
                job = bar.add_task("state evolution", total=len(alphas))
                records = theory_records(problem, alphas, d=d, progress=lambda: bar.advance(job), **options)
        if rs_stability:
            for rec in records:
                rec.update(_rs_fields(_at(problem, rec), rec, d, options.get("channel_options")))
        if finite_d is not None:
            from ..theory.finite_size import finite_size_fields
            from ..theory.state_evolution import StateEvolution

            se = StateEvolution(problem, d=d, **options)
            with progress_bar(err) as bar:
                job = bar.add_task(f"finite-size SE (d = {finite_d})", total=len(records))
                for rec in records:
                    if optimal_lam:  # the record's own lambda, and its solver
                        se = StateEvolution(_at(problem, rec), d=d, **options)
                    rec.update(finite_size_fields(_at(problem, rec), rec, finite_d, se))
                    bar.advance(job)
        if out is not None:
            from ..reproduce.curves import draw_learning_curve, theory_table, write_outputs

            paths = write_outputs(theory_table(records, problem, d), out, draw_learning_curve)
            err.print(f"wrote {paths[0]} and {paths[1]}", markup=False, highlight=False)
    if not rs_stability:
        _note_prox_switching(records)
    _note_branches(records)
    _note_jacobian_kept(records)
    if json:
        for rec in records:
            emit_json(rec)
        _exit_if_unconverged(records)
        return
    title = problem_title(problem, skip=("lam",) if optimal_lam else ())
    table = Table(title=f"state evolution: {title}{' λ optimal per α' if optimal_lam else ''}"
                        f"{f' d={d}' if d is not None and problem.task.target.needs_d else ''}")
    cols = ("α", "ᾱ") + (("λ_opt",) if optimal_lam else ()) + (
        "test error", "±", "test (clean)", "train error", "MSE on S", "rank", "conv", "s")
    for col in cols + (("AT", "switch %") if rs_stability else ()) + ((f"test (d={finite_d})",) if finite_d else ()):
        table.add_column(col, justify="right")
    for r in records:
        extra = ((f"{r['rs_at']:.3f}" if r.get('rs_at') is not None else "-",
                  f"{100 * r['rs_switching']:.2f}" if r.get('rs_switching') is not None else "-")
                 if rs_stability else ())
        table.add_row(
            f"{r['alpha']:.4g}", f"{r['alpha_bar']:.4g}", *((_lam_cell(r),) if optimal_lam else ()),
            f"{r['test_error']:.6f}", _error_cell(r),
            f"{r['test_error_clean']:.6f}",
            f"{r['train_error']:.6f}", f"{r['mse']:.6f}", f"{r['rank']:.4f}", "yes" if r["converged"] else "NO",
            f"{r['lam_seconds'] if optimal_lam else r['seconds']:.2f}",
            *extra,
            *((f"{r['fd_test_error']:.6f}" if r.get("fd_test_error") is not None else "-",) if finite_d else ()),
        )
    print_table(table)
    if optimal_lam:
        for r in records:
            if not r["lam_converged"]:
                typer.echo(f"note: α = {r['alpha']:.4g}: {r['lam_message']}", err=True)
    _exit_if_unconverged(records)


def _exit_if_unconverged(records: list[dict]) -> None:
    """Exit status 1, with one line on stderr, where a point (or its finite-size SE) did not converge -- with --json
    as with the table (it exited 0 with --json, as if all was well)."""
    bad = [r for r in records if not (r["converged"] and r.get("fd_converged") is not False)]
    if bad:
        alphas = ", ".join(f"{r['alpha']:.4g}" for r in bad)
        typer.echo(f"warning: {len(bad)} of {len(records)} points did not converge (α = {alphas}):", err=True)
        for r in bad:
            why = r.get("message") or "" if not r["converged"] else r.get("fd_message") or "finite-size SE"
            typer.echo(f"  α = {r['alpha']:.4g}: {why}", err=True)
        raise typer.Exit(code=1)


def _note_prox_switching(records: list[dict], share: float | None = None) -> None:
    """One note on stderr naming the converged points whose channel prox has two local minima carrying more than
    ``share`` of E||g||^2 (``err_branch_share``; default the SE's own ``branch_switch``, 1e-3): there the
    zero-temperature replica symmetry the SE assumes is broken (its replicon diverges, docs/theory/stability.md),
    and the SE can
    miss the ERM (lambda = 1e-4, alpha = 0.25: 0.381 against 0.354) or meet it (beta = beta0 = 2, alpha = 0.5).
    Large label noise has such minima at most nodes (Delta = 20: 50-90 % of E||g||^2); on the pure-noise plateau
    (Delta = 1e7) the SE's 1.9025 met the ERM's 1.908 +- 0.017 (d = 80; state_evolution.md)."""
    from ..theory.state_evolution import BRANCH_SWITCH

    share = BRANCH_SWITCH if share is None else share
    hit = [r for r in records if r["converged"] and (r.get("err_branch_share") or 0.0) > share]
    if not hit:
        return
    shown = _alphas_shown(hit)
    top = max(r["err_branch_share"] for r in hit)
    typer.echo(f"note: replica symmetry is not guaranteed at α = {shown}: the channel's prox has two local minima "
               f"there (up to {100 * top:.3g} % of E‖g‖²); these points are the RS prediction, which can miss the "
               "ERM (λ = 1e-4, α = 0.25) or meet it (β = β0 = 2, α = 0.5); --rs-stability measures it "
               "(docs/theory/stability.md)", err=True)


def _alphas_shown(hit: list[dict]) -> str:
    """The alphas of a note's records, at most six, then how many in all."""
    return ", ".join(f"{r['alpha']:.4g}" for r in hit[:6]) + (f", ... ({len(hit)} points)" if len(hit) > 6 else "")


def _note_branches(records: list[dict]) -> None:
    """A note on stderr per converged point whose fixed point came from a start scaled up from the cold solve's
    (``_scaled_starts``): "two fixed points: ..." (the one shown has the lower RS objective; the note says whether it
    is RS-stable) or "cold start stalled at q = ..., converged from a start at ... (..., AT = ...)". Either can be a
    large-norm branch that a trainer from a small start does not reach (docs/theory/state_evolution.md, "Two fixed
    points and RS stability")."""
    from ..theory.state_evolution import scaled_start_notes

    for r in records:
        if not r["converged"]:
            continue
        for note in scaled_start_notes(str(r.get("message") or "")):
            typer.echo(f"note: α = {r['alpha']:.4g}: {note}", err=True)


def _note_jacobian_kept(records: list[dict]) -> None:
    """One note on stderr naming the converged T >= 3 points reported with the Jacobian forms of m_hat, sigma_hat
    although their branch share called for the Stein forms, whose re-solve did not converge (``message``
    NOTE_JACOBIAN_KEPT; ``quadrature`` without "+stein"): such a point solves the Jacobian forms' equations, which
    drop the surface terms of the prox's jumps (T = 3, lambda = 1e-4, alpha_bar = 0.46: 0.5451 against the Stein
    forms' 0.5824; a T = 4 point with output noise: 8.548 against 9.899)."""
    from ..theory.state_evolution import BRANCH_SWITCH, NOTE_JACOBIAN_KEPT

    hit = [r for r in records if r["converged"] and NOTE_JACOBIAN_KEPT in str(r.get("message") or "")]
    if not hit:
        return
    typer.echo(f"note: α = {_alphas_shown(hit)}: the Jacobian forms' fixed point is shown; the prox jumps there "
               f"(branch share > {BRANCH_SWITCH:g}), where the Stein forms hold, and their re-solve did not converge: "
               "the value can miss the jumps' surface terms by more than its error bar (message: \"Jacobian forms "
               "kept although …\"; docs/theory/state_evolution.md, \"T ≥ 3: the Stein re-solve\")", err=True)


def _at(problem: Problem, rec: dict) -> Problem:
    """The problem at the record's own λ (theory --optimal-lam; the problem itself otherwise or where none)."""
    lam = rec.get("lam")
    return problem if lam is None else problem.replace_student(lam=float(lam))


def _lam_cell(rec: dict) -> str:
    """λ_opt, marked "*" at an end of --lam-range and "?" where otherwise not bracketed and refined."""
    if rec.get("lam_opt") is None:
        return "-"
    mark = ("*" if rec["lam_opt_at_boundary"] else "?") if not rec["lam_converged"] else ""
    return f"{rec['lam_opt']:.4g}{mark}"


def _error_cell(rec: dict) -> str:
    """The test error's quadrature error: the fixed point's own where reported (T = 2), else the rule's at it."""
    err = rec.get("err_fixed_point_test_error", rec.get("err_test_error"))
    return f"{err:.1e}" if err is not None else "-"


def _rs_fields(problem: Problem, rec: dict, d: int | None, channel_options: dict | None) -> dict:
    """RS stability of one converged record: the regular AT value and the prox branch-switching fraction
    (theory.stability.rs_fields, shared with the phase diagrams)."""
    from ..theory.stability import rs_fields

    return rs_fields(problem, rec, d, channel_options)
