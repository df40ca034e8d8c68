"""Adversarial review of GAMP (tiedattention.amp): bad inputs give one ParameterError naming the parameter (never a
TypeError from deep inside or a run on empty data), and the convergence report is honest."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tiedattention.amp import gamp, se_trajectory
from tiedattention.errors import ConvergenceWarning, ParameterError
from tiedattention.problem import Problem

REF = dict(target="mp:0.5", noise=0.5, lam=0.01, tokens=2)


def _data(n: int, d: int, seed: int = 0):
    """Tokens and seq2lab labels of the reference problem (numpy only, so no torch is needed here)."""
    rng = np.random.default_rng(seed)
    W0 = rng.standard_normal((d // 2, d))
    S0 = W0.T @ W0 / math.sqrt(d // 2 * d)
    X = rng.standard_normal((n, 2, d))
    h = (np.einsum("nad,de,nbe->nab", X, S0, X) - np.trace(S0) * np.eye(2)) / math.sqrt(d)
    e = np.exp(h - h.max(axis=2, keepdims=True))
    return X, e / e.sum(axis=2, keepdims=True), S0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(max_iter=5.5), "max_iter"),
        (dict(max_iter=float("inf")), "max_iter"),  # was OverflowError
        (dict(damping="0.5"), "damping"),  # was TypeError from a comparison
        (dict(tol="small"), "tol"),
        (dict(sigma0=None), "sigma0"),
        (dict(patience=-1), "patience"),
        (dict(patience=2.5), "patience"),
        (dict(min_damping=0.0), "min_damping"),
        (dict(min_damping=1.5), "min_damping"),
        (dict(max_input_weight=0.5), "max_input_weight"),  # was "input_weight: must be in [1, 0.5]"
        (dict(input_weight="2"), "input_weight"),
    ],
)
def test_gamp_bad_options_name_the_parameter(kwargs, name):
    pb = Problem.from_options(**REF)
    X, y, _ = _data(30, 8)
    with pytest.raises(ParameterError) as exc:
        gamp(pb, X, y, **kwargs)
    assert exc.value.param == name


def test_gamp_integral_float_max_iter_is_accepted():
    """max_iter=5.0 passed the integer check but then failed in range() (TypeError)."""
    pb = Problem.from_options(**REF)
    X, y, _ = _data(30, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = gamp(pb, X, y, max_iter=5.0)
    assert res.iterations == 5 and len(res.history) == 6


@pytest.mark.parametrize("n, d", [(0, 8), (5, 0)])
def test_gamp_empty_data_is_a_parameter_error(n, d):
    """No sequences (or d = 0) used to run one iteration on nothing: numpy 'Mean of empty slice' warnings,
    sigma_hat = 0, converged = False and NaN objective; it is bad input."""
    pb = Problem.from_options(**REF)
    with pytest.raises(ParameterError) as exc:
        gamp(pb, np.zeros((n, 2, d)), np.full((n, 2, 2), 0.5))
    assert exc.value.param == "X" and "n >= 1" in exc.value.message


def test_gamp_needs_a_problem():
    X, y, _ = _data(30, 8)
    with pytest.raises(ParameterError) as exc:
        gamp("mp:0.5", X, y)
    assert exc.value.param == "problem"


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((-1,), {}, "iterations"),  # was ValueError from np.broadcast_to
        ((2.5,), {}, "iterations"),  # was TypeError from range()
        ((3,), dict(x0=(0.0, 0.0)), "x0"),  # was TypeError: moments() missing 'sigma'
        ((3,), dict(x0=(0.0, 0.0, 1.0, 2.0)), "x0"),
        ((5,), dict(damping=0.5, damp="effective", noise_correlation=[1.0, 0.5]), "noise_correlation"),
        ((3,), dict(damping=0.5, damp="effective", noise_correlation="two-time", two_time_options={"foo": 1}),
         "two_time_options"),  # was TypeError: unexpected keyword argument
    ],
)
def test_se_trajectory_bad_input_names_the_parameter(args, kwargs, name):
    pb = Problem.from_options(**REF)
    x0 = kwargs.pop("x0", (0.0, 0.0, 1.0))
    with pytest.raises(ParameterError) as exc:
        se_trajectory(pb, 0.5, x0, *args, **kwargs)
    assert exc.value.param == name


def test_se_trajectory_zero_iterations_is_the_start():
    pb = Problem.from_options(**REF)
    np.testing.assert_array_equal(se_trajectory(pb, 0.5, (0.0, 0.0, 1.0), 0), [[0.0, 0.0, 1.0]])


def test_stalled_full_width_run_raises_the_input_weight_and_converges():
    """kappa = 1, lam = 0.01, d = 30, alpha = 0.2, seed 1: with the damping halved on every stall (0.5 -> 0.05)
    GAMP ran into a limit cycle (the residual repeating with period 9 at 5e-5 ... 3e-4 at fixed eta = 0.5, an
    eigenvalue of Y 1e-3 above the threshold 2 lam) and reported converged = False after 1000 iterations,
    KKT 7.5e-5, objective 2.5e-5 above the prox minimiser. Once the damping is exhausted the input weight is
    raised to 1.5 (eta back to 0.5) and GAMP reaches the minimiser (an independent route: the prox trainer on
    the same data)."""
    pytest.importorskip("torch")
    from tiedattention.simulation import rng_for, sample_dataset, train

    pb = Problem.from_options(**REF)
    d, alpha, seed = 30, 0.2, 1
    S0 = pb.task.target.sample(d, rng_for(seed, "target"))
    data = sample_dataset(pb, int(round(alpha * d * d)), d, seed, S0=S0)
    res = gamp(pb, data.X, data.y, S0)
    assert res.converged and res.kkt < 1e-9, res.message
    assert "input weight 1.5, damping 0.5" in res.message and res.input_weight == 1.5 and res.damping == 0.5
    ref = train(pb, data, solver="prox")
    assert abs(res.objective - ref.objective) / ref.objective < 1e-7  # measured 4e-9


@pytest.mark.parametrize("factor", [0.8, 1.05])
def test_zero_iterate_is_not_reported_converged_unless_zero_is_stationary(factor):
    """Large lambda, just below lam_c (the smallest lambda at which S = 0 is the ERM minimiser): the first
    iteration's g (the prox's at V_0 = 1) leaves every eigenvalue of Y below 2 lam, so S_1 = S_0 = 0, residual 0,
    and GAMP reported converged = True after 1 iteration with S = 0 (d = 30, alpha = 0.5, lam = 0.8 lam_c: KKT
    2.5e-2, objective 0.22539 against the prox minimiser's 0.22344, q = 3.5e-3). Above lam_c, 0 is the minimiser
    and stopping at once is right."""
    pytest.importorskip("torch")
    from tiedattention.amp import MeasurementOperator
    from tiedattention.simulation import rng_for, sample_dataset, train
    from tiedattention.theory.channel import softmax_loss

    pb0 = Problem.from_options(**REF)
    d, alpha, seed = 30, 0.5, 0
    S0 = pb0.task.target.sample(d, rng_for(seed, "target"))
    data = sample_dataset(pb0, int(round(alpha * d * d)), d, seed, S0=S0)
    op = MeasurementOperator(data.X)
    _, grad, _ = softmax_loss(op.forward(np.zeros((d, d))), data.y, 1.0, 2)
    # KKT at S = 0 for lam d Tr S on the psd cone: the top eigenvalue of -grad F(0) is at most lam d
    lam_c = np.linalg.eigvalsh(op.adjoint(-grad)).max() / d
    pb = Problem.from_options(**{**REF, "lam": factor * lam_c})
    res = gamp(pb, data.X, data.y, S0)
    ref = train(pb, data, solver="prox")
    q_ref = float((ref.S_hat**2).sum()) / d
    assert (q_ref > 0) == (factor < 1)
    assert res.converged and res.history[-1].q == pytest.approx(q_ref, rel=1e-4, abs=1e-12)
    assert abs(res.objective - ref.objective) / ref.objective < 1e-8
    if factor > 1:
        assert res.iterations == 1


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        (((0.0, 0.0, 1.0), -1), {}, "iterations"),  # was IndexError
        (((0.0, 0.0, 1.0), 2.5), {}, "iterations"),  # was silently int(2.5) = 2 iterations
        (((0.0, 0.0), 2), {}, "x0"),  # was ValueError from a broadcast
        (((0.0, 0.3, 1.0), 2), {}, "x0"),  # m != 0 with q = 0: was the channel's "covariance not PSD" under "m"
        (((0.0, 0.0, 1.0), 2, "0.5"), {}, "damping"),  # was TypeError
        (((0.0, 0.0, 1.0), 2), dict(qmc_log2=-1), "qmc_log2"),  # was TypeError from the Sobol' sampler
        (((0.0, 0.0, 1.0), 2), dict(replicas=0), "replicas"),  # was "Mean of empty slice" then FloatingPointError
        (((0.0, 0.0, 1.0), 2), dict(contour_nodes=0), "contour_nodes"),  # was numpy's "deg must be positive"
    ],
)
def test_damped_state_evolution_bad_input_names_the_parameter(args, kwargs, name):
    from tiedattention.theory.two_time import damped_state_evolution

    pb = Problem.from_options(**REF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning on the way to the error
        with pytest.raises(ParameterError) as exc:
            damped_state_evolution(pb, 0.5, *args, **kwargs)
    assert exc.value.param == name


def test_damped_state_evolution_needs_a_problem():
    from tiedattention.theory.two_time import damped_state_evolution

    with pytest.raises(ParameterError) as exc:
        damped_state_evolution("mp:0.5", 0.5, (0.0, 0.0, 1.0), 2)
    assert exc.value.param == "problem"
