"""``nki.isa`` (``nisa``) of the standalone ``nki`` package: every instruction writes into ``dst``.

This module is the current API's namespace only: each instruction is implemented
once, destination-style, in :mod:`nki_kernels.simulator.instructions` (grouped by
engine, with its operand rules: memories, engines, dtypes, shapes, partition
ranges, NeuronCore version) and exported here as it is; the first generation's
``nisa`` (:mod:`nki_kernels.simulator.isa`) is the functional front end over the
same implementations. ``__all__`` lists exactly the names the current ``nki.isa``
reference page documents
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.isa.html).
Instructions run one program at a time under the vectorised launcher.
"""

from ..instructions.lnc import core_barrier, sendrecv, sendrecv_compute  # noqa: F401 - LNC=2 instructions between cores
# Importing the engine modules declares their instructions (instructions.registry); publish() below
# makes every declared instruction a name of this namespace, including ones declared later.
from ..instructions import dma as _dma, gpsimd as _gpsimd, mx as _mx, rng as _rng  # noqa: F401
from ..instructions import scalar as _scalar, tensor as _tensor, vector as _vector  # noqa: F401
from ..instructions import vector_search as _vector_search  # noqa: F401
from ..instructions import registry as _registry
from ..instructions.registers import (VirtualRegister, register_alloc, register_load, register_move,
                                      register_store)
from ..instructions.scalars import NkiScalar, scalar_load, scalar_store  # noqa: F401 - NKI 0.7.0 scalars
from ..errors import NKIError as NkiValidationError  # noqa: F401 - the page's name for a broken hardware rule
from ..scheduling import NkiInstruction  # noqa: F401 - the handle every instruction returns (depends_on)
from ..instructions.target import (dge_mode, dma_engine, engine, get_nc_sub_version, get_nc_version,
                                   matmul_perf_mode, nc_version, oob_mode, reduce_cmd)

_registry.publish(globals(), "standalone")

unknown_engine = engine.unknown
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd


# The documented names of the current nki.isa page (instructions, config enums, target), and the
# engine shorthands and VirtualRegister its pages use.
__all__ = sorted(n for n in (
    "nc_matmul", "nc_matmul_mx", "nc_transpose", "activation", "activation_reduce", "activate2", "tensor_reduce",
    "tensor_partition_reduce", "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar",
    "tensor_scalar_reduce", "tensor_scalar_cumulative", "tensor_copy", "tensor_copy_predicated", "exponential",
    "reciprocal", "quantize_mx", "iota", "dropout", "affine_select", "range_select", "select_reduce",
    "sequence_bounds", "memset", "bn_stats", "bn_aggr", "local_gather", "nc_n_gather", "dma_copy", "dma_transpose",
    "dma_compute", "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle", "register_alloc",
    "register_load", "register_move", "register_store", "core_barrier", "sendrecv", "sendrecv_compute", "rng",
    "rand2", "rand_set_state", "rand_get_state", "set_rng_seed", "nonzero_with_count", "topk",
    "engine", "dma_engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version",
    "get_nc_version", "get_nc_sub_version", "NkiValidationError", "NkiInstruction", "VirtualRegister",
    "NkiScalar", "scalar_load", "scalar_store",
    "unknown_engine", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine") if n in globals())
