"""Element-wise add as an outer primitive: vmap folding and sharding for the NKI add kernel.

``add_p(a, b)`` -> ``(a + b,)`` for equal shapes and dtypes (any rank >= 1);
the implementation flattens to the kernel's 2-D layout. Being element-wise,
it keeps any sharding: each device adds its own shards.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from nki_kernels.add import add_grid, tensor_add_kernel

from . import sharding as sh
from .primitive import nki_call, out_aval


def _impl(a, b):
    shape = a.shape
    if math.prod(shape) == 0:
        return (jnp.zeros(shape, a.dtype),)
    cols = shape[-1]
    a2, b2 = a.reshape(-1, cols), b.reshape(-1, cols)
    return (nki_call(tensor_add_kernel, a2, b2, grid=add_grid(a2.shape)).reshape(shape),)


def _abstract(a, b):
    return [out_aval(a, a.shape, a.dtype, tuple(a.sharding.spec))]


def _batch(args, dims):
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    a, b = (jnp.moveaxis(x, d, 0) if d is not None else jnp.broadcast_to(x, (size, *x.shape))
            for x, d in zip(args, dims))
    return add_p.bind(a, b), [0]


def _spec(arg_infos):
    # Follow the more sharded operand; the partitioner reshards the other to match.
    specs = [sh.spec_of(i, i.ndim) for i in arg_infos]
    return max(specs, key=lambda s: len(sh.axis_names(s)))


def _infer(mesh, arg_infos, result_infos):
    return (sh.named(mesh, *_spec(arg_infos)),)


def _partition(mesh, arg_infos, result_infos):
    s = sh.named(mesh, *_spec(arg_infos))
    return mesh, _impl, (s,), (s, s)


def _rule(mesh, operand_types, result_types):
    dims = " ".join(sh.factors("a", len(operand_types[0].shape)))
    return f"{dims}, {dims} -> {dims}"


add_p = sh.define_op("nki_add", impl=_impl, n_arrays=2, static=(), abstract=_abstract, batch=_batch,
                     infer=_infer, partition=_partition, rule=_rule)
