"""Finite-size SE: the control variate against the plain Gram QMC, side by side in one run.

Usage
-----
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_finite_size.py [--alpha 0.5] [--d 100] [--log2 12]

At the d -> infinity SE point (MP kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2) it evaluates the d-dimensional
channel two ways on the same scrambled Sobol' rule (8 replicas x 2^log2 points):

* ours: SoftmaxChannel.moments (the SE's Gauss-Hermite rule) + [QMC with the Gram matrices - the same QMC with
  Gamma = I] (``FiniteSizeChannel.correction``; the two share every point but Gamma);
* plain: the QMC with the Gram matrices alone (``FiniteSizeChannel.evaluate(gram=True)``).

and prints, for q_hat, m_hat, sigma_hat, the train and the test error, the two values, their replica errors and
the ratio plain error / ours, and the seconds of each route (ours costs about twice the plain QMC: two QMC passes).
Recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from tiedattention import Problem
from tiedattention.theory import StateEvolution
from tiedattention.theory.finite_size import FiniteSizeChannel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--log2", type=int, default=12)
    args = ap.parse_args()
    problem = Problem.from_options(lam=0.01)
    se = StateEvolution(problem)
    r = se.solve(args.alpha)
    a, q, m, s = args.alpha, r.q, r.m, r.sigma
    ch = se.channel_final.moments(a, q, m, s)
    te_se = se.channel_final.test_error(q, m)[0]
    fsc = FiniteSizeChannel(se.channel_final.params, args.d, qmc_log2=args.log2, replicas=8)

    t0 = time.perf_counter()
    corr, corr_err = fsc.correction(a, q, m, s)
    dte, dte_err = fsc.test_error_correction(q, m)
    t_ours = time.perf_counter() - t0

    t0 = time.perf_counter()
    reps = fsc.evaluate(a, q, m, s, gram=True)
    tests = np.array([fsc._test_on(nd, q, m, False) for nd in fsc._nodes])
    t_plain = time.perf_counter() - t0

    ours = {"q_hat": ch.q_hat, "m_hat": ch.m_hat, "sigma_hat": ch.sigma_hat, "train_error": ch.train_error}
    print(f"alpha = {a:g}, d = {args.d}, rule 8 x 2^{args.log2}: ours (control variate) vs plain QMC")
    print(f"{'quantity':12s} {'ours':>12s} {'+-':>9s} {'plain':>12s} {'+-':>9s} {'err ratio':>9s}")
    rows = [(k, ours[k] + corr[k], corr_err[k], np.array([x[k] for x in reps])) for k in ours]
    rows.append(("test_error", te_se + dte, dte_err, tests))
    for k, v, e, plain in rows:
        pe = plain.std(ddof=1) / math.sqrt(plain.size)
        print(f"{k:12s} {v:12.7f} {e:9.2e} {plain.mean():12.7f} {pe:9.2e} {pe / max(e, 1e-300):9.1f}")
    print(f"seconds: ours {t_ours:.1f}, plain {t_plain:.1f} (ratio {t_ours / t_plain:.2f})")


if __name__ == "__main__":
    main()
