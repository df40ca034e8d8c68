"""Trainers: Adam (the study's protocol), L-BFGS (strong Wolfe), accelerated proximal gradient on S.

Every trainer minimises the normalised objective F = L/d^2 of :mod:`.models` and is registered in
:data:`SOLVERS` under its name; :func:`train` dispatches through the registry, so another module can add a
solver (e.g. ``gamp``) with :func:`register_solver` without touching this file.

A solver is a function ``fn(problem, objective, *, seed, callback, **options) -> Solution``:
``objective`` is an :class:`~.models.Objective` (its ``.data.source`` is the numpy :class:`~.sampler.Dataset`),
``seed`` seeds the initialisation (stream ``rng_for(seed, "init")``), ``callback(step, F, seconds)`` is called
after each iteration (or function evaluation, for L-BFGS) with the current normalised objective.

Stop rules (all documented in docs/user-guide/simulation.md):

* ``adam``: lr 0.1, betas (0.9, 0.999), W ~ N(0, 1) (direct model: S = sym(A), A ~ N(0, 1/d)); stop at the
  first step k > ``min_steps`` (100) where the total loss L (data sum + penalty) changes by less than
  ``tol`` = 1e-7 **relative** to L between consecutive steps (``stop_on="total"`` for an absolute change of L:
  see :func:`solve_adam`); at most ``max_steps`` = 10^6 steps (then converged = False).
* ``lbfgs``: torch.optim.LBFGS, strong-Wolfe line search, same initialisation as Adam; stops when the max-norm
  of the gradient of F is below ``gtol`` or F decreases by less than ``rtol`` (relative) over ``block``
  iterations.
* ``prox``: accelerated proximal gradient (FISTA) on S from S = 0, with backtracking (Armijo-type sufficient
  decrease on the smooth part, step growth 1.1x per iteration) and function-value restart (a step that
  increases F is rejected and the momentum reset). Proximal map: factorised model, eigenvalue
  soft-thresholding ``mu -> max(mu - t lam/d, 0)`` keeping the top p = round(kappa d) (the rank constraint);
  direct model, exact ridge shrinkage ``V -> V / (1 + 2 t lam/d)``. Stops when the relative change of F is
  below ``rtol`` for ``patience`` consecutive accepted iterations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import ParameterError
from ..problem import Problem, validate_integer, validate_number, validate_problem
from .models import Objective, TorchData, logits_S, sym
from .sampler import Dataset, rng_for

__all__ = [
    "Solution",
    "TrainResult",
    "SOLVERS",
    "register_solver",
    "train",
    "solve_adam",
    "solve_lbfgs",
    "solve_prox",
    "prox_nuclear_psd",
    "check_solver_options",
    "check_train_options",
]

Callback = Callable[[int, float, float], None]


@dataclass
class Solution:
    """What a solver hands back: S (d, d) torch, W (p, d) or None, and how it stopped."""

    S: torch.Tensor
    W: torch.Tensor | None
    steps: int
    converged: bool
    message: str


@dataclass
class TrainResult:
    """A trained student.

    Attributes:
        S_hat: learned query-key matrix, (d, d) numpy float64 (factorised: W^T W / sqrt(p d)).
        W: (p, d) numpy, factorised model only (for ``prox`` reconstructed from the eigendecomposition).
        objective: F = (data sum + penalty)/d^2 at S_hat, i.e. alpha*train_error + lam Tr S/d
            (direct: + lam ||S||_F^2/d).
        penalty: the penalty part of ``objective`` (penalty / d^2).
        train_error: (1/n) sum_mu loss_mu.
        steps: iterations (Adam steps, L-BFGS iterations, APG iterations).
        converged: the stop rule was met (False: max steps, or a non-finite objective).
        seconds: wall time of the solver.
    """

    S_hat: np.ndarray
    W: np.ndarray | None
    objective: float
    penalty: float
    train_error: float
    steps: int
    converged: bool
    seconds: float
    solver: str
    message: str = ""
    extra: dict = field(default_factory=dict)


SOLVERS: dict[str, Callable[..., Solution]] = {}


def unknown_solver(name: str) -> str:
    """The message for a solver that is not registered; "gamp" lives above this layer (tiedattention.amp uses the
    theory's channel), so it is registered by the CLI and sweeps, and from Python by tiedattention.amp.register()."""
    hint = "; gamp is registered by tiedattention.amp.register()" if name == "gamp" else ""
    return f"unknown solver {name!r} (known: {', '.join(sorted(SOLVERS))}){hint}"


def register_solver(name: str, fn: Callable[..., Solution], overwrite: bool = False) -> None:
    """Add a solver to the registry (see the module docstring for its signature)."""
    if name in SOLVERS and not overwrite:
        raise ValueError(f"solver {name!r} already registered")
    SOLVERS[name] = fn


# ------------------------------------------------------------------------------------------------
# initialisation
# ------------------------------------------------------------------------------------------------
def _init_param(problem: Problem, obj: Objective, seed: int) -> torch.Tensor:
    """Factorised: W (p, d) ~ N(0, 1). Direct: A (d, d) ~ N(0, 1/d), S = sym(A)."""
    d = obj.d
    rng = rng_for(seed, "init")
    if problem.student.model == "factorized":
        a = rng.standard_normal((problem.student.width(d), d))
    else:
        a = rng.standard_normal((d, d)) / math.sqrt(d)
    return torch.tensor(a, dtype=obj.data.dtype, device=obj.data.device, requires_grad=True)


def _value_grad(problem: Problem, obj: Objective) -> Callable[[torch.Tensor], float]:
    return obj.value_grad_W if problem.student.model == "factorized" else obj.value_grad_A


def _S_of(problem: Problem, param: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    P = param.detach()
    if problem.student.model == "factorized":
        p, d = P.shape
        return P.T @ P / math.sqrt(p * d), P
    return sym(P), None


# ------------------------------------------------------------------------------------------------
# The built-in solvers' options: checked before anything is built (adam lr=-1 was torch's ValueError)
# ------------------------------------------------------------------------------------------------
# name -> (kind, bound): "pos" a number > bound, "nonneg" >= bound, "int" an integer >= bound; "opt_" allows None
_OPTION_SPECS: dict[str, dict[str, tuple[str, Any]]] = {
    "adam": {"lr": ("pos", 0.0), "tol": ("nonneg", 0.0), "min_steps": ("int", 0), "max_steps": ("int", 1),
             "betas": ("betas", None), "eps": ("nonneg", 0.0), "stop_on": ("choice", ("total", "normalized",
                                                                                    "relative"))},
    "lbfgs": {"max_iter": ("int", 1), "history_size": ("int", 1), "gtol": ("nonneg", 0.0), "rtol": ("nonneg", 0.0),
              "block": ("int", 1), "scale": ("opt_pos", 0.0)},
    "prox": {"max_iter": ("int", 1), "rtol": ("nonneg", 0.0), "patience": ("int", 1), "t0": ("opt_pos", 0.0),
             "grow": ("nonneg", 1.0)},
}


def _checked_option(name: str, value: Any, kind: str, bound: Any) -> Any:
    if kind.startswith("opt_"):
        if value is None:
            return None
        kind = kind[len("opt_"):]
    if kind == "int":
        return validate_integer(name, value, bound)
    if kind in ("pos", "nonneg"):
        return validate_number(name, value, bound, closed=kind == "nonneg")
    if kind == "choice":
        if value not in bound:
            raise ParameterError(name, f"must be {', '.join(bound[:-1])} or {bound[-1]} (got {value!r:.60})")
        return value
    # betas: Adam's two decay rates, each in [0, 1)
    try:
        pair = tuple(float(b) for b in value) if not isinstance(value, (str, bytes)) else ()
    except (TypeError, ValueError):
        pair = ()
    if not (len(pair) == 2 and all(math.isfinite(b) and 0.0 <= b < 1.0 for b in pair)):
        raise ParameterError(name, f"must be two numbers in [0, 1) (got {value!r:.60})")
    return pair


def check_train_options(**values: Any) -> None:
    """train()'s own arguments that reach the run only later (seed: the initialisation; dtype, chunk: the data on the
    device; callback: after the first step): each bad one a ParameterError naming it, before anything is built (they
    were int()'s ValueError, torch's TypeError, 'int' object is not callable after the first step, or accepted)."""
    if "seed" in values:
        validate_integer("seed", values["seed"], 0)
    dtype = values.get("dtype")
    if "dtype" in values and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ParameterError("dtype", f"must be a torch floating dtype, e.g. torch.float64 (got {dtype!r:.60})")
    chunk = values.get("chunk")
    if chunk is not None and chunk != 0:  # (None and 0: the default chunk)
        validate_integer("chunk", chunk, 1)
    for name in ("callback", "progress"):
        fn = values.get(name)
        if fn is not None and not callable(fn):
            raise ParameterError(name, f"must be a function or None (got {fn!r:.60})")


def check_solver_options(solver: str, options: dict[str, Any]) -> dict[str, Any]:
    """The values of a built-in solver's options (adam, lbfgs, prox, as registered here), checked and converted (an
    integral float for an integer); a bad one is a ParameterError naming it. Other options, and those of solvers
    registered by others, pass unchanged (the solver's own signature decides which it takes)."""
    spec = _OPTION_SPECS.get(solver) if SOLVERS.get(solver) is _BUILTIN.get(solver) else None
    if not spec:
        return dict(options)
    return {k: _checked_option(k, v, *spec[k]) if k in spec else v for k, v in options.items()}


# ------------------------------------------------------------------------------------------------
# Adam, the study's protocol
# ------------------------------------------------------------------------------------------------
def solve_adam(
    problem: Problem,
    obj: Objective,
    *,
    seed: int = 0,
    callback: Callback | None = None,
    lr: float = 0.1,
    tol: float = 1e-7,
    min_steps: int = 100,
    max_steps: int = 1_000_000,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    stop_on: str = "relative",
) -> Solution:
    """Full-batch Adam. Stop when |L_k - L_{k-1}| < tol after more than ``min_steps`` steps.

    ``stop_on`` chooses the change measured: "relative" (|L_k - L_{k-1}| / |L_k|, the default: about 200-250
    steps at d = 100, alpha = 0.5, lam = 0.01, as in the study), "total" (absolute change of the total loss
    L = data sum + penalty; about 500 steps there) or "normalized" (absolute change of F = L/d^2).
    """
    o = check_solver_options("adam", dict(lr=lr, tol=tol, min_steps=min_steps, max_steps=max_steps, betas=betas,
                                          eps=eps, stop_on=stop_on))
    lr, tol, min_steps, max_steps, betas, eps = o["lr"], o["tol"], o["min_steps"], o["max_steps"], o["betas"], o["eps"]
    param = _init_param(problem, obj, seed)
    f = _value_grad(problem, obj)
    opt = torch.optim.Adam([param], lr=lr, betas=betas, eps=eps)
    scale = obj.d**2 if stop_on == "total" else 1.0
    t0 = time.perf_counter()
    prev = None
    converged, message, step = False, f"max_steps={max_steps} reached", 0
    for step in range(1, max_steps + 1):
        F = f(param)
        if not math.isfinite(F):
            message = f"non-finite objective at step {step}"
            break
        if callback is not None:
            callback(step, F, time.perf_counter() - t0)
        if prev is not None and step > min_steps:
            change = abs(F - prev) / (abs(F) if stop_on == "relative" else 1.0) * scale
            if change < tol:
                converged, message = True, f"loss change {change:.3g} < {tol:g} ({stop_on})"
                break
        opt.step()
        prev = F
    S, W = _S_of(problem, param)
    return Solution(S, W, step, converged, message)


# ------------------------------------------------------------------------------------------------
# L-BFGS
# ------------------------------------------------------------------------------------------------
def solve_lbfgs(
    problem: Problem,
    obj: Objective,
    *,
    seed: int = 0,
    callback: Callback | None = None,
    max_iter: int = 20_000,
    history_size: int = 50,
    gtol: float = 1e-12,
    rtol: float = 1e-7,
    block: int = 25,
    scale: float | None = None,
) -> Solution:
    """torch.optim.LBFGS with strong-Wolfe line search on W (or on A, S = sym(A)).

    The closure hands LBFGS the (rescaled) objective as a float64 tensor: LBFGS reads it back with float(), and
    torch's default float32 would hide every change below ~1e-7 relative (it then stalled there, 'converged')."""
    o = check_solver_options("lbfgs", dict(max_iter=max_iter, history_size=history_size, gtol=gtol, rtol=rtol,
                                           block=block, scale=scale))
    max_iter, history_size, gtol, rtol, block, scale = (o[k] for k in ("max_iter", "history_size", "gtol", "rtol",
                                                                       "block", "scale"))
    param = _init_param(problem, obj, seed)
    f0 = _value_grad(problem, obj)
    # torch's LBFGS has absolute thresholds (curvature pairs need y.s > 1e-10): work on F / F(init)
    c = scale if scale is not None else 1.0 / max(abs(f0(param)), 1e-300)

    def f(P: torch.Tensor) -> float:
        v = f0(P) * c
        P.grad.mul_(c)
        return v

    opt = torch.optim.LBFGS(
        [param], lr=1.0, max_iter=block, max_eval=2 * block, tolerance_grad=gtol,
        tolerance_change=0.0, history_size=history_size, line_search_fn="strong_wolfe",
    )
    t0 = time.perf_counter()
    state = {"evals": 0, "bad": False}

    def closure() -> torch.Tensor:
        F = f(param)
        state["evals"] += 1
        if not math.isfinite(F):
            state["bad"] = True
            # a huge finite value makes the line search back off instead of propagating NaN
            param.grad = torch.zeros_like(param)
            return torch.tensor(1e300, dtype=torch.float64)
        if callback is not None:
            callback(state["evals"], F / c, time.perf_counter() - t0)
        return torch.tensor(F, dtype=torch.float64)  # not torch's default float32: LBFGS reads float(loss)

    converged, message = False, f"max_iter={max_iter} reached"
    prev = float(closure())
    iters, restarted = 0, False
    while iters < max_iter:
        before = opt.state[param].get("n_iter", 0)
        opt.step(closure)
        done = opt.state[param].get("n_iter", 0) - before
        iters += done
        cur = f(param)
        state["evals"] += 1
        if state["bad"] and not math.isfinite(cur):
            message = "non-finite objective"
            break
        gmax = float(param.grad.abs().max())
        if gmax <= gtol:
            converged, message = True, f"gradient max-norm {gmax:.3g} <= {gtol:g}"
            break
        if abs(prev - cur) <= rtol * max(abs(cur), 1e-300) or done == 0:
            if not restarted and iters < max_iter:
                # torch's LBFGS gives up when its direction stops being a descent direction (stale
                # curvature pairs); restart once from steepest descent before declaring convergence
                opt.state.clear()
                restarted = True
                continue
            converged, message = True, f"relative change {abs(prev - cur) / abs(cur):.3g} over {done} iterations"
            break
        restarted = False
        prev = cur
    S, W = _S_of(problem, param)
    return Solution(S, W, iters, converged, message)


# ------------------------------------------------------------------------------------------------
# Accelerated proximal gradient on S
# ------------------------------------------------------------------------------------------------
def eigh(V: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigendecomposition (ascending) of a symmetric matrix, in torch (mixing numpy/scipy BLAS calls into the
    loop makes two thread pools spin against each other on small machines). On CPU and d <= 512 it runs on
    one thread: multi-threaded LAPACK eigh at these sizes is slower and its time erratic (0.5-50 ms)."""
    if V.device.type != "cpu" or V.shape[0] > 512:
        return torch.linalg.eigh(V)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.linalg.eigh(V)
    finally:
        torch.set_num_threads(threads)


def prox_nuclear_psd(V: torch.Tensor, thresh: float, rank: int | None = None) -> tuple[torch.Tensor, float]:
    """argmin_{S psd, rank<=r} thresh Tr S + ||S - V||^2/2: soft-threshold the eigenvalues of sym(V) at
    ``thresh``, clip at 0, keep the ``rank`` largest. Returns (S, Tr S)."""
    mu, U = eigh(sym(V))
    mu = torch.clamp(mu - thresh, min=0.0)
    if rank is not None and rank < mu.numel():
        mu[: mu.numel() - rank] = 0.0  # eigh sorts ascending
    return (U * mu) @ U.T, float(mu.sum())


def solve_prox(
    problem: Problem,
    obj: Objective,
    *,
    seed: int = 0,
    callback: Callback | None = None,
    max_iter: int = 50_000,
    rtol: float = 1e-12,
    patience: int = 5,
    t0: float | None = None,
    grow: float = 1.1,
    init: np.ndarray | torch.Tensor | None = None,
) -> Solution:
    """FISTA with backtracking and function-value restart on S (see the module docstring).

    ``init``: the starting S (d, d), default 0. It is symmetrised and projected onto the feasible set
    (factorised: PSD with rank <= p) before the first step, so any square matrix is a valid start. The problem is
    not convex in S (the softmax loss), so different starts can end at different minimisers: that is what this
    option is for (multi-start checks of the landscape, warm starts along a sweep).
    """
    o = check_solver_options("prox", dict(max_iter=max_iter, rtol=rtol, patience=patience, t0=t0, grow=grow))
    max_iter, rtol, patience, t0, grow = (o[k] for k in ("max_iter", "rtol", "patience", "t0", "grow"))
    d = obj.d
    lam = problem.student.lam
    factorized = problem.student.model == "factorized"
    p = problem.student.width(d)
    rank = p if (factorized and p < d) else None

    def prox(V: torch.Tensor, t: float) -> tuple[torch.Tensor, float]:
        if factorized:
            S, tr = prox_nuclear_psd(V, t * lam / d, rank)
            return S, lam * tr / d
        S = sym(V) / (1.0 + 2.0 * t * lam / d)
        return S, float(obj.penalty_ridge(S))

    # Logits are linear in S: h(y) for the extrapolated point is the same combination of h(z) and h(x),
    # so each iteration needs one forward pass (at the candidate z) and one gradient pass (at y).
    x = torch.zeros((d, d), dtype=obj.data.dtype, device=obj.data.device)
    if init is not None:
        x0 = torch.as_tensor(np.asarray(init) if not torch.is_tensor(init) else init, dtype=x.dtype, device=x.device)
        if x0.shape != (d, d):
            raise ParameterError("init", f"must be a ({d}, {d}) matrix (got shape {tuple(x0.shape)})")
        if not bool(torch.isfinite(x0).all()):
            raise ParameterError("init", "must be finite")
        x = prox_nuclear_psd(sym(x0), 0.0, rank)[0] if factorized else sym(x0)
    Hx = obj.logits_all(x)
    # the objective of the start, penalty included (a start's F without it made every step from a warm start
    # near a minimiser look like an increase: the solver stopped at ``init`` after ``patience`` rejections)
    Fx = obj.loss_of_logits(Hx, grad=False)[0] + float(obj.penalty_S(x))
    y, Hy, theta = x, Hx, 1.0
    alpha = obj.n / d**2
    t = t0 if t0 is not None else 2.0 * d / max(alpha, 1e-3)
    start = time.perf_counter()
    converged, message, calm, k = False, f"max_iter={max_iter} reached", 0, 0
    for k in range(1, max_iter + 1):
        fy, Gy = obj.loss_of_logits(Hy)
        gy = obj.grad_S_of(Gy)
        while True:
            z, gz = prox(y - t * gy, t)
            Hz = obj.logits_all(z)
            fz = obj.loss_of_logits(Hz, grad=False)[0]
            diff = z - y
            bound = fy + float((gy * diff).sum()) + float((diff * diff).sum()) / (2 * t)
            if fz <= bound + 1e-15 * abs(fy) or t < 1e-20:
                break
            t *= 0.5
        Fz = fz + gz
        if not math.isfinite(Fz):
            message = f"non-finite objective at iteration {k}"
            break
        if Fz > Fx:  # restart: reject z, kill momentum, next step is a plain proximal-gradient step from x
            if y is x:
                calm += 1  # a plain step from x could not decrease F: we are at the floor
            else:
                y, Hy, theta = x, Hx, 1.0
                continue
        else:
            change = (Fx - Fz) / max(abs(Fz), 1e-300)
            calm = calm + 1 if change <= rtol else 0
            theta_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * theta * theta))
            c = (theta - 1.0) / theta_new
            y, Hy = z + c * (z - x), Hz + c * (Hz - Hx)
            x, Hx, Fx, theta = z, Hz, Fz, theta_new
        if callback is not None:
            callback(k, Fx, time.perf_counter() - start)
        if calm >= patience:
            converged, message = True, f"relative change <= {rtol:g} for {patience} iterations"
            break
        t *= grow
    W = None
    if factorized:
        mu, U = eigh(x)
        mu, U = mu.flip(0)[:p], U.flip(1)[:, :p]
        W = (math.sqrt(p * d) ** 0.5) * (U * torch.sqrt(torch.clamp(mu, min=0.0))).T
        if W.shape[0] < p:
            W = torch.cat([W, torch.zeros((p - W.shape[0], d), dtype=W.dtype, device=W.device)])
    return Solution(x, W, k, converged, message)


register_solver("adam", solve_adam)
register_solver("lbfgs", solve_lbfgs)
register_solver("prox", solve_prox)
_BUILTIN = {"adam": solve_adam, "lbfgs": solve_lbfgs, "prox": solve_prox}  # whose options _OPTION_SPECS checks


# ------------------------------------------------------------------------------------------------
# dispatch
# ------------------------------------------------------------------------------------------------
def _finish(problem: Problem, obj: Objective, sol: Solution, seconds: float, solver: str) -> TrainResult:
    S = sym(sol.S.detach())
    data = obj.data_only(S)
    pen = float(obj.penalty_S(S))
    F = data + pen
    converged, message = sol.converged, sol.message
    if not math.isfinite(F):
        converged, message = False, message + "; non-finite objective at the solution"
    return TrainResult(
        S_hat=S.cpu().numpy().astype(np.float64),
        W=None if sol.W is None else sol.W.detach().cpu().numpy().astype(np.float64),
        objective=F,
        penalty=pen,
        train_error=data * obj.d**2 / obj.n,
        steps=int(sol.steps),
        converged=bool(converged),
        seconds=seconds,
        solver=solver,
        message=message,
    )


_WARM = False


#: solvers built on torch.optim, whose first step imports torch's compiler stack
_OPTIM_SOLVERS = frozenset({"adam", "lbfgs"})


def _warm_up() -> None:
    """The first torch.optim step of a process imports torch's compiler stack (~2 s, more under load); do it
    off the clock. Only the torch.optim solvers need it: the others never pay that import."""
    global _WARM
    if not _WARM:
        p = torch.zeros(1, requires_grad=True)
        p.grad = torch.zeros(1)
        torch.optim.Adam([p]).step()
        _WARM = True


def train(
    problem: Problem,
    data: Dataset,
    solver: str = "adam",
    device: str = "cpu",
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    chunk: int | None = None,
    callback: Callback | None = None,
    **options,
) -> TrainResult:
    """Train the problem's student on ``data`` with a registered solver.

    Args:
        problem: task and student (model, kappa, lam, beta).
        data: a :class:`~.sampler.Dataset` (from :func:`~.sampler.sample_dataset`).
        solver: a key of :data:`SOLVERS` ("adam", "lbfgs", "prox", ...).
        device: "cpu" or "cuda" (ParameterError("device") when CUDA is not available).
        dtype: torch dtype of the computation (float64 by default).
        seed: seeds the initialisation (stream ``rng_for(seed, "init")``).
        chunk: sequences per chunk in the loss (default: about 4M numbers per chunk).
        callback: ``callback(step, F, seconds)`` after each iteration.
        options: solver options (e.g. ``lr``, ``tol``, ``max_steps`` for adam; ``rtol`` for prox).
    """
    if solver not in SOLVERS:
        raise ParameterError("solver", unknown_solver(solver))
    validate_problem(problem)
    if not isinstance(data, Dataset):
        raise ParameterError("data", f"must be a Dataset (got {type(data).__name__}); sample_dataset(problem, n, d, "
                             "seed) makes one")
    check_train_options(seed=seed, dtype=dtype, chunk=chunk, callback=callback)
    options = check_solver_options(solver, options)
    if data.T != problem.task.tokens or data.task != problem.task.task:
        raise ParameterError("data", f"was sampled for T = {data.T}, {data.task}; the problem has "
                             f"T = {problem.task.tokens}, {problem.task.task}")
    td = TorchData.from_dataset(data, device=device, dtype=dtype, chunk=chunk)
    obj = Objective(problem, td)
    if solver in _OPTIM_SOLVERS:
        _warm_up()
    t0 = time.perf_counter()
    sol = SOLVERS[solver](problem, obj, seed=seed, callback=callback, **options)
    if td.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return _finish(problem, obj, sol, seconds, solver)


def objective_at(problem: Problem, data: Dataset, S: np.ndarray, device: str = "cpu") -> float:
    """Normalised objective F at a given symmetric S (factorised: trace penalty; direct: ridge)."""
    td = TorchData.from_dataset(data, device=device)
    obj = Objective(problem, td)
    St = torch.as_tensor(S, dtype=td.dtype, device=td.device)
    return obj.data_only(St) + float(obj.penalty_S(St))


__all__ += ["objective_at", "logits_S"]
