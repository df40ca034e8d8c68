"""`tiedattention scaling`: the excess test error e_test - e_0 along n for a power-law target, and its exponent.

At finite ``--d`` the curve is the state evolution at alpha = n/d^2 (``--route fast``: the continuation route of
``theory.scaling.finite_d_curve``; ``--route plain``: a fresh solver per lambda); at ``--d inf`` it is the scaling limit
d -> infinity at fixed nu = n/d (then ``--n-range`` is read as a range of nu = n/d). JSON Lines: one object per
point, then a last object with fitted_exponent, fitted_exponent_ci, predicted_exponent and the regime.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from ..cli_common import (
    FIGURE_SUFFIXES,
    LAM_DEFAULT,
    Beta0Opt,
    BetaOpt,
    JsonOpt,
    KappaOpt,
    LamOpt,
    ModelOpt,
    NoiseOpt,
    NoiseOutOpt,
    TaskOpt,
    TokensOpt,
    atomic_write,
    check_output_file,
    cli_errors,
    emit_json,
    print_table,
    problem_from_cli,
    progress_bar,
)
from ..errors import ParameterError


def register(app: typer.Typer) -> None:
    app.command("scaling")(scaling)


def _range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(":"))
    except ValueError:
        raise ParameterError("n-range", f"cannot read '{text}' (expected LO:HI, e.g. 1e3:1e8)") from None
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ParameterError("n-range", f"needs 0 < LO < HI (got {text})")
    return lo, hi


def scaling(
    target: Annotated[str, typer.Option("--target", help="powerlaw:G[:cutoff=R]")] = "powerlaw:1.25",
    noise: NoiseOpt = 0.5,
    noise_out: NoiseOutOpt = 0.0,
    lam: LamOpt = LAM_DEFAULT,
    tokens: TokensOpt = 2,
    beta: BetaOpt = 1.0,
    beta0: Beta0Opt = 1.0,
    kappa: KappaOpt = 1.0,
    model: ModelOpt = "factorized",
    task: TaskOpt = "seq2lab",
    d: Annotated[str, typer.Option("--d", help="dimension, or inf for the scaling limit")] = "inf",
    n_range: Annotated[str, typer.Option("--n-range", help="LO:HI samples n (at --d inf: nu = n/d)")] = "1e3:1e8",
    points: Annotated[int, typer.Option("--points", help="log-spaced points in the range")] = 20,
    lam_rule: Annotated[
        str, typer.Option("--lam-rule", help="optimal | fixed:LAM | power:P[:LAM1] (lambda = LAM1 (n/d)^P/sqrt(d))")
    ] = "optimal",
    kmin: Annotated[int, typer.Option("--kmin", help="fit only points with k* >= kmin")] = 3,
    kmax_frac: Annotated[float, typer.Option(
        "--kmax-frac", help="fit only points with k* <= frac d (finite d; frac R with powerlaw:G:cutoff=R)")] = 0.25,
    out: Annotated[
        Path | None, typer.Option("--out", help="write a log-log figure (.png, .pdf or .svg)")
    ] = None,
    order: Annotated[int | None, typer.Option("--order", help="Gauss-Hermite order per dimension (T=2)")] = None,
    route: Annotated[
        str, typer.Option("--route", help="finite d: auto (default: fast where it applies, else plain), fast, plain")
    ] = "auto",
    k_stop: Annotated[
        int | None, typer.Option("--k-stop", help="finite d: stop the curve after the first point with k* > K")
    ] = None,
    joint_law: Annotated[
        int, typer.Option("--joint-law", help="finite d, K > 0: also the excess under the exact (non-Gaussian) law of "
                          "the top K target modes, with the top learned outlier corrected for it")
    ] = 0,
    json: JsonOpt = False,
) -> None:
    """Scaling law of the excess test error for a power-law target (docs/theory/scaling.md)."""
    from rich.console import Console
    from rich.table import Table

    from ..targets import PowerLawTarget
    from ..theory.scaling import finite_d_curve, fit_exponent, limit_curve, parse_lam_rule, predicted_exponent

    with cli_errors():
        problem = problem_from_cli(target, noise, noise_out, lam, tokens, beta, beta0, kappa, model, task)
        tgt = problem.task.target
        if not isinstance(tgt, PowerLawTarget):
            raise ParameterError("target", "scaling needs a power-law target (powerlaw:G)")
        d_inf = d.strip().lower() in ("inf", "infinity")
        if not d_inf:
            try:
                d_val = int(d)
            except ValueError:
                raise ParameterError("d", f"must be an integer >= 2 or inf (got {d})") from None
            if d_val < 2:
                raise ParameterError("d", f"must be an integer >= 2 or inf (got {d})")
        rule = parse_lam_rule(lam_rule)
        if lam != LAM_DEFAULT:  # scaling's lambda is a rule of n, never the problem's --lam (it was silently ignored)
            raise ParameterError("lam", f"has no effect here: lambda follows --lam-rule (for a fixed lambda: "
                                        f"--lam-rule fixed:{lam:g})")
        if route not in ("auto", "fast", "plain"):
            raise ParameterError("route", f"must be auto, fast or plain (got {route})")
        if k_stop is not None and k_stop < 0:
            raise ParameterError("k-stop", f"must be >= 0 (got {k_stop})")
        if joint_law < 0:
            raise ParameterError("joint-law", f"must be >= 0 (got {joint_law})")
        if joint_law and d_inf:
            raise ParameterError("joint-law", "needs a finite dimension (--d D)")
        if joint_law and problem.student.model != "factorized":
            raise ParameterError("joint-law", "is implemented for the factorised student (--model factorized)")
        if joint_law and joint_law > d_val:
            raise ParameterError("joint-law", f"must be <= d = {d_val} (got {joint_law})")
        lo, hi = _range(n_range)
        if points < 3:
            raise ParameterError("points", f"needs at least 3 points (got {points})")
        if kmin < 0:
            raise ParameterError("kmin", f"must be >= 0 (got {kmin})")
        if not (math.isfinite(kmax_frac) and kmax_frac > 0):
            raise ParameterError("kmax-frac", f"must be > 0 (got {kmax_frac})")
        check_output_file(out, "out", suffix=FIGURE_SUFFIXES)
        grid = np.geomspace(lo, hi, points)
        options = {"channel_options": {"order": order}} if order is not None else {}
        if order is not None and order < 2:
            raise ParameterError("order", f"must be >= 2 (got {order})")
        err = Console(stderr=True)
        with progress_bar(err) as bar:
            job = bar.add_task("scaling curve", total=points)
            if d_inf:
                records = limit_curve(problem, grid, rule, progress=lambda: bar.advance(job), **options)
            else:
                records = finite_d_curve(problem, d_val, grid / d_val**2, rule, progress=lambda: bar.advance(job),
                                         route=route, k_stop=k_stop, **options)
                for r in records:
                    r["n"] = r["alpha"] * d_val**2
                if joint_law:
                    _add_joint_law(problem, records, d_val, joint_law, bar)
        # the fit window 1 << k* << (modes the target has): d, and a cutoff's rank R also at d = inf (all R modes
        # recovered is the parametric regime, f = 1, not the power law's)
        n_modes = min(math.inf if d_inf else d_val, tgt.cutoff if tgt.cutoff is not None else math.inf)
        kcap = kmax_frac * n_modes
        use = [r for r in records if r["converged"] and r["excess"] > 0 and kmin <= r["k_star"] <= kcap]
        x = [r["nu"] if d_inf else r["n"] for r in use]
        try:
            fit = fit_exponent(x, [r["excess"] for r in use])
        except ValueError as exc:
            window = f"{kmin} <= k* <= {kcap:g}: {len(use)} of {len(records)} points"
            fit = {"fitted_exponent": None, "fitted_exponent_ci": None, "message": f"{exc} (fit window {window})",
                   "points": len(use)}
        f_pred, regime = predicted_exponent(tgt.gamma, rule, kappa=kappa, d_inf=d_inf, model=model,
                                            noiseless=problem.task.noise == 0 and problem.task.noise_out == 0)
        if joint_law:
            fit.update(_joint_fit(use, x))
        summary = {"summary": True, "target": tgt.spec, "d": None if d_inf else d_val, "lam_rule": rule.spec, **fit,
                   "predicted_exponent": f_pred, "regime": regime,
                   "fit_window": {"k_star_min": kmin, "k_star_max": None if math.isinf(kcap) else kcap},
                   "all_converged": all(r["converged"] for r in records)}
    if out is not None:
        _figure(out, records, use, d_inf, summary)
    if json:
        for rec in records:
            emit_json(rec)
        emit_json(summary)
        _exit_if_unconverged(records, d_inf)
        return
    table = Table(title=f"scaling: {tgt.spec} d={d} λ-rule={rule.spec} Δ={noise}")
    cols = ["n/d" if d_inf else "n", "λ√d" if d_inf else "λ", "test error", "excess", "k*", "conv"]
    for col in cols + (["excess (joint law)"] if joint_law else []):
        table.add_column(col, justify="right")
    for r in records:
        row = [f"{(r['nu'] if d_inf else r['n']):.4g}", f"{(r['lam_t'] if d_inf else r['lam']):.4g}",
               f"{r['test_error']:.6f}", f"{r['excess']:.3e}", str(r["k_star"]), "yes" if r["converged"] else "NO"]
        if joint_law:
            ej = r.get("excess_joint_law")
            row.append("-" if ej is None else f"{ej:.3e} ± {r['excess_joint_law_err']:.1e}")
        table.add_row(*row)
    print_table(table)
    con = Console()
    fe = summary["fitted_exponent"]
    ci = summary["fitted_exponent_ci"]
    # (the OLS CI ignores the emergence kinks' correlated residuals: too narrow, docs/theory/scaling.md §7)
    ci_text = f", 95 % OLS CI [{ci[0]:.4f}, {ci[1]:.4f}] (narrow: scaling.md §7)" if ci and None not in ci else ""
    con.print(f"fitted exponent {fe if fe is None else round(fe, 4)}{ci_text}; predicted {f_pred:.4f}: {regime}",
              markup=False, highlight=False, soft_wrap=True)
    if fe is None:
        con.print(f"no fit: {summary['message']}")
    if joint_law:
        fj = summary.get("fitted_exponent_joint_law")
        con.print(f"joint law (top {joint_law} modes): fitted exponent {fj if fj is None else round(fj, 4)}")
    _exit_if_unconverged(records, d_inf)


def _exit_if_unconverged(records: list[dict], d_inf: bool) -> None:
    """Exit status 1, with one line on stderr, where a point did not converge (left out of the fit), as theory,
    spectrum and decompose do; with --json as with the table (it exited 0 either way)."""
    bad = [r for r in records if not r["converged"]]
    if bad:
        where = ", ".join(f"{(r['nu'] if d_inf else r['n']):.4g}" for r in bad)
        typer.echo(f"warning: {len(bad)} of {len(records)} points did not converge ({'n/d' if d_inf else 'n'} = "
                   f"{where}); they are left out of the fit", err=True)
        raise typer.Exit(code=1)


def _add_joint_law(problem, records, d: int, k: int, bar) -> None:
    """Add the joint-law fields of :func:`..theory.strong_modes.joint_law_point` to each converged regular record
    (its SE point re-solved at the record's lambda; one saturation e_0 for the whole curve, on the same QMC rule)."""
    from ..problem import Problem
    from ..theory.state_evolution import StateEvolution
    from ..theory.strong_modes import exact_saturation, joint_law_point

    job = bar.add_task("joint law", total=len(records))
    saturation = None
    for r in records:
        if r["converged"] and r["phase"] == "regular":
            p = Problem.from_options(**{**problem.options(), "lam": r["lam"]})
            se = StateEvolution(p, d=d)
            if saturation is None:
                saturation, _ = exact_saturation(p, d, k)
            r.update(joint_law_point(p, se.measure, se.solve(r["alpha"]), d, k, saturation=saturation))
        else:
            r.update({"excess_joint_law": None, "excess_joint_law_err": None, "test_error_joint_law": None})
        bar.advance(job)


def _joint_fit(use, x) -> dict:
    """fitted_exponent_joint_law (+ _ci) over the fit window's points that have a joint-law excess."""
    from ..theory.scaling import fit_exponent

    pts = [(xi, r["excess_joint_law"]) for xi, r in zip(x, use, strict=True)
           if r.get("excess_joint_law") is not None and r["excess_joint_law"] > 0]
    try:
        f = fit_exponent([p[0] for p in pts], [p[1] for p in pts])
        return {"fitted_exponent_joint_law": f["fitted_exponent"],
                "fitted_exponent_joint_law_ci": f["fitted_exponent_ci"]}
    except ValueError:
        return {"fitted_exponent_joint_law": None, "fitted_exponent_joint_law_ci": None}


def _figure(path, records, use, d_inf, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "nu" if d_inf else "n"
    fig, ax = plt.subplots(figsize=(5, 4))
    xs = [r[key] for r in records if r["excess"] > 0]
    ax.loglog(xs, [r["excess"] for r in records if r["excess"] > 0], "o-", ms=3, label="state evolution")
    if summary.get("fitted_exponent") is not None and use and math.isfinite(summary["predicted_exponent"]):
        x0 = np.array([use[0][key], use[-1][key]])
        y0 = use[0]["excess"] * (x0 / x0[0]) ** (-summary["predicted_exponent"])
        ax.loglog(x0, y0, "k--", label=f"slope -{summary['predicted_exponent']:.3f} (derived)")
    ax.set_xlabel("n/d" if d_inf else "n")
    ax.set_ylabel("e_test - e_0")
    ax.legend()
    fig.tight_layout()
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format=Path(path).suffix[1:].lower()))
    finally:
        plt.close(fig)
