"""Warnings in the CLI are one line each, and extreme label noise is not a traceback.

Before (session 12): ``tiedattention theory --alpha 0.5 --noise 1e7`` printed Python's warning format (file path,
line, source) and then died with ``OverflowError`` in ``FreeConvolution`` (delta = sqrt(q_hat)/m_hat with an iterate's
m_hat ~ 1e-160: ``delta**2`` overflows). Now the map refuses such conjugates as it refuses m_hat <= 0, so the solver
steps back and, failing that, reports the point as not converged (exit 1); since helper-48's large-noise route the
point converges.
"""

from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from tiedattention import Problem
from tiedattention.cli import app, warning_line
from tiedattention.theory.denoisers import matrix_update


def test_warning_line_is_one_line_without_the_source():
    assert warning_line(RuntimeWarning("a\n  b"), RuntimeWarning) == "warning: a b"

    class ConvergenceWarning(UserWarning):
        pass

    assert warning_line("x", ConvergenceWarning) == "warning: ConvergenceWarning: x"


def test_warnings_inside_a_command_are_one_line(monkeypatch):
    import sys

    import tiedattention.theory  # noqa: F401  (the package's `thresholds` is the function; the module is here:)
    module = sys.modules["tiedattention.theory.thresholds"]
    original = module.thresholds

    def warned(*a, **k):  # `thresholds` warns on its way; the thresholds are computed as usual
        warnings.warn("first line\nsecond line", RuntimeWarning, stacklevel=2)
        return original(*a, **k)

    monkeypatch.setattr(module, "thresholds", warned)
    res = CliRunner().invoke(app, ["thresholds", "--noise", "0.1"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if "first line" in ln]
    assert lines == ["warning: first line second line"], res.stderr
    assert ".py:" not in res.stderr  # no file:line of Python's format


def test_overflowing_delta_is_refused_like_a_negative_m_hat():
    problem = Problem.from_options()
    measure = problem.task.target.measure(None)
    with pytest.raises(FloatingPointError, match="overflows"):
        matrix_update(problem, measure, 0.46, 1e-160, 0.3)
    with pytest.raises(FloatingPointError, match="admissible"):
        matrix_update(problem, measure, 0.46, -1e-3, 0.3)
    ms = matrix_update(problem, measure, 0.46, 4e-4, 0.3)  # the largest delta a converged point has (noise 2e6)
    assert ms.q > 0 and ms.delta == pytest.approx(0.46**0.5 / 4e-4)


@pytest.mark.slow
def test_extreme_noise_is_solved_not_a_traceback():
    """Before: OverflowError traceback. With the large-noise route (Stein conjugates on QMC, continuation in the
    noise; docs/theory/state_evolution.md "Large logit noise") the point converges onto the pure-noise plateau:
    test error 1.9009 / 1.9025 / 1.9030 at noise 1e6 / 1e7 / 1e8 (QMC error 1.1e-3); the ERM at noise 1e7 reads
    1.872 +- 0.016 (d = 40) and 1.908 +- 0.017 (d = 80, 4 seeds, prox). The plateau was 1.808 / 1.8095 before the
    prox's start pool (a4336df; the SE's prox had kept non-global minima) and the warm-branch stages (7703b99)."""
    import json

    res = CliRunner().invoke(app, ["theory", "--alpha", "0.5", "--noise", "1e7", "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    assert rec["converged"] and 1.89 < rec["test_error"] < 1.91, rec
