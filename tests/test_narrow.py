"""Narrow students (kappa < 1): the rank-constrained denoiser f(y) = (y - eps) 1[y > c] against diagonalisation.

The SE needs three spectral averages of f(Y), Y = S0 + delta Z (Z GOE): (1/d) Tr f(Y)^2, (1/d) Tr f(Y) S0 and
(1/d) Tr f(Y) Z. The theory gives int f^2 rho, int f y rho - 2 delta^2 int f rho Re g and 2 delta int f rho Re g
(GOE Stein identity; the jump of f at the cut only adds O(1/d)). Checked at d = 1500 on MP targets.
"""

import numpy as np
import pytest

from tiedattention.problem import Problem
from tiedattention.targets import parse_target
from tiedattention.theory.denoisers import (
    matrix_update,
    narrow_interpolation_alpha_bar,
    solve_narrow_interpolating_phase,
)
from tiedattention.theory.spectral import FreeConvolution
from tiedattention.theory.state_evolution import StateEvolution, solve_interpolating_phase
from tiedattention.theory.thresholds import interpolation_threshold


def _goe(d, rng):
    g = rng.standard_normal((d, d))
    return (g + g.T) / np.sqrt(2 * d)


@pytest.mark.parametrize("kappa0,kappa,delta,eps", [(0.5, 0.25, 0.4, 0.05), (0.5, 0.3, 1.0, 0.2), (2.0, 0.5, 0.3, 0.0)])
def test_rank_constrained_denoiser_against_diagonalisation(kappa0, kappa, delta, eps):
    target = parse_target(f"mp:{kappa0}")
    fc = FreeConvolution(target.measure(), delta)
    c = fc.quantile(kappa)
    assert c > eps  # the rank constraint binds in these cases
    si = fc.integrals(eps, cut=c)
    assert si.rank == pytest.approx(kappa, abs=1e-10)
    j2, j1, jg = si.I, -0.5 * si.dI_deps, si.dI_ddelta / (4 * delta)
    pred = np.array([j2, j2 + eps * j1 - 2 * delta**2 * jg, 2 * delta * jg])
    d = 1500
    got = []
    for seed in range(2):
        rng = np.random.default_rng(seed)
        s0 = target.sample(d, rng)
        z = _goe(d, rng)
        ev, vec = np.linalg.eigh(s0 + delta * z)
        k = int(round(kappa * d))
        f = np.where(ev > eps, ev - eps, 0.0)
        f[: d - k] = 0.0  # keep the top kappa d
        fy = (vec * f) @ vec.T
        got.append([np.sum(f * f) / d, np.sum(fy * s0) / d, np.sum(fy * z) / d])
    got = np.mean(got, axis=0)
    np.testing.assert_allclose(got, pred, rtol=0.01, atol=2e-3)


def test_narrow_reduces_to_wide_when_the_cut_does_not_bind():
    """kappa above the rank of the soft threshold: identical to the kappa >= 1 denoiser."""
    wide = Problem.from_options(target="mp:0.5", kappa=1.0, lam=0.5)
    narrow = Problem.from_options(target="mp:0.5", kappa=0.9, lam=0.5)
    mu = wide.task.target.measure()
    a = matrix_update(wide, mu, 2.0, 3.0, 4.0)
    b = matrix_update(narrow, mu, 2.0, 3.0, 4.0)
    assert a.rank < 0.9
    assert (a.q, a.m, a.sigma) == (b.q, b.m, b.sigma)


def test_narrow_denoiser_rank_and_monotonicity():
    """Binding cut: rank = kappa exactly; q and (1/d)Tr S decrease with kappa's cut."""
    mu = parse_target("mp:0.5").measure()
    out = [matrix_update(Problem.from_options(kappa=k, lam=0.01), mu, 1.0, 2.0, 3.0) for k in (0.2, 0.35, 0.5)]
    for k, ms in zip((0.2, 0.35, 0.5), out, strict=True):
        assert ms.rank == pytest.approx(k, abs=1e-10)
    assert out[0].q < out[1].q < out[2].q
    assert out[0].trace < out[1].trace < out[2].trace


def test_narrow_interpolating_phase_binds():
    """lambda -> 0+ interpolating phase of a narrow student, kappa = 0.25 < rank of the wide phase (0.261 at
    alpha_bar = 0.1): the rank is exactly kappa, eps > 0, and the two equations JG = alpha_bar,
    Q' - J2 - 2 eps J1 + 2 alpha_bar delta^2 = 0 hold at the returned point (recomputed from a fresh
    FreeConvolution; the solver uses JG's linearity in eps below the cut)."""
    mu = parse_target("mp:0.5").measure()
    qz = mu.q0 + 0.25
    sol = solve_narrow_interpolating_phase(mu, qz, 0.1, 0.25)
    assert sol["converged"] and sol["rank"] == pytest.approx(0.25, abs=1e-10) and sol["eps"] > 0
    fc = FreeConvolution(mu, sol["delta"])
    si = fc.integrals(sol["eps"], cut=fc.quantile(0.25))
    j2, j1, jg = si.I, -0.5 * si.dI_deps, si.dI_ddelta / (4 * sol["delta"])
    assert jg == pytest.approx(0.1, rel=1e-9)
    assert qz - j2 - 2 * sol["eps"] * j1 + 2 * 0.1 * sol["delta"] ** 2 == pytest.approx(0.0, abs=1e-9)
    assert sol["I"] > 0.8872  # the wide phase's I: the cut keeps fewer, larger eigenvalues at the same alpha_bar


@pytest.mark.slow
def test_narrow_lambda_to_zero_limit_and_threshold():
    """The regular SE at lambda = 1e-4, 1e-5 approaches the lambda -> 0+ phase (kappa = 0.25, alpha = 0.08;
    measured test errors 0.3920, 0.4003 -> 0.4049, gap shrinking ~2.8x per decade); the narrow interpolation
    threshold is the wide one when the cut cannot bind and lies below it for kappa = 0.25, where eps -> 0."""
    mu = parse_target("mp:0.5").measure()
    qz = mu.q0 + 0.25
    wide_phase = solve_interpolating_phase(mu, qz, 0.1)
    assert wide_phase["rank"] < 0.3  # kappa = 0.3 cannot bind: the narrow solver must give the same point
    near = solve_narrow_interpolating_phase(mu, qz, 0.1, 0.3)
    for key in ("delta", "eps", "I", "m_over_r", "rank", "trace"):
        assert near[key] == pytest.approx(wide_phase[key], rel=1e-9)
    base = dict(target="mp:0.5", kappa=0.25)
    phase = StateEvolution(Problem.from_options(**base, lam=0.0)).solve(0.08)
    assert phase.phase == "interpolating" and phase.converged and phase.train_error == 0.0
    gaps = []
    for lam in (1e-4, 1e-5):
        r = StateEvolution(Problem.from_options(**base, lam=lam)).solve(0.08)
        assert r.converged and r.phase == "regular"
        gaps.append(abs(r.test_error - phase.test_error))
        assert r.delta < phase.delta and r.eps > phase.eps  # approached from one side
    assert gaps[1] < gaps[0] / 2 and gaps[1] < 0.01
    wide = interpolation_threshold(mu, 0.5)
    assert narrow_interpolation_alpha_bar(mu, 0.5, 0.999) == pytest.approx(wide, rel=1e-9)
    th = narrow_interpolation_alpha_bar(mu, 0.5, 0.25)
    assert 0 < th < wide
    # eps -> 0 continuously, like sqrt(1 - alpha_bar/threshold) (measured 0.1863, 0.0593, 0.0188: x3.14 per decade)
    eps = [solve_narrow_interpolating_phase(mu, mu.q0 + 0.25, th * f, 0.25)["eps"] for f in (0.99, 0.999, 0.9999)]
    assert eps[2] > 0 and eps[2] < 0.02
    for hi, lo in zip(eps[:-1], eps[1:], strict=True):
        assert hi / lo == pytest.approx(np.sqrt(10), rel=0.05)


def test_narrow_phase_flags_the_parameter_count():
    """Between the parameter count kappa - kappa^2/2 = 0.21875 and the phase's own threshold 0.24854 (kappa = 0.25)
    the lambda -> 0+ phase still solves its equations, but training does not interpolate there (spectra.md
    section 2: prox/L-BFGS at d = 40, 60, lambda = 1e-5): the result must say so; below the count it is clean."""
    mu = parse_target("mp:0.5").measure()
    qz = mu.q0 + 0.25
    below = solve_narrow_interpolating_phase(mu, qz, 0.21, 0.25)
    above = solve_narrow_interpolating_phase(mu, qz, 0.24, 0.25)
    assert below["converged"] and below["message"] == ""
    assert above["converged"] and "contradicted" in above["message"] and "0.2188" in above["message"]
    assert above["eps"] < below["eps"]  # eps -> 0 at the phase's end: the count is crossed first
