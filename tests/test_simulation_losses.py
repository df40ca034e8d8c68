"""Gradient checks of every loss (float64 gradcheck on small sizes) and identities between the models."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tiedattention import Problem  # noqa: E402
from tiedattention.simulation.models import (  # noqa: E402
    Objective,
    TorchData,
    logits_S,
    logits_W,
    sym,
)
from tiedattention.simulation.sampler import logits as np_logits  # noqa: E402
from tiedattention.simulation.sampler import sample_dataset  # noqa: E402

D, N, T = 5, 6, 3


def _objective(task: str, model: str = "factorized", kappa: float = 0.6, noise_out: float = 0.2) -> Objective:
    pb = Problem.from_options(task=task, model=model, kappa=kappa, tokens=T, lam=0.07, beta=1.3, noise_out=noise_out)
    data = sample_dataset(pb, N, D, 0)
    return Objective(pb, TorchData.from_dataset(data, chunk=4))  # two chunks


def _rand(*shape, seed=0):
    return torch.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("task", ["seq2lab", "seq2seq"])
def test_gradcheck_factorized(task):
    obj = _objective(task)
    p = obj.problem.student.width(D)
    W = _rand(p, D)

    def F(w):
        data = sum(obj._batch_loss(logits_W(X, w), y, g, c, s) for X, y, g, c, s in obj.data.chunks())
        return data / D**2 + obj.penalty_W(w)

    assert torch.autograd.gradcheck(F, (W,), eps=1e-6, atol=1e-8)
    # the chunked value_grad_W gives the same value and gradient as autograd on the whole
    w2 = W.detach().clone().requires_grad_(True)
    val = obj.value_grad_W(w2)
    (g,) = torch.autograd.grad(F(W), W)
    assert val == pytest.approx(float(F(W).detach()), rel=1e-13)
    torch.testing.assert_close(w2.grad, g, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("task", ["seq2lab", "seq2seq"])
def test_gradcheck_direct(task):
    obj = _objective(task, model="direct")
    A = _rand(D, D, seed=1)

    def F(a):
        S = sym(a)
        return sum(obj._batch_loss(logits_S(X, S), y, g, c, s) for X, y, g, c, s in obj.data.chunks()) / D**2 + (
            obj.penalty_ridge(S)
        )

    assert torch.autograd.gradcheck(F, (A,), eps=1e-6, atol=1e-8)
    a2 = A.detach().clone().requires_grad_(True)
    assert obj.value_grad_A(a2) == pytest.approx(float(F(A).detach()), rel=1e-13)


@pytest.mark.parametrize("task", ["seq2lab", "seq2seq"])
def test_prox_smooth_part_gradient(task):
    """grad_S_of(dF/dH) is the gradient of f(S) = data/d^2 on symmetric matrices: gradcheck through the
    logits route, and central differences along random symmetric directions."""
    obj = _objective(task)
    S = sym(_rand(D, D, seed=2)).detach()

    def f_of_A(a):
        H = torch.cat([logits_S(X, sym(a)) for X, *_ in obj.data.chunks()])
        td = obj.data
        return obj._batch_loss(H, td.y, td.gram, td.cross, td.sq) / D**2

    assert torch.autograd.gradcheck(f_of_A, (S.clone().requires_grad_(True),), eps=1e-6, atol=1e-8)
    f0, G = obj.loss_of_logits(obj.logits_all(S))
    grad = obj.grad_S_of(G)
    torch.testing.assert_close(grad, grad.T)
    assert f0 == pytest.approx(obj.smooth_S(S, grad=False)[0], rel=1e-13)
    torch.testing.assert_close(grad, obj.smooth_S(S)[1], rtol=1e-11, atol=1e-14)
    rng = np.random.default_rng(3)
    for _ in range(3):
        E = torch.tensor(rng.standard_normal((D, D)))
        E = sym(E)
        eps = 1e-5
        fd = (obj.smooth_S(S + eps * E, grad=False)[0] - obj.smooth_S(S - eps * E, grad=False)[0]) / (2 * eps)
        assert fd == pytest.approx(float((grad * E).sum()), rel=1e-6, abs=1e-12)


def test_factorized_logits_and_penalty_identities():
    """h(S_W) from X W^T equals h(W^T W/sqrt(pd)); lam sqrt(d/p)||W||^2 = lam d Tr S_W; torch = numpy."""
    obj = _objective("seq2lab", kappa=0.6)
    p = obj.problem.student.width(D)
    W = _rand(p, D, seed=4).detach()
    S = W.T @ W / math.sqrt(p * D)
    X = obj.data.X
    torch.testing.assert_close(logits_W(X, W), logits_S(X, S), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(logits_S(X, S).numpy(), np_logits(X.numpy(), S.numpy()), rtol=1e-12, atol=1e-13)
    assert float(obj.penalty_W(W)) == pytest.approx(float(obj.penalty_trace(S)), rel=1e-13)
    # h has zero diagonal mean by construction: the trace is removed
    assert float(torch.diagonal(logits_S(X, S), dim1=1, dim2=2).mean()) == pytest.approx(
        float(((X @ S) * X).sum(-1).mean() - torch.trace(S)) / math.sqrt(D), abs=1e-12
    )
