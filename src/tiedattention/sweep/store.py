"""A directory of Parquet files, one per finished cell, written atomically.

Layout (docs/user-guide/sweeps.md)::

    STORE/
      cells/<key>.parquet     one row: key, version, params_json, the params, the results, run metadata
      corrupt/                unreadable or inconsistent cell files, moved aside (never deleted)
      manifest.json           package version, spec text, cell count (information only)
      spec.toml               copy of the last spec run against this store (information only)

A cell file is written to a temporary name in ``cells/`` (``.tmp-...``, never mistaken for a cell), flushed
and fsynced, then renamed with :func:`os.replace`, which is atomic on POSIX filesystems: a reader sees either
no file or the whole file. A file that is nevertheless unreadable (a disk error, a copy cut short, a hand
edit) or whose content does not hash to its name is reported with its path and moved to ``corrupt/``; its
cell is then missing and is computed again by the next run. No other file is touched.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..errors import ParameterError
from .spec import SweepSpec, cell_key

__all__ = ["Store", "StoreProblem", "KEY_RE", "store_error"]

KEY_RE = re.compile(r"^[0-9a-f]{64}$")
#: columns every cell file carries besides params and results
META_COLUMNS = ("key", "version", "params_json")


@dataclass(frozen=True)
class StoreProblem:
    """A cell file that cannot be trusted."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def store_error(root: str | os.PathLike, exc: OSError, param: str = "store") -> ParameterError:
    """The one-line error for a store directory the file system refuses (it cannot be created, ``cells`` is a file,
    ``manifest.json`` a directory, no permission): names the option ``param``, the store and the failing path."""
    where = f": '{exc.filename}'" if exc.filename else ""
    where += f" -> '{exc.filename2}'" if getattr(exc, "filename2", None) else ""  # a rename's target
    return ParameterError(param, f"cannot use '{root}' as a sweep store ({exc.strerror or exc}{where})")


def _warn(message: str) -> None:
    from rich.console import Console

    Console(stderr=True, highlight=False).print(f"warning: {message}", markup=False, soft_wrap=True)


def _plain(value: Any) -> Any:
    """Values Parquet stores as themselves: numpy scalars to Python, arrays to lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _typeable(value: Any) -> Any:
    """The value if Arrow can type it, else its JSON text (mixed lists, objects): kept, never dropped."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        pa.array([value])
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return json.dumps(value, default=str)
    return value


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class Store:
    """Parquet result store of a sweep (see the module docstring for the layout and guarantees)."""

    def __init__(self, root: str | os.PathLike, create: bool = True):
        self.root = Path(root)
        self.cells_dir = self.root / "cells"
        self.corrupt_dir = self.root / "corrupt"
        if create:
            self.cells_dir.mkdir(parents=True, exist_ok=True)
        #: number of cell files written by this Store object (tests use it to check "exactly once")
        self.writes = 0

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # ---------------------------------------------------------------------------------------------
    def path_for(self, key: str) -> Path:
        if not KEY_RE.match(key):
            raise ValueError(f"not a cell key: {key!r}")
        return self.cells_dir / f"{key}.parquet"

    def _cell_files(self) -> list[Path]:
        if not self.cells_dir.is_dir():
            return []
        return sorted(
            p for p in self.cells_dir.iterdir() if p.suffix == ".parquet" and KEY_RE.match(p.stem)
        )

    def done_keys(self) -> set[str]:
        """Keys of the cell files present (not checked; see :meth:`verify`)."""
        return {p.stem for p in self._cell_files()}

    def __contains__(self, key: str) -> bool:
        return self.path_for(key).exists()

    def __len__(self) -> int:
        return len(self._cell_files())

    # ---------------------------------------------------------------------------------------------
    def write(self, key: str, record: Mapping[str, Any]) -> Path:
        """Write one cell atomically. ``record`` must hold ``params_json`` and ``version`` consistent with
        ``key`` (as :func:`tiedattention.sweep.executors.run_cell` produces)."""
        final = self.path_for(key)
        row = {k: _typeable(_plain(v)) for k, v in record.items()}
        row["key"] = key
        table = pa.Table.from_pylist([row])
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.cells_dir / f".tmp-{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        try:
            with open(tmp, "wb") as fh:
                pq.write_table(table, fh, write_page_checksum=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.cells_dir)
        self.writes += 1
        return final

    def _read_file(self, path: Path) -> dict[str, Any]:
        """Read and check one cell file; raises ValueError with a reason when it cannot be trusted."""
        try:
            table = pq.read_table(path, page_checksum_verification=True)
        except Exception as exc:  # pyarrow raises several types for damaged files
            raise ValueError(f"unreadable Parquet file ({type(exc).__name__}: {exc})") from None
        if table.num_rows != 1:
            raise ValueError(f"expected one row, found {table.num_rows}")
        row = table.to_pylist()[0]
        for col in META_COLUMNS:
            if col not in row:
                raise ValueError(f"column {col!r} is missing")
        if row["key"] != path.stem:
            raise ValueError(f"holds key {row['key']!r}, not the key in its name")
        try:
            params = json.loads(row["params_json"])
        except (TypeError, ValueError):
            raise ValueError("params_json is not valid JSON") from None
        if cell_key(params, row["version"]) != path.stem:
            raise ValueError("its parameters do not hash to its name")
        return row

    def read(self, key: str) -> dict[str, Any]:
        """One cell's record (raises ValueError if the file is damaged, FileNotFoundError if absent)."""
        path = self.path_for(key)
        if not path.exists():
            raise FileNotFoundError(path)
        return self._read_file(path)

    # ---------------------------------------------------------------------------------------------
    def verify(self, quarantine: bool = False, warn: bool = True) -> list[StoreProblem]:
        """Check every cell file; return the problems (path + reason).

        With ``quarantine=True`` each damaged file is moved to ``corrupt/`` so that its cell is computed
        again by the next run; nothing else is touched. With ``warn=True`` each problem is printed on stderr.
        """
        problems = []
        for path in self._cell_files():
            try:
                self._read_file(path)
            except ValueError as exc:
                if not path.exists():  # another driver on this store moved it aside meanwhile
                    continue
                problem = StoreProblem(path, str(exc))
                if quarantine:
                    self.corrupt_dir.mkdir(parents=True, exist_ok=True)
                    dest = self.corrupt_dir / f"{path.name}.{time.time_ns()}"
                    try:
                        os.replace(path, dest)
                    except FileNotFoundError:  # (the same race, a moment later)
                        continue
                    problem = StoreProblem(path, f"{exc}; moved to {dest}, the cell will be recomputed")
                if warn:
                    _warn(f"corrupt cell file {problem}")
                problems.append(problem)
        return problems

    def read_table(self, keys: Iterable[str] | None = None, warn: bool = True) -> pd.DataFrame:
        """All cells (or the given keys, in that order, skipping absent ones) as a DataFrame.

        Columns: ``key``, ``version``, the params, the results and the run metadata. Damaged files are
        skipped with a warning naming them (use :meth:`verify` to move them aside).
        """
        paths = self._cell_files() if keys is None else [self.path_for(k) for k in keys]
        rows = []
        for path in paths:
            if not path.exists():
                continue
            try:
                row = self._read_file(path)
            except ValueError as exc:
                if warn:
                    _warn(f"skipping corrupt cell file {path}: {exc}")
                continue
            row.pop("params_json", None)
            rows.append(row)
        df = pd.DataFrame(rows)
        if not df.empty:
            first = [c for c in ("key", "version") if c in df.columns]
            df = df[first + [c for c in df.columns if c not in first]]
        return df

    # ---------------------------------------------------------------------------------------------
    def foreign_file(self) -> str | None:
        """The name of a file of ``root`` that a run would overwrite but that no store wrote: a ``manifest.json``
        that is not a tiedattention manifest, or a ``spec.toml`` without one (``--out .`` in a project directory).
        None when the directory is a store, or can become one without losing anything."""
        manifest = self.root / "manifest.json"
        if manifest.is_file():
            try:
                ours = json.loads(manifest.read_text()).get("package") == "tiedattention"
            except (OSError, ValueError, AttributeError):
                ours = False
            return None if ours else "manifest.json"
        return "spec.toml" if (self.root / "spec.toml").is_file() and not manifest.exists() else None

    def _write_text(self, name: str, text: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.write_text(text)
            os.replace(tmp, self.root / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def write_manifest(self, spec: SweepSpec) -> None:
        """Record, for information, which spec and package version last ran against this store."""
        manifest = {
            "package": "tiedattention",
            "version": __version__,
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "spec_path": spec.path,
            "grid": spec.grid,
            "routes": list(spec.routes),
            "settings": spec.settings,
            "cells": len(spec.cells),
            "python": sys.version.split()[0],
        }
        self._write_text("manifest.json", json.dumps(manifest, indent=2, default=str) + "\n")
        if spec.source is not None:
            self._write_text("spec.toml", spec.source)

    def cleanup_temp(self, min_age_s: float = 3600.0) -> int:
        """Remove temporary files older than ``min_age_s`` (left by a writer killed mid-write)."""
        n = 0
        now = time.time()
        for p in self.cells_dir.glob(".tmp-*"):
            try:
                if now - p.stat().st_mtime >= min_age_s:
                    p.unlink()
                    n += 1
            except FileNotFoundError:  # another process removed it
                pass
        return n

