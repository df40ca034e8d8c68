"""Tied-attention students and their losses, in torch (THEORY.md section 2).

All objectives are handled in the normalisation of the theory, **divided by d^2**:

* factorised, W (p, d), S_W = W^T W / sqrt(p d):
  ``F(W) = (1/d^2) [ sum_mu loss_mu + lam sqrt(d/p) ||W||_F^2 ] = alpha * train_error + lam (1/d) Tr S_W``;
* direct, S (d, d) symmetric (parametrised as S = (A + A^T)/2 for the first-order trainers):
  ``F(S) = (1/d^2) [ sum_mu loss_mu + lam d ||S||_F^2 ] = alpha * train_error + lam (1/d) ||S||_F^2``;
* on S for the proximal solver: smooth part ``f(S) = (1/d^2) sum_mu loss_mu`` and non-smooth part
  ``g(S) = lam (1/d) Tr S + indicator(S psd, rank <= p)`` (factorised) or ridge ``lam (1/d)||S||_F^2`` (direct).

Per-sequence losses: seq2lab ``||y - yhat||_F^2`` (T x T); seq2seq ``(1/d)||Y - yhat X||_F^2`` evaluated
from the sufficient statistics of the sampler (see :mod:`.sampler`). Logits are computed from products
``X W^T`` (factorised) or ``X S`` (on S), never from per-sequence d x d matrices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ParameterError
from ..problem import Problem
from .sampler import Dataset, default_chunk

__all__ = [
    "resolve_device",
    "TorchData",
    "logits_W",
    "logits_S",
    "sym",
    "seq2lab_loss",
    "seq2seq_loss",
    "Objective",
]


def resolve_device(device: str | torch.device) -> torch.device:
    """torch device from a name; ``cuda`` when CUDA is missing raises ParameterError("device")."""
    name = str(device)
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ParameterError("device", f"must be cpu or cuda (got {name!r})")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ParameterError("device", "CUDA is not available")
    return torch.device(name)


def sym(A: torch.Tensor) -> torch.Tensor:
    """(A + A^T)/2."""
    return 0.5 * (A + A.transpose(-1, -2))


def logits_W(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """h(S_W) with S_W = W^T W/sqrt(p d): X (m, T, d), W (p, d) -> (m, T, T).

    ``h = (Z Z^T - I ||W||^2) / (sqrt(p d) sqrt(d))`` with ``Z = X W^T`` (m, T, p).
    """
    p, d = W.shape
    T = X.shape[-2]
    Z = X @ W.transpose(0, 1)
    c = 1.0 / (math.sqrt(p * d) * math.sqrt(d))
    h = Z @ Z.transpose(-1, -2)
    eye = torch.eye(T, dtype=X.dtype, device=X.device)
    return c * (h - (W * W).sum() * eye)


def logits_S(X: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """h(S): X (m, T, d), S (d, d) symmetric -> (m, T, T), ``(X S X^T - I Tr S)/sqrt(d)``."""
    d = S.shape[0]
    T = X.shape[-2]
    h = (X @ S) @ X.transpose(-1, -2)
    eye = torch.eye(T, dtype=X.dtype, device=X.device)
    return (h - torch.diagonal(S).sum() * eye) / math.sqrt(d)


def seq2lab_loss(yhat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sum over the batch of ||y - yhat||_F^2; yhat, y (m, T, T)."""
    return ((y - yhat) ** 2).sum()


def seq2seq_loss(
    yhat: torch.Tensor, y: torch.Tensor, gram: torch.Tensor, cross: torch.Tensor, sq: torch.Tensor
) -> torch.Tensor:
    """sum over the batch of (1/d)||y X + E - yhat X||_F^2 = tr(D G D^T) + 2 tr(D C) + ||E||^2/d.

    D = y - yhat (m, T, T); G = X X^T/d (m, T, T); C = X E^T/d (m, T, T); sq = ||E||^2/d (m,).
    """
    D = y - yhat
    return ((D @ gram) * D).sum() + 2.0 * (D * cross.transpose(-1, -2)).sum() + sq.sum()


@dataclass
class TorchData:
    """A :class:`Dataset` moved to a torch device/dtype, split into chunks of sequences."""

    X: torch.Tensor
    y: torch.Tensor
    gram: torch.Tensor | None
    cross: torch.Tensor | None
    sq: torch.Tensor | None
    chunk: int
    source: Dataset

    @classmethod
    def from_dataset(
        cls,
        data: Dataset,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float64,
        chunk: int | None = None,
    ) -> TorchData:
        dev = resolve_device(device)

        def t(a: np.ndarray | None) -> torch.Tensor | None:
            return None if a is None else torch.as_tensor(a, dtype=dtype, device=dev)

        return cls(
            X=t(data.X), y=t(data.y), gram=t(data.gram), cross=t(data.out_cross), sq=t(data.out_sq),
            chunk=int(chunk) if chunk else default_chunk(data.T, data.d), source=data,
        )

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[2]

    @property
    def device(self) -> torch.device:
        return self.X.device

    @property
    def dtype(self) -> torch.dtype:
        return self.X.dtype

    def chunks(self):
        """Yield (X, y, gram, cross, sq) slices of at most ``chunk`` sequences."""
        for lo in range(0, self.n, self.chunk):
            hi = min(self.n, lo + self.chunk)
            sl = slice(lo, hi)
            yield (
                self.X[sl], self.y[sl],
                None if self.gram is None else self.gram[sl],
                None if self.cross is None else self.cross[sl],
                None if self.sq is None else self.sq[sl],
            )


class Objective:
    """The normalised objective F = (data sum + penalty)/d^2 of a problem on a dataset.

    Methods evaluate the data term chunk by chunk (backward per chunk, so the memory is one chunk's).
    """

    def __init__(self, problem: Problem, data: TorchData):
        self.problem = problem
        self.data = data
        self.d = data.d
        self.n = data.n
        self.beta = problem.student.beta
        self.lam = problem.student.lam
        self.seq2seq = problem.task.task == "seq2seq"

    # data term ---------------------------------------------------------------------------------
    def _batch_loss(self, h: torch.Tensor, y, gram, cross, sq) -> torch.Tensor:
        yhat = torch.softmax(self.beta * h, dim=-1)
        if self.seq2seq:
            return seq2seq_loss(yhat, y, gram, cross, sq)
        return seq2lab_loss(yhat, y)

    def data_sum(self, logit_fn, param: torch.Tensor, backward: bool) -> torch.Tensor:
        """sum_mu loss_mu / d^2 (a 0-d tensor, detached); with ``backward`` accumulates param.grad."""
        total = torch.zeros((), dtype=self.data.dtype, device=self.data.device)
        scale = 1.0 / self.d**2
        for X, y, gram, cross, sq in self.data.chunks():
            if backward:
                loss = self._batch_loss(logit_fn(X, param), y, gram, cross, sq) * scale
                loss.backward()
            else:
                with torch.no_grad():
                    loss = self._batch_loss(logit_fn(X, param), y, gram, cross, sq) * scale
            total = total + loss.detach()
        return total

    # penalties (normalised by d^2) ---------------------------------------------------------------
    def penalty_W(self, W: torch.Tensor) -> torch.Tensor:
        """lam sqrt(d/p) ||W||^2 / d^2 = lam (1/d) Tr S_W."""
        p = W.shape[0]
        return self.lam * math.sqrt(self.d / p) * (W * W).sum() / self.d**2

    def penalty_trace(self, S: torch.Tensor) -> torch.Tensor:
        """lam (1/d) Tr S."""
        return self.lam * torch.diagonal(S).sum() / self.d

    def penalty_ridge(self, S: torch.Tensor) -> torch.Tensor:
        """lam d ||S||_F^2 / d^2 = lam (1/d) ||S||_F^2."""
        return self.lam * (S * S).sum() / self.d

    def penalty_S(self, S: torch.Tensor) -> torch.Tensor:
        """The student's penalty as a function of S: the trace (factorised) or the ridge (direct)."""
        return self.penalty_trace(S) if self.problem.student.model == "factorized" else self.penalty_ridge(S)

    # full objectives, setting .grad -------------------------------------------------------------
    def value_grad_W(self, W: torch.Tensor) -> float:
        """F(W); sets W.grad (zeroed first)."""
        W.grad = None
        data = self.data_sum(logits_W, W, backward=True)
        pen = self.penalty_W(W)
        pen.backward()
        return float(data + pen.detach())

    def value_grad_A(self, A: torch.Tensor) -> float:
        """Direct model F(S) with S = sym(A); sets A.grad."""
        A.grad = None
        data = self.data_sum(lambda X, a: logits_S(X, sym(a)), A, backward=True)
        pen = self.penalty_ridge(sym(A))
        pen.backward()
        return float(data + pen.detach())

    def smooth_S(self, S: torch.Tensor, grad: bool = True) -> tuple[float, torch.Tensor | None]:
        """Smooth part f(S) = data/d^2 and its gradient on symmetric matrices (symmetrised), for prox."""
        if not grad:
            return float(self.data_sum(logits_S, S, backward=False)), None
        Sl = S.detach().clone().requires_grad_(True)
        val = self.data_sum(logits_S, Sl, backward=True)
        return float(val), sym(Sl.grad)

    # on S through the logits (the proximal solver) ------------------------------------------------
    def logits_all(self, S: torch.Tensor) -> torch.Tensor:
        """h(S) for all n sequences, (n, T, T), computed chunk by chunk (no grad)."""
        with torch.no_grad():
            return torch.cat([logits_S(X, S) for X, *_ in self.data.chunks()])

    def loss_of_logits(self, H: torch.Tensor, grad: bool = True) -> tuple[float, torch.Tensor | None]:
        """data sum / d^2 as a function of all logits H (n, T, T), and its gradient dF/dH (n, T, T)."""
        td = self.data
        if not grad:
            with torch.no_grad():
                return float(self._batch_loss(H, td.y, td.gram, td.cross, td.sq)) / self.d**2, None
        Hl = H.detach().requires_grad_(True)
        val = self._batch_loss(Hl, td.y, td.gram, td.cross, td.sq) / self.d**2
        (G,) = torch.autograd.grad(val, Hl)
        return float(val.detach()), G

    def grad_S_of(self, G: torch.Tensor) -> torch.Tensor:
        """Gradient on symmetric S of F(h(S)) given G = dF/dH: sym(sum_mu X^T G X)/sqrt(d) - (sum tr G)/sqrt(d) I."""
        d = self.d
        out = torch.zeros((d, d), dtype=G.dtype, device=G.device)
        lo = 0
        for X, *_ in self.data.chunks():
            m = X.shape[0]
            Gc = G[lo : lo + m]
            lo += m
            out += X.reshape(-1, d).T @ (Gc @ X).reshape(-1, d)
        out = sym(out)
        out -= torch.diagonal(G, dim1=-2, dim2=-1).sum() * torch.eye(d, dtype=G.dtype, device=G.device)
        return out / math.sqrt(d)

    def data_only(self, S: torch.Tensor) -> float:
        """data sum / d^2 at a symmetric S (no grad)."""
        return float(self.data_sum(logits_S, S, backward=False))
