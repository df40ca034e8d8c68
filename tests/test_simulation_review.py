"""Regression tests from the session-11 review of `tiedattention simulate` and `tiedattention.simulation`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiedattention import Problem
from tiedattention.simulation import sample_dataset, train


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("model", ["direct", "factorized"])
def test_lbfgs_sees_the_objective_in_float64(model):
    """L-BFGS handed torch's LBFGS a float32 copy of the objective (torch.tensor(F) of a Python float), so it could
    not see changes below ~1e-7 relative and stopped there with converged=True. In float64 it reaches the prox
    minimiser (a smooth, well-conditioned problem at lam = 0.01) to far better than that."""
    pb = Problem.from_options(lam=0.01, model=model)
    data = sample_dataset(pb, n=200, d=20, rng_or_seed=1)
    ref = train(pb, data, solver="prox", seed=1, rtol=1e-15)
    res = train(pb, data, solver="lbfgs", seed=1)
    assert res.converged
    gap = (res.objective - ref.objective) / ref.objective
    assert -1e-12 < gap < 1e-8, gap  # float32: 1.0e-7 (direct), 1.1e-7 (factorised)
    assert np.linalg.norm(res.S_hat - ref.S_hat) / np.linalg.norm(ref.S_hat) < 1e-4
