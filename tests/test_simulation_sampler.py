"""AIM sampler: logit statistics (THEORY.md section 1), noise covariance, seq2seq statistics, seeding."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tiedattention import Problem  # noqa: E402
from tiedattention.simulation.sampler import (  # noqa: E402
    logits,
    rng_for,
    sample_dataset,
    softmax_rows,
    symmetric_noise,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_logit_statistics_at_d200():
    """Means 0, off-diagonal variance (1/d) Tr S0^2, diagonal variance twice that (given S0, exactly)."""
    d, T, n = 200, 3, 12000
    pb = Problem.from_options(target="mp:0.5", tokens=T)
    S0 = pb.task.target.sample(d, rng_for(1, "target"))
    q0 = np.trace(S0 @ S0) / d
    data = sample_dataset(pb, n, d, 1, S0=S0)
    h = logits(data.X, S0)
    off = h[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]].ravel()
    diag = h[:, np.arange(T), np.arange(T)].ravel()
    # means within 4 standard errors
    assert abs(off.mean()) < 4 * np.sqrt(q0 / off.size)
    assert abs(diag.mean()) < 4 * np.sqrt(2 * q0 / diag.size)
    # variances within 4 standard errors (Gaussian-like: sd of the sample variance ~ sqrt(2/N) var);
    # a wrong normalisation (e.g. 1/d instead of 1/sqrt(d), or keeping Tr S) is off by far more
    assert off.var() == pytest.approx(q0, rel=4 * np.sqrt(2 / off.size) * 1.5)
    assert diag.var() == pytest.approx(2 * q0, rel=4 * np.sqrt(2 / diag.size) * 1.5)
    # logits of distinct pairs are uncorrelated
    assert abs(np.corrcoef(h[:, 0, 1], h[:, 0, 2])[0, 1]) < 4 / np.sqrt(n)


def test_symmetric_noise_covariance():
    xi = symmetric_noise(np.random.default_rng(0), 40000, 3)
    np.testing.assert_array_equal(xi, np.swapaxes(xi, 1, 2))
    assert xi[:, 0, 1].var() == pytest.approx(0.5, rel=0.03)
    assert xi[:, 1, 1].var() == pytest.approx(1.0, rel=0.03)
    assert abs(np.mean(xi[:, 0, 1] * xi[:, 0, 2])) < 0.02
    assert abs(np.mean(xi[:, 0, 0] * xi[:, 1, 1])) < 0.03


def test_labels_carry_logit_noise_with_the_stated_covariance():
    """Invert the softmax: log(y_ab / y_aa)/beta0 - (h0_ab - h0_aa) = sqrt(Delta) (xi_ab - xi_aa).

    Var = Delta (1/2 + 1); the residuals of rows a and b share xi_ab = xi_ba: covariance Delta/2 (T = 2),
    which checks that the noise is symmetric."""
    d, T, n, delta, beta0 = 30, 2, 40000, 0.7, 1.3
    pb = Problem.from_options(tokens=T, noise=delta, beta0=beta0)
    data = sample_dataset(pb, n, d, 3)
    h0 = logits(data.X, data.S0)
    np.testing.assert_allclose(data.clean, softmax_rows(beta0 * h0), rtol=1e-12)
    r0 = np.log(data.y[:, 0, 1] / data.y[:, 0, 0]) / beta0 - (h0[:, 0, 1] - h0[:, 0, 0])
    r1 = np.log(data.y[:, 1, 0] / data.y[:, 1, 1]) / beta0 - (h0[:, 1, 0] - h0[:, 1, 1])
    assert r0.var() == pytest.approx(1.5 * delta, rel=0.03)
    assert np.mean(r0 * r1) == pytest.approx(0.5 * delta, rel=0.08)
    assert abs(r0.mean()) < 4 * np.sqrt(1.5 * delta / n)


def test_output_noise_seq2lab_variance():
    pb = Problem.from_options(noise=0.0, noise_out=0.04)
    data = sample_dataset(pb, 20000, 10, 0)
    resid = data.y - data.clean
    assert resid.var() == pytest.approx(0.04, rel=0.03)


def test_seq2seq_sufficient_statistics_match_explicit_loss():
    pb = Problem.from_options(task="seq2seq", tokens=3, noise_out=0.3)
    data = sample_dataset(pb, 50, 12, 5, keep_outputs=True)
    rng = np.random.default_rng(9)
    yhat = softmax_rows(rng.standard_normal((50, 3, 3)))
    explicit = ((data.Y - yhat @ data.X) ** 2).sum(axis=(1, 2)) / 12
    D = data.y - yhat
    stats = ((D @ data.gram) * D).sum(axis=(1, 2)) + 2 * (D * np.swapaxes(data.out_cross, 1, 2)).sum(
        axis=(1, 2)
    ) + data.out_sq
    np.testing.assert_allclose(stats, explicit, rtol=1e-12)
    # the noise part has mean T Delta_out = 0.9 per sequence
    assert data.out_sq.mean() == pytest.approx(0.9, rel=0.1)


def test_seeded_and_chunk_independent():
    pb = Problem.from_options(tokens=3, noise_out=0.1)
    a = sample_dataset(pb, 101, 8, 4)
    b = sample_dataset(pb, 101, 8, 4, chunk=7)
    c = sample_dataset(pb, 101, 8, 5)
    for k in ("X", "y", "clean", "S0"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert not np.allclose(a.X, c.X)
    # train and test streams of one seed differ, with the same S0
    t = sample_dataset(pb, 101, 8, 4, purpose="test")
    np.testing.assert_array_equal(t.S0, a.S0)
    assert not np.allclose(t.X, a.X)
