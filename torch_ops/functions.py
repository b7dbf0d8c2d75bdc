"""``torch.autograd.Function``s running the NKI kernels, as in the NKI guide's ``NkiAddFunc``.

The classic eager building blocks, on the forward and backward of the ops declared in
:mod:`nki_kernels.ops` (the same launches as ``torch.ops.nki.*``). ``torch.compile``
cannot trace into a simulator launch, so compiled models use the custom ops instead
(the functional wrappers and ``RMSNorm`` do).
"""

from __future__ import annotations

import torch

import nki_kernels.ops as declared

from . import checks


class NkiAddFunc(torch.autograd.Function):
    """``a + b`` with the NKI add kernel; the gradient passes to both inputs unchanged."""

    @staticmethod
    def forward(ctx, a, b):
        """Check the arguments, then launch the add kernel."""
        checks.check_add(a, b)
        if a.numel() == 0:
            return a + b
        (c,) = declared.tensor_add_op.run_forward([a, b], {})
        return c

    @staticmethod
    def backward(ctx, dy):
        """``d(a + b)/da = d(a + b)/db = 1``."""
        return dy, dy


class NkiRMSNormFunc(torch.autograd.Function):
    """RMSNorm over the last axis with the NKI forward and backward kernels.

    ``NkiRMSNormFunc.apply(x, weight, eps)``; ``eps`` gets no gradient. The
    forward saves the per-row ``rstd`` (float32) so the backward kernel does
    not recompute the statistics.
    """

    @staticmethod
    def forward(ctx, x, weight, eps):
        """Check the arguments, then launch the forward kernel."""
        checks.check_rms_norm(x, weight, eps)
        if x.numel() == 0:
            ctx.save_for_backward(x, weight, None)
            return torch.empty_like(x)
        y, rstd = declared.rms_norm_op.run_forward([x, weight], {"eps": float(eps)})
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        """Launch the backward kernel; returns ``(dx, dweight, None)``."""
        x, weight, rstd = ctx.saved_tensors
        if rstd is None:
            return torch.zeros_like(x), torch.zeros_like(weight), None
        dx, dw = declared.rms_norm_op.run_backward([x, weight, rstd], [dy, None], {})
        return (dx if ctx.needs_input_grad[0] else None,
                dw.to(weight.dtype) if ctx.needs_input_grad[1] else None, None)
