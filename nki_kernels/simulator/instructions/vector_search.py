"""Vector Engine instructions: cross-partition shuffles, predicated copies, top-8 search and replace.

Semantics and operand rules follow the current ``nki.isa`` reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.isa.html).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import recording as _prof
from ..core import Tile, psum
from ..errors import NKIError
from ..indexing import _full_mask
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from .operands import (check_dst, first_generation,
                       instruction, max_rank, partition_range,
                       per_partition, rows, same_rows, tile_operand, values_of, write)

QUADRANT = 32  # partitions of a Vector Engine cross-partition quadrant
SHUFFLE_KEEP = 255  # shuffle_mask value: leave the output partition unmodified


_QUADRANT_STARTS = {32: (0, 32, 64, 96), 64: (0, 64), 96: (0,), 128: (0,)}


def _quadrant_rule(op, name, tile, active):
    """The page's start-partition rule: with ``num_active_partitions`` = 32 the access starts at
    0/32/64/96, with 64 at 0/64, with 96 or 128 at 0."""
    start, count = partition_range(tile)
    allowed = _QUADRANT_STARTS[active]
    if start not in allowed:
        raise NKIError("partition quadrant", f"nisa.{op}: {name} starts at partition {start} ({count} partitions); "
                       f"with num_active_partitions={active} the start partition must be "
                       f"{'/'.join(map(str, allowed))}")


@instruction(engine="Vector", cost=_costs.engine_default)
def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    """Cross-partition move within 32-partition quadrants: ``dst[q*32 + i] = src[q*32 + shuffle_mask[i]]``.

    ``shuffle_mask`` has 32 entries (ints in 0..31, or 255 to leave that output
    partition unmodified); the same mask applies to every quadrant of ``dst``,
    quadrants counted from each operand's first partition. src and dst are in
    SBUF or PSUM, have the same dtype and elements per partition; the shuffle may
    be in place. With ``num_active_partitions = ceil(max(src, dst partitions) / 32) * 32``
    the src and dst start partitions must be 0/32/64/96 (32 active), 0/64 (64) or 0 (96, 128).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_stream_shuffle.html)
    """
    d = check_dst(dst, "nc_stream_shuffle")
    s = tile_operand(src, "src", "nc_stream_shuffle")
    if d.dtype != s.dtype:
        raise NKIError("dtype", f"nisa.nc_stream_shuffle: dst dtype {d.dtype} differs from src dtype {s.dtype}; "
                       "the shuffle copies bits, so both must have the same dtype")
    if per_partition(d.shape) != per_partition(s.shape):
        raise NKIError("operand shapes", f"nisa.nc_stream_shuffle: dst {d.shape} and src {s.shape} must have the "
                       "same number of elements per partition")
    mask = [int(m) for m in shuffle_mask]
    if len(mask) != QUADRANT:
        raise NKIError("shuffle_mask", f"nisa.nc_stream_shuffle: shuffle_mask has {len(mask)} entries; it must "
                       "list 32 (one source partition per output partition of a quadrant)")
    bad = [m for m in mask if not (0 <= m < QUADRANT or m == SHUFFLE_KEEP)]
    if bad:
        raise NKIError("shuffle_mask", f"nisa.nc_stream_shuffle: shuffle_mask values {bad} are outside 0..31 "
                       "(and not 255, 'unmodified')")
    nd, ns = d.shape[0], s.shape[0]
    active = -(-max(nd, ns) // QUADRANT) * QUADRANT
    _quadrant_rule("nc_stream_shuffle", "dst", d, active)
    _quadrant_rule("nc_stream_shuffle", "src", s, active)
    sv = rows(s.data, ns)
    out = np.array(rows(d.data, nd))
    for p in range(nd):
        m = mask[p % QUADRANT]
        if m == SHUFFLE_KEEP:
            continue
        q = (p // QUADRANT) * QUADRANT + m
        if q >= ns:
            raise NKIError("shuffle_mask", f"nisa.nc_stream_shuffle: output partition {p} reads source partition "
                           f"{q} (quadrant {p // QUADRANT}, shuffle_mask[{p % QUADRANT}] = {m}) but src {s.shape} "
                           f"has {ns} partitions")
        out[p] = sv[q]
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), "nc_stream_shuffle")


_PREDICATE_DTYPES = (dt.uint8, dt.uint16, dt.uint32)
_GEN1_PREDICATE_DTYPES = (dt.bool_,) + _PREDICATE_DTYPES  # (v2.26: bool is "boolean stored as uint8")


@instruction(engine="Vector", cost=_costs.engine_default)
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    """Copy ``src`` (a tile or a scalar) into ``dst`` where ``predicate`` is non-zero (zero with
    ``reverse_pred``); elsewhere ``dst`` is unmodified (Vector Engine).

    src (a tensor), dst and predicate occupy the same partitions and elements per
    partition; predicate is uint8/uint16/uint32; src and dst share a dtype (a
    scalar src of dst's kind: a float into a float dst, an int into an integer dst); src and
    predicate are not both in PSUM; ``reverse_pred`` only with a scalar src; rank <= 4.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.tensor_copy_predicated.html)
    """
    copy_predicated(dst, src, predicate, reverse_pred)


def copy_predicated(dst, src, predicate, reverse_pred=False, gen1=False):
    """:func:`tensor_copy_predicated`'s body; ``gen1``: the first generation's page (v2.26), whose examples
    pass a NumPy bool array as the predicate (its dtype table: bool is "boolean stored as uint8")."""
    op = "tensor_copy_predicated"
    d = check_dst(dst, op)
    p = tile_operand(predicate, "predicate", op)
    if p.dtype not in (_GEN1_PREDICATE_DTYPES if gen1 else _PREDICATE_DTYPES):
        raise NKIError("predicate dtype", f"nisa.{op}: predicate (shape {p.shape}) has dtype {p.dtype}; it must be "
                       f"{'bool, ' if gen1 else ''}uint8, uint16 or uint32")
    same_rows(op, d, "dst", p, "predicate")
    if not gen1:
        _v233_rules(op, d, p, src, reverse_pred)
    if isinstance(src, Tile):
        s = tile_operand(src, "src", op)
        same_rows(op, d, "dst", s, "src")
        if s.dtype != d.dtype:
            raise NKIError("dtype", f"nisa.{op}: src dtype {s.dtype} differs from dst dtype {d.dtype}; they must "
                           "be the same")
        if s.buffer is psum and p.buffer is psum:
            raise NKIError("operand memory", f"nisa.{op}: src and predicate cannot both be in PSUM")
        vals = np.reshape(s.data, d.shape)
    else:
        if isinstance(src, (bool, np.bool_)) or not isinstance(src, (int, float, np.integer, np.floating)):
            raise NKIError("operand type", f"nisa.{op}: src must be a tile or a Python int/float, got "
                           f"{type(src).__name__}")
        if isinstance(src, (float, np.floating)) and not dt.is_float(d.dtype):
            raise NKIError("dtype", f"nisa.{op}: a float scalar src needs a float dst, dst is {d.dtype}")
        vals = np.full(d.shape, src)
    cond = np.reshape(p.data, d.shape) != 0
    if reverse_pred:
        cond = ~cond
    _prof.instruction("Vector", d.data)
    write(d, np.where(cond, dt.cast(vals, d.dtype), d.data), op)


def _v233_rules(op, d, p, src, reverse_pred):
    """The current page's rules (NKI 0.7.0, Neuron 2.33,
    https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.tensor_copy_predicated.html):
    "reverse_pred can only be set to true if src is a scalar"; "dst, predicate, and a tensor src can have
    at most three free dimensions (maximum rank 4)"; a scalar src: "a Python float requires a float dst
    dtype and a Python int requires an integer dst dtype". The first generation's page has none of them."""
    tensor_src = isinstance(src, Tile)
    if reverse_pred and tensor_src:
        raise NKIError("reverse_pred", f"nisa.{op}: reverse_pred=True with a tensor src {src.shape}; reverse_pred "
                       "can only be set to true if src is a scalar")
    max_rank(op, 4, dst=d, predicate=p, **({"src": src} if tensor_src else {}))
    if (not tensor_src and isinstance(src, (int, np.integer)) and not isinstance(src, (bool, np.bool_))
            and dt.is_float(d.dtype)):
        raise NKIError("dtype", f"nisa.{op}: a Python int src ({src}) needs an integer dst, dst is {d.dtype}; "
                       "write it as a float for a float dst")


# the first generation's entry point: a bool predicate too (see copy_predicated)
tensor_copy_predicated_gen1 = first_generation(copy_predicated, "tensor_copy_predicated")


def _search_rows(op, data, mask=None):
    """``data`` as fp32 ``[P, n]`` with 8 <= n <= 16384 (masked-off elements never match: NaN)."""
    x = tile_operand(data, "data" if op != "max8" else "src", op)
    v = values_of(x, "data", op)
    if mask is not None:
        m = _full_mask(mask, x.shape)
        if m is not None:
            v = np.where(rows(m, x.shape[0]), v, np.nan)
    if not 8 <= v.shape[1] <= 16384:
        raise NKIError(op, f"nisa.{op} reads 8..16384 elements per partition, got {v.shape[1]} (shape {x.shape})")
    return x, v


def _eight(op, vals, parts):
    v = values_of(vals, "vals", op)
    if v.shape != (parts, 8):
        raise NKIError("operand shapes", f"nisa.{op}: vals {vals.shape} must hold 8 values in each of the "
                       f"{parts} partitions of data")
    return v


@instruction(engine="Vector", cost=_costs.engine_default)
def max8(dst, src, name=None):
    """The 8 largest values of each partition of ``src`` (up to 3-D, 8..16384 elements), descending,
    into a 2-D ``[P, 8]`` ``dst``; fp32 compute, converted to ``dst.dtype``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.max8.html)
    """
    d = check_dst(dst, "max8")
    x, v = _search_rows("max8", src)
    if x.ndim > 3:
        raise NKIError("operand shapes", f"nisa.max8: src has shape {x.shape}; the source tile can be up to "
                       "3-dimensional")
    if d.ndim != 2 or d.shape[0] != x.shape[0] or d.shape[1] != 8:
        raise NKIError("dst shape", f"nisa.max8: dst {d.shape} must be [{x.shape[0]}, 8] (the output tile is always "
                       "2-dimensional)")
    # the 8 largest by a partition (O(n) per row), then sorted: a full sort of 16384-element rows
    # dominated nki-library's top-k
    top = -np.partition(-v, 7, axis=1)[:, :8] if v.shape[1] > 8 else v
    out = -np.sort(-top, axis=1)
    _prof.instruction("Vector", out)
    write(d, out, "max8")


@instruction(engine="Vector", cost=_costs.engine_default)
def nc_find_index8(dst, data, vals, name=None):
    """Index (from 0) of the first occurrence of each of the 8 ``vals`` in each partition of
    ``data``, into a uint16/uint32 ``[P, 8]`` ``dst``. A value that occurs in ``vals`` k times
    takes its first k occurrences, in ascending order; a value not found gives the all-ones
    sentinel (0xFFFF / 0xFFFFFFFF).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_find_index8.html)
    """
    find_index8(dst, data, vals)


def find_index8(dst, data, vals, mask=None):
    """:func:`nc_find_index8` with the first generation's ``mask`` (applied to ``data`` only)."""
    d = check_dst(dst, "nc_find_index8")
    if d.dtype not in (dt.uint16, dt.uint32):
        raise NKIError("dst dtype", f"nisa.nc_find_index8: dst dtype {d.dtype}; the indices are uint16 or uint32")
    x, v = _search_rows("nc_find_index8", data, mask)
    want = _eight("nc_find_index8", vals, x.shape[0])
    if d.shape[0] != x.shape[0] or per_partition(d.shape) != 8:
        raise NKIError("dst shape", f"nisa.nc_find_index8: dst {d.shape} must be [{x.shape[0]}, 8]")
    sentinel = np.iinfo(d.dtype).max
    out = np.full((x.shape[0], 8), sentinel, np.int64)
    used = np.zeros(v.shape, bool)
    for i in range(8):
        rows, first = _first_unused(v, want[:, i], used)
        out[rows, i] = first
    _prof.instruction("Vector", out)
    write(d, out, "nc_find_index8")


def _first_unused(v, want, used):
    """Per row of ``v``: the first position equal to ``want[row]`` not yet in ``used`` (marked now);
    returns the rows that have one and those positions."""
    eq = (v == want[:, None]) & ~used
    rows = np.flatnonzero(eq.any(axis=1))
    first = eq[rows].argmax(axis=1)
    used[rows, first] = True
    return rows, first


@instruction(engine="Vector", cost=_costs.engine_default)
def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    """``dst`` = ``data`` with the first occurrence of each of the 8 ``vals`` (per partition)
    replaced by ``imm``; ``dst_idx`` (optional, [P, 8]) receives the matched positions. Duplicate
    vals are processed in reverse order (7 .. 0), so the first matching position goes to the
    highest slot among the duplicates.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_match_replace8.html)
    """
    op = "nc_match_replace8"
    d = check_dst(dst, op)
    x, v = _search_rows(op, data)
    want = _eight(op, vals, x.shape[0])
    same_rows(op, d, "dst", x, "data")
    out = v.copy()
    idx = np.full((x.shape[0], 8), -1, np.int64)
    used = np.zeros(v.shape, bool)
    for i in range(7, -1, -1):
        rows, first = _first_unused(v, want[:, i], used)
        idx[rows, i] = first
        out[rows, first] = imm
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)
    if dst_idx is not None:
        di = check_dst(dst_idx, op)
        if di.shape[0] != x.shape[0] or per_partition(di.shape) != 8:
            raise NKIError("dst shape", f"nisa.{op}: dst_idx {di.shape} must be [{x.shape[0]}, 8]")
        sentinel = np.iinfo(di.dtype).max if np.issubdtype(di.dtype, np.integer) else -1
        write(di, np.where(idx < 0, sentinel, idx), op, "matched indices")
