"""The kernel launches behind every torch operator: layout to 2-D, grid, ``nki_call``, layout back.

Shared by the autograd Functions and the ``torch.library`` ops so both run
exactly the same launches. Inputs must already be checked (:mod:`torch_ops.checks`).
Reshapes here are views whenever the input strides allow it; a copy happens
only for inputs that cannot be viewed as 2-D (the simulator reads strided
2-D views directly).
"""

from __future__ import annotations

import torch

from nki_kernels.add import TILE_F, add_grid, tensor_add_kernel
from nki_kernels.rmsnorm import rms_norm_bwd_kernel, rms_norm_fwd_kernel, row_grid

from .dispatch import nki_call


def _add_layout(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """The 2-D shape the add kernel sees. Element-wise, so any 2-D view works: a contiguous
    pair with a narrow last axis is viewed as full 512-wide rows (fewer, fuller tiles)."""
    n = a.numel()
    last = a.shape[-1] if a.dim() else 1
    if last < TILE_F and n % TILE_F == 0 and a.is_contiguous() and b.is_contiguous():
        return (n // TILE_F, TILE_F)
    return (n // last, last)


def add_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` with the NKI add kernel (equal shapes and dtypes, any rank)."""
    if a.numel() == 0:
        return torch.empty(a.shape, dtype=a.dtype, device=a.device)
    shape2 = _add_layout(a, b)
    out = nki_call(tensor_add_kernel, a.reshape(shape2), b.reshape(shape2), grid=add_grid(shape2))
    return out.reshape(a.shape)


def rstd_shape(x: torch.Tensor) -> tuple:
    """Shape of the per-row reciprocal RMS saved by the forward: ``x.shape[:-1] + (1,)``."""
    return tuple(x.shape[:-1]) + (1,)


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float, want_rstd: bool = True):
    """RMSNorm over the last axis; returns ``(y, rstd)`` (``rstd`` is None unless ``want_rstd``)."""
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    n = x2.shape[0]
    if n == 0:
        rstd = torch.empty(rstd_shape(x), dtype=torch.float32, device=x.device) if want_rstd else None
        return torch.empty(x.shape, dtype=x.dtype, device=x.device), rstd
    out = nki_call(rms_norm_fwd_kernel, x2, weight.contiguous(), grid=row_grid(n),
                   eps=float(eps), return_rstd=bool(want_rstd))
    if want_rstd:
        y, rstd = out
        return y.reshape(x.shape), rstd.reshape(rstd_shape(x))
    return out.reshape(x.shape), None


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor):
    """``(dx, dweight)`` of RMSNorm from the upstream ``dy`` and the forward's ``rstd``.

    The kernel writes one float32 partial ``dweight`` per program; summing them
    here (one small reduction) keeps the kernel free of cross-program traffic.
    """
    d = x.shape[-1]
    if dy.dtype != x.dtype:  # e.g. a float32 upstream gradient under mixed precision
        dy = dy.to(x.dtype)
    x2 = x.reshape(-1, d)
    n = x2.shape[0]
    if n == 0:
        return torch.zeros(x.shape, dtype=x.dtype, device=x.device), torch.zeros_like(weight)
    dx, dw_partial = nki_call(rms_norm_bwd_kernel, dy.reshape(-1, d), x2, weight.contiguous(),
                              rstd.reshape(n, 1), grid=row_grid(n))
    dw = dw_partial.sum(0)
    return dx.reshape(x.shape), dw if dw.dtype == weight.dtype else dw.to(weight.dtype)
