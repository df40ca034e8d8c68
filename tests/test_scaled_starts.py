"""``simulate_record(..., scaled_starts=...)``, ``simulate --scaled-starts``, the sweep setting ``scaled_starts``.

The objective is not convex in S. At large logit noise and small lambda the state evolution's fixed point is a
large-norm branch (docs/theory/state_evolution.md, "Large logit noise: past the fold"), and prox from S = 0 ends on
a small-norm minimiser of higher objective (MP kappa0 = 0.2, Delta = 2, lambda = 1e-3, alpha = 0.5). A scaled start
re-solves from s x S_hat and keeps the lowest objective, which is how a user compares simulation and theory there.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from tiedattention.cli import app  # noqa: E402
from tiedattention.errors import ParameterError  # noqa: E402
from tiedattention.problem import Problem  # noqa: E402
from tiedattention.simulation import api, check_scaled_starts, simulate_record  # noqa: E402

PAST_FOLD = Problem.from_options(target="mp:0.2", noise=2, lam=1e-3)


@pytest.mark.parametrize("value, expected", [
    ("3,10", (3.0, 10.0)), (" 3 ", (3.0,)), (3, (3.0,)), (0.5, (0.5,)), ([3, 10.0], (3.0, 10.0)), ((), ()),
    (None, ()),
])
def test_scales_are_read_from_every_spelling(value, expected):
    assert check_scaled_starts(value, "prox") == expected


@pytest.mark.parametrize("value, solver, fragment", [
    ("x", "prox", "cannot read"), ("3,,y", "prox", "cannot read"), ("", "prox", "at least one"),
    (" , ", "prox", "at least one"), (0, "prox", "> 0"), (-3, "prox", "> 0"),
    (float("nan"), "prox", "> 0"), (float("inf"), "prox", "> 0"), ("3,0", "prox", "> 0"), (True, "prox", "numbers"),
    (["a"], "prox", "numbers"), ({"s": 3}, "prox", "numbers"), (3, "adam", "solver 'prox' only"),
    ("3", "lbfgs", "solver 'prox' only"),
])
def test_bad_scales_name_the_parameter(value, solver, fragment):
    with pytest.raises(ParameterError) as exc:
        check_scaled_starts(value, solver)
    assert exc.value.param == "scaled_starts" and fragment in exc.value.message


def test_no_scales_is_fine_for_every_solver():
    for solver in ("adam", "lbfgs", "prox"):
        assert check_scaled_starts((), solver) == ()


def _res(F, converged=True, steps=10, seconds=1.0, S=None):
    return SimpleNamespace(objective=F, converged=converged, steps=steps, seconds=seconds,
                           S_hat=np.eye(2) if S is None else S)


@pytest.fixture
def fake_train(monkeypatch):
    """api.train replaced: returns the queued results in order and records each call's keyword arguments."""
    calls, queue = [], []

    def train(problem, data, **kwargs):
        calls.append(kwargs)
        return queue.pop(0)

    monkeypatch.setattr(api, "train", train)
    return calls, queue


def test_the_lowest_converged_objective_is_kept(fake_train):
    calls, queue = fake_train
    first = _res(1.0, S=2.0 * np.eye(2))
    queue += [_res(0.95), _res(0.9, converged=False), _res(0.97)]
    best, start, steps, seconds = api._best_of_scaled_starts(None, None, first, (3.0, 10.0, 30.0), "cpu", 7,
                                                             {"rtol": 1e-10, "init": np.zeros((2, 2))})
    assert (best.objective, start) == (0.95, 3.0)  # the unconverged 0.9 is not a minimiser
    assert (steps, seconds) == (40, 4.0)  # every start counts
    for kw, s in zip(calls, (3.0, 10.0, 30.0), strict=True):
        assert kw["solver"] == "prox" and kw["seed"] == 7 and kw["rtol"] == 1e-10
        np.testing.assert_array_equal(kw["init"], s * 2.0 * np.eye(2))  # the user's init: replaced by s x S_hat


def test_the_same_minimiser_found_again_is_not_a_new_start(fake_train):
    _, queue = fake_train
    queue += [_res(1.0 - 1e-12), _res(1.0 + 1e-3)]
    best, start, *_ = api._best_of_scaled_starts(None, None, _res(1.0), (3.0, 10.0), "cpu", 0, {})
    assert (best.objective, start) == (1.0, 0.0)


def test_a_converged_start_replaces_an_unconverged_first(fake_train):
    _, queue = fake_train
    queue += [_res(2.0)]
    best, start, *_ = api._best_of_scaled_starts(None, None, _res(1.0, converged=False), (3.0,), "cpu", 0, {})
    assert (best.objective, best.converged, start) == (2.0, True, 3.0)


def test_a_non_finite_first_solution_is_not_scaled(fake_train):
    calls, _ = fake_train
    first = _res(float("nan"), converged=False, S=np.full((2, 2), np.nan))
    assert api._best_of_scaled_starts(None, None, first, (3.0,), "cpu", 0, {})[1] == 0.0
    assert calls == []


@pytest.fixture(scope="module")
def past_fold_records():
    """d = 40, seeds 0-1 (~10 s): from S = 0 and with a start at 3 x S_hat."""
    kw = dict(seeds=2, solver="prox", threads=1, n_test=1000)
    return simulate_record(PAST_FOLD, 0.5, 40, **kw), simulate_record(PAST_FOLD, 0.5, 40, scaled_starts=3, **kw)


def test_a_scaled_start_finds_the_lower_large_norm_minimiser(past_fold_records):
    """Seed 0: from 3 x S_hat prox ends at q ~ 77 (test error 0.82), objective 0.06835, below the S = 0 minimiser's
    0.06873 (q ~ 1.7, test error 0.41); kept. Seed 1: the start ends higher (0.0822 > 0.0818); S = 0's is kept."""
    plain, scaled = past_fold_records
    assert "start_scale" not in plain and "from_scaled_start" not in plain
    assert scaled["scaled_starts"] == [3.0] and scaled["start_scale"] == [3.0, 0.0]
    assert scaled["from_scaled_start"] == 0.5 and scaled["converged_all"]
    assert scaled["objective_mean"] < plain["objective_mean"] - 1e-4
    assert scaled["test_error_mean"] > plain["test_error_mean"] + 0.1  # the large-norm branch: SE 0.882 at d = inf
    assert scaled["steps_mean"] > plain["steps_mean"]  # both starts counted


def test_where_there_is_one_minimiser_the_first_solve_is_kept(torch_one_thread):
    """The default problem at lambda = 0.01, alpha = 0.5 has one minimiser (tests/test_simulation_trainers.py): the
    starts at 3x and 10x S_hat come back to it, within START_MARGIN, so the record is the plain one."""
    pb = Problem.from_options(lam=0.01)
    kw = dict(seeds=2, solver="prox", threads=1, n_test=500)
    plain = simulate_record(pb, 0.5, 30, **kw)
    scaled = simulate_record(pb, 0.5, 30, scaled_starts="3,10", **kw)
    assert scaled["start_scale"] == [0.0, 0.0] and scaled["from_scaled_start"] == 0.0
    for key in ("objective_mean", "test_error_mean", "mse_mean"):
        assert scaled[key] == plain[key]
    assert scaled["steps_mean"] > plain["steps_mean"]


def test_the_cli_option_gives_the_fields_and_the_column():
    base = ["simulate", "--target", "mp:0.2", "--noise", "2", "--lam", "1e-3", "--alpha", "0.5", "--d", "12",
            "--seeds", "1", "--n-test", "50", "--solver", "prox", "--threads", "1"]
    runner = CliRunner()
    res = runner.invoke(app, [*base, "--scaled-starts", "3,10", "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout.strip().splitlines()[0])
    assert rec["scaled_starts"] == [3.0, 10.0] and len(rec["start_scale"]) == 1
    assert rec["start_scale"][0] in (0.0, 3.0, 10.0)
    res = runner.invoke(app, [*base, "--scaled-starts", "3"], env={"COLUMNS": "150"})
    assert res.exit_code == 0 and "scaled" in res.stdout and "s in 3" in res.stdout


def test_theory_warns_where_the_se_reports_the_large_norm_branch(capsys):
    """The SE messages of the two cases (state_evolution._scaled_starts) trigger the warning, once, with the alphas;
    an ordinary message, an unconverged point, the Delta-continuation's "cold start stalled, continued ..." (it
    matched the first version's "cold start stalled") or a run with scaled starts do not."""
    from tiedattention.commands.simulate import _warn_large_norm_branch

    recs = {(0.5, None): {"alpha": 0.5, "converged": True, "message": "...; two fixed points: this one ..."},
            (0.3, None): {"alpha": 0.3, "converged": True, "message": "cold start stalled at q = 2.7 ..."},
            (0.1, None): {"alpha": 0.1, "converged": True, "message": "converged"},
            (0.7, None): {"alpha": 0.7, "converged": False, "message": "two fixed points: this one ..."},
            (0.9, None): {"alpha": 0.9, "converged": True, "message": "...; cold start stalled, continued from the "
                                                                       "fixed point at Delta = 1e+05"}}
    _warn_large_norm_branch(recs, "adam", False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: α = 0.3, 0.5: ")
    assert "use --solver prox --scaled-starts 3" in err[0]
    _warn_large_norm_branch(recs, "prox", False)
    assert "add --scaled-starts 3" in capsys.readouterr().err
    _warn_large_norm_branch(recs, "prox", True)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("args, fragment", [
    (["--scaled-starts", "x"], "cannot read"), (["--scaled-starts", "0"], "> 0"),
    (["--scaled-starts", "3", "--solver", "adam"], "solver 'prox' only"),
])
def test_bad_cli_scales_are_one_line(args, fragment):
    base = ["simulate", "--alpha", "0.5", "--d", "8", "--seeds", "1", "--solver", "prox"]
    res = CliRunner().invoke(app, [*base, *args])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --scaled-starts: ") and fragment in err[0]
    assert res.stdout == ""


@pytest.mark.parametrize("run, ok", [('solver = "prox"\nscaled_starts = "3,10"', True),
                                     ('solver = "prox"\nscaled_starts = 3', True),
                                     ('solver = "adam"\nscaled_starts = 3', False),
                                     ('solver = "prox"\nscaled_starts = -1', False)])
def test_the_sweep_setting_is_checked_before_the_store(tmp_path, run, ok):
    from tiedattention.sweep.routes import check_route
    from tiedattention.sweep.spec import parse_spec

    spec = parse_spec(f'[grid]\nalpha = [0.5]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 1\n{run}\n')
    if ok:
        check_route("simulate", spec.settings)
    else:
        with pytest.raises(ParameterError) as exc:
            check_route("simulate", spec.settings)
        assert exc.value.param == "scaled_starts" and "[run]" in exc.value.message


def test_a_sweep_stores_the_scaled_start_fields(tmp_path):
    """The setting reaches simulate_record through the route, and the per-seed list survives the store."""
    from tiedattention.sweep.store import Store

    spec = tmp_path / "grid.toml"
    spec.write_text('[grid]\nalpha = [0.5]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 2\nn_test = 50\n'
                    'solver = "prox"\nscaled_starts = "3,10"\n')
    res = CliRunner().invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "s"), "--no-progress"])
    assert res.exit_code == 0, res.output
    row = Store(tmp_path / "s").read_table(warn=False).iloc[0]
    assert row["scaled_starts"] == "3,10" and 0.0 <= row["from_scaled_start"] <= 1.0
    assert len(row["start_scale"]) == 2 and set(row["start_scale"]) <= {0.0, 3.0, 10.0}
