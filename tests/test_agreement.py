"""Theory against simulation (slow): the SE learning curve against ERM at d = 100, 8 seeds.

Issue 2's agreement check: MP kappa0 = 0.5, Delta = 0.5, T = 2, lambda = 0.01 at alpha in
{0.05, 0.1, 0.25, 0.5} and lambda = 1e-4 (the curve with the interpolation peak). The simulation uses the
L-BFGS trainer (the same minimiser as the study's Adam protocol, reached faster); the SE value must lie
within two standard errors (seed-to-seed and test-set noise combined) of the simulated mean.
"""

import pytest

from tiedattention import Problem
from tiedattention.theory import StateEvolution

simulation = pytest.importorskip("tiedattention.simulation")

ALPHAS = (0.05, 0.1, 0.25, 0.5)


@pytest.mark.slow
@pytest.mark.parametrize("lam", [0.01, 1e-4])
def test_se_test_error_matches_simulation_at_d100(lam):
    problem = Problem.from_options(lam=lam)
    theory = StateEvolution(problem).learning_curve(ALPHAS)
    report = []
    for th in theory:
        sim = simulation.simulate_record(problem, th.alpha, d=100, seeds=8, solver="lbfgs")
        gap = th.test_error - sim["test_error_mean"]
        report.append((th.alpha, th.test_error, sim["test_error_mean"], sim["test_error_sem"], gap))
    bad = [r for r in report if abs(r[4]) > 2 * r[3]]
    assert not bad, "alpha, SE, sim mean, sim sem, gap: " + repr(report)
