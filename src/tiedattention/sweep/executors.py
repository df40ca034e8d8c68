"""Run a sweep: skip finished cells, compute the rest on local processes or a dask.distributed cluster.

The driver (the process calling :func:`run_sweep`) is the only writer: workers return records, and the
driver writes each one to the store as soon as it arrives. So

* killing the driver (Ctrl-C, ``kill -9``) loses at most the cells in flight; running the same sweep again
  skips every cell already in the store;
* a worker that dies takes only its in-flight cells with it: locally the process pool is rebuilt and those
  cells retried (each at most ``retries`` more times); on dask the scheduler reschedules them on another
  worker (dask's ``allowed-failures``) and exceptions are retried ``retries`` times;
* a cell whose route raises is reported as failed, not written, and tried again by the next run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .. import __version__
from ..errors import ParameterError
from .routes import CellError, check_local_device, check_route, run_cell
from .spec import Cell, SweepSpec, load_spec
from .store import Store, StoreProblem, store_error

__all__ = ["run_sweep", "check_executor", "SweepSummary", "SweepInterrupted"]


@dataclass
class SweepSummary:
    """What a run did. ``table()`` reads the spec's cells back from the store, in spec order."""

    spec: SweepSpec
    store: Store
    total: int = 0
    skipped: int = 0
    computed: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    corrupt: list[StoreProblem] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def complete(self) -> bool:
        return not self.interrupted and not self.failures

    def table(self) -> pd.DataFrame:
        return self.store.read_table(self.spec.keys)

    def line(self) -> str:
        return (
            f"{self.total} cells: {self.skipped} skipped (already in the store), {self.computed} computed, "
            f"{self.failed} failed -> {self.store.root}"
        )


class SweepInterrupted(Exception):
    """The driver was interrupted (Ctrl-C / SIGTERM). Everything finished before is in the store."""

    def __init__(self, summary: SweepSummary):
        self.summary = summary
        super().__init__(
            f"interrupted: {summary.skipped + summary.computed} of {summary.total} cells are in "
            f"{summary.store.root}; run the same sweep again to resume"
        )


# --------------------------------------------------------------------------------------------------
# progress
# --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _progress(enabled: bool, total: int, done: int) -> Iterator[Callable[[], None]]:
    if not enabled:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=False,
    ) as bar:
        task = bar.add_task("sweep", total=total, completed=done)
        yield lambda: bar.advance(task)


# --------------------------------------------------------------------------------------------------
# local processes
# --------------------------------------------------------------------------------------------------
def _watch_parent(parent: int) -> None:  # pragma: no cover - runs in worker processes
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)  # the driver is gone (kill -9): do not keep computing for nobody


#: in a worker process: where it tells the driver which cell it is running (see _run_local)
_RUNNING: Any = None


def _worker_init(parent: int, started: Any = None, running: Any = None) -> None:  # pragma: no cover - in workers
    # the driver decides what Ctrl-C means; workers just stop when it goes away
    global _RUNNING
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _RUNNING = running
    if started is not None:  # this worker got through start-up (see _run_local)
        started.set()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _run_tracked(payload: dict) -> dict:  # pragma: no cover - runs in worker processes
    """run_cell, after telling the driver (key, pid): if this process dies, the driver knows which cell it ran."""
    if _RUNNING is not None:
        _RUNNING.put((payload["key"], os.getpid()))
    return run_cell(payload)


_START_FAILED = (
    "the local worker processes died while starting, before running any cell (their errors are above). A script "
    "that calls run_sweep must guard its entry point with 'if __name__ == \"__main__\":' (the workers start with "
    "spawn and import the script); the workers also need to import tiedattention and the routes"
)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the worker processes now, running cells included (an interrupted driver must
    not wait for them: the interpreter's exit joins the pool). The process table is taken before ``shutdown``,
    which drops it."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:  # pragma: no cover
        terminate()
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.terminate()


def _drain(running: Any, where: dict[str, int]) -> None:
    """Read the (key, pid) messages of the workers (``_run_tracked``) into ``where``."""
    with contextlib.suppress(Exception):
        while not running.empty():
            key, pid = running.get()
            where[key] = pid


def _culprits(caught: list[Cell], running: Any, where: dict[str, int], procs: dict[int, Any]) -> list[Cell] | None:
    """Which of the cells caught in a broken pool killed their worker: those whose process ended by itself (exit
    code, signal) rather than by the pool's SIGTERM to the survivors. None when that cannot be told (a cell's
    process unknown, or no process ended by itself, e.g. a worker killed from outside with SIGTERM)."""
    _drain(running, where)
    codes = {}
    for pid, proc in procs.items():
        with contextlib.suppress(Exception):
            proc.join(10.0)
            codes[pid] = proc.exitcode
    if any(c.key not in where for c in caught):
        return None
    own = [c for c in caught if codes.get(where[c.key]) not in (None, -signal.SIGTERM)]
    return own or None


def _run_local(
    todo: list[Cell], max_workers: int | None, retries: int,
    on_result: Callable[[Cell, dict], None], on_failure: Callable[[Cell, str], None],
) -> None:
    """Run ``todo`` on a pool of spawned processes. When a worker dies every cell in flight fails with it. Each worker
    tells the driver which cell it runs, so the cell whose process ended by itself (not by the pool's SIGTERM to the
    survivors) is charged with the death and the others are simply rerun; when that cannot be told, the cells caught
    are rerun one at a time on a pool of one ("suspects"), where a death is the cell's own. A cell charged with
    ``retries`` deaths beyond the first is reported failed: a crash-looping cell does not take the cells that ran next
    to it down."""
    workers = max(1, min(max_workers or os.cpu_count() or 1, len(todo)))
    ctx = mp.get_context("spawn")  # no fork: safe with torch/CUDA and threads in the driver
    pending: deque[Cell] = deque(todo)
    suspects: deque[Cell] = deque()
    deaths: dict[str, int] = {}

    def charge(cell: Cell, requeue: deque[Cell]) -> None:
        deaths[cell.key] = deaths.get(cell.key, 0) + 1
        if deaths[cell.key] > retries:
            on_failure(cell, f"a worker process died {deaths[cell.key]} times running it")
        else:
            requeue.appendleft(cell)

    while pending or suspects:
        solo = bool(suspects)
        queue, size = (suspects, 1) if solo else (pending, workers)
        started, running = ctx.Event(), ctx.SimpleQueue()
        pool = ProcessPoolExecutor(size, mp_context=ctx, initializer=_worker_init,
                                   initargs=(os.getpid(), started, running))
        inflight: dict[Future, Cell] = {}
        procs: dict[int, Any] = {}
        caught: list[Cell] = []  # cells in flight when a worker died (not solo)
        where: dict[str, int] = {}
        try:
            broken = False
            while (queue and not broken) or inflight:
                # at most one cell per worker in flight: a dead worker then implicates only running cells
                while queue and not broken and len(inflight) < size:
                    cell = queue.popleft()
                    try:
                        inflight[pool.submit(_run_tracked, cell.payload())] = cell
                    except BrokenProcessPool:
                        queue.appendleft(cell)
                        broken = True
                procs.update(getattr(pool, "_processes", None) or {})
                if not inflight:
                    break
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                if not broken:  # keep the pipe drained (one message per cell)
                    _drain(running, where)
                for fut in done:
                    cell = inflight.pop(fut)
                    try:
                        record = fut.result()
                    except BrokenProcessPool:
                        if not started.is_set():  # no worker got through start-up: no cell is to blame
                            raise RuntimeError(_START_FAILED) from None
                        broken = True
                        if solo:  # alone in its pool: the death is its own
                            charge(cell, suspects)
                        else:
                            caught.append(cell)
                    except CellError as exc:
                        on_failure(cell, str(exc))
                    except Exception as exc:
                        on_failure(cell, f"{type(exc).__name__}: {exc}")
                    else:
                        on_result(cell, record)
            if broken:
                _stop_pool(pool)
            else:
                pool.shutdown(wait=True)
        except BaseException:
            _stop_pool(pool)
            raise
        if caught:
            own = _culprits(caught, running, where, procs)
            if own is None:  # cannot tell which: rerun each alone
                suspects.extend(caught)
            else:
                for cell in reversed(caught):
                    if cell in own:
                        charge(cell, pending)
                    else:  # it ran next to the crash: not its fault
                        pending.appendleft(cell)


# --------------------------------------------------------------------------------------------------
# dask.distributed
# --------------------------------------------------------------------------------------------------
def _run_dask(
    todo: list[Cell], executor: Any, retries: int,
    on_result: Callable[[Cell, dict], None], on_failure: Callable[[Cell, str], None],
) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ParameterError("scheduler", "needs dask.distributed: install tiedattention[dask]") from None
    own = isinstance(executor, str)
    if own:
        try:
            client = Client(executor, timeout="30s")
        except (OSError, ValueError, TypeError) as exc:  # unreachable, or an address dask cannot read (http://)
            raise ParameterError("scheduler", f"cannot connect to {executor}: {exc}") from None
    else:
        client = executor
    futures: dict[Any, Cell] = {}
    try:
        for cell in todo:
            fut = client.submit(
                run_cell, cell.payload(), key=f"tiedattention-cell-{cell.key}", pure=False, retries=retries
            )
            futures[fut] = cell
        for fut in as_completed(list(futures)):
            cell = futures.pop(fut)
            try:
                record = fut.result()
            except CellError as exc:
                on_failure(cell, str(exc))
            except Exception as exc:  # includes KilledWorker: the task took down workers repeatedly
                on_failure(cell, f"{type(exc).__name__}: {exc}")
            else:
                on_result(cell, record)
            fut.release()
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(list(futures))
        raise
    finally:
        if own:
            with contextlib.suppress(Exception):
                client.close()


# --------------------------------------------------------------------------------------------------
def check_executor(executor: Any = "local", max_workers: int | None = None) -> None:
    """The one check of where a sweep's cells run (run_sweep, and the commands before they compute anything):
    ``max_workers`` (``--workers``) None or >= 1; ``executor`` "local", a ``distributed.Client`` or a scheduler
    address tcp://HOST:PORT (``--scheduler``), which takes no ``max_workers`` (the cluster's workers run the cells;
    a number there would be ignored without a word). ParameterError("workers" / "scheduler") otherwise."""
    if max_workers is not None and max_workers < 1:
        raise ParameterError("workers", f"must be >= 1 (got {max_workers})")
    if isinstance(executor, str) and executor != "local":
        if "://" not in executor:
            raise ParameterError("scheduler", f"expected tcp://HOST:PORT (got {executor!r})")
        if max_workers is not None:
            raise ParameterError("workers", "sets the local processes; with --scheduler the cluster's workers run "
                                            "the cells (drop --workers)")


def run_sweep(
    spec: SweepSpec | str | os.PathLike,
    store: Store | str | os.PathLike,
    executor: Any = "local",
    max_workers: int | None = None,
    progress: bool = True,
    retries: int = 3,
) -> SweepSummary:
    """Compute every cell of ``spec`` that ``store`` does not hold yet.

    ``executor``: ``"local"`` (a pool of ``max_workers`` processes, all cores by default), a scheduler
    address ``"tcp://HOST:PORT"``, or a ``distributed.Client``. Returns a :class:`SweepSummary`; raises
    :class:`SweepInterrupted` on Ctrl-C (what finished is kept) and :class:`ParameterError` on bad input
    before anything runs.
    """
    t0 = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    check_executor(executor, max_workers)
    for route in spec.routes:  # before the store: a spec that cannot run creates no directory
        check_route(route, spec.settings)
    if "simulate" in spec.routes and isinstance(executor, str) and executor == "local":
        check_local_device(spec.settings)
    root = store.root if isinstance(store, Store) else Path(store)
    foreign = (store if isinstance(store, Store) else Store(root, create=False)).foreign_file()
    if foreign is not None:  # never overwrite a file the user wrote (--out . in a project directory)
        raise ParameterError("store", f"'{root}' holds a {foreign} that no sweep store wrote; it would be replaced: "
                                      "give a new directory (or an existing store)")
    try:  # a store directory the file system refuses: one ParameterError, not a traceback
        if not isinstance(store, Store):
            store = Store(root)
        summary = SweepSummary(spec=spec, store=store, total=len(spec.cells))
        store.cleanup_temp()
        summary.corrupt = store.verify(quarantine=True)
        store.write_manifest(spec)
    except OSError as exc:
        raise store_error(root, exc) from None
    done = store.done_keys()
    todo = [c for c in spec.cells if c.key not in done]
    summary.skipped = summary.total - len(todo)

    with _progress(progress, summary.total, summary.skipped) as advance:

        def on_result(cell: Cell, record: dict) -> None:
            if record.get("version") != __version__ or record.get("key") != cell.key:
                on_failure(
                    cell,
                    f"worker returned version {record.get('version')!r} for key {record.get('key')!r}; "
                    f"the driver runs tiedattention {__version__} (install the same version on workers)",
                )
                return
            store.write(cell.key, record)
            summary.computed += 1
            advance()

        def on_failure(cell: Cell, message: str) -> None:
            summary.failures[cell.key] = message

        try:
            if todo:
                if isinstance(executor, str) and executor == "local":
                    _run_local(todo, max_workers, retries, on_result, on_failure)
                else:
                    _run_dask(todo, executor, retries, on_result, on_failure)
        except KeyboardInterrupt:
            summary.interrupted = True
            summary.seconds = time.perf_counter() - t0
            raise SweepInterrupted(summary) from None
    summary.seconds = time.perf_counter() - t0
    return summary
