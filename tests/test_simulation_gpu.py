"""CUDA runs reach the CPU minimiser (skipped without a CUDA device)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tiedattention import Problem  # noqa: E402
from tiedattention.simulation import sample_dataset, simulate_record, train  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("solver", ["prox", "lbfgs", "adam"])
def test_cuda_matches_cpu_objective_d40(solver):
    pb = Problem.from_options()
    data = sample_dataset(pb, 800, 40, 0)
    cpu = train(pb, data, solver=solver, device="cpu")
    gpu = train(pb, data, solver=solver, device="cuda")
    tol = 1e-6 if solver == "prox" else 1e-5
    assert abs(gpu.objective - cpu.objective) / cpu.objective < tol
    assert gpu.converged and cpu.converged


def test_cuda_record_seq2seq():
    rec = simulate_record(Problem.from_options(task="seq2seq"), 0.5, 30, seeds=1, solver="prox", device="cuda")
    assert rec["device"] == "cuda" and rec["converged"] == 1.0
    assert 0 < rec["test_error_mean"] < 0.6
