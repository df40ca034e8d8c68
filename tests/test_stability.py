"""RS (de Almeida-Thouless) stability of the state-evolution fixed point (theory/stability.py).

Derivation, measured numbers and commands: docs/theory/stability.md. Default tests: closed forms (direct model,
linear denoiser), the symmetric-matrix Jacobian against an explicit finite-d Jacobian, the exact identity
D1 = Sigma Sigma_hat on the quadrature nodes, determinism. Slow: the AT value against the growth factor of
perturbations of undamped GAMP linearised at its fixed point on data (d = 100)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tiedattention.problem import Problem
from tiedattention.theory.spectral import FreeConvolution
from tiedattention.theory.stability import (
    channel_options_for,
    channel_replicon,
    denoiser_replicon,
    finite_d_denoiser_replicon,
    interpolating_phase_at,
    prox_switching,
    rs_stability,
    soft_threshold_d2,
    spectral_jacobian_sq,
)
from tiedattention.theory.state_evolution import SEResult

REF = dict(target="mp:0.5", noise=0.5, tokens=2)


def _se_point(alpha, q, m, sigma) -> SEResult:
    nan = float("nan")
    return SEResult(alpha, 2 * alpha, q, m, sigma, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, True, 0,
                    0.0, 0.0)


# ------------------------------------------------------------------------------------------------ closed forms
def test_direct_model_linear_denoiser_is_one_over_sigma_hat_plus_4lam_squared():
    pb = Problem.from_options(**REF, lam=0.03, model="direct")
    measure = pb.task.target.measure(None)
    r = denoiser_replicon(pb, measure, q_hat=0.7, m_hat=1.3, sigma_hat=0.9)
    assert r["value"] == pytest.approx(1.0 / (0.9 + 4 * 0.03) ** 2, rel=1e-15)
    assert r["D2"] == pytest.approx(r["D1"] ** 2, rel=1e-15)  # linear: the quotient is constant


@pytest.mark.parametrize("lam", [1e-3, 0.1])
@pytest.mark.parametrize("curv", [0.3, 2.0, 10.0])
def test_ridge_with_a_quadratic_channel_is_rs_stable_at_every_alpha(lam, curv):
    """Convex (ridge + square loss) case by closed form: with a constant PSD loss Hessian H the channel Jacobian
    is -H(I + Sigma H)^-1 and the fixed point of Sigma = 1/(Sigma_hat + 4 lam), Sigma_hat = 2 alpha tr
    H(I + Sigma H)^-1, gives AT = 2 alpha Sigma^2 sum u_k^2 with u_k = Sigma h_k/(1 + Sigma h_k) in [0, 1):
    AT < Sigma Sigma_hat = 1 - 4 lam Sigma < 1 for every alpha."""
    h = curv * np.array([1.0, 0.4])  # K - 1 = 2 non-trivial directions (T = 2)
    for alpha in (0.01, 0.1, 0.5, 1.0, 5.0, 50.0):
        sigma = 1.0
        for _ in range(2000):  # the scalar fixed point (a contraction in Sigma)
            sigma_hat = 2 * alpha * np.sum(h / (1 + sigma * h))
            sigma = 1.0 / (sigma_hat + 4 * lam)
        sigma_hat = 2 * alpha * np.sum(h / (1 + sigma * h))
        channel = 2 * alpha * np.sum((h / (1 + sigma * h)) ** 2)
        pb = Problem.from_options(**REF, lam=lam, model="direct")
        den = denoiser_replicon(pb, pb.task.target.measure(None), 1.0, 1.0, sigma_hat)["value"]
        at = channel * den
        u = sigma * h / (1 + sigma * h)
        assert at == pytest.approx(2 * alpha * np.sum(u**2), rel=1e-9)
        assert at < sigma * sigma_hat < 1.0


def test_direct_model_at_is_below_one_and_equals_the_normalised_channel():
    pb = Problem.from_options(**REF, lam=0.01, model="direct")
    s = rs_stability(pb, _se_point(0.25, 0.6770, 0.7782, 8.0809))
    assert s.denoiser_normalised == pytest.approx(1.0, abs=1e-3)  # Sigma (Sigma_hat + 4 lam) = 1 at the fixed point
    assert s.at == pytest.approx(s.channel_normalised * s.denoiser_normalised, rel=1e-12)
    assert 0 < s.at < 1 and s.stable


# ------------------------------------------------------------------------------------------------ finite d
def _explicit_jacobian_sq(Y: np.ndarray, f, basis: list[np.ndarray]) -> float:
    """||D F(Y)||_HS^2 in the orthonormal coordinates of Sym(d) (``basis``), F(Y) = U f(mu) U^T, by central
    differences of the matrix function along every basis direction (an independent route: no eigenbasis formula)."""
    def F(M):
        mu, U = np.linalg.eigh(M)
        return (U * f(mu)) @ U.T

    h = 1e-6
    total = 0.0
    for E in basis:
        col = (F(Y + h * E) - F(Y - h * E)) / (2 * h)  # a symmetric matrix; its orthonormal-coordinate norm
        total += float(np.sum(col * col))  # ||col||_F^2 = sum over orthonormal coordinates
    return total


@pytest.mark.parametrize("rank", [None, 4])
def test_spectral_jacobian_formula_matches_an_explicit_jacobian(rank, sym_basis):
    rng = np.random.default_rng(3)
    d = 7
    G = rng.standard_normal((d, d))
    Y = (G + G.T) / math.sqrt(2 * d) + np.diag(np.linspace(-0.5, 1.0, d))
    thr = 0.1
    mu = np.linalg.eigvalsh(Y)
    keep = np.ones(d, bool) if rank is None else np.arange(d) >= d - rank
    cut_level = -np.inf if rank is None else 0.5 * (mu[d - rank - 1] + mu[d - rank])

    def f(x):
        return np.where(x > cut_level, np.maximum(x - thr, 0.0), 0.0)

    fv = np.where(keep, np.maximum(mu - thr, 0.0), 0.0)
    fp = np.where(keep, (mu > thr).astype(float), 0.0)
    assert spectral_jacobian_sq(mu, fv, fp) == pytest.approx(_explicit_jacobian_sq(Y, f, sym_basis(d)), rel=1e-6)


def test_finite_d_denoiser_replicon_tends_to_the_integral():
    """Classical locations at d = 100, 400, 1600 approach D2/Sigma_hat^2 (kappa = 1), with an error ~ 1/d."""
    pb = Problem.from_options(**REF, lam=0.01)
    measure = pb.task.target.measure(None)
    qh, mh, sh = 0.02, 1.4, 0.6
    exact = denoiser_replicon(pb, measure, qh, mh, sh)["value"]
    errs = [abs(finite_d_denoiser_replicon(pb, measure, qh, mh, sh, d) / exact - 1) for d in (100, 400, 1600)]
    assert errs[-1] < 0.01
    assert errs[2] < errs[1] < errs[0]


# ------------------------------------------------------------------------------------------------ quadrature
@pytest.mark.parametrize("delta,eps", [(0.3, 0.05), (1.0, 0.4), (2.5, 1.5), (0.08, 0.02)])
def test_difference_quotient_integral_equals_two_int_phi_re_g(delta, eps):
    """D1 = int int (phi(x) - phi(y))/(x - y) rho rho = 2 int phi rho Re g (Re g the principal value): the same
    product rule that gives D2 must reproduce the 1-D integral of the SE's Sigma equation; and 0 <= the quotient
    <= 1 gives rank^2 <= D2 <= D1."""
    measure = Problem.from_options(**REF).task.target.measure(None)
    fc = FreeConvolution(measure, delta)
    r = soft_threshold_d2(fc, eps)
    assert r["D1"] == pytest.approx(r["two_int_phi_re_g"], rel=1e-9)
    assert r["rank"] ** 2 <= r["D2"] <= r["D1"]
    assert r["D2_error"] < 1e-8 * r["D2"]


def test_narrow_student_with_a_binding_cut_is_rs_unstable():
    pb = Problem.from_options(**REF, lam=0.01, kappa=0.25)
    measure = pb.task.target.measure(None)
    r = denoiser_replicon(pb, measure, 0.02, 1.4, 0.6)
    assert math.isinf(r["value"]) and "rank cut binds" in r["message"]
    # at finite d the classical-location value grows like log d
    v = [finite_d_denoiser_replicon(pb, measure, 0.02, 1.4, 0.6, d) for d in (100, 400, 1600)]
    assert v[0] < v[1] < v[2]
    assert (v[2] - v[1]) == pytest.approx(v[1] - v[0], rel=0.25)  # equal increments per factor 4 in d


def test_rs_stability_is_deterministic_and_below_one_at_the_reference_point():
    pb = Problem.from_options(**REF, lam=0.01)
    point = _se_point(0.5, 1.4613, 1.3806, 2.3017)
    a = rs_stability(pb, point)
    b = rs_stability(pb, point)
    assert a == b
    assert 0.3 < a.at < 1 and a.stable
    assert abs(a.divergence_check) < 1e-9
    assert a.error < 0.02 * a.at


def test_channel_replicon_obeys_the_cauchy_schwarz_bound_of_sigma_hat():
    """Per node ||J||_F^2 >= (tr J)^2/(K - 1) (J = dg/dz has rank <= K - 1), and E X^2 >= (E X)^2 on the positive
    quadrature weights: 2 alpha E||J||^2 >= Sigma_hat^2/(2 alpha (K - 1)), K - 1 = 2 at T = 2 (equality iff
    J is a multiple of the projection, the same at every node)."""
    pb = Problem.from_options(**REF, lam=0.01)
    for alpha, q, m, sigma in ((0.5, 1.4613, 1.3806, 2.3017), (0.1, 0.6373, 0.6608, 18.9383)):
        v, e, ch = channel_replicon(pb, alpha, q, m, sigma)
        assert v >= ch.sigma_hat**2 / (2 * alpha * 2)
        assert 0 < e < 0.05 * v


def test_prox_switching_is_absent_where_the_se_agrees_and_present_at_the_failing_point():
    """The singular (branch-switching) part: none at alpha = 0.5, lam = 0.01 (the SE agrees with the ERM there);
    ~1 % of sequences with two local minima and a positive density of near-ties at alpha = 0.25, lam = 1e-4 (the
    SE point of that failure); deterministic."""
    ok = prox_switching(Problem.from_options(**REF, lam=0.01), _se_point(0.5, 1.4613, 1.3806, 2.3017), samples=4000)
    assert ok["multi"] == 0.0 and ok["tie_density"] == 0.0
    pb = Problem.from_options(**REF, lam=1e-4)
    point = _se_point(0.25, 3.3163, 1.7660, 35.8272)
    bad = prox_switching(pb, point, samples=4000)
    assert bad["multi"] > 3 * bad["multi_error"] and bad["tie_density"] > 0
    assert prox_switching(pb, point, samples=4000) == bad


def test_interpolating_phase_at_matches_the_full_se_at_tiny_lambda():
    """lambda -> 0+ route AT = D2/(2 alpha_bar) at the phase's (delta, eps) for alpha_bar = 0.1 (2.7040, 2.8838 from
    solve_interpolating_phase, rounded) against rs_stability of the full SE solved at lam = 1e-6, alpha = 0.05
    (0.6671, measured); D1 = Sigma Sigma_hat = 2 alpha_bar to the rounding of the inputs."""
    measure = Problem.from_options(**REF).task.target.measure(None)
    at = interpolating_phase_at(measure, 2.7040, 2.8838, 0.1)
    assert at["at"] == pytest.approx(0.6671, abs=3e-3)
    assert at["d1_over_2abar"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slow
def test_interpolating_phase_at_its_exact_solution():
    from tiedattention.theory.state_evolution import solve_interpolating_phase

    measure = Problem.from_options(**REF).task.target.measure(None)
    r = solve_interpolating_phase(measure, measure.q0 + 0.25, 0.1)
    at = interpolating_phase_at(measure, r["delta"], r["eps"], 0.1)
    assert at["d1_over_2abar"] == pytest.approx(1.0, abs=1e-8)  # Sigma Sigma_hat = 2 alpha_bar = D1
    assert at["at"] == pytest.approx(0.6679, abs=1e-3)


# ------------------------------------------------------------------------------------------------ GAMP (slow)
def linearised_gamp_growth(problem, X, y, res, S0=None, iterations=30, seed=0, project=True, return_state=False,
                           row_variances=False, V=None, sigma_hat=None):
    """Growth of perturbations of undamped GAMP linearised at its fixed point ``res`` (V, Sigma_hat frozen).

    State (dS, dg_prev): d_omega = A dS - V dg_prev; dg = J d_omega with J = -H (I + V H)^-1 per sequence (H the
    loss Hessian at h* = A(S*)); dY = Sigma_hat dS + (2/d) A^T dg; dS' = U (Q o U^T dY U) U^T / Sigma_hat with Q the
    difference quotients of f = (mu - 2 lam)_+ at the eigenvalues of Y*. With ``project``, dS' is projected
    orthogonal to S* and S0 (the order-parameter directions). Returns the per-iteration ratios
    ||dS_{t+1}||^2 / ||dS_t||^2 (the quantity AT predicts, from the first step on)."""
    from tiedattention.amp import MeasurementOperator
    from tiedattention.theory.channel import softmax_loss

    op = MeasurementOperator(X)
    d, T = op.d, op.T
    lam = problem.student.lam
    direct = problem.student.model == "direct"
    S = res.S_hat
    V = res.sigma if V is None else V
    sh = res.sigma_hat if sigma_hat is None else sigma_hat
    p = problem.student.width(X.shape[2]) if not direct else X.shape[2]
    h = op.forward(S)
    _, grad, H = softmax_loss(h, y, problem.student.beta, T)
    g = -grad
    K = H.shape[1]
    Vmu = V * (op.row_weights() if row_variances else np.ones(op.n))  # per-sequence variances (gamp's option)
    J = -np.linalg.solve(np.eye(K)[None] + Vmu[:, None, None] * H, H)  # (I + V H)^-1 H = H (I + V H)^-1
    Y = sh * S + (2.0 / d) * op.adjoint(g)
    mu, U = np.linalg.eigh(0.5 * (Y + Y.T))
    f = np.maximum(mu - 2 * lam, 0.0) if not direct else mu * sh / (sh + 4 * lam)
    fp = (mu > 2 * lam).astype(float) if not direct else np.full_like(mu, sh / (sh + 4 * lam))
    if p < d:  # rank cut: keep the top p (GAMP at input weight c = 1)
        f[: d - p] = 0.0
        fp[: d - p] = 0.0
    # the product formula on this data set: (2/d^2) sum ||J_mu||^2 x (2/d^2) ||Df||_HS^2 / sigma_hat^2
    at_empirical = 2.0 * float(np.sum(J * J)) / d**2 * 2.0 * spectral_jacobian_sq(mu, f, fp) / d**2 / sh**2
    dmu = mu[:, None] - mu[None, :]
    close = np.abs(dmu) <= 1e-12 * np.max(np.abs(mu))
    Q = np.where(close, 0.5 * (fp[:, None] + fp[None, :]), (f[:, None] - f[None, :]) / np.where(close, 1, dmu))
    dirs = [S / np.linalg.norm(S)]
    if S0 is not None:
        v = S0 - np.sum(S0 * dirs[0]) * dirs[0]
        dirs.append(v / np.linalg.norm(v))

    def proj(M):
        if project:
            for D_ in dirs:
                M = M - np.sum(M * D_) * D_
        return M

    rng = np.random.default_rng(seed)
    G = rng.standard_normal((d, d))
    dS = proj((G + G.T) / 2)
    dg_prev = np.zeros_like(g)
    ratios, cosines = [], []
    for _ in range(iterations):
        n0 = np.sum(dS * dS)
        dom = op.forward(dS) - Vmu[:, None] * dg_prev
        dg = np.einsum("nkl,nl->nk", J, dom)
        dY = sh * dS + (2.0 / d) * op.adjoint(dg)
        dS_new = proj(U @ (Q * (U.T @ dY @ U)) @ U.T / sh)
        n1 = np.sum(dS_new * dS_new)
        ratios.append(n1 / n0)
        cosines.append(np.sum(dS_new * dS) / math.sqrt(n0 * n1))
        scale = 1.0 / math.sqrt(n1 / n0)  # renormalise the whole state (linear map)
        dS, dg_prev = dS_new * scale, dg * scale
    if return_state:
        return np.array(ratios), {"dS": dS, "U": U, "mu": mu, "f": f, "cos": np.array(cosines),
                                  "at_empirical": at_empirical, "fixed_point_residual": float(
                                      np.linalg.norm(U @ np.diag(f) @ U.T / sh - S) / np.linalg.norm(S))}
    return np.array(ratios)


def _gamp_fixed_point(pb, alpha, d, seed):
    pytest.importorskip("torch")
    from tiedattention.amp import gamp
    from tiedattention.errors import ConvergenceWarning
    from tiedattention.simulation import rng_for, sample_dataset

    S0 = pb.task.target.sample(d, rng_for(seed, "target"))
    data = sample_dataset(pb, int(round(alpha * d * d)), d, seed, S0=S0)
    X, y = np.asarray(data.X, float), np.asarray(data.y, float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = gamp(pb, X, y, S0, damping=0.5, tol=1e-13, max_iter=3000)
    assert res.converged
    return X, y, np.asarray(S0, float), res


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_at_value_is_the_growth_factor_of_linearised_gamp(alpha):
    """d = 100, lam = 0.01: the mean square of a random perturbation of undamped GAMP, linearised at its fixed point
    (V, Sigma_hat frozen, the S*, S0 directions projected out), grows per iteration by the AT value of the SE point:
    first-step ratio ||dS_1||^2/||dS_0||^2 over 6 random directions within 10 % (finite size; measured 0.63 vs
    0.612 at alpha = 0.1, 0.49-0.51 vs 0.475 at alpha = 0.5). Later iterations are dominated by an isolated
    period-2 mode of undamped GAMP (docs/theory/stability.md), not by the bulk the AT value describes."""
    from tiedattention.theory import solve

    pb = Problem.from_options(**REF, lam=0.01)
    X, y, S0, res = _gamp_fixed_point(pb, alpha, 100, 0)
    first = [linearised_gamp_growth(pb, X, y, res, S0, iterations=1, seed=s)[0] for s in range(6)]
    at = rs_stability(pb, solve(pb, alpha)).at
    assert np.mean(first) == pytest.approx(at, rel=0.10)


def test_cli_theory_rs_stability_fields():
    import json

    from typer.testing import CliRunner

    from tiedattention.cli import app

    res = CliRunner().invoke(app, ["theory", "--alpha", "0.5", "--rs-stability", "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[0])
    assert rec["rs_at"] == pytest.approx(0.475, abs=0.01)  # the reference point (docs/theory/stability.md)
    assert rec["rs_switching"] == 0.0 and rec["rs_stable"] is True


def test_at_of_a_qmc_resolved_point_uses_its_own_rule():
    """Past the interpolation peak the SE point is re-solved with QMC; its AT value must be evaluated with that
    rule (the Gauss-Hermite rule's error estimate there is of order 10, i.e. meaningless)."""
    assert channel_options_for("qmc4x2^14") == {"rule": "qmc", "replicas": 4, "qmc_log2": 14}
    assert channel_options_for("gh24") == {"order": 24} and channel_options_for("") is None
    assert channel_options_for("qmc4x2^12+stein") == {"rule": "qmc", "replicas": 4, "qmc_log2": 12,
                                                     "conjugates": "stein"}
    problem = Problem.from_options(**REF, lam=1e-4)
    from types import SimpleNamespace

    point = SimpleNamespace(alpha=0.25, q=2.9, m=1.67, sigma=29.8, quadrature="qmc4x2^11")  # an SEResult's fields
    own = rs_stability(problem, point)
    gh = rs_stability(problem, (point.q, point.m, point.sigma), alpha=0.25)
    assert own.error < 0.05 * own.at  # a QMC replica error, not a jump between Gauss-Hermite orders
    assert gh.error > 10 * own.error


def cavity_branches(problem, X, y, S):
    """At an ERM stationary point S: the c = 1 GAMP scalars (V, Sigma_hat) solved self-consistently, then for every
    sequence the prox objective |h - omega|^2/(2V) + l(h; y) at its cavity field omega = h* - V g (h* = A(S),
    g = -grad l(h*)) from 10 starts. Returns (number with >= 2 local minima, number whose h* is not the global
    minimiser, V). RS assumes both are 0 (docs/theory/stability.md section 5)."""
    from tiedattention.amp import MeasurementOperator, spectral_denoiser
    from tiedattention.theory import channel as C

    op = MeasurementOperator(X)
    n, T, d = op.n, op.T, op.d
    lam = problem.student.lam
    h = op.forward(S)
    _, grad, H = C.softmax_loss(h, y, problem.student.beta, T)
    K = H.shape[1]
    V = 10.0
    for _ in range(500):
        sh = 2.0 * float(np.trace(np.linalg.solve(np.eye(K)[None] + V * H, H), axis1=1, axis2=2).sum()) / d**2
        den = spectral_denoiser(sh * S - (2.0 / d) * op.adjoint(grad), 2 * lam)
        v_new = 2.0 * den.divergence / (d**2 * sh)
        if abs(v_new - V) < 1e-12 * V:
            break
        V = 0.5 * (V + v_new)
    B = C.reduced_basis(T)
    kern = C._kernel(T, problem.student.beta)
    lab = kern.labels(y.reshape(n, T, T))
    b = (h + V * grad) @ B
    c_star = h @ B
    logy = np.log(np.clip(y.reshape(n, T * T), 1e-12, None))
    c_int = logy @ C._logit_fit_matrix(T, problem.student.beta).T
    starts = [b, c_int, c_star] + [b + t * (c_int - b) for t in (0.5, 1.5, -0.5)]
    starts += [b + V * 0.3 * np.array(v) for v in ((1, 0), (0, 1), (-1, 0), (0, -1))]
    cs, fs = [], []
    for s0 in starts:
        r = C._prox_reduced(kern, b, lab, np.full(n, V), [s0], 1e-12, 300)
        cs.append(r.c)
        fs.append(r.f)
    c, f = np.stack(cs, 1), np.stack(fs, 1)
    idx = np.arange(n)
    cb = c[idx, np.argmin(f, 1)]
    distinct = np.linalg.norm(c - cb[:, None, :], axis=2) > 1e-5 * (1 + np.linalg.norm(cb, axis=1))[:, None]
    own = np.linalg.norm(cb - c_star, axis=1) < 1e-5 * (1 + np.linalg.norm(c_star, axis=1))
    return int(np.any(distinct, axis=1).sum()), int((~own).sum()), V


@pytest.mark.slow
def test_erm_minimum_puts_sequences_on_non_global_prox_branches_only_where_rs_fails():
    """d = 50, seed 0, prox trainer: at alpha = 0.25, lam = 1e-4 (the failing point) 13 sequences have two prox
    branches and 5 sit on the non-global one (measured); at alpha = 0.5, lam = 0.01 none."""
    pytest.importorskip("torch")
    from tiedattention.simulation import rng_for, sample_dataset, train

    counts = {}
    for alpha, lam in ((0.5, 0.01), (0.25, 1e-4)):
        pb = Problem.from_options(**REF, lam=lam)
        S0 = pb.task.target.sample(50, rng_for(0, "target"))
        data = sample_dataset(pb, round(alpha * 2500), 50, 0, S0=S0)
        r = train(pb, data, solver="prox", seed=0, rtol=1e-12)
        counts[alpha] = cavity_branches(pb, np.asarray(data.X, float), np.asarray(data.y, float),
                                        np.asarray(r.S_hat, float))
    assert counts[0.5][:2] == (0, 0)
    assert counts[0.25][0] >= 5 and counts[0.25][1] >= 1


def test_at_of_a_stein_resolved_point_uses_the_stein_forms():
    """T >= 3 points where the prox jumps are re-solved with the Stein forms of m_hat, sigma_hat (quadrature
    "...+stein"); their AT value must use those forms too: the denoiser part D2/Sigma_hat^2 moves with Sigma_hat
    (T = 3, lambda = 1e-4, alpha_bar = 0.46, 4 x 2^10 points: AT 0.834 with the Stein forms, 0.811 with the
    Jacobian ones, which rs_stability used before it read the suffix)."""
    from types import SimpleNamespace

    problem = Problem.from_options(tokens=3, lam=1e-4)
    point = SimpleNamespace(alpha=0.092, q=3.3987, m=1.7615, sigma=90.073, quadrature="qmc4x2^10+stein")
    own = rs_stability(problem, point)
    rule = {"rule": "qmc", "replicas": 4, "qmc_log2": 10}
    x = (point.q, point.m, point.sigma)
    stein = rs_stability(problem, x, alpha=0.092, channel_options={**rule, "conjugates": "stein"})
    jacobian = rs_stability(problem, x, alpha=0.092, channel_options=rule)
    assert own.at == stein.at and own.denoiser == stein.denoiser
    # the same nodes: a paired difference (2.7 % in the denoiser part, 2.4 replica errors of AT itself)
    assert own.channel == jacobian.channel
    assert abs(own.denoiser / jacobian.denoiser - 1) > 0.02, (own.denoiser, jacobian.denoiser)


@pytest.mark.slow
def test_beta2_plateau_is_rs_unstable_above_alpha_0_7():
    """beta = beta0 = 2: the RS fixed point is AT-stable at alpha = 0.5 (0.902 +- 0.011, where the SE agrees with the
    ERM: 0.3880 vs 0.3866 +- 0.006 at d = 100) and AT-unstable on the upper end of the plateau (alpha = 0.8685:
    1.25 +- 0.13, where the ERM reads 0.292-0.315 at d = 40-160, rising with d, against the SE's 0.3735). The
    regular replicon alone exceeds 1 there, which it does nowhere for the default problem at beta = 1
    (docs/theory/state_evolution.md, "beta = beta0 = 2", session 14). alpha = 0.8 is used (1.062 +- 0.028):
    cheaper and better determined."""
    from tiedattention.theory.state_evolution import StateEvolution

    p = Problem.from_options(beta=2, beta0=2)
    se = StateEvolution(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        half = se.solve(0.5)
        high = se.solve(0.8, init=half)
    assert half.quadrature == high.quadrature == "qmc4x2^14" and half.converged and high.converged
    low_at, high_at = rs_stability(p, half), rs_stability(p, high)
    assert low_at.at + 3 * low_at.error < 1.0, (low_at.at, low_at.error)
    assert high_at.at - 2 * high_at.error > 1.0, (high_at.at, high_at.error)
    assert not high_at.stable and low_at.stable
