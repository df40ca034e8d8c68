"""Finite-size simulations of single-head tied attention (torch). See docs/user-guide/simulation.md.

Entry points:

* :func:`sample_dataset` -- sequences of the attention-indexed model (numpy, seeded by (seed, purpose));
* :func:`train` -- train a student with a registered solver (:data:`SOLVERS`: adam, lbfgs, prox; add more
  with :func:`register_solver`), returning a :class:`TrainResult`;
* :func:`simulate_record` -- seeds x (sample, train, measure) summarised as one JSON-ready record;
* :func:`solver_options` -- the keyword options a registered solver takes.
"""

from .api import check_scaled_starts, combined_sem, n_of, simulate_record, solver_options
from .metrics import mse_on_S, rank_fraction, spectra, test_errors
from .models import resolve_device
from .sampler import Dataset, rng_for, sample_dataset
from .trainers import SOLVERS, Solution, TrainResult, objective_at, register_solver, train

__all__ = [
    "simulate_record",
    "solver_options",
    "train",
    "sample_dataset",
    "Dataset",
    "TrainResult",
    "Solution",
    "SOLVERS",
    "register_solver",
    "rng_for",
    "resolve_device",
    "objective_at",
    "test_errors",
    "mse_on_S",
    "rank_fraction",
    "spectra",
    "combined_sem",
    "n_of",
    "check_scaled_starts",
]
