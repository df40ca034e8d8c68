"""The Python API as a newcomer meets it (helper-46's review): bad input through the API, not the CLI, is one
``ParameterError`` naming the parameter, raised before anything is computed, with no other exception chained to
it; and the documented side-by-side workflow (theory curve + simulations) works as documented."""

from __future__ import annotations

import pytest

from tiedattention import ParameterError, Problem, Task


def raises_parameter_error(param: str, fn, *args, **kwargs) -> ParameterError:
    """``fn(*args, **kwargs)`` raises one ParameterError naming ``param``, nothing chained (no traceback of a
    TypeError / ValueError from inside numpy or the dataclass machinery shown above it)."""
    with pytest.raises(ParameterError) as info:
        fn(*args, **kwargs)
    err = info.value
    assert err.param == param, (err.param, str(err))
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__), repr(err.__context__)
    return err


# ------------------------------------------------------------------------------------------------ problem.py
@pytest.mark.parametrize("tokens", ["a", None, [2], "2x"])
def test_tokens_that_are_not_numbers(tokens):
    """tokens='a' was numpy's/float's ValueError, tokens=None a TypeError (both from Task.__post_init__)."""
    err = raises_parameter_error("tokens", Problem.from_options, tokens=tokens)
    assert "integer >= 2" in err.message
    raises_parameter_error("tokens", Task, tokens=tokens)


def test_tokens_as_numbers_still_work():
    import numpy as np

    assert Problem.from_options(tokens=np.int64(3)).task.tokens == 3
    assert Problem.from_options(tokens=4.0).task.tokens == 4
    assert Problem.from_options(tokens="3").task.tokens == 3  # a string that is an integer, as the CLI passes it
    for bad in (0, 1, 2.5, True, float("nan"), float("inf")):
        raises_parameter_error("tokens", Problem.from_options, tokens=bad)


def test_unknown_problem_option_is_named():
    """Problem.from_options(lamda=...) was Python's TypeError; with_options already said 'unknown problem option'.
    Both now name the option and suggest the one meant."""
    for fn in (Problem.from_options, Problem.from_options().with_options, Problem.from_options().replace_student):
        err = raises_parameter_error("lamda", fn, lamda=0.1)
        assert "unknown problem option" in err.message and "lam" in err.message.split("unknown problem option")[1]
    err = raises_parameter_error("kappa0", Problem.from_options, kappa0=0.3)  # kappa0 lives in the target spec
    assert "mp:" in err.message
    for name in ("alpha", "d", "seeds"):  # not "did you mean 'kappa'?" (difflib's closest to alpha)
        err = raises_parameter_error(name, Problem.from_options, **{name: 1})
        assert "not part of the problem" in err.message and "did you mean" not in err.message


def test_replace_student_validates_and_refuses_task_options():
    p = Problem.from_options()
    assert p.replace_student(lam=0.5).student.lam == 0.5
    raises_parameter_error("lam", p.replace_student, lam=-1)
    err = raises_parameter_error("noise", p.replace_student, noise=0.1)  # a task option: with_options changes it
    assert "with_options" in err.message


def test_problem_of_wrong_parts():
    raises_parameter_error("task", Problem, task="seq2lab")
    raises_parameter_error("student", Problem, Task(), {"lam": 0.1})


def test_option_names_are_from_options_keywords():
    import inspect

    from tiedattention.problem import OPTIONS

    params = [n for n, p in inspect.signature(Problem.from_options).parameters.items() if p.kind is p.KEYWORD_ONLY
              or p.kind is p.POSITIONAL_OR_KEYWORD]
    assert sorted(OPTIONS) == sorted(params) == sorted(Problem.from_options().options())
    p = Problem.from_options(lam=0.3, noise=0.2, tokens=3)
    assert Problem.from_options(**p.options()) == p


# ------------------------------------------------------------------------------------------- simulation/api.py
@pytest.mark.parametrize(("param", "kwargs"), [
    ("seeds", {"seeds": "a"}),            # was int()'s ValueError
    ("seeds", {"seeds": None}),           # was a TypeError
    ("n_test", {"n_test": "a"}),          # was int()'s ValueError
    ("seed0", {"seed0": [0]}),            # was a TypeError
    ("rank_tol", {"rank_tol": "a"}),      # was math.isfinite's TypeError
    ("threads", {"threads": "x"}),
    ("d", {"d": "abc"}),
    ("alpha", {"alpha": -1.0}),
    ("problem", {"problem": None}),       # was an AttributeError deep inside
    ("problem", {"problem": "mp:0.5"}),
    ("seed", {"seed": 3}),                # was "got multiple values for keyword argument 'seed'": seed0 is meant
])
def test_simulate_record_bad_arguments(no_sampling, param, kwargs):
    args = {"problem": Problem.from_options(), "alpha": 0.5, "d": 10, "seeds": 1, "solver": "prox", **kwargs}
    raises_parameter_error(param, no_sampling, **args)


@pytest.mark.parametrize(("solver", "option", "theirs"), [
    ("prox", "tol", "rtol"),              # adam's name given to prox: was solve_prox's TypeError after sampling
    ("prox", "max_steps", "max_iter"),
    ("lbfgs", "lr", "rtol"),
    ("adam", "rtol", "tol"),
    ("adam", "foo", "max_steps"),
])
def test_simulate_record_refuses_an_option_the_solver_does_not_take(no_sampling, solver, option, theirs):
    err = raises_parameter_error(option, no_sampling, Problem.from_options(), alpha=0.5, d=10, seeds=1,
                                 solver=solver, **{option: 1})
    assert solver in err.message and theirs in err.message


def test_solver_options_are_the_solvers_keywords():
    pytest.importorskip("torch")
    import inspect

    from tiedattention.simulation import SOLVERS, register_solver
    from tiedattention.simulation.api import solver_options

    for name, fn in SOLVERS.items():  # (gamp, once registered, takes **options: None)
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            assert solver_options(name) is None, name
            continue
        kw = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        assert set(solver_options(name)) == set(kw) - {"seed", "callback"}, name
    assert "lr" in solver_options("adam") and "rtol" in solver_options("prox")

    def anything(problem, obj, *, seed=0, callback=None, **options):  # a **kwargs solver takes any option
        raise NotImplementedError

    register_solver("_api_review_any", anything)
    try:
        assert solver_options("_api_review_any") is None
    finally:
        SOLVERS.pop("_api_review_any")
    raises_parameter_error("solver", solver_options, "sgd")


def test_simulate_record_still_takes_its_solvers_options():
    """The options the solvers do take still reach them: a prox run capped at 3 iterations stops there."""
    pytest.importorskip("torch")
    from tiedattention.simulation import simulate_record

    seen = []
    rec = simulate_record(Problem.from_options(), alpha=0.5, d=10, seeds=1, solver="prox", max_iter=3,
                          callback=lambda step, F, s: seen.append(step), n_test=50)
    assert rec["steps_mean"] == 3 and len(seen) == 3 and rec["converged"] == 0.0


# ------------------------------------------------------------------------------------------------ theory/api.py
def test_theory_records_bad_arguments(monkeypatch):
    """Refused before the first point is solved (the solver is replaced by one that fails the test)."""
    import tiedattention.theory.api as api

    P = Problem.from_options()
    err = raises_parameter_error("tolerance", api.theory_records, P, [0.5], tolerance=1e-8)  # was a TypeError
    assert "'tol'" in err.message
    raises_parameter_error("foo", api.theory_record, P, 0.5, foo=1)
    raises_parameter_error("problem", api.theory_records, None, [0.5])  # was an AttributeError
    raises_parameter_error("problem", api.theory_record, "mp:0.5", 0.5)
    err = raises_parameter_error("alpha", api.theory_records, P, "0.1,0.5")  # was "alpha: must be > 0 (got '0')"
    assert "list of numbers" in err.message

    def fail(*args, **kwargs):
        raise AssertionError("solved a point before validating the arguments")

    monkeypatch.setattr(api.StateEvolution, "solve", fail)
    raises_parameter_error("alpha", api.theory_records, P, [0.5, 1.0, -1.0])  # the bad alpha is last


def test_theory_records_of_one_number_is_a_one_point_curve():
    """theory_records(problem, 0.5) was "'float' object is not iterable"; it is theory_record's point."""
    from tiedattention.theory import StateEvolution, theory_record, theory_records

    P = Problem.from_options()
    one = theory_records(P, 0.5, tol=1e-8)
    assert len(one) == 1
    point = theory_record(P, 0.5, tol=1e-8)
    assert one[0]["test_error"] == pytest.approx(point["test_error"], abs=1e-9)
    assert point["test_error"] == pytest.approx(StateEvolution(P, tol=1e-8).solve(0.5).test_error, abs=1e-12)


def test_theory_option_hints():
    from tiedattention.theory.api import check_options

    assert "channel_options={'order'" in raises_parameter_error("order", check_options, {"order": 24}).message
    assert "'accuracy'" in raises_parameter_error("acuracy", check_options, {"acuracy": 1e-4}).message
    check_options({"tol": 1e-8, "accuracy": None, "channel_options": {"order": 24}})  # the real ones pass


# ------------------------------------------------------------------------------------------------ __init__.py
def test_subpackages_from_the_top_level():
    """`import tiedattention as ta; ta.theory.StateEvolution` was an AttributeError unless ta.theory had been
    imported; now the subpackages load on first use, and importing the package still loads neither torch nor the
    theory."""
    import subprocess
    import sys

    code = ("import sys, tiedattention as ta\n"
            "assert 'torch' not in sys.modules and 'tiedattention.theory' not in sys.modules\n"
            "assert {'theory', 'simulation', 'sweep', 'Problem'} <= set(dir(ta))\n"
            "se = ta.theory.StateEvolution(ta.Problem.from_options())\n"
            "assert 'torch' not in sys.modules\n"
            "try:\n    ta.no_such_thing\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "has no attribute 'no_such_thing'" in out.stdout


# ------------------------------------------------------------------------------------------ side by side (README)
def test_theory_and_simulation_records_share_their_keys():
    """README: a theory record has the simulation record's keys without ``_mean``, in the same normalisation
    (errors per sequence; the objective F = alpha train + penalty per d^2)."""
    pytest.importorskip("torch")
    from tiedattention.simulation import simulate_record
    from tiedattention.theory import theory_record

    P = Problem.from_options(lam=0.01)
    th = theory_record(P, 2.0)
    sim = simulate_record(P, alpha=2.0, d=12, seeds=2, solver="prox", n_test=400)
    for key in ("test_error", "test_error_clean", "train_error", "objective", "mse", "rank"):
        assert key in th and f"{key}_mean" in sim and f"{key}_sem" in sim, key
    assert (th["alpha"], th["alpha_bar"]) == (sim["alpha"], sim["alpha_bar"])
    assert sim["objective_mean"] == pytest.approx(2.0 * sim["train_error_mean"] + sim["penalty_mean"], rel=1e-9)
    assert sim["test_error_mean"] == pytest.approx(th["test_error"], abs=0.03)  # O(1/d) apart at d = 12


def test_sweep_spec_with_a_non_numeric_tokens():
    """A sweep grid with tokens = ["abc"] crashed `tiedattention sweep` with float()'s traceback (Task's check); it
    is the one-line ParameterError of the other bad values."""
    from tiedattention.sweep.spec import parse_spec

    spec = '[grid]\nalpha = [0.5]\ntokens = ["abc"]\n[run]\nroute = "theory"\n'
    err = raises_parameter_error("tokens", parse_spec, spec)
    assert "integer >= 2" in err.message
