"""Phase diagram: warm-started rows (the route of ``tiedattention phase``) against cold points, in one run.

The same grid of state-evolution points (default 12 alpha x 8 lambda, MP kappa0 = 0.5, Delta = 0.5, T = 2) is
computed

  (a) row by row with :func:`tiedattention.reproduce.routes.theory_curve`, the route each row of
      ``tiedattention phase`` runs (every alpha warm-started from the previous converged point), and
  (b) point by point cold with :func:`tiedattention.theory.api.theory_record` (a fresh solve from the default
      initial guess at every point),

both in this process, serially, row (a) then row (b) for each lambda so that both see the same machine load.
Prints the seconds of each route, the ratio, the largest relative difference of test error, train error and MSE
over the grid, and the points that did not converge on either route. The store and the process pool of the command
are left out on purpose: they cost the same on both routes (docs/performance.md, "Phase diagrams").

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_phase.py [--alpha 0.05:4:12] [--lam 1e-4:1:8] [--tokens 2]
"""

from __future__ import annotations

import argparse
import json
import math
import time

from tiedattention.cli_common import parse_floats
from tiedattention.problem import Problem
from tiedattention.reproduce.common import options
from tiedattention.reproduce.routes import theory_curve
from tiedattention.theory.api import theory_record

KEYS = ("test_error", "train_error", "mse")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alpha", default="0.05:4:12", help="alphas: a,b,c or start:stop:num (log)")
    ap.add_argument("--lam", default="1e-4:1:8", help="lambdas: a,b,c or start:stop:num (log)")
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--noise", type=float, default=0.5)
    args = ap.parse_args()
    alphas = sorted({float(f"{a:.10g}") for a in parse_floats(args.alpha, "alpha")})
    lams = sorted(parse_floats(args.lam, "lam", positive=False))
    print(f"grid: {len(alphas)} alpha in [{alphas[0]:g}, {alphas[-1]:g}] x {len(lams)} lambda in "
          f"[{lams[0]:g}, {lams[-1]:g}], T = {args.tokens}, noise = {args.noise}, MP kappa0 = 0.5")
    t_warm = t_cold = 0.0
    worst = {k: 0.0 for k in KEYS}
    bad_warm = bad_cold = 0
    for lam in lams:
        opts = options(lam=lam, tokens=args.tokens, noise=args.noise)
        t0 = time.perf_counter()
        warm = json.loads(theory_curve({**opts, "alphas": alphas})["records"])
        tw = time.perf_counter() - t0
        problem = Problem.from_options(**opts)
        t0 = time.perf_counter()
        cold = [theory_record(problem, a) for a in alphas]
        tc = time.perf_counter() - t0
        t_warm += tw
        t_cold += tc
        bad_warm += sum(not r["converged"] for r in warm)
        bad_cold += sum(not r["converged"] for r in cold)
        row = {k: 0.0 for k in KEYS}
        at = (math.nan, "", "")
        for w, c in zip(warm, cold, strict=True):
            if w["converged"] and c["converged"]:
                diff = {k: abs(w[k] - c[k]) / max(abs(c[k]), 1e-300) for k in KEYS}
                if max(diff.values()) > max(row.values()):
                    at = (w["alpha"], w.get("quadrature", ""), c.get("quadrature", ""))
                row = {k: max(row[k], diff[k]) for k in KEYS}
        for k in KEYS:
            worst[k] = max(worst[k], row[k])
        print(f"lambda = {lam:<10.4g} warm row {tw:7.2f} s   cold points {tc:7.2f} s   ratio {tc / tw:5.2f}   "
              f"max rel diff {max(row.values()):.1e} (alpha {at[0]:.4g}, rule warm {at[1]} / cold {at[2]})",
              flush=True)
    print(f"\nwarm-started rows: {t_warm:.1f} s; cold points: {t_cold:.1f} s; cold / warm = {t_cold / t_warm:.2f}")
    print("max relative difference over the grid: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    print(f"not converged: warm {bad_warm}, cold {bad_cold} of {len(alphas) * len(lams)} points")


if __name__ == "__main__":
    main()
