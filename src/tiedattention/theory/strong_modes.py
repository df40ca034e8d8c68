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

Public API: :class:`StrongModes`, :class:`StrongModeError`, :func:`joint_test_error`, :func:`teacher_modes`,
:func:`ray_error`, :func:`exact_saturation` (and ``_error``), :func:`student_modes` (finite-d SE point),
:func:`limit_student_modes` (scaling-limit point), :func:`corrected_test_error`, :func:`corrected_record`.
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
    from scipy.stats import qmc

    out = []
    for r in range(replicas):
        sob = qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng([seed, dim, r]))
        u = np.clip(sob.random_base2(log2n), 2.0**-60, 1.0 - 2.0**-53)
        x = ndtri(u)
        x.setflags(write=False)
        out.append(x)
    return tuple(out)


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
    a = math.sqrt(qz) * zt
    if qz > 0:
        cond = max(qr - mr * mr / qz, 0.0)
        b = (mr / qz) * a + math.sqrt(cond) * zs
    else:
        b = math.sqrt(max(qr, 0.0)) * zs
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
