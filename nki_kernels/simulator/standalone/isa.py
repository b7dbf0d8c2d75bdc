"""``nki.isa`` (``nisa``) of the standalone ``nki`` package: every instruction writes into ``dst``.

Most instructions live once, destination-style, in
:mod:`nki_kernels.simulator.instructions` (grouped by engine, operand rules next
to each) and are exported here as they are. The ones still defined below compute
with the first generation's implementation (same operand rules, fp32 compute and
rounding, profile accounting) and write the result into the caller's
destination, a tile or a view of one (``dst=acc``, ``dst=t[0:128, 0:512]``). On
top of the first generation's checks the destination is checked the way the
current reference states
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.isa.html):

* its memory: ``nc_matmul`` writes PSUM only; ``iota`` / ``affine_select``
  write SBUF only; DMA moves between HBM and SBUF (never PSUM); GpSimd cannot
  touch PSUM;
* its shape: the same partition size as the result and the same number of
  elements per partition, else an :class:`NKIError` naming both shapes;
* its dtype where the reference fixes it (``nc_matmul``: fp32, or bf16 on
  NeuronCore-v4; ``nc_transpose``: the input's dtype).

Results are rounded to ``dst.dtype``; instructions return ``None``.
"""

import numpy as _np

from .. import dtypes as _dt
from .. import isa as _gen1
from .. import language as _nl1
from .. import profile as _prof
from ..core import Tile as _Tile
from ..core import psum as _psum
from ..core import sbuf as _sbuf
from ..cores import core_barrier, sendrecv, sendrecv_compute  # noqa: F401 - LNC=2 instructions between cores
from ..errors import NKIError as _NKIError
from ..instructions import operands as _ops
from ..instructions.dma import dma_compute, dma_copy, dma_transpose
from ..instructions.gpsimd import nc_n_gather, nonzero_with_count, sequence_bounds, topk
from ..instructions.mx import nc_matmul_mx, quantize_mx
from ..instructions.operands import check_dst as _check_dst
from ..instructions.operands import fit_dst as _fit_dst
from ..instructions.operands import mark_read as _mark_read
from ..instructions.operands import per_partition as _per_partition
from ..instructions.operands import scratch as _scratch
from ..instructions.operands import write as _write
from ..instructions.registers import accumulate as _accumulate
from ..instructions.registers import (VirtualRegister, register_alloc, register_load, register_move,
                                      register_store)
from ..instructions.rng import dropout, rand2, rand_get_state, rand_set_state, rng, set_rng_seed
from ..instructions.scalar import activate2, activation, activation_reduce
from ..instructions.target import (dge_mode, dma_engine, engine, get_nc_version, matmul_perf_mode, nc_version,
                                   oob_mode, reduce_cmd)
from ..instructions.vector import (exponential, max8, nc_find_index8, nc_match_replace8, nc_stream_shuffle,
                                   range_select, reciprocal, scalar_tensor_tensor, select_reduce,
                                   tensor_copy_predicated, tensor_scalar_cumulative)
from . import language as _nl

unknown_engine = engine.unknown
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd


def _compute_dtype(dst, *tiles):
    """Native integer math when every tile is an integer tile, else fp32 (rounded once, on write)."""
    if all(_np.issubdtype(t.dtype, _np.integer) for t in (dst, *tiles)):
        return None
    return _dt.float32


def _op(op):
    """An operator identifier the first-generation ops accept (``nl.copy`` becomes identity)."""
    if op is _nl.copy or op is _nl.bypass:
        return _nl1.identity
    return op


def _gpsimd_psum(eng, op, *tiles):
    _ops.no_gpsimd_psum(_ops.engine_name(eng), op, *tiles)


# ---------------------------------------------------------------------------
# Tensor engine
# ---------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none,
              name=None):
    """``dst = stationary.T @ moving`` (or ``+=``) on the Tensor engine; ``dst`` must be a PSUM tile.

    stationary [K, M] and moving [K, N] are SBUF tiles with K <= 128, M <= 128,
    N <= 512; ``dst`` is [M, N], fp32 (bf16 from NeuronCore-v4). ``accumulate``:
    ``False`` overwrites, ``True`` adds to what ``dst`` holds (which must have
    been written before), ``None`` (default) overwrites the elements never
    written and accumulates onto the others, as the compiler infers "first write
    overwrites, later writes accumulate". ``perf_mode=double_row`` (FP8 double
    performance mode, NeuronCore-v3+) gives the same results.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_matmul.html).
    """
    d = _check_dst(dst, "nc_matmul", (_psum,))
    if d.dtype not in (_dt.float32, _dt.bfloat16):
        raise _NKIError("dst dtype", f"nisa.nc_matmul: dst dtype is {d.dtype}; the matmul result tile must be "
                        "float32 (bfloat16 is accepted from NeuronCore-v4)")
    if d.dtype == _dt.bfloat16 and get_nc_version() < nc_version.gen4:
        raise _NKIError("dst dtype", f"nisa.nc_matmul: a bfloat16 result tile needs NeuronCore-v4; the target is "
                        f"{get_nc_version().name} (write float32 to PSUM)")
    for a, b, an, bn in ((stationary, moving, "stationary", "moving"), (moving, stationary, "moving", "stationary")):
        if isinstance(a, _Tile) and isinstance(b, _Tile) and a.dtype == _dt.float32 and b.dtype != _dt.float32:
            raise _NKIError("matmul operands", f"nisa.nc_matmul: {an} is float32 but {bn} is {b.dtype}; if one "
                            "input is float32/tfloat32 the other must be too")
    _gen1._perf_mode_rule(perf_mode, stationary, moving)
    with _scratch():
        res = _gen1.nc_matmul(stationary, moving, is_transpose=is_transpose)
    vals = _fit_dst(d, res.data, "nc_matmul", f"product stationary.T @ moving ({stationary.shape[1]}x"
                    f"{moving.shape[1]})")
    _write(d, _ops.psum_accumulate(d, vals, accumulate, "nc_matmul"), "nc_matmul")


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """Transpose partition and (flattened) free axes of ``data`` into ``dst``.

    Tensor engine: <= 128x128, SBUF in, PSUM out. Vector engine: <= 32x32, SBUF
    or PSUM either way. With ``engine`` unknown the simulator picks Tensor when
    ``data`` is in SBUF and ``dst`` in PSUM, else Vector. ``dst`` has ``data``'s dtype.
    """
    d = _check_dst(dst, "nc_transpose")
    x = _gen1._tile(data, "data", "nc_transpose")
    eng = engine
    if eng == "unknown":
        eng = "Tensor" if (x.buffer is _sbuf and d.buffer is _psum) else "Vector"
    if eng == "Tensor" and (x.buffer is not _sbuf or d.buffer is not _psum):
        raise _NKIError("operand memory", f"nisa.nc_transpose on the Tensor engine reads SBUF and writes PSUM; "
                       f"got data in {x.buffer.name.upper()} and dst in {d.buffer.name.upper()}")
    if d.dtype != x.dtype:
        raise _NKIError("dst dtype", f"nisa.nc_transpose: dst dtype {d.dtype} differs from data dtype {x.dtype}; "
                       "the transpose output has the input's dtype")
    with _scratch():
        src = x if x.ndim == 2 else _Tile(x.data.reshape(x.shape[0], -1), x.buffer)
        res = _gen1.nc_transpose(src, engine="Vector" if eng == "Vector" else "Tensor")
    _write(d, res.data, "nc_transpose", f"transpose of {src.shape}")


# ---------------------------------------------------------------------------
# Vector / Scalar / GpSimd engines
# ---------------------------------------------------------------------------
def tensor_copy(dst, src, engine=engine.unknown, name=None):
    """Copy ``src`` (SBUF/PSUM) into ``dst`` (SBUF/PSUM), casting to ``dst.dtype``.

    Same dtype: a bit-exact copy; different dtypes: through fp32. ``dst`` has
    ``src``'s partition size and elements per partition. GpSimd cannot access PSUM.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_copy.html)
    """
    d = _check_dst(dst, "tensor_copy")
    _gpsimd_psum(engine, "tensor_copy", src, d)
    x = _gen1._tile(src, "src", "tensor_copy")
    with _scratch():
        res = _gen1.tensor_copy(x, dtype=d.dtype)
    _write(d, res.data, "tensor_copy", f"source (shape {x.shape})")


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """``dst = op(data1, data2)`` element-wise (Vector engine; ``nl.power`` on GpSimd).

    data1 and data2 have the same partition size and the same number of
    elements per partition (no broadcasting: that is ``tensor_scalar``'s job)
    and cannot both be in PSUM; ``dst`` may be SBUF or PSUM. fp32 compute,
    rounded to ``dst.dtype``.
    """
    d = _check_dst(dst, "tensor_tensor")
    a = _gen1._tile(data1, "data1", "tensor_tensor")
    b = _gen1._tile(data2, "data2", "tensor_tensor")
    if a.shape[0] != b.shape[0] or _per_partition(a.shape) != _per_partition(b.shape):
        raise _NKIError("operand shapes", f"nisa.tensor_tensor: data1 {a.shape} and data2 {b.shape} need the same "
                       "partition size and the same number of elements per partition (use nisa.tensor_scalar "
                       "to broadcast a [P, 1] operand)")
    if op is _nl.power or engine == "GpSimd":
        _gpsimd_psum("GpSimd", "tensor_tensor", a, b, d)
    with _scratch():
        if b.shape != a.shape:
            b = _Tile(b.data.reshape(a.shape), b.buffer)
        res = _gen1.tensor_tensor(a, b, _op(op), dtype=_compute_dtype(d, a, b))
    _write(d, res.data, "tensor_tensor")


def tensor_scalar(dst, data, op0, operand0=None, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with scalar or [P, 1] operands broadcast along the free axes.

    ``reverse0`` / ``reverse1`` swap an operator's inputs; ``op1`` is optional.
    fp32 compute, rounded to ``dst.dtype``; data and dst in SBUF or PSUM.
    """
    d = _check_dst(dst, "tensor_scalar")
    _gpsimd_psum(engine, "tensor_scalar", data, operand0, operand1, d)
    x = _gen1._tile(data, "data", "tensor_scalar")
    with _scratch():
        if operand0 is None and _is_unary(op0):
            x = _Tile(_np.asarray(_nl.np_function(op0)(_dt.compute_view(x.data))), x.buffer)
            res = x if op1 is None else _gen1.tensor_scalar(x, _op(op1), operand1, reverse1, dtype=_dt.float32)
        else:
            res = _gen1.tensor_scalar(x, _op(op0), operand0, reverse0, op1=None if op1 is None else _op(op1),
                                      operand1=operand1, reverse1=reverse1, dtype=_compute_dtype(d, x))
    _write(d, res.data, "tensor_scalar")


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None):
    """``dst = data op0 operand0`` (one arithmetic operator) plus a reduction of the result over all
    free axes with ``reduce_op`` into ``reduce_res`` ([P, 1]) through the Vector engine's registers
    (``reduce_cmd``, default ``reset_reduce``; ``reduce_res_negate`` writes the negated result).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_scalar_reduce.html)
    """
    d = _check_dst(dst, "tensor_scalar_reduce")
    x = _gen1._tile(data, "data", "tensor_scalar_reduce")
    with _scratch():
        res = _gen1.tensor_scalar(x, _op(op0), operand0, reverse0, dtype=_dt.float32)
    out = res.data
    _write(d, out, "tensor_scalar_reduce")
    _accumulate("tensor_scalar_reduce", "Vector", out, x.shape[0], reduce_op, reduce_res, reduce_cmd, reduce_init,
                negate=reduce_res_negate)


def _is_unary(op) -> bool:
    """Whether ``op`` is a one-input operator (``nl.abs``, ``nl.exp`` ...)."""
    return op is _nl.copy or op is _nl.bypass or getattr(op, "__name__", None) in _nl1._UNARY


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce ``data`` over free ``axis`` with ``op`` into ``dst`` (Vector engine).

    ``axis`` must be the last contiguous free dimension(s), ending at the last
    one; axis 0 (partition) cannot be reduced. fp32 compute; ``negate``
    multiplies the result by -1. ``dst`` has data's partition size and as many
    elements per partition as the reduction leaves.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_reduce.html)
    """
    d = _check_dst(dst, "tensor_reduce")
    x = _gen1._tile(data, "data", "tensor_reduce")
    axes = sorted(_nl1._axes(x, axis, "tensor_reduce"))
    if axes != list(range(x.ndim - len(axes), x.ndim)):
        raise _NKIError("reduce axes", f"nisa.tensor_reduce: axis={axis} on a tile of shape {x.shape}; the reduced "
                       f"axes must be the last contiguous free dimensions, ending at axis {x.ndim - 1}")
    with _scratch():
        res = _gen1.tensor_reduce(_op(op), x, axis, negate=negate, keepdims=keepdims, dtype=_dt.float32)
    _write(d, res.data, "tensor_reduce", f"reduction of {x.shape} over axis {axis}")


def tensor_partition_reduce(dst, op, data, name=None):
    """Reduce ``data`` across its partitions with ``op`` into a one-partition ``dst`` (GpSimd: SBUF only)."""
    d = _check_dst(dst, "tensor_partition_reduce", (_sbuf,))
    x = _gen1._tile(data, "data", "tensor_partition_reduce", (_sbuf,))
    with _scratch():
        res = _gen1.tensor_partition_reduce(_op(op), x, dtype=_dt.float32)
    _write(d, res.data, "tensor_partition_reduce")


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """Scan along the free axis: ``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` into ``dst``."""
    d = _check_dst(dst, "tensor_tensor_scan")
    with _scratch():
        res = _gen1.tensor_tensor_scan(data0, data1, initial, _op(op0), _op(op1), reverse0, reverse1,
                                       dtype=_dt.float32)
    _write(d, res.data, "tensor_tensor_scan")


def memset(dst, value, engine=engine.unknown, name=None):
    """Fill ``dst`` with the constant ``value`` (Vector or GpSimd engine; GpSimd cannot reach PSUM)."""
    d = _check_dst(dst, "memset")
    _gpsimd_psum(engine, "memset", d)
    _prof.instruction("GpSimd" if engine == "GpSimd" else "Vector", d.data)
    _write(d, _np.full(d.shape, value), "memset")


def _pattern_values(pattern, offset, channel_multiplier, parts):
    pattern = [list(p) for p in pattern]
    vals = _np.full((parts, 1), int(offset), dtype=_np.int64) + _np.arange(parts, dtype=_np.int64)[:, None] * int(
        channel_multiplier)
    for step, num in pattern:
        vals = (vals[..., None] + _np.arange(int(num), dtype=_np.int64) * int(step)).reshape(parts, -1)
    return vals


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """Fill SBUF ``dst`` with ``offset + p * channel_multiplier + sum(i_k * step_k)`` (GpSimd engine).

    ``pattern`` is ``[[step, num], ...]`` (up to 4-D), the number of elements
    per partition of ``dst`` is the product of the ``num``s; int32 arithmetic,
    cast to ``dst.dtype``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.iota.html)
    """
    d = _check_dst(dst, "iota", (_sbuf,))
    if not isinstance(pattern, (list, tuple)):
        # An nl.arange / nl.mgrid expression, as the first generation took it.
        vals = _np.asarray(pattern)
        vals = vals[:, None] if vals.ndim == 1 else vals
    else:
        vals = _pattern_values(pattern, offset, channel_multiplier, d.shape[0])
        n = int(_np.prod([p[1] for p in pattern]))
        if n != _per_partition(d.shape):
            raise _NKIError("dst shape", f"nisa.iota: pattern {pattern} generates {n} elements per partition, dst "
                           f"{d.shape} holds {_per_partition(d.shape)}")
    _prof.instruction("GpSimd", vals)
    _write(d, vals.astype(_np.int32), "iota")


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, offset=0,
                  name=None):
    """``dst = where(cmp_op(offset + p * channel_multiplier + pattern, 0), on_true_tile, on_false_value)``."""
    d = _check_dst(dst, "affine_select", (_sbuf,))
    x = _gen1._tile(on_true_tile, "on_true_tile", "affine_select", (_sbuf,))
    _mark_read(x)
    pred_vals = _pattern_values(pattern, offset, channel_multiplier, x.shape[0])
    cmp = _nl.np_function(cmp_op if cmp_op is not None else _nl.equal)
    cond = _np.asarray(cmp(pred_vals, 0)).reshape(x.shape)
    out = _np.where(cond, _dt.compute_view(x.data), _np.float32(on_false_value))
    _prof.instruction("GpSimd", out)
    _write(d, out, "affine_select")


def bn_stats(dst, data, name=None):
    """Per-partition mean/variance statistics of ``data`` (<= 512 elements) into ``dst`` (Vector engine)."""
    d = _check_dst(dst, "bn_stats")
    with _scratch():
        res = _gen1.bn_stats(data, dtype=_dt.float32)
    _write(d, res.data, "bn_stats")


def bn_aggr(dst, data, name=None):
    """Combine ``bn_stats`` outputs into [P, 2] mean and variance in ``dst``."""
    d = _check_dst(dst, "bn_aggr")
    with _scratch():
        res = _gen1.bn_aggr(data, dtype=_dt.float32)
    _write(d, res.data, "bn_aggr")


# The documented names of the current nki.isa page (instructions, config enums, target), and the
# engine shorthands and VirtualRegister its pages use.
__all__ = sorted(n for n in (
    "nc_matmul", "nc_matmul_mx", "nc_transpose", "activation", "activation_reduce", "activate2", "tensor_reduce",
    "tensor_partition_reduce", "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar",
    "tensor_scalar_reduce", "tensor_scalar_cumulative", "tensor_copy", "tensor_copy_predicated", "exponential",
    "reciprocal", "quantize_mx", "iota", "dropout", "affine_select", "range_select", "select_reduce",
    "sequence_bounds", "memset", "bn_stats", "bn_aggr", "local_gather", "nc_n_gather", "dma_copy", "dma_transpose",
    "dma_compute", "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle", "register_alloc",
    "register_load", "register_move", "register_store", "core_barrier", "sendrecv", "sendrecv_compute", "rng", "rand2",
    "rand_set_state", "rand_get_state", "set_rng_seed", "nonzero_with_count", "topk",
    "engine", "dma_engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version",
    "get_nc_version", "VirtualRegister", "unknown_engine", "tensor_engine", "vector_engine", "scalar_engine",
    "gpsimd_engine") if n in globals())

# dst= instructions write into declared tiles; they run one program at a time (no batched form yet).
_nl1._guard_module(globals(), set(), "nisa")
