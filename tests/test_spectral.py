"""Free convolution with the semicircle: closed-form moments, masses, exact derivatives, edges."""

import numpy as np
import pytest

from tiedattention.targets import SpectralMeasure, parse_target
from tiedattention.theory.spectral import FreeConvolution


def free_moments(measure, t):
    """Moments 0..4 of mu boxplus semicircle(t): only the second free cumulant changes (by t)."""
    m1, m2, m3, m4 = (measure.moment(k) for k in range(1, 5))
    k1, k2 = m1, m2 - m1**2
    return np.array([1, m1, m2 + t, m3 + 3 * k1 * t, m4 + 4 * k2 * t + 2 * t * t + 6 * k1 * k1 * t])


@pytest.mark.parametrize("kappa0", [0.2, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("delta", [0.05, 0.3, 1.0, 3.0])
def test_mp_moments_match_free_cumulants(kappa0, delta):
    mu = parse_target(f"mp:{kappa0}").measure()
    got = FreeConvolution(mu, delta).moments(4)
    np.testing.assert_allclose(got, free_moments(mu, delta**2), rtol=1e-11, atol=1e-11)


def test_mp_target_moments_and_limits():
    for k0 in (0.3, 0.5, 2.0):
        mu = parse_target(f"mp:{k0}").measure()
        assert mu.moment(1) == pytest.approx(np.sqrt(k0), rel=1e-14)
        assert mu.q0 == pytest.approx(1 + k0, rel=1e-14)


def test_mp_stieltjes_mass_by_quadrature():
    """-Im g(x + i0)/pi integrates to the continuous mass kappa0 (kappa0 < 1: the rest is the atom)."""
    from scipy import integrate

    mu = parse_target("mp:0.5").measure()
    lo, hi = mu.support_intervals()[0]
    dens = lambda x: -mu.stieltjes(np.array([x + 1e-300j]))[0][0].imag / np.pi  # noqa: E731
    mass, _ = integrate.quad(dens, lo, hi, limit=200, epsabs=1e-12)
    assert mass == pytest.approx(0.5, abs=1e-8)


def test_two_bulks_at_small_delta_one_at_large():
    mu = parse_target("mp:0.2").measure()
    assert len(FreeConvolution(mu, 0.05).support()) == 2
    assert len(FreeConvolution(mu, 1.0).support()) == 1
    # the atom at 0 (mass 1 - kappa0) spreads into its own bulk of that mass
    fc = FreeConvolution(mu, 0.05)
    lo, hi = fc.intervals_u[0]
    mass0 = fc._rule(lo, hi, True, 128)["w"].sum()
    assert mass0 == pytest.approx(0.8, abs=1e-10)


@pytest.mark.parametrize("delta,eps", [(0.3, 0.1), (0.05, 0.2), (1.0, 0.0), (0.2, -0.1), (2.0, 3.0)])
def test_exact_derivatives_against_finite_differences(delta, eps):
    mu = parse_target("mp:0.5").measure()
    si = FreeConvolution(mu, delta).integrals(eps)
    h = 1e-5
    fd_delta = (FreeConvolution(mu, delta + h).integrals(eps).I - FreeConvolution(mu, delta - h).integrals(eps).I) / (
        2 * h
    )
    fd_eps = (FreeConvolution(mu, delta).integrals(eps + h).I - FreeConvolution(mu, delta).integrals(eps - h).I) / (
        2 * h
    )
    assert si.dI_ddelta == pytest.approx(fd_delta, rel=1e-8, abs=1e-9)
    assert si.dI_deps == pytest.approx(fd_eps, rel=1e-8, abs=1e-9)


def test_semicircle_closed_form():
    """mu = delta_0: rho is the semicircle of radius 2 delta; I(delta, 0) = delta^2/2, rank = 1/2."""
    mu = SpectralMeasure(atoms=np.array([0.0]), weights=np.array([1.0]))
    for delta in (0.1, 1.0, 7.0):
        fc = FreeConvolution(mu, delta)
        (lo, hi), = fc.support()
        assert lo == pytest.approx(-2 * delta, rel=1e-12) and hi == pytest.approx(2 * delta, rel=1e-12)
        si = fc.integrals(0.0)
        assert si.I == pytest.approx(delta**2 / 2, rel=1e-12)
        assert si.dI_ddelta == pytest.approx(delta, rel=1e-12)
        assert si.rank == pytest.approx(0.5, rel=1e-12)
        # eps = delta: int_{1}^{2} (x-1)^2 sc(x) dx for the standard semicircle, times delta^2
        from scipy import integrate

        ref, _ = integrate.quad(lambda x: (x - 1) ** 2 * np.sqrt(4 - x * x) / (2 * np.pi), 1, 2, epsabs=1e-14)
        assert fc.integrals(delta).I == pytest.approx(ref * delta**2, rel=1e-10)


def test_full_rank_small_delta_is_linear():
    """S0 well inside (0, inf), small delta, eps = 0: (S0 + delta Z)_+ = S0 + delta Z, so I = Q0 + delta^2."""
    mu = parse_target("mp:4").measure()  # support [1, 9] away from 0
    si = FreeConvolution(mu, 0.1).integrals(0.0)
    assert si.I == pytest.approx(mu.q0 + 0.01, rel=1e-12)
    assert si.dI_ddelta == pytest.approx(0.2, rel=1e-10)
    assert si.rank == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("delta", [3.8898333347018994e-05, 1e-5, 1e-4])
def test_discrete_measure_at_tiny_delta_has_finite_exact_integrals(delta):
    """A d = 100 power law at delta far below its eigenvalue gaps: 100 separate bumps whose edges are known only to
    rounding (u ~ 8.6 at the top). The adaptive rule halved the edge panels until their nodes met the edges (dpsi =
    -inf, totals -inf at delta = 3.9e-5: the near-perfect-recovery SE, noiseless, lambda = 1e-4, alpha = 2). With eps
    below the support the integrals are polynomials in (delta, eps): I = m2 + delta^2 - 2 eps m1 + eps^2,
    dI/deps = -2 (m1 - eps), dI/ddelta = 2 delta, rank 1."""
    theta = parse_target("powerlaw:1.25").eigenvalues(100)
    mu = SpectralMeasure(atoms=theta, weights=np.full(100, 0.01))
    eps = 7.953437640010149e-05
    assert eps < theta.min() - 0.02
    si = FreeConvolution(mu, delta).integrals(eps)
    m1, m2 = mu.moment(1), mu.moment(2)
    assert np.isfinite(si.error) and si.error < 1e-9
    assert si.I == pytest.approx(m2 + delta**2 - 2 * eps * m1 + eps**2, rel=0, abs=3e-11)
    assert si.dI_deps == pytest.approx(-2 * (m1 - eps), rel=0, abs=3e-11)
    assert si.dI_ddelta == pytest.approx(2 * delta, rel=1e-9)
    assert si.rank == pytest.approx(1.0, rel=0, abs=1e-11)


def test_discrete_measure_against_diagonalisation():
    """A list of 400 eigenvalues: moments against the closed form, support against S0 + delta GOE."""
    rng = np.random.default_rng(1)
    d = 400
    theta = parse_target("powerlaw:1.25").eigenvalues(d)
    mu = SpectralMeasure(atoms=theta, weights=np.full(d, 1.0 / d))
    delta = 0.3
    fc = FreeConvolution(mu, delta)
    np.testing.assert_allclose(fc.moments(4), free_moments(mu, delta**2), rtol=1e-9, atol=1e-10)
    # empirical check: top eigenvalues of S0 + delta GOE at d = 2000 follow the predicted top edge/outliers
    big = 2000
    th = parse_target("powerlaw:1.25").eigenvalues(big)
    g = rng.standard_normal((big, big))
    z = (g + g.T) / np.sqrt(2 * big)
    ev = np.linalg.eigvalsh(np.diag(th) + delta * z)
    fc_big = FreeConvolution(SpectralMeasure(atoms=th, weights=np.full(big, 1.0 / big)), delta)
    top_pred = fc_big.support()[-1][1]
    assert ev[-1] == pytest.approx(top_pred, abs=0.05)


def test_determinism():
    mu = parse_target("mp:0.5").measure()
    a = FreeConvolution(mu, 0.37).integrals(0.11)
    b = FreeConvolution(mu, 0.37).integrals(0.11)
    assert a == b


def _count_root_evaluations(monkeypatch):
    """Patch the edge root finder to count its function evaluations (one per vectorised call)."""
    from tiedattention.theory import spectral

    count = [0]
    inner = spectral._vec_root_indexed

    def counting(fun, a, b, maxiter=200, x0=None):
        def f(x, idx):
            count[0] += 1
            return fun(x, idx)

        return inner(f, a, b, maxiter, x0=x0)

    monkeypatch.setattr(spectral, "_vec_root_indexed", counting)
    return count


def test_edge_newton_stops_once_converged(monkeypatch):
    """Newton on the edge brackets stops when its step is below rounding. Before, a converged iterate that
    became the bracket's own end judged the next (sub-ulp) step "outside" and bisected ~30 more times towards
    itself: over 40 evaluations for the two edges of MP(0.5) at this delta (an SE point), now 17."""
    mu = parse_target("mp:0.5").measure()
    count = _count_root_evaluations(monkeypatch)
    fc = FreeConvolution(mu, 0.5736871149628876)
    assert count[0] <= 20
    (lo, hi), = fc.intervals_u
    for u in (lo, hi):  # the edges: F(u) = int dmu/(u - x)^2 = 1/delta^2
        f = fc.kernel.real_axis(np.array([u]))[1][0]
        assert f * fc.t == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("target", ["mp:0.5", "powerlaw:1.25"])
def test_support_hint_gives_the_same_edges_in_fewer_steps(monkeypatch, target):
    """``support_hint`` (warm edges within an SE solve): the same intervals to rounding as a cold construction,
    from fewer Newton evaluations; a hint left by another measure is not used."""
    spec = parse_target(target)
    mu = spec.measure(200) if target.startswith("powerlaw") else spec.measure()
    count = _count_root_evaluations(monkeypatch)
    hint: dict = {}
    FreeConvolution(mu, 0.3, support_hint=hint)
    count[0] = 0
    cold = FreeConvolution(mu, 0.3003)
    n_cold = count[0]
    count[0] = 0
    warm = FreeConvolution(mu, 0.3003, support_hint=hint)
    n_warm = count[0]
    assert len(warm.intervals_u) == len(cold.intervals_u) >= 1
    np.testing.assert_allclose(np.ravel(warm.intervals_u), np.ravel(cold.intervals_u), rtol=1e-14, atol=1e-15)
    assert n_warm < 0.75 * n_cold  # (MP: 5 against 20; power law d = 200, 22 edges at once: 7 against 11)
    other = parse_target("mp:0.7").measure()
    count[0] = 0
    FreeConvolution(other, 0.3003, support_hint=hint)  # hint of mu: ignored (and replaced)
    n_other = count[0]
    count[0] = 0
    FreeConvolution(other, 0.3003)
    assert n_other == count[0]


@pytest.mark.parametrize("target", ["mp:0.5", "mp:0.2", "powerlaw:1.25", "spikes:4,3,2.5"])
def test_support_hint_along_a_sequence_of_deltas(target):
    """One hint carried through deltas that move both ways and across gap openings/closings (which gaps are open
    is reused from the previous construction only where F's monotonicity in delta decides it): every support
    equals the cold one."""
    spec = parse_target(target)
    mu = spec.measure(200) if not target.startswith("mp") else spec.measure()
    hint: dict = {}
    counts = set()
    for delta in (0.3, 0.25, 0.35, 0.5, 0.2, 0.05, 0.8, 0.1, 0.1001):
        warm = FreeConvolution(mu, delta, support_hint=hint)
        cold = FreeConvolution(mu, delta)
        assert len(warm.intervals_u) == len(cold.intervals_u)
        np.testing.assert_allclose(np.ravel(warm.intervals_u), np.ravel(cold.intervals_u), rtol=1e-13, atol=1e-15)
        counts.add(len(cold.intervals_u))
    if not target.startswith("spikes"):  # (the sequence crosses gap openings: 1-2 bulks for MP, 6-24 power law)
        assert len(counts) > 1
