"""The one decision point of a JAX launch: the simulator's ``nki_call`` or the Neuron SDK's own entry point.

:func:`launch` takes ``(kernel, grid, args, static)`` and does what the SDK
the kernel belongs to prescribes: :func:`route` names the path, a simulator
kernel goes to our ``nki_call`` primitive and a genuine one to the entry point
of its SDK era (:mod:`jax_ops.neuron_sdk`, which lists them).

Every path here: ``jax_ops.nki_call`` asks :func:`route` first, and on a genuine
stack ``nki.jit`` returns a :class:`nki_kernels.backend.GenuineKernel`, whose
``kernel[grid](*jax_arrays)`` goes through ``nki_call`` too. Ops built on outer
primitives (``jax_ops.add``, ``rms_norm``, ``nki_kernels.op``) launch from their
implementations, i.e. inside their ``custom_vjp``, their vmap rule (rows folded
into one launch before the kernel is called) and their ``custom_partitioning``
rule (per-shard arrays), so the genuine kernel only sees plain, unbatched arrays.
"""

from __future__ import annotations

from . import neuron_sdk
from .neuron_sdk import jax_neuronx, out_shape_of, route  # noqa: F401 - public here too
from .primitive import nki_call


def launch(kernel, grid, args, static, out_shape=None):
    """Launch ``kernel`` over ``grid`` on JAX ``args`` with ``static`` keywords, by the path :func:`route` picks.

    ``grid``: int, tuple or None (one program); ``args``: the tensor arguments in
    order; ``static``: dict of non-tensor keyword arguments; ``out_shape``: optional
    ``jax.ShapeDtypeStruct`` (or tuple). Returns what the kernel returns: an array
    or a tuple of arrays.
    """
    path = route(kernel)
    if path == neuron_sdk.SIMULATOR:
        return nki_call(kernel, *args, grid=grid, out_shape=out_shape, **dict(static))
    return neuron_sdk.launch(path, kernel, grid, args, static, out_shape=out_shape)
