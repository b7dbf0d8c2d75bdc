"""nki-ops kernels: NKI kernels in the official language and their public callers.

The callers reshape any-rank inputs to the kernels' 2-D layout, pick the SPMD
grid and launch. They are framework-neutral: with NumPy arrays the kernel runs
on the simulator (or real hardware through ``neuronxcc``), with JAX arrays it
becomes a ``jax_ops.nki_call``, with torch tensors a ``torch_ops.nki_call``.
"""

from __future__ import annotations

import math

from . import validation as _v
from .add import add_grid, tensor_add_kernel
from .simulator import launch as _launch
from .op import Op, Rows, op
from . import ops as _ops  # the package's declared ops (nki::tensor_add, nki::rms_norm)
from .rmsnorm import rms_norm_bwd_kernel, rms_norm_fwd_kernel, row_grid
from .neuron_env import NeuronEnvironment, neuron_environment
from .library.ops import cross_entropy, flash_attention, residual_rms_norm, softmax

ADD_DTYPES = ("float32", "bfloat16", "float16", "int32", "int16", "int8", "uint8")

# Kernels called with a framework's arrays go to its adapter, imported on first sight of one.
for _array_module, _adapter in (("jax", "jax_ops"), ("jaxlib", "jax_ops"), ("torch", "torch_ops")):
    _launch.register_adapter_module(_array_module, _adapter)

__all__ = ["softmax", "cross_entropy", "residual_rms_norm", "flash_attention", "neuron_environment", "NeuronEnvironment", "tensor_add", "rms_norm", "rms_norm_backward", "tensor_add_kernel", "rms_norm_fwd_kernel",
           "rms_norm_bwd_kernel", "add_grid", "row_grid"]


def tensor_add(a, b):
    """Element-wise ``a + b`` of two equal-shape, equal-dtype arrays with the NKI add kernel."""
    _v.require_array(a, "a")
    _v.require_array(b, "b")
    _v.require_same(a, b, "a", "b")
    _v.require_dtype(a, "a", ADD_DTYPES)
    if math.prod(a.shape) == 0:
        return a + b
    (out,) = _ops.tensor_add_op.run_forward([a, b], {})
    return out


def _check_rms_norm(x, weight, eps):
    _v.require_rmsnorm_args(x, weight, eps)
    if _v.dtype_name(weight) != _v.dtype_name(x):
        raise TypeError(f"weight has dtype {_v.dtype_name(weight)} but x has dtype {_v.dtype_name(x)}; "
                        "they must be equal")


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last axis: ``x * rsqrt(mean(x**2, -1) + eps) * weight``, in x's dtype."""
    _check_rms_norm(x, weight, eps)
    if math.prod(x.shape) == 0:
        return x * 1
    y, _ = _ops.rms_norm_op.run_forward([x, weight], {"eps": float(eps)})
    return y


def rms_norm_backward(dy, x, weight, eps=1e-6):
    """Gradients ``(dx, dweight)`` of :func:`rms_norm` for the upstream gradient ``dy``."""
    _check_rms_norm(x, weight, eps)
    _v.require_array(dy, "dy")
    _v.require_same(dy, x, "dy", "x")
    op = _ops.rms_norm_op
    _, rstd = op.run_forward([x, weight], {"eps": float(eps)})
    dx, dw = op.run_backward([x, weight, rstd], [dy, None], {})
    dw = dw.astype(weight.dtype) if hasattr(dw, "astype") else dw.to(weight.dtype)
    return dx.reshape(tuple(x.shape)), dw
