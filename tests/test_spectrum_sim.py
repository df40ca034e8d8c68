"""Theory against finite-size training (slow: run with ``pytest -m slow tests/test_spectrum_sim.py``).

Same checks as benchmarks/spectra_device.py (numbers in docs/theory/spectra.md section 5), at CPU sizes.
"""

import numpy as np
import pytest

from tiedattention.problem import Problem
from tiedattention.theory.spectrum import kolmogorov_distance, learned_spectrum
from tiedattention.theory.state_evolution import StateEvolution

pytestmark = pytest.mark.slow
sim = pytest.importorskip("tiedattention.simulation")


@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_learned_spectrum_against_training_mp(alpha):
    """MP kappa0 = 0.5, Delta = 0.5, lambda = 0.01, T = 2, d = 200, 4 seeds (proximal gradient = the ERM):
    rank fraction within 0.02, largest singular value within 3 %, Kolmogorov distance < 0.05."""
    p = Problem.from_options(target="mp:0.5")
    sp = learned_spectrum(p, alpha)
    rec = sim.simulate_record(p, alpha, 200, seeds=4, solver="prox", return_spectra=True)
    ev = np.asarray(rec["eigenvalues"])
    sv = np.asarray(rec["singular_values"])
    tol = 1e-6 * np.abs(ev).max()
    assert np.mean(ev > tol) == pytest.approx(sp.rank, abs=0.02)
    assert np.mean(sv.max(axis=1)) == pytest.approx(np.sqrt(sp.top), rel=0.03)
    assert kolmogorov_distance(np.where(np.abs(ev) <= tol, 0.0, ev).ravel(), sp.cdf) < 0.05


@pytest.mark.parametrize(
    "model,kappa,alpha",
    [("factorized", 0.25, 0.1), ("factorized", 0.25, 0.5), ("factorized", 0.25, 4.0),
     ("direct", 1.0, 0.1), ("direct", 1.0, 0.5), ("direct", 1.0, 2.0)],
)
def test_narrow_and_direct_test_error_against_training(model, kappa, alpha):
    """kappa = 0.25 < kappa0 = 0.5 (the rank constraint binds) and the direct (ridge) model: SE test error
    within two standard errors of d = 100 training (8 seeds)."""
    p = Problem.from_options(target="mp:0.5", kappa=kappa, model=model)
    res = StateEvolution(p).solve(alpha)
    assert res.converged
    rec = sim.simulate_record(p, alpha, 100, seeds=8, solver="prox")
    sem = rec["test_error_sem"]
    assert abs(rec["test_error_mean"] - res.test_error) <= 2 * sem + 1e-3


@pytest.mark.parametrize("spec", ["spikes:4,2.5,1.5", "spikes:10,8,6.5+mp:0.2"])
@pytest.mark.parametrize("alpha", [0.02, 0.1])
def test_outliers_and_overlaps_against_training(spec, alpha):
    """Learned outlier eigenvalues and eigenvector overlaps with the target within 0.05 (d = 400, 3 seeds)."""
    d = 400
    p = Problem.from_options(target=spec)
    sp = learned_spectrum(p, alpha, d=d)
    top, ov = [], []
    for s in range(3):
        data = sim.sample_dataset(p, int(round(alpha * d * d)), d, s)
        tr = sim.train(p, data, solver="prox", seed=s)
        e, v = np.linalg.eigh(tr.S_hat)
        _, v0 = np.linalg.eigh(data.S0)
        top.append(e[::-1][:3])
        ov.append([(v[:, -1 - i] @ v0[:, -1 - i]) ** 2 for i in range(3)])
    rec = [o for o in sp.outliers if o.recovered]
    assert len(rec) == 3
    np.testing.assert_allclose(np.mean(top, axis=0), [o.eigenvalue for o in rec], atol=0.05)
    np.testing.assert_allclose(np.mean(ov, axis=0), [o.overlap for o in rec], atol=0.05)
