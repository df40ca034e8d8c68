"""Benchmark of the hybr skip on a warm/cold mismatch (state_evolution.WARM_GAP), side by side in one run.

A T >= 3 point with a large branch share (the prox's global minimiser jumps between basins at ~40 % of the nodes):
its warm-started Jacobian solve converges, fails the cold check, and the Stein re-solve and the cold map take over
(docs/theory/state_evolution.md, "No hybr on a warm/cold mismatch"). The baseline runs the hybr fallback there as
before session 19 (WARM_GAP = inf: hybr is tried whatever the gap); ours skips it. Prints map evaluations, seconds,
their ratios and the two answers, which agree within the rule's error (relative quadrature error ~3.6e-3).

Run: .venv/bin/python benchmarks/bench_warm_gap.py   (~10 min on one core: baseline ~4-6 min, ours ~2 min)
"""

from __future__ import annotations

import math
import time
import warnings

from tiedattention.problem import Problem
from tiedattention.theory import state_evolution as sem

POINT = dict(target="mp:0.2", noise=2.0, lam=1e-3, tokens=3)
ALPHA = 0.1


def solve(warm_gap: float):
    old = sem.WARM_GAP
    sem.WARM_GAP = warm_gap
    try:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = sem.StateEvolution(Problem.from_options(**POINT)).solve(ALPHA)
        return res, time.perf_counter() - t
    finally:
        sem.WARM_GAP = old


def main() -> None:
    print(f"T = 3, MP kappa0 = 0.2, Delta = 2, lambda = 1e-3, alpha = {ALPHA}")
    rows = [("baseline (hybr tried)", *solve(math.inf)), ("ours (WARM_GAP = 10)", *solve(sem.WARM_GAP))]
    for name, res, sec in rows:
        print(f"{name:24s} converged={res.converged} evaluations={res.iterations:4d} seconds={sec:7.1f} "
              f"q={res.q:.5f} test_error={res.test_error:.5f} (err {res.errors.get('test_error', float('nan')):.1e})")
    (_, base, tb), (_, ours, to) = rows
    print(f"ratio: evaluations {base.iterations / ours.iterations:.2f}x, seconds {tb / to:.2f}x; "
          f"test error difference {abs(base.test_error - ours.test_error):.1e}")


if __name__ == "__main__":
    main()
