"""``nki.isa`` (``nisa``) on NumPy: one function per engine instruction.

Semantics follow the neuronxcc.nki.isa reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.isa.html).
The Tensor engine contracts over the partition axis: ``nc_matmul(stationary,
moving)`` computes ``stationary.T @ moving`` with K (partitions) <= 128,
stationary free size <= 128 and moving free size <= 512, writing fp32 to PSUM.
"""

import inspect as _inspect

import numpy as _np

from . import dtypes as _dt
from . import language as _nl
from . import memory as _memory
from .core import Access as _Access, HBMTensor as _HBMTensor, Tile as _Tile
from .core import psum as _psum, sbuf as _sbuf
from .core import current_or_none as _current_or_none
from .errors import NKIError as _NKIError
from .errors import NotBatchable as _NotBatchable
from .indexing import _full_mask
from .instructions import operands as _ops
# The first generation's computing forms live with the instructions (one implementation each).
from .instructions.functional import _DEFAULT_CMD  # noqa: F401
from .instructions.functional import _MATMUL_DTYPES  # noqa: F401
from .instructions.functional import _MATMUL_DTYPE_SET  # noqa: F401
from .instructions.functional import _PERF_NONE  # noqa: F401
from .instructions.functional import _double_row  # noqa: F401
from .instructions.functional import _matmul_dtypes  # noqa: F401
from .instructions.functional import _matmul_product  # noqa: F401
from .instructions.functional import _per_partition  # noqa: F401
from .instructions.functional import _perf_mode_rule  # noqa: F401
from .instructions.functional import _reading_mask  # noqa: F401
from .instructions.functional import _reducer  # noqa: F401
from .instructions.functional import _tile  # noqa: F401
from .instructions.functional import activation  # noqa: F401
from .instructions.functional import activation_reduce  # noqa: F401
from .instructions.functional import nc_matmul  # noqa: F401
from .instructions.functional import nc_transpose  # noqa: F401
from .instructions.functional import tensor_copy  # noqa: F401
from .instructions.functional import tensor_partition_reduce  # noqa: F401
from .instructions.functional import tensor_reduce  # noqa: F401
from .instructions.functional import tensor_scalar  # noqa: F401
from .instructions.functional import tensor_scalar_reduce  # noqa: F401
from .instructions.functional import tensor_tensor  # noqa: F401
from .instructions import registry as _registry
from .instructions import mx as _mx, scalar as _scalar, tensor as _tensor  # noqa: F401 - declare their instructions
from .instructions import dma as _dma
from .instructions import gpsimd as _gpsimd
from .instructions import rng as _rng
from .instructions import vector as _vector
from .instructions import vector_search as _vector_search
from .instructions.target import dge_mode, engine, get_nc_version, nc_version, reduce_cmd
from .instructions.target import oob_mode


unknown_engine = engine.unknown
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
dma_engine = engine.dma  # "DMA Engine" on the v2.20 .. v2.22 pages' engine list


def iota(expr, dtype, *, mask=None, name=None):
    """A tile holding the values of an index expression (``nl.arange`` arithmetic), GpSimd engine."""
    nb = _nl._nb()
    if type(expr) is _nl.BExpr:
        vals, rank = expr.batched_array(), expr.ndim
    else:
        vals = _np.asarray(expr)
        rank = vals.ndim
    # A [P] expression is the partition column; a scalar one (``nl.program_id(1)``, a loop index, as
    # vLLM's paged attention writes ``nisa.iota(head_id, ...)``) is one value, a [1, 1] tile.
    if rank < 2:
        vals = vals.reshape(vals.shape[:vals.ndim - rank] + (vals.shape[vals.ndim - rank:] + (1, 1))[:2])
    if nb and type(expr) is not _nl.BExpr:
        vals = _np.broadcast_to(vals, _current_or_none().bshape + vals.shape)
    return _nl._result(vals, _dt.as_dtype(dtype), mask, engine="GpSimd")


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, name=None):
    """A new SBUF tile of ``shape`` filled with ``value``."""
    shape, _ = _nl._parse_shape(shape)
    prog = _current_or_none()
    full = _np.full(shape, value, _dt.as_dtype(dtype))
    if prog is not None and prog.nb:
        full = _np.broadcast_to(full, prog.bshape + shape)
    return _nl._result(full, _dt.as_dtype(dtype), mask)


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             name=None):
    """Copy ``src`` into ``dst`` through DMA (HBM or SBUF, never PSUM); ``dst_rmw_op`` (np.add) accumulates.
    Without ``mask`` this is :func:`nki_kernels.simulator.instructions.dma.dma_copy`; a ``mask`` limits
    the elements moved. ``dge_mode`` does not change results."""
    if mask is None:
        return _dma.dma_copy(dst, src, dst_rmw_op=dst_rmw_op, oob_mode=oob_mode, dge_mode=dge_mode)
    for x, what in ((dst, "dst"), (src, "src")):
        if isinstance(x, _Tile) and x.buffer is _psum:
            raise _NKIError("operand memory", f"nisa.dma_copy: {what} (shape {x.shape}) is in PSUM; DMA moves data "
                           "between HBM and SBUF (copy PSUM to SBUF with nisa.tensor_copy first)")
    if isinstance(dst, (_Access, _HBMTensor)):
        if dst_rmw_op is not None:
            acc = _nl._as_access(dst, "dst", "nisa.dma_copy")
            cur = _Tile(acc.index.read(acc.tensor.data, mask), _sbuf)
            src = _nl._make_binary("rmw", _ops.alu(dst_rmw_op))(cur, _nl.load(src) if not isinstance(
                src, _Tile) else src)
        if isinstance(src, (_Access, _HBMTensor)):
            src = _nl.load(src, mask=mask)
        _nl.store(dst, src, mask=mask)
        return None
    if not isinstance(dst, _Tile):
        raise _NKIError("operand type", f"nisa.dma_copy: dst must be a tensor, got {type(dst).__name__}")
    val = _nl.load(src, mask=mask) if isinstance(src, (_Access, _HBMTensor)) else src
    if dst_rmw_op is not None:
        val = _nl._make_binary("rmw", _ops.alu(dst_rmw_op))(dst, val)
    dst[...] = val
    return None


def affine_select(pred, on_true_tile, on_false_value, *, dtype=None, mask=None, name=None):
    """Select ``on_true_tile`` where the affine predicate (index expression) holds, else a scalar."""
    # GpSimd cannot read PSUM, but the first generation's compiler places tiles for the instruction:
    # the official flash attention selects straight from its PSUM scores (a copy is inserted).
    x = _tile(on_true_tile, "on_true_tile", "affine_select", mask=mask)
    cond = _np.broadcast_to(_np.asarray(pred), x.shape)
    return _nl._result(_np.where(cond, _nl._values(x, "on_true_tile"), on_false_value),
                      _nl._out_dtype(dtype, x), mask, engine="GpSimd")


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None,
                       mask=None, name=None):
    """Inclusive scan along the free axis: ``r[i] = (data0[i] op0 r[i-1]) op1 data1[i]``
    (``reverse0``: ``r[i-1] op0 data0[i]``; ``reverse1``: ``data1[i] op1 ...``); a new tile
    (see :func:`nki_kernels.simulator.instructions.vector.tensor_tensor_scan`)."""
    t0 = _tile(data0, "data0", "tensor_tensor_scan", mask=mask)
    return _functional(t0.shape, _nl._out_dtype(dtype, data0, data1), mask, lambda d: _vector.tensor_tensor_scan(
        d, data0, data1, initial, op0, op1, reverse0, reverse1))


def bn_stats(data, *, mask=None, dtype=None, name=None):
    """Per-partition batch-norm statistics of <= 512 free elements (Vector engine): a new [P, 6] tile,
    ``(count, mean, var * count)`` of the even-indexed and then of the odd-indexed elements, to be
    combined by :func:`bn_aggr` (see :func:`nki_kernels.simulator.instructions.vector.bn_stats`)."""
    x = _tile(data, "data", "bn_stats", mask=mask)
    x, mask = _reading_mask(x, mask, (x.shape[0], 6), "bn_stats")
    return _functional((x.shape[0], 6), _nl._out_dtype(dtype, x), mask, lambda d: _vector.bn_stats(d, x))


def bn_aggr(data, *, mask=None, dtype=None, name=None):
    """Combine :func:`bn_stats` outputs (concatenated along the free axis) into a new [P, 2] tile (mean,
    variance) (see :func:`nki_kernels.simulator.instructions.vector.bn_aggr`)."""
    x = _tile(data, "data", "bn_aggr", mask=mask)
    return _functional((x.shape[0], 2), _nl._out_dtype(dtype, x), mask, lambda d: _vector.bn_aggr(d, x))


# ---------------------------------------------------------------------------
# Instructions implemented once, destination-style, in nki_kernels.simulator.instructions: the
# first generation's functional forms allocate the result tile and pass it as dst.
# ---------------------------------------------------------------------------
def _functional(shape, dtype, mask, run, buffer=_sbuf):
    """A new result tile of ``shape`` / ``dtype`` written by ``run(dst)``; elements outside the
    first generation's ``mask`` stay zero."""
    out = _ops.new_tile(shape, dtype, buffer)
    run(out)
    prog = _current_or_none()
    if prog is not None and out._mem is not None:
        _memory.functional_result(out._mem, prog)  # `t[...] = nisa.reciprocal(...)`: the instruction writes t
    keep = None if mask is None else _full_mask(mask, tuple(shape))
    if keep is not None:
        out.data[...] = _np.where(keep, out.data, _np.zeros((), out.dtype))
        out._written = _np.broadcast_to(keep, out.shape)  # assigned into a tile, it writes only these (as nl ops)
    return out


def _in_place(dst, mask, dtype, op, run):
    """Run ``run()`` writing ``dst`` in place; elements outside ``mask`` keep their values."""
    if dtype is not None and _dt.as_dtype(dtype) != getattr(dst, "dtype", None):
        raise _NKIError("dtype", f"nisa.{op}: dtype={dtype} differs from dst's dtype {getattr(dst, 'dtype', None)}; "
                       "this instruction writes dst in its own dtype")
    before = _np.array(dst.data) if mask is not None and isinstance(dst, _Tile) else None
    run()
    if before is not None:
        keep = _full_mask(mask, tuple(dst.shape))
        if keep is not None:
            dst[...] = _np.where(keep, dst.data, before)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, name=None):
    """Move partitions within 32-partition quadrants of ``src`` into ``dst`` (in place, Vector
    engine); see :func:`nki_kernels.simulator.instructions.vector_search.nc_stream_shuffle`."""
    _in_place(dst, mask, dtype, "nc_stream_shuffle", lambda: _vector_search.nc_stream_shuffle(dst, src, shuffle_mask))


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, name=None):
    """Copy ``src`` into ``dst`` (in place) where ``predicate`` holds; see
    :func:`nki_kernels.simulator.instructions.vector_search.tensor_copy_predicated`."""
    _in_place(dst, mask, dtype, "tensor_copy_predicated",
              lambda: _vector_search.tensor_copy_predicated_gen1(dst, src, predicate, reverse_pred))


def max8(*, src, mask=None, dtype=None, name=None):
    """The 8 largest values of each partition of ``src``, descending: a new [P, 8] tile
    (``dtype``, default src's)."""
    x = _tile(src, "src", "max8", mask=mask)
    x, mask = _reading_mask(x, mask, (x.shape[0], 8), "max8")
    return _functional((x.shape[0], 8), dtype or x.dtype, mask, lambda d: _vector_search.max8(d, x))


def nc_find_index8(*, data, vals, mask=None, dtype=None, name=None):
    """Indices of the first occurrences of the 8 ``vals`` in each partition of ``data``: a new
    [P, 8] uint32 (or ``dtype`` uint16) tile; ``mask`` applies to ``data`` only."""
    x = _tile(data, "data", "nc_find_index8", mask=mask)
    return _functional((x.shape[0], 8), dtype or _dt.uint32, None,
                       lambda d: _vector_search.find_index8(d, x, vals, mask))


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, name=None):
    """``data`` with the first occurrence of each of the 8 ``vals`` replaced by ``imm``: a new tile
    (``dtype``, default data's); ``dst_idx`` receives the matched positions."""
    x = _tile(data, "data", "nc_match_replace8", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask,
                       lambda d: _vector_search.nc_match_replace8(d, x, vals, imm, dst_idx))


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, name=None):
    """Copy ``src`` (a tile view at a dynamic offset within each partition, SBUF or PSUM) into a new tile
    (``dtype``, default src's): the simulator knows the offset's value, so this is ``tensor_copy`` of
    the view. GpSimd cannot access PSUM."""
    x = _tile(src, "src", "tensor_copy_dynamic_src", mask=mask)
    _ops.no_gpsimd_psum(_ops.engine_name(engine), "tensor_copy_dynamic_src", x)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _vector.tensor_copy(d, x))


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=engine.unknown, name=None):
    """Copy ``src`` into ``dst``, a tile view at a dynamic offset within each partition (SBUF or PSUM),
    in place; both have the same partitions and elements per partition."""
    x = _tile(src, "src", "tensor_copy_dynamic_dst", mask=mask)
    _ops.no_gpsimd_psum(_ops.engine_name(engine), "tensor_copy_dynamic_dst", x, dst)
    _in_place(dst, mask, dtype, "tensor_copy_dynamic_dst",
              lambda: _vector.tensor_copy(dst, x))


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, name=None):
    """Gather within each GpSimd core's 16 partitions (see
    :func:`nki_kernels.simulator.instructions.gpsimd.local_gather`): a new SBUF tile
    ``[P, *index free dims, 16, num_elem_per_idx]`` (all indices valid) or
    ``[P, num_valid_indices, num_elem_per_idx]``."""
    s = _tile(src_buffer, "src_buffer", "local_gather", (_sbuf,), mask=mask)
    ix = _tile(index, "index", "local_gather", (_sbuf,), mask=mask)
    n = int(num_elem_per_idx)
    full = 16 * int(_np.prod(ix.shape[1:]))
    if num_valid_indices is None or int(num_valid_indices) == full:
        shape = (s.shape[0],) + tuple(ix.shape[1:]) + (16, n)
    else:
        shape = (s.shape[0], int(num_valid_indices), n)
    return _functional(shape, s.dtype, mask, lambda d: _gpsimd.local_gather(d, s, ix, n, num_valid_indices))


def reciprocal(data, *, dtype=None, mask=None, name=None):
    """``1 / data`` element-wise (Vector engine): a new tile (``dtype``, default data's)."""
    x = _tile(data, "data", "reciprocal", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _vector.reciprocal(d, x))


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, name=None):
    """``(data op0 operand0) op1 operand1`` (Vector engine): operand0 a scalar or [P, 1] tile, operand1 a
    tile like data; a new tile (``dtype``, default the operands' promoted dtype)."""
    x = _tile(data, "data", "scalar_tensor_tensor", mask=mask)
    out_dtype = _nl._out_dtype(dtype, x, operand1)
    return _functional(x.shape, out_dtype, mask, lambda d: _vector.scalar_tensor_tensor(
        d, x, op0, operand0, op1, operand1, reverse0, reverse1))


def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=dge_mode.unknown, name=None):
    """Transpose ``src`` (HBM or SBUF) through DMA into a new SBUF tile (2-D swaps the axes, 3-D reverses
    them, 4-D permutes [3, 1, 2, 0], or ``axes``). ``dge_mode`` picks the descriptor generation, which
    does not change results; the page: "HWDGE is only supported for NeuronCore-v3+"."""
    _dge_mode_rule(dge_mode, "dma_transpose")
    shape = tuple(src.shape)
    perm = tuple(axes) if axes is not None else {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(len(shape))
    if perm is None:
        raise _NKIError("dma_transpose", f"nisa.dma_transpose takes a 2-D to 4-D source, got shape {shape}")
    out_shape = tuple(shape[a] for a in perm)
    return _functional(out_shape, dtype or src.dtype, mask, lambda d: _dma.transpose_gen1(d, src, axes=perm))


def _dge_mode_rule(mode, op):
    """``mode`` is a ``nisa.dge_mode``; ``hwdge`` needs NeuronCore-v3 or newer."""
    if not isinstance(mode, dge_mode):
        raise _NKIError("dge_mode", f"nisa.{op}: dge_mode={mode!r} is not a nisa.dge_mode")
    if mode is dge_mode.hwdge and get_nc_version() < nc_version.gen3:
        raise _NKIError("dge_mode", f"nisa.{op}: dge_mode=hwdge (hardware DGE) needs NeuronCore-v3 or newer; the "
                        f"target is {get_nc_version().name}")


_FP32_MIN = float(_np.finfo(_np.float32).min)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=_np.amax, range_start=0, on_false_value=_FP32_MIN, mask=None, dtype=None, name=None):
    """Keep ``on_true_tile`` where ``comp_op0(i + range_start, bound0)`` and ``comp_op1(i + range_start,
    bound1)`` hold for free index ``i``, else ``on_false_value``: a new tile, with the max reduction
    into the Vector registers / ``reduce_res`` (NeuronCore-v3+)."""
    x = _tile(on_true_tile, "on_true_tile", "range_select", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _vector.range_select_gen1(
        d, x, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, reduce_op, range_start, on_false_value))


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=_np.amax, reverse_pred=False, mask=None, dtype=None, name=None):
    """``dst = where(predicate, on_true, on_false)`` in place, with the max reduction into the Vector
    registers / ``reduce_res``."""
    _in_place(dst, mask, dtype, "select_reduce", lambda: _vector.select_reduce_gen1(
        dst, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred))


def sequence_bounds(*, segment_ids, dtype=None, name=None):
    """``[start, end)`` of the segment of each element of ``segment_ids`` ([1, n]): a new [1, 2, n] tile
    (``dtype``, default segment_ids')."""
    s = _tile(segment_ids, "segment_ids", "sequence_bounds", (_sbuf,))
    n = int(_np.prod(s.shape[1:]))
    return _functional((s.shape[0], 2, n), dtype or s.dtype, None, lambda d: _gpsimd.sequence_bounds(d, s))


def dropout(data, prob, *, mask=None, dtype=None, name=None):
    """``data`` with each element zeroed with drop probability ``prob`` (scalar or [P, 1] tile): a new tile
    (``dtype``, default data's); draws from the Vector engine's generator."""
    x = _tile(data, "data", "dropout", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _rng.dropout(d, x, prob))


# Not on the v2.26 nki.isa page, but neuronxcc has it since 2.27 in the dst= form of the standalone
# page (the documentation's example tests at aws-neuron-sdk 81ce03a call it as
# ``nisa.tensor_scalar_cumulative(src=..., dst=..., op0=..., op1=..., imm0=...)``).
tensor_scalar_cumulative = _vector.tensor_scalar_cumulative




def _derived(spec):
    """The functional form of an instruction declared with ``gen1=Gen1(like=...)`` and no form of
    its own here: a new SBUF result shaped like operand ``like`` (dtype ``dtype=`` or that
    operand's), elements outside ``mask`` zero, written by the instruction as its ``dst``."""
    sig = _inspect.signature(spec.run)
    sig = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "dst"])
    like = spec.gen1.like

    def form(*args, dtype=None, mask=None, **kwargs):
        bound = sig.bind(*args, **kwargs)
        x = _tile(bound.arguments[like], like, spec.name, mask=mask)
        out_dtype = _dt.as_dtype(dtype) if dtype is not None else x.dtype
        prog = _current_or_none()
        if prog is not None and prog.nb:  # a batch of programs: the result carries the batch's axes
            if mask is not None:
                raise _NotBatchable(f"nisa.{spec.name} with mask= runs one program at a time")
            out = _Tile(_np.zeros(x.data.shape, out_dtype), _sbuf)
            spec.run(out, **bound.arguments)
            return out
        return _functional(x.shape, out_dtype, mask, lambda d: spec.run(d, **bound.arguments))

    form.__name__ = form.__qualname__ = spec.name
    form.__doc__ = f"The first generation's functional ``nisa.{spec.name}``: {spec.run.__doc__ or ''}"
    form.__module__ = __name__
    form = form if spec.gen1.batched else _nl._per_program_only(form, "nisa")
    form._derived_from = spec  # (registry.withdraw removes only what it derived)
    return form


# Instructions with batched first-generation forms, as declared (see nl.BATCH_SAFE); the others run
# one program at a time. Declared instructions without a form here get a derived one (_derived).
_BATCH_SAFE = _registry.batch_safe("gen1")
_nl._guard_module(globals(), _BATCH_SAFE, "nisa")
_registry.publish(globals(), "gen1", _derived)

# The documented names of the first generation's nki.isa page (instructions, config enums, target)
# and the engine shorthands its pages use; everything else here is internal.
__all__ = sorted(n for n in (
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_reduce", "tensor_partition_reduce",
    "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar", "tensor_scalar_reduce",
    "tensor_scalar_cumulative", "tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "tensor_copy_predicated", "reciprocal",
    "iota", "dropout", "affine_select", "range_select", "select_reduce", "sequence_bounds", "memset", "bn_stats",
    "bn_aggr", "local_gather", "dma_copy", "dma_transpose", "max8", "nc_find_index8", "nc_match_replace8",
    "nc_stream_shuffle", "engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "get_nc_version",
    "unknown_engine", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "dma_engine")
    if n in globals())
