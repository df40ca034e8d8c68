"""tiedattention: exact high-dimensional theory and finite-size training of single-head tied attention.

Layers (see docs/architecture.md): ``problem`` and ``targets`` are the shared vocabulary; ``theory`` is
pure numpy/scipy (no torch); ``simulation`` is torch; ``sweep`` and ``reproduce`` compose them.

``import tiedattention as ta`` gives the vocabulary (``ta.Problem.from_options(...)``, ``ta.ParameterError``);
``ta.theory``, ``ta.simulation`` and ``ta.sweep`` are imported on first use (``ta.theory.StateEvolution``), so
importing the package does not import scipy's solvers or torch.
"""

from importlib import import_module

from .errors import ParameterError
from .problem import Problem, Student, Task, alpha_bar, alpha_from_bar
from .targets import parse_target

__version__ = "0.1.0"

__all__ = ["Problem", "Student", "Task", "ParameterError", "parse_target", "alpha_bar", "alpha_from_bar"]

_SUBPACKAGES = ("theory", "simulation", "sweep")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBPACKAGES))
