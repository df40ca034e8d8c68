"""Warm starts of the proximal solver (``train(..., solver="prox", init=S)``).

Regression (session 11): the solver compared the first candidate's objective (data + penalty) with the start's
data term alone, so from a start near a minimiser every step looked like an increase and the solver returned
``init`` unchanged after ``patience`` rejections. Warm starts along a sweep, multi-start checks and "restart from
the solution" stationarity checks were all affected; starts from S = 0 (the default) were not (its penalty is 0).
"""
import dataclasses

import numpy as np
import pytest

from tiedattention import Problem
from tiedattention.simulation import rng_for, sample_dataset, train


@pytest.fixture(scope="module")
def two_data_sets():
    problem = Problem.from_options(lam=0.01)
    d = 30
    S0 = problem.task.target.sample(d, rng_for(3, "target"))
    data = sample_dataset(problem, round(0.5 * d * d), d, 3, S0=S0)
    keep = np.arange(data.n) >= 40  # the same data set less its first 40 sequences
    fewer = dataclasses.replace(data, X=data.X[keep], y=data.y[keep], clean=data.clean[keep])
    return problem, data, fewer


@pytest.mark.parametrize("model", ["factorized", "direct"])
def test_warm_start_from_a_neighbouring_minimiser_reaches_the_new_one(two_data_sets, model, torch_one_thread):
    """Start from the minimiser of the full data set, solve on the reduced one: the answer is the reduced data set's
    cold minimiser (lam = 0.01: one minimiser, tests/test_simulation_trainers.py), not the start. Before the fix
    the solver stopped at the start (objective above the cold one by ~1e-2 relative, S_hat moved by 0)."""
    problem, data, fewer = two_data_sets
    problem = problem.with_options(model=model)
    full = train(problem, data, solver="prox", rtol=1e-14, patience=20)
    cold = train(problem, fewer, solver="prox", rtol=1e-14, patience=20)
    warm = train(problem, fewer, solver="prox", init=full.S_hat, rtol=1e-14, patience=20)
    moved = np.linalg.norm(cold.S_hat - full.S_hat) / np.linalg.norm(cold.S_hat)
    assert moved > 1e-3  # the two minimisers differ: the check can fail
    assert warm.converged
    assert abs(warm.objective - cold.objective) / cold.objective < 1e-9
    assert np.linalg.norm(warm.S_hat - cold.S_hat) / np.linalg.norm(cold.S_hat) < 1e-2 * moved


def test_restart_from_the_minimiser_stays_and_the_objective_counts_the_penalty(two_data_sets, torch_one_thread):
    """From its own minimiser the solver stays put (no step lowers F), and from a scaled copy of it (same data) it
    comes back: the start's objective includes the trace penalty, so a step that lowers data + penalty is taken."""
    problem, data, _ = two_data_sets
    ref = train(problem, data, solver="prox", rtol=1e-14, patience=20)
    again = train(problem, data, solver="prox", init=ref.S_hat, rtol=1e-14, patience=20)
    assert abs(again.objective - ref.objective) / ref.objective < 1e-12
    back = train(problem, data, solver="prox", init=1.05 * ref.S_hat, rtol=1e-14, patience=20)
    assert back.steps > 20  # before the fix: exactly `patience` rejected steps, S_hat = the start
    assert abs(back.objective - ref.objective) / ref.objective < 1e-9
