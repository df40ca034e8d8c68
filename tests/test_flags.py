"""On/off options take True or False only: a truthy stand-in ("no", 1, a list) used to switch them on silently."""

from __future__ import annotations

import numpy as np
import pytest

from tiedattention.errors import ParameterError
from tiedattention.problem import Problem, validate_flag
from tiedattention.theory.state_evolution import StateEvolution


def test_validate_flag_takes_bools_only():
    assert validate_flag("x", True) is True and validate_flag("x", np.bool_(False)) is False
    assert validate_flag("x", None, none=True) is None
    for bad in ("no", "False", 1, 0, [], None, 1.0):
        with pytest.raises(ParameterError, match=r"^x: must be True or False"):
            validate_flag("x", bad)


@pytest.mark.parametrize("name", ["warm_start", "root_fallback", "fixed_point_errors"])
def test_state_evolution_flags_refuse_truthy_values(name):
    with pytest.raises(ParameterError, match=rf"^{name}: must be True or False.*got 'no'"):
        StateEvolution(Problem.from_options(), **{name: "no"})
    StateEvolution(Problem.from_options(), **{name: False})  # a bool is fine


def test_simulate_record_refuses_a_truthy_return_spectra():
    pytest.importorskip("torch")
    from tiedattention.simulation.api import simulate_record

    with pytest.raises(ParameterError, match=r"^return_spectra: must be True or False"):
        simulate_record(Problem.from_options(), 0.1, 8, seeds=1, return_spectra="yes")
