"""The kernel library with torch's conventions: functions and ``nn.Module`` drop-ins.

The ops are those of :mod:`nki_kernels.library.ops` (declared once with
``nki_kernels.op``: ``torch.library`` custom ops with autograd on torch tensors).
Here they take torch's argument conventions: ``softmax(x, dim)``,
``cross_entropy(input, target)`` with the class axis at dim 1 and a ``reduction``,
``flash_attention`` laid out as ``scaled_dot_product_attention``; and the modules
``Softmax`` and ``CrossEntropyLoss`` replace ``torch.nn.Softmax`` /
``torch.nn.CrossEntropyLoss`` (``torch_ops.RMSNorm`` replaces ``torch.nn.RMSNorm``).
"""

from __future__ import annotations

import torch
from torch import nn

from nki_kernels.library import ops as _lib

flash_attention = _lib.flash_attention
residual_rms_norm = _lib.residual_rms_norm

REDUCTIONS = ("mean", "sum", "none")


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax(x, dim)`` with the NKI kernels (float32 / bfloat16)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 0:
        raise ValueError("x is a 0-d tensor; softmax needs at least one dimension")
    dim = _axis(dim, x.dim(), "dim")
    last = x.dim() - 1
    if dim == last:
        return _lib.softmax(x)
    return _lib.softmax(x.movedim(dim, last)).movedim(last, dim)


def cross_entropy(input: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean") -> torch.Tensor:
    """``torch.nn.functional.cross_entropy`` with class-index targets, on the NKI kernels.

    ``input`` (C), (N, C) or (N, C, d1, ...) logits (class axis 1, as torch), ``target``
    the integer classes of matching shape without the class axis; ``reduction`` "mean"
    (over targets that are not ``ignore_index``), "sum" or "none". Class weights, label
    smoothing and probability targets are not supported.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction={reduction!r}; use one of {REDUCTIONS}")
    if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError(f"input and target must be torch.Tensors, got {type(input).__name__} and "
                        f"{type(target).__name__}")
    if target.is_floating_point():
        raise TypeError(f"target has dtype {target.dtype}: only class-index (integer) targets are supported, "
                        "not class probabilities")
    if input.dim() == 0:
        raise ValueError("input is a 0-d tensor; cross_entropy needs a class axis")
    logits = input.movedim(1, -1) if input.dim() > 2 else (input.unsqueeze(0) if input.dim() == 1 else input)
    labels = target.unsqueeze(0) if input.dim() == 1 else target
    if labels.dtype == torch.int64:  # NKI kernels take 32-bit integers (torch's class indices are int64)
        labels = labels.to(torch.int32)
    loss, _ = _lib.cross_entropy_rows(logits, labels, ignore_index=int(ignore_index))
    if reduction == "none":
        return (loss[0] if input.dim() == 1 else loss).to(input.dtype)
    total = loss.sum()
    if reduction == "sum":
        return total.to(input.dtype)
    return (total / (labels != ignore_index).sum()).to(input.dtype)


def _axis(dim, ndim, name):
    if not -ndim <= dim < ndim:
        raise IndexError(f"{name}={dim} is out of range for a tensor of {ndim} dimensions")
    return dim % ndim


class Softmax(nn.Module):
    """Drop-in for ``torch.nn.Softmax(dim)`` on the NKI softmax kernels."""

    __constants__ = ["dim"]

    def __init__(self, dim: int | None = None):
        super().__init__()
        if dim is None:
            raise ValueError("torch_ops.Softmax needs an explicit dim (torch's implicit choice is deprecated)")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax of ``x`` over ``self.dim``."""
        return softmax(x, self.dim)

    def extra_repr(self) -> str:
        """``dim=...`` as in ``torch.nn.Softmax``."""
        return f"dim={self.dim}"


class CrossEntropyLoss(nn.Module):
    """Drop-in for ``torch.nn.CrossEntropyLoss`` with class-index targets on the NKI kernels.

    Same ``ignore_index`` and ``reduction``; ``weight`` must be None and
    ``label_smoothing`` 0 (not supported: a clear error rather than a silent difference).
    """

    __constants__ = ["ignore_index", "reduction"]

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        if weight is not None:
            raise ValueError("torch_ops.CrossEntropyLoss: class weights are not supported (weight must be None)")
        if label_smoothing != 0.0:
            raise ValueError(f"torch_ops.CrossEntropyLoss: label_smoothing={label_smoothing} is not supported")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction={reduction!r}; use one of {REDUCTIONS}")
        self.ignore_index, self.reduction = int(ignore_index), reduction

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss of logits ``input`` against class indices ``target``."""
        return cross_entropy(input, target, ignore_index=self.ignore_index, reduction=self.reduction)

    def extra_repr(self) -> str:
        """``ignore_index=..., reduction=...``."""
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}"
