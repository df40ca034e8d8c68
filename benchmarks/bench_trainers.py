"""Time for each trainer to reach the minimiser's objective, side by side in one run.

For Adam with the study's protocol (lr 0.1, W ~ N(0,1), stop when the total loss changes by less than 1e-7
relative after at least 100 steps), L-BFGS (strong Wolfe) on W and accelerated proximal gradient on S, record
the objective F = L/d^2 along the run, take the best final objective of all routes as the minimiser's, and
report the time each route needs to come within ``--rtol`` (1e-6) relative of it, as ratios to Adam.
Where Adam's stop rule ends above that level, its stop time and its gap are reported instead.

Regimes (d = 100, T = 2, MP kappa0 = 0.5, Delta = 0.5, kappa = 1):
  easy: alpha = 0.5,  lam = 0.01   (well conditioned)
  hard: alpha = 0.15, lam = 1e-4   (near the interpolation peak, ill conditioned)

Usage:  python benchmarks/bench_trainers.py [--d 100] [--device cpu|cuda] [--threads N] [--regimes easy,hard]
Only numpy and torch are needed (run with PYTHONPATH=src where the package is not installed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tiedattention.problem import Problem  # noqa: E402
from tiedattention.simulation import sample_dataset, train  # noqa: E402

REGIMES = {"easy": (0.5, 0.01), "hard": (0.15, 1e-4)}
ROUTES = {"adam": {}, "lbfgs": {"max_iter": 100_000}, "prox": {"max_iter": 200_000}}


def run_regime(name: str, d: int, device: str, seed: int, rtol: float, adam_max: int) -> list[str]:
    alpha, lam = REGIMES[name]
    pb = Problem.from_options(target="mp:0.5", noise=0.5, lam=lam, tokens=2)
    n = int(round(alpha * d * d))
    data = sample_dataset(pb, n, d, seed)
    runs = {}
    for route, opts in ROUTES.items():
        hist: list[tuple[float, float]] = []
        if route == "adam":
            opts = {"max_steps": adam_max}
        res = train(pb, data, solver=route, device=device, seed=seed,
                    callback=lambda k, F, t, h=hist: h.append((t, F)), **opts)
        runs[route] = (res, np.array(hist))
    best = min(min(r.objective, h[:, 1].min()) for r, h in runs.values())
    target = best * (1 + rtol)
    out = [f"== {name}: d={d} alpha={alpha} (n={n}) lam={lam} T=2 mp:0.5 Delta=0.5 device={device} "
           f"threads={torch.get_num_threads()}", f"   best objective F* = {best:.12g}; target F* (1 + {rtol:g})"]
    times = {}
    out.append(f"   {'route':6s} {'steps':>8s} {'stop s':>9s} {'final (F-F*)/F*':>16s} {'t to target s':>14s}"
               f" {'speed-up vs adam':>17s}")
    for route, (_res, h) in runs.items():
        hit = np.nonzero(h[:, 1] <= target)[0]
        times[route] = float(h[hit[0], 0]) if hit.size else None
    adam_time = times["adam"] if times["adam"] is not None else runs["adam"][0].seconds
    for route, (res, _) in runs.items():
        t = times[route]
        gap = (res.objective - best) / best
        ratio = f"{adam_time / t:17.1f}" if t else f"{'never':>17s}"
        t_txt = f"{t:14.2f}" if t is not None else f"{'not reached':>14s}"
        out.append(f"   {route:6s} {res.steps:8d} {res.seconds:9.2f} {gap:16.2e} {t_txt} {ratio}"
                   + ("" if res.converged else "  (stop rule not met)"))
    if times["adam"] is None:
        res = runs["adam"][0]
        out.append(f"   Adam's stop rule ended {(res.objective - best) / best:.2e} above F* (after {res.steps} steps,"
                   f" {res.seconds:.1f} s): speed-ups above are against its stop time")
    fastest = min((t, r) for r, t in times.items() if t is not None)
    out.append(f"   fastest: {fastest[1]} ({adam_time / fastest[0]:.1f}x faster than the Adam protocol)")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--adam-max-steps", type=int, default=1_000_000)
    ap.add_argument("--regimes", default="easy,hard")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    for name in args.regimes.split(","):
        for line in run_regime(name, args.d, args.device, args.seed, args.rtol, args.adam_max_steps):
            print(line, flush=True)
    print(f"total {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
