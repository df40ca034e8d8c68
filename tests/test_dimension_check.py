"""One check of a dimension for the Python API and the CLI (targets.validate_dimension, which
cli_common.check_dimension calls): before session 11 ``Target.measure(d=0)`` was a ZeroDivisionError (power
law), a numpy ValueError (d < 0) or a TypeError (d = 2.5), and ``thresholds(problem, d=0)`` with it."""
import pytest

from tiedattention import Problem
from tiedattention.cli_common import check_dimension
from tiedattention.errors import ParameterError
from tiedattention.targets import validate_dimension
from tiedattention.theory import thresholds


@pytest.mark.parametrize("target", ["mp:0.5", "spikes:3,2,1", "powerlaw:1.25"])
@pytest.mark.parametrize("d", [0, 1, -3, 2.5, True, "x"])
def test_measure_refuses_a_bad_dimension_with_one_named_error(target, d):
    with pytest.raises(ParameterError) as e:
        Problem.from_options(target=target).task.target.measure(d)
    assert e.value.param == "d" and "integer >= 2" in str(e.value)


def test_the_api_and_the_cli_share_the_check():
    with pytest.raises(ParameterError, match="integer >= 2"):
        thresholds(Problem.from_options(target="powerlaw:1.25"), d=0)
    with pytest.raises(ParameterError) as e:
        check_dimension(1, "theory-d")
    assert e.value.param == "theory-d"
    assert validate_dimension(None) is None and validate_dimension(100.0) == 100
    m = Problem.from_options(target="powerlaw:1.25").task.target.measure(100.0)  # an integral float is a dimension
    assert m.q0 == pytest.approx(1.0)


@pytest.mark.parametrize("option", [["--seeds", "3"], ["--solver", "adam"], ["--device", "cpu"]])
def test_spectrum_refuses_simulation_options_without_d(option):
    """`spectrum --seeds/--solver/--device` without --d was silently ignored (no simulation runs without it)."""
    from typer.testing import CliRunner

    from tiedattention.cli import app

    res = CliRunner().invoke(app, ["spectrum", "--alpha", "0.5", *option])
    assert res.exit_code == 2
    assert f"error: {option[0]}: sets the simulation, which needs --d D" in res.output
