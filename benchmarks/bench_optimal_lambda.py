"""Optimal lambda: the scan + Brent search of :func:`tiedattention.theory.optimal.optimal_lambda` against the argmin of
a dense grid of cold solves, on the same alphas, in one run.

Per alpha (default 0.3, 1, 3; MP kappa0 = 0.5, Delta = 0.5, T = 2) and in this process, serially:

  (a) ``optimal_lambda(problem, alpha)``: 13 log-spaced lambda in [1e-5, 10], warm-started, then bounded Brent in
      log lambda to xatol = 0.01 on the best point's bracket;
  (b) a dense grid: ``--dense`` (default 60) log-spaced lambda over the same range, each a cold ``theory_record``,
      and its argmin among the converged regular points (resolution log(1e6)/59 = 0.23 in log lambda).

Prints the seconds of each, the ratio dense / ours, the SE solves of each, lambda_opt of both with their distance in
log lambda, and the test errors with their difference (ours - dense: negative where the refinement beats the grid's
resolution).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_optimal_lambda.py [--alpha 0.3,1,3] [--dense 60]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

from tiedattention.cli_common import parse_floats
from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory.api import theory_record
from tiedattention.theory.optimal import LAM_RANGE, optimal_lambda


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alpha", default="0.3,1,3", help="alphas: a,b,c or start:stop:num (log)")
    ap.add_argument("--dense", type=int, default=60, help="points of the dense cold grid")
    ap.add_argument("--noise", type=float, default=0.5)
    args = ap.parse_args()
    problem = Problem.from_options(noise=args.noise)
    alphas = parse_floats(args.alpha, "alpha")
    grid = [float(x) for x in np.geomspace(*LAM_RANGE, args.dense)]
    print(f"MP kappa0 = 0.5, noise = {args.noise}, T = 2; lambda in [{LAM_RANGE[0]:g}, {LAM_RANGE[1]:g}]; "
          f"dense grid {args.dense} points (step {math.log(grid[1] / grid[0]):.3f} in log lambda)")
    print(f"{'alpha':>6} {'ours s':>7} {'dense s':>8} {'ratio':>6} {'solves':>7} {'lam_opt':>9} {'lam_dense':>9} "
          f"{'dlog':>6} {'test ours':>10} {'test dense':>10} {'ours-dense':>10}  notes")
    tot_ours = tot_dense = 0.0
    for a in alphas:
        t0 = time.perf_counter()
        rec = optimal_lambda(problem, a)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            cold = [theory_record(problem.replace_student(lam=lam), a) for lam in grid]
        t_dense = time.perf_counter() - t0
        tot_ours += t_ours
        tot_dense += t_dense
        ok = [(r["test_error"], lam) for r, lam in zip(cold, grid, strict=True)
              if r["converged"] and r["phase"] == "regular"]
        te_dense, lam_dense = min(ok)
        bad = sum(not r["converged"] for r in cold)
        notes = f"dense: {bad} not converged" if bad else ""
        if not rec["lam_converged"]:
            notes += ("; " if notes else "") + f"ours: {rec['lam_message']}"
        lo = rec["lam_opt"]
        solves = f"{rec['lam_evaluations']}/{len(grid)}"
        print(f"{a:6.3g} {t_ours:7.1f} {t_dense:8.1f} {t_dense / t_ours:6.2f} {solves:>7} {lo:9.4g} "
              f"{lam_dense:9.4g} {math.log(lo / lam_dense):6.3f} {rec['test_error']:10.7f} "
              f"{te_dense:10.7f} {rec['test_error'] - te_dense:10.2e}  {notes}")
    print(f"total: ours {tot_ours:.1f} s, dense {tot_dense:.1f} s, ratio {tot_dense / tot_ours:.2f}")


if __name__ == "__main__":
    main()
