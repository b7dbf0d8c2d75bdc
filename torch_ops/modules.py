"""``RMSNorm``: a drop-in for ``torch.nn.RMSNorm`` (over the last dimension) on the NKI kernels."""

from __future__ import annotations

import numbers

import torch
from torch import nn

from .functional import rms_norm


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, ``y = x * rsqrt(mean(x**2, -1) + eps) * weight``.

    Same constructor, attributes (``normalized_shape``, ``eps``,
    ``elementwise_affine``, ``weight``) and ``state_dict`` as
    ``torch.nn.RMSNorm``, so checkpoints load either way. Differences: the
    default ``eps`` is ``1e-6`` (``None`` means ``torch.finfo(x.dtype).eps``,
    as in torch), ``normalized_shape`` must name one dimension, and the input
    must have the weight's dtype (float32, bfloat16 or float16).
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps: float | None = 1e-6, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        if len(self.normalized_shape) != 1:
            raise ValueError(f"normalized_shape {self.normalized_shape}: torch_ops.RMSNorm normalises over "
                             "the last dimension only; give one size")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    @classmethod
    def from_torch(cls, module: nn.RMSNorm) -> "RMSNorm":
        """A ``torch_ops.RMSNorm`` with the configuration and weights of a ``torch.nn.RMSNorm``."""
        w = module.weight
        new = cls(module.normalized_shape, module.eps, module.elementwise_affine,
                  device=None if w is None else w.device, dtype=None if w is None else w.dtype)
        new.load_state_dict(module.state_dict())
        return new

    def reset_parameters(self) -> None:
        """Weight to ones, as in ``torch.nn.RMSNorm``."""
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` (``[..., normalized_shape[0]]``) with the NKI kernel."""
        if x.dim() < 1 or x.shape[-1] != self.normalized_shape[0]:
            raise ValueError(f"x has shape {tuple(x.shape)} but this RMSNorm normalises a last dimension "
                             f"of size {self.normalized_shape[0]}")
        weight = self.weight
        if weight is None:
            weight = torch.ones(self.normalized_shape, dtype=x.dtype, device=x.device)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return rms_norm(x, weight, eps)

    def extra_repr(self) -> str:
        """``normalized_shape, eps=..., elementwise_affine=...`` as in ``torch.nn.RMSNorm``."""
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)
