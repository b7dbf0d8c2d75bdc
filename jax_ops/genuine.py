"""The one decision point of a JAX launch: the simulator's ``nki_call`` or the Neuron SDK's own entry point.

:func:`launch` takes ``(kernel, grid, args, static)`` and does what the SDK
the kernel belongs to prescribes:

- a simulator kernel: our ``nki_call`` primitive (custom-call run by the
  simulator on CPU; its lowering is refused on any other platform, so our
  payload never reaches the Neuron compiler);
- a genuine kernel, SDK <= 2.22 (``jax_neuronx`` has ``nki_call``):
  ``jax_neuronx.nki_call(kernel, *args, grid=grid, out_shape=..., **static)``;
  ``out_shape`` is derived from the kernel's simulator twin when not given;
- a genuine kernel, SDK 2.23+ (``nki_call`` removed; "call functions annotated
  with ``nki.jit`` directly"): ``kernel[grid](*args, **static)`` on the
  ``jax.Array``\\ s / tracers (:func:`nki_kernels.backend.genuine_call`, which
  refuses an SPMD grid on the standalone ``nki``, whose bracket is a core count);
  under ``vmap`` one launch per example, so the kernel never sees a batch tracer.

Every path here: ``jax_ops.nki_call`` asks :func:`route` first, and on a genuine
stack ``nki.jit`` returns a :class:`nki_kernels.backend.GenuineKernel`, whose
``kernel[grid](*jax_arrays)`` goes through ``nki_call`` too. Ops built on outer
primitives (``jax_ops.add``, ``rms_norm``, ``nki_kernels.op``) launch from their
implementations, i.e. inside their ``custom_vjp``, their vmap rule (rows folded
into one launch before the kernel is called) and their ``custom_partitioning``
rule (per-shard arrays), so the genuine kernel only sees plain, unbatched arrays.
"""

from __future__ import annotations

import functools

from nki_kernels import backend
from nki_kernels.neuron_env import neuron_environment, probe


@functools.lru_cache(maxsize=1)
def jax_neuronx():
    """The genuine ``jax_neuronx`` module if it still has ``nki_call`` (SDK <= 2.22), else None."""
    mod, _ = probe("jax_neuronx")
    return mod if mod is not None and hasattr(mod, "nki_call") else None


def route(kernel) -> str:
    """``"simulator"``, ``"nki_call"`` (jax_neuronx, SDK <= 2.22) or ``"direct"`` (SDK 2.23+) for ``kernel``."""
    if not backend.is_genuine_kernel(kernel):
        return "simulator"
    return "nki_call" if neuron_environment().jax_nki_call and jax_neuronx() is not None else "direct"


def _grid(grid) -> tuple:
    from nki_kernels.simulator.launch import normalize_grid

    return normalize_grid(grid)


def out_shape_of(kernel, grid, args, static):
    """``jax.ShapeDtypeStruct`` (or a tuple of them) of a genuine kernel's results, from its simulator twin."""
    import jax
    from nki_kernels.simulator import ShapeDtype
    from nki_kernels.simulator.launch import eval_shape

    specs = [ShapeDtype(tuple(a.shape), a.dtype) for a in args]
    got = eval_shape(backend.simulator_twin(kernel), grid, *specs, **static)
    if isinstance(got, ShapeDtype):
        return jax.ShapeDtypeStruct(got.shape, got.dtype)
    return tuple(jax.ShapeDtypeStruct(g.shape, g.dtype) for g in got)


def launch(kernel, grid, args, static, out_shape=None):
    """Launch ``kernel`` over ``grid`` on JAX ``args`` with ``static`` keywords, by the path :func:`route` picks.

    ``grid``: int, tuple or None (one program); ``args``: the tensor arguments in
    order; ``static``: dict of non-tensor keyword arguments; ``out_shape``: optional
    ``jax.ShapeDtypeStruct`` (or tuple). Returns what the kernel returns: an array
    or a tuple of arrays.
    """
    path = route(kernel)
    static = dict(static)
    if path == "simulator":
        from .primitive import nki_call

        return nki_call(kernel, *args, grid=grid, out_shape=out_shape, **static)
    kernel, grid = backend.split_launch(kernel, grid)
    grid = _grid(grid)
    if path == "nki_call":
        if out_shape is None:
            out_shape = out_shape_of(kernel, grid, args, static)
        return jax_neuronx().nki_call(backend.unwrap(kernel), *args, grid=grid, out_shape=out_shape, **static)
    return _direct(kernel, grid, args, static)


def _direct(kernel, grid, args, static):
    """The 2.23+ direct call, kept out of ``vmap``: batched, it is one launch per example (``lax.map``),
    as for a simulator kernel, so the genuine kernel never sees a batch tracer."""
    import jax
    from jax import lax

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
