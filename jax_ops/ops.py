"""Differentiable NKI operators: ``add`` and ``rms_norm`` as ``jax.custom_vjp`` functions.

Arguments are checked at trace time (errors name the argument); the forward
and backward passes are the NKI kernels behind the outer primitives of
:mod:`jax_ops.rmsnorm_prims` / :mod:`jax_ops.add_prims`, so ``jit``, ``grad``,
``vmap``, ``checkpoint`` and sharding all compose.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from nki_kernels import ADD_DTYPES
from nki_kernels import validation as v

from .add_prims import add_p
from .primitive import match_vma
from .rmsnorm_prims import rms_norm_bwd_p, rms_norm_fwd_p


# --- add ---------------------------------------------------------------------------------------

@jax.custom_vjp
def _add(a, b):
    return add_p.bind(a, b)[0]


def _add_fwd(a, b):
    return _add(a, b), None


def _add_bwd(_, g):
    return g, g


_add.defvjp(_add_fwd, _add_bwd)


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
    if not shape:
        return _add(a.reshape(1), b.reshape(1)).reshape(())
    return _add(a, b)


# --- rms_norm ------------------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm(x, weight, eps):
    return rms_norm_fwd_p.bind(x, weight, eps=eps, with_rstd=False)[0]


def _rms_norm_fwd(x, weight, eps):
    y, rstd = rms_norm_fwd_p.bind(x, weight, eps=eps, with_rstd=True)
    return y, (x, weight, rstd)


def _rms_norm_bwd(eps, res, dy):
    x, weight, rstd = res
    dx, dw = rms_norm_bwd_p.bind(dy, x, weight, rstd, batch_dims=0)
    return dx, dw


_rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


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
    return _rms_norm(x, weight, float(eps))
