"""dask.distributed executor: a worker killed mid-sweep; every cell still lands in the store exactly once."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import numpy as np
import pytest

from tiedattention.sweep import Store, parse_spec, run_sweep
from tiedattention.sweep.routes import _unit_hash
from tiedattention.sweep.spec import canonical_json

distributed = pytest.importorskip("distributed")


@pytest.fixture
def cluster():
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
        silence_logs=logging.CRITICAL, death_timeout=30,
    ) as c:
        yield c


@pytest.mark.timeout(120)
def test_worker_killed_mid_sweep_every_cell_exactly_once(tmp_path, cluster):
    from distributed import Client

    n = 8
    spec = parse_spec(
        {"grid": {"alpha": [0.1 * (i + 1) for i in range(n)]}, "run": {"routes": ["sleep"], "sleep": 0.6}}
    )
    store = Store(tmp_path / "s")
    with Client(cluster, timeout="30s") as inspector:
        pids_before = inspector.run(os.getpid)  # worker address -> pid
        victim = sorted(pids_before.values())[0]
        killed = {}

        def kill_when_running() -> None:
            deadline = time.monotonic() + 60
            while len(store.done_keys()) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            killed["cells_at_kill"] = len(store.done_keys())
            os.kill(victim, signal.SIGKILL)  # the worker is busy with a 0.6 s cell: that cell is lost

        killer = threading.Thread(target=kill_when_running, daemon=True)
        killer.start()
        # the scheduler address, as `--scheduler tcp://...` passes it: run_sweep opens its own client
        summary = run_sweep(spec, store, executor=cluster.scheduler_address, progress=False)
        killer.join(timeout=10)

        assert killed["cells_at_kill"] < n, "the kill must land mid-sweep"
        # the nanny replaced the killed worker process
        deadline = time.monotonic() + 30
        while victim in inspector.run(os.getpid).values() and time.monotonic() < deadline:
            time.sleep(0.2)
        pids_after = set(inspector.run(os.getpid).values())
        assert victim not in pids_after

    assert summary.failed == 0 and summary.computed == n and summary.skipped == 0
    assert store.writes == n  # each cell written exactly once by the driver
    assert sorted(p.name for p in store.cells_dir.iterdir()) == sorted(f"{k}.parquet" for k in spec.keys)
    df = summary.table()
    assert list(df["key"]) == spec.keys
    assert np.allclose(df["value"], [_unit_hash(canonical_json(c.params)) for c in spec.cells])
    assert set(df["worker_pid"]) <= set(pids_before.values()) | pids_after  # computed on the workers

    # a rerun against the cluster finds everything done and submits nothing
    again = run_sweep(spec, store, executor=cluster.scheduler_address, progress=False)
    assert (again.skipped, again.computed) == (n, 0)


def test_client_object_is_accepted(tmp_path, cluster):
    from distributed import Client

    spec = parse_spec({"grid": {"alpha": [0.5, 1.0, 2.0]}, "run": {"routes": ["sleep"], "sleep": 0}})
    with Client(cluster, timeout="30s") as client:
        summary = run_sweep(spec, tmp_path / "s", executor=client, progress=False)
        assert client.status == "running"  # a client we were given is left open
    assert summary.computed == 3 and summary.failed == 0
