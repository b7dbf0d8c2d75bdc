"""Lowerings of ``nki_call``: the ``AwsNeuronCustomNativeKernel`` custom-call, or a host callback.

CPU: a ``stablehlo.custom_call`` with the
kernel inputs as operands, its outputs as results and the versioned payload
as ``backend_config``; on CPU our ctypes target (:mod:`jax_ops.cpu_target`)
executes it with the simulator. The payload's shapes come from the lowering
context, so inside a partitioned program each shard's custom-call describes
the shard. GPU: a host callback into the simulator (correct, not fast). Any
other platform (a NeuronDevice) refuses: our payload never reaches the Neuron
compiler; genuine kernels take the SDK's own path (:mod:`jax_ops.genuine`).
"""

from __future__ import annotations

import jax
import numpy as np
from jax._src.interpreters import mlir as _mlir
from jax.interpreters import mlir

from nki_kernels import custom_call as cc
from nki_kernels.simulator.launch import simulate

from . import cpu_target
from .primitive import nki_call_p


def _row_major(aval):
    return tuple(range(len(aval.shape) - 1, -1, -1))


def payload_for(ctx, kernel, grid, static) -> str:
    """The ``backend_config`` of one launch, with the shapes this lowering context sees."""
    static = dict(static)
    instance = cpu_target.instance_id(kernel)
    if instance is not None:
        static[cpu_target.INSTANCE_KEY] = instance
    return cc.encode_payload(kernel, grid, static,
                             [(a.shape, a.dtype) for a in ctx.avals_in],
                             [(a.shape, a.dtype) for a in ctx.avals_out])


def _custom_call_lowering(ctx, *operands, kernel, grid, static, out_specs):
    result_types = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    op = _mlir.custom_call(
        cc.TARGET,
        result_types=result_types,
        operands=list(operands),
        backend_config=payload_for(ctx, kernel, grid, static),
        has_side_effect=False,
        api_version=3,  # API_VERSION_STATUS_RETURNING: failures come back as XLA errors
        # XLA hands the target raw pointers; pin row-major so they read as C-contiguous arrays.
        operand_layouts=[_row_major(a) for a in ctx.avals_in],
        result_layouts=[_row_major(a) for a in ctx.avals_out],
    )
    return list(op.results)


def host_launch(kernel, grid, static):
    """A host function running one launch on the simulator: NumPy arrays in, list of arrays out."""
    def host(*arrays):
        out = simulate(kernel, grid, *[np.asarray(a) for a in arrays], **dict(static))
        return list(out) if isinstance(out, (tuple, list)) else [out]

    return host


def _host_callback_lowering(ctx, *operands, kernel, grid, static, out_specs):
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in out_specs]
    host = host_launch(kernel, grid, static)

    def fn(*args):
        return jax.pure_callback(host, structs, *args, vmap_method="sequential")

    return mlir.lower_fun(fn, multiple_results=True)(ctx, *operands)


def _refused_lowering(ctx, *operands, kernel, grid, static, out_specs):
    """Any other platform (a NeuronDevice above all): the nki-ops payload must never reach its compiler."""
    platforms = ", ".join(ctx.module_context.platforms)
    raise NotImplementedError(
        f"nki_call of the simulator kernel {kernel.func.__qualname__} cannot be lowered for platform {platforms}: "
        "its custom-call payload is nki-ops' own, run by the simulator on CPU only. On a NeuronDevice use a "
        "genuine kernel (decorate with nki_kernels.backend.nki.jit; see python -m nki_kernels.env), or place "
        "the computation on the CPU device")


cpu_target.register()
mlir.register_lowering(nki_call_p, _refused_lowering)
mlir.register_lowering(nki_call_p, _custom_call_lowering, platform="cpu")
for _platform in ("cuda", "rocm"):
    try:
        mlir.register_lowering(nki_call_p, _host_callback_lowering, platform=_platform)
    except NotImplementedError:  # platform unknown to this jaxlib
        pass
