"""Timing of the general free-convolution solver and of a power-law SE point (docs/performance.md, Spectra).

Usage: .venv/bin/python benchmarks/bench_spectra.py [--d 2000]. Prints one line per measurement; the matrix
side (spectral) and the channel side of the SE point are timed separately.
"""

from __future__ import annotations

import argparse
import time

from tiedattention.problem import Problem
from tiedattention.targets import parse_target
from tiedattention.theory import state_evolution as se_mod
from tiedattention.theory.spectral import FreeConvolution


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=2000)
    args = ap.parse_args()
    mu = parse_target("powerlaw:1.25").measure(args.d)
    for delta in (1.0, 0.3, 0.1, 0.03):
        t0 = time.perf_counter()
        fc = FreeConvolution(mu, delta)
        t1 = time.perf_counter()
        si = fc.integrals(0.05)
        t2 = time.perf_counter()
        print(f"powerlaw d={args.d} delta={delta}: {len(fc.intervals_u)} components, edges {t1 - t0:.3f} s, "
              f"integrals {t2 - t1:.3f} s, {si.nodes} nodes, error {si.error:.1e}", flush=True)
    timer = {"matrix": 0.0, "calls": 0}
    orig = se_mod.matrix_update

    def timed(*a, **k):
        t0 = time.perf_counter()
        out = orig(*a, **k)
        timer["matrix"] += time.perf_counter() - t0
        timer["calls"] += 1
        return out

    se_mod.matrix_update = timed
    try:
        se = se_mod.StateEvolution(Problem.from_options(target="powerlaw:1.25"), d=args.d)
        for alpha in (0.5, 2.0):
            timer.update(matrix=0.0, calls=0)
            t0 = time.perf_counter()
            res = se.solve(alpha)
            total = time.perf_counter() - t0
            print(f"SE point powerlaw:1.25 d={args.d} alpha={alpha}: total {total:.2f} s, matrix side "
                  f"{timer['matrix']:.2f} s in {timer['calls']} calls, channel+rest {total - timer['matrix']:.2f} s, "
                  f"converged {res.converged} in {res.iterations} iterations", flush=True)
    finally:
        se_mod.matrix_update = orig


if __name__ == "__main__":
    main()
