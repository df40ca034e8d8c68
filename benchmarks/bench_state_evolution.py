"""State evolution: our solver against the straightforward route, side by side, in one run.

The straightforward route (issue 2's description, written out here as the baseline):
  * channel: each iteration draws 1000 fresh Monte Carlo samples of (zeta, z) per logit, solves every
    prox with a general-purpose minimiser (scipy.optimize.minimize, L-BFGS-B), and gets m_hat, sigma_hat
    from Stein's lemma (weighted averages of g with the inverse covariance);
  * matrix side: the same spectral integral I(delta, eps), with dI/ddelta and dI/deps by central
    finite differences;
  * fixed point: damped iteration (0.5) until the relative change is below 1e-3 (all that the Monte
    Carlo noise allows) or 60 iterations.
Ours: StateEvolution (deterministic quadrature, batched Newton prox, exact derivatives, Anderson).

Both at MP kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2, alpha = 0.5 (default). Prints seconds per
converged point and the spread (std) of the test error over seeds (baseline: 5 Monte Carlo seeds; ours:
5 repeated runs, deterministic), then the ratios, plus our learning-curve and T = 5 timings.

    python benchmarks/bench_state_evolution.py [--alpha 0.5] [--seeds 5] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
from scipy import optimize

from tiedattention import Problem
from tiedattention.theory import StateEvolution
from tiedattention.theory.channel import logit_design
from tiedattention.theory.spectral import FreeConvolution


def _softmax_rows(u):
    e = np.exp(u - u.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _loss(h, y, beta, P, T):
    s = _softmax_rows(beta * (P @ h).reshape(T, T))
    return float(np.sum((y - s) ** 2))


def baseline_channel(alpha, q, m, sigma, q0, noise, beta, beta0, T, rng, n_mc=1000):
    P = logit_design(T)  # (T*T, K): vec D(v) = P v
    K = P.shape[1]
    qz = q0 + noise / 2
    zeta = math.sqrt(qz) * rng.standard_normal((n_mc, K))
    z = (m / qz) * zeta + math.sqrt(max(q - m * m / qz, 0.0)) * rng.standard_normal((n_mc, K))
    g = np.empty_like(z)
    for i in range(n_mc):
        y = _softmax_rows(beta0 * (P @ zeta[i]).reshape(T, T))
        res = optimize.minimize(
            lambda h, zi=z[i], yi=y: np.sum((h - zi) ** 2) / (2 * sigma) + _loss(h, yi, beta, P, T),
            z[i], method="L-BFGS-B", options={"ftol": 1e-12, "gtol": 1e-10},
        )
        g[i] = (res.x - z[i]) / sigma
    cov = np.array([[qz, m], [m, q]])
    inv = np.linalg.inv(cov)
    e_zeta_g = np.mean(np.sum(zeta * g, axis=1))
    e_z_g = np.mean(np.sum(z * g, axis=1))
    d_zeta, d_z = inv @ np.array([e_zeta_g, e_z_g])
    return 2 * alpha * np.mean(np.sum(g * g, axis=1)), 2 * alpha * d_zeta, -2 * alpha * d_z


def baseline_matrix(measure, q_hat, m_hat, sigma_hat, lam, h=1e-4):
    delta, eps = math.sqrt(q_hat) / m_hat, 2 * lam / m_hat

    def big_i(dl, ep):
        return FreeConvolution(measure, dl).integrals(ep).I

    i0 = big_i(delta, eps)
    d_delta = (big_i(delta + h, eps) - big_i(delta - h, eps)) / (2 * h)
    d_eps = (big_i(delta, eps + h) - big_i(delta, eps - h)) / (2 * h)
    scale = m_hat / sigma_hat
    return (scale**2 * i0, scale * (i0 - 0.5 * delta * d_delta - 0.5 * eps * d_eps),
            d_delta / (2 * delta * sigma_hat))


def baseline_point(problem, alpha, seed, max_iter=60, tol=1e-3):
    rng = np.random.default_rng(seed)
    measure = problem.task.target.measure()
    q0 = measure.q0
    x = np.array([0.5 * q0, 0.4 * q0, 1.0])
    t0 = time.perf_counter()
    n_it = 0
    for it in range(1, max_iter + 1):
        n_it = it
        qh, mh, sh = baseline_channel(alpha, *x, q0, problem.task.noise, problem.student.beta,
                                      problem.task.beta0, problem.task.tokens, rng)
        new = np.array(baseline_matrix(measure, qh, mh, sh, problem.student.lam))
        change = np.max(np.abs(new - x) / np.abs(x))
        x = 0.5 * x + 0.5 * new
        if change < tol:
            break
    # test error through our (deterministic) rule, so that only the fixed point differs
    se = StateEvolution(problem)
    te, _ = se.channel_final.test_error(x[0], x[1])
    return time.perf_counter() - t0, n_it, te


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 baseline seeds, at most 25 iterations")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    problem = Problem.from_options()
    n_seeds = 3 if args.quick else args.seeds
    max_iter = 25 if args.quick else 60

    ours_t, ours_te = [], []
    for _ in range(args.seeds):
        t0 = time.perf_counter()
        r = StateEvolution(problem, tol=1e-8).solve(args.alpha)
        ours_t.append(time.perf_counter() - t0)
        ours_te.append(r.test_error)
    print(f"ours      : {np.mean(ours_t):8.3f} s/point  iterations {r.iterations}  residual {r.residual:.1e}  "
          f"test error {ours_te[0]:.6f} ± {r.errors['test_error']:.1e} (quadrature)  spread {np.std(ours_te):.1e}")

    base = [baseline_point(problem, args.alpha, s, max_iter=max_iter) for s in range(n_seeds)]
    bt = np.array([b[0] for b in base])
    bte = np.array([b[2] for b in base])
    print(f"baseline  : {bt.mean():8.3f} s/point  iterations {[b[1] for b in base]}  "
          f"test error {bte.mean():.6f}  spread {bte.std(ddof=1):.1e} over {n_seeds} Monte Carlo seeds")
    spread_ours = max(np.std(ours_te), r.errors["test_error"])
    print(f"speed-up  : {bt.mean() / np.mean(ours_t):8.1f}x   (target >= 300x)")
    print(f"spread    : {bte.std(ddof=1) / spread_ours:8.1f}x smaller (ours: max of run-to-run spread and "
          "quadrature error estimate; target >= 10x)")

    t0 = time.perf_counter()
    curve = StateEvolution(problem).learning_curve(np.geomspace(0.02, 4.0, 50))
    print(f"curve     : 50 warm-started points in {time.perf_counter() - t0:.1f} s "
          f"({sum(c.converged for c in curve)}/50 converged; target <= 20 s)")
    if not args.quick:
        t0 = time.perf_counter()
        r5 = StateEvolution(Problem.from_options(tokens=5)).solve(0.1)
        print(f"T = 5     : one point in {time.perf_counter() - t0:.1f} s (converged {r5.converged}, "
              f"{r5.iterations} iterations; target <= 30 s)")


if __name__ == "__main__":
    main()
