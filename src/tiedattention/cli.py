"""The ``tiedattention`` command: theory | thresholds | simulate | spectrum | scaling | decompose |
sweep | reproduce. Each command lives in ``tiedattention.commands.<name>`` and registers itself here."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="tiedattention",
    help="Exact high-dimensional theory and finite-size training of single-head tied attention.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Commands are registered by the modules below; a module that is missing (an optional part not yet
# installed) is simply not offered.
_COMMANDS = ["theory", "thresholds", "simulate", "spectrum", "scaling", "decompose", "sweep", "reproduce"]
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
