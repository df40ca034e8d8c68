"""SoftmaxChannel.moments(refresh_pool=False): the state evolution's cheaper stages follow their warm branches
without rerunning the T = 2 start pool's fixed starts at every uncertified node.

Rerunning them in every warm call (so that warm and cold calls pick the same minimum) had made a 50-point learning
curve ~1.9x slower (docs/performance.md). Only the stages that a later stage of the same solve refines skip them:
the accurate stage is cold (Gauss-Hermite) or refreshes them (QMC), so the answer is the cold map's fixed point."""

from __future__ import annotations

import warnings

import pytest

from tiedattention.errors import ParameterError
from tiedattention.problem import Problem
from tiedattention.theory import channel as channel_module
from tiedattention.theory.channel import ChannelParams, SoftmaxChannel
from tiedattention.theory.state_evolution import StateEvolution

# Problem.from_options(beta=2, beta0=2): the prox is nonconvex at ~40 % of the nodes at this (q, m, Sigma)
P2 = ChannelParams(tokens=2, beta=2.0, beta0=2.0, noise=0.5, q0=1.5)
ALPHA, Q, M, SIGMA = 0.5, 1.308, 1.246, 1.628
FIELDS = ("q_hat", "m_hat", "sigma_hat", "loss_mean", "envelope", "branch_share")


@pytest.fixture
def pool_nodes(monkeypatch):
    """The number of nodes each call of the T = 2 start pool ran on, in call order."""
    seen: list[int] = []
    inner = channel_module._pool_prox

    def counting(kern, b, *args, **kwargs):
        seen.append(b.shape[0])
        return inner(kern, b, *args, **kwargs)

    monkeypatch.setattr(channel_module, "_pool_prox", counting)
    return seen


def test_warm_call_without_refresh_skips_the_pool_where_a_branch_is_known(pool_nodes):
    """A first call with a fresh dict runs the whole pool (it has no branch to follow) and equals the cold call
    bit for bit; the next warm call runs the pool's fixed starts at every uncertified node by default and at none
    with refresh_pool=False (every node of the second call was uncertified or certified in the first)."""
    ch = SoftmaxChannel(P2, order=8, estimate_error=False)
    cold = ch.moments(ALPHA, Q, M, SIGMA)
    n_cold = sum(pool_nodes)
    assert n_cold > 0  # the point is nonconvex: the pool ran
    for refresh, expect_pool in ((True, True), (False, False)):
        warm: dict = {}
        pool_nodes.clear()
        first = ch.moments(ALPHA, Q, M, SIGMA, warm=warm, refresh_pool=refresh)
        assert sum(pool_nodes) == n_cold
        assert all(getattr(first, k) == getattr(cold, k) for k in FIELDS)
        pool_nodes.clear()
        nxt = ch.moments(ALPHA, 1.01 * Q, M, SIGMA, warm=warm, refresh_pool=refresh)
        ran = sum(pool_nodes)
        assert (ran > 0) == expect_pool, (refresh, ran)
        # the warm branches still find a minimum at each node: the values stay close to the cold ones
        again = ch.moments(ALPHA, 1.01 * Q, M, SIGMA)
        assert abs(nxt.q_hat - again.q_hat) < 2e-3 * again.q_hat


def test_refresh_pool_takes_true_or_false_only():
    ch = SoftmaxChannel(P2, order=4, estimate_error=False)
    with pytest.raises(ParameterError, match="refresh_pool"):
        ch.moments(ALPHA, Q, M, SIGMA, warm={}, refresh_pool="no")


def test_staged_solve_reaches_the_cold_fixed_point():
    """At the reference point (Gauss-Hermite; Sigma = 2.3, many uncertified nodes) the staged solve, whose cheaper
    stages no longer refresh the pool, ends at the fixed point that a solve without warm starts reaches (every call
    cold, every pool complete), to the solver's tolerance."""
    problem = Problem.from_options()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        staged = StateEvolution(problem, tol=1e-9, fixed_point_errors=False).solve(0.5)
        cold = StateEvolution(problem, tol=1e-9, fixed_point_errors=False, warm_start=False).solve(0.5)
    assert staged.converged and cold.converged and staged.quadrature == cold.quadrature == "gh16"
    for k in ("q", "m", "sigma"):  # residuals are relative (log coordinates)
        assert abs(getattr(staged, k) - getattr(cold, k)) < 3e-9 * abs(getattr(cold, k)), k
    assert abs(staged.test_error - cold.test_error) < 1e-9


def test_rough_point_is_where_refreshed_stages_put_it(monkeypatch):
    """beta = beta0 = 2, alpha = 0.5: a rough point (branch share 0.15, QMC re-solve, accepted at its quadrature
    floor, where a cold solve lands 1e-3 away). Refreshing the pool in every warm call, as before, gives the same
    point to 1e-9: the cheaper stages change the work, not where the accepted iterate lies."""
    problem = Problem.from_options(beta=2, beta0=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = StateEvolution(problem, tol=1e-9, fixed_point_errors=False).solve(0.5)
        inner = SoftmaxChannel.moments
        monkeypatch.setattr(SoftmaxChannel, "moments",
                            lambda self, *a, refresh_pool=True, **k: inner(self, *a, refresh_pool=True, **k))
        old = StateEvolution(problem, tol=1e-9, fixed_point_errors=False).solve(0.5)
    assert new.converged and old.converged and new.quadrature == old.quadrature == "qmc4x2^14"
    for k in ("q", "m", "sigma", "test_error"):
        assert abs(getattr(new, k) - getattr(old, k)) < 1e-9 * abs(getattr(old, k)), k
    assert abs(new.test_error - 0.3880) < 5e-4  # docs/theory/state_evolution.md, the Stein forms at beta = 2
