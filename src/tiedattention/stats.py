"""Finite-size extrapolation of simulated observables: the weighted least-squares fit y(d) = a + b/d.

Why it exists: at the dimensions a laptop reaches (d = 50-200) the trained student sits O(1/d) above the
d -> infinity state evolution (docs/theory/state_evolution.md, "Agreement with finite-size ERM";
docs/theory/finite_size.md), several standard errors of 8 seeds at d = 100. The intercept a of a fit over a
few d is the simulations' estimate of the d -> infinity value, to be compared with the theory's; this is the
comparison that `tests/test_agreement.py` makes and that `tiedattention simulate --d 50,100,200` prints.

numpy/scipy only (below both layers): used by `tiedattention simulate` and the slow agreement tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import ParameterError

__all__ = ["Extrapolation", "extrapolate_inverse_d"]


@dataclass(frozen=True)
class Extrapolation:
    """y(d) = intercept + slope/d fitted to per-d means with standard errors ``sems`` (weights 1/sem^2).

    ``intercept_sem`` and ``slope_sem`` are the standard errors propagated from ``sems`` (not rescaled by the
    fit's residuals: with two or three d the residuals say little); ``chi2`` = sum((y - fit)^2/sem^2) on
    ``dof`` = len(dims) - 2 degrees of freedom and ``p_value`` = P(chi2_dof >= chi2) (nan when dof = 0) say
    whether a + b/d describes the data within their errors: a small p-value means curvature in 1/d (a
    larger correction, or d too small) and the intercept's error bar is then too optimistic."""

    intercept: float
    intercept_sem: float
    slope: float
    slope_sem: float
    chi2: float
    dof: int
    p_value: float


def extrapolate_inverse_d(dims, values, sems) -> Extrapolation:
    """Weighted least squares of ``values`` (shape (J,)) against 1/``dims`` (J >= 2 distinct positive
    dimensions) with standard errors ``sems`` (> 0): the d -> infinity intercept and the 1/d slope with their
    standard errors, and the fit's chi^2 (:class:`Extrapolation`). Uses ``numpy.polyfit(..., w=1/sems,
    cov="unscaled")``."""
    d = np.asarray(dims, float).ravel()
    y = np.asarray(values, float).ravel()
    s = np.asarray(sems, float).ravel()
    if not (d.size == y.size == s.size):
        raise ParameterError("d", f"need one value and one standard error per dimension (got {d.size}, {y.size}, "
                                  f"{s.size})")
    if d.size < 2 or np.unique(d).size != d.size:
        raise ParameterError("d", f"a 1/d extrapolation needs at least two distinct dimensions (got {d.tolist()})")
    if not np.all(np.isfinite(d)) or np.any(d <= 0):
        raise ParameterError("d", f"dimensions must be finite and > 0 (got {d.tolist()})")
    if not np.all(np.isfinite(y)):
        raise ParameterError("d", f"values to extrapolate must be finite (got {y.tolist()})")
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ParameterError("seeds", f"standard errors must be finite and > 0 (got {s.tolist()}); "
                                      "use at least 2 seeds per dimension")
    x = 1.0 / d
    coef, cov = np.polyfit(x, y, 1, w=1.0 / s, cov="unscaled")
    slope, intercept = float(coef[0]), float(coef[1])
    chi2 = float(np.sum(((y - (intercept + slope * x)) / s) ** 2))
    dof = int(d.size - 2)
    from scipy import stats

    p = float(stats.chi2.sf(chi2, dof)) if dof > 0 else math.nan
    return Extrapolation(intercept=intercept, intercept_sem=float(math.sqrt(cov[1, 1])), slope=slope,
                         slope_sem=float(math.sqrt(cov[0, 0])), chi2=chi2, dof=dof, p_value=p)
