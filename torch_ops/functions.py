"""``torch.autograd.Function``s running the NKI kernels, as in the NKI guide's ``NkiAddFunc``.

These are the classic eager building blocks. ``torch.compile`` cannot trace
into a simulator launch, so compiled models use the ``torch.library`` ops of
:mod:`torch_ops.library` instead (the functional wrappers and ``RMSNorm`` do);
both run the same launches from :mod:`torch_ops.kernels`.
"""

from __future__ import annotations

import torch

from . import checks, kernels


class NkiAddFunc(torch.autograd.Function):
    """``a + b`` with the NKI add kernel; the gradient passes to both inputs unchanged."""

    @staticmethod
    def forward(ctx, a, b):
        """Check the arguments, then launch the add kernel."""
        checks.check_add(a, b)
        return kernels.add_forward(a, b)

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
        """Check the arguments, then launch the forward kernel (with ``rstd`` only if a grad is needed)."""
        checks.check_rms_norm(x, weight, eps)
        needs_grad = any(ctx.needs_input_grad[:2])
        y, rstd = kernels.rms_norm_forward(x, weight, eps, want_rstd=needs_grad)
        if needs_grad:
            ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        """Launch the backward kernel; returns ``(dx, dweight, None)``."""
        x, weight, rstd = ctx.saved_tensors
        dx, dw = kernels.rms_norm_backward(dy, x, weight, rstd)
        return (dx if ctx.needs_input_grad[0] else None, dw if ctx.needs_input_grad[1] else None, None)
