"""Trainers reach the same minimiser; records follow the contract; seeds reproduce bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tiedattention import ParameterError, Problem  # noqa: E402
from tiedattention.simulation import (  # noqa: E402
    SOLVERS,
    Solution,
    combined_sem,
    objective_at,
    register_solver,
    sample_dataset,
    simulate_record,
    train,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def routes_d40():
    """d = 40, alpha = 0.5 (n = 800), kappa = 1, lam = 0.01: Adam (study protocol), L-BFGS, prox."""
    torch.set_num_threads(1)
    pb = Problem.from_options(lam=0.01, kappa=1.0)
    data = sample_dataset(pb, 800, 40, 0)
    return pb, data, {s: train(pb, data, solver=s, seed=0) for s in ("adam", "lbfgs", "prox")}


def test_three_routes_reach_the_same_objective(routes_d40):
    pb, data, res = routes_d40
    F = {s: r.objective for s, r in res.items()}
    best = min(F.values())
    for s, r in res.items():
        assert r.converged, (s, r.message)
        assert (F[s] - best) / best < 1e-5, F
    # the study's Adam protocol stops after a few hundred steps here
    assert 100 < res["adam"].steps < 600
    # objective/d^2 = alpha * train_error + lam Tr S / d, recomputed independently
    r = res["prox"]
    alpha = data.n / 40**2
    assert r.objective == pytest.approx(alpha * r.train_error + 0.01 * np.trace(r.S_hat) / 40, rel=1e-12)
    assert objective_at(pb, data, r.S_hat) == pytest.approx(r.objective, rel=1e-12)


def test_weight_decay_is_the_nuclear_norm(routes_d40):
    """The W solution's penalty lam sqrt(d/p)||W||^2 equals lam d Tr S of the S (prox) solution."""
    pb, data, res = routes_d40
    d = 40
    W = res["lbfgs"].W
    p = W.shape[0]
    pen_W = 0.01 * math.sqrt(d / p) * (W**2).sum() / d**2
    pen_S = 0.01 * d * np.trace(res["prox"].S_hat) / d**2
    assert pen_W == pytest.approx(pen_S, rel=2e-3)
    assert res["prox"].penalty == pytest.approx(pen_S, rel=1e-12)
    # and the solutions themselves agree
    diff = np.linalg.norm(res["lbfgs"].S_hat - res["prox"].S_hat) / np.linalg.norm(res["prox"].S_hat)
    assert diff < 1e-2
    # the prox solution is exactly low rank (PSD, zeros), W is reconstructed from it
    ev = np.linalg.eigvalsh(res["prox"].S_hat)
    assert ev.min() > -1e-12 and np.sum(ev < 1e-12) >= 5
    Wp = res["prox"].W
    np.testing.assert_allclose(Wp.T @ Wp / math.sqrt(p * d), res["prox"].S_hat, atol=1e-12)


def test_narrow_student_rank_constraint():
    """kappa = 0.25 < 1: W (p = 5, d = 20) and prox with rank <= p reach the same objective."""
    pb = Problem.from_options(lam=0.001, kappa=0.25)
    data = sample_dataset(pb, 400, 20, 1)
    a = train(pb, data, solver="lbfgs", seed=1)
    b = train(pb, data, solver="prox", seed=1)
    assert a.W.shape == (5, 20) and b.W.shape == (5, 20)
    assert np.linalg.matrix_rank(b.S_hat, tol=1e-10) <= 5
    assert abs(a.objective - b.objective) / b.objective < 1e-4


def test_direct_model_routes_agree():
    pb = Problem.from_options(model="direct", lam=0.01)
    data = sample_dataset(pb, 300, 15, 2)
    res = {s: train(pb, data, solver=s, seed=2) for s in ("lbfgs", "prox", "adam")}
    best = min(r.objective for r in res.values())
    assert (res["prox"].objective - best) / best < 1e-12
    # a smooth problem without flat directions: L-BFGS (which sees F in float64) reaches the minimum too
    assert (res["lbfgs"].objective - best) / best < 1e-9
    assert (res["adam"].objective - best) / best < 1e-4
    assert res["prox"].W is None
    ev = np.linalg.eigvalsh(res["prox"].S_hat)
    assert ev.min() < 0  # no PSD constraint in the direct model
    assert res["prox"].penalty == pytest.approx(0.01 * (res["prox"].S_hat ** 2).sum() / 15, rel=1e-12)


def test_seeds_reproduce_bit_for_bit():
    pb = Problem.from_options()
    kw = dict(seeds=2, solver="adam", n_test=200, max_steps=120, return_spectra=True)
    a = simulate_record(pb, 0.5, 12, **kw)
    b = simulate_record(pb, 0.5, 12, **kw)
    for k in ("test_error_mean", "train_error_mean", "objective_mean", "mse_mean"):
        assert a[k] == b[k]
    np.testing.assert_array_equal(a["eigenvalues"], b["eigenvalues"])
    c = simulate_record(pb, 0.5, 12, seed0=1, **kw)
    assert c["objective_mean"] != a["objective_mean"]
    data = sample_dataset(pb, 50, 12, 3)
    r1, r2 = (train(pb, data, solver=s, seed=3) for s in ("lbfgs", "lbfgs"))
    np.testing.assert_array_equal(r1.S_hat, r2.S_hat)


def test_record_contract_and_uniform_predictor_scale():
    pb = Problem.from_options()
    rec = simulate_record(pb, 0.25, 16, seeds=2, solver="prox", n_test=2000)
    for k in ("alpha", "d", "n", "seeds", "test_error_mean", "test_error_std", "test_error_clean_mean",
              "train_error_mean", "mse_mean", "rank_mean", "seconds", "test_error_sem", "objective_mean",
              "solver", "device", "converged", "steps_mean"):
        assert k in rec, k
    assert rec["n"] == 64 and rec["seeds"] == 2 and rec["solver"] == "prox" and rec["device"] == "cpu"
    assert rec["converged"] == 1.0
    # errors are per sequence, summed over the T^2 entries: between 0 and the uniform predictor's ~0.44
    assert 0.0 < rec["test_error_clean_mean"] < rec["test_error_mean"] < 0.6
    assert rec["train_error_mean"] < rec["test_error_mean"]
    assert 0 < rec["rank_mean"] <= 1
    assert rec["test_error_sem"] > 0


def test_combined_sem():
    v = np.array([1.0, 1.2, 0.8, 1.0])
    assert combined_sem(v, np.full(4, 0.01)) == pytest.approx(v.std(ddof=1) / 2)
    assert combined_sem(v, np.full(4, 1.0)) == pytest.approx(0.5)
    assert combined_sem(np.array([1.0]), np.array([0.3])) == pytest.approx(0.3)


def test_seq2seq_and_seq2lab_test_errors_agree():
    """(1/d)||(A - Ahat) X||^2 -> ||A - Ahat||^2: the two tasks' test errors agree within statistical error."""
    out = {}
    for task in ("seq2lab", "seq2seq"):
        pb = Problem.from_options(task=task)
        out[task] = simulate_record(pb, 1.0, 24, seeds=3, solver="prox", n_test=3000)
    a, b = out["seq2lab"], out["seq2seq"]
    for key in ("test_error", "test_error_clean"):
        gap = abs(a[f"{key}_mean"] - b[f"{key}_mean"])
        tol = 3 * math.hypot(a[f"{key}_sem"], b[f"{key}_sem"])
        assert gap < tol, (key, a[f"{key}_mean"], b[f"{key}_mean"], tol)
    assert abs(a["mse_mean"] - b["mse_mean"]) < 0.2 * a["mse_mean"]


def test_registry_dispatch_and_nan_is_never_silent():
    def bad(problem, obj, *, seed, callback=None, **kw):
        d = obj.d
        return Solution(torch.full((d, d), float("nan"), dtype=torch.float64), None, 1, True, "nan on purpose")

    register_solver("nan-test", bad)
    try:
        pb = Problem.from_options()
        data = sample_dataset(pb, 20, 6, 0)
        r = train(pb, data, solver="nan-test")
        assert r.converged is False and "non-finite" in r.message
        rec = simulate_record(pb, 0.5, 6, seeds=1, solver="nan-test", n_test=10)
        assert rec["converged"] == 0.0 and math.isnan(rec["test_error_mean"])
        with pytest.raises(ValueError):
            register_solver("nan-test", bad)
    finally:
        SOLVERS.pop("nan-test")


def test_bad_inputs_raise_parameter_errors():
    pb = Problem.from_options()
    with pytest.raises(ParameterError) as e:
        simulate_record(pb, 0.5, 10, device="cuda" if not torch.cuda.is_available() else "tpu")
    assert e.value.param == "device"
    for kwargs, param in [
        (dict(alpha=-1.0, d=10), "alpha"),
        (dict(alpha=0.5, d=1), "d"),
        (dict(alpha=0.5, d=10, seeds=0), "seeds"),
        (dict(alpha=0.5, d=10, solver="sgd"), "solver"),
        (dict(alpha=1e-4, d=10), "alpha"),
    ]:
        with pytest.raises(ParameterError) as e:
            simulate_record(pb, **kwargs)
        assert e.value.param == param
    data = sample_dataset(pb, 10, 5, 0)
    with pytest.raises(ParameterError):
        train(pb, data, solver="sgd")


def test_prox_start_is_projected_and_reaches_the_same_minimiser(routes_d40):
    """``init``: any square start is symmetrised and projected (PSD); from the minimiser the solver stays put, and
    from an indefinite, non-symmetric start at lam = 0.01 it reaches the same minimiser as from S = 0."""
    pb, data, res = routes_d40
    ref = res["prox"]
    again = train(pb, data, solver="prox", init=ref.S_hat)
    assert again.steps < ref.steps / 3
    assert again.objective <= ref.objective * (1 + 1e-12)
    rng = np.random.default_rng(5)
    wild = train(pb, data, solver="prox", init=rng.standard_normal((40, 40)))
    assert wild.converged
    assert abs(wild.objective - ref.objective) / ref.objective < 1e-9
    assert np.linalg.norm(wild.S_hat - ref.S_hat) / np.linalg.norm(ref.S_hat) < 1e-4
    for bad in (np.zeros((39, 40)), np.full((40, 40), np.nan)):
        with pytest.raises(ParameterError) as e:
            train(pb, data, solver="prox", init=bad)
        assert e.value.param == "init"
