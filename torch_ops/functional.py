"""Functional entry points ``add`` and ``rms_norm``: checked, differentiable, ``torch.compile``-able.

They call the custom ops ``torch.ops.nki.tensor_add`` / ``torch.ops.nki.rms_norm``, declared
once in :mod:`nki_kernels.ops` with :func:`nki_kernels.op` (their torch side is
:mod:`torch_ops.op_builder`), so the same code runs eagerly and inside
``torch.compile(fullgraph=True)``. The checks run first, on metadata only, so a bad call
fails with a message naming the argument before any kernel runs (and before any graph is
compiled).
"""

from __future__ import annotations

import torch

import nki_kernels.ops as declared  # noqa: F401 - declares nki::tensor_add / nki::rms_norm

from . import checks
from . import library  # noqa: F401 - registers torch.ops.nki.call
from . import op_builder  # noqa: F401 - the torch side of nki_kernels.op

_ROW = 512  # the add kernel's free tile: a contiguous pair is viewed as full 512-wide rows

# Direct torch.ops.nki.* calls check their arguments too, before any kernel (or fake kernel) runs.
declared.tensor_add_op.adapted("torch").check_forward = checks.check_add
declared.rms_norm_op.adapted("torch").check_forward = checks.check_rms_norm
declared.rms_norm_op.adapted("torch").check_backward = checks.check_rms_norm_backward


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise ``a + b`` of equal-shape, equal-dtype tensors with the NKI add kernel.

    float32 / bfloat16 / float16 (differentiable) and int32 / int16 / int8 / uint8.
    """
    checks.check_add(a, b)
    if a.numel() == 0:
        return a + b  # nothing to launch
    n, last = a.numel(), (a.shape[-1] if a.dim() else 1)
    # Element-wise, so any 2-D view works: a narrow last axis is viewed as 512-wide rows (fewer tiles).
    if last < _ROW and n % _ROW == 0 and a.is_contiguous() and b.is_contiguous():
        a2, b2 = a.reshape(n // _ROW, _ROW), b.reshape(n // _ROW, _ROW)
    else:
        a2, b2 = a.reshape(n // last, last), b.reshape(n // last, last)
    return torch.ops.nki.tensor_add(a2, b2)[0].reshape(a.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last axis: ``x * rsqrt(mean(x**2, -1) + eps) * weight``, in ``x.dtype``.

    ``weight`` is 1-D of length ``x.shape[-1]`` with ``x``'s dtype (float32,
    bfloat16 or float16); statistics are accumulated in float32.
    """
    checks.check_rms_norm(x, weight, eps)
    if x.numel() == 0:
        return x * weight  # empty rows: an empty result, a zero weight gradient
    return torch.ops.nki.rms_norm(x, weight, float(eps))[0]
