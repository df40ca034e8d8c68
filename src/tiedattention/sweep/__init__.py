"""Sweeps: TOML grid specs, hashed cells, a Parquet store with resume, local and dask executors.

    from tiedattention.sweep import load_spec, run_sweep
    summary = run_sweep(load_spec("grid.toml"), "out/grid")      # local processes, all cores
    summary = run_sweep("grid.toml", "out/grid", executor="tcp://scheduler:8786")
    df = summary.table()

See docs/user-guide/sweeps.md.
"""

from .executors import SweepInterrupted, SweepSummary, run_sweep
from .routes import run_cell
from .spec import Cell, SweepSpec, cell_key, load_spec, parse_spec
from .store import Store, StoreProblem

__all__ = [
    "Cell",
    "Store",
    "StoreProblem",
    "SweepInterrupted",
    "SweepSpec",
    "SweepSummary",
    "cell_key",
    "load_spec",
    "parse_spec",
    "run_cell",
    "run_sweep",
]
