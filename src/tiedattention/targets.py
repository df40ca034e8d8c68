"""Target spectra S0 of the attention-indexed model.

Every target family gives two things:

* ``sample(d, rng)`` -- a finite-d symmetric matrix S0 (d x d) for simulations, normalised as in
  THEORY.md section 1 so that (1/d) Tr S0^2 -> Q0;
* ``measure(d)`` -- the spectral measure mu_{S0} the theory works with: a :class:`SpectralMeasure`
  made of atoms (positions, weights) plus, optionally, a Marchenko-Pastur continuous part. ``d=None``
  asks for the d -> infinity limit where one exists (MP); list-based families (power law, custom) need
  a finite d, and spikes are atoms of mass 1/d on top of an optional MP bulk.

Pure numpy: imported by both ``theory`` and ``simulation``.

Target specs as strings (the CLI's ``--target``): ``mp:0.5``, ``powerlaw:1.25``,
``powerlaw:1.25:cutoff=100``, ``spikes:3,2,1``, ``spikes:4,2.5,1.5+mp:0.2``, ``file:eig.npy`` (or .txt).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ParameterError

__all__ = [
    "SpectralMeasure",
    "Target",
    "MPTarget",
    "PowerLawTarget",
    "SpikedTarget",
    "CustomTarget",
    "parse_target",
    "mp_stieltjes",
]


# --------------------------------------------------------------------------------------------------
# Marchenko-Pastur component
# --------------------------------------------------------------------------------------------------
def mp_edges(kappa0: float) -> tuple[float, float]:
    """Edges of the continuous part of the MP target S0 = W0^T W0 / sqrt(p0 d), kappa0 = p0/d."""
    s = np.sqrt(kappa0)
    c = 1.0 / kappa0  # aspect ratio d/p0 of M = W0^T W0 / p0, S0 = s M
    return s * (1.0 - np.sqrt(c)) ** 2, s * (1.0 + np.sqrt(c)) ** 2


def mp_stieltjes(z: np.ndarray, kappa0: float) -> tuple[np.ndarray, np.ndarray]:
    """Stieltjes transform g(z) = int dmu(x)/(z - x) of the MP target and its derivative g'(z).

    mu is the limiting eigenvalue law of S0 = W0^T W0 / sqrt(p0 d) with kappa0 = p0/d, *including* the
    atom at 0 of mass 1 - kappa0 when kappa0 < 1. Valid for Im z > 0 (and for real z outside the
    support, approached from above). With M = W0^T W0/p0 (ratio c = 1/kappa0), g_M solves
    c z g^2 - (z + c - 1) g + 1 = 0, and g_{S0}(z) = g_M(z/s)/s with s = sqrt(kappa0).
    """
    z = np.asarray(z, dtype=complex)
    s = np.sqrt(kappa0)
    c = 1.0 / kappa0
    w = z / s
    lm, lp = (1.0 - np.sqrt(c)) ** 2, (1.0 + np.sqrt(c)) ** 2
    # product of principal square roots picks the branch with g ~ 1/z at infinity in the upper half plane
    root = np.sqrt(w - lm) * np.sqrt(w - lp)
    gm = ((w + c - 1.0) - root) / (2.0 * c * w)
    dgm = (gm - c * gm**2) / (2.0 * c * w * gm - (w + c - 1.0))
    return gm / s, dgm / s**2


def validate_dimension(d, name: str = "d") -> int | None:
    """The one check of a dimension (``--d`` and the ``d`` of the Python API): None (not given: d -> inf where that
    makes sense) or an integer >= 2; a bool or a non-integral number is refused. Returns it as an int (or None)."""
    if d is None:
        return None
    if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or int(d) != d or d < 2:
        raise ParameterError(name, f"must be an integer >= 2 (got {d})")
    return int(d)


# --------------------------------------------------------------------------------------------------
# Spectral measure handed to the theory
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpectralMeasure:
    """mu = sum_i weights[i] * delta(atoms[i])  +  mp_mass * (MP law of kappa0, as in MPTarget).

    The MP part, when present, already contains its own atom at 0 (mass 1 - kappa0 of the part);
    ``mp_mass`` scales the whole MP law. Total mass is 1. ``d``: the dimension of a list-based target (its
    atoms weigh multiples of 1/d: an eigenvalue repeated k times weighs k/d), None for the d -> infinity MP law
    or a measure built by hand; the theory uses it to count the target modes in an outlier.
    """

    atoms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mp_kappa0: float | None = None
    mp_mass: float = 0.0
    d: int | None = None

    def __post_init__(self) -> None:
        a = np.asarray(self.atoms, dtype=float).ravel()
        w = np.asarray(self.weights, dtype=float).ravel()
        if a.shape != w.shape:
            raise ParameterError("target", "atoms and weights must have the same length")
        object.__setattr__(self, "atoms", a)
        object.__setattr__(self, "weights", w)
        total = w.sum() + (self.mp_mass if self.mp_kappa0 is not None else 0.0)
        if not np.isclose(total, 1.0, atol=1e-9):
            raise ParameterError("target", f"spectral measure has total mass {total}, expected 1")

    # moments -------------------------------------------------------------------------------------
    def moment(self, k: int) -> float:
        """int x^k dmu(x), exact (MP moments from the Narayana polynomials for k <= 4)."""
        out = float(np.sum(self.weights * self.atoms**k))
        if self.mp_kappa0 is not None and self.mp_mass > 0:
            out += self.mp_mass * _mp_moment(k, self.mp_kappa0)
        return out

    @property
    def q0(self) -> float:
        """Q0 = (1/d) Tr S0^2 = second moment."""
        return self.moment(2)

    # Stieltjes transform -------------------------------------------------------------------------
    def stieltjes(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """g(z) = int dmu(x)/(z - x) and g'(z), for Im z >= 0 (real z outside the support)."""
        z = np.asarray(z, dtype=complex)
        g = np.zeros(z.shape, dtype=complex)
        dg = np.zeros(z.shape, dtype=complex)
        if self.atoms.size:
            # blocks of points so that no (points x atoms) temporary exceeds ~2^18 entries (d up to 10^4+)
            zf, gf, dgf = z.reshape(-1), g.reshape(-1), dg.reshape(-1)
            step = max(1, (1 << 18) // self.atoms.size)
            for i in range(0, zf.size, step):
                inv = 1.0 / (zf[i : i + step, None] - self.atoms)
                gf[i : i + step] += inv @ self.weights
                dgf[i : i + step] -= (inv * inv) @ self.weights
        if self.mp_kappa0 is not None and self.mp_mass > 0:
            gm, dgm = mp_stieltjes(z, self.mp_kappa0)
            g += self.mp_mass * gm
            dg += self.mp_mass * dgm
        return g, dg

    # support -------------------------------------------------------------------------------------
    def support_intervals(self) -> list[tuple[float, float]]:
        """Closed intervals of the continuous part (empty for purely atomic measures)."""
        if self.mp_kappa0 is None or self.mp_mass <= 0:
            return []
        return [mp_edges(self.mp_kappa0)]

    def point_masses(self) -> tuple[np.ndarray, np.ndarray]:
        """All atoms including the MP atom at 0 (kappa0 < 1), sorted, merged."""
        a, w = list(self.atoms), list(self.weights)
        if self.mp_kappa0 is not None and self.mp_kappa0 < 1 and self.mp_mass > 0:
            a.append(0.0)
            w.append(self.mp_mass * (1.0 - self.mp_kappa0))
        a, w = np.asarray(a, float), np.asarray(w, float)
        order = np.argsort(a)
        a, w = a[order], w[order]
        if a.size:
            uniq, inv = np.unique(a, return_inverse=True)
            w = np.bincount(inv, weights=w)
            a = uniq
        return a, w


def _mp_moment(k: int, kappa0: float) -> float:
    """k-th moment of the MP target law: s^k * sum_j N(k,j) c^(j-1), c = 1/kappa0, s = sqrt(kappa0)."""
    if k == 0:
        return 1.0
    c = 1.0 / kappa0
    s = np.sqrt(kappa0)
    from math import comb

    narayana = sum(comb(k, j) * comb(k, j - 1) / k * c ** (j - 1) for j in range(1, k + 1))
    return float(s**k * narayana)


# --------------------------------------------------------------------------------------------------
# Target families
# --------------------------------------------------------------------------------------------------
class Target:
    """Base class: a family of target query-key matrices S0."""

    spec: str
    #: True when the spectral measure handed to the theory depends on d (atoms of weight 1/d: power laws, spikes),
    #: so that :meth:`measure` needs a finite d and the theory differs from one d to the next
    needs_d: bool = False

    def eigenvalues(self, d: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Eigenvalues of a finite-d S0 (random for MP, deterministic otherwise), shape (d,)."""
        raise NotImplementedError

    def sample(self, d: int, rng: np.random.Generator) -> np.ndarray:
        """A finite-d symmetric S0, shape (d, d), float64."""
        theta = self.eigenvalues(d, rng)
        o = haar_orthogonal(d, rng)
        return (o * theta) @ o.T

    def measure(self, d: int | None = None) -> SpectralMeasure:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.spec

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and self.spec == other.spec

    def __hash__(self) -> int:
        return hash(self.spec)


def haar_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """Haar-distributed d x d orthogonal matrix (QR of a Gaussian matrix with sign fix)."""
    g = rng.standard_normal((d, d))
    q, r = np.linalg.qr(g)
    return q * np.sign(np.diag(r))


class MPTarget(Target):
    """Wishart target S0 = W0^T W0 / sqrt(p0 d), W0 in R^{p0 x d} i.i.d. N(0,1), kappa0 = p0/d.

    Limits: (1/d) Tr S0 -> sqrt(kappa0), Q0 = (1/d) Tr S0^2 -> 1 + kappa0.
    """

    def __init__(self, kappa0: float):
        if not np.isfinite(kappa0) or kappa0 <= 0:
            raise ParameterError("target", f"mp:KAPPA0 needs kappa0 > 0 (got {kappa0})")
        self.kappa0 = float(kappa0)
        self.spec = f"mp:{_fmt(self.kappa0)}"

    def p0(self, d: int) -> int:
        return max(1, int(round(self.kappa0 * d)))

    def sample_w0(self, d: int, rng: np.random.Generator) -> np.ndarray:
        return rng.standard_normal((self.p0(d), d))

    def sample(self, d: int, rng: np.random.Generator) -> np.ndarray:
        w0 = self.sample_w0(d, rng)
        return w0.T @ w0 / np.sqrt(w0.shape[0] * d)

    def eigenvalues(self, d: int, rng: np.random.Generator | None = None) -> np.ndarray:
        rng = rng if rng is not None else np.random.default_rng(0)
        return np.linalg.eigvalsh(self.sample(d, rng))

    def measure(self, d: int | None = None) -> SpectralMeasure:
        validate_dimension(d)
        return SpectralMeasure(mp_kappa0=self.kappa0, mp_mass=1.0)


class PowerLawTarget(Target):
    """S0 = O diag(theta) O^T, theta_i = C i^{-gamma} (i = 1..d; zero beyond ``cutoff``), Q0 = 1."""

    needs_d = True

    def __init__(self, gamma: float, cutoff: int | None = None):
        if not np.isfinite(gamma) or gamma <= 0:
            raise ParameterError("target", f"powerlaw:GAMMA needs gamma > 0 (got {gamma})")
        if cutoff is not None and (isinstance(cutoff, bool) or int(cutoff) != cutoff or cutoff < 1):
            raise ParameterError("target", f"powerlaw cutoff must be a positive rank (got {cutoff})")
        cutoff = None if cutoff is None else int(cutoff)  # (2.5 was a TypeError at the first use)
        self.gamma = float(gamma)
        self.cutoff = cutoff
        self.spec = f"powerlaw:{_fmt(self.gamma)}" + (f":cutoff={cutoff}" if cutoff else "")

    def eigenvalues(self, d: int, rng: np.random.Generator | None = None) -> np.ndarray:
        i = np.arange(1, d + 1, dtype=float)
        theta = i ** (-self.gamma)
        if self.cutoff is not None:
            theta[self.cutoff :] = 0.0
        return theta / np.sqrt(np.mean(theta**2))

    def measure(self, d: int | None = None) -> SpectralMeasure:
        d = validate_dimension(d)
        if d is None:
            raise ParameterError("d", "a power-law target needs a finite dimension d for the theory")
        theta = self.eigenvalues(d)
        return SpectralMeasure(atoms=theta, weights=np.full(d, 1.0 / d), d=int(d))


class SpikedTarget(Target):
    """A few given eigenvalues (spikes), the rest 0, or the rest an MP(kappa0) bulk."""

    needs_d = True

    def __init__(self, spikes: list[float], bulk_kappa0: float | None = None):
        if len(spikes) == 0:
            raise ParameterError("target", "spikes: give at least one eigenvalue")
        if not all(np.isfinite(spikes)):
            raise ParameterError("target", "spikes must be finite numbers")
        if bulk_kappa0 is None and not any(spikes):
            raise ParameterError("target", "every spike is 0 and there is no bulk: S0 = 0 has nothing to learn")
        self.spikes = np.asarray(sorted(spikes, reverse=True), dtype=float)
        self.bulk = MPTarget(bulk_kappa0) if bulk_kappa0 is not None else None
        self.spec = "spikes:" + ",".join(_fmt(s) for s in self.spikes)
        if self.bulk is not None:
            self.spec += "+" + self.bulk.spec

    def sample(self, d: int, rng: np.random.Generator) -> np.ndarray:
        k = self.spikes.size
        if k >= d:
            raise ParameterError("d", f"needs more than {k} dimensions for {k} spikes")
        o = haar_orthogonal(d, rng)
        u = o[:, :k]
        s0 = (u * self.spikes) @ u.T
        if self.bulk is not None:
            # bulk in the orthogonal complement of the spike directions
            rest = o[:, k:]
            b = self.bulk.sample(d - k, rng)
            s0 += rest @ b @ rest.T
        return s0

    def eigenvalues(self, d: int, rng: np.random.Generator | None = None) -> np.ndarray:
        k = self.spikes.size
        rest = (
            self.bulk.eigenvalues(d - k, rng if rng is not None else np.random.default_rng(0))
            if self.bulk is not None
            else np.zeros(d - k)
        )
        return np.sort(np.concatenate([self.spikes, rest]))[::-1]

    def measure(self, d: int | None = None) -> SpectralMeasure:
        d = validate_dimension(d)
        if d is None:
            raise ParameterError("d", "a spiked target needs a finite dimension d for the theory")
        k = self.spikes.size
        if k >= d:  # (as sample(): weights 1/d each would leave the rest a mass 1 - k/d <= 0)
            raise ParameterError("d", f"needs more than {k} dimensions for {k} spikes (got {d})")
        if self.bulk is None:
            atoms = np.concatenate([self.spikes, [0.0]])
            weights = np.concatenate([np.full(k, 1.0 / d), [1.0 - k / d]])
            return SpectralMeasure(atoms=atoms, weights=weights, d=int(d))
        return SpectralMeasure(
            atoms=self.spikes, weights=np.full(k, 1.0 / d), mp_kappa0=self.bulk.kappa0, mp_mass=1.0 - k / d, d=int(d)
        )


class CustomTarget(Target):
    """Any given list of eigenvalues. At another d, eigenvalues are taken at matching quantiles."""

    def __init__(self, eigenvalues: np.ndarray, spec: str = "custom"):
        raw = np.asarray(eigenvalues)
        if raw.dtype.kind not in "iuf":  # strings, complex, objects, booleans: not silently cast (or a traceback)
            raise ParameterError("target", f"custom eigenvalues must be real numbers (got dtype {raw.dtype})")
        ev = raw.astype(float)
        if ev.ndim != 1:  # a matrix is not a list of eigenvalues (flattening it would silently make one up)
            raise ParameterError("target", f"custom eigenvalues must be a 1-D list (got an array of shape {ev.shape})")
        if ev.size == 0 or not np.all(np.isfinite(ev)):
            raise ParameterError("target", "custom eigenvalues must be a non-empty list of finite numbers")
        if ev.size < 2:
            raise ParameterError("target", f"custom eigenvalues: give at least 2 (the list is S0's spectrum, d = its "
                                 f"length; got {ev.size})")
        if not np.any(ev):
            raise ParameterError("target", "every custom eigenvalue is 0: S0 = 0 has nothing to learn")
        self.values = np.sort(ev)[::-1]
        self.spec = spec

    def eigenvalues(self, d: int, rng: np.random.Generator | None = None) -> np.ndarray:
        if d == self.values.size:
            return self.values.copy()
        src = (np.arange(self.values.size) + 0.5) / self.values.size
        dst = (np.arange(d) + 0.5) / d
        return np.interp(dst, src, self.values)

    def measure(self, d: int | None = None) -> SpectralMeasure:
        d = validate_dimension(d)
        ev = self.eigenvalues(d if d is not None else self.values.size)
        return SpectralMeasure(atoms=ev, weights=np.full(ev.size, 1.0 / ev.size), d=int(ev.size))


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------
def _fmt(x: float) -> str:
    return f"{x:g}"


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParameterError("target", f"{what}: cannot read '{text}' as a number") from None


def parse_target(spec: str | Target) -> Target:
    """Parse a target spec string (see module docstring)."""
    if isinstance(spec, Target):
        return spec
    text = str(spec).strip()
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind == "mp":
        return MPTarget(_float(rest, "mp:KAPPA0"))
    if kind == "powerlaw":
        parts = rest.split(":")
        gamma = _float(parts[0], "powerlaw:GAMMA")
        cutoff = None
        for p in parts[1:]:
            key, _, val = p.partition("=")
            if key != "cutoff":
                raise ParameterError("target", f"unknown power-law option '{p}' (expected cutoff=R)")
            try:
                cutoff = int(val)
            except ValueError:
                raise ParameterError("target", f"cutoff must be an integer (got '{val}')") from None
        return PowerLawTarget(gamma, cutoff)
    if kind == "spikes":
        spikes_txt, _, bulk = rest.partition("+")
        spikes = [_float(s, "spikes") for s in spikes_txt.split(",") if s.strip()]
        kappa0 = None
        if bulk:
            b = parse_target(bulk)
            if not isinstance(b, MPTarget):
                raise ParameterError("target", "spikes can only sit on an MP bulk: spikes:4,2+mp:0.2")
            kappa0 = b.kappa0
        return SpikedTarget(spikes, kappa0)
    if kind == "file":
        path = Path(rest)
        try:
            with warnings.catch_warnings():  # an empty text file: the error below says so, not a warning first
                warnings.simplefilter("ignore", UserWarning)
                ev = np.load(path) if path.suffix == ".npy" else np.loadtxt(path)
        except (OSError, ValueError, EOFError) as exc:
            raise ParameterError("target", f"cannot read eigenvalue file '{path}': {exc}") from None
        return CustomTarget(ev, spec=f"file:{path}")
    raise ParameterError(
        "target", f"unknown target '{text}' (expected mp:K, powerlaw:G, spikes:a,b,c[+mp:K] or file:PATH)"
    )
