"""Functional entry points ``add`` and ``rms_norm``: checked, differentiable, ``torch.compile``-able.

They call the ``torch.library`` ops, so the same code runs eagerly and inside
``torch.compile(fullgraph=True)``. The checks run first, on metadata only, so
a bad call fails with a message naming the argument before any kernel runs
(and before any graph is compiled).
"""

from __future__ import annotations

import torch

from . import checks
from . import library  # noqa: F401 - registers torch.ops.nki.*


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise ``a + b`` of equal-shape, equal-dtype tensors with the NKI add kernel.

    float32 / bfloat16 / float16 (differentiable) and int32 / int16 / int8 / uint8.
    """
    checks.check_add(a, b)
    return torch.ops.nki.tensor_add(a, b)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last axis: ``x * rsqrt(mean(x**2, -1) + eps) * weight``, in ``x.dtype``.

    ``weight`` is 1-D of length ``x.shape[-1]`` with ``x``'s dtype (float32,
    bfloat16 or float16); statistics are accumulated in float32.
    """
    checks.check_rms_norm(x, weight, eps)
    return torch.ops.nki.rms_norm(x, weight, float(eps))[0]
