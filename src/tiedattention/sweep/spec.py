"""Sweep specifications: a TOML grid of parameters, validated once, expanded into hashed cells.

A spec has two tables (docs/user-guide/sweeps.md)::

    [grid]                      # every key maps to a list; the sweep is the cartesian product
    alpha = [0.05, 0.1]
    lam = [0.01, 0.001]

    [run]
    routes = ["theory"]         # theory | simulate | sleep | "package.module:function"
    # d = 100, seeds = 8, solver = "adam", device = "auto", n_test = ..., seed0 = ...  (simulate)

Grid keys are the problem options of :meth:`Problem.from_options` (``target``, ``noise``, ``noise_out``,
``lam``, ``tokens``, ``beta``, ``beta0``, ``kappa``, ``model``, ``task``) plus ``alpha``, ``d`` and ``seeds``.
``d`` and ``seeds`` may instead be single values in ``[run]``. Every value is validated by building the
:class:`Problem` before anything runs; a bad one raises :class:`ParameterError` naming the parameter.

A :class:`Cell` is one point of the grid for one route. Its ``params`` are canonical (every problem option
with its default filled in, normalised by :class:`Problem`; ``alpha``; ``route``; and only the settings the
route uses), and its ``key`` is the sha256 of the canonical JSON of ``(params, package version)``. The
device is *not* part of the key: a result is the same wherever it was computed.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import ParameterError
from ..problem import Problem, validate_alpha

try:  # Python >= 3.11
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10 needs the tomli backport
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "Cell",
    "SweepSpec",
    "PROBLEM_OPTIONS",
    "GRID_KEYS",
    "BUILTIN_ROUTES",
    "parse_spec",
    "load_spec",
    "cell_key",
    "canonical_json",
    "problem_from_params",
]

#: exactly the keyword arguments of Problem.from_options, in their order
PROBLEM_OPTIONS: tuple[str, ...] = tuple(inspect.signature(Problem.from_options).parameters)
GRID_KEYS: tuple[str, ...] = PROBLEM_OPTIONS + ("alpha", "d", "seeds")
BUILTIN_ROUTES: tuple[str, ...] = ("theory", "simulate", "sleep")
#: [run] settings understood here; further keys are trainer settings handed to simulate_record
KNOWN_SETTINGS: tuple[str, ...] = ("d", "seeds", "solver", "device", "sleep", "n_test", "seed0")
#: settings that never enter a cell's key (where a cell ran does not change its result)
NON_KEY_SETTINGS: tuple[str, ...] = ("device",)


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, floats as Python's shortest repr."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def cell_key(params: Mapping[str, Any], version: str | None = None) -> str:
    """sha256 hex digest of the canonical JSON of (params, package version)."""
    payload = {"params": dict(params), "version": __version__ if version is None else version}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def problem_from_params(params: Mapping[str, Any]) -> Problem:
    """The validated Problem of a cell's params (other keys are ignored)."""
    return Problem.from_options(**{k: params[k] for k in PROBLEM_OPTIONS if k in params})


@dataclass(frozen=True)
class Cell:
    """One unit of work: a route evaluated at one point of the grid."""

    key: str
    route: str
    params: dict[str, Any]
    device: str = "auto"

    def payload(self) -> dict[str, Any]:
        """What a worker needs (plain data: pickles to any executor)."""
        return {"key": self.key, "route": self.route, "params": dict(self.params), "device": self.device}


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the grid, the routes and run settings, and the expanded cells."""

    grid: dict[str, list[Any]]
    routes: tuple[str, ...]
    settings: dict[str, Any]
    cells: tuple[Cell, ...] = field(repr=False)
    source: str | None = field(default=None, repr=False)
    path: str | None = None
    version: str = __version__

    def __len__(self) -> int:
        return len(self.cells)

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.cells]


# --------------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------------
def _where(path: str | None, table: str) -> str:
    return f"[{table}]" + (f" of {path}" if path else "")


def _check_int(name: str, value: Any, lo: int, where: str) -> int:
    ok = not isinstance(value, bool)
    try:
        f = float(value)
        ok = ok and math.isfinite(f) and f.is_integer() and f >= lo
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ParameterError(name, f"must be an integer >= {lo} (got {value!r}) in {where}")
    return int(float(value))


def _normalise_target(value: Any) -> tuple[str, str | None]:
    """Validated target spec; file targets become absolute paths plus a content hash (for the key)."""
    problem = Problem.from_options(target=value)
    spec = problem.task.target.spec
    if spec.startswith("file:"):
        path = Path(spec[len("file:"):]).resolve()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return f"file:{path}", digest
    return spec, None


def _normalise_value(name: str, value: Any, where: str) -> Any:
    """One grid value, validated and normalised (raises ParameterError naming ``name``)."""
    if isinstance(value, bool) and name not in ("target", "model", "task"):  # TOML true/false is not a number
        raise ParameterError(name, f"must be a number (got {str(value).lower()}) in {where}")
    if name == "alpha":
        try:
            return validate_alpha(value, "alpha")
        except ParameterError as exc:
            raise ParameterError("alpha", f"{exc.message} in {where}") from None
    if name == "d":
        return _check_int("d", value, 2, where)  # as the commands' --d (cli_common.check_dimension)
    if name == "seeds":
        return _check_int("seeds", value, 1, where)
    try:
        if name == "target":
            return _normalise_target(value)
        return Problem.from_options(**{name: value}).options()[name]
    except ParameterError as exc:
        raise ParameterError(exc.param, f"{exc.message} in {where}") from None


def _route_ok(route: Any) -> bool:
    if not isinstance(route, str):
        return False
    if route in BUILTIN_ROUTES:
        return True
    mod, sep, attr = route.partition(":")
    parts_ok = all(p.isidentifier() for p in mod.split("."))
    return bool(sep and mod and attr and parts_ok and attr.isidentifier())


def _check_setting(name: str, value: Any, where: str) -> Any:
    if name in ("d", "seeds"):
        return _check_int(name, value, 2 if name == "d" else 1, where)
    if name in ("n_test",):
        return _check_int(name, value, 2, where)  # as simulate_record
    if name == "seed0":
        return _check_int(name, value, 0, where)
    if name == "sleep":
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = float("nan")
        if not math.isfinite(v) or v < 0 or isinstance(value, bool):
            raise ParameterError("sleep", f"must be a number >= 0 (got {value!r}) in {where}")
        return v
    if name in ("solver", "device"):
        if not isinstance(value, str) or not value:
            raise ParameterError(name, f"must be a string (got {value!r}) in {where}")
        if name == "device":
            dev = value.strip().lower()
            if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
                raise ParameterError(  # (the trainers run on cpu or cuda only)
                    "device", f"must be auto, cpu, cuda or cuda:N (got {value!r}) in {where}"
                )
            return dev
        return value
    # trainer settings handed through to simulate_record: plain scalars only, so that they hash
    if isinstance(value, (list, dict)) or value is None:
        raise ParameterError(name, f"must be a single value (got {value!r}) in {where}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParameterError(name, f"must be finite (got {value!r}) in {where}")
    return value


def _route_params(route: str, settings: Mapping[str, Any], point: Mapping[str, Any],
                  needs_d: bool = False) -> dict[str, Any] | None:
    """The settings a route uses, merged with the grid point. None: route does not use this key.
    ``needs_d``: the target's spectrum depends on d (power law, spikes), so the theory uses d too."""
    out: dict[str, Any] = {}
    if route == "theory":
        if needs_d:
            out["d"] = point["d"] if "d" in point else settings["d"]
        return out
    if route == "sleep":
        for k in ("sleep", "d", "seeds"):
            if k in point:
                out[k] = point[k]
            elif k in settings:
                out[k] = settings[k]
        return out
    # simulate and custom routes: every setting except those that do not change results
    for k, v in settings.items():
        if k not in NON_KEY_SETTINGS:
            out[k] = v
    for k in ("d", "seeds"):
        if k in point:
            out[k] = point[k]
    return out


# --------------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------------
def parse_spec(data: str | Mapping[str, Any], path: str | os.PathLike | None = None) -> SweepSpec:
    """Validate a spec (TOML text or an already-parsed mapping) and expand its cells.

    Raises :class:`ParameterError` naming the first bad key or value; nothing is computed.
    """
    where_path = str(path) if path is not None else None
    source = None
    if isinstance(data, str):
        source = data
        try:
            data = tomllib.loads(data)
        except tomllib.TOMLDecodeError as exc:
            raise ParameterError("spec", f"{where_path or 'spec'} is not valid TOML: {exc}") from None
    data = dict(data)
    for top in data:
        if top not in ("grid", "run"):
            in_path = f" {where_path}" if where_path else ""
            raise ParameterError(str(top), f"unknown table in spec{in_path} (expected [grid] and [run])")
    grid_in = data.get("grid", {})
    run_in = dict(data.get("run", {}))
    if not isinstance(grid_in, Mapping) or not isinstance(run_in, Mapping):
        raise ParameterError("spec", "[grid] and [run] must be tables")
    gwhere, rwhere = _where(where_path, "grid"), _where(where_path, "run")

    # ---- grid: known keys, non-empty lists, every value validated on its own ----
    grid: dict[str, list[Any]] = {}
    target_hash: dict[str, str | None] = {}
    for name, values in grid_in.items():
        if name not in GRID_KEYS:
            raise ParameterError(
                name, f"unknown parameter in {gwhere} (expected one of {', '.join(GRID_KEYS)})"
            )
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise ParameterError(name, f"needs at least one value in {gwhere}")
        normalised = []
        for v in values:
            nv = _normalise_value(name, v, gwhere)
            if name == "target":
                nv, digest = nv
                target_hash[nv] = digest
            if nv not in normalised:  # duplicates in a list would only duplicate cells
                normalised.append(nv)
        grid[name] = normalised
    if "alpha" not in grid:
        raise ParameterError("alpha", f"the grid needs at least one alpha in {gwhere}")

    # ---- run: routes and settings ----
    routes = run_in.pop("routes", ["theory"])
    if isinstance(routes, str):
        routes = [routes]
    if not isinstance(routes, list) or not routes:
        raise ParameterError("routes", f"must be a non-empty list in {rwhere}")
    for r in routes:
        if not _route_ok(r):
            raise ParameterError(
                "routes",
                f"unknown route {r!r} in {rwhere} "
                f"(expected {', '.join(BUILTIN_ROUTES)} or 'module:function')",
            )
    routes = list(dict.fromkeys(routes))
    custom = any(r not in BUILTIN_ROUTES for r in routes)
    settings: dict[str, Any] = {}
    for name, value in run_in.items():
        if name in grid and name in ("d", "seeds"):
            raise ParameterError(name, f"is given both in [grid] and in {rwhere}")
        if name in PROBLEM_OPTIONS or name == "alpha":
            raise ParameterError(name, f"is a grid parameter: put it in [grid], not in {rwhere}")
        if name not in KNOWN_SETTINGS and "simulate" not in routes and not custom:
            raise ParameterError(
                name, f"unknown setting in {rwhere} (expected routes, {', '.join(KNOWN_SETTINGS)})"
            )
        settings[name] = _check_setting(name, value, rwhere)
    device = settings.get("device", "auto")
    if "simulate" in routes:
        for need in ("d", "seeds"):
            if need not in grid and need not in settings:
                raise ParameterError(need, f"route simulate needs it: set it in [grid] or in {rwhere}")

    # ---- cells: cartesian product x routes, canonical params, deduplicated by key ----
    names = list(grid)
    defaults = Problem.from_options().options()
    cells: list[Cell] = []
    seen: set[str] = set()
    needs_d: dict[str, bool] = {}  # per problem (its options' canonical JSON), validated once
    for combo in itertools.product(*(grid[n] for n in names)):
        point = dict(zip(names, combo, strict=True))
        options = {k: point.get(k, defaults[k]) for k in PROBLEM_OPTIONS}
        opt_key = canonical_json(options)
        if opt_key not in needs_d:  # combinations are validated too (cross-constraints)
            problem = problem_from_params(options)
            needs_d[opt_key] = problem.task.target.needs_d
            if needs_d[opt_key] and "theory" in routes and "d" not in point and "d" not in settings:
                raise ParameterError("d", f"route theory needs d for target {problem.task.target} (its spectrum "
                                          f"depends on d): set it in [grid] or in {rwhere}")
        base = dict(options)
        if target_hash.get(base["target"]):
            base["target_sha256"] = target_hash[base["target"]]
        base["alpha"] = point["alpha"]
        for route in routes:
            params = {**base, "route": route, **_route_params(route, settings, point, needs_d[opt_key])}
            key = cell_key(params)
            if key in seen:
                continue
            seen.add(key)
            cells.append(Cell(key=key, route=route, params=params, device=device))
    return SweepSpec(
        grid=grid, routes=tuple(routes), settings=settings, cells=tuple(cells), source=source,
        path=where_path,
    )


def load_spec(path: str | os.PathLike) -> SweepSpec:
    """Read and validate a TOML spec file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ParameterError("spec", f"cannot read {p}: {exc.strerror or exc}") from None
    return parse_spec(text, path=p)
