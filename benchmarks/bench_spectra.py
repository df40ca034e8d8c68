"""Timing of the general free-convolution solver and of a power-law SE point (docs/performance.md, Spectra).

Usage: .venv/bin/python benchmarks/bench_spectra.py [--d 2000] [--mode all|solver|se|large]. Prints one line
per measurement; the matrix side (spectral) and the channel side of the SE point are timed separately.

Modes: ``solver`` times the free convolution of a power-law list of d eigenvalues at four delta; ``se`` times SE
points with that target (the issue's <= 5 s target at d = 2000); ``large`` times a d = 10^4 eigenvalue target
(construction of rho_delta with its support, the spectral integrals, the moments, and one SE point); ``all``
(default) runs ``solver`` and ``se``. Each line carries the load average, since the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import time

from tiedattention.problem import Problem
from tiedattention.targets import parse_target
from tiedattention.theory import state_evolution as se_mod
from tiedattention.theory.spectral import FreeConvolution


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def bench_large(d: int = 10_000) -> None:
    """d = 10^4 power-law eigenvalues: rho_delta's construction (support), integrals, moments, one SE point."""
    mu = parse_target("powerlaw:1.25").measure(d)
    for delta in (0.4, 0.1):
        t0 = time.perf_counter()
        fc = FreeConvolution(mu, delta)
        t1 = time.perf_counter()
        si = fc.integrals(0.05)
        t2 = time.perf_counter()
        fc.moments(4)
        t3 = time.perf_counter()
        print(f"powerlaw d={d} delta={delta}: {len(fc.intervals_u)} components, construction {t1 - t0:.2f} s, "
              f"integrals {t2 - t1:.2f} s ({si.nodes} nodes, error {si.error:.1e}), moments {t3 - t2:.2f} s "
              f"[{_load()}]", flush=True)
    _bench_se(d, (0.5,))


def _bench_se(d: int, alphas) -> None:
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
        t0 = time.perf_counter()
        se = se_mod.StateEvolution(Problem.from_options(target="powerlaw:1.25"), d=d)
        print(f"SE setup powerlaw:1.25 d={d}: {time.perf_counter() - t0:.2f} s", flush=True)
        ref = se_mod.StateEvolution(Problem.from_options(target="mp:0.5"))
        for alpha in alphas:
            timer.update(matrix=0.0, calls=0)
            t0 = time.perf_counter()
            res = se.solve(alpha)
            total = time.perf_counter() - t0
            print(f"SE point powerlaw:1.25 d={d} alpha={alpha}: total {total:.2f} s, matrix side "
                  f"{timer['matrix']:.2f} s in {timer['calls']} calls, channel+rest {total - timer['matrix']:.2f} s, "
                  f"converged {res.converged} in {res.iterations} iterations [{_load()}]", flush=True)
            # side by side: the closed-form MP target's point (0.84 s on a quiet machine), a load reference
            t0 = time.perf_counter()
            r_mp = ref.solve(alpha)
            t_mp = time.perf_counter() - t0
            print(f"  reference mp:0.5 alpha={alpha}: {t_mp:.2f} s ({r_mp.iterations} iterations); ratio "
                  f"powerlaw d={d} / mp = {total / t_mp:.2f} [{_load()}]", flush=True)
    finally:
        se_mod.matrix_update = orig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=2000)
    ap.add_argument("--mode", choices=("all", "solver", "se", "large"), default="all")
    args = ap.parse_args()
    if args.mode == "large":
        bench_large()
        return
    if args.mode in ("all", "solver"):
        bench_solver(args.d)
    if args.mode in ("all", "se"):
        _bench_se(args.d, (0.5, 2.0))


def bench_solver(d: int) -> None:
    mu = parse_target("powerlaw:1.25").measure(d)
    for delta in (1.0, 0.3, 0.1, 0.03):
        t0 = time.perf_counter()
        fc = FreeConvolution(mu, delta)
        t1 = time.perf_counter()
        si = fc.integrals(0.05)
        t2 = time.perf_counter()
        print(f"powerlaw d={d} delta={delta}: {len(fc.intervals_u)} components, edges {t1 - t0:.3f} s, "
              f"integrals {t2 - t1:.3f} s, {si.nodes} nodes, error {si.error:.1e} [{_load()}]", flush=True)


if __name__ == "__main__":
    main()
