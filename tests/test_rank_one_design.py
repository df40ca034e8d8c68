"""Rank-one design without token sharing (simulation/rank_one_design.py): each logit has the AIM's law, the
logits of a sequence are independent (the AIM's are not), exact gradient, KKT at the prox minimiser.

The finite-size split it serves (AIM vs rank-one vs Gaussian design at d = 50, 100) is recorded in
docs/theory/finite_size.md, "Where the AIM's small-alpha excess sits".
"""

import math

import numpy as np
import pytest

from tiedattention import Problem

torch = pytest.importorskip("torch")
r1 = pytest.importorskip("tiedattention.simulation.rank_one_design")
from tiedattention.simulation.sampler import logits, sample_dataset  # noqa: E402


def _rank_one_S(d):
    """S = sqrt(d) w w^T, |w| = 1: (1/d) Tr S^2 = 1 and the logits are g1^2 - 1, g2^2 - 1, g1 g2 (g = w . x)."""
    w = np.zeros(d)
    w[0] = 1.0
    return math.sqrt(d) * np.outer(w, w)


def test_each_logit_has_the_aim_law_and_a_sequence_s_logits_are_independent():
    p = Problem.from_options(lam=0.01)
    d, n = 6, 200_000
    S = _rank_one_S(d)
    H1 = r1.rank_one_logits(*_design(p, n, d, S), S, 2)
    Ha = logits(sample_dataset(p, n, d, 1, S0=S).X, S)
    for H in (H1, Ha):
        h11, h12 = H[:, 0, 0], H[:, 0, 1]
        # closed forms of g^2 - 1 and g1 g2: variances 2 and 1, fourth moments 60 and 9
        assert h11.var() == pytest.approx(2.0, rel=0.03) and h12.var() == pytest.approx(1.0, rel=0.03)
        assert np.mean(h11**4) == pytest.approx(60.0, rel=0.15) and np.mean(h12**4) == pytest.approx(9.0, rel=0.1)
        assert np.allclose(H, np.swapaxes(H, 1, 2))
    # a dependence beyond correlation: cov(h11^2, h12^2) = E[(g^2 - 1)^2 g^2] - 2 = 8 when h11 and h12 share
    # the token x1 (the AIM), 0 when each logit has its own tokens (both designs: cov(h11, h12) = 0)
    cov = {k: float(np.cov(H[:, 0, 0] ** 2, H[:, 0, 1] ** 2)[0, 1]) for k, H in (("aim", Ha), ("rank1", H1))}
    assert cov["aim"] == pytest.approx(8.0, abs=1.5) and abs(cov["rank1"]) < 1.0, cov
    assert abs(np.corrcoef(H1[:, 0, 0], H1[:, 0, 1])[0, 1]) < 0.01


def _design(p, n, d, S):
    data = r1.sample_rank_one_design(p, n, d, 2, S0=S)
    return data.U, data.V, data.diag


def test_labels_follow_the_teacher_logits_and_the_same_target_as_the_aim():
    p = Problem.from_options(lam=0.01, noise=0.0)
    data = r1.sample_rank_one_design(p, 50, 8, 3)
    assert np.array_equal(data.S0, sample_dataset(p, 50, 8, 3).S0)  # the same S0 per seed as the AIM
    h0 = r1.rank_one_logits(data.U, data.V, data.diag, data.S0, 2)
    e = np.exp(h0 - h0.max(-1, keepdims=True))
    assert np.allclose(data.y, e / e.sum(-1, keepdims=True)) and np.allclose(data.clean, data.y)  # Delta = 0


def test_gradient_equals_autograd_through_explicit_sensing_matrices(torch_one_thread, design_checks):
    p = Problem.from_options(lam=0.01, beta=1.3)
    d, n = 5, 30
    data = r1.sample_rank_one_design(p, n, d, 3)
    rng = np.random.default_rng(4)
    M = rng.standard_normal((d, d))
    S = torch.as_tensor(M + M.T, dtype=torch.float64)
    # independent route: the sensing matrices (u v^T + v u^T)/2 - [diagonal] I, h = <A, S>/sqrt(d), autograd on S
    A = np.einsum("ki,kj->kij", data.U, data.V)
    A = 0.5 * (A + np.swapaxes(A, 1, 2)) - data.diag[:, None, None] * np.eye(d)
    design_checks.gradient(r1.RankOneObjective(p, data), A, np.ones(3), data.y, p.student.beta, S)


def test_prox_minimiser_satisfies_kkt_and_the_seed_record(torch_one_thread, design_checks):
    p = Problem.from_options(lam=0.05)
    d, alpha = 10, 0.6
    row = r1.rank_one_design_seed(p, alpha, d, seed=8, n_test=2000)
    assert row["converged"] and row["mse"] == pytest.approx(row["q"] - 2 * row["m"] + row["Q0"])
    data = r1.sample_rank_one_design(p, int(round(alpha * d * d)), d, 8)
    obj = r1.RankOneObjective(p, data)
    res = r1.train_design(p, obj, seed=8)
    S = torch.as_tensor(res["S_hat"])
    assert obj.value(S) == pytest.approx(row["objective"], rel=1e-12)
    design_checks.kkt(obj, S, p.student.lam)


def test_bad_input_names_the_parameter():
    from tiedattention.errors import ParameterError

    for kwargs, name in (({"n": 0, "d": 5}, "n"), ({"n": 5, "d": 1}, "d")):
        with pytest.raises(ParameterError) as e:
            r1.sample_rank_one_design(Problem.from_options(), seed=0, **kwargs)
        assert e.value.param == name
    with pytest.raises(ParameterError) as e:
        r1.sample_rank_one_design(Problem.from_options(task="seq2seq"), 5, 5, 0)
    assert e.value.param == "task"
