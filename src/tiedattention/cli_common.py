"""Shared pieces of the command-line interface: problem options, α lists, JSON Lines, error handling.

Every command takes the same problem options (ARCHITECTURE.md) with the same defaults; they are
declared once here as ``Annotated`` aliases, and :func:`problem_from_cli` turns them into a validated
:class:`~tiedattention.problem.Problem`. :func:`cli_errors` turns a :class:`ParameterError` into one
line on stderr and exit code 2, so no command prints half a result.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from .errors import ParameterError
from .problem import Problem, validate_alpha
from .targets import validate_dimension

TargetOpt = Annotated[
    str, typer.Option("--target", help="mp:K | powerlaw:G[:cutoff=R] | spikes:a,b[+mp:K] | file:eig.npy")
]
NoiseOpt = Annotated[float, typer.Option("--noise", help="logit-noise strength Δ")]
NoiseOutOpt = Annotated[float, typer.Option("--noise-out", help="output-noise variance Δ_out")]
LamOpt = Annotated[float, typer.Option("--lam", help="weight decay λ (nuclear-norm penalty λ·d·Tr S)")]
TokensOpt = Annotated[int, typer.Option("--tokens", help="sequence length T")]
BetaOpt = Annotated[float, typer.Option("--beta", help="student temperature β")]
Beta0Opt = Annotated[float, typer.Option("--beta0", help="teacher temperature β0")]
KappaOpt = Annotated[float, typer.Option("--kappa", help="student width ratio κ = p/d")]
ModelOpt = Annotated[str, typer.Option("--model", help="factorized | direct")]
TaskOpt = Annotated[str, typer.Option("--task", help="seq2lab | seq2seq")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON Lines instead of a table")]


def problem_from_cli(
    target: str, noise: float, noise_out: float, lam: float, tokens: int, beta: float, beta0: float,
    kappa: float, model: str, task: str,
) -> Problem:
    """Validated problem from the shared options (raises ParameterError with the option's name)."""
    return Problem.from_options(
        target=target, noise=noise, noise_out=noise_out, lam=lam, tokens=tokens, beta=beta, beta0=beta0,
        kappa=kappa, model=model, task=task,
    )


# the problem options shared by every command: (name, annotated type, default) -- ARCHITECTURE.md's contract
PROBLEM_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("target", TargetOpt, "mp:0.5"),
    ("noise", NoiseOpt, 0.5),
    ("noise_out", NoiseOutOpt, 0.0),
    ("lam", LamOpt, 0.01),
    ("tokens", TokensOpt, 2),
    ("beta", BetaOpt, 1.0),
    ("beta0", Beta0Opt, 1.0),
    ("kappa", KappaOpt, 1.0),
    ("model", ModelOpt, "factorized"),
    ("task", TaskOpt, "seq2lab"),
)
LAM_DEFAULT = {name: default for name, _, default in PROBLEM_OPTIONS}["lam"]  # the --lam a user did not set


def with_problem(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a typer command taking ``problem``: adds the shared problem options to its signature,
    validates them once (one error line, exit 2) and passes the :class:`Problem` in their place."""
    import typing

    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)  # resolve postponed (string) annotations
    own = [p.replace(annotation=hints.get(name, p.annotation)) for name, p in sig.parameters.items()
           if name != "problem"]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annot)
        for name, annot, default in PROBLEM_OPTIONS
    ]

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        opts = {name: kwargs.pop(name) for name, _, _ in PROBLEM_OPTIONS}
        with cli_errors():
            problem = problem_from_cli(**opts)
        return fn(problem=problem, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=own + shared)  # type: ignore[attr-defined]
    annotations = {k: v for k, v in hints.items() if k != "problem"}
    annotations.update({name: annot for name, annot, _ in PROBLEM_OPTIONS})
    wrapper.__annotations__ = annotations
    return wrapper


def check_dimension(d: int | None, name: str = "d") -> None:
    """The one check of ``--d`` (or another dimension option, ``name``) shared by the commands and the phase
    diagram's API: not given (None) or an integer >= 2 (a bool or a non-integral number is refused too)."""
    validate_dimension(d, name)


def parse_dimensions(text: str, name: str = "d") -> list[int]:
    """'100' or '50,100,200' -> distinct integers >= 2, in the order given."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ParameterError(name, f"cannot read '{text}' (expected an integer or a list like 50,100,200)") from None
    if not values:
        raise ParameterError(name, "needs at least one value")
    for v in values:
        check_dimension(v, name)
    if len(set(values)) != len(values):
        raise ParameterError(name, f"dimensions must be distinct (got {text})")
    return values


def parse_floats(text: str, name: str = "alpha", positive: bool = True) -> list[float]:
    """'0.1,0.5,4' or 'start:stop:num' (log-spaced) -> list of floats, validated."""
    text = text.strip()
    lo = hi = num = None
    try:
        if ":" in text:
            a, b, k = text.split(":")
            lo, hi, num = float(a), float(b), int(k)
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ParameterError(name, f"cannot read '{text}' (expected a,b,c or start:stop:num)") from None
    if lo is not None:  # (the form was right: say what is wrong with the numbers, not that it cannot be read)
        if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
            raise ParameterError(name, f"'{text}': start:stop:num is log-spaced, so start and stop must be finite and "
                                       f"> 0 (a list a,b,c takes any values)")
        if num < 1:
            raise ParameterError(name, f"'{text}': num must be >= 1 (got {num})")
        values = list(np.geomspace(lo, hi, num))
    if lo is not None and lo == hi and num > 1:
        raise ParameterError(name, f"'{text}' gives {num} identical values (start = stop): give start != stop or num 1")
    if not values:
        raise ParameterError(name, "needs at least one value")
    if positive:
        values = [validate_alpha(v, name) for v in values]
    return values


def check_output_file(path: Path | str | None, name: str, suffix: str | tuple[str, ...] | None = None) -> None:
    """The checks of an output file option, before anything is computed: its directory exists, it is not itself a
    directory, and (``suffix``: ".png", or a tuple of allowed suffixes) it has that suffix.
    ParameterError(``name``) otherwise."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise ParameterError(name, f"'{path}' is a directory, not a file")
    allowed = (suffix,) if isinstance(suffix, str) else suffix
    if allowed is not None and path.suffix.lower() not in allowed:
        kinds = allowed[0] if len(allowed) == 1 else ", ".join(allowed[:-1]) + " or " + allowed[-1]
        raise ParameterError(name, f"must be a {kinds} file (got '{path}')")
    if not path.parent.is_dir():
        raise ParameterError(name, f"directory '{path.parent}' does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):  # (written through a temporary file in that directory)
        raise ParameterError(name, f"directory '{path.parent}' is not writable")


def output_dir(value: str | Path, name: str = "out") -> Path:
    """An output directory option given as text, checked (:func:`check_output_dir`) and as a Path. An empty or
    blank value is refused: ``Path("")`` is the working directory, so ``--out "$UNSET"`` would write there
    without a word. (The options are declared ``str`` for this: typer turns "" into ``Path(".")``.)"""
    if isinstance(value, str) and not value.strip():
        raise ParameterError(name, "is empty (to write into the working directory, say --" + name + " .)")
    path = Path(value)
    check_output_dir(path, name)
    return path


def check_output_dir(path: Path, name: str = "out") -> None:
    """An output directory option, before anything is computed: it is a directory or can be created (no part of
    it is an existing file). ParameterError(``name``) otherwise."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if p.is_dir():
                if not os.access(p, os.W_OK | os.X_OK):
                    raise ParameterError(name, f"directory '{p}' is not writable" if p == path else
                                         f"cannot create directory '{path}': '{p}' is not writable")
                return
            if p == path:
                raise ParameterError(name, f"'{path}' is a file, not a directory")
            raise ParameterError(name, f"cannot create directory '{path}': '{p}' is a file")
        if p.is_symlink():
            raise ParameterError(name, f"cannot create directory '{path}': '{p}' is a broken link")


def new_file_mode() -> int:
    """The permission bits a newly created file gets under the current umask (0o666 & ~umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` atomically: ``write(tmp)`` fills a temporary file in the same directory with the same
    suffix (so writers that pick a format from the suffix pick the right one), which gets the mode a new file
    would get (:func:`new_file_mode`, not mkstemp's 0600), is flushed to disk and is then renamed over ``path``
    (os.replace). On any error the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, new_file_mode())
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def progress_bar(console: Any = None, disable: bool = False) -> Any:
    """A transient rich progress bar on stderr (``console``, default a new stderr Console). Off where stderr is
    not a terminal: rich draws nothing there but still wrote an empty line to stderr at the end of each bar."""
    from rich.console import Console
    from rich.progress import Progress

    console = console if console is not None else Console(stderr=True)
    return Progress(console=console, transient=True, disable=disable or not console.is_terminal)


# the options of a table title, in order, with their symbols (problem_title)
_TITLE_SYMBOLS = {"target": "", "model": "", "task": "", "noise": "Δ=", "noise_out": "Δ_out=", "lam": "λ=",
                  "tokens": "T=", "kappa": "κ=", "beta": "β=", "beta0": "β0="}


def problem_title(problem: Problem, always: tuple[str, ...] = ("target", "noise", "lam", "tokens"),
                  skip: tuple[str, ...] = ()) -> str:
    """The problem as a table title: the options in ``always``, and every other one that differs from its default
    (Problem.from_options()), except those in ``skip``; numbers to 6 digits, e.g. "mp:0.823 Δ=0.0307407
    Δ_out=0.136091 λ=1.45453e-05 T=2 β0=2.53497". A title that named only target, Δ, λ and T hid the output noise,
    temperatures, width and model a table was computed at."""
    options, default = problem.options(), Problem.from_options().options()
    words = []
    for name, symbol in _TITLE_SYMBOLS.items():
        value = options[name]
        if name in skip or (name not in always and value == default[name]):
            continue
        words.append(f"{symbol}{value:g}" if isinstance(value, float) else f"{symbol}{value}")
    return " ".join(words)


def print_table(table: Any, min_width: int = 0) -> None:
    """Print a rich table on stdout at a width that fits its columns: the terminal's width, or the table's
    natural width where that is wider (piped output gets rich's 80 columns, which would cut numbers to '0.38…')."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.measure import Measurement

    console = Console()
    need = Measurement.get(console, console.options.update_width(10_000), table).maximum
    title = cell_len(str(table.title or ""))
    if title > need:  # rich wraps a title to the table's width: widen the table instead
        table.min_width = need = title
    width = max(console.width, need, min_width)
    (console if width == console.width else Console(width=width)).print(table)


def _clean(obj: Any) -> Any:
    """JSON-safe: numpy scalars to Python, non-finite floats to null (never a silent NaN that looks right)."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _clean(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def emit_json(record: dict[str, Any]) -> None:
    """One JSON object per line on stdout, flushed (JSON Lines)."""
    sys.stdout.write(json.dumps(_clean(record)) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Print a ParameterError as one line naming the parameter and exit with status 2."""
    try:
        yield
    except ParameterError as exc:
        name = exc.param if exc.param.startswith("-") else "--" + exc.param.replace("_", "-")
        typer.echo(f"error: {name}: {exc.message}", err=True)
        raise typer.Exit(code=2) from None


#: the figure formats a command's ``--out`` accepts, by suffix
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A batch system's SIGTERM stops a store-backed run like Ctrl-C: finished cells stay, the rest is cancelled."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. called from a test runner thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def resumable(command: str, again: str | None = None, failed_cells: bool = True) -> Iterator[None]:
    """Run a store-backed job (sweep, reproduce, phase) the same way in every command: SIGTERM acts as Ctrl-C; an
    interrupt exits with status 130 and one line saying how to resume (``again``: the command to run again;
    default "run the same command again"); with ``failed_cells``, a RuntimeError (cells that failed) exits with
    status 1 and one line. Finished cells are in the store either way."""
    from click.exceptions import Exit

    from .sweep import SweepInterrupted

    try:
        with sigterm_as_interrupt():
            yield
    except SweepInterrupted as exc:  # (its message already says to run the same sweep again)
        hint = f" (same command: {again})" if again else ""
        typer.echo(f"{command}: {exc}{hint}", err=True)
        raise typer.Exit(code=130) from None
    except KeyboardInterrupt:  # before the first cell was submitted
        typer.echo(f"{command}: interrupted; run the same command again to resume", err=True)
        raise typer.Exit(code=130) from None
    except RuntimeError as exc:
        if isinstance(exc, Exit) or not failed_cells:  # (click's Exit is a RuntimeError)
            raise
        typer.echo(f"{command}: {exc}", err=True)
        raise typer.Exit(code=1) from None
    except OSError as exc:  # a write that fails mid-run (disk full, store unmounted), a lost scheduler
        where = f": '{exc.filename}'" if exc.filename else ""
        where += f" -> '{exc.filename2}'" if getattr(exc, "filename2", None) else ""  # a rename's target
        typer.echo(f"{command}: stopped: {exc.strerror or exc}{where}; the finished cells are in the store (fix the "
                   f"cause and run the same command again to resume)", err=True)
        raise typer.Exit(code=1) from None
