"""The Neuron SDK's own JAX entry points for a genuine kernel, one per SDK era, and :func:`route`, which picks one.

- a simulator kernel: ``"simulator"``, our ``nki_call`` primitive (custom-call run
  by the simulator on CPU; its lowering is refused on any other platform, so our
  payload never reaches the Neuron compiler); not launched here;
- a genuine kernel, SDK <= 2.22 (``jax_neuronx`` has ``nki_call``):
  ``jax_neuronx.nki_call(kernel, *args, grid=grid, out_shape=..., **static)``;
  ``out_shape`` is derived from the kernel's simulator twin when not given;
- a genuine kernel, SDK 2.23+ (``nki_call`` removed; "call functions annotated
  with ``nki.jit`` directly"): ``kernel[grid](*args, **static)`` on the
  ``jax.Array``\\ s / tracers (:func:`nki_kernels.backend.genuine_call`, which
  refuses an SPMD grid on the standalone ``nki``, whose bracket is a core count);
  under ``vmap`` one launch per example, so the kernel never sees a batch tracer.

Below :mod:`jax_ops.primitive` (whose ``nki_call`` hands a genuine kernel to
:func:`launch`) and :mod:`jax_ops.genuine` (the launch of any kernel by its route).
"""

from __future__ import annotations

import functools

import jax
from jax import lax

from nki_kernels import backend
from nki_kernels.neuron_env import neuron_environment, probe
from nki_kernels.simulator import ShapeDtype
from nki_kernels.simulator.launch import eval_shape, normalize_grid

SIMULATOR = "simulator"


@functools.lru_cache(maxsize=1)
def jax_neuronx():
    """The genuine ``jax_neuronx`` module if it still has ``nki_call`` (SDK <= 2.22), else None."""
    mod, _ = probe("jax_neuronx")
    return mod if mod is not None and hasattr(mod, "nki_call") else None


def route(kernel) -> str:
    """``"simulator"``, ``"nki_call"`` (jax_neuronx, SDK <= 2.22) or ``"direct"`` (SDK 2.23+) for ``kernel``."""
    if not backend.is_genuine_kernel(kernel):
        return SIMULATOR
    return "nki_call" if neuron_environment().jax_nki_call and jax_neuronx() is not None else "direct"


def out_shape_of(kernel, grid, args, static):
    """``jax.ShapeDtypeStruct`` (or a tuple of them) of a genuine kernel's results, from its simulator twin."""
    specs = [ShapeDtype(tuple(a.shape), a.dtype) for a in args]
    got = eval_shape(backend.simulator_twin(kernel), grid, *specs, **static)
    if isinstance(got, ShapeDtype):
        return jax.ShapeDtypeStruct(got.shape, got.dtype)
    return tuple(jax.ShapeDtypeStruct(g.shape, g.dtype) for g in got)


def launch(path, kernel, grid, args, static, out_shape=None):
    """Launch the genuine ``kernel`` over ``grid`` on JAX ``args`` by ``path`` (``"nki_call"`` or ``"direct"``).

    ``path`` is what :func:`route` gave for ``kernel``; ``grid``, ``args``, ``static``
    and ``out_shape`` as in :func:`jax_ops.genuine.launch`. Returns what the kernel
    returns: an array or a tuple of arrays.
    """
    static = dict(static)
    kernel, grid = backend.split_launch(kernel, grid)
    grid = normalize_grid(grid)
    if path == "nki_call":
        if out_shape is None:
            out_shape = out_shape_of(kernel, grid, args, static)
        return jax_neuronx().nki_call(backend.unwrap(kernel), *args, grid=grid, out_shape=out_shape, **static)
    return _direct(kernel, grid, args, static)


def _direct(kernel, grid, args, static):
    """The 2.23+ direct call, kept out of ``vmap``: batched, it is one launch per example (``lax.map``),
    as for a simulator kernel, so the genuine kernel never sees a batch tracer."""

    @jax.custom_batching.custom_vmap
    def call(*arrays):
        return backend.genuine_call(kernel, grid, arrays, static)

    @call.def_vmap
    def _per_example(axis_size, in_batched, *arrays):
        batched = tuple(a for a, b in zip(arrays, in_batched) if b)

        def one(slices):
            it = iter(slices)
            return call(*(next(it) if b else a for a, b in zip(arrays, in_batched)))

        out = lax.map(one, batched)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return call(*args)
