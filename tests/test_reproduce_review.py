"""Review of the reproduced figures (helper-45): every simulation point has theory to be compared with, and
the drawn figures keep their legends off the data. Fast: the figures are drawn from small tidy tables."""

from __future__ import annotations

import numpy as np
import pytest

from tiedattention.problem import alpha_from_bar
from tiedattention.reproduce import common, fig6


@pytest.mark.parametrize("quick", [True, False])
def test_fig6_every_simulated_alpha_bar_has_a_theory_point(quick):
    """fig6's theory for T >= 3 is a handful of quasi-Monte Carlo points joined by straight lines: a simulation
    at an alpha_bar between two of them has nothing to be compared with (quick mode drew T = 5 at 0.8 and 5 only,
    so its simulations at 0.3 and 1.5 sat off a chord, or off the curve's end)."""
    p = fig6._p(quick)
    cells = fig6.build(quick, None)
    for T in fig6.TOKENS:
        theory = sorted(a for c in cells if c.route == common.THEORY_CURVE and c.params["tokens"] == T
                        for a in c.params["alphas"])
        sims = sorted(c.params["alpha"] for c in cells if c.route == "simulate" and c.params["tokens"] == T)
        assert sims, T
        assert theory[0] <= min(sims) * (1 + 1e-9) and max(sims) <= theory[-1] * (1 + 1e-9), T
        if len(theory) < 8:  # sparse: the theory must sit at the simulated alphas themselves
            for a in sims:
                assert np.isclose(theory, a, rtol=1e-9).any(), (T, a, theory)
        # and the simulated alphas are the alpha_bar grid of the figure
        np.testing.assert_allclose(sims, sorted(alpha_from_bar(ab, T) for ab in p["sim_abars"]), rtol=1e-9)
