"""StateEvolution.solve keeps the channel's prox warning (PROX_WARNING) for the reported point's own evaluation only:
the warnings of the evaluations on the way (a stalled cold start later continued in lambda, a re-solve's excursion,
the Gauss-Hermite solve of a point re-solved with the QMC rule) said nothing about a converged answer. Found by the
hard sweeps of session 25 (docs/theory/state_evolution.md, "The warnings of a re-solve not returned")."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from tiedattention.errors import ConvergenceWarning
from tiedattention.problem import Problem
from tiedattention.theory.channel import PROX_WARNING
from tiedattention.theory.state_evolution import StateEvolution


@pytest.fixture(scope="module")
def point():
    res = StateEvolution(Problem.from_options()).solve(0.5)
    assert res.converged and res.errors["prox_excess"] <= 1.0
    return res


def _solve_with(monkeypatch, point, converged: bool, excess: float):
    def fake(self, alpha, init):
        warnings.warn(f"{PROX_WARNING} (max residual 1.00e+00)", ConvergenceWarning, stacklevel=2)
        warnings.warn("another warning", UserWarning, stacklevel=2)
        return dataclasses.replace(point, converged=converged, message="" if converged else "stalled",
                                   errors={**point.errors, "prox_excess": excess})

    monkeypatch.setattr(StateEvolution, "_solve_point", fake)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StateEvolution(Problem.from_options()).solve(0.5)
    return [str(w.message) for w in caught]


def test_a_converged_point_drops_the_prox_warnings_of_the_way(monkeypatch, point):
    assert _solve_with(monkeypatch, point, True, 0.5) == ["another warning"]


def test_a_converged_point_whose_own_evaluation_has_a_bad_prox_says_so_once(monkeypatch, point):
    said = _solve_with(monkeypatch, point, True, 12.0)
    assert said[0] == "another warning" and len(said) == 2
    assert said[1] == (f"state evolution at alpha=0.5: {PROX_WARNING} at the reported fixed point (12 times its "
                       "allowance)")


def test_an_unconverged_point_keeps_every_warning(monkeypatch, point):
    said = _solve_with(monkeypatch, point, False, 0.5)
    assert said[:2] == [f"{PROX_WARNING} (max residual 1.00e+00)", "another warning"]
    assert said[2].startswith("state evolution did not converge at alpha=0.5: stalled")


def test_the_record_carries_the_excess_of_the_reported_evaluation(point):
    from tiedattention.theory.api import theory_records

    rec = theory_records(Problem.from_options(), [0.5])[0]
    assert rec["err_prox_excess"] == point.errors["prox_excess"] and 0.0 <= rec["err_prox_excess"] <= 1.0


@pytest.mark.slow  # ~20 s: T = 2 with output noise (QMC rule), cold start stalled, continued in lambda
def test_the_sweep_point_whose_stalled_start_warned_is_quiet():
    """Hard sweep seed 37: the cold start stalled at q = 719 and warned of a prox residual of 1.0; the point then
    converged by continuation from lambda = 4.1e-4 (q = 8.59, test error 2.76777), and that warning was printed."""
    p = Problem.from_options(target="mp:0.585", noise=0.17792210741201986, noise_out=0.48491128904010145,
                             lam=4.11586937763873e-05, kappa=2.1607728516173657, beta=1.6230147867421008)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = StateEvolution(p).solve(0.09808383123912039)
    assert res.converged and "continued from the fixed point at lambda" in res.message
    assert res.test_error == pytest.approx(2.7677668, rel=1e-6)
    assert [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)] == []
