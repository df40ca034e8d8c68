"""The ``tiedattention`` command: theory | thresholds | simulate | spectrum | scaling | decompose |
sweep | reproduce. Each command lives in ``tiedattention.commands.<name>`` and registers itself here."""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Iterator

import typer
from typer.core import TyperGroup


def _is_usage_error(exc: BaseException) -> bool:
    """click's UsageError (BadParameter, NoSuchOption, MissingParameter, ...), whichever click typer uses (its
    own vendored copy or the click package): matched by class name, not by identity."""
    return any(c.__name__ == "UsageError" for c in type(exc).__mro__)


def usage_error_line(exc: BaseException) -> str:
    """click's usage error as the project's one line ``error: --param: message`` (docs/architecture.md "Rules")."""
    param = getattr(exc, "param", None)
    name = None
    if param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or list(getattr(param, "opts", []))
        if getattr(param, "param_type_name", "") == "argument" or not opts:
            name = "--" + str(param.name).replace("_", "-")  # arguments as cli_errors spells them (--name)
        else:
            name = opts[0]
    elif getattr(exc, "option_name", None):  # NoSuchOption
        name = exc.option_name
    else:
        found = re.search(r"(--[A-Za-z0-9][-A-Za-z0-9]*)", exc.format_message())
        name = found.group(1) if found else ("command" if "command" in exc.format_message().lower() else None)
    kind = type(exc).__name__
    message = exc.message if kind == "BadParameter" and exc.message else exc.format_message()
    message = " ".join(message.split())
    return f"error: {name}: {message}" if name else f"error: {message}"


@contextlib.contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if not _is_usage_error(exc) or type(exc).__name__ == "NoArgsIsHelpError":
            raise
        typer.echo(usage_error_line(exc), err=True)
        raise typer.Exit(code=getattr(exc, "exit_code", 2)) from None


class OneLineErrorsGroup(TyperGroup):
    """The app's command group: click's own usage errors (a value of the wrong type, an unknown or missing option,
    an unknown command) are printed as one line ``error: --param: message`` with exit status 2, like every other
    bad input, instead of typer's boxed usage panel. ``--help`` and running with no arguments are unchanged.
    Works for the console script and for ``CliRunner().invoke(app, ...)`` alike (both go through this group)."""

    def make_context(self, info_name, args, parent=None, **extra):  # the group's own options
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):  # the command name, then the command's options (parsed in here)
        with _one_line_usage_errors(), _one_line_warnings():
            return super().invoke(ctx)


def warning_line(message: Warning | str, category: type[Warning]) -> str:
    """A Python warning as the CLI shows it: ``warning: message`` (the category's name where it is not a plain
    UserWarning or RuntimeWarning: ConvergenceWarning, ...), one line, without the file and source line of
    Python's default format, which point into the library rather than at the user's input."""
    text = " ".join(str(message).split())
    plain = category in (UserWarning, RuntimeWarning)
    return f"warning: {text}" if plain else f"warning: {category.__name__}: {text}"


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Inside a command, warnings reach stderr as :func:`warning_line` (Python's filters still apply)."""
    import warnings

    with warnings.catch_warnings():
        warnings.showwarning = lambda message, category, *_, **__: typer.echo(warning_line(message, category),
                                                                             err=True)
        yield


app = typer.Typer(
    name="tiedattention",
    help="Exact high-dimensional theory and finite-size training of single-head tied attention.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrorsGroup,
)

def version_line() -> str:
    """``tiedattention X (python X, numpy X, scipy X, torch X)``: what a bug report needs. Read from the installed
    distributions' metadata, so it imports nothing heavy (torch: "not installed" where it is absent)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from . import __version__

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    deps = ", ".join(f"{n} {of(n)}" for n in ("numpy", "scipy", "torch"))
    return f"tiedattention {__version__} (python {platform.python_version()}, {deps})"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version (and numpy, scipy, torch) and exit")) -> None:
    """Exact high-dimensional theory and finite-size training of single-head tied attention."""


# Commands are registered by the modules below; a module that is missing (an optional part not yet
# installed) is simply not offered.
_COMMANDS = ["theory", "thresholds", "simulate", "spectrum", "scaling", "decompose", "sweep", "reproduce", "phase"]
for _name in _COMMANDS:
    try:
        _mod = importlib.import_module(f"tiedattention.commands.{_name}")
    except ModuleNotFoundError as _exc:  # pragma: no cover - only while a command is not written yet
        if _exc.name != f"tiedattention.commands.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
