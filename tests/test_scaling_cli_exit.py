"""scaling command: the exit status and the options it cannot use (session 11, in line with theory, spectrum and
decompose: a point that did not converge gives exit 1 and one stderr line; an option that would be ignored is
refused)."""
import json

from typer.testing import CliRunner

import tiedattention.theory.scaling as scaling_theory
from tiedattention.cli import app


def test_lam_is_refused_because_the_rule_sets_lambda():
    res = CliRunner().invoke(app, ["scaling", "--lam", "0.001", "--points", "3"])
    assert res.exit_code == 2
    assert "--lam" in res.output and "--lam-rule fixed:0.001" in res.output


def test_a_point_that_did_not_converge_gives_exit_1_with_json_and_table(monkeypatch):
    """The curve is stubbed (a power law excess ~ nu^-0.6 with its middle point unconverged) so that the test
    checks the command's handling, not the solver: the fit uses the 4 converged points (exponent 0.6 exactly),
    the records still all come out, and the exit status is 1 with one warning naming the failed nu."""
    nus = [1e3, 1e4, 1e5, 1e6, 1e7]

    def fake_limit_curve(problem, grid, rule, progress=None, **options):
        out = []
        for i, nu in enumerate(grid):
            if progress:
                progress()
            out.append({"nu": float(nu), "lam_t": 0.1, "test_error": 0.1 + nu**-0.6, "excess": nu**-0.6,
                        "k_star": 5, "converged": i != 2, "message": "stub"})
        return out

    monkeypatch.setattr(scaling_theory, "limit_curve", fake_limit_curve)
    args = ["scaling", "--n-range", f"{nus[0]}:{nus[-1]}", "--points", "5", "--kmin", "0"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 1
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 6 and lines[-1]["summary"] and lines[-1]["all_converged"] is False
    assert abs(lines[-1]["fitted_exponent"] - 0.6) < 1e-9
    assert "1 of 5 points did not converge (n/d = 1e+05)" in res.output
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 1 and "did not converge" in table.output
