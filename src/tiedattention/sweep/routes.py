"""Routes: what a cell computes. A route is ``callable(params) -> dict of results``.

* ``theory``   -- :func:`tiedattention.theory.theory_record` at (problem, alpha);
* ``simulate`` -- :func:`tiedattention.simulation.simulate_record` at (problem, alpha, d, seeds, trainer
  settings), on the worker's GPU when it has one (``device = "auto"``);
* ``sleep``    -- a stand-in for tests and dry runs: sleeps ``params["sleep"]`` seconds and returns numbers
  determined by the params, plus the pid that computed them;
* ``"package.module:function"`` -- any importable function taking the params dict and returning a dict.

Heavy modules (the theory, torch) are imported inside the route, on the worker that runs it.
:func:`run_cell` is what executors ship to workers: it runs a route on a cell payload and returns the
record the store writes.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import socket
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from .. import __version__
from ..errors import ParameterError
from .spec import BUILTIN_ROUTES, KNOWN_SETTINGS, PROBLEM_OPTIONS, canonical_json, problem_from_params

__all__ = [
    "CellError", "route_theory", "route_simulate", "route_sleep", "get_route", "check_route", "run_cell",
    "resolve_device", "check_local_device",
]

RouteFn = Callable[..., Mapping[str, Any]]


class CellError(RuntimeError):
    """A route raised while computing a cell; the message names the original exception type."""


def resolve_device(device: str | None) -> str:
    """'auto' -> 'cuda' where torch sees a GPU, else 'cpu'; anything else unchanged."""
    device = (device or "auto").lower()
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:  # the simulation itself will say torch is missing
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def route_theory(params: Mapping[str, Any], device: str | None = None) -> dict[str, Any]:
    from ..theory import theory_record

    d = params.get("d")  # present only for targets whose theory depends on d (spec._route_params)
    return dict(theory_record(problem_from_params(params), float(params["alpha"]), d=None if d is None else int(d)))


_SIM_FIXED = ("d", "seeds")


def route_simulate(params: Mapping[str, Any], device: str | None = None) -> dict[str, Any]:
    from ..simulation import simulate_record

    if params.get("solver") == "gamp":  # GAMP sits above the simulation layer; register it on the worker
        from ..amp import register as register_gamp

        register_gamp()

    trainer = {k: v for k, v in params.items() if k not in PROBLEM_OPTIONS and k not in _SIM_FIXED
               and k not in ("alpha", "route", "target_sha256", "sleep")}
    dev = resolve_device(device)
    out = dict(
        simulate_record(
            problem_from_params(params), float(params["alpha"]), int(params["d"]), int(params["seeds"]),
            device=dev, **trainer,
        )
    )
    out.setdefault("device", dev)
    return out


def _unit_hash(text: str) -> float:
    """A float in [0, 1) determined by ``text``."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:13], 16) / 16**13


def route_sleep(params: Mapping[str, Any], device: str | None = None) -> dict[str, Any]:
    """Sleep ``params['sleep']`` seconds; return ``value`` (a function of the params only) and the pid."""
    time.sleep(float(params.get("sleep", 0.0)))
    canon = canonical_json({k: v for k, v in params.items()})
    return {"value": _unit_hash(canon), "value2": float(params["alpha"]) * 2.0, "pid": os.getpid()}


_BUILTIN: dict[str, RouteFn] = {"theory": route_theory, "simulate": route_simulate, "sleep": route_sleep}


def get_route(name: str) -> RouteFn:
    """The callable of a route name (built-in or ``module:function``)."""
    if name in _BUILTIN:
        return _BUILTIN[name]
    mod, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise ParameterError("routes", f"cannot load route {name!r}: {exc}") from None
    if not callable(fn):
        raise ParameterError("routes", f"route {name!r} is not callable")
    return fn


#: the leading parameters of every solver that the trainer fills in (not [run] settings)
_SOLVER_FIXED = ("seed", "callback")
#: simulate_record's own settings that a spec may set (the others are filled in by the route or are not data)
_RECORD_SETTINGS = ("seed0", "n_test", "threads", "rank_tol", "scaled_starts")
#: train's settings that a spec may set
_TRAIN_SETTINGS = ("chunk",)


def solver_settings(fn: Callable[..., Any]) -> set[str] | None:
    """The keyword options a registered solver takes (its keyword parameters after ``problem, obj``, less seed
    and callback); None when it takes ``**options`` that cannot be resolved (a custom solver). The ``gamp``
    solver hands its options to :func:`tiedattention.amp.gamp`, whose keyword parameters they are."""
    params = list(inspect.signature(fn).parameters.values())[2:]
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - set(_SOLVER_FIXED)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        from ..amp import gamp, solve_gamp

        if fn is not solve_gamp:
            return None
        names |= {p.name for p in inspect.signature(gamp).parameters.values()
                  if p.kind is p.KEYWORD_ONLY} - set(_SOLVER_FIXED)
    return names


def _check_record_settings(solver: str, settings: Mapping[str, Any]) -> None:
    """The values of simulate_record's own [run] settings (n_test, seed0, threads, rank_tol, scaled_starts), by
    the checks simulate_record makes: ParameterError naming the setting, before any cell runs."""
    from ..simulation.api import _validate, check_scaled_starts

    for k in ("threads", "rank_tol"):
        v = settings.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ParameterError(k, f"must be a number (got {v!r}) in [run]")
    try:
        _validate(2, 1, solver, settings.get("n_test", 2), settings.get("seed0", 0), settings.get("threads"),
                  settings.get("rank_tol", 1e-6))
        check_scaled_starts(settings.get("scaled_starts"), solver)
    except ParameterError as exc:
        raise ParameterError(exc.param, f"{exc.message} in [run]") from None


def _check_simulate_settings(settings: Mapping[str, Any]) -> None:
    """``solver`` is a registered solver (gamp included) and every other [run] key is a setting of the route,
    of simulate_record or of that solver: ParameterError naming the first key that is not."""
    from ..amp import register as register_gamp
    from ..simulation import SOLVERS, simulate_record

    register_gamp()  # the "gamp" solver lives above the simulation layer; route_simulate registers it too
    solver = settings.get("solver", inspect.signature(simulate_record).parameters["solver"].default)
    if solver not in SOLVERS:
        raise ParameterError("solver", f"unknown solver {solver!r} in [run] (known: {', '.join(sorted(SOLVERS))})")
    _check_record_settings(solver, settings)
    own = solver_settings(SOLVERS[solver])
    if own is None:  # a custom solver taking **options: nothing to check against
        return
    known = set(KNOWN_SETTINGS) | set(_RECORD_SETTINGS) | set(_TRAIN_SETTINGS)
    for k in settings:
        if k not in known and k not in own:
            raise ParameterError(
                k, f"unknown key in [run]: not a setting of the simulate route or of solver {solver!r} "
                   f"(its settings: {', '.join(sorted(own)) or 'none'}; the route's: "
                   f"{', '.join(sorted(known - {'sleep'}))})",
            )


def check_local_device(settings: Mapping[str, Any]) -> None:
    """The [run] ``device`` of a simulation, where the workers are local processes (this machine): ``cuda`` needs
    CUDA here, ``cuda:N`` a GPU number N. ParameterError("device") otherwise; ``auto`` and ``cpu`` always pass.
    (Not for a dask cluster: its workers may have the GPU the driver lacks.)"""
    device = str(settings.get("device", "auto"))
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ParameterError("device", f"{device!r} in [run], but CUDA is not available on this machine (the local "
                                       "workers'); use auto or cpu, or a dask cluster with GPU workers")
    n = torch.cuda.device_count()
    if device.startswith("cuda:") and int(device[5:]) >= n:
        raise ParameterError("device", f"{device!r} in [run], but this machine has {n} GPU(s) "
                                       f"(cuda:0 ... cuda:{n - 1})")


def check_route(name: str, settings: Mapping[str, Any] | None = None) -> None:
    """Fail early (ParameterError) if a route cannot run here: module missing, unknown solver, a [run] key that
    is not a setting of the route or of its solver. Nothing is written."""
    settings = dict(settings or {})
    if name == "theory":
        try:
            from ..theory import theory_record  # noqa: F401
        except ImportError as exc:
            raise ParameterError("routes", f"route 'theory' is not available: {exc}") from None
    elif name == "simulate":
        try:
            from ..simulation import simulate_record  # noqa: F401
        except ImportError as exc:
            raise ParameterError(
                "routes", f"route 'simulate' is not available ({exc}); install tiedattention[sim]"
            ) from None
        _check_simulate_settings(settings)
    elif name not in BUILTIN_ROUTES:
        get_route(name)


def run_cell(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Compute one cell on whichever worker runs this; return the record to store.

    The record holds the params (one column each), the route's results (a result that would overwrite a
    param with a different value is renamed ``result_<name>``), ``key``, ``version``, ``params_json``
    (what the key was hashed from), and where/when it ran (``worker_host``, ``worker_pid``,
    ``started_at``, ``seconds``).
    """
    params = dict(payload["params"])
    route = payload["route"]
    fn = get_route(route)
    started = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    t0 = time.perf_counter()
    try:
        result = fn(params, device=payload.get("device")) if route in _BUILTIN else fn(params)
    except Exception as exc:
        # re-raised as a plain exception: the route's own may not pickle back to the driver (an exception
        # class with a custom __init__), which would read as a crashed worker instead of a failed cell
        raise CellError(f"{type(exc).__name__}: {exc}") from None
    seconds = time.perf_counter() - t0
    if not isinstance(result, Mapping):
        raise TypeError(f"route {route!r} returned {type(result).__name__}, expected a dict")
    record: dict[str, Any] = dict(params)
    for k, v in result.items():
        if k in record and record[k] != v:
            record[f"result_{k}"] = v
        else:
            record[k] = v
    record.update(
        key=payload["key"],
        version=__version__,
        params_json=canonical_json(params),
        worker_host=socket.gethostname(),
        worker_pid=os.getpid(),
        started_at=started,
        seconds=seconds,
    )
    return record
