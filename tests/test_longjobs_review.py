"""Long jobs as users reach them (session-11 review): interrupts with cells in flight, store and scheduler errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_sweep_local import CLI, RUN_COLUMNS  # the sweep command on its own typer app; run-dependent columns

from tiedattention.sweep import Store, parse_spec, run_sweep

HERE = Path(__file__).parent


def slow_route(params):
    """A route for the interrupt test: alpha 0.1 returns at once; the others mark that they started, then sleep
    ``TA_LONGJOB_SLEEP`` seconds (long, unless the resumed run sets it to 0)."""
    alpha = float(params["alpha"])
    if alpha != 0.1:
        (Path(os.environ["TA_LONGJOB_DIR"]) / f"started-{alpha}").touch()
        time.sleep(float(os.environ.get("TA_LONGJOB_SLEEP", "0")))
    return {"value": alpha * 10.0, "pid": os.getpid()}


def _spec_text() -> str:
    return f'[grid]\nalpha = [0.1, 0.2, 0.3, 0.4]\n[run]\nroutes = ["{__name__}:slow_route"]\n'


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_interrupt_with_long_cells_in_flight_exits_at_once_and_resumes(tmp_path, monkeypatch, sig):
    """Ctrl-C / SIGTERM while long cells run: the driver stops its workers and exits (it used to wait for the running
    cells to finish: ProcessPoolExecutor.shutdown drops its process table, so _stop_pool terminated nobody); the
    finished cell stays, the resumed run computes only the rest and equals an uninterrupted run."""
    import psutil

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(_spec_text())
    store = Store(tmp_path / "s")
    env = dict(os.environ, TA_LONGJOB_DIR=str(tmp_path), TA_LONGJOB_SLEEP="300",
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", CLI, "sweep", str(spec_path), "--out", str(store.root),
                             "--workers", "2", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # (see test_sweep_local)
    try:
        deadline = time.monotonic() + 90
        while not (len(store.done_keys()) == 1 and (tmp_path / "started-0.2").exists()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sweep did not start its cells"
            time.sleep(0.05)
        workers = [p for p in psutil.Process(proc.pid).children()
                   if "resource_tracker" not in " ".join(p.cmdline())]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)  # before the fix: blocked until the 300 s cells finished
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, "worker processes outlived the interrupted driver"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
    assert proc.returncode == 130, err
    assert "run the same sweep again to resume" in err
    assert len(store.done_keys()) == 1 and store.verify() == []  # the finished cell, nothing half-written

    monkeypatch.setenv("TA_LONGJOB_DIR", str(tmp_path))
    monkeypatch.setenv("TA_LONGJOB_SLEEP", "0")
    monkeypatch.syspath_prepend(str(HERE))
    spec = parse_spec(_spec_text())
    resumed = run_sweep(spec, store, max_workers=1, progress=False)
    assert (resumed.skipped, resumed.computed, resumed.failed) == (1, 3, 0)
    table = resumed.table()  # (an interrupted + resumed table equals a clean run's: test_sweep_local, SIGKILL)
    assert list(table["key"]) == spec.keys and list(table["value"]) == [1.0, 2.0, 3.0, 4.0]
    assert store.verify() == []


# --------------------------------------------------------------------------------------------------
def _one_line(res, prefix: str) -> str:
    lines = [x for x in res.stderr.strip().splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith(prefix), res.output
    return lines[0]


def test_a_store_directory_that_cannot_be_used_is_one_line(tmp_path):
    """A store whose layout is broken ('cells' a file, 'manifest.json' a directory) or whose directory cannot be
    created gave a traceback (FileExistsError, IsADirectoryError); now one line naming the option, exit 2."""
    from typer.testing import CliRunner

    from tiedattention.cli import app
    from tiedattention.errors import ParameterError

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text('[grid]\nalpha = [0.1]\n[run]\nroutes = ["sleep"]\n')
    bad_cells = tmp_path / "a"
    bad_cells.mkdir()
    (bad_cells / "cells").write_text("not a directory")
    bad_manifest = tmp_path / "b"
    (bad_manifest / "manifest.json").mkdir(parents=True)
    for root, fragment in ((bad_cells, "cells"), (bad_manifest, "manifest.json")):
        res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(root), "--no-progress"])
        assert res.exit_code == 2
        line = _one_line(res, "error: --out: ")
        assert f"cannot use '{root}' as a sweep store" in line and fragment in line
        with pytest.raises(ParameterError) as exc:  # the Python API names its own argument
            run_sweep(parse_spec(spec_path.read_text()), root, progress=False)
        assert exc.value.param == "store"
    assert (bad_cells / "cells").read_text() == "not a directory"
    # reproduce: its store is OUT/store
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "store").write_text("a file where the store goes")
    res = CliRunner().invoke(app, ["reproduce", "fig4", "--quick", "--out", str(tmp_path / "r"), "--no-progress"])
    assert res.exit_code == 2
    assert "as a sweep store" in _one_line(res, "error: --out: ")


def test_a_scheduler_address_dask_cannot_read_is_one_line(tmp_path):
    pytest.importorskip("distributed")
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text('[grid]\nalpha = [0.1]\n[run]\nroutes = ["sleep"]\n')
    res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--scheduler", "http://x:1",
                                   "--no-progress"])
    assert res.exit_code == 2  # was a ValueError traceback ("unknown address scheme")
    assert "http://x:1" in _one_line(res, "error: --scheduler: cannot connect to ")


def test_a_write_that_fails_mid_run_is_one_line_and_keeps_finished_cells(tmp_path, monkeypatch):
    """Disk full (or the store unmounted) while a sweep runs: one line saying what failed and that the finished cells
    are kept, exit 1 (was a traceback)."""
    import errno

    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text('[grid]\nalpha = [0.1, 0.2, 0.3]\n[run]\nroutes = ["sleep"]\n')
    real_write = Store.write

    def write(self, key, record):
        if len(self.done_keys()) >= 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path_for(key)))
        return real_write(self, key, record)

    monkeypatch.setattr(Store, "write", write)
    res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--workers", "1",
                                   "--no-progress"])
    assert res.exit_code == 1
    line = _one_line(res, "sweep: ")
    assert "No space left on device" in line and "run the same command again" in line
    assert len(Store(tmp_path / "s").done_keys()) == 1 and Store(tmp_path / "s").verify() == []


def test_corrupt_file_of_another_spec_is_not_said_to_be_recomputed(tmp_path):
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text('[grid]\nalpha = [0.1]\n[run]\nroutes = ["sleep"]\n')
    spec = parse_spec(spec_path.read_text())
    store = Store(tmp_path / "s")
    mine, other = store.path_for(spec.keys[0]), store.path_for("a" * 64)
    mine.write_text("truncated")
    other.write_text("garbage")
    res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(store.root), "--workers", "1",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    said = [x for x in res.stderr.splitlines() if x.startswith("sweep: ") and "corrupt cell file" in x]
    assert said == [f"sweep: recomputed a corrupt cell file: {mine}",
                    f"sweep: moved a corrupt cell file aside: {other} (not a cell of this spec)"]
    assert store.verify() == [] and sorted(store.done_keys()) == spec.keys
    assert len(list(store.corrupt_dir.iterdir())) == 2


def test_a_device_the_local_workers_cannot_use_is_refused_before_the_store(tmp_path):
    """device = "mps" passed the spec check but every simulate cell failed ('must be cpu or cuda'); device = "cuda"
    on a machine without CUDA failed every cell after spawning the workers. With local workers (this machine) both are
    one line, exit 2, no store; a dask cluster's workers may have the GPU the driver lacks, so it is not checked."""
    torch = pytest.importorskip("torch")
    from typer.testing import CliRunner

    from tiedattention.cli import app
    from tiedattention.errors import ParameterError

    with pytest.raises(ParameterError) as exc:
        parse_spec('[grid]\nalpha = [0.3]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 1\ndevice = "mps"\n')
    assert exc.value.param == "device" and "mps" in exc.value.message
    if torch.cuda.is_available():
        bad = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU
    else:
        bad = "cuda"
    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(f'[grid]\nalpha = [0.3]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 1\ndevice = "{bad}"\n')
    for extra in ([], ["--dry-run"]):
        res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--no-progress", *extra])
        assert res.exit_code == 2, res.output
        assert "in [run]" in _one_line(res, "error: --device: ")
    assert not (tmp_path / "s").exists()


def test_reproduce_all_goes_on_after_a_figure_with_failed_cells(tmp_path, monkeypatch):
    """`reproduce all` stopped at the first figure with a failed cell, leaving every later figure undone (hours of a
    full run lost to one bad cell); it now draws the others and exits 1 naming the failed figures at the end."""
    from typer.testing import CliRunner

    import tiedattention.reproduce as rp
    from tiedattention.cli import app

    calls = []

    def fake(name, out, **kw):
        calls.append(name)
        if name in ("fig2", "fig6"):
            raise RuntimeError(f"{name}: 1 cells failed (rerun to retry them):\n  simulate (alpha=0.1): boom")
        return rp.FigureResult(name, [])

    monkeypatch.setattr(rp, "reproduce", fake)
    res = CliRunner().invoke(app, ["reproduce", "all", "--quick", "--out", str(tmp_path / "o"), "--no-progress"])
    assert calls == list(rp.FIGURES)
    assert res.exit_code == 1, res.output
    assert "fig2: 1 cells failed" in res.stderr and "fig6: 1 cells failed" in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "reproduce: cells failed in fig2, fig6 (the other figures are written); rerun the same command to retry them")
    calls.clear()
    res = CliRunner().invoke(app, ["reproduce", "fig2", "--quick", "--out", str(tmp_path / "o"), "--no-progress"])
    assert calls == ["fig2"] and res.exit_code == 1 and "fig2: 1 cells failed" in res.stderr


def test_verify_tolerates_a_corrupt_file_moved_aside_by_another_driver(tmp_path, monkeypatch):
    """Two drivers starting on one store both find the same damaged file; the one that moves it second used to
    crash (FileNotFoundError from os.replace; now 'cannot use the store'). The file is gone: nothing to do."""
    store = Store(tmp_path / "s")
    damaged = store.path_for("b" * 64)
    damaged.write_text("garbage")
    real = Store._read_file

    def read_then_lose_race(self, path):
        try:
            return real(self, path)
        finally:  # the other driver moves the file aside in between
            path.unlink(missing_ok=True)

    monkeypatch.setattr(Store, "_read_file", read_then_lose_race)
    assert store.verify(quarantine=True, warn=False) == []
    assert not damaged.exists() and not store.corrupt_dir.exists()


@pytest.mark.parametrize("text", ['[grid]\nalpha = [0.5]\nd = [1]\n[run]\nroutes = ["simulate"]\nseeds = 1\n',
                                  '[grid]\nalpha = [0.5]\ntarget = ["powerlaw:1.25"]\n[run]\nd = 1\n'])
def test_spec_d_is_checked_as_the_cli_checks_it(text):
    """d = 1 passed the spec (>= 1) while every command refuses it (--d: must be an integer >= 2): the simulate cells
    failed at run time and a power-law theory cell was computed at a d no command accepts."""
    from tiedattention.errors import ParameterError

    with pytest.raises(ParameterError) as exc:
        parse_spec(text)
    assert exc.value.param == "d" and "must be an integer >= 2" in exc.value.message


@pytest.mark.parametrize("run, name, fragment", [
    ("threads = 0", "--threads", "must be an integer >= 1"),
    ("rank_tol = -1", "--rank-tol", "must be in [0, 1)"),
    ('rank_tol = "x"', "--rank-tol", "must be a number"),
    ("n_test = 1", "--n-test", "must be an integer >= 2"),
])
def test_simulate_route_settings_are_checked_before_the_store(tmp_path, run, name, fragment):
    """threads = 0, rank_tol = -1, n_test = 1 passed the spec; every simulate cell then failed at run time with the
    same error (the guide says settings are checked before anything runs)."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text(f'[grid]\nalpha = [0.5]\n[run]\nroutes = ["simulate"]\nd = 8\nseeds = 1\n{run}\n')
    res = CliRunner().invoke(app, ["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--no-progress"])
    assert res.exit_code == 2, res.output
    line = _one_line(res, f"error: {name}: ")
    assert fragment in line and "[run]" in line
    assert not (tmp_path / "s").exists()


def test_sweep_never_overwrites_a_manifest_or_spec_toml_it_did_not_write(tmp_path):
    """`sweep grid.toml --out .` in a project directory replaced the user's own manifest.json and spec.toml with the
    store's (silently, data lost). A directory whose manifest.json is not a tiedattention store's is refused."""
    from typer.testing import CliRunner

    from tiedattention.cli import app

    project = tmp_path / "project"
    project.mkdir()
    (project / "grid.toml").write_text('[grid]\nalpha = [0.1]\n[run]\nroutes = ["sleep"]\n')
    (project / "manifest.json").write_text('{"name": "my web app"}\n')
    (project / "spec.toml").write_text("my own spec\n")
    res = CliRunner().invoke(app, ["sweep", str(project / "grid.toml"), "--out", str(project), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "manifest.json" in _one_line(res, "error: --out: ")
    assert (project / "manifest.json").read_text() == '{"name": "my web app"}\n'
    assert (project / "spec.toml").read_text() == "my own spec\n"
    assert sorted(p.name for p in project.iterdir()) == ["grid.toml", "manifest.json", "spec.toml"]
    (project / "manifest.json").unlink()  # a spec.toml alone (no manifest): not ours either
    res = CliRunner().invoke(app, ["sweep", str(project / "grid.toml"), "--out", str(project), "--no-progress"])
    assert res.exit_code == 2 and "spec.toml" in _one_line(res, "error: --out: ")
    assert (project / "spec.toml").read_text() == "my own spec\n"
    # a real store is reused as before
    store = tmp_path / "store"
    for _ in range(2):
        res = CliRunner().invoke(app, ["sweep", str(project / "grid.toml"), "--out", str(store), "--workers", "1",
                                       "--no-progress"])
        assert res.exit_code == 0, res.output
    assert "1 skipped" in res.stderr


def test_output_checks_refuse_a_directory_that_is_not_writable(tmp_path, monkeypatch):
    """An --out in a directory the user cannot write was accepted, and the command computed everything before failing
    with a PermissionError traceback (theory --out) or one line after the work (phase --out). (Root can write
    anywhere, so os.access is made to say no for one directory.)"""
    from tiedattention.cli_common import check_output_dir, check_output_file
    from tiedattention.errors import ParameterError

    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == locked else real(p, mode, **kw))
    with pytest.raises(ParameterError, match="directory '.*locked' is not writable") as exc:
        check_output_file(locked / "fig.png", "out", suffix=".png")
    assert exc.value.param == "out"
    with pytest.raises(ParameterError, match="is not writable"):
        check_output_dir(locked, "out")
    with pytest.raises(ParameterError, match="cannot create directory .*'.*locked' is not writable"):
        check_output_dir(locked / "new" / "deeper", "store")
    check_output_file(tmp_path / "fig.png", "out", suffix=".png")  # the others pass
    check_output_dir(tmp_path / "new", "out")


def crash_or_sleep_route(params):
    """alpha 0.3 kills its worker process every time (as an out-of-memory kill would); the others take a moment, so
    that one of them is running next to it when it dies."""
    if params["alpha"] == 0.3:
        time.sleep(0.1)
        os._exit(3)
    time.sleep(0.6)
    return {"value": params["alpha"] * 10.0}


def test_a_cell_that_kills_its_worker_does_not_take_the_cells_next_to_it_down(tmp_path, monkeypatch):
    """A worker death was counted against every cell in flight and those were rerun together, so the cell running next
    to a crash-looping one died with it each time and was reported failed ('a worker process died 2 times running
    it') although it never crashed. Cells caught in a crash are now rerun alone: a death is their own."""
    monkeypatch.syspath_prepend(str(HERE))
    spec = parse_spec({"grid": {"alpha": [0.3, 0.4]}, "run": {"routes": [f"{__name__}:crash_or_sleep_route"]}})
    summary = run_sweep(spec, tmp_path / "s", max_workers=2, progress=False, retries=1)
    assert list(summary.failures) == [spec.keys[0]], summary.failures
    assert "died 2 times" in summary.failures[spec.keys[0]]
    assert summary.computed == 1 and list(summary.table()["value"]) == [4.0]


def test_figure_outputs_that_are_directories_are_refused_before_computing(tmp_path):
    """phase --out FIG.png with FIG.parquet a directory computed every row and then died with an IsADirectoryError
    traceback; reproduce with OUT/fig4.png a directory computed every cell first. Both are one line, exit 2, now."""
    from typer.testing import CliRunner

    from tiedattention.cli import app

    (tmp_path / "x.parquet").mkdir()
    res = CliRunner().invoke(app, ["phase", "--alpha", "0.5", "--over", "lam=0.01", "--out", str(tmp_path / "x.png"),
                                   "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "x.parquet' is a directory" in _one_line(res, "error: --out: ")
    assert not (tmp_path / "x.store").exists()
    out = tmp_path / "r"
    (out / "fig4.pdf").mkdir(parents=True)
    res = CliRunner().invoke(app, ["reproduce", "fig4", "--quick", "--out", str(out), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "fig4.pdf' is a directory" in _one_line(res, "error: --out: ")
    assert sorted(p.name for p in out.iterdir()) == ["fig4.pdf"]


@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_workers_with_a_scheduler_is_refused_not_ignored(tmp_path, command):
    """--workers 4 --scheduler tcp://... silently ignored --workers (the cluster's workers run the cells)."""
    from typer.testing import CliRunner

    from tiedattention.cli import app

    spec_path = tmp_path / "grid.toml"
    spec_path.write_text('[grid]\nalpha = [0.1]\n[run]\nroutes = ["sleep"]\n')
    first = [str(spec_path)] if command == "sweep" else ["fig4", "--quick"]
    res = CliRunner().invoke(app, [command, *first, "--out", str(tmp_path / "s"), "--workers", "4",
                                   "--scheduler", "tcp://127.0.0.1:1", "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "--scheduler" in _one_line(res, "error: --workers: ")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("executor", "workers", "param", "fragment"), [
    ("tcp://127.0.0.1:1", 2, "workers", "--scheduler"),  # the cluster's workers run the cells: 2 would be ignored
    ("127.0.0.1:8786", None, "scheduler", "tcp://HOST:PORT"),  # no scheme: refused before any connection attempt
    ("local", 0, "workers", ">= 1"),
])
def test_run_sweep_checks_where_cells_run_as_the_commands_do(tmp_path, executor, workers, param, fragment):
    """run_sweep and the `sweep` / `reproduce` commands share one check (sweep.executors.check_executor): the
    library refuses what the CLI refuses, before the store exists."""
    from tiedattention.errors import ParameterError
    from tiedattention.sweep import parse_spec, run_sweep

    spec = parse_spec('[grid]\nalpha = [0.1]\n[run]\nroutes = ["sleep"]\n')
    with pytest.raises(ParameterError) as exc:
        run_sweep(spec, tmp_path / "s", executor=executor, max_workers=workers, progress=False)
    assert exc.value.param == param and fragment in str(exc.value), str(exc.value)
    assert not (tmp_path / "s").exists()


@pytest.mark.slow  # two CLI drivers with their worker pools: ~8 s on the shared 2-core machine
def test_two_drivers_on_one_store_at_once_are_safe(tmp_path):
    """Two `sweep` commands on the same spec and store at the same time (the documented 'safe but duplicate work'):
    both succeed, every cell is there once and intact, and the table equals a single driver's."""
    spec_path = tmp_path / "grid.toml"
    spec_path.write_text('[grid]\nalpha = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]\n[run]\nroutes = ["sleep"]\nsleep = 0.3\n')
    store = Store(tmp_path / "s")
    procs = [subprocess.Popen([sys.executable, "-c", CLI, "sweep", str(spec_path), "--out", str(store.root),
                               "--workers", "1", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    spec = parse_spec(spec_path.read_text())
    assert sorted(store.done_keys()) == sorted(spec.keys) and store.verify() == []
    assert not [p for p in store.cells_dir.iterdir() if p.name.startswith(".tmp-")]
    clean = run_sweep(spec, Store(tmp_path / "clean"), max_workers=1, progress=False)
    a = Store(store.root).read_table(spec.keys).drop(columns=RUN_COLUMNS)
    assert a.equals(clean.table().drop(columns=RUN_COLUMNS))


@pytest.mark.slow  # a LocalCluster and theory cells: ~20 s
def test_dask_and_local_routes_give_the_same_theory_numbers(tmp_path):
    """The same theory cells through a dask.distributed LocalCluster and through local processes: same keys, every
    numeric field identical (the SE is deterministic; where it ran must not matter)."""
    pytest.importorskip("distributed")
    import logging

    import numpy as np
    from distributed import LocalCluster

    spec = parse_spec({"grid": {"alpha": [0.05, 2.0], "lam": [0.01, 0.0], "noise": [0.5]},
                       "run": {"routes": ["theory"]}})
    local = run_sweep(spec, tmp_path / "local", max_workers=2, progress=False).table()
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                      silence_logs=logging.CRITICAL) as cluster:
        dask = run_sweep(spec, tmp_path / "dask", executor=cluster.scheduler_address, progress=False).table()
    assert list(local["key"]) == list(dask["key"]) == spec.keys
    numeric = [c for c in local.columns if local[c].dtype.kind in "fib" and c not in RUN_COLUMNS]
    assert "test_error" in numeric and "mse" in numeric
    for c in numeric:
        np.testing.assert_array_equal(local[c].to_numpy(), dask[c].to_numpy(), err_msg=c)
    assert local["converged"].all()


@pytest.mark.parametrize("name", ["noise", "lam", "tokens", "beta", "kappa", "alpha"])
def test_a_toml_boolean_is_not_a_number_in_the_grid(name):
    """noise = [true] was read as noise 1 (d = [true] and seeds were already refused)."""
    from tiedattention.errors import ParameterError

    grid = f"alpha = [0.5]\n{name} = [true]" if name != "alpha" else "alpha = [true]"
    with pytest.raises(ParameterError) as exc:
        parse_spec(f"[grid]\n{grid}\n")
    assert exc.value.param == name and "true" in exc.value.message.lower()


def test_a_script_without_the_main_guard_gets_one_clear_error(tmp_path):
    """run_sweep from a script without `if __name__ == "__main__":` (spawned workers re-run the script and die while
    starting): every cell was retried alone 4 times (16 worker tracebacks for 4 cells) and reported 'a worker
    process died 4 times running it'. Now the run stops at the first such pool with one error naming the cause."""
    script = tmp_path / "noguard.py"
    script.write_text(
        "from tiedattention.sweep import parse_spec, run_sweep\n"
        "spec = parse_spec({'grid': {'alpha': [0.1, 0.2, 0.3, 0.4]}, 'run': {'routes': ['sleep']}})\n"
        f"run_sweep(spec, {str(tmp_path / 's')!r}, max_workers=2, progress=False)\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: ") and 'if __name__ == "__main__":' in last, res.stderr[-2000:]
    assert res.stderr.count("Traceback") <= 3  # the driver's and the two workers', not one per retry
    assert Store(tmp_path / "s").done_keys() == set()


def test_the_cell_that_killed_its_worker_is_told_from_those_next_to_it():
    """The attribution behind the test above: each worker reports (key, pid) before running a cell; after a broken
    pool the cell whose process ended by itself is charged, those ended by the pool's SIGTERM are not. When it cannot
    be told (no message from a cell, or every process ended by SIGTERM: a kill from outside) the answer is None and
    the cells are rerun one at a time instead."""
    import multiprocessing as mp

    from tiedattention.sweep.executors import _culprits
    from tiedattention.sweep.spec import Cell

    class Proc:
        def __init__(self, code):
            self.exitcode = code

        def join(self, timeout=None):
            pass

    a, b, c = (Cell(key=k * 64, route="sleep", params={"alpha": 0.1}) for k in "abc")

    def ask(messages, codes, caught=(a, b)):
        q = mp.get_context("spawn").SimpleQueue()
        for m in messages:
            q.put(m)
        return _culprits(list(caught), q, {}, {pid: Proc(code) for pid, code in codes.items()})

    assert ask([(a.key, 11), (b.key, 12)], {11: 3, 12: -signal.SIGTERM}) == [a]       # os._exit(3)
    assert ask([(a.key, 11), (b.key, 12)], {11: -signal.SIGTERM, 12: -9}) == [b]     # the OOM killer's SIGKILL
    assert ask([(a.key, 11), (b.key, 12)], {11: -11, 12: -9}) == [a, b]              # both crashed
    assert ask([(a.key, 11), (b.key, 12)], {11: -signal.SIGTERM, 12: -signal.SIGTERM}) is None  # killed from outside
    assert ask([(a.key, 11)], {11: 3, 12: -signal.SIGTERM}) is None                  # b's process unknown
    assert ask([(a.key, 11), (c.key, 13), (b.key, 12)], {11: -15, 12: 3, 13: 0}, caught=(a, b)) == [b]
