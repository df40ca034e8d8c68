r"""Power-law figures (fig7-fig9) and the issue-6 simulation checks: theory and simulation routes, and the
finite-d definition of a *detached* eigenvalue of a trained S_hat.

Routes (sweep cells; each returns its records as JSON text in ``records``):

* :func:`se_modes` (:data:`SE_MODES`) -- the finite-d state evolution along a list of alphas (warm started)
  with, per point, the law of the learned spectrum (:func:`tiedattention.theory.spectrum.spectrum_from_result`):
  the position of each target mode's outlier in S_hat, its squared eigenvector overlap, whether it is
  detached / recovered, k* (recovered modes, finite-d criterion: the mode's bump of rho_delta is a component
  of its own and lies above the cut), ``k_star_spike`` (the d -> infinity spike criterion,
  :func:`~tiedattention.theory.scaling.k_star_finite`), the top edge of the bulk of S_hat, the margin of
  :func:`edge_margin`, and e_0 (:func:`~tiedattention.theory.scaling.saturation_error`);
* :func:`scaling_curve` (:data:`SCALING_CURVE`) -- :func:`~tiedattention.theory.scaling.finite_d_curve` or,
  with ``d = 0``, :func:`~tiedattention.theory.scaling.limit_curve` (d = infinity);
* :func:`sim_modes` (:data:`SIM_MODES`) -- ``seeds`` trained students (the proximal solver by default: the
  exact minimiser with exact zero eigenvalues): per seed the eigenvalues of S_hat (descending), the squared
  overlaps |<u_i, u_hat_i>|^2 of the first target eigenvectors with the eigenvectors of the i-th largest
  eigenvalues of S_hat, the test errors, the MSE on S and the **excess test error against the simulation's own
  e_0**: ``e_test(S_hat) - min_c e_test(c S0)``, both on the same fresh test sequences (a paired difference).

Why the simulation's own e_0: for a power-law target with gamma > 1/2 the top eigenvalues of S0 are
O(sqrt(d)), so the first modes carry O(1) shares of the logit variance and the logits
h_ab = sum_i theta_i (u_i.x_a)(u_i.x_b)/sqrt(d) are *not* Gaussian, at any d. The SE's channel assumes Gaussian
logits; measured at d = 100 and 400 (gamma = 1.25, Delta = 0.5, T = 2) the noisy-label test error of S0 itself
is 0.0962 +- 0.0006 against the SE's 0.0869 (docs/theory/scaling.md, "Simulations"). Absolute test errors
of the power-law simulations therefore sit above the SE by about that offset; the excess over each route's own
e_0 is the comparable quantity.

**Detached eigenvalue at finite d** (:func:`count_detached`): an eigenvalue of S_hat is counted as a detached
outlier when it exceeds the SE's top edge b of the bulk of S_hat (0 when the cut eps removes the whole bulk:
the bulk's eigenvalues are then exactly 0) by more than the margin of :func:`edge_margin`,
``4 s delta d^{-2/3}``. Near its upper edge the bulk of rho_delta is the noise semicircle of radius 2 delta
(scaled by s = m_hat/sigma_hat in S_hat), whose largest eigenvalue fluctuates on the Tracy-Widom scale
s delta d^{-2/3} (standard deviation 1.27 of that unit for GOE); the margin is about three standard
deviations, so a bulk eigenvalue is counted with probability ~1e-3 per sample, and an outlier is missed
only when it lies within the margin of the edge (the +-1 mode tolerance of the check).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ConvergenceWarning
from ..sweep.spec import problem_from_params

__all__ = [
    "SE_MODES", "SIM_MODES", "SCALING_CURVE", "DECOMPOSITION", "se_modes", "sim_modes", "scaling_curve",
    "decomposition", "edge_margin",
    "count_detached", "detachment_alphas", "local_slope",
]

SE_MODES = "tiedattention.reproduce.powerlaw:se_modes"
SIM_MODES = "tiedattention.reproduce.powerlaw:sim_modes"
SCALING_CURVE = "tiedattention.reproduce.powerlaw:scaling_curve"
DECOMPOSITION = "tiedattention.reproduce.powerlaw:decomposition"

#: multiple of the Tracy-Widom unit s delta d^{-2/3} above the bulk edge that makes an eigenvalue "detached"
MARGIN_UNITS = 4.0


def edge_margin(scale: float, delta: float, d: int) -> float:
    """Margin above the bulk edge of S_hat for counting detached eigenvalues: 4 s delta d^{-2/3}."""
    return MARGIN_UNITS * float(scale) * float(delta) * float(d) ** (-2.0 / 3.0)


def count_detached(eigenvalues, bulk_top: float, margin: float) -> int:
    """Number of eigenvalues above ``bulk_top + margin`` (module docstring)."""
    ev = np.asarray(eigenvalues, float)
    return int(np.count_nonzero(ev > float(bulk_top) + float(margin)))


# --------------------------------------------------------------------------------------------------
# theory
# --------------------------------------------------------------------------------------------------
def se_modes(params: Mapping[str, Any]) -> dict[str, Any]:
    """Finite-d SE along ``params["alphas"]`` at dimension ``params["d"]`` with the learned spectrum's outliers
    for the first ``params["n_modes"]`` target modes (module docstring)."""
    from ..theory.scaling import k_star_finite, saturation_error
    from ..theory.spectrum import spectrum_from_result
    from ..theory.state_evolution import StateEvolution

    problem = problem_from_params(params)
    d = int(params["d"])
    n_modes = int(params.get("n_modes", 8))
    se = StateEvolution(problem, d=d)
    e0, c0 = saturation_error(se)
    e0c, _ = saturation_error(se, clean=True)
    theta_all = np.sort(np.unique(se.measure.atoms[se.measure.atoms > 0]))[::-1]
    records, prev = [], None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for a in sorted(float(x) for x in params["alphas"]):
            t0 = time.perf_counter()
            res, error = None, ""
            for init in (prev, None) if prev is not None else (None,):
                try:
                    res = se.solve(a, init=init)
                except (ArithmeticError, ValueError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    continue
                if res.converged:
                    break
            rec: dict[str, Any] = {"alpha": a, "nu": a * d, "d": d, "e0": e0, "c0": c0, "e0_clean": e0c}
            if res is None or not res.converged or res.phase not in ("regular", "zero"):
                rec.update({"converged": False, "phase": getattr(res, "phase", "failed"),
                            "message": error or getattr(res, "message", "")})
                records.append(rec)
                continue
            prev = res if res.phase == "regular" else prev
            # an outlier is one atom of mass 1/d alone in its component (a merged pair is bulk)
            sp = spectrum_from_result(problem, se.measure, res, max_outlier_weight=1.5 / d)
            by_theta = {o.theta: o for o in sp.outliers}
            modes = []
            for i, th in enumerate(theta_all[:n_modes]):
                o = by_theta.get(float(th))
                modes.append({"i": i + 1, "theta": float(th),
                              "eigenvalue": float(o.eigenvalue) if o else 0.0,
                              "overlap": float(o.overlap) if o else 0.0,
                              "detached": bool(o.detached) if o else False,
                              "recovered": bool(o.recovered) if o else False})
            bulk_top = max([b[1] for b in sp.bulks], default=0.0)
            rec.update({
                "converged": True, "phase": res.phase, "test_error": res.test_error,
                "test_error_clean": res.test_error_clean, "mse": res.mse, "rank": res.rank, "delta": res.delta,
                "eps": res.eps, "scale": sp.scale, "excess": res.test_error - e0,
                "excess_clean": res.test_error_clean - e0c, "k_star": sp.n_recovered,
                "k_star_spike": k_star_finite(se, res), "bulk_top": float(bulk_top),
                "margin": edge_margin(sp.scale, res.delta, d) if sp.phase != "zero" else 0.0,
                "n_detached_theory": sum(o.detached for o in sp.outliers), "modes": modes,
                "seconds": time.perf_counter() - t0,
            })
            records.append(rec)
    return {"records": json.dumps(records), "n_points": len(records),
            "n_converged": sum(bool(r["converged"]) for r in records)}


def scaling_curve(params: Mapping[str, Any]) -> dict[str, Any]:
    """SE scaling curve: finite d (``params["d"] > 0``, along ``params["alphas"]``) or the d = infinity limit
    (``d = 0``, along ``params["nus"]`` = n/d), with the lambda rule ``params["lam_rule"]``."""
    from ..theory.scaling import finite_d_curve, limit_curve, parse_lam_rule

    problem = problem_from_params(params)
    rule = parse_lam_rule(params["lam_rule"])
    d = int(params["d"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if d == 0:
            recs = limit_curve(problem, params["nus"], rule)
        else:
            extra = {"xatol": float(params["xatol"])} if "xatol" in params else {}
            recs = finite_d_curve(problem, d, params["alphas"], rule, **extra)
    clean = [{k: (v if not isinstance(v, np.generic) else v.item()) for k, v in r.items()} for r in recs]
    return {"records": json.dumps(clean, default=float), "n_points": len(clean),
            "n_converged": sum(bool(r["converged"]) for r in clean)}


def decomposition(params: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`tiedattention.theory.decomposition.decomposition_curve` along ``params["alphas"]`` at dimension
    ``params["d"]`` (0: the d -> infinity measure of the target, where it has one)."""
    from ..theory.decomposition import decomposition_curve

    problem = problem_from_params(params)
    d = int(params.get("d", 0)) or None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        recs = decomposition_curve(problem, [float(a) for a in params["alphas"]], d=d)
    clean = [{k: v for k, v in r.items() if isinstance(v, (bool, int, float, str, np.floating, np.integer))}
             for r in recs]
    return {"records": json.dumps(clean, default=float), "n_points": len(clean),
            "n_converged": sum(bool(r["converged"]) for r in clean)}


# --------------------------------------------------------------------------------------------------
# simulation
# --------------------------------------------------------------------------------------------------
def _paired_errors(problem, S_hat: np.ndarray, S0: np.ndarray, seed: int, n_test: int) -> dict[str, float]:
    """Noisy/clean test errors of S_hat, e_0 = min_c e(c S0) (noisy labels) and the paired excess, all on the
    same fresh test sequences (stream ``rng_for(seed, "test")``, as ``simulate``'s test set)."""
    from scipy import optimize

    from ..simulation import sample_dataset
    from ..simulation.sampler import logits, softmax_rows

    if problem.task.task != "seq2lab":
        raise ValueError("the paired excess is implemented for seq2lab")
    d = S0.shape[0]
    data = sample_dataset(problem, n_test, d, seed, S0=S0, purpose="test")
    beta = problem.student.beta
    yhat = softmax_rows(beta * logits(data.X, S_hat))
    loss = ((data.y - yhat) ** 2).sum(axis=(1, 2))
    loss_c = ((data.clean - yhat) ** 2).sum(axis=(1, 2))
    h0 = logits(data.X, S0)

    def ray(c: float) -> np.ndarray:
        return ((data.y - softmax_rows(beta * c * h0)) ** 2).sum(axis=(1, 2))

    r = problem.task.beta0 / beta
    opt = optimize.minimize_scalar(lambda c: float(ray(c).mean()), bounds=(0.2 * r, 3.0 * r), method="bounded",
                                   options={"xatol": 1e-4})
    base = ray(float(opt.x))
    diff = loss - base
    sq = math.sqrt(n_test)
    return {"test_error": float(loss.mean()), "test_error_sem": float(loss.std(ddof=1) / sq),
            "test_error_clean": float(loss_c.mean()), "test_error_clean_sem": float(loss_c.std(ddof=1) / sq),
            "e0": float(base.mean()), "c0": float(opt.x), "excess": float(diff.mean()),
            "excess_sem": float(diff.std(ddof=1) / sq)}


def sim_modes(params: Mapping[str, Any]) -> dict[str, Any]:
    """``seeds`` trained students at (problem, alpha, d): per-seed spectra, overlaps and paired errors."""
    import torch

    from ..simulation import n_of, rng_for, sample_dataset, train
    from ..simulation.api import combined_sem
    from ..simulation.metrics import mse_on_S
    from ..sweep.routes import resolve_device

    problem = problem_from_params(params)
    alpha, d = float(params["alpha"]), int(params["d"])
    seeds, seed0 = int(params["seeds"]), int(params.get("seed0", 0))
    n_modes, n_test = int(params.get("n_modes", 8)), int(params.get("n_test", 10000))
    solver = str(params.get("solver", "prox"))
    dev = resolve_device(str(params.get("device", "auto")))  # a GPU on workers that have one
    n = n_of(alpha, d)
    dec = _decomposer(problem, alpha, d) if params.get("decompose") else None
    old = torch.get_num_threads()
    torch.set_num_threads(int(params.get("threads", 1)))
    t_start = time.perf_counter()
    rows = []
    try:
        for s in range(seed0, seed0 + seeds):
            S0 = problem.task.target.sample(d, rng_for(s, "target"))
            data = sample_dataset(problem, n, d, s, S0=S0)
            res = train(problem, data, solver=solver, device=dev, seed=s)
            del data
            lam0, U0 = np.linalg.eigh(S0)
            lam_h, U_h = np.linalg.eigh(res.S_hat)
            U0, U_h, lam_h = U0[:, ::-1], U_h[:, ::-1], lam_h[::-1]
            k = min(n_modes, d)
            ov = (np.einsum("ij,ij->j", U0[:, :k], U_h[:, :k])) ** 2
            row = {"seed": s, "eigenvalues": [float(x) for x in lam_h], "overlaps": [float(x) for x in ov],
                   "mse": mse_on_S(res.S_hat, S0), "train_error": res.train_error, "steps": res.steps,
                   "converged": bool(res.converged), "seconds": res.seconds}
            row.update(_paired_errors(problem, res.S_hat, S0, s, n_test))
            if dec is not None:
                row["decomposition"] = dec(res.S_hat, S0, lam_h)
            rows.append(row)
    finally:
        torch.set_num_threads(old)
    out: dict[str, Any] = {"n": n, "device": dev, "records": json.dumps(rows), "seconds": time.perf_counter() - t_start,
                           "converged": float(np.mean([r["converged"] for r in rows]))}
    for key in ("test_error", "test_error_clean", "excess", "mse", "e0"):
        v = np.array([r[key] for r in rows])
        out[f"{key}_mean"] = float(v.mean())
        if f"{key}_sem" in rows[0]:
            out[f"{key}_sem"] = combined_sem(v, np.array([r[f"{key}_sem"] for r in rows]))
        else:
            out[f"{key}_sem"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    return out


def _decomposer(problem, alpha: float, d: int):
    """``f(S_hat, S0, eigenvalues) -> dict``: the finite-d estimator of the error decomposition
    (:func:`tiedattention.theory.decomposition.estimate_record`) with the recovered outliers counted as the
    detached eigenvalues of S_hat (above the SE bulk edge + margin at this alpha, :func:`count_detached`)."""
    from ..theory.decomposition import estimate_record, saturation_point
    from ..theory.spectrum import spectrum_from_result
    from ..theory.state_evolution import StateEvolution

    se = StateEvolution(problem, d=d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = se.solve(alpha)
    sat = saturation_point(se)
    if res.converged and res.phase == "regular":
        sp = spectrum_from_result(problem, se.measure, res, max_outlier_weight=1.5 / d)
        edge, margin = max([b[1] for b in sp.bulks], default=0.0), edge_margin(sp.scale, res.delta, d)
    else:
        edge, margin = 0.0, 0.0

    def f(S_hat: np.ndarray, S0: np.ndarray, eigenvalues: np.ndarray) -> dict[str, Any]:
        k = count_detached(eigenvalues, edge, margin)
        rec = estimate_record(se, S_hat, S0, sat[1], k, saturation=sat)
        return {key: float(v) for key, v in rec.items() if isinstance(v, (int, float, np.floating))}

    return f


# --------------------------------------------------------------------------------------------------
# helpers for the figures
# --------------------------------------------------------------------------------------------------
def detachment_alphas(records: list[dict[str, Any]], n_modes: int) -> dict[int, float]:
    """For each mode i <= n_modes, the alpha at which it becomes a recovered outlier on the SE grid (geometric
    midpoint of the last grid point where it is not and the first where it is; nan if never; the first grid
    point when it is recovered there already)."""
    ok = [r for r in records if r.get("converged") and "modes" in r]
    out: dict[int, float] = {}
    for i in range(1, n_modes + 1):
        flags = [bool(r["modes"][i - 1]["recovered"]) if len(r["modes"]) >= i else False for r in ok]
        out[i] = math.nan
        for j, f in enumerate(flags):
            if f and all(flags[j:]):
                out[i] = ok[j]["alpha"] if j == 0 else math.sqrt(ok[j - 1]["alpha"] * ok[j]["alpha"])
                break
    return out


def local_slope(x, y) -> tuple[np.ndarray, np.ndarray]:
    """-d log y / d log x between consecutive points (at the geometric midpoints)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0)
    x, y = x[ok], y[ok]
    lx, ly = np.log(x), np.log(y)
    return np.exp(0.5 * (lx[1:] + lx[:-1])), -np.diff(ly) / np.diff(lx)


def make_cell(route: str, params: Mapping[str, Any]):
    """A sweep cell of one of this module's routes (key = hash of the params and the package version)."""
    from .common import _cell

    return _cell(route, dict(params))
