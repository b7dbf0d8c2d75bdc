"""The package's differentiable ops, declared once with :func:`nki_kernels.op.op`.

- ``tensor_add_op`` (``nki::tensor_add``): ``a + b`` of equal-shape, equal-dtype arrays of
  any rank (viewed as 2-D rows for the add kernel); the gradient passes to both inputs.
- ``rms_norm_op`` (``nki::rms_norm``): RMSNorm over the last axis of ``x`` (any rank) with a
  shared ``weight``; returns ``(y, rstd)``, ``rstd`` (``x.shape[:-1] + (1,)``, float32) being
  the statistic the backward reuses (an ``aux`` output: a gradient through it is
  handled, and skipped when none flowed into it).

The functions below are written with array methods only (``reshape``, ``sum``; the array
API namespace where padding is needed), so one body serves NumPy, JAX and torch; the kernel
launches inside dispatch on the array type. ``jax_ops`` / ``torch_ops`` wrap these ops with
argument checks, broadcasting and layouts of their own.
"""

from __future__ import annotations

import math

from .add import add_grid, tensor_add_kernel
from .op import Rows, op
from .rmsnorm import P as ROWS_PER_PROGRAM
from .rmsnorm import rms_norm_bwd_kernel, rms_norm_fwd_kernel, row_grid

__all__ = ["rms_norm_op", "tensor_add_op"]


def _rows2d(x):
    """``x`` viewed as 2-D rows over its last axis (a 0-d or 1-d ``x`` is one row)."""
    last = x.shape[-1] if len(x.shape) else 1
    return x.reshape(math.prod(x.shape[:-1]) if len(x.shape) > 1 else 1, last)


def tensor_add_forward(a, b):
    """``a + b`` with the tiled add kernel, for equal shapes of any rank."""
    a2, b2 = _rows2d(a), _rows2d(b)
    return tensor_add_kernel[add_grid(a2.shape)](a2, b2).reshape(a.shape)


def tensor_add_backward(dy):
    """Both inputs get the output gradient unchanged."""
    return dy, dy


tensor_add_op = op(
    "nki::tensor_add",
    forward=tensor_add_forward,
    backward=tensor_add_backward,
    residuals=lambda inputs, outputs: (),
    partition="rows",
)


def rms_norm_forward(x, weight, eps: float = 1e-6):
    """``(y, rstd)`` of RMSNorm over the last axis of ``x`` (any rank, at least one row)."""
    d = x.shape[-1]
    lead = tuple(x.shape[:-1])
    n = math.prod(lead)
    y, rstd = rms_norm_fwd_kernel[row_grid(n)](x.reshape(n, d), weight, eps=float(eps), return_rstd=True)
    return y.reshape(x.shape), rstd.reshape(lead + (1,))


def rms_norm_backward(x, weight, rstd, dy, drstd, segments=None):
    """``(dx, dweight)`` from the residuals ``(x, weight, rstd)`` and the gradients of ``y``
    and of ``rstd`` (usually None: nothing uses it but the backward).

    ``dweight`` is the float32 sum of the kernel's per-program partials (the op rounds it to
    the weight's dtype after any cross-shard sum). With ``segments`` (vmapped examples folded
    into the rows) it is one sum per example, of shape ``(segments, D)``: each example's rows
    are padded to whole 128-row programs so that no program mixes two examples.
    """
    d = x.shape[-1]
    n = math.prod(x.shape[:-1])
    if drstd is not None:  # d rstd / dx = -rstd**3 * x / D; the op rounds dx to x's dtype
        dx, dw = rms_norm_backward(x, weight, rstd, dy, None, segments)
        return dx - drstd * rstd ** 3 * x / d, dw
    if not segments:
        dx, dw_partial = rms_norm_bwd_kernel[row_grid(n)](dy.reshape(n, d), x.reshape(n, d), weight,
                                                          rstd.reshape(n, 1))
        return dx.reshape(x.shape), dw_partial.sum(0)
    r = n // segments
    rp = -(-r // ROWS_PER_PROGRAM) * ROWS_PER_PROGRAM
    dy3, x3, rs3 = dy.reshape(segments, r, d), x.reshape(segments, r, d), rstd.reshape(segments, r, 1)
    if rp != r:  # padded rows: dy = 0 contributes nothing; rstd = 1 keeps them finite
        xp = x.__array_namespace__()
        dy3, x3 = (xp.concat([t, xp.zeros((segments, rp - r, d), dtype=t.dtype)], axis=1) for t in (dy3, x3))
        rs3 = xp.concat([rs3, xp.ones((segments, rp - r, 1), dtype=rs3.dtype)], axis=1)
    dx2, dw_partial = rms_norm_bwd_kernel[row_grid(segments * rp)](
        dy3.reshape(segments * rp, d), x3.reshape(segments * rp, d), weight, rs3.reshape(segments * rp, 1))
    dx = dx2.reshape(segments, rp, d)[:, :r].reshape(x.shape)
    return dx, dw_partial.reshape(segments, -1, d).sum(1)


rms_norm_op = op(
    "nki::rms_norm",
    forward=rms_norm_forward,
    backward=rms_norm_backward,
    residuals=lambda inputs, outputs: (inputs[0], inputs[1], outputs[1]),
    aux=(1,),
    partition=Rows(shared=("weight",)),
)
