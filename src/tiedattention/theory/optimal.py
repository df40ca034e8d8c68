"""Optimal regularisation: the weight decay lambda that minimises the state evolution's test error at a given alpha.

:func:`optimal_lambda` answers "what is the best lambda at this alpha, and what test error does it give?" for any
problem (target, model, T, beta, noise, ...), :func:`optimal_curve` along a list of alphas (``tiedattention theory
--optimal-lam``). The objective is the SE test error against noisy labels (``test_error``), a function of log lambda.

The search, per alpha:

1. **scan**: ``grid`` log-spaced lambdas over ``lam_range`` (both ends included), solved in increasing lambda, each
   warm-started from the nearest already solved regular point (:meth:`StateEvolution.solve_warm`, which re-solves
   cold where the warm solve fails). The test error along lambda can have several local minima -- at small lambda
   the interpolation peak (a local maximum of the test error near the interpolation threshold) separates a
   small-lambda branch from the regularised one -- and a local refinement alone would find whichever basin it
   started in; the scan over the whole range is what protects against that (within its resolution: two minima
   closer than a scan step, or a basin narrower than one, can still be missed). The number of scan points that are
   local minima is reported (``lam_scan_local_minima``).
2. **refinement**: bounded Brent (``scipy.optimize.minimize_scalar(method="bounded")``) in log lambda on the bracket
   of the best scan point's two neighbours, to ``xatol`` in log lambda.

Only converged regular SE points count: a point that did not converge, that failed, or that sits in the zero phase
(the collapsed estimator S_hat = 0, whose test error is that of uniform attention) is +inf for the search; the scan
reports it (``lam_scan_phase``, ``test_error_scan`` null where not converged) and ``lam_message`` counts them.

The optimum is the evaluated point with the lowest test error (scan or refinement). Where it is an end of
``lam_range`` (``lam_opt_at_boundary``; e.g. a noiseless problem above perfect recovery, whose test error keeps
decreasing as lambda -> 0+) the optimum is not bracketed: ``lam_converged`` is False and ``lam_message`` says which
end and which way the test error goes. The record returned is :func:`tiedattention.theory.api.theory_record` of the
problem at ``lam = lam_opt`` (a cold solve, so the ``theory --json`` contract holds and equals a direct call) plus
the fields of :data:`FIELDS`. Deterministic: the same inputs give the same digits (the order of the solves and
their warm starts is fixed).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from ..errors import ConvergenceWarning, ParameterError
from ..problem import Problem, validate_alpha
from .api import record_of, theory_record
from .state_evolution import SEResult, StateEvolution

__all__ = ["FIELDS", "LAM_RANGE", "optimal_curve", "optimal_lambda", "check_lam_range"]

#: default search range of lambda (both ends included in the scan)
LAM_RANGE = (1e-5, 10.0)
#: default number of scan points over the range (13 over 1e-5..10: two per decade, 1e-3 and 1e-2 among them)
GRID = 13
#: default tolerance of the refinement, in log lambda
XATOL = 0.01
#: optimal_curve: half-width, in decades, of the narrow scan around the previous alpha's optimum, and its points
NARROW_DECADES = 1.0
NARROW_GRID = 5
#: the fields added to the theory record (besides ``lam``, the lambda of the record)
FIELDS = ("lam_opt", "lam_opt_at_boundary", "lam_scan", "test_error_scan", "lam_scan_phase", "lam_scan_local_minima",
          "lam_scan_kind", "lam_evaluations", "lam_seconds", "lam_converged", "lam_message")


def check_lam_range(lam_range: Iterable[float], name: str = "lam-range") -> tuple[float, float]:
    """Two finite positive numbers lo < hi; ParameterError(``name``) otherwise."""
    try:
        lo, hi = (float(v) for v in lam_range)
    except (TypeError, ValueError):
        raise ParameterError(name, f"expected two numbers lo, hi (got {lam_range!r})") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi > 0):
        raise ParameterError(name, f"both ends must be finite and > 0 (got {lo:g}, {hi:g})")
    if not lo < hi:
        raise ParameterError(name, f"needs lo < hi (got {lo:g}, {hi:g})")
    return lo, hi


def parse_lam_range(text: str, name: str = "lam-range") -> tuple[float, float]:
    """'lo:hi' (e.g. '1e-5:10') -> (lo, hi), validated by :func:`check_lam_range`."""
    parts = str(text).strip().split(":")
    if len(parts) != 2:
        raise ParameterError(name, f"cannot read '{text}' (expected lo:hi, e.g. 1e-5:10)")
    try:
        values = (float(parts[0]), float(parts[1]))
    except ValueError:
        raise ParameterError(name, f"cannot read '{text}' (expected lo:hi, e.g. 1e-5:10)") from None
    return check_lam_range(values, name)


def _usable(res: SEResult) -> bool:
    return bool(res.converged) and res.phase == "regular" and math.isfinite(res.test_error)


def _phase(res: SEResult) -> str:
    if not res.converged:
        return "not converged" if res.phase != "failed" else "failed"
    return res.phase


class _Search:
    """The SE at one alpha as a function of log lambda: solves cached by lambda, each warm-started from the nearest
    usable point solved before (ties: the smaller lambda)."""

    def __init__(self, problem: Problem, alpha: float, d: int | None, se_options: dict[str, Any]):
        self.problem, self.alpha, self.d, self.options = problem, alpha, d, se_options
        self.results: dict[float, SEResult] = {}  # lambda -> result
        self.evaluations = 0

    def solve(self, lam: float) -> SEResult:
        lam = float(lam)
        if lam in self.results:
            return self.results[lam]
        usable = [k for k, r in self.results.items() if _usable(r)]
        init = None
        if usable:
            near = min(usable, key=lambda k: (abs(math.log(k / lam)), k))
            init = self.results[near]
        se = StateEvolution(self.problem.replace_student(lam=lam), d=self.d, **self.options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            try:
                res = se.solve_warm(self.alpha, init)
            except (ArithmeticError, ValueError) as exc:
                if isinstance(exc, ParameterError):
                    raise
                res = se._failed(self.alpha, 0, math.nan, f"{type(exc).__name__}: {exc}")
        self.evaluations += 1
        self.results[lam] = res
        return res

    def value(self, lam: float) -> float:
        """The objective: the test error of a converged regular point, +inf otherwise."""
        res = self.solve(lam)
        return float(res.test_error) if _usable(res) else math.inf

    def scan(self, lo: float, hi: float, grid: int) -> list[float]:
        lams = np.geomspace(lo, hi, grid)
        lams[0], lams[-1] = lo, hi  # the ends exactly (a boundary optimum is reported at the range's end)
        lams = [float(x) for x in lams]
        for lam in lams:
            self.solve(lam)
        return lams


def _local_minima(values: list[float]) -> int:
    """Scan points strictly below both neighbours (an end: below its one neighbour); +inf points never count."""
    n = 0
    for i, v in enumerate(values):
        if not math.isfinite(v):
            continue
        left = values[i - 1] if i > 0 else math.inf
        right = values[i + 1] if i + 1 < len(values) else math.inf
        if v < left and v < right:
            n += 1
    return n


def _fmt(lams: Iterable[float]) -> str:
    return ", ".join(f"{x:.3g}" for x in lams)


def _optimise(search: _Search, lam_range: tuple[float, float], scan_range: tuple[float, float], grid: int,
              xatol: float) -> dict[str, Any]:
    """Scan ``scan_range`` (within ``lam_range``), refine the best scan point; the search's fields (no record)."""
    lo, hi = lam_range
    lams = search.scan(scan_range[0], scan_range[1], grid)
    values = [search.value(lam) for lam in lams]
    results = [search.results[lam] for lam in lams]
    out: dict[str, Any] = {
        "lam_scan": lams,
        "test_error_scan": [float(r.test_error) if r.converged and math.isfinite(r.test_error) else None
                            for r in results],
        "lam_scan_phase": [_phase(r) for r in results],
        "lam_scan_local_minima": _local_minima(values),
    }
    notes: list[str] = []
    bad = [lam for lam, r in zip(lams, results, strict=True) if not r.converged]
    zero = [lam for lam, r in zip(lams, results, strict=True) if r.converged and r.phase == "zero"]
    if bad:
        notes.append(f"{len(bad)} of {len(lams)} scan points not converged (lambda = {_fmt(bad)}): left out")
    if zero:
        notes.append(f"{len(zero)} scan points in the zero phase S_hat = 0 (lambda = {_fmt(zero)}): left out")
    if out["lam_scan_local_minima"] > 1:
        notes.append(f"the test error along the scan has {out['lam_scan_local_minima']} local minima: the lowest "
                     "was refined")
    if not any(math.isfinite(v) for v in values):
        out.update(lam_opt=None, lam_opt_at_boundary=False, lam_converged=False,
                   lam_message="; ".join([f"no lambda in [{scan_range[0]:g}, {scan_range[1]:g}] gave a converged "
                                          "regular SE point"] + notes))
        return out
    i = int(np.argmin(values))  # the first of equal minima
    out["_i"] = i
    a, b = lams[max(i - 1, 0)], lams[min(i + 1, len(lams) - 1)]
    refined = None
    if a < b:
        refined = minimize_scalar(lambda x: search.value(math.exp(x)), bounds=(math.log(a), math.log(b)),
                                  method="bounded", options={"xatol": xatol, "maxiter": 60})
    # the optimum: the lowest evaluated point (scan or refinement; ties: the smaller lambda)
    finite = [(search.value(lam), lam) for lam in sorted(search.results) if math.isfinite(search.value(lam))]
    best, lam_opt = min(finite)
    # bracketed: the optimum strictly inside [a, b], below both ends, which converged (a zero-phase end counts as
    # higher: its test error is that of uniform attention)
    ends_converged = search.results[a].converged and search.results[b].converged
    bracketed = a < lam_opt < b and best < search.value(a) and best < search.value(b) and ends_converged
    converged = bracketed and refined is not None and bool(refined.success)
    at_lo = a == lo and math.log(lam_opt / lo) <= 2 * xatol
    at_hi = b == hi and math.log(hi / lam_opt) <= 2 * xatol
    at_boundary = not bracketed and (at_lo or at_hi)
    if at_boundary:
        end, way = ("lower", "smaller") if at_lo else ("upper", "larger")
        note = (f"optimum at the {end} end of lam_range (lambda = {lo if at_lo else hi:g}): the test error still "
                f"decreases towards {way} lambda, the optimum lies outside the range (widen lam_range)")
        if at_lo:
            note += "; lambda -> 0+ may be optimal (e.g. noiseless problems past perfect recovery)"
        notes.insert(0, note)
    elif not bracketed and not ends_converged:
        notes.insert(0, "a neighbour of the best scan point did not converge: the minimum may lie beyond it "
                        "(not bracketed)")
    elif not bracketed:  # the best point is an end of a narrow scan, and the true optimum beyond it
        notes.insert(0, f"best scan point at the end of the scanned range [{scan_range[0]:g}, {scan_range[1]:g}]: "
                        "not bracketed")
    if refined is not None and not refined.success:
        notes.append(f"refinement: {refined.message}")
    out.update(lam_opt=float(lam_opt), lam_opt_at_boundary=bool(at_boundary), lam_converged=bool(converged),
               lam_message="; ".join(notes), _best=best)
    return out


def _record(problem: Problem, alpha: float, d: int | None, search: _Search, found: dict[str, Any],
            se_options: dict[str, Any]) -> dict[str, Any]:
    """theory_record at the optimum (cold) with the search's fields; the best-residual scan point where none."""
    lam_opt = found.get("lam_opt")
    if lam_opt is None:
        lams = found["lam_scan"]
        worst = [search.results[lam] for lam in lams]
        k = min(range(len(lams)), key=lambda j: (not math.isfinite(worst[j].residual), worst[j].residual, j))
        rec = record_of(worst[k])
        rec["converged"] = False
        lam = None
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            rec = theory_record(problem.replace_student(lam=lam_opt), alpha, d=d, **se_options)
        lam = lam_opt
        best = found.pop("_best")
        if not (rec["converged"] and rec["phase"] == "regular"):
            rec = record_of(search.results[lam_opt])  # a cold solve failed where the warm one converged
            found["lam_message"] = "; ".join(
                x for x in (found["lam_message"], "the cold solve at lam_opt did not converge: the warm-started "
                            "point is reported") if x)
        elif abs(rec["test_error"] - best) > 1e-6 * max(1.0, abs(best)):
            found["lam_message"] = "; ".join(
                x for x in (found["lam_message"], f"the cold solve at lam_opt gives test error {rec['test_error']:.6g}"
                            f", the warm-started search {best:.6g} (two branches)") if x)
    found.pop("_best", None)
    found.pop("_i", None)
    rec["lam"] = lam
    rec.update({k: found[k] for k in FIELDS if k in found})
    return rec


def _check(alpha: float, lam_range, grid: int, xatol: float) -> tuple[float, tuple[float, float]]:
    alpha = validate_alpha(alpha)
    lam_range = check_lam_range(lam_range)
    if int(grid) != grid or grid < 3:
        raise ParameterError("grid", f"needs an integer >= 3 (got {grid})")
    if not (math.isfinite(xatol) and xatol > 0):
        raise ParameterError("xatol", f"must be > 0 (got {xatol})")
    return alpha, lam_range


def optimal_lambda(problem: Problem, alpha: float, d: int | None = None, lam_range=LAM_RANGE, grid: int = GRID,
                   xatol: float = XATOL, **se_options: Any) -> dict[str, Any]:
    """The lambda minimising the SE test error (noisy labels) of ``problem`` at ``alpha``, and the SE record there.

    Parameters
    ----------
    problem : Problem
        any problem; its own ``lam`` is ignored.
    alpha : float
        sample complexity n/d^2.
    d : int or None
        dimension for list-based targets (as :class:`StateEvolution`).
    lam_range : (float, float)
        search range lo < hi (both > 0); the scan includes both ends.
    grid : int
        log-spaced scan points over ``lam_range`` (>= 3). The scan is what guards against the several local minima
        the test error can have along lambda (the interpolation peak at small lambda): only the lowest scan point's
        bracket is refined (module docstring).
    xatol : float
        tolerance of the bounded Brent refinement in log lambda.
    **se_options
        passed to every :class:`StateEvolution` (and to the final :func:`theory_record`).

    Returns
    -------
    dict
        ``theory_record(problem with lam = lam_opt, alpha, d, **se_options)`` plus ``lam`` (= ``lam_opt``) and
        ``lam_opt`` (None where no lambda converged; the record is then the best-residual scan point with
        ``converged`` False), ``lam_opt_at_boundary``, ``lam_scan``, ``test_error_scan`` (None where not converged),
        ``lam_scan_phase`` (regular / zero / not converged / failed), ``lam_scan_local_minima``, ``lam_scan_kind``
        ("full"), ``lam_evaluations`` (SE solves of the search, the final cold record not counted), ``lam_seconds``
        (wall time of the whole search; ``seconds`` is the final record's solve only),
        ``lam_converged`` (an interior optimum, bracketed by converged scan points and refined to ``xatol``) and
        ``lam_message`` (empty when there is nothing to say).
    """
    return optimal_curve(problem, [alpha], d, lam_range, grid, xatol, **se_options)[0]  # one alpha: the full scan


def optimal_curve(problem: Problem, alphas: Iterable[float], d: int | None = None, lam_range=LAM_RANGE,
                  grid: int = GRID, xatol: float = XATOL, narrow_decades: float = NARROW_DECADES,
                  narrow_grid: int = NARROW_GRID, progress: Callable[[], None] | None = None,
                  **se_options: Any) -> list[dict[str, Any]]:
    """:func:`optimal_lambda` along ``alphas`` (in the order given), one record each.

    The first alpha, and any alpha after one whose optimum was not an interior converged one, gets the full scan.
    The others scan ``narrow_grid`` points over lam_opt(previous alpha) x 10^(+-narrow_decades) (clipped to
    ``lam_range``) and are refined from there; where that scan's best point is an end of the narrow range (other
    than an end of ``lam_range``) or nothing in it converged, the full scan follows (``lam_scan_kind``: "narrow",
    "full", or "full (narrow scan not bracketed)"; ``lam_evaluations`` counts both scans). The narrow scan trades
    part of the full scan's protection against a distant second minimum for speed: a global optimum that jumps
    between basins from one alpha to the next, by more than ``narrow_decades``, is only found when the narrow
    scan fails to bracket its own minimum.
    """
    lam_range = check_lam_range(lam_range)
    if not (math.isfinite(narrow_decades) and narrow_decades > 0):
        raise ParameterError("narrow_decades", f"must be > 0 (got {narrow_decades})")
    if int(narrow_grid) != narrow_grid or narrow_grid < 3:
        raise ParameterError("narrow_grid", f"needs an integer >= 3 (got {narrow_grid})")
    out: list[dict[str, Any]] = []
    prev: dict[str, Any] | None = None
    for a in alphas:
        t0 = time.perf_counter()
        alpha, _ = _check(a, lam_range, grid, xatol)
        search = _Search(problem, alpha, d, se_options)
        found = None
        kind = "full"
        if prev is not None and prev["lam_converged"] and prev["lam_opt"] is not None:
            w = 10.0 ** narrow_decades
            narrow = (max(lam_range[0], prev["lam_opt"] / w), min(lam_range[1], prev["lam_opt"] * w))
            if narrow[0] < narrow[1]:
                found = _optimise(search, lam_range, narrow, int(narrow_grid), float(xatol))
                i, last = found.get("_i"), len(found["lam_scan"]) - 1
                # the narrow scan's best point at one of its ends that is not an end of lam_range: not bracketed
                if i is None or (i == 0 and narrow[0] > lam_range[0]) or (i == last and narrow[1] < lam_range[1]):
                    found, kind = None, "full (narrow scan not bracketed)"
                else:
                    kind = "narrow"
        if found is None:
            found = _optimise(search, lam_range, lam_range, int(grid), float(xatol))
        found["lam_scan_kind"] = kind
        found["lam_evaluations"] = search.evaluations
        rec = _record(problem, alpha, d, search, found, se_options)
        rec["lam_seconds"] = time.perf_counter() - t0
        out.append(rec)
        prev = rec
        if progress is not None:
            progress()
    return out
