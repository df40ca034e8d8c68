"""Shared fixtures."""

import pytest


@pytest.fixture
def torch_one_thread():
    """Run a test with one torch CPU thread (small problems on a shared 2-core machine run faster)."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
