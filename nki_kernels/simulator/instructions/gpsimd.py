"""GpSimd Engine instructions: segment bounds, per-partition gathers, nonzero compaction.

GpSimd cannot access PSUM: every operand and destination here is in SBUF.
Semantics follow the current ``nki.isa`` reference pages.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import recording as _prof
from ..core import sbuf
from ..errors import NKIError
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from .registry import Gen1
from . import functional as _functional  # the computing forms both generations share
from .operands import check_dst, instruction, max_rank, per_partition, rows, tile_operand, write
from . import target
from .operands import alu
from .operands import scratch

_SB = (sbuf,)
GPSIMD_CORES = 8
PARTITIONS_PER_CORE = 16


def _bounds(seq):
    """[start, end) of the segment of each element (ID 0 is padding: start n, end -1)."""
    n = len(seq)
    lo = np.zeros(n, np.int64)
    hi = np.zeros(n, np.int64)
    for i in range(n):
        if seq[i] == 0:
            lo[i] = n
        elif i and seq[i] == seq[i - 1]:
            lo[i] = lo[i - 1]
        else:
            lo[i] = i
    for i in range(n - 1, -1, -1):
        if seq[i] == 0:
            hi[i] = -1
        elif i < n - 1 and seq[i] == seq[i + 1]:
            hi[i] = hi[i + 1]
        else:
            hi[i] = i + 1
    return lo, hi


@instruction(engine="GpSimd", cost=_costs.gpsimd_default)
def sequence_bounds(dst, segment_ids, name=None):
    """For each element of ``segment_ids`` ([1, n], float32/int32) the bounds of its segment:
    ``dst[0, 0, i]`` the start index, ``dst[0, 1, i]`` the end index (one past the last element);
    padding (ID 0) gets start ``n`` and end ``-1`` (GpSimd engine).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.sequence_bounds.html)
    """
    op = "sequence_bounds"
    d = check_dst(dst, op, _SB)
    s = tile_operand(segment_ids, "segment_ids", op, _SB)
    for t, what in ((s, "segment_ids"), (d, "dst")):
        if t.dtype not in (dt.float32, dt.int32):
            raise NKIError("dtype", f"nisa.{op}: {what} dtype {t.dtype}; it must be float32 or int32")
    if s.shape[0] != 1:
        raise NKIError("partition dimension", f"nisa.{op}: segment_ids {s.shape} must have one partition")
    seq = np.asarray(s.data).reshape(-1)
    if np.any(seq < 0):
        raise NKIError(op, f"nisa.{op}: segment IDs must be non-negative")
    n = seq.size
    if d.shape[0] != 1 or per_partition(d.shape) != 2 * n:
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must be [1, 2, {n}] for segment_ids {s.shape}")
    lo, hi = _bounds(seq)
    out = np.stack([lo, hi])[None]
    _prof.instruction("GpSimd", out)
    write(d, out.reshape(d.shape), op)


@instruction(engine="GpSimd", cost=_costs.gpsimd_default)
def nc_n_gather(dst, data, indices, name=None):
    """``dst[p, j] = data[p].flatten()[indices[p, j]]`` within each partition (GpSimd engine); data,
    indices (uint32) and dst in SBUF, dst with data's dtype, all with the same partitions.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_n_gather.html)
    """
    op = "nc_n_gather"
    d = check_dst(dst, op, _SB)
    x = tile_operand(data, "data", op, _SB)
    i = tile_operand(indices, "indices", op, _SB)
    if i.dtype != dt.uint32:
        raise NKIError("dtype", f"nisa.{op}: indices dtype {i.dtype}; it must be uint32")
    if d.dtype != x.dtype:
        raise NKIError("dtype", f"nisa.{op}: dst dtype {d.dtype} differs from data dtype {x.dtype}")
    if not x.shape[0] == i.shape[0] == d.shape[0]:
        raise NKIError("operand shapes", f"nisa.{op}: data {x.shape}, indices {i.shape} and dst {d.shape} need "
                       "the same partition size")
    if per_partition(d.shape) != per_partition(i.shape):
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} needs one element per index ({i.shape})")
    src = rows(x.data, x.shape[0])
    idx = rows(i.data, i.shape[0]).astype(np.int64)
    if idx.size and idx.max() >= src.shape[1]:
        raise NKIError("index out of bounds", f"nisa.{op}: index {int(idx.max())} >= {src.shape[1]} elements per "
                       f"partition of data {x.shape}")
    out = np.take_along_axis(src, idx, axis=1)
    _prof.instruction("GpSimd", out)
    write(d, out.reshape(d.shape), op)


@instruction(engine="GpSimd", cost=_costs.gpsimd_default)
def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    """Per GpSimd core (partitions 0, 16, ..., 112 only): the positions (plus ``index_offset``) of the
    nonzero elements of that partition of ``src``, then ``padding_val``, then the count, into
    ``dst`` (one more element per partition than src); other partitions of dst are unmodified.
    NeuronCore-v3 and newer.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nonzero_with_count.html)
    """

    op = "nonzero_with_count"
    target.require(op, target.nc_version.gen3)
    d = check_dst(dst, op, _SB)
    s = tile_operand(src, "src", op, _SB)
    if s.dtype not in (dt.float32, dt.int32) or d.dtype != dt.int32:
        raise NKIError("dtype", f"nisa.{op}: src ({s.dtype}) must be float32 or int32 and dst ({d.dtype}) int32")
    n = per_partition(s.shape)
    if d.shape[0] != s.shape[0] or per_partition(d.shape) != n + 1:
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must have src's {s.shape[0]} partitions and "
                       f"{n + 1} elements per partition (the positions, then the count)")
    sv = rows(dt.compute_view(s.data), s.shape[0])
    out = np.array(rows(dt.compute_view(d.data), d.shape[0]), dtype=np.float64)
    for p in range(0, s.shape[0], PARTITIONS_PER_CORE):
        nz = np.flatnonzero(sv[p])
        out[p, :] = padding_val
        out[p, :nz.size] = nz + index_offset
        out[p, n] = nz.size
    _prof.instruction("GpSimd", out)
    write(d, out.reshape(d.shape), op)


SNAKE = 16  # partitions of one top-k group (its "snake" layout)


@instruction(engine="GpSimd", cost=_costs.gpsimd_default)
def topk(val_dst, idx_dst, src, n, sorted=False, name=None):  # noqa: A002 - the documented parameter name
    """The ``k`` largest of the first ``n`` values of each 16-partition group of ``src`` (bf16, SBUF) and
    their indices, GpSimd engine. A group's values are read in snake order (element ``e`` at
    partition ``e % 16``, column ``e // 16``) and results go out the same way (result ``j`` at
    partition ``j % 16``, column ``j // 16``), ascending by value; ``k`` is val_dst's free size.
    The simulator requires ``k`` to be a multiple of 16 (how the last, partial column is filled
    is not stated on the page).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.topk.html)
    """
    op = "topk"
    v = check_dst(val_dst, op, _SB)
    i = check_dst(idx_dst, op, _SB)
    s = tile_operand(src, "src", op, _SB)
    if s.dtype != dt.bfloat16 or v.dtype != dt.bfloat16:
        raise NKIError("dtype", f"nisa.{op}: src ({s.dtype}) and val_dst ({v.dtype}) must be bfloat16")
    if i.dtype != dt.uint32:
        raise NKIError("dtype", f"nisa.{op}: idx_dst dtype {i.dtype}; it must be uint32")
    P = s.shape[0]
    k = per_partition(v.shape)
    n = int(n)
    if P % SNAKE or v.shape[0] != P or i.shape[0] != P or per_partition(i.shape) != k:
        raise NKIError("operand shapes", f"nisa.{op}: src {s.shape}, val_dst {v.shape}, idx_dst {i.shape}: the same "
                       "partitions, a multiple of 16, and val_dst / idx_dst [P, k]")
    if not 8 <= n < 65536 or not 1 <= k <= n or k >= 32768 or per_partition(s.shape) * SNAKE < n:
        raise NKIError(op, f"nisa.{op}: n={n}, k={k}: need 8 <= n < 65536, 1 <= k <= n, k < 32768 and src free "
                       f"size >= ceil(n / 16) (src {s.shape})")
    if k % SNAKE:
        raise NKIError(op, f"nisa.{op}: k={k} is not a multiple of 16; the simulator does not model how the last "
                       "partial snake column is written")
    sv = rows(dt.compute_view(s.data), P).astype(np.float32)
    vals = rows(np.array(v.data), P).copy()
    idxs = rows(np.array(i.data), P).copy()
    for g in range(0, P, SNAKE):
        snake = sv[g:g + SNAKE].T.reshape(-1)[:n]  # element e = p + 16 * c
        order = np.argsort(-snake, kind="stable")[:k][::-1]  # the k largest, ascending
        for j, e in enumerate(order):
            vals[g + j % SNAKE, j // SNAKE] = snake[e]
            idxs[g + j % SNAKE, j // SNAKE] = e
    _prof.instruction("GpSimd", vals)
    write(v, vals.reshape(v.shape), op, "top-k values")
    write(i, idxs.reshape(i.shape), op, "top-k indices")


def _pattern_values(pattern, offset, channel_multiplier, parts):
    """``offset + p * channel_multiplier + sum(i_k * step_k)`` for an ``[[step, num], ...]`` pattern."""
    pattern = [list(p) for p in pattern]
    vals = np.full((parts, 1), int(offset), dtype=np.int64) + np.arange(parts, dtype=np.int64)[:, None] * int(
        channel_multiplier)
    for step, num in pattern:
        vals = (vals[..., None] + np.arange(int(num), dtype=np.int64) * int(step)).reshape(parts, -1)
    return vals


@instruction(engine="GpSimd", cost=_costs.gpsimd_start, batched=True, gen1=Gen1(batched=True))
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """Fill SBUF ``dst`` with ``offset + p * channel_multiplier + sum(i_k * step_k)`` (GpSimd engine).

    ``pattern`` is ``[[step, num], ...]`` (up to 4-D), the number of elements
    per partition of ``dst`` is the product of the ``num``s; int32 arithmetic,
    cast to ``dst.dtype``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.iota.html)
    """
    d = check_dst(dst, "iota", _SB)
    if not isinstance(pattern, (list, tuple)):
        # An nl.arange / nl.mgrid expression, as the first generation took it.
        vals = np.asarray(pattern)
        vals = vals[:, None] if vals.ndim == 1 else vals
    else:
        if len(pattern) > 4:
            raise NKIError("pattern", f"nisa.iota: pattern {pattern} has {len(pattern)} [step, num] entries; the "
                           "access pattern is up to 4D")
        vals = _pattern_values(pattern, offset, channel_multiplier, d.shape[0])
        n = int(np.prod([p[1] for p in pattern]))
        if n != per_partition(d.shape):
            raise NKIError("dst shape", f"nisa.iota: pattern {pattern} generates {n} elements per partition, dst "
                           f"{d.shape} holds {per_partition(d.shape)}")
    _prof.instruction("GpSimd", vals)
    write(d, vals.astype(np.int32), "iota")


@instruction(engine="GpSimd", cost=_costs.gpsimd_start)
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=np.equal, offset=0, name=None):
    """``dst = where(cmp_op(offset + p * channel_multiplier + pattern, 0), on_true_tile, on_false_value)``
    (GpSimd engine, SBUF only; ``cmp_op`` defaults to equality). NKI 0.3.0 moved ``offset`` "from 3rd
    positional argument to keyword argument with default 0" (release notes): the positional order is
    the Neuron 2.32 page's ``(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op,
    offset, name)``; ``offset`` may be a register (read when the instruction runs)."""

    d = check_dst(dst, "affine_select", _SB)
    x = tile_operand(on_true_tile, "on_true_tile", "affine_select", _SB)
    pred_vals = _pattern_values(pattern, offset, channel_multiplier, x.shape[0])
    cond = np.asarray(alu(cmp_op if cmp_op is not None else np.equal)(pred_vals, 0)).reshape(x.shape)
    out = np.where(cond, dt.compute_view(x.data), np.float32(on_false_value))
    _prof.instruction("GpSimd", out)
    write(d, out, "affine_select")


@instruction(engine="GpSimd", cost=_costs.gpsimd_default, gen1=Gen1(batched=True))
def tensor_partition_reduce(dst, op, data, name=None):
    """Reduce ``data`` across its partitions with ``op`` into a one-partition ``dst`` (GpSimd: SBUF only)."""

    d = check_dst(dst, "tensor_partition_reduce", _SB)
    x = tile_operand(data, "data", "tensor_partition_reduce", _SB)
    max_rank("tensor_partition_reduce", 5, dst=d, data=x)
    # integer tiles reduce in their own integers (bitwise_and / bitwise_or keep every bit), else in fp32
    exact = d.dtype.kind in "iu" and x.dtype.kind in "iu"
    with scratch():
        res = _functional.tensor_partition_reduce(op, x, dtype=x.dtype if exact else dt.float32)
    write(d, res.data, "tensor_partition_reduce")


_ELEMS_PER_IDX = (1, 2, 4, 8, 16, 32)  # the page's num_elem_per_idx values
MAX_INDICES_PER_CORE = 4096


@instruction(engine="GpSimd", cost=_costs.gpsimd_default)
def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    """Gather within each GpSimd core's 16 partitions (GpSimd engine, SBUF only).

    Core ``c`` reads the indices of its partitions ``16c .. 16c + 15`` of ``index``,
    flattened partition-first (index ``[16, k]`` read column by column), keeps the
    first ``num_valid_indices`` (default all ``16 * k``), and every partition ``p``
    of the core gathers, for each index ``i``, the ``num_elem_per_idx`` contiguous
    elements starting at element ``i`` of its own data:
    ``dst[p, j, :] = src_buffer[p].flat[i_j : i_j + num_elem_per_idx]``. An index
    reaching past a partition's data is an error. The page's rules: uint16 indices, dst
    in src_buffer's dtype (no casting), ``num_elem_per_idx`` in [1, 2, 4, 8, 16, 32], at
    most 4096 indices per core.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.local_gather.html)
    """
    op = "local_gather"
    d = check_dst(dst, op, _SB)
    s = tile_operand(src_buffer, "src_buffer", op, _SB)
    ix = tile_operand(index, "index", op, _SB)
    if ix.dtype != dt.uint16:
        raise NKIError("dtype", f"nisa.{op}: index (shape {ix.shape}) has dtype {ix.dtype}; the indices in index "
                       "must be uint16")
    if d.dtype != s.dtype:
        raise NKIError("dtype", f"nisa.{op}: dst dtype {d.dtype} differs from src_buffer dtype {s.dtype}; "
                       "local_gather preserves the input data type, no casting is allowed")
    if int(num_elem_per_idx) not in _ELEMS_PER_IDX:
        raise NKIError(op, f"nisa.{op}: num_elem_per_idx={num_elem_per_idx}; it must be one of "
                       f"{list(_ELEMS_PER_IDX)}")
    P = s.shape[0]
    if ix.shape[0] != P or P % PARTITIONS_PER_CORE:
        raise NKIError("operand shapes", f"nisa.{op}: index {ix.shape} and src_buffer {s.shape} need the same "
                       "partitions, whole 16-partition GpSimd cores")
    n = int(num_elem_per_idx)
    per_core = PARTITIONS_PER_CORE * per_partition(ix.shape)
    nv = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 1 <= nv <= per_core:
        raise NKIError(op, f"nisa.{op}: num_valid_indices={num_valid_indices} must be 1..{per_core} (the indices "
                       "of one core's 16 partitions)")
    if nv > MAX_INDICES_PER_CORE:
        raise NKIError(op, f"nisa.{op}: {nv} indices per GpSimd core (index {ix.shape}, num_valid_indices="
                       f"{num_valid_indices}); the number of indices per core must be <= {MAX_INDICES_PER_CORE}")
    if d.shape[0] != P or per_partition(d.shape) != nv * n:
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must have {P} partitions and {nv} x {n} elements "
                       "per partition")
    src = rows(s.data, P)
    idx = rows(ix.data, P).astype(np.int64)
    out = np.empty((P, nv, n), s.dtype)
    for c in range(0, P, PARTITIONS_PER_CORE):
        flat = idx[c:c + PARTITIONS_PER_CORE].reshape(-1, order="F")[:nv]
        if flat.size and (flat.min() < 0 or flat.max() + n > src.shape[1]):
            raise NKIError("index out of bounds", f"nisa.{op}: core {c // PARTITIONS_PER_CORE} gathers elements "
                           f"{int(flat.min())}..{int(flat.max()) + n - 1} of partitions holding {src.shape[1]}")
        pos = flat[:, None] + np.arange(n)[None, :]
        out[c:c + PARTITIONS_PER_CORE] = src[c:c + PARTITIONS_PER_CORE][:, pos]
    _prof.instruction("GpSimd", out)
    write(d, out.reshape(d.shape), op)
