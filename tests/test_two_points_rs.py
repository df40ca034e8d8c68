"""Two fixed points and RS stability (docs/theory/state_evolution.md, "Two fixed points and RS stability").

The default problem with output noise Delta_out = 0.1 at lambda = 1e-3, alpha = 1 (T = 2): the cold solve converges
on a small-norm point (q = 2.06, objective 0.41097, test error 0.5627, AT = 0.40), and a start at 100x finds a
large-norm fixed point of lower RS objective (q = 320, 0.40607, test error 0.985) that is RS-unstable (AT = 1.91).
At d = 40 the ERM has one minimiser, the small one: prox from S = 0 and from 10x its end point meet there. So the
lower RS objective of an unstable point does not make it the ERM's, which is why the note of two fixed points gives
their AT values and `solve` does not probe converged points outside the large-noise path.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiedattention.problem import Problem
from tiedattention.theory.state_evolution import StateEvolution

OUTPUT_NOISE = Problem.from_options(noise_out=0.1, lam=1e-3)


@pytest.mark.slow  # ~1 min: two SE solves, two AT values, two prox solves at d = 40
def test_the_lower_rs_objective_is_an_unstable_point_the_erm_does_not_have():
    import torch

    from tiedattention.simulation.sampler import rng_for, sample_dataset
    from tiedattention.simulation.trainers import train

    se = StateEvolution(OUTPUT_NOISE)
    small = se.solve(1.0)
    assert small.converged and small.q == pytest.approx(2.057, rel=0.01) and "two fixed points" not in small.message
    q, m, sigma = small.x
    large = se.solve(1.0, init=np.array([100 * q, 10 * m, 100 * sigma]))
    assert large.converged and large.q > 100 and large.objective < small.objective - 3e-3
    assert se._rs_at(1.0, small) < 0.6 and se._rs_at(1.0, large) > 1.5

    torch.set_num_threads(1)
    d, seed = 40, 0
    S0 = OUTPUT_NOISE.task.target.sample(d, rng_for(seed, "target"))
    data = sample_dataset(OUTPUT_NOISE, d * d, d, seed, S0=S0)
    first = train(OUTPUT_NOISE, data, solver="prox", seed=seed)
    again = train(OUTPUT_NOISE, data, solver="prox", seed=seed, init=10.0 * first.S_hat)
    q_first, q_again = ((r.S_hat ** 2).sum() / d for r in (first, again))
    assert first.converged and again.converged
    assert again.objective == pytest.approx(first.objective, rel=1e-6)  # the same minimiser (0.4194)
    assert q_first < 3 and math.isclose(q_again, q_first, rel_tol=1e-3)
