"""The Python API of the theory solver and the trainers with bad input (helper-47's review, after helper-46's
tests/test_api_review.py): bad input is one ``ParameterError`` naming the parameter, raised before anything is
solved or sampled, with no other exception chained to it; results read well (``SEResult``'s repr)."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
from test_api_review import raises_parameter_error  # (one ParameterError naming the parameter, nothing chained)

from tiedattention import Problem


@pytest.fixture
def no_solving(monkeypatch):
    """Any state-evolution solve fails the test: the arguments must be refused before one starts."""
    from tiedattention.theory import state_evolution as se

    def fail(*args, **kwargs):
        raise AssertionError("solved a point before validating the arguments")

    monkeypatch.setattr(se.StateEvolution, "solve", fail)
    monkeypatch.setattr(se.StateEvolution, "_solve_regular", fail)
    return se


# --------------------------------------------------------------------------------------- theory/state_evolution.py
@pytest.mark.parametrize("bad", ["mp:0.5", None, {"lam": 0.1}])
def test_state_evolution_of_something_that_is_not_a_problem(no_solving, bad):
    """StateEvolution('mp:0.5') / StateEvolution(None) were AttributeErrors ('str' object has no attribute 'task')."""
    se = no_solving
    err = raises_parameter_error("problem", se.StateEvolution, bad)
    assert "Problem.from_options" in err.message
    raises_parameter_error("problem", se.solve, bad, 0.5)
    raises_parameter_error("problem", se.learning_curve, bad, [0.5])


@pytest.mark.parametrize(("name", "meant"), [("tolerance", "tol"), ("max_iters", "max_iter"), ("dampin", "damping"),
                                             ("order", "channel_options")])
def test_unknown_state_evolution_option_is_named(no_solving, name, meant):
    """StateEvolution(P, tolerance=...) and solve / learning_curve with an unknown option were Python's TypeError
    ('__init__() got an unexpected keyword argument'); now the theory_records message (theory.api.check_options)."""
    from tiedattention.theory.api import theory_records

    se, p = no_solving, Problem.from_options()
    err = raises_parameter_error(name, se.StateEvolution, p, **{name: 1})
    assert "is not an option of the state evolution" in err.message and meant in err.message.split("(its options")[-1]
    assert "tol, max_iter" in err.message  # the list of the options, without the **unknown catch-all
    raises_parameter_error(name, se.solve, p, 0.5, **{name: 1})
    raises_parameter_error(name, se.learning_curve, p, [0.5], **{name: 1})
    other = raises_parameter_error(name, theory_records, p, [0.5], **{name: 1})
    assert other.message == err.message  # one message, whichever entry point


def test_state_evolution_signature_lists_the_options_alone():
    """The **unknown catch-all is hidden from help() and from theory.api.check_options, which lists the options."""
    import inspect

    from tiedattention.theory import StateEvolution

    params = inspect.signature(StateEvolution.__init__).parameters.values()
    assert not any(p.kind is p.VAR_KEYWORD for p in params)
    assert {"tol", "max_iter", "channel_options", "accuracy"} <= {p.name for p in params}


@pytest.mark.parametrize(("name", "value"), [
    ("tol", "a"),             # was '>' not supported between 'str' and 'int'
    ("tol", None),
    ("tol", True),
    ("max_iter", 2.5),        # was accepted
    ("max_iter", "x"),
    ("max_iter", 0),
    ("damping", "0.5"),
    ("damping", 1.5),
    ("anderson", -1),
    ("anderson", 1.5),
    ("stall", 0),
    ("max_step", 0.0),
    ("floor_factor", float("nan")),
    ("max_floor", -1.0),
    ("coarse_tol", "a"),
    ("coarse_spectral_nodes", 0),
    ("pre_tol", -1.0),
    ("branch_switch", "x"),
    ("accuracy", 0.0),
    ("max_order", 1),
    ("channel_options", "order=24"),
    ("rough_options", [1, 2]),
    ("coarse_options", 3),
])
def test_bad_solver_numbers(no_solving, name, value):
    se = no_solving
    raises_parameter_error(name, se.StateEvolution, Problem.from_options(), **{name: value})
    raises_parameter_error(name, se.solve, Problem.from_options(), 0.5, **{name: value})


def test_valid_solver_numbers_are_still_taken():
    """Integral floats, numpy numbers and None (where documented) are accepted; coarse_options=True (was update(True)'s
    TypeError) is the default two-stage solve."""
    import numpy as np

    from tiedattention.theory import StateEvolution

    p = Problem.from_options()
    s = StateEvolution(p, tol=np.float64(1e-9), max_iter=50.0, anderson=np.int64(3), accuracy=None,
                       branch_switch=None, coarse_tol=None, coarse_spectral_nodes=None)
    assert s.tol == 1e-9 and s.max_iter == 50 and isinstance(s.max_iter, int) and s.anderson == 3
    assert s.accuracy is None and s.branch_switch is None
    on, default = StateEvolution(p, coarse_options=True), StateEvolution(p)
    assert on.channel_coarse is not None and on.channel_coarse.order == default.channel_coarse.order
    assert StateEvolution(p, coarse_options=False).channel_coarse is None


@pytest.mark.parametrize("init", [[1, 2], "abc", [1.0, 0.5, float("nan")], [[1, 2, 3]], [-1.0, 0.1, 1.0],
                                  [1.0, 0.1, -1.0]])
def test_bad_warm_start(monkeypatch, init):
    """solve(alpha, init=[1, 2]) was 'not enough values to unpack' from inside the iteration."""
    from tiedattention.theory import state_evolution as se

    def fail(*args, **kwargs):
        raise AssertionError("iterated before validating init")

    s = se.StateEvolution(Problem.from_options())
    monkeypatch.setattr(se.StateEvolution, "_solve_regular", fail)
    raises_parameter_error("init", s.solve, 0.5, init=init)
    raises_parameter_error("init", s.solve_warm, 0.5, init)


def test_the_warm_starts_that_worked_still_do():
    """An SEResult, its x as a list or array, and an interpolating point's x (Sigma = inf, which that phase ignores) are
    still accepted; a warm start from the solved point lands on it."""
    import numpy as np

    from tiedattention.theory import StateEvolution
    from tiedattention.theory.state_evolution import _check_init

    for ok in (None, [1.0, 0.5, 2.0], np.array([1, 0, 1]), (0.3, -0.1, math.inf), [0.0, 0.0, 0.0]):
        _check_init(ok)
    s = StateEvolution(Problem.from_options())
    r = s.solve(0.5)
    for init in (r, r.x, list(r.x)):
        again = s.solve(0.5, init=init)
        assert again.converged and again.test_error == pytest.approx(r.test_error, abs=1e-8)


def test_learning_curve_of_one_number_is_a_one_point_curve(monkeypatch):
    """se.learning_curve(0.5) and learning_curve(P, 0.5) were "'float' object is not iterable"; a string or a bad alpha
    anywhere in the list is refused before the first point is solved."""
    from tiedattention.theory import state_evolution as se

    p = Problem.from_options()
    solver = se.StateEvolution(p)
    calls = []

    def solve(self, a, init=None):
        calls.append(a)
        return SimpleNamespace(alpha=a, converged=False)

    monkeypatch.setattr(se.StateEvolution, "solve", solve)
    assert [r.alpha for r in solver.learning_curve(0.5)] == [0.5] == [r.alpha for r in se.learning_curve(p, 0.5)]
    assert [r.alpha for r in solver.learning_curve([0.5, 1])] == [0.5, 1.0]
    calls.clear()
    for bad in ([0.5, -1.0], [0.5, float("nan")], "0.1,0.5", [0.5, "x"]):
        raises_parameter_error("alpha", solver.learning_curve, bad)
        raises_parameter_error("alpha", se.learning_curve, p, bad)
    raises_parameter_error("alpha", se.solve, p, -0.5)
    assert calls == []


# ------------------------------------------------------------------------------------------- theory/channel.py
@pytest.mark.parametrize(("options", "param"), [
    ({"order": "x"}, "order"),          # was int()'s ValueError
    ({"order": 2.5}, "order"),
    ({"order": None}, "order"),
    ({"qmc_log2": "a"}, "qmc_log2"),
    ({"replicas": [4]}, "replicas"),
    ({"tol": "a"}, "tol"),
    ({"prune": -1.0}, "prune"),
    ({"foo": 1}, "channel_options"),    # was SoftmaxChannel's TypeError
    ({"ordr": 24}, "channel_options"),
])
def test_bad_channel_options(no_solving, options, param):
    from tiedattention.theory.api import theory_records

    se, p = no_solving, Problem.from_options()
    err = raises_parameter_error(param, se.StateEvolution, p, channel_options=options)
    if param == "channel_options":
        key = next(iter(options))
        assert repr(key) in err.message and "qmc_log2" in err.message
        if key == "ordr":
            assert "did you mean 'order'" in err.message
        raises_parameter_error("rough_options", se.StateEvolution, p, rough_options=options)
        raises_parameter_error("coarse_options", se.StateEvolution, p, coarse_options=options)
    raises_parameter_error(param, theory_records, p, [0.5], channel_options=options)


def test_channel_options_still_taken():
    from tiedattention.theory import StateEvolution

    s = StateEvolution(Problem.from_options(), channel_options={"order": 20.0})
    assert s.channel.order == 20 and s.quadrature == "gh20"


# ------------------------------------------------------------------------------------------------- SEResult
def test_seresult_repr_is_short_and_readable():
    """The dataclass repr was ~1,500 characters: every field, the errors dict, np.float64(...) wrappers."""
    import dataclasses

    import numpy as np

    from tiedattention.theory import SEResult, StateEvolution

    r = StateEvolution(Problem.from_options()).solve(0.5)
    r.q = np.float64(r.q)  # as a numpy computation may leave it
    text = repr(r)
    assert len(text) < 400 and "np.float64" not in text and "errors" not in text, text
    for key in ("alpha", "test_error", "mse", "q", "rank", "converged", "iterations", "residual"):
        assert f"{key}=" in text
    fields = dict(part.split("=", 1) for part in text[len("SEResult("):-1].split(", "))
    assert float(fields["test_error"]) == pytest.approx(r.test_error, rel=1e-5)
    assert float(fields["q"]) == pytest.approx(r.q, rel=1e-5)
    assert fields["converged"] == str(r.converged) and int(fields["iterations"]) == r.iterations
    # the fields and the dict conversion are unchanged
    assert r.to_dict() == dataclasses.asdict(r)
    assert list(r.to_dict()) == [f.name for f in dataclasses.fields(SEResult)]
    assert str(r) == text


# ------------------------------------------------------------------------------------------ simulation/trainers.py
@pytest.mark.parametrize(("solver", "name", "value"), [
    ("adam", "lr", -1),               # was torch's ValueError('Invalid learning rate: -1')
    ("adam", "lr", "a"),
    ("adam", "lr", 0.0),
    ("adam", "tol", float("nan")),
    ("adam", "max_steps", 2.5),       # was range()'s TypeError after the first data set
    ("adam", "max_steps", 0),
    ("adam", "min_steps", -1),
    ("adam", "betas", (0.9, 1.0)),    # was torch's ValueError
    ("adam", "betas", 0.9),
    ("adam", "eps", -1e-8),
    ("adam", "stop_on", "abs"),
    ("lbfgs", "max_iter", "x"),
    ("lbfgs", "history_size", 0),
    ("lbfgs", "rtol", -1.0),
    ("lbfgs", "scale", 0.0),
    ("prox", "max_iter", 1.5),
    ("prox", "patience", 0),
    ("prox", "grow", 0.5),
    ("prox", "t0", -1.0),
    ("prox", "rtol", None),
])
def test_bad_solver_option_values(no_sampling, solver, name, value):
    from tiedattention.simulation import sample_dataset, train
    from tiedattention.simulation.trainers import SOLVERS, Objective, TorchData

    p = Problem.from_options()
    raises_parameter_error(name, no_sampling, p, alpha=0.5, d=8, seeds=1, solver=solver, **{name: value})
    data = sample_dataset(p, 10, 6, 0)
    raises_parameter_error(name, train, p, data, solver=solver, **{name: value})
    obj = Objective(p, TorchData.from_dataset(data))  # the solver called directly
    raises_parameter_error(name, SOLVERS[solver], p, obj, **{name: value})


def test_solver_options_that_are_valid_still_reach_the_solver():
    """Integral floats are integers (max_steps=5.0 was range()'s TypeError); numbers as before, bit for bit."""
    pytest.importorskip("torch")
    import numpy as np

    from tiedattention.simulation import sample_dataset, train

    p = Problem.from_options()
    data = sample_dataset(p, 30, 6, 0)
    a = train(p, data, solver="adam", max_steps=5.0, min_steps=2, lr=0.05)
    b = train(p, data, solver="adam", max_steps=5, min_steps=2.0, lr=np.float64(0.05), betas=[0.9, 0.999])
    assert a.steps == b.steps == 5 and np.array_equal(a.S_hat, b.S_hat)
    c = train(p, data, solver="prox", max_iter=4.0, t0=None)
    assert c.steps == 4


def test_simulation_exports_solver_options():
    """solver_options (simulation/api.py, helper-46) was not exported by tiedattention.simulation."""
    pytest.importorskip("torch")
    import tiedattention.simulation as sim

    assert "solver_options" in sim.__all__ and "lr" in sim.solver_options("adam")


# ---------------------------------------------------------------------------------- long runs without warning
class _Built(Exception):
    """Raised in place of building the channel rules: what happened before is all the test needs."""


def _until_channel(monkeypatch, **options) -> list[str]:
    """The RuntimeWarnings of StateEvolution(Problem.from_options(**options)) up to building its channel (order 64
    takes ~30 s at beta > 5.4, so the build is cut short: the warning must come before it)."""
    from tiedattention.theory import state_evolution as se

    def built(*args, **kwargs):
        raise _Built

    monkeypatch.setattr(se, "SoftmaxChannel", built)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(_Built):
            se.StateEvolution(Problem.from_options(**options))
    return [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]


def test_a_softmax_far_sharper_than_the_quadrature_warns_before_any_work(monkeypatch):
    """beta = 1000 took > 2 min per point without a word: the T = 2 channel wants Gauss-Hermite order 12 beta = 12000,
    the cap is 64 (30 s to build the rules, 1-3 s per map evaluation, a point that is meaningless at that order)."""
    (msg,) = _until_channel(monkeypatch, beta=1e3)
    assert msg.startswith("beta = 1000:") and "order 12000 wanted, 64 used" in msg
    (msg,) = _until_channel(monkeypatch, beta0=40)
    assert msg.startswith("beta0 = 40:") and "order 480 wanted" in msg
    # below 4x the cap (beta = 12: 54 s, converged at order 64) and for the QMC rules (T >= 3, output noise): none
    assert _until_channel(monkeypatch, beta=12) == []
    assert _until_channel(monkeypatch, beta=1e3, tokens=3) == []
    assert _until_channel(monkeypatch, beta=1e3, noise_out=0.1) == []


def test_pure_noise_labels_warn_before_any_work(monkeypatch):
    """noise = 1e10 (and 1e8) took > 2 min per point without a word (the iteration wanders, m up to 2e4 while the
    physical |m| <= sqrt(q Q0) ~ 1); 1e6 converges in 25 s and does not warn."""
    from tiedattention.theory.state_evolution import NOISE_WARN

    (msg,) = _until_channel(monkeypatch, noise=1e10)
    assert msg.startswith("noise = 1e+10:") and "pure noise" in msg and "Q0 = 1.5" in msg
    q0 = 1.5  # MP(0.5): Q0 = 1 + kappa0 (the message's number, an independent route: the second moment of MP)
    assert _until_channel(monkeypatch, noise=1e6) == []
    assert len(_until_channel(monkeypatch, noise=2.01 * NOISE_WARN * q0)) == 1
    assert _until_channel(monkeypatch, noise=1.99 * NOISE_WARN * q0) == []
    assert _until_channel(monkeypatch) == []  # the default problem


def test_helper_solvers_do_not_warn_again():
    """The solvers a StateEvolution builds for itself (other Gauss-Hermite orders, the QMC re-solve) stay quiet."""
    from tiedattention.theory import StateEvolution

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        se = StateEvolution(Problem.from_options(noise=1e10))
        se._order_solver(12)
        se._rough_solver()
    assert sum("pure noise" in str(w.message) for w in seen) == 1


# ---------------------------------------------------- train() / simulate_record: their own arguments, before work
@pytest.mark.parametrize(("name", "kwargs"), [
    ("chunk", {"chunk": "a"}),          # was int()'s ValueError
    ("chunk", {"chunk": -5}),
    ("dtype", {"dtype": "float64"}),    # was torch's TypeError (as_tensor)
    ("dtype", {"dtype": "int64"}),
    ("callback", {"callback": 5}),      # was "'int' object is not callable" after the first step
    ("seed", {"seed": "a"}),            # was accepted by prox (which has no random start)
    ("seed", {"seed": -1}),
    ("problem", {"problem": "mp:0.5"}),  # was an AttributeError
    ("data", {"data": None}),           # was an AttributeError
])
def test_train_arguments(name, kwargs):
    pytest.importorskip("torch")
    import torch

    from tiedattention.simulation import sample_dataset, train, trainers

    if name == "dtype" and kwargs["dtype"] == "int64":
        kwargs = {"dtype": torch.int64}
    p = Problem.from_options()
    args = {"problem": p, "data": sample_dataset(p, 10, 6, 0), "solver": "prox", **kwargs}
    with pytest.MonkeyPatch.context() as mp:  # refused before the data reach the device
        mp.setattr(trainers.TorchData, "from_dataset", lambda *a, **k: pytest.fail("built the data first"))
        raises_parameter_error(name, train, **args)


@pytest.mark.parametrize(("name", "kwargs"), [
    ("progress", {"progress": 5}),      # was "'int' object is not callable" after the first seed was trained
    ("callback", {"callback": 5}),
    ("chunk", {"chunk": "a"}),
    ("dtype", {"dtype": "float64"}),
])
def test_simulate_record_train_arguments(no_sampling, name, kwargs):
    raises_parameter_error(name, no_sampling, Problem.from_options(), alpha=0.5, d=8, seeds=1, solver="prox", **kwargs)


def test_learning_curve_progress_is_a_function(no_solving):
    """se.learning_curve(alphas, progress=5) was "'int' object is not callable" after the first point."""
    from tiedattention.theory.api import theory_records

    se, p = no_solving, Problem.from_options()
    raises_parameter_error("progress", se.StateEvolution(p).learning_curve, [0.5], progress=5)
    raises_parameter_error("progress", theory_records, p, [0.5], progress=5)
