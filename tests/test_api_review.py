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
