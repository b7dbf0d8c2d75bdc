"""``nki_call``: one launch of an ``@nki.jit`` kernel as a JAX primitive.

The primitive's parameters are the kernel object, the SPMD grid and the static
(non-tensor) keyword arguments; its operands are the kernel's tensor inputs in
order and its results the kernel's outputs. Output shapes come from tracing
the kernel's first program on zero inputs (``eval_shape``), or from a user
``out_shape``, which is checked against the kernel when both are available.
Lowerings live in :mod:`jax_ops.lowering`. A genuine Neuron kernel never becomes
this primitive: ``nki_call`` hands it to its SDK's entry point (:mod:`jax_ops.neuron_sdk`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax import lax
from jax import core as jcore
from jax._src import core as _core
from jax._src import dispatch
from jax.extend import core
from jax.interpreters import ad, batching

from nki_kernels import custom_call as cc
from nki_kernels.simulator import ShapeDtype, is_kernel
from nki_kernels.simulator.launch import Launch, eval_shape, normalize_grid, register_array_dispatch, split_arguments

from . import neuron_sdk

nki_call_p = core.Primitive("nki_call")
nki_call_p.multiple_results = True


def _kernel_and_grid(kernel, grid):
    """Accept ``kernel`` or ``kernel[grid]``; return the kernel object and a tuple grid."""
    if not is_kernel(kernel):
        name = getattr(kernel, "__qualname__", type(kernel).__name__)
        raise TypeError(f"nki_call: kernel must be an @nki.jit kernel (or kernel[grid]), got {name!r} "
                        f"of type {type(kernel).__name__}; decorate the function with @nki.jit")
    if isinstance(kernel, Launch):
        if grid is not None and tuple(grid) != kernel.grid:
            raise ValueError(f"nki_call: grid={grid} given for kernel[{kernel.grid}]; give the grid once")
        kernel, grid = kernel.kernel, kernel.grid
    return kernel, normalize_grid(grid)


def _freeze(value, name):
    """Static arguments become hashable primitive parameters (lists -> tuples)."""
    try:
        cc._plain(value)  # must also fit the custom-call payload
    except TypeError as exc:
        raise TypeError(f"nki_call: static argument {name!r}: {exc}") from None
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, name) for v in value)
    if isinstance(value, dict):
        raise TypeError(f"nki_call: static argument {name!r} is a dict; pass tuples or scalars")
    return value.item() if isinstance(value, np.generic) else value


def _spec(x):
    return (tuple(int(d) for d in x.shape), np.dtype(x.dtype))


def _norm_out_shape(out_shape):
    """``out_shape`` as ``(single, ((shape, dtype), ...))``; None stays None."""
    if out_shape is None:
        return None
    if hasattr(out_shape, "shape") and hasattr(out_shape, "dtype"):
        return True, (_spec(out_shape),)
    if isinstance(out_shape, (tuple, list)) and all(hasattr(o, "shape") and hasattr(o, "dtype") for o in out_shape):
        return False, tuple(_spec(o) for o in out_shape)
    raise TypeError("nki_call: out_shape must be a jax.ShapeDtypeStruct (or anything with .shape/.dtype) "
                    f"or a tuple of them, got {out_shape!r}")


def _fmt(specs):
    return ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in specs)


@functools.lru_cache(maxsize=512)
def infer_outputs(kernel, grid, in_specs, static, out_shape):
    """``(single, ((shape, dtype), ...))`` of a launch: from the kernel, checked against ``out_shape``."""
    specs = [ShapeDtype(s, d) for s, d in in_specs]
    got = eval_shape(kernel, grid, *specs, **dict(static))
    single = isinstance(got, ShapeDtype)
    derived = (single, tuple(_spec(g) for g in ((got,) if single else got)))
    if out_shape is not None and out_shape != derived:
        raise ValueError(
            f"nki_call: out_shape ({_fmt(out_shape[1])}) disagrees with kernel "
            f"{kernel.func.__qualname__}, which returns ({_fmt(derived[1])})"
            + ("" if out_shape[0] == derived[0] else
               "; it returns " + ("a single array" if derived[0] else "a tuple")))
    return derived


def nki_call(kernel, *args, grid=None, out_shape=None, **static) -> Any:
    """Call an ``@nki.jit`` kernel on JAX arrays as the ``nki_call`` primitive.

    ``args`` are the kernel's tensor inputs (in parameter order); ``static``
    keywords are its non-tensor parameters (Python scalars, strings, tuples).
    ``grid`` is the SPMD launch grid (int or tuple; ``None`` = one program);
    ``kernel[grid]`` may be passed instead of ``kernel`` and ``grid``.
    ``out_shape`` (a ``jax.ShapeDtypeStruct`` or tuple of them) is optional:
    the output shapes are derived from the kernel, and an ``out_shape`` that
    disagrees is a ``ValueError``. Returns an array, or a tuple when the
    kernel returns several. Works under ``jit``, ``vmap`` (one launch per batch
    element), sharding and on CPU (simulator behind the custom-call).
    """
    path = neuron_sdk.route(kernel)
    if path != neuron_sdk.SIMULATOR:  # a Neuron SDK kernel: that SDK's own entry point
        return neuron_sdk.launch(path, kernel, grid, args, static, out_shape=out_shape)
    kernel, grid = _kernel_and_grid(kernel, grid)
    names = _tensor_param_names(kernel, len(args))
    for a, name in zip(args, names):
        if not (hasattr(a, "shape") and hasattr(a, "dtype")) or isinstance(a, (np.generic, bool, int, float)):
            raise TypeError(f"nki_call: tensor argument {name!r} of {kernel.func.__qualname__} is a "
                            f"{type(a).__name__}; pass arrays positionally and scalars as keywords")
    args = match_vma(*[jax.numpy.asarray(a) for a in args])
    frozen = tuple(sorted((k, _freeze(v, k)) for k, v in static.items()))
    single, outs = infer_outputs(kernel, grid, tuple(_spec(a) for a in args), frozen, _norm_out_shape(out_shape))
    results = nki_call_p.bind(*args, kernel=kernel, grid=grid, static=frozen, out_specs=outs)
    return results[0] if single else tuple(results)


def _tensor_param_names(kernel, n):
    params = [p.name for p in kernel.signature.parameters.values()]
    return (params + [f"arg{i}" for i in range(len(params), n)])[:n]


def out_aval(like, shape, dtype, spec=None):
    """An output aval that inherits ``like``'s mesh and varying manual axes (for shard_map).

    ``spec`` is the output's partition spec under explicit sharding (default replicated).
    """
    shape = tuple(shape)
    if like is None:
        return jcore.ShapedArray(shape, dtype)
    spec = (None,) * len(shape) if spec is None else tuple(spec)
    sharding = like.sharding.update(spec=jax.sharding.PartitionSpec(*spec))
    return like.update(shape=shape, dtype=np.dtype(dtype), weak_type=False, sharding=sharding)


def match_vma(*args):
    """Make arguments vary over the same shard_map axes (inserting ``pvary``) before a bind.

    Outside shard_map this is the identity. Done outside ``custom_vjp`` functions, the
    transpose of the inserted ``pvary`` is the ``psum`` an invariant operand's gradient needs.
    """
    insert = getattr(_core, "auto_insert_reshard", None)
    return list(insert(*args)) if insert is not None and args else list(args)


@nki_call_p.def_abstract_eval
def _abstract_eval(*avals, kernel, grid, static, out_specs):
    like = avals[0] if avals else None
    return [out_aval(like, s, d) for s, d in out_specs]


def _impl(*args, **params):
    return dispatch.apply_primitive(nki_call_p, *args, **params)


nki_call_p.def_impl(_impl)


def _batch(args, dims, **params):
    """Generic vmap: one launch per batch element (``lax.map``); row-wise ops fold instead."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    mapped = [i for i, d in enumerate(dims) if d is not None]
    xs = tuple(jax.numpy.moveaxis(args[i], dims[i], 0) for i in mapped)

    def one(slices):
        full = list(args)
        for i, s in zip(mapped, slices):
            full[i] = s
        return tuple(nki_call_p.bind(*full, **params))

    outs = lax.map(one, xs) if size else tuple(
        jax.numpy.zeros((0, *s), d) for s, d in params["out_specs"])
    return list(outs), [0] * len(outs)


batching.primitive_batchers[nki_call_p] = _batch


def _no_jvp(primals, tangents, *, kernel, **_):
    raise TypeError(
        f"nki_call of {kernel.func.__qualname__} has no derivative rule: declare a differentiable op "
        "with nki_kernels.op(name, forward=..., backward=...) (or wrap it in jax.custom_vjp), or apply "
        "lax.stop_gradient to its inputs")


ad.primitive_jvps[nki_call_p] = _no_jvp


def _take_launch(launch, args, kwargs):
    """``kernel[grid](*jax_arrays)``: the launch as ``nki_call`` (registered with the simulator)."""
    tensors, static = split_arguments(launch, args, kwargs)
    return nki_call(launch.kernel, *tensors, grid=launch.grid, **static)


register_array_dispatch(lambda v: isinstance(v, jax.Array), _take_launch)  # tracers are jax.Arrays too
