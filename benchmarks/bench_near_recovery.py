"""Benchmark of the near-perfect-recovery fixes, side by side in one run.

Noiseless targets at lambda = 1e-4, T = 2, alpha far above the perfect-recovery threshold: rho = m/sqrt(q Qz) -> 1
(docs/theory/state_evolution.md, "Near perfect recovery"). The baseline restores the behaviour before 2026-12-01:
* no rounding allowance for atanh(rho) (state_evolution._correlation_rounding = 0), and spectral panels halved down
  to any width (spectral._U_RESOLUTION = 0: the order-12 comparison solve then fails on -inf integrals);
* the channel's Stein forms divide by Qz q - m^2 computed from q and m (state_evolution._cond_var returns None: ~8
  digits at 1 - rho^2 = 1e-8, so the map scatters by ~4e-9 and the solve stalls at residual ~1e-9);
* a point converged to the correlation's rounding counts as unconverged (StateEvolution._tight: residual <= tol),
  so it is restarted from the Jacobian forms' point and, on a curve, solved again cold.

Two workloads: the d = 100 power law (gamma = 1.25) at alpha = 2, and the 20-point learning curve of the MP target
(kappa0 = 0.5) for alpha in [0.2, 3]. Prints evaluations, seconds, their ratios and the answers with their
fixed-point error estimates.

Run: .venv/bin/python benchmarks/bench_near_recovery.py   (~8-10 min on one core, most of it the baselines)
"""

from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np

from tiedattention.problem import Problem
from tiedattention.theory import spectral as spectral_mod
from tiedattention.theory import state_evolution as sem

POINT = dict(target="powerlaw:1.25", noise=0.0, lam=1e-4, tokens=2)
ALPHA, D = 2.0, 100
CURVE = dict(target="mp:0.5", noise=0.0, lam=1e-4, tokens=2)
CURVE_ALPHAS = np.geomspace(0.2, 3.0, 20)


@contextlib.contextmanager
def baseline():
    """The solver as before 2026-12-01 (see the module docstring)."""
    saved = (sem._correlation_rounding, spectral_mod._U_RESOLUTION, sem._cond_var, sem.StateEvolution._tight)
    sem._correlation_rounding = lambda y, ch, ms: 0.0
    spectral_mod._U_RESOLUTION = 0.0
    sem._cond_var = lambda y: None
    sem.StateEvolution._tight = lambda self, res: bool(res.converged and res.residual <= self.tol)
    try:
        yield
    finally:
        (sem._correlation_rounding, spectral_mod._U_RESOLUTION, sem._cond_var, sem.StateEvolution._tight) = saved


def timed(fn, old: bool):
    with baseline() if old else contextlib.nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t


def point() -> list:
    return [sem.StateEvolution(Problem.from_options(**POINT), d=D).solve(ALPHA)]


def curve() -> list:
    return sem.StateEvolution(Problem.from_options(**CURVE)).learning_curve(CURVE_ALPHAS)


def compare(title: str, fn) -> None:
    print(title)
    (base, tb), (ours, to) = timed(fn, True), timed(fn, False)
    for name, rs, sec in (("baseline (before 2026-12-01)", base, tb), ("ours", ours, to)):
        evals = sum(r.iterations for r in rs)
        print(f"  {name:30s} converged={sum(r.converged for r in rs)}/{len(rs)} evaluations={evals:5d} "
              f"seconds={sec:7.1f}")
    print(f"  ratio: evaluations {sum(r.iterations for r in base) / sum(r.iterations for r in ours):.2f}x, "
          f"seconds {tb / to:.2f}x")
    worst = 0.0
    for b, o in zip(base, ours, strict=True):
        fp = o.errors.get("fixed_point_test_error", float("nan"))
        rel = abs(b.test_error - o.test_error) / o.test_error
        worst = max(worst, rel)
        if len(ours) == 1 or rel > 1e-6:
            print(f"  alpha={o.alpha:.3f} test error: baseline {b.test_error:.6e}, ours {o.test_error:.6e} +- {fp:.1e} "
                  f"(fixed point), relative difference {rel:.1e}")
    print(f"  largest relative difference of the test errors: {worst:.1e}")


def main() -> None:
    compare(f"T = 2, power law 1.25 (d = {D}), Delta = 0, lambda = 1e-4, alpha = {ALPHA}", point)
    compare(f"T = 2, MP kappa0 = 0.5, Delta = 0, lambda = 1e-4: {len(CURVE_ALPHAS)}-point learning curve, alpha in "
            f"[{CURVE_ALPHAS[0]:g}, {CURVE_ALPHAS[-1]:g}]", curve)


if __name__ == "__main__":
    main()
