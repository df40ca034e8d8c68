"""Shared fixtures."""

import math

import numpy as np
import pytest


@pytest.fixture
def torch_one_thread():
    """Run a test with one torch CPU thread (small problems on a shared 2-core machine run faster)."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def sym_basis():
    """basis(d): the orthonormal basis of Sym(d) for the Frobenius inner product, E_ii and (E_ij + E_ji)/sqrt 2
    (i < j), d(d+1)/2 matrices: the coordinates in which explicit Jacobians of matrix maps are taken."""

    def basis(d: int) -> list[np.ndarray]:
        out = []
        for i in range(d):
            for j in range(i, d):
                E = np.zeros((d, d))
                if i == j:
                    E[i, i] = 1.0
                else:
                    E[i, j] = E[j, i] = 1 / math.sqrt(2)
                out.append(E)
        return out

    return basis


@pytest.fixture
def design_checks():
    """Checks shared by the control designs (gaussian_design, rank_one_design), whose objectives have the
    interface of simulation.gaussian_design.DesignObjective.

    gradient(obj, A, c, y, beta, S): obj.grad_S_of at S against autograd through the explicit sensing matrices A
    (n K, d, d), logit k of sequence mu = c_k <A, S>/sqrt(d); also obj.data_only against that route's loss.
    kkt(obj, S, lam): S is the minimiser of F + (lam/d) Tr S over PSD matrices (S psd, the subgradient Z psd,
    S Z = 0, to 1e-5 of ||Z||)."""
    torch = pytest.importorskip("torch")

    def gradient(obj, A, c, y, beta, S):
        from tiedattention.design import logit_pairs

        n, T, d = y.shape[0], y.shape[1], S.shape[0]
        a, b, _ = logit_pairs(T)
        _, G = obj.loss_of_logits(obj.logits_all(S))
        Sl = S.clone().requires_grad_(True)
        v = (torch.as_tensor(A) * Sl).sum(axis=(1, 2)).reshape(n, -1) * torch.as_tensor(c) / math.sqrt(d)
        H = torch.zeros((n, T, T), dtype=torch.float64)
        H[:, a, b] = v
        H[:, b, a] = v
        loss = ((torch.as_tensor(y) - torch.softmax(beta * H, -1)) ** 2).sum() / d**2
        loss.backward()
        assert float(loss.detach()) == pytest.approx(obj.data_only(S), rel=1e-12)
        assert torch.allclose(obj.grad_S_of(G), 0.5 * (Sl.grad + Sl.grad.T), rtol=1e-11, atol=1e-14)

    def kkt(obj, S, lam):
        d = S.shape[0]
        _, G = obj.loss_of_logits(obj.logits_all(S))
        Z = obj.grad_S_of(G) + lam / d * torch.eye(d, dtype=torch.float64)
        ev_S = torch.linalg.eigvalsh(S)
        scale = float(torch.linalg.matrix_norm(Z, 2))
        assert float(ev_S.min()) >= -1e-10  # S psd
        assert float(torch.linalg.eigvalsh(Z).min()) >= -1e-5 * scale  # dual feasibility
        assert float(torch.linalg.matrix_norm(S @ Z)) <= 1e-5 * scale * float(ev_S.max())  # complementarity
        assert float(ev_S.max()) > 0

    return type("DesignChecks", (), {"gradient": staticmethod(gradient), "kkt": staticmethod(kkt)})


@pytest.fixture
def no_sampling(monkeypatch):
    """``simulate_record`` with sampling a data set failing the test: bad arguments must be refused before it
    samples (or trains) anything (tests/test_api_review.py, tests/test_api_review2.py)."""
    pytest.importorskip("torch")
    import tiedattention.simulation.api as api

    def fail(*args, **kwargs):
        raise AssertionError("sampled a data set before validating the arguments")

    monkeypatch.setattr(api, "sample_dataset", fail)
    return api.simulate_record
