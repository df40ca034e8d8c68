"""Finite-d state-evolution scaling curves: the fast route against the plain one, and the exponent table.

Usage
-----
Timing (docs/performance.md, "Finite-d SE scaling curves"):

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_scaling.py [--d 2000] [--points 40] [--plain-every 10]

runs, in one process, a ``--points`` curve of the optimal-lambda rule (power law gamma = 1.25 as d eigenvalues,
Delta = 0.5, T = 2, nu = n/d log-spaced over ``--nu-range``) with the fast route, and the plain route (a fresh
StateEvolution per lambda, Brent over log lambda) on every ``--plain-every``-th point of the same grid; prints
seconds per point of each, their ratio, the fast curve's total, and the largest relative difference of the excess
error at the shared points (``--plain-every 0``: the fast curve only). The plain route's Brent bracket is
centred on the previous point of its own (sparser) grid, so where that point is far its minimum can be worse.

Exponent table (docs/theory/scaling.md section 6):

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_scaling.py --table --gammas 0.75,1.25,2 \
        --ds 500,1000,2000,4000 --rule optimal --out table.jsonl

writes every curve's points (JSON Lines, one object per point with gamma, d, rule) and prints, per (gamma, d), the
exponent fitted where 3 <= k* <= d/4, with its 95 % OLS interval, the last 8 points' exponent, the exponent on the
fixed window ``--fixed-window`` (nu in [1e2, 1e5]: the same points at every d) with its k* range, the number of
points, the k* range, how many points the fast route solved, how many the T = 2 QMC re-solve replaced (records:
``quadrature``, ``branch_share``), the time and the load average at the end of the curve.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings

import numpy as np

from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory.scaling import finite_d_curve, fit_exponent, parse_lam_rule, predicted_exponent

# nu = n/d ranges per gamma that cover 3 <= k* <= d/4 for d in 500..4000 (measured; curves stop beyond d/4)
NU_RANGES = {0.75: (1.0, 1e6), 1.25: (2.0, 1e7), 2.0: (10.0, 1e8)}


def _grid(lo: float, hi: float, per_decade: float) -> np.ndarray:
    return np.geomspace(lo, hi, int(round(per_decade * math.log10(hi / lo))) + 1)


def timing(args) -> None:
    problem = Problem.from_options(target=f"powerlaw:{args.gamma:g}", noise=0.5)
    rule = parse_lam_rule("optimal")
    lo, hi = (float(v) for v in args.nu_range.split(":"))
    nus = np.geomspace(lo, hi, args.points)
    alphas = nus / args.d
    t0 = time.perf_counter()
    fast = finite_d_curve(problem, args.d, alphas, rule)
    t_fast = time.perf_counter() - t0
    # the first point of each route is a cold start; report the continuation points separately
    cont = [r["seconds"] for r in fast[1:]]
    print(f"fast route: {len(fast)} points in {t_fast:.1f} s ({t_fast / len(fast):.2f} s/point; first point "
          f"{fast[0]['seconds']:.1f} s, continuation points {np.mean(cont):.2f} s/point, max {np.max(cont):.2f} s); "
          f"{sum(r['converged'] for r in fast)}/{len(fast)} converged, "
          f"{sum(r['route'] == 'fast' for r in fast)} by the fast route, "
          f"{np.mean([r['free_convolutions'] for r in fast[1:]]):.1f} free convolutions and "
          f"{np.mean([r['channel_calls'] for r in fast[1:]]):.1f} channel calls per continuation point")
    if args.plain_every <= 0:
        return
    sub = alphas[:: args.plain_every]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = finite_d_curve(problem, args.d, sub, rule, route="plain")
    t_plain = time.perf_counter() - t0
    fast_at = {r["alpha"]: r for r in fast}
    rel = max(abs(fast_at[p["alpha"]]["excess"] / p["excess"] - 1.0) for p in plain)
    worse = max((fast_at[p["alpha"]]["test_error"] - p["test_error"]) for p in plain)
    print(f"plain route: {len(plain)} points in {t_plain:.1f} s ({t_plain / len(plain):.2f} s/point)")
    print(f"ratio (plain s/point / fast s/point): {(t_plain / len(plain)) / (t_fast / len(fast)):.1f}")
    print(f"max relative difference of the excess at the {len(plain)} shared points: {rel:.2e}; "
          f"max (fast - plain) test error: {worse:.2e} (negative: the fast route found a lower error)")
    for p in plain:
        f = fast_at[p["alpha"]]
        print(f"  nu={p['nu']:.4g}: excess fast {f['excess']:.6e} plain {p['excess']:.6e}, lambda fast "
              f"{f['lam']:.5g} plain {p['lam']:.5g}, k* {f['k_star']} / {p['k_star']}, "
              f"s {f['seconds']:.2f} / {p['seconds']:.2f}")


def table(args) -> None:
    rule = parse_lam_rule(args.rule)
    gammas = [float(g) for g in args.gammas.split(",")]
    ds = [int(v) for v in args.ds.split(",")]
    out = open(args.out, "a") if args.out else None
    rows = []
    for d in ds:
        for gamma in gammas:
            problem = Problem.from_options(target=f"powerlaw:{gamma:g}", noise=0.5)
            lo, hi = NU_RANGES.get(gamma, (2.0, 1e7))
            if args.nu_range:
                lo, hi = (float(v) for v in args.nu_range.split(":"))
            nus = _grid(lo, hi, args.per_decade)
            t0 = time.perf_counter()

            def write(r, gamma=gamma):  # point by point: a long curve stopped early keeps what it has done
                r.update(gamma=gamma, rule=rule.spec)
                if out:
                    out.write(json.dumps(r) + "\n")
                    out.flush()

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                recs = finite_d_curve(problem, d, nus / d, rule, k_stop=d // 4, on_record=write)
            secs = time.perf_counter() - t0
            use = [r for r in recs if r["converged"] and r["excess"] > 0 and 3 <= r["k_star"] <= d / 4]
            f_pred, _ = predicted_exponent(gamma, rule)
            try:
                fit = fit_exponent([r["n"] for r in use], [r["excess"] for r in use])
                fe, ci = fit["fitted_exponent"], fit["fitted_exponent_ci"]
                last = fit_exponent([r["n"] for r in use[-8:]], [r["excess"] for r in use[-8:]])["fitted_exponent"]
            except ValueError:
                fe, ci, last = math.nan, [math.nan, math.nan], math.nan
            ks = [r["k_star"] for r in use] or [0]
            # the fixed window in nu (the same at every d; compare with the limit on the same nu)
            wlo, whi = (float(v) for v in args.fixed_window.split(":"))
            fix = [r for r in recs
                   if r["converged"] and r["excess"] > 0 and wlo * (1 - 1e-9) <= r["nu"] <= whi * (1 + 1e-9)]
            try:
                ff = fit_exponent([r["n"] for r in fix], [r["excess"] for r in fix])["fitted_exponent"]
            except ValueError:
                ff = math.nan
            kf = [r["k_star"] for r in fix] or [0]
            qmc = sum(1 for r in recs if str(r.get("quadrature", "")).startswith("qmc"))
            load = os.getloadavg()
            row = (f"gamma={gamma:g} d={d} rule={rule.spec}: fitted {fe:.4f} [{ci[0]:.4f}, {ci[1]:.4f}] last-8 "
                   f"{last:.4f} predicted {f_pred:.4f}; fixed window nu in [{wlo:g}, {whi:g}]: {ff:.4f} (k* "
                   f"{min(kf)}-{max(kf)}); {len(use)} points in window, k* {min(ks)}-{max(ks)}, "
                   f"nu {use[0]['nu'] if use else math.nan:.3g}-{use[-1]['nu'] if use else math.nan:.3g}, "
                   f"{sum(r['converged'] for r in recs)}/{len(recs)} converged, "
                   f"{sum(r['route'] == 'fast' for r in recs)} fast, {qmc} QMC re-solved, {secs:.0f} s "
                   f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end)")
            rows.append(row)
            print(row, flush=True)
    if out:
        out.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=2000)
    ap.add_argument("--gamma", type=float, default=1.25)
    ap.add_argument("--points", type=int, default=40)
    ap.add_argument("--nu-range", default=None, help="LO:HI of nu = n/d (timing default 10:1e5)")
    ap.add_argument("--plain-every", type=int, default=10)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--gammas", default="0.75,1.25,2")
    ap.add_argument("--ds", default="500,1000,2000,4000")
    ap.add_argument("--rule", default="optimal")
    ap.add_argument("--per-decade", type=float, default=6.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--fixed-window", default="1e2:1e5", help="LO:HI of nu for the second fit (table)")
    args = ap.parse_args()
    if args.table:
        table(args)
    else:
        args.nu_range = args.nu_range or "10:1e5"
        timing(args)


if __name__ == "__main__":
    main()
