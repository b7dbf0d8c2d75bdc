"""``custom_partitioning`` plumbing for the row-wise NKI ops (the JAX custom-ops guide's pattern).

Each op is an "outer" primitive whose lowering is a ``custom_partitioning``
of its implementation (which calls ``nki_call``). XLA's SPMD partitioner asks
us how to split it: we keep the input's sharding on the row (leading) axes,
replicate the last axis (a kernel program needs whole rows), and re-trace the
implementation on the per-shard shapes, so each device runs one custom-call
on its shard and no input is all-gathered. Both the GSPMD callbacks
(``infer_sharding_from_operands``) and a Shardy ``sharding_rule`` are given,
whichever partitioner the JAX configuration selects.
"""

from __future__ import annotations

import functools

from jax._src import dispatch
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend import core
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding, PartitionSpec


def spec_of(info, ndim: int) -> tuple:
    """The partition spec of an argument as a tuple of length ``ndim`` (None = replicated axis)."""
    sharding = getattr(info, "sharding", None)
    spec = tuple(getattr(sharding, "spec", ()) or ())
    return (spec + (None,) * ndim)[:ndim]


def named(mesh, *spec) -> NamedSharding:
    """``NamedSharding(mesh, PartitionSpec(*spec))``."""
    return NamedSharding(mesh, PartitionSpec(*spec))


def axis_names(spec) -> tuple:
    """Mesh axis names used by the entries of a partition spec."""
    out = []
    for entry in spec:
        if entry is None:
            continue
        out.extend(entry if isinstance(entry, tuple) else (entry,))
    return tuple(out)


def factors(prefix: str, n: int) -> list:
    """Shardy factor names ``prefix0 .. prefix{n-1}``."""
    return [f"{prefix}{i}" for i in range(n)]


def define_op(name, *, impl, abstract, batch, infer, partition, rule):
    """Create an outer primitive with one parameter ``call`` lowered through ``custom_partitioning(impl)``.

    ``impl(call, *arrays)`` computes the op on whatever shapes it gets, global or per shard,
    and returns a tuple; ``call`` is a hashable description of the call (the primitive's only
    parameter). ``infer``/``partition``/``rule`` are the ``custom_partitioning`` callbacks;
    they receive ``call`` first.
    """
    prim = core.Primitive(name)
    prim.multiple_results = True
    prim.def_impl(functools.partial(dispatch.apply_primitive, prim))
    prim.def_abstract_eval(abstract)
    batching.primitive_batchers[prim] = batch
    # custom_partitioning needs the device assignment while lowering, also for eager calls.
    dispatch.prim_requires_devices_during_lowering.add(prim)

    part = custom_partitioning(impl, static_argnums=(0,))
    part.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)

    def lower(*arrays, call):
        return part(call, *arrays)

    mlir.register_lowering(prim, mlir.lower_fun(lower, multiple_results=True))

    def unpartitioned(*arrays, call):
        return impl(call, *arrays)

    # On GPU the kernel runs in a host callback, and a callback inside custom_partitioning
    # crashed jaxlib 0.10.2: there, XLA shards the op itself (correct, with gathers).
    for platform in ("cuda", "rocm"):
        try:
            mlir.register_lowering(prim, mlir.lower_fun(unpartitioned, multiple_results=True), platform=platform)
        except NotImplementedError:  # platform unknown to this jaxlib
            pass
    return prim
