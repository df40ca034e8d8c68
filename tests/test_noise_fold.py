"""Large logit noise past the fold of the small-norm branch (docs/theory/state_evolution.md, "Large logit noise:
past the fold").

MP kappa0 = 0.2, Delta = 2, T = 2, alpha = 0.5: the SE's small-norm fixed point exists at lambda = 5e-3 and 3e-3
(q = 1.9, 2.5) and ends between 3e-3 and 2e-3; below, the cold start stalled near the fold's ghost (q ~ 2.7, residual
~1e-2) and the point was reported unconverged, while the only fixed point lies at q ~ 145 (lambda = 1e-3). A stalled
large-noise solve is now started again from its end point scaled up (``_scaled_starts``; a converged one from 100x).
The ERM agrees that the large-norm minimiser is the better one: at d = 60 prox from large-norm starts ends at a lower
objective than from 0. Where both branches exist (lambda = 3e-3) the one of lower objective (the zero-temperature free
energy) is reported.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiedattention.problem import Problem
from tiedattention.theory.state_evolution import NOISE_SCALES, NOTE_UNSTABLE, SEResult, StateEvolution

PAST_FOLD = Problem.from_options(target="mp:0.2", noise=2, lam=1e-3)


def _point(q: float, m: float, sigma: float, converged: bool, objective: float, it: int = 10) -> SEResult:
    nan = float("nan")
    return SEResult(0.5, 1.0, q, m, sigma, nan, nan, nan, nan, nan, nan, 0.5, nan, 0.1, objective, 1.0, converged,
                    it, 1e-2 if not converged else 1e-5, 0.0, "regular", "" if converged else "stalled")


class _Fake:
    """A solver returning (or raising) the given outcomes in order; records the starts it was given."""

    def __init__(self, outcomes):
        self.outcomes, self.starts = outcomes, []

    def _solve_regular(self, alpha, x0, zero_test=True):
        self.starts.append(np.array(x0))
        out = self.outcomes[len(self.starts) - 1]
        if isinstance(out, Exception):
            raise out
        return out


def test_scaled_starts_keep_the_correlation_and_return_the_lowest_objective():
    stalled = _point(2.75, 1.4, 2.75, False, 0.069, it=50)
    best, other = _point(145.0, 8.7, 157.0, True, 0.0548, it=12), _point(140.0, 8.5, 150.0, True, 0.0551, it=30)
    fake = _Fake([other, best])
    se = StateEvolution(PAST_FOLD)
    out = se._scaled_starts(0.5, fake, stalled, True)
    assert out is best  # the lower objective, whichever start found it
    for s, x0 in zip(NOISE_SCALES, fake.starts, strict=True):
        np.testing.assert_allclose(x0, [s * 2.75, math.sqrt(s) * 1.4, s * 2.75])
        assert x0[1] / math.sqrt(x0[0]) == pytest.approx(1.4 / math.sqrt(2.75))  # m / sqrt(q) kept
    assert out.iterations == 50 + 30 + 12  # every iteration spent is counted
    assert "cold start stalled at q = 2.75" in out.message and f"{NOISE_SCALES[1]:g}x" in out.message


def test_scaled_starts_that_fail_leave_the_stalled_point():
    stalled = _point(2.75, 1.4, 2.75, False, 0.069, it=50)
    fake = _Fake([_point(30.0, 3.0, 30.0, False, 0.06, it=40), FloatingPointError("prox")])
    out = StateEvolution(PAST_FOLD)._scaled_starts(0.5, fake, stalled, True)
    assert out is stalled and not out.converged and out.iterations == 90 and out.message == "stalled"
    nan_point = _point(float("nan"), 1.0, 1.0, False, 0.1)
    assert StateEvolution(PAST_FOLD)._scaled_starts(0.5, _Fake([]), nan_point, True) is nan_point  # no start tried


@pytest.mark.parametrize("ats, verdict", [
    ((0.8, 0.7), "so it is the ERM's (AT = 0.8, the other's 0.7)"),
    ((1.39, 0.716), f"{NOTE_UNSTABLE}(AT = 1.39, the other's 0.716): an unstable branch's RS objective can lie below"),
    ((math.nan, 0.7), f"{NOTE_UNSTABLE}(AT = nan, the other's 0.7)"),  # no AT: no verdict either
])
def test_a_converged_point_gives_way_to_a_distinct_fixed_point_of_lower_objective(monkeypatch, ats, verdict):
    """Where both branches exist (lambda = 3e-3: q = 2.5, objective 0.0698; q = 41, 0.0650) the cold solve's point
    is kept only if no start at the largest scale converges elsewhere with a lower objective; one largest-scale
    start is tried; the note names both points, and calls the lower one the ERM's only where it is RS-stable (the
    RS objective of an unstable branch can lie below the ERM's)."""
    monkeypatch.setattr(StateEvolution, "_rs_at", lambda self, alpha, res: ats[0] if res.q > 10 else ats[1])
    small = _point(2.49, 1.35, 2.51, True, 0.0698, it=17)
    large = _point(41.0, 5.0, 40.6, True, 0.0650, it=20)
    fake = _Fake([large])
    out = StateEvolution(PAST_FOLD.with_options(lam=3e-3))._scaled_starts(0.5, fake, small, True)
    assert out is large and out.iterations == 37 and len(fake.starts) == 1
    np.testing.assert_allclose(fake.starts[0], [NOISE_SCALES[-1] * 2.49, math.sqrt(NOISE_SCALES[-1]) * 1.35,
                                                NOISE_SCALES[-1] * 2.51])
    assert "two fixed points" in out.message and "0.0698" in out.message and "q = 2.49" in out.message
    assert verdict in out.message and "; " not in out.message  # one note (the theory command prints it whole)
    # a higher objective elsewhere, or the same point found again (q within NOISE_SAME), keeps the cold solve's point
    for other in (_point(41.0, 5.0, 40.6, True, 0.0710), _point(2.49 * 1.05, 1.36, 2.52, True, 0.0600)):
        small = _point(2.49, 1.35, 2.51, True, 0.0698, it=17)
        kept = StateEvolution(PAST_FOLD.with_options(lam=3e-3))._scaled_starts(0.5, _Fake([other]), small, True)
        assert kept is small and kept.message == "" and kept.iterations == 27


def test_no_second_start_at_lambda_zero_for_a_converged_point():
    """At lambda = 0 a larger start can run off (a runaway is no minimiser): a converged point is returned as is."""
    base = _point(1.7, 1.0, 1.8, True, 0.05)
    fake = _Fake([])
    assert StateEvolution(PAST_FOLD.with_options(lam=0))._scaled_starts(0.5, fake, base, True) is base
    assert fake.starts == []


def test_the_point_past_the_fold_converges_on_the_large_norm_branch():
    """A real solve (~30 s): converged at q ~ 145 with test error 0.882, on the large-noise path (QMC rule, Stein
    forms); the large-norm point fits the labels better than the small branch did before its fold (train error 0.095
    against 0.134 at lambda = 3e-3)."""
    res = StateEvolution(PAST_FOLD).solve(0.5)
    assert res.converged and res.phase == "regular" and res.quadrature == "qmc4x2^14"
    assert 100 < res.q < 200 and res.test_error == pytest.approx(0.882, abs=0.01)
    assert res.train_error < 0.11
    assert "converged from a start at" in res.message and "Stein forms" in res.message


def test_where_both_branches_exist_the_lower_objective_is_reported():
    """A real solve (~10 s) at lambda = 3e-3: the cold solve converges on the small branch (q = 2.49, objective
    0.0698) and the start at 100x finds the large one (q = 41.0, test error 0.806, objective 0.0650), reported."""
    res = StateEvolution(PAST_FOLD.with_options(lam=3e-3)).solve(0.5)
    assert res.converged and 30 < res.q < 55 and res.test_error == pytest.approx(0.806, abs=0.01)
    assert "two fixed points" in res.message and res.objective < 0.0698 - 2e-3
    # the large one is RS-unstable (AT = 1.39 +- 0.01, 2026-12-02), the small one stable (0.716), and at d = 60
    # prox sits on the small one (docs/theory/state_evolution.md, "Two fixed points and RS stability")
    at = float(res.message.split(f"{NOTE_UNSTABLE}(AT = ")[1].split(",")[0])
    other = float(res.message.split("the other's ")[1].split(")")[0])
    assert at == pytest.approx(1.39, abs=0.05) and other == pytest.approx(0.716, abs=0.05)


@pytest.mark.slow
def test_the_erm_prefers_the_large_norm_minimiser_at_d60():
    """d = 60, 3 seeds, prox (~2 min): started from 3x the minimiser that prox finds from 0, prox ends at a lower
    objective with q ~ 70-100 and test error ~0.83, against q ~ 2 and test error ~0.46 from 0: the SE's large-norm
    fixed point (test error 0.882 at d -> infinity) is the better minimiser, which prox from 0 does not reach."""
    import torch

    from tiedattention.simulation.metrics import test_errors
    from tiedattention.simulation.sampler import rng_for, sample_dataset
    from tiedattention.simulation.trainers import train

    torch.set_num_threads(1)
    d = 60
    for seed in range(3):
        S0 = PAST_FOLD.task.target.sample(d, rng_for(seed, "target"))
        data = sample_dataset(PAST_FOLD, round(0.5 * d * d), d, seed, S0=S0)
        small = train(PAST_FOLD, data, solver="prox", seed=seed)
        large = train(PAST_FOLD, data, solver="prox", seed=seed, init=3.0 * small.S_hat)
        q_small, q_large = ((r.S_hat ** 2).sum() / d for r in (small, large))
        assert small.converged and large.converged
        assert large.objective < small.objective - 1e-3
        assert q_small < 5 and q_large > 50
        te = test_errors(PAST_FOLD, large.S_hat, S0, seed, 2000)["test_error"]
        assert 0.75 < te < 0.95
