"""``torch.library`` custom ops ``nki::tensor_add``, ``nki::rms_norm``, ``nki::rms_norm_backward``.

Custom ops are opaque to ``torch.compile``: Dynamo puts one node per call in
the graph (no graph break), the fake kernels give AOTAutograd the output
metadata without running the simulator, and the registered autograd formula
makes the backward graph call ``nki::rms_norm_backward``. The real kernels run
the same launches as the autograd Functions (:mod:`torch_ops.kernels`), on
whatever device the tensors are (CPU simulator, XLA custom-call, ...).

``nki::call(payload, operands)`` is the generic launch of any kernel that
``torch_ops.nki_call`` records while compiling (see :mod:`torch_ops.traced`).

``nki::rms_norm`` returns ``(y, rstd)``: the float32 per-row reciprocal RMS
(shape ``x.shape[:-1] + (1,)``) is an output rather than hidden state so the
backward can reuse it inside a compiled graph; ``torch_ops.rms_norm`` returns
only ``y``.
"""

from __future__ import annotations

import torch

from nki_kernels.custom_call import decode_payload, resolve_kernel

from . import checks, kernels


@torch.library.custom_op("nki::tensor_add", mutates_args=())
def tensor_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` with the NKI add kernel (equal shapes and dtypes)."""
    checks.check_add(a, b)
    return kernels.add_forward(a, b)


@tensor_add.register_fake
def _tensor_add_fake(a, b):
    checks.check_add(a, b)
    return a.new_empty(a.shape)


def _tensor_add_backward(ctx, dy):
    return dy, dy


tensor_add.register_autograd(_tensor_add_backward)


@torch.library.custom_op("nki::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last axis of ``x``; returns ``(y, rstd)``."""
    checks.check_rms_norm(x, weight, eps)
    return kernels.rms_norm_forward(x, weight, eps, want_rstd=True)


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps):
    checks.check_rms_norm(x, weight, eps)
    return x.new_empty(x.shape), x.new_empty(kernels.rstd_shape(x), dtype=torch.float32)


def _rms_norm_setup(ctx, inputs, output):
    x, weight, _ = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    # rstd is almost never used downstream: let its gradient arrive as None rather
    # than as zeros that the backward would then multiply through a whole [N, D] pass.
    ctx.set_materialize_grads(False)


def _rms_norm_backward(ctx, dy, drstd):
    x, weight, rstd = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(x)
    dx, dw = torch.ops.nki.rms_norm_backward(dy, x, weight, rstd)
    if drstd is not None:
        # rstd is meant as a residual, but a gradient through it is still correct:
        # d rstd / dx = -rstd**3 * x / D.
        extra = drstd * (rstd ** 3) * x.to(torch.float32) / x.shape[-1]
        dx = dx - extra.to(dx.dtype)
    return dx, dw, None


rms_norm.register_autograd(_rms_norm_backward, setup_context=_rms_norm_setup)


@torch.library.custom_op("nki::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx, dweight)`` of RMSNorm with the NKI backward kernel (not itself differentiable)."""
    checks.check_rms_norm_backward(dy, x, weight, rstd)
    return kernels.rms_norm_backward(dy, x, weight, rstd)


@rms_norm_backward.register_fake
def _rms_norm_backward_fake(dy, x, weight, rstd):
    checks.check_rms_norm_backward(dy, x, weight, rstd)
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


@torch.library.custom_op("nki::call", mutates_args=())
def call(payload: str, operands: list[torch.Tensor]) -> list[torch.Tensor]:
    """Launch the kernel a custom-call ``payload`` names on ``operands`` (not differentiable)."""
    from .dispatch import nki_call

    p = decode_payload(payload)
    out = nki_call(resolve_kernel(p), *operands, grid=tuple(p["grid"]), **p["static"])
    return list(out) if isinstance(out, tuple) else [out]


@call.register_fake
def _call_fake(payload, operands):
    # Payload dtype names are NumPy/ml_dtypes names, which torch shares (bfloat16, float8_e4m3fn, ...).
    return [torch.empty(r["shape"], dtype=getattr(torch, r["dtype"]), device=operands[0].device)
            for r in decode_payload(payload)["results"]]
