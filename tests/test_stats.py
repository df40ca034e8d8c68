"""The 1/d extrapolation of simulated observables (tiedattention.stats): closed forms, error propagation
checked by Monte Carlo, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiedattention.errors import ParameterError
from tiedattention.stats import extrapolate_inverse_d


def test_an_exact_line_is_recovered_with_zero_chi2():
    dims = [50, 100, 200, 400]
    fit = extrapolate_inverse_d(dims, [0.3 + 2.5 / d for d in dims], [0.01, 0.02, 0.005, 0.03])
    assert fit.intercept == pytest.approx(0.3, abs=1e-13) and fit.slope == pytest.approx(2.5, abs=1e-10)
    assert fit.chi2 == pytest.approx(0.0, abs=1e-20) and fit.dof == 2 and fit.p_value == pytest.approx(1.0)


def test_two_dimensions_closed_form():
    """Two points: the line through them, a = (d1 y1 - d2 y2)/(d1 - d2), with s.e.
    sqrt(d1^2 s1^2 + d2^2 s2^2)/|d1 - d2|; no degree of freedom left (chi2 = 0, p = nan)."""
    d1, d2, y1, y2, s1, s2 = 50.0, 100.0, 0.4535, 0.4365, 0.0048, 0.0040
    fit = extrapolate_inverse_d([d1, d2], [y1, y2], [s1, s2])
    assert fit.intercept == pytest.approx((d1 * y1 - d2 * y2) / (d1 - d2), rel=1e-12)
    assert fit.intercept_sem == pytest.approx(math.hypot(d1 * s1, d2 * s2) / abs(d1 - d2), rel=1e-10)
    assert fit.slope == pytest.approx((y1 - y2) / (1 / d1 - 1 / d2), rel=1e-10)
    assert fit.dof == 0 and fit.chi2 == pytest.approx(0.0, abs=1e-20) and math.isnan(fit.p_value)


def test_error_bars_and_chi2_are_calibrated():
    """4000 synthetic data sets y_j = a + b/d_j + s_j N(0, 1): the intercepts spread by the reported s.e.,
    chi2 averages its dof and the p-values are uniform (fixed seed)."""
    rng = np.random.default_rng(7)
    dims = np.array([50.0, 70.0, 100.0, 200.0])
    sems = np.array([0.005, 0.004, 0.003, 0.002])
    truth = 0.2 + 1.1 / dims
    fits = [extrapolate_inverse_d(dims, truth + sems * rng.standard_normal(4), sems) for _ in range(4000)]
    a = np.array([f.intercept for f in fits])
    assert fits[0].intercept_sem == pytest.approx(fits[1].intercept_sem)  # depends on the errors only
    assert a.mean() == pytest.approx(0.2, abs=4 * fits[0].intercept_sem / math.sqrt(a.size))
    assert a.std(ddof=1) == pytest.approx(fits[0].intercept_sem, rel=0.05)
    chi2 = np.array([f.chi2 for f in fits])
    assert chi2.mean() == pytest.approx(2.0, rel=0.06)
    p = np.array([f.p_value for f in fits])
    assert abs(p.mean() - 0.5) < 0.02 and abs(np.mean(p < 0.05) - 0.05) < 0.012


def test_curvature_shows_in_the_p_value():
    dims = np.array([20.0, 40.0, 80.0, 160.0])
    y = 0.2 + 1.0 / dims + 400.0 / dims**2  # a 1/d^2 term the fit does not have
    fit = extrapolate_inverse_d(dims, y, np.full(4, 1e-3))
    assert fit.p_value < 1e-6 and fit.intercept < 0.2


@pytest.mark.parametrize("dims, values, sems, name", [
    ([100], [0.1], [0.01], "d"),
    ([100, 100], [0.1, 0.2], [0.01, 0.01], "d"),
    ([100, 0], [0.1, 0.2], [0.01, 0.01], "d"),
    ([50, 100], [0.1], [0.01, 0.01], "d"),
    ([50, 100], [0.1, float("nan")], [0.01, 0.01], "d"),
    ([50, 100], [0.1, 0.2], [0.01, 0.0], "seeds"),
])
def test_bad_input_names_the_parameter(dims, values, sems, name):
    with pytest.raises(ParameterError) as e:
        extrapolate_inverse_d(dims, values, sems)
    assert e.value.param == name
