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
