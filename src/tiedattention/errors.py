"""Errors with a parameter name, so that the CLI can print one clear line and exit non-zero."""

from __future__ import annotations


class ParameterError(ValueError):
    """Invalid user input. ``param`` is the parameter's name as the user spells it (CLI option name)."""

    def __init__(self, param: str, message: str):
        self.param = param
        self.message = message
        super().__init__(f"{param}: {message}")

    def __reduce__(self):  # picklable across worker processes (sweeps)
        return (type(self), (self.param, self.message))


class ConvergenceWarning(RuntimeWarning):
    """A solver stopped before reaching its tolerance (the result object says converged=False)."""
