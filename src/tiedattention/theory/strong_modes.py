r"""The exact (non-Gaussian) test error for targets with strong modes (docs/theory/decomposition.md section 7).

The state evolution's test error e(q, m) treats every logit h_ab = (x_a^T S x_b - delta_ab Tr S)/sqrt(d) as
Gaussian. That is exact when no eigenvalue of S0 carries a finite share of Q0 = (1/d) Tr S0^2. A power-law
target theta_i = C i^{-gamma} (gamma > 1/2, Q0 = 1) has t_i := theta_i/sqrt(d) -> i^{-gamma}/sqrt(zeta(2 gamma))
= O(1): the top mode alone carries 1/zeta(2 gamma) of the logit variance (75 % at gamma = 1.25), and its
contribution t_1 (g_a g_b - delta_ab), g_a = u_1 . x_a ~ N(0, 1), is a product of Gaussians at any d.

Joint law used here (one sequence, tokens a = 1..T). The top k target modes are explicit, the rest is a
Gaussian remainder by the CLT:

    teacher:  H0_ab = sum_{i<=k} t_i (g_ai g_bi - delta_ab) + D(z0)_ab,
    student:  H_ab  = sum_{i<=k} [l_i (gh_ai gh_bi - delta_ab) + b_i (g_ai g_bi - delta_ab)] + D(z)_ab,
              gh_ai = sqrt(o_i) g_ai + sqrt(1 - o_i) w_ai,

g_ai, w_ai i.i.d. N(0, 1): the student's outlier along target mode i has eigenvalue l_i sqrt(d) and eigenvector
u_hat_i = sqrt(o_i) u_i + sqrt(1 - o_i) v_i, v_i a direction orthogonal to the explicit modes (its projections
w_ai are fresh Gaussians; its overlap with any single other target mode is O(1/d)). D(v) is the channel's
symmetric T x T matrix (v off the diagonal, sqrt(2) v on it), and per upper-triangle entry the remainder pair
is (z0, z) ~ N(0, [[Q0_r + Delta/2, m_r], [m_r, q_r]]) (Delta/2: the logit noise, exactly Gaussian; use Q0_r for
clean labels) with what is left of (Q0, m, q) after removing the explicit modes:

    Q0_r = Q0 - sum t_i^2,   q_r = q - sum (l_i^2 + b_i^2 + 2 l_i b_i o_i),   m_r = m - sum t_i (l_i o_i + b_i)

(b_i sqrt(d) = u_i^T B u_i: the learned bulk B's component along the explicit mode, :func:`student_modes`).

The diagonal logits of the explicit modes are t_i (g_ai^2 - 1): mean 0 (the trace is removed) and variance
2 t_i^2, the same first two moments as the Gaussian channel's sqrt(2) diagonal, different law. The test error
E||softmax_row(beta0 H0) - softmax_row(beta H)||_F^2 (+ T^2 Delta_out for seq2lab noisy labels, T Delta_out for
seq2seq) is an integral over 2kT + 2K standard normals (K = T(T+1)/2), computed by scrambled Sobol' QMC with
fixed seeds (deterministic) and independent replicas (error estimate = std / sqrt(replicas)).

* k = 0 is the Gaussian channel (same integrand); explicit modes with t, l -> 0 reduce to it too.
* Cross couplings neglected (they vanish as d -> infinity): an outlier's coupling to the teacher remainder
  through v_i, and the off-diagonal pieces u_i (x) (B u_i)_perp of the bulk; they stay in the Gaussian remainder
  (the totals q and m are kept exactly).
* The student is described by (q, m) and its explicit outliers only: the training fixed point (q_hat, m_hat,
  Sigma_hat) itself still comes from the Gaussian channel (see the docs for what that leaves).
* The learned outliers: :func:`corrected_outliers` solves the ERM's exact stationarity along each learned
  outlier, alpha E[g . W_i] = (o_i t_i m_hat - l_i^SE Sigma_hat)/2 (W_i the channel coordinates of
  gh_i gh_i^T - I, g = (h* - z)/Sigma at the softmax prox), under the joint law and under the Gaussian law on the
  same QMC points; the Gaussian root is the SE's outlier, the paired difference is the correction (a one-step
  correction: the bulk's conjugates, Sigma and the sample-fluctuation term stay the SE's). The target's MP part,
  if any, is made explicit too (:func:`bulk_modes`): its own non-Gaussianity matters at d <= 400.

Public API: :class:`StrongModes`, :class:`StrongModeError`, :func:`joint_test_error`, :func:`teacher_modes`,
:func:`ray_error`, :func:`exact_saturation` (and ``_error``), :func:`student_modes` (finite-d SE point),
:func:`limit_student_modes` (scaling-limit point), :func:`corrected_test_error`, :func:`corrected_record`,
:func:`outlier_stationarity`, :func:`corrected_outliers` (:class:`CorrectedOutliers`), :func:`with_outliers`,
:func:`joint_law_point` (the joint-law test error and excess of a finite-d SE point, its top outliers corrected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import optimize
from scipy.special import ndtri

from ..errors import ParameterError
from ..problem import Problem
from ..targets import PowerLawTarget
from .channel import _softmax_rows, logit_design

__all__ = [
    "StrongModes",
    "StrongModeError",
    "joint_test_error",
    "teacher_modes",
    "ray_error",
    "exact_saturation",
    "exact_saturation_error",
    "student_modes",
    "limit_student_modes",
    "corrected_test_error",
    "corrected_record",
    "outlier_stationarity",
    "bulk_modes",
    "corrected_outliers",
    "CorrectedOutliers",
    "with_outliers",
    "joint_law_point",
]

DEFAULT_SEED = 20261130


@dataclass(frozen=True)
class StrongModes:
    """Explicit modes and second moments of one (teacher, student) pair; see the module docstring.

    t: teacher strengths theta_i/sqrt(d) (k,); ell: student outlier eigenvalues / sqrt(d) along the same modes
    (0 where the mode is not learned); overlap: o_i in [0, 1]; q0 = (1/d)Tr S0^2; q = (1/d)Tr S^2;
    m = (1/d)Tr S S0; ell_bulk (optional, default 0): b_i = u_i^T B u_i / sqrt(d), the student bulk B's component
    along u_i u_i^T, which adds b_i (g_ai g_bi - delta_ab) to the student's logits (see :func:`student_modes`).
    """

    t: np.ndarray
    ell: np.ndarray
    overlap: np.ndarray
    q0: float
    q: float
    m: float
    ell_bulk: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = np.atleast_1d(np.asarray(self.t, float)).ravel()
        ell = np.atleast_1d(np.asarray(self.ell, float)).ravel()
        ov = np.atleast_1d(np.asarray(self.overlap, float)).ravel()
        eb = np.zeros_like(t) if self.ell_bulk is None else np.atleast_1d(np.asarray(self.ell_bulk, float)).ravel()
        if not (t.shape == ell.shape == ov.shape == eb.shape):
            raise ParameterError("k", f"t, ell, overlap (and ell_bulk) need the same length (got {t.size}, "
                                      f"{ell.size}, {ov.size}, {eb.size})")
        if not all(np.all(np.isfinite(v)) for v in (t, ell, ov, eb)):
            raise ParameterError("k", "explicit modes must be finite")
        object.__setattr__(self, "ell_bulk", eb)
        if np.any(ov < -1e-12) or np.any(ov > 1 + 1e-12):
            raise ParameterError("overlap", f"must lie in [0, 1] (got {ov})")
        for name in ("q0", "q", "m"):
            v = float(getattr(self, name))
            if not math.isfinite(v):
                raise ParameterError(name, f"must be finite (got {v!r})")
            object.__setattr__(self, name, v)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "ell", ell)
        object.__setattr__(self, "overlap", np.clip(ov, 0.0, 1.0))

    @property
    def k(self) -> int:
        return int(self.t.size)

    def remainder(self) -> tuple[float, float, float]:
        """(Q0_r, q_r, m_r): the second moments left for the Gaussian remainder (unclipped)."""
        b = self.ell_bulk
        q0r = self.q0 - float(np.sum(self.t**2))
        qr = self.q - float(np.sum(self.ell**2 + b**2 + 2 * self.ell * b * self.overlap))
        mr = self.m - float(np.sum(self.t * (self.ell * self.overlap + b)))
        return q0r, qr, mr


@dataclass
class StrongModeError:
    """Test error from the joint law: value and QMC error estimate (noisy labels and clean), plus diagnostics.

    ``clipped`` is the amount by which the remainder's covariance had to be moved to be PSD (0 normally; a
    finite-d SE point whose outlier picture does not add up to its (q, m) gives a small positive number)."""

    value: float
    error: float
    value_clean: float
    error_clean: float
    k: int
    points: int
    replicas: int
    remainder: tuple[float, float, float]
    clipped: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    per_replica: np.ndarray = field(default_factory=lambda: np.zeros((2, 0)), repr=False)  # (noisy, clean) x R

    def minus(self, other: StrongModeError, clean: bool = False) -> tuple[float, float]:
        """(self - other, error) for two results on the same QMC points (same seed, k, T, log2n, replicas): the
        error is that of the per-replica differences, much smaller than either error when they are correlated
        (an excess over e_0)."""
        if self.per_replica.shape != other.per_replica.shape or self.per_replica.shape[1] < 2:
            raise ValueError("paired differences need results on the same QMC points")
        diff = self.per_replica[int(clean)] - other.per_replica[int(clean)]
        return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size))

    def to_dict(self) -> dict[str, Any]:
        return {"e_test_exact": self.value, "e_test_exact_err": self.error, "e_test_clean_exact": self.value_clean,
                "e_test_clean_exact_err": self.error_clean, "k_explicit": self.k, "qmc_points": self.points,
                "qmc_replicas": self.replicas, "q0_rest": self.remainder[0], "q_rest": self.remainder[1],
                "m_rest": self.remainder[2], "clipped": self.clipped, **self.extra}


# --------------------------------------------------------------------------------------------------
# the integrand
# --------------------------------------------------------------------------------------------------
@lru_cache(maxsize=4)  # 2^15 points x 44 dims x 8 replicas is ~90 MB
def _sobol_normals(dim: int, log2n: int, replicas: int, seed: int) -> tuple[np.ndarray, ...]:
    """``replicas`` scrambled Sobol' sets (2^log2n points, fixed seeds), mapped to N(0, I_dim)."""
    out = []
    for r in range(replicas):
        x = _sobol_replica(dim, log2n, seed, r)
        x.setflags(write=False)
        out.append(x)
    return tuple(out)


def _sobol_replica(dim: int, log2n: int, seed: int, r: int) -> np.ndarray:
    """Replica r: 2^log2n scrambled Sobol' points (seed [seed, dim, r]) mapped to N(0, I_dim)."""
    from scipy.stats import qmc

    sob = qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng([seed, dim, r]))
    return ndtri(np.clip(sob.random_base2(log2n), 2.0**-60, 1.0 - 2.0**-53))


def _sobol_replicas(dim: int, log2n: int, replicas: int, seed: int):
    """The replicas of :func:`_sobol_normals` one at a time (identical values); large sets (many explicit modes,
    over 2^25 numbers in all) are generated replica by replica and not cached, to keep memory at one replica."""
    if dim * 2**log2n * replicas <= 2**25:
        yield from _sobol_normals(dim, log2n, replicas, seed)
        return
    for r in range(replicas):
        yield _sobol_replica(dim, log2n, seed, r)


def _admissible(q0r: float, qr: float, mr: float, qz: float) -> tuple[float, float, float, float]:
    """Clip the remainder to a valid covariance: Q0_r >= 0, q_r >= 0, m_r^2 <= q_r Qz_r. Returns the clipped
    triple and the total amount moved."""
    moved = 0.0
    if q0r < 0:
        moved += -q0r
        q0r = 0.0
    if qr < 0:
        moved += -qr
        qr = 0.0
    lim = math.sqrt(qr * (q0r + qz))
    if abs(mr) > lim:
        moved += abs(mr) - lim
        mr = math.copysign(lim, mr)
    return q0r, qr, mr, moved


def _remainder_pair(zt: np.ndarray, zs: np.ndarray, qz: float, qr: float, mr: float) -> tuple[np.ndarray, np.ndarray]:
    """Teacher and student remainder logits (a, b) from independent standard normals (zt, zs): Var a = qz,
    Var b = qr, Cov(a, b) = mr (qz = Q0_r, + Delta/2 for noisy labels)."""
    a = math.sqrt(qz) * zt
    if qz > 0:
        return a, (mr / qz) * a + math.sqrt(max(qr - mr * mr / qz, 0.0)) * zs
    return a, math.sqrt(max(qr, 0.0)) * zs


def _integrand(x: np.ndarray, modes: StrongModes, tokens: int, beta: float, beta0: float, noise: float,
               q0r: float, qr: float, mr: float, clean: bool) -> np.ndarray:
    """Per-point squared error for the standard normals x (N, 2kT + 2K)."""
    T, k = tokens, modes.k
    K = T * (T + 1) // 2
    N = x.shape[0]
    g = x[:, : k * T].reshape(N, k, T)
    zt = x[:, k * T : k * T + K]
    w = x[:, k * T + K : 2 * k * T + K].reshape(N, k, T)
    zs = x[:, 2 * k * T + K :]
    eye = np.eye(T)
    H0 = np.zeros((N, T, T))
    H = np.zeros((N, T, T))
    so, co = np.sqrt(modes.overlap), np.sqrt(1.0 - modes.overlap)
    for i in range(k):
        gi = g[:, i, :]
        gg = gi[:, :, None] * gi[:, None, :] - eye
        H0 += modes.t[i] * gg
        if modes.ell_bulk[i] != 0.0:
            H += modes.ell_bulk[i] * gg
        if modes.ell[i] != 0.0:
            gh = so[i] * gi + co[i] * w[:, i, :]
            H += modes.ell[i] * (gh[:, :, None] * gh[:, None, :] - eye)
    qz = q0r + (0.0 if clean else noise / 2.0)
    P = logit_design(T)  # vec D(v) = P v
    a, b = _remainder_pair(zt, zs, qz, qr, mr)
    H0 += (a @ P.T).reshape(N, T, T)
    H += (b @ P.T).reshape(N, T, T)
    d = _softmax_rows(beta0 * H0) - _softmax_rows(beta * H)
    return np.einsum("nij,nij->n", d, d)


def joint_test_error(problem: Problem, modes: StrongModes, log2n: int = 14, replicas: int = 8,
                     seed: int = DEFAULT_SEED) -> StrongModeError:
    """Noisy- and clean-label test error of the student ``modes`` under the joint law (module docstring).

    QMC: ``replicas`` scrambled Sobol' sets of 2^log2n points (the same points for both labels); the value is
    the replica mean, the error std/sqrt(replicas). Deterministic for a fixed ``seed``."""
    if int(log2n) < 4 or int(replicas) < 2:
        raise ParameterError("replicas", "need log2n >= 4 and replicas >= 2 for an error estimate")
    task, student = problem.task, problem.student
    T = task.tokens
    K = T * (T + 1) // 2
    dim = 2 * modes.k * T + 2 * K
    q0r, qr, mr = modes.remainder()
    out = {}
    moved = 0.0
    per = np.zeros((2, int(replicas)))
    for clean in (False, True):
        qz = 0.0 if clean else task.noise / 2.0
        a0, a1, a2, mv = _admissible(q0r, qr, mr, qz)
        moved = max(moved, mv)
        vals = []
        for x in _sobol_normals(dim, int(log2n), int(replicas), int(seed)):
            vals.append(float(np.mean(_integrand(x, modes, T, student.beta, task.beta0, task.noise, a0, a1, a2,
                                                  clean))))
        vals = np.asarray(vals)
        out[clean] = (float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size)))
        per[int(clean)] = vals
    offset = T * T * task.noise_out if task.task == "seq2lab" else T * task.noise_out
    per[0] += offset
    return StrongModeError(value=out[False][0] + offset, error=out[False][1], value_clean=out[True][0],
                           error_clean=out[True][1], k=modes.k, points=2 ** int(log2n), replicas=int(replicas),
                           remainder=(q0r, qr, mr), clipped=moved, per_replica=per)


# --------------------------------------------------------------------------------------------------
# the target's explicit modes
# --------------------------------------------------------------------------------------------------
def teacher_modes(problem: Problem, d: int | None, k: int) -> tuple[np.ndarray, float]:
    """(t, Q0): the k largest |theta_i|/sqrt(d) of the target with their sign, and Q0.

    ``d`` None (or math.inf): the d -> infinity power law t_i = i^{-gamma}/sqrt(zeta(2 gamma)) (gamma > 1/2),
    Q0 = 1. Finite d: the target's deterministic eigenvalue list (power law, spikes, custom); an MP target (no
    deterministic list) has no strong modes, so t is k zeros (its top eigenvalues are O(1/sqrt d) in t units)."""
    k = int(k)
    if k < 0:
        raise ParameterError("k", f"must be >= 0 (got {k})")
    target = problem.task.target
    if d is None or (isinstance(d, float) and math.isinf(d)):
        if not isinstance(target, PowerLawTarget):
            raise ParameterError("d", "the d = inf strong-mode picture is implemented for power-law targets")
        from .scaling import PowerLawModes

        return PowerLawModes(target.gamma, target.cutoff).theta(k)[:k], 1.0
    d = int(d)
    measure = target.measure(d)
    q0 = float(measure.q0)
    if k > d:
        raise ParameterError("k", f"must be <= d = {d} (got {k})")
    if measure.mp_kappa0 is not None and measure.mp_mass > 0 and measure.atoms.size == 0:
        return np.zeros(k), q0
    a, w = measure.atoms, measure.weights
    theta = np.repeat(a, np.rint(w * d).astype(int)) if a.size else np.zeros(0)
    theta = theta[np.argsort(-np.abs(theta), kind="stable")][:k]
    t = np.zeros(k)
    t[: theta.size] = theta / math.sqrt(d)
    return t, q0


def ray_error(problem: Problem, d: int | None, c: float, k: int, **qmc) -> StrongModeError:
    """Test error of S = c S0 under the joint law: the student's explicit modes are c t_i with overlap 1 and its
    remainder is c times the teacher's (c = 0: the uniform-attention predictor)."""
    t, q0 = teacher_modes(problem, d, k)
    c = float(c)
    modes = StrongModes(t=t, ell=c * t, overlap=np.ones_like(t), q0=q0, q=c * c * q0, m=c * q0)
    return joint_test_error(problem, modes, **qmc)


def exact_saturation(problem: Problem, d: int | None, k: int, clean: bool = False, xatol: float = 1e-4,
                     **qmc) -> tuple[StrongModeError, float]:
    """(result at c_0, c_0): the minimum over c of the joint-law test error of c S0 (noisy labels unless
    ``clean``). The QMC points are the same for every c, so the minimisation is of a smooth function, and the
    result can be paired with others on the same points (:meth:`StrongModeError.minus`)."""
    r = problem.task.beta0 / problem.student.beta

    def e(c: float) -> float:
        res = ray_error(problem, d, c, k, **qmc)
        return res.value_clean if clean else res.value

    opt = optimize.minimize_scalar(e, bounds=(0.2 * r, 3.0 * r), method="bounded", options={"xatol": xatol})
    return ray_error(problem, d, float(opt.x), k, **qmc), float(opt.x)


def exact_saturation_error(problem: Problem, d: int | None, k: int, clean: bool = False, xatol: float = 1e-4,
                           **qmc) -> tuple[float, float, float]:
    """(e_0, its QMC error, c_0) of :func:`exact_saturation`."""
    res, c0 = exact_saturation(problem, d, k, clean=clean, xatol=xatol, **qmc)
    return (res.value_clean, res.error_clean, c0) if clean else (res.value, res.error, c0)


# --------------------------------------------------------------------------------------------------
# the student from the SE
# --------------------------------------------------------------------------------------------------
def _bulk_couplings(problem: Problem, measure, res, thetas: np.ndarray, own: list[bool]) -> np.ndarray:
    """C_i = sum over the learned directions of Y outside mode i's own recovered bump of l(y) |<u_i, u_hat>|^2
    = int rho_delta(y) l(y) O(theta_i, y) dy, O(x, y) = delta^2/|x - omega(y)|^2 the overlap density of
    decomposition.md section 4 (restricted to the directions above the cut; ``own[i]``: exclude the component
    that is mode i's own recovered bump)."""
    from .decomposition import denoiser_pieces

    scale, eps, delta, linear, fc, cut, pieces = denoiser_pieces(problem, measure, res)
    t = fc.t
    if not pieces or thetas.size == 0:
        return np.zeros(thetas.size)

    def tests(y, re_g):
        u = y - t * re_g
        v = fc.solve_v(u.ravel()).reshape(u.shape)
        lam = scale * (y if linear else (y - eps))
        return [lam * t / ((th - u) ** 2 + v * v) for th in thetas]

    r = fc.adaptive(pieces, tests)
    p = r["panels"]
    out = np.asarray(r["totals"], float).copy()
    comps = fc.bulks()
    for i, th in enumerate(thetas):
        if not own[i]:
            continue
        for b in comps:
            if b["atoms"].size == 1 and not b["continuous"] and abs(float(b["atoms"][0]) - th) <= 1e-9 * abs(th):
                sel = (p["lo"] >= b["u_lo"] - 1e-15 * max(1.0, abs(b["u_lo"]))) & (p["hi"] <= b["u_hi"])
                out[i] -= p["q"][sel, i].sum()
    return out


def student_modes(problem: Problem, measure, res, d: int, k: int,
                  bulk_coupling: bool = True) -> tuple[StrongModes, dict[str, Any]]:
    """The explicit picture of a solved finite-d SE point: the top k target modes t_i = theta_i/sqrt(d), and for
    each the learned outlier of :func:`.spectrum.spectrum_from_result` (eigenvalue l_i sqrt(d), squared
    overlap o_i; l_i = o_i = 0 when the mode is not recovered), with q = res.q and m = res.m.

    ``bulk_coupling``: also the projection b_i = u_i^T B u_i / sqrt(d) of the learned bulk (every direction but
    mode i's own outlier) on the explicit mode, from the overlap density of Y's eigenvectors. It is O(1/d) for a
    well-detached mode but O(1/sqrt d) for an explicit mode still inside or near the bulk, whose coupling
    t_i b_i to the student would otherwise be charged to the Gaussian remainder (where the teacher no longer
    has that mode: m_r can then exceed sqrt(q_r Q0_r))."""
    from .spectrum import spectrum_from_result

    t, q0 = teacher_modes(problem, d, k)
    ell, ov, eb = np.zeros(k), np.zeros(k), np.zeros(k)
    info: dict[str, Any] = {"k_star": 0}
    if res.phase != "zero":
        sp = spectrum_from_result(problem, measure, res, max_outlier_weight=1.5 / d)
        info["k_star"] = sp.n_recovered
        sd = math.sqrt(d)
        by_theta = {round(o.theta / sd, 12): o for o in sp.outliers}
        own = []
        for i in range(k):
            o = by_theta.get(round(float(t[i]), 12))
            rec = o is not None and o.recovered
            own.append(bool(rec))
            if rec:
                ell[i] = o.eigenvalue / sd
                ov[i] = o.overlap
        if bulk_coupling and k:
            eb = _bulk_couplings(problem, measure, res, t * sd, own) / sd
    info["ell"] = ell.tolist()
    info["overlap"] = ov.tolist()
    info["ell_bulk"] = eb.tolist()
    return StrongModes(t=t, ell=ell, overlap=ov, q0=q0, q=float(res.q), m=float(res.m), ell_bulk=eb), info


def limit_student_modes(sl, point, k: int) -> tuple[StrongModes, dict[str, Any]]:
    """The explicit picture of a scaling-limit point (:class:`.scaling.ScalingLimit`, d -> infinity): the
    recovered spikes are at y_i = t_i + tau^2/t_i with overlap 1 - tau^2/t_i^2 and learned eigenvalue
    s (y_i - eps_t) (units of sqrt(d)); the noise bulk is cut, so the student is these spikes only."""
    res = point.result
    t, q0 = teacher_modes(sl.problem, None, k)
    ell, ov = np.zeros(k), np.zeros(k)
    if res.phase != "zero":
        sp = sl.spikes(res.delta, res.eps)
        s = res.m_hat / res.sigma_hat
        n = min(k, sp["k_star"])  # the recovered spikes are the strongest ones, in order
        ell[:n] = s * (sp["y"][:n] - res.eps)
        ov[:n] = sp["overlap"][:n]
    info = {"k_star": int(point.k_star), "ell": ell.tolist(), "overlap": ov.tolist()}
    return StrongModes(t=t, ell=ell, overlap=ov, q0=q0, q=float(res.q), m=float(res.m)), info


def corrected_test_error(problem: Problem, measure, res, d: int, k: int, bulk_coupling: bool = True,
                         **qmc) -> StrongModeError:
    """The SE point's test error under the joint law of its strong modes (noisy and clean labels)."""
    modes, info = student_modes(problem, measure, res, d, k, bulk_coupling=bulk_coupling)
    out = joint_test_error(problem, modes, **qmc)
    out.extra.update(info)
    return out


def corrected_record(problem: Problem, modes: StrongModes, saturation: StrongModeError | None = None,
                     d: int | None = None, **qmc) -> dict[str, Any]:
    """JSON-ready record of a student under the joint law: e_test_exact (+ _err), e_test_clean_exact, and, with
    ``saturation`` (the result of :func:`exact_saturation` with the same k and QMC options; computed when None),
    e_0_exact and excess_exact = e_test_exact - e_0_exact with the error of the paired difference."""
    out = joint_test_error(problem, modes, **qmc)
    if saturation is None:
        saturation, _ = exact_saturation(problem, d, modes.k, **qmc)
    exc, exc_err = out.minus(saturation)
    rec = out.to_dict()
    rec.update({"e_0_exact": saturation.value, "e_0_exact_err": saturation.error, "excess_exact": exc,
                "excess_exact_err": exc_err})
    return rec


# --------------------------------------------------------------------------------------------------
# the learned outliers: the ERM's stationarity along an outlier under the joint law
# --------------------------------------------------------------------------------------------------
def _mode_vectors(g: np.ndarray, tokens: int) -> np.ndarray:
    """The channel coordinates of g g^T - I (g: (..., T)): g_a g_b above the diagonal, (g_a^2 - 1)/sqrt2 on it
    (D of this vector is g g^T - I; mean 0 and identity covariance, like a standard normal K-vector)."""
    iu, ju = np.triu_indices(tokens)
    out = g[..., iu] * g[..., ju]
    diag = iu == ju
    out[..., diag] = (out[..., diag] - 1.0) / math.sqrt(2.0)
    return out


def _stationarity_dim(k: int, tokens: int, noise_out: bool) -> int:
    K = tokens * (tokens + 1) // 2
    return 2 * k * K + 2 * K + (tokens * (tokens - 1) if noise_out else 0)


class _StationarityPanel:
    """The l-independent part of alpha E[g . W_i] on one QMC set: labels, the student's logits without mode i's
    outlier, and W_i = coordinates of (gh_i gh_i^T - I) (joint law) or its Gaussian stand-in (Gaussian law).

    Layout of the standard normals x (N, dim): per explicit mode j a block of 2K (the first T of each K used by
    the joint law: g_j and w_j; all K by the Gaussian law: zeta_j and omega_j), then the remainder pair (K + K),
    then the row-centred output noise (T(T-1), only when Delta_out > 0). Gaussian law: mode j's teacher logits
    are t_j zeta_j and its outlier's l_j (o_j zeta_j + sqrt(1 - o_j^2) omega_j), the same covariances as the
    joint law's t_j W(g_j) and l_j W(gh_j) (E[W(g) W(gh)^T] = o I)."""

    def __init__(self, problem: Problem, modes: StrongModes, i: int, x: np.ndarray, law: str):
        from .channel import _row_noise_basis

        task = problem.task
        T, k = task.tokens, modes.k
        K = T * (T + 1) // 2
        N = x.shape[0]
        t, o, ell, b = modes.t, modes.overlap, modes.ell, modes.ell_bulk
        q0r, qr, mr = modes.remainder()
        q0r, qr, mr, self.clipped = _admissible(q0r, qr, mr, task.noise / 2.0)
        W, Wh = [], []
        for j in range(k):
            blk = x[:, 2 * j * K : 2 * (j + 1) * K]
            if law == "joint":
                g, w = blk[:, :T], blk[:, K : K + T]
                W.append(_mode_vectors(g, T))
                Wh.append(_mode_vectors(math.sqrt(o[j]) * g + math.sqrt(1.0 - o[j]) * w, T))
            else:
                W.append(blk[:, :K])
                Wh.append(o[j] * blk[:, :K] + math.sqrt(max(1.0 - o[j] ** 2, 0.0)) * blk[:, K:])
        zt = x[:, 2 * k * K : 2 * k * K + K]
        zs = x[:, 2 * k * K + K : 2 * k * K + 2 * K]
        a, z = _remainder_pair(zt, zs, q0r + task.noise / 2.0, qr, mr)
        z_r = z
        z0 = a
        for j in range(k):
            z0 = z0 + t[j] * W[j]
            z = z + b[j] * W[j] + (ell[j] * Wh[j] if j != i else 0.0)
        P = logit_design(T)
        y = _softmax_rows(task.beta0 * (z0 @ P.T).reshape(N, T, T))
        y_r = _softmax_rows(task.beta0 * (a @ P.T).reshape(N, T, T))
        if task.noise_out > 0:
            xi = x[:, 2 * k * K + 2 * K :].reshape(N, T, T - 1)
            out_noise = math.sqrt(task.noise_out) * np.einsum("nri,ci->nrc", xi, _row_noise_basis(T))
            y, y_r = y + out_noise, y_r + out_noise
        self.y, self.z_rest, self.w = y, z, Wh[i]
        self.tokens, self.beta = T, problem.student.beta
        # control variate: g of the remainder alone (no explicit mode in teacher or student) is independent of
        # W_i, which has mean 0, so E[g_r . W_i] = 0 under both laws; subtracting it removes the part of g's
        # fluctuation that W_i does not drive
        self.g_rest = None
        self._z_r, self._y_r = z_r, y_r

    def mean(self, ell: float, sigma: float) -> float:
        """E[g . W_i] on this set with mode i's outlier at ell (g = (h* - z)/Sigma at the softmax prox)."""
        from .channel import prox_softmax

        if self.g_rest is None or self.g_rest[0] != sigma:
            g_r = prox_softmax(self._z_r, self._y_r, sigma, self.beta, self.tokens).g
            self.g_rest = (sigma, g_r)
        r = prox_softmax(self.z_rest + ell * self.w, self.y, sigma, self.beta, self.tokens)
        return float(np.mean(np.einsum("nk,nk->n", r.g - self.g_rest[1], self.w)))


def _solved_modes(modes: StrongModes, i: int) -> StrongModes:
    """``modes`` with b_i = 0 for the mode whose outlier is solved: the student's bulk B (everything but that
    outlier) is orthogonal to its eigenvector, u_hat^T B u_hat = 0, so B's logits carry no W_i component; the
    explicit b_i (g g^T - I) alone would have one (o_i b_i), its cross terms with the off-mode part being
    neglected. b_i moves into the Gaussian remainder (the totals q, m are kept)."""
    eb = modes.ell_bulk.copy()
    eb[i] = 0.0
    return StrongModes(t=modes.t, ell=modes.ell, overlap=modes.overlap, q0=modes.q0, q=modes.q, m=modes.m,
                       ell_bulk=eb)


def outlier_stationarity(problem: Problem, modes: StrongModes, i: int, alpha: float, sigma: float,
                         ells, law: str = "joint", log2n: int = 14, replicas: int = 8,
                         seed: int = DEFAULT_SEED) -> tuple[np.ndarray, np.ndarray]:
    r"""Psi_i(l) = alpha E[g . W_i] for each l in ``ells``: the data term's derivative along mode i's outlier
    (docs/theory/decomposition.md section 7.1), with the rest of the student (the remainder (q_r, m_r) of
    ``modes`` and the other explicit modes) held fixed and mode i's outlier eigenvalue l sqrt(d) varied.

    Per sequence: cavity logits z (the student's, with l (gh_i gh_i^T - I)), label y from the teacher's, the
    softmax prox h* = prox_Sigma(z; y) of :func:`.channel.prox_softmax` and g = (h* - z)/Sigma = -grad l(h*).
    ``law``: "joint" (products of Gaussians, as :func:`joint_test_error`) or "gaussian" (each explicit mode's
    logits replaced by Gaussian vectors with the same covariances: the SE's channel). b_i is set to 0
    (:func:`_solved_modes`). Returns (values (len(ells),), per-replica values (replicas, len(ells))): the same
    QMC points for every l and both laws (the remainder's normals are shared, so the laws are paired)."""
    if law not in ("joint", "gaussian"):
        raise ParameterError("law", f"must be joint or gaussian (got {law!r})")
    if int(log2n) < 4 or int(replicas) < 2:
        raise ParameterError("replicas", "need log2n >= 4 and replicas >= 2 for an error estimate")
    if not 0 <= int(i) < modes.k:
        raise ParameterError("k", f"mode index {i} outside the {modes.k} explicit modes")
    f = _Stationarity(problem, _solved_modes(modes, int(i)), int(i), alpha, sigma, 0.0, law, log2n, replicas, seed)
    ells = np.atleast_1d(np.asarray(ells, float))
    per = np.array([f.per_replica(float(v)) for v in ells]).reshape(ells.size, int(replicas)).T
    return per.mean(axis=0), per


class _Stationarity:
    """Psi_i(l) - target on fixed QMC sets (panels built once), for brentq; records every evaluation."""

    def __init__(self, problem: Problem, modes: StrongModes, i: int, alpha: float, sigma: float, target: float,
                 law: str, log2n: int, replicas: int, seed: int):
        T = problem.task.tokens
        dim = _stationarity_dim(modes.k, T, problem.task.noise_out > 0)
        self.panels = [_StationarityPanel(problem, modes, i, x, law)
                       for x in _sobol_replicas(dim, int(log2n), int(replicas), int(seed))]
        self.alpha, self.sigma, self.target = float(alpha), float(sigma), float(target)
        self.calls = 0
        self.clipped = max(p.clipped for p in self.panels)

    def per_replica(self, ell: float) -> np.ndarray:
        self.calls += 1
        return self.alpha * np.array([p.mean(ell, self.sigma) for p in self.panels]) - self.target

    def __call__(self, ell: float) -> float:
        return float(self.per_replica(ell).mean())


def _root(f: _Stationarity, ell0: float, slope: float, xtol: float) -> tuple[float, np.ndarray, float]:
    """Root of f (decreasing, slope ~ ``slope`` < 0) near ell0 by brentq on a bracket found from the linear
    prediction. Returns (root, per-replica residuals at the root, secant slope of the bracket)."""
    f0 = f(ell0)
    guess = ell0 - f0 / slope
    h = 0.25 * abs(guess - ell0) + 0.01 * max(abs(ell0), 1e-3)
    lo, hi = guess - h, guess + h
    flo, fhi = f(lo), f(hi)
    for _ in range(30):
        if flo * fhi <= 0:
            break
        h *= 2.0
        if flo > 0 and fhi > 0:
            lo, flo = hi, fhi
            hi = hi + h
            fhi = f(hi)
        else:
            hi, fhi = lo, flo
            lo = lo - h
            flo = f(lo)
    else:
        raise FloatingPointError("outlier stationarity: no sign change found (is the outlier learned?)")
    root = optimize.brentq(f, lo, hi, xtol=xtol, rtol=1e-10)
    sec = (fhi - flo) / (hi - lo) if hi != lo else slope
    return float(root), f.per_replica(root), float(sec)


def bulk_modes(measure, d: int, max_modes: int = 200) -> np.ndarray:
    """Deterministic eigenvalues of the continuous (MP) part of a finite-d target measure, at the quantiles
    (j + 1/2)/n of its law (n = round(mp_mass min(1, kappa0) d) eigenvalues, descending), rescaled so that their
    sum of squares is exactly the part's share of d Q0; empty when the measure has no MP part. Only the
    ``max_modes`` largest are returned (the others stay in the Gaussian remainder).

    The continuous part of S0 = W0^T W0/sqrt(p0 d) is s M, s = sqrt(kappa0), M = W0^T W0/p0 with the MP density
    sqrt((l+ - w)(w - l-))/(2 pi c w), c = 1/kappa0 (:func:`..targets.mp_stieltjes`)."""
    from ..targets import _mp_moment

    kap, mass = measure.mp_kappa0, float(measure.mp_mass)
    if kap is None or mass <= 0:
        return np.zeros(0)
    n = int(round(mass * min(1.0, kap) * d))
    if n < 1:
        return np.zeros(0)
    s, c = math.sqrt(kap), 1.0 / kap
    lo, hi = (1.0 - math.sqrt(c)) ** 2, (1.0 + math.sqrt(c)) ** 2
    # w = lo + (hi - lo)(1 - cos phi)/2 removes the square-root edges: dw = (hi - lo) sin(phi)/2 dphi
    phi = np.linspace(0.0, math.pi, 20001)
    w = lo + (hi - lo) * (1.0 - np.cos(phi)) / 2.0
    dens = np.sqrt(np.clip((hi - w) * (w - lo), 0.0, None)) / (2.0 * math.pi * c * w) * (hi - lo) * np.sin(phi) / 2.0
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(phi))])
    cdf /= cdf[-1]
    theta = s * np.interp((np.arange(n) + 0.5) / n, cdf, w)
    theta *= math.sqrt(mass * _mp_moment(2, kap) * d / float(np.sum(theta**2)))
    return np.sort(theta)[::-1][: int(max_modes)]


@dataclass
class CorrectedOutliers:
    """Learned outlier eigenvalues of an SE point corrected for the joint (non-Gaussian) law of its strong modes.

    Per explicit mode i (target eigenvalue theta_i = t_i sqrt(d)): ``se`` = the SE's s (y_i - eps) (0: not
    recovered, then nothing is solved and every entry is nan but ``se``); ``gaussian`` / ``joint`` = the roots
    of the ERM's stationarity along the outlier under the Gaussian / joint law (same QMC points, everything
    but the law identical); ``shift`` = joint - gaussian and its QMC error ``shift_error`` (per-replica paired
    residuals over the slope); ``corrected`` = se + shift. ``gaussian_check`` = (gaussian - se): the Gaussian
    law must reproduce the SE's outlier up to QMC error and the SE's own quadrature error (a test of the
    constants), ``gaussian_error`` its QMC error. ``slope`` = dPsi/dl of the joint law (about -Sigma_hat/2).
    """

    theta: np.ndarray
    se: np.ndarray
    gaussian: np.ndarray
    joint: np.ndarray
    shift: np.ndarray
    shift_error: np.ndarray
    corrected: np.ndarray
    gaussian_check: np.ndarray
    gaussian_error: np.ndarray
    slope: np.ndarray
    points: int
    replicas: int
    calls: int = 0
    clipped: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items() if k != "extra"}
        out.update(self.extra)
        return out


def corrected_outliers(problem: Problem, measure, res, d: int, k: int, modes: StrongModes | None = None,
                       which=None, bulk: bool = True, max_bulk: int = 200, log2n: int = 14, replicas: int = 8,
                       seed: int = DEFAULT_SEED, xtol: float = 1e-5) -> CorrectedOutliers:
    r"""The learned outliers of the SE point ``res`` (finite d) with the ERM's stationarity along each outlier
    evaluated under the joint law of the top k target modes (docs/theory/decomposition.md section 7.1).

    Along a learned eigenvector u_hat_i (eigenvalue l_i sqrt(d) > 0) the ERM's minimiser satisfies
    alpha sqrt(d) mean_mu[g^mu . W_i^mu] = lambda - N_i, with W_i = D^{-1}(gh_i gh_i^T - I) and N_i the part that
    the sample average's fluctuation (the effective GOE noise, whose projection on u_hat_i is correlated with
    it) and the target's other directions contribute. In the SE (Gaussian law) the left side is, by Stein,
    sqrt(d) (o_i t_i m_hat - l_i Sigma_hat)/2, and with the SE's outlier s (y_i - eps) this fixes
    N_i = m_hat (y_i - o_i theta_i)/2. One-step correction: N_i, the SE's Sigma and every other piece of the
    student (q_r, m_r, the other outliers) are held at the SE's values, and l_i solves
    Psi_i(l) := alpha E[g . W_i] = (o_i t_i m_hat - l_i^SE Sigma_hat)/2 once under the joint law and once under
    the Gaussian law on the same QMC points (:func:`outlier_stationarity`, brentq). The Gaussian root is the SE's
    outlier up to quadrature (checked); the corrected outlier is the SE's plus the paired difference.
    ``which``: indices of the explicit modes to solve (default: every recovered one); ``modes``: the explicit
    picture (default :func:`student_modes` with bulk couplings, and with ``bulk`` (ignored when ``modes`` is
    given) the target's MP part as
    :func:`bulk_modes` explicit modes too: no student outlier, their bulk couplings b_j from the overlap density.
    Their own non-Gaussianity (t_j up to 0.47 at d = 100) changes the top outlier's stationarity by about as much
    as the spike's: measured on trained students, the population term is the joint law's with every mode
    explicit, not with the spikes alone; docs/theory/decomposition.md section 7.1)."""
    if res.phase != "regular":
        raise ParameterError("alpha", f"outlier stationarity needs a regular SE point (got phase {res.phase})")
    if problem.student.model == "direct":
        raise ParameterError("model", "outlier stationarity is implemented for the factorised student")
    info: dict[str, Any] = {}
    if modes is None:
        modes, info = student_modes(problem, measure, res, d, k)
        extra = bulk_modes(measure, d, max_bulk) if bulk else np.zeros(0)
        info["bulk_modes"] = int(extra.size)
        if extra.size:
            kk0 = modes.k
            b = _bulk_couplings(problem, measure, res, extra, [False] * extra.size) / math.sqrt(d)
            z = np.zeros(extra.size)
            modes = StrongModes(t=np.concatenate([modes.t, extra / math.sqrt(d)]), ell=np.concatenate([modes.ell, z]),
                                overlap=np.concatenate([modes.overlap, z]), q0=modes.q0, q=modes.q, m=modes.m,
                                ell_bulk=np.concatenate([modes.ell_bulk, b]))
            info["k_target"] = kk0
    sd = math.sqrt(d)
    kk = modes.k
    nan = np.full(kk, np.nan)
    out = {n: nan.copy() for n in ("gaussian", "joint", "shift", "shift_error", "gaussian_check", "gaussian_error",
                                   "slope")}
    idx = [j for j in range(kk) if modes.ell[j] > 0] if which is None else [int(j) for j in which]
    calls, clipped = 0, 0.0
    slope0 = -0.5 * float(res.sigma_hat)
    for i in idx:
        if modes.ell[i] <= 0:
            raise ParameterError("k", f"explicit mode {i} has no learned outlier (l = 0)")
        target = 0.5 * (modes.overlap[i] * modes.t[i] * res.m_hat - modes.ell[i] * res.sigma_hat)
        roots = {}
        for law in ("gaussian", "joint"):
            f = _Stationarity(problem, _solved_modes(modes, i), i, res.alpha, res.sigma, target, law, log2n,
                              replicas, seed)
            roots[law] = _root(f, float(modes.ell[i]), slope0, xtol * max(abs(modes.ell[i]), 1e-3))
            calls += f.calls
            clipped = max(clipped, f.clipped)
        (lg, rg, sg), (lj, rj, sj) = roots["gaussian"], roots["joint"]
        R = rg.size
        out["gaussian"][i], out["joint"][i], out["slope"][i] = lg * sd, lj * sd, sj
        out["shift"][i] = (lj - lg) * sd
        out["shift_error"][i] = float(np.std(rj / sj - rg / sg, ddof=1) / math.sqrt(R)) * sd
        out["gaussian_check"][i] = (lg - modes.ell[i]) * sd
        out["gaussian_error"][i] = float(np.std(rg / sg, ddof=1) / math.sqrt(R)) * sd
    se = modes.ell * sd
    info.update({"sigma": float(res.sigma), "m_hat": float(res.m_hat), "sigma_hat": float(res.sigma_hat),
                 "solved": idx})
    return CorrectedOutliers(theta=modes.t * sd, se=se, corrected=se + out["shift"], points=2 ** int(log2n),
                             replicas=int(replicas), calls=calls, clipped=clipped, extra=info, **out)


# --------------------------------------------------------------------------------------------------
# one SE point under the joint law, its top outliers corrected (the `scaling --joint-law` route)
# --------------------------------------------------------------------------------------------------
def with_outliers(modes: StrongModes, ell) -> StrongModes:
    """``modes`` with the explicit outliers moved to ``ell`` (units of sqrt(d)) and the Gaussian remainder
    (Q0_r, q_r, m_r of :meth:`StrongModes.remainder`) kept: q and m change by exactly the outliers' share."""
    new = np.asarray(ell, float).ravel()
    if new.shape != modes.ell.shape or not np.all(np.isfinite(new)) or np.any(new < 0):
        raise ParameterError("ell", f"need {modes.k} finite non-negative outliers (got {ell!r})")
    old, b, o = modes.ell, modes.ell_bulk, modes.overlap
    dq = float(np.sum(new**2 - old**2 + 2.0 * (new - old) * b * o))
    dm = float(np.sum(modes.t * o * (new - old)))
    return StrongModes(t=modes.t, ell=new, overlap=o, q0=modes.q0, q=modes.q + dq, m=modes.m + dm, ell_bulk=b)


def joint_law_point(problem: Problem, measure, res, d: int, k: int, correct: int = 1,
                    saturation: StrongModeError | None = None, log2n: int = 14, replicas: int = 8,
                    seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """The test error and excess of a finite-d SE point ``res`` under the joint law of its top ``k`` target
    modes, with its top ``correct`` learned outliers moved by :func:`corrected_outliers` (the ERM's stationarity
    along each under the joint law; 0: the SE's outliers as they are). The Gaussian remainder is kept
    (:func:`with_outliers`). ``saturation``: :func:`exact_saturation` on the same QMC rule (computed when None;
    pass it along a curve: it does not depend on the point).

    Returns test_error_joint_law (+ _err), e0_joint_law, excess_joint_law (+ _err: the paired difference's QMC
    error), joint_law_k, joint_law_corrected (how many outliers were moved) and outliers_joint_law (the top
    ``correct`` learned outliers after the correction, units of S_hat's eigenvalues, i.e. times sqrt(d)).
    Why (docs/theory/scaling.md "Simulations" (e)): for gamma > 1/2 the top modes carry O(1) of the logits'
    variance, the Gaussian channel's test error is ~9 % low, and at small alpha its fixed point puts the top
    outlier too high; with both corrected the level meets d = 100-400 simulations within 3 % (2.3 % with 2^15 x 8
    points)."""
    qmc = {"log2n": int(log2n), "replicas": int(replicas), "seed": int(seed)}
    if int(correct) < 0:
        raise ParameterError("joint-law-correct", f"must be >= 0 (got {correct})")
    modes, _ = student_modes(problem, measure, res, d, k)
    which = [j for j in range(min(int(correct), modes.k)) if modes.ell[j] > 0] if res.phase == "regular" else []
    if which:
        co = corrected_outliers(problem, measure, res, d, k, modes=modes, which=which, **qmc)
        ell = modes.ell.copy()
        ell[which] = co.corrected[which] / math.sqrt(d)
        modes = with_outliers(modes, ell)
    if saturation is None:
        saturation, _ = exact_saturation(problem, d, modes.k, **qmc)
    elif (saturation.points, saturation.replicas, saturation.k) != (2 ** int(log2n), int(replicas), modes.k):
        # the excess is a paired difference: e_0 must come from the same QMC points and the same explicit modes
        raise ParameterError("saturation", f"was computed on {saturation.replicas} x {saturation.points} points "
                                           f"with k = {saturation.k}, not {int(replicas)} x {2 ** int(log2n)} "
                                           f"with k = {modes.k}")
    rec = corrected_record(problem, modes, saturation=saturation, d=d, **qmc)
    return {"test_error_joint_law": rec["e_test_exact"], "test_error_joint_law_err": rec["e_test_exact_err"],
            "e0_joint_law": rec["e_0_exact"], "excess_joint_law": rec["excess_exact"],
            "excess_joint_law_err": rec["excess_exact_err"], "joint_law_k": int(modes.k),
            "joint_law_corrected": len(which),
            "outliers_joint_law": [float(v) for v in modes.ell[: max(int(correct), 0)] * math.sqrt(d)]}
