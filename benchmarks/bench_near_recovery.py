"""Benchmark of the near-perfect-recovery fixes, side by side in one run.

Noiseless d = 100 power law (gamma = 1.25), lambda = 1e-4, alpha = 2, T = 2: rho = m/sqrt(q Qz) -> 1, so the
solver's coordinate atanh(rho) is resolved only to the spectral error over 1 - rho^2 (~5e-3 here), and the free
convolution at delta ~ 4e-5 is 100 bumps whose edges are known only to rounding (docs/theory/state_evolution.md,
"Near perfect recovery"). The baseline restores the behaviour before 2026-12-01: no rounding allowance for
atanh(rho) (state_evolution._correlation_rounding = 0) and spectral panels halved down to any width
(spectral._U_RESOLUTION = 0: the order-12 comparison solve then fails on -inf integrals and the point has no
fixed-point error estimate). Prints evaluations, seconds, their ratios and the two answers.

Run: .venv/bin/python benchmarks/bench_near_recovery.py   (~3-5 min on one core: baseline ~2-4 min, ours ~20-30 s)
"""

from __future__ import annotations

import time
import warnings

from tiedattention.problem import Problem
from tiedattention.theory import spectral as spectral_mod
from tiedattention.theory import state_evolution as sem

POINT = dict(target="powerlaw:1.25", noise=0.0, lam=1e-4, tokens=2)
ALPHA, D = 2.0, 100


def solve(baseline: bool):
    rounding, resolution = sem._correlation_rounding, spectral_mod._U_RESOLUTION
    if baseline:
        sem._correlation_rounding = lambda y, ch, ms: 0.0
        spectral_mod._U_RESOLUTION = 0.0
    try:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = sem.StateEvolution(Problem.from_options(**POINT), d=D).solve(ALPHA)
        return res, time.perf_counter() - t
    finally:
        sem._correlation_rounding, spectral_mod._U_RESOLUTION = rounding, resolution


def main() -> None:
    print(f"T = 2, power law 1.25 (d = {D}), Delta = 0, lambda = 1e-4, alpha = {ALPHA}")
    rows = [("baseline (before 2026-12-01)", *solve(True)), ("ours", *solve(False))]
    for name, res, sec in rows:
        fp = res.errors.get("fixed_point_test_error")
        print(f"{name:30s} converged={res.converged} evaluations={res.iterations:4d} seconds={sec:7.1f} "
              f"test_error={res.test_error:.6e} fixed-point error={'none' if fp is None else f'{fp:.1e}'}")
    (_, base, tb), (_, ours, to) = rows
    print(f"ratio: evaluations {base.iterations / ours.iterations:.2f}x, seconds {tb / to:.2f}x; "
          f"test error difference {abs(base.test_error - ours.test_error):.1e} (relative "
          f"{abs(base.test_error - ours.test_error) / ours.test_error:.1e})")


if __name__ == "__main__":
    main()
