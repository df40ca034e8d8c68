"""Local executor and the ``sweep`` command: resume, crashed workers, a driver killed with SIGKILL, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tiedattention.errors import ParameterError
from tiedattention.sweep import Store, parse_spec, run_sweep
from tiedattention.sweep.routes import _unit_hash
from tiedattention.sweep.spec import canonical_json

# run-dependent columns; everything else must be identical between an interrupted+resumed and a clean run
RUN_COLUMNS = ["pid", "worker_pid", "worker_host", "started_at", "seconds"]

# The sweep command on its own typer app (the package app may not offer sub-commands while it has one).
CLI = """
import typer
from tiedattention.commands.sweep import register
app = typer.Typer(pretty_exceptions_enable=False)
@app.callback()
def main():
    pass
register(app)
app()
"""


def _spec_text(n: int, sleep: float) -> str:
    alphas = ", ".join(str(round(0.1 * (i + 1), 3)) for i in range(n))
    return f'[grid]\nalpha = [{alphas}]\n[run]\nroutes = ["sleep"]\nsleep = {sleep}\n'


def _expected_values(spec) -> list[float]:
    return [_unit_hash(canonical_json(c.params)) for c in spec.cells]


def _sigint_default() -> None:
    """In the child before exec: SIGINT back to its default disposition. A test run started as a background job
    of a shell without job control (``make test &``, nohup) inherits SIGINT *ignored*, and Python then installs no
    KeyboardInterrupt handler, so the Ctrl-C test's signal was dropped and the sweep ran to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLI, "sweep", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, preexec_fn=_sigint_default, **kw,
    )


def _wait_for_cells(store: Store, n: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(store.done_keys()) < n:
        if proc.poll() is not None:
            raise AssertionError(f"sweep exited early: {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError("no cells written in time")
        time.sleep(0.05)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------------------------------
def test_local_sweep_then_resume_skips_finished_cells(tmp_path):
    spec = parse_spec(_spec_text(6, 0.0))
    store = Store(tmp_path / "s")
    first = run_sweep(spec, store, max_workers=2, progress=False)
    assert (first.total, first.skipped, first.computed, first.failed) == (6, 0, 6, 0)
    df = first.table()
    assert np.allclose(df["value"], _expected_values(spec))
    assert set(df["worker_pid"]) - {os.getpid()}  # computed in worker processes, not in the driver
    # lose two cells; the rest must be skipped, untouched
    lost = spec.keys[1], spec.keys[4]
    for k in lost:
        store.path_for(k).unlink()
    before = {k: store.path_for(k).stat().st_mtime_ns for k in spec.keys if k not in lost}
    again = run_sweep(spec, store, max_workers=2, progress=False)
    assert (again.skipped, again.computed, again.failed) == (4, 2, 0)
    assert {k: store.path_for(k).stat().st_mtime_ns for k in before} == before
    assert store.writes == 6 + 2
    assert np.allclose(again.table()["value"], _expected_values(spec))
    third = run_sweep(spec, store, max_workers=2, progress=False)
    assert (third.skipped, third.computed) == (6, 0)


def crash_route(params):
    """A route for the test below: kills its worker process (once for alpha 0.2, always for alpha 0.3)."""
    marker = Path(os.environ["TA_SWEEP_TEST_DIR"]) / f"crashed-{params['alpha']}"
    if params["alpha"] == 0.3 or (params["alpha"] == 0.2 and not marker.exists()):
        marker.touch()
        os._exit(3)
    return {"value": params["alpha"] * 10, "pid": os.getpid()}


def test_crashed_worker_is_replaced_and_cells_retried(tmp_path, monkeypatch):
    monkeypatch.setenv("TA_SWEEP_TEST_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # workers import this module by name
    spec = parse_spec(
        {"grid": {"alpha": [0.1, 0.2, 0.3, 0.4]}, "run": {"routes": [f"{__name__}:crash_route"]}}
    )
    store = Store(tmp_path / "s")
    summary = run_sweep(spec, store, max_workers=1, progress=False, retries=1)
    # 0.2 died once and succeeded on retry; 0.3 dies every time: reported, not stored; the others done
    assert summary.computed == 3 and summary.failed == 1
    bad = spec.keys[2]
    assert list(summary.failures) == [bad] and "died 2 times" in summary.failures[bad]
    df = summary.table()
    assert list(df["alpha"]) == [0.1, 0.2, 0.4] and list(df["value"]) == [1.0, 2.0, 4.0]
    assert bad not in store.done_keys()


def raising_route(params):
    """Raises the project's ParameterError, whose custom __init__ does not unpickle by itself."""
    if params["alpha"] == 0.2:
        raise ParameterError("sigma", "must be finite and > 0 (got 0.0)")
    return {"value": params["alpha"]}


def test_route_exception_is_a_failed_cell_not_a_crashed_worker(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec = parse_spec({"grid": {"alpha": [0.1, 0.2, 0.3]}, "run": {"routes": [f"{__name__}:raising_route"]}})
    summary = run_sweep(spec, tmp_path / "s", max_workers=1, progress=False)
    assert summary.computed == 2 and list(summary.failures) == [spec.keys[1]]
    assert summary.failures[spec.keys[1]] == "ParameterError: sigma: must be finite and > 0 (got 0.0)"
    assert spec.keys[1] not in summary.store.done_keys()


# --------------------------------------------------------------------------------------------------
def test_driver_killed_with_sigkill_resumes_without_recomputing(tmp_path):
    n = 12
    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(_spec_text(n, 0.3))
    spec = parse_spec(spec_path.read_text())
    store = Store(tmp_path / "interrupted")

    import psutil

    proc = _cli(str(spec_path), "--out", str(store.root), "--workers", "2", "--no-progress")
    try:
        _wait_for_cells(store, 3, proc)
        workers = [
            p for p in psutil.Process(proc.pid).children() if "resource_tracker" not in " ".join(p.cmdline())
        ]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # orphaned workers notice their driver is gone and exit by themselves
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive
    finally:
        _kill_group(proc)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    finished = sorted(store.done_keys())
    assert 3 <= len(finished) < n, "the kill must land mid-sweep"
    assert store.verify() == []  # a kill never leaves a half-written cell
    snapshot = {k: (store.path_for(k).stat().st_mtime_ns, store.path_for(k).read_bytes()) for k in finished}

    resumed = run_sweep(spec, store, max_workers=2, progress=False)
    assert resumed.skipped == len(finished) and resumed.computed == n - len(finished)
    assert {k: (store.path_for(k).stat().st_mtime_ns, store.path_for(k).read_bytes()) for k in finished} == snapshot

    clean = run_sweep(spec, Store(tmp_path / "clean"), max_workers=2, progress=False)
    a = resumed.table().drop(columns=RUN_COLUMNS)
    b = clean.table().drop(columns=RUN_COLUMNS)
    assert list(a.columns) == list(b.columns) and len(a) == n
    assert a.equals(b)
    assert np.allclose(a["value"], _expected_values(spec))


def test_ctrl_c_stops_keeps_finished_cells_and_says_how_to_resume(tmp_path):
    # 12 cells of 2 s (2 workers: >= 12 s for the grid), so that the interrupt lands mid-sweep even when the store
    # is polled slowly on a loaded machine (a loaded run once finished all 10 cells of 0.3 s, once all 10 of
    # 0.8 s, 4.5 s, and once all 12 of 1.2 s, 7.9 s at load average 8, before the signal)
    n = 12
    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(_spec_text(n, 2.0))
    store = Store(tmp_path / "s")
    proc = _cli(str(spec_path), "--out", str(store.root), "--workers", "2", "--no-progress")
    try:
        _wait_for_cells(store, 1, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        _kill_group(proc)
    assert proc.returncode == 130, err
    assert "run the same sweep again to resume" in err and str(spec_path) in err
    n_done = len(store.done_keys())
    assert 1 <= n_done < n
    proc = _cli(str(spec_path), "--out", str(store.root), "--no-progress", "--json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"{n_done} skipped" in err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["alpha"] for r in rows] == [round(0.1 * (i + 1), 3) for i in range(n)]


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("alpha = [0.1]\nlam = [-0.5]", "error: --lam: must be >= 0"),
        ("alpha = [0.1]\nkappa0 = [1]", "error: --kappa0: unknown parameter in [grid]"),
    ],
)
def test_cli_bad_spec_is_one_line_exit_2_and_writes_nothing(tmp_path, grid, message):
    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(f"[grid]\n{grid}\n[run]\nroutes = ['sleep']\n")
    proc = _cli(str(spec_path), "--out", str(tmp_path / "s"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().startswith(message) and len(err.strip().splitlines()) == 1
    assert str(spec_path) in err
    assert not (tmp_path / "s").exists() and out == ""


def test_cli_dry_run_counts_without_computing(tmp_path):
    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(_spec_text(3, 0.0))
    proc = _cli(str(spec_path), "--out", str(tmp_path / "s"), "--dry-run")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "3 cells (sleep), 0 already in" in err
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------------------------------
# [run] settings of the simulate route, --out, help and JSON output (in process: no worker is started)
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("run", "name", "fragment"),
    [
        ('solver = "nope"', "--solver", "known: adam, gamp, lbfgs, prox"),
        ("bogus = 3", "--bogus", "solver 'adam'"),
        ('solver = "gamp"\nlr = 0.1', "--lr", "solver 'gamp'"),  # an adam option is not one of gamp's
    ],
)
def test_cli_simulate_settings_are_checked_before_the_store_exists(tmp_path, run, name, fragment):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "g.toml"
    spec_path.write_text(f'[grid]\nalpha = [0.5]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 1\n{run}\n')
    for extra in ([], ["--dry-run"]):
        res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--no-progress", *extra])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, res.output
        assert lines[0].startswith(f"error: {name}: ") and fragment in lines[0]
        assert res.stdout == "" and not (tmp_path / "s").exists()
    # the library's entry point refuses it before creating the store too
    with pytest.raises(ParameterError) as exc:
        run_sweep(parse_spec(spec_path.read_text()), tmp_path / "s2", progress=False)
    assert exc.value.param == name[2:] and not (tmp_path / "s2").exists()


def test_cli_simulate_settings_of_the_chosen_solver_pass(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "g.toml"
    for run in ('solver = "gamp"\ndamping = 0.4', 'solver = "prox"\nrtol = 1e-8\nthreads = 1', "lr = 0.05"):
        spec_path.write_text(f'[grid]\nalpha = [0.5]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 1\n{run}\n')
        res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--dry-run"])
        assert res.exit_code == 0 and "1 cells (simulate)" in res.stderr, res.output


def test_cli_out_that_is_a_file_and_the_help(tmp_path):
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "g.toml"
    spec_path.write_text(_spec_text(1, 0.0))
    afile = tmp_path / "afile"
    afile.write_text("keep")
    res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(afile)])
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"error: --out: '{afile}' is a file, not a directory"], res.output
    assert afile.read_text() == "keep"
    res = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "a [grid] table of lists and a [run] table" in res.stdout  # not eaten as markup


def test_json_rows_give_integer_columns_back_as_integers():
    import pandas as pd

    from tiedattention.commands.sweep import json_rows

    table = pd.DataFrame([{"route": "theory", "alpha": 1.0, "lam": 0.5},
                          {"route": "simulate", "alpha": 2.0, "d": 20, "seeds": 2, "lam": 0.25, "mse": 0.1}])
    assert table["d"].dtype.kind == "f"  # the NaN upcast the function undoes
    rows = json_rows(table)
    assert rows[1]["d"] == 20 and type(rows[1]["d"]) is int and type(rows[1]["seeds"]) is int
    assert np.isnan(rows[0]["d"]) and np.isnan(rows[0]["mse"]) and rows[1]["mse"] == 0.1
    assert type(rows[0]["alpha"]) is float and rows[1]["alpha"] == 2.0  # a float column without gaps stays float
