"""tiedattention: exact high-dimensional theory and finite-size training of single-head tied attention.

Layers (see docs/architecture.md): ``problem`` and ``targets`` are the shared vocabulary; ``theory`` is
pure numpy/scipy (no torch); ``simulation`` is torch; ``sweep`` and ``reproduce`` compose them.
"""

from .errors import ParameterError
from .problem import Problem, Student, Task, alpha_bar, alpha_from_bar
from .targets import parse_target

__version__ = "0.1.0"

__all__ = ["Problem", "Student", "Task", "ParameterError", "parse_target", "alpha_bar", "alpha_from_bar"]
