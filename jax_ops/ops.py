"""``add`` and ``rms_norm`` for JAX: argument checks and layout around the declared ops.

The ops themselves (``nki::tensor_add``, ``nki::rms_norm``) are declared once in
:mod:`nki_kernels.ops` with :func:`nki_kernels.op`; their JAX side
(:mod:`jax_ops.op_builder`) gives ``custom_vjp`` gradients, vmap folding into kernel
rows and row sharding. Here arguments are checked at trace time (errors name the
argument) and any-rank inputs are laid out as the 2-D rows the ops shard and fold.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from nki_kernels import ADD_DTYPES
from nki_kernels import validation as v
from nki_kernels.ops import rms_norm_op, tensor_add_op

from .op_builder import JaxOp
from .primitive import match_vma

# Called with row_dims: leading axes stay separate row axes, so each keeps its sharding.
_ADD: JaxOp = tensor_add_op.adapted("jax")
_RMS_NORM: JaxOp = rms_norm_op.adapted("jax")


def add(a, b):
    """``a + b`` with the NKI tiled add kernel; differentiable, broadcasting like ``jnp.add``.

    ``a`` and ``b`` must have the same dtype (float32, bfloat16, float16 or an
    integer type the kernel supports) and broadcast-compatible shapes; the
    gradient of a broadcast operand is summed back to its shape.
    """
    v.require_array(a, "a")
    v.require_array(b, "b")
    if v.dtype_name(a) != v.dtype_name(b):
        raise TypeError(f"a has dtype {v.dtype_name(a)} but b has dtype {v.dtype_name(b)}; they must be equal")
    v.require_dtype(a, "a", ADD_DTYPES)
    try:
        shape = jnp.broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except ValueError:
        raise ValueError(f"a has shape {tuple(a.shape)} and b has shape {tuple(b.shape)}, which do not "
                         "broadcast together") from None
    # broadcast_to's own VJP sums a broadcast operand's gradient back to its shape.
    a, b = match_vma(jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape))
    if math.prod(shape) == 0:
        return a + b  # nothing to launch
    if not shape:
        a, b = a.reshape(1), b.reshape(1)
    return _ADD.call((a, b), {}, row_dims=a.ndim - 1).reshape(shape)


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis, ``x * rsqrt(mean(x**2, -1) + eps) * weight``, with NKI kernels.

    ``x``: any shape ``(..., D)`` of float32 / bfloat16 / float16; ``weight``:
    shape ``(D,)``, same dtype; ``eps``: a static Python float (not
    differentiated). Statistics are computed in float32; the result has
    ``x``'s dtype. Gradients for ``x`` and ``weight`` come from the NKI
    backward kernel.
    """
    v.require_rmsnorm_args(x, weight, eps)
    if v.dtype_name(weight) != v.dtype_name(x):
        raise TypeError(f"weight has dtype {v.dtype_name(weight)} but x has dtype {v.dtype_name(x)}; "
                        "they must be equal")
    x, weight = match_vma(jnp.asarray(x), jnp.asarray(weight))
    if math.prod(x.shape[:-1]) == 0:
        return jnp.zeros_like(x)
    y, _ = _RMS_NORM.call((x, weight), {"eps": float(eps)}, row_dims=x.ndim - 1)
    return y
