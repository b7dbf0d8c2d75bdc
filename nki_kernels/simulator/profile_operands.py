"""How the profiler's recorder names the operands of an instruction: a tile, a view of a tile, a
block of a block-dimension tensor, a directly placed tile, or an HBM access, as ``(space, unit, box)``.

``unit`` is what the allocator stand-in (:mod:`.profile_allocator`) gives a region: the memory model's
record of an allocation (a block of a block-dimension tensor: its tensor's record), or a tuple for
bytes that need no region (directly placed tiles, HBM tensors). ``box`` narrows the operand to the
partitions and bytes (an on-chip view) or the element ranges (an HBM access) it touches, so that the
timing model orders only instructions whose operands overlap. The shapes' partition and free sizes
(the cost rules' inputs) are read here too.

A first-generation op's reads are the records the memory model saw it touch; the tiles it was
given (:func:`_view_reads`) narrow each record to the views of it the op read: their boxes for the
dependencies and their elements per partition for the cost (:func:`_read_operands`).
"""

from __future__ import annotations

import inspect
import math
import operator
import os
import sys
from itertools import compress

import numpy as np

from .core import Access, Tile


def _space(buf_index) -> str:
    return "psum" if buf_index == 1 else "sbuf"


def _root(tile):
    while tile._parent is not None:
        tile = tile._parent
    return tile


def _view_box(view, root):
    """``((partition_lo, partition_hi), (byte_lo, byte_hi))`` that ``view`` covers in the partitions of
    ``root`` (a plain, row-major tile whose axis 0 is the partition axis), or ``None`` (all of it) when
    the view is not a simple strided view of it."""
    if view._thunk is not None or root._thunk is not None:  # (never compute a deferred value here)
        return None
    try:
        v, r = view._raw(), root._raw()
    except Exception:  # (a view reaching outside its tile: its reads raise later, not here)
        return None
    if root.pdim or r.ndim < 1 or not r.flags.c_contiguous or v.ndim < 1 or r.size == 0 or v.size == 0:
        return None
    if any(s < 0 for s in v.strides):
        return None
    rlo = r.__array_interface__["data"][0]
    vlo = v.__array_interface__["data"][0]
    ps = r.strides[0]
    off = vlo - rlo
    if off < 0 or off >= r.nbytes or ps <= 0:
        return None
    p0, b0 = divmod(off, ps)
    extent = sum((n - 1) * s for n, s in zip(v.shape[1:], v.strides[1:])) + v.itemsize
    p1 = p0 + ((v.shape[0] - 1) * v.strides[0]) // ps + 1 if v.strides[0] else p0 + 1
    if b0 + extent > ps:  # (a view reaching over a partition's end: say all of the partitions' bytes)
        return ((p0, max(p1, p0 + 1)), (0, ps))
    return ((p0, max(p1, p0 + 1)), (b0, b0 + extent))


def _rec_operand(rec, box=None):
    """The operand ``(space, unit, box)`` of a memory-model record (see :class:`_Allocator`)."""
    space = "psum" if rec.buf == 1 else "sbuf"  # (_space, inline: once per operand of every instruction)
    if rec.place is not None:  # direct allocation: the bytes themselves
        part, n, lo, hi = rec.place
        return (space, ("placed", space), ((part, part + n), (lo, hi)))
    if rec.root is not None:  # a block of a block-dimension tensor: that block of its tensor
        flat = 0
        for b, n in zip(rec.key, rec.root.shape):
            flat = flat * int(n) + int(b)
        return (space, rec.root, ("block", flat))
    return (space, rec, ("blocks",) if rec.blocks is not None else box)


def _nblocks(rec) -> int:
    """Blocks of a block-dimension tensor's record (its block axes: those of a block used so far, else
    the axes before the partition axis of its shape)."""
    key = next(iter(rec.blocks), None) if rec.blocks else None
    nb = len(key) if key is not None else 0
    if key is None:
        shape = tuple(rec.shape)
        lead = [i for i, n in enumerate(shape[:-1]) if n <= 128]
        nb = max(lead, key=lambda i: (shape[i], -i)) if lead else 0
    return math.prod(int(n) for n in rec.shape[:nb]) if nb else 1


def _tile_operand(tile):
    """The operand of a tile argument of a declared instruction (a view: its partitions and bytes)."""
    rec = tile._mem
    root = _root(tile)
    if rec is None:  # (a tile made outside any program: known by its root object)
        return ("psum" if tile.buffer.name == "psum" else "sbuf", ("tile", id(root)), None)
    box = None
    if tile is not root and rec is root._mem and rec.place is None and rec.root is None:
        box = _view_box(tile, root)
    return _rec_operand(rec, box)


def _arg_tiles(values, out):
    """Append the tiles among ``values`` (an op's arguments; lists and tuples of tiles too) to ``out``."""
    for v in values:
        if isinstance(v, Tile):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, Tile))
    return out


def _view_reads(tiles):
    """``[(record, operand, elements per partition)]`` of the tiles a first-generation op was given:
    a view its operand (box in its root) and size, a whole tile ``(record, None, 0)``."""
    out = []
    for t in tiles:
        rec = t._mem
        if rec is None:
            continue
        if t._parent is None or t._thunk is not None:
            out.append((rec, None, 0))
        else:
            out.append((rec, _tile_operand(t), _tile_geometry(t)[1]))
    return out


_ITEMSIZE = {}  # dtype -> itemsize (np.dtype() per record read costs more than the rest of its operand)


# (the frames of the simulator package: _gen1_call walks them to the API function that was called)
_SIM_DIR = os.path.dirname(os.path.abspath(__file__))


def _gen1_name():
    """The first-generation API function (``add``, ``load`` ...) whose hook is running: the outermost
    frame inside the simulator package (a generated op's own name from its closure)."""
    return _gen1_call(sys._getframe(3), None)[0]


def _gen1_call(f, tiles):
    """``(name, tiles)`` of the first-generation API call whose hook runs in frame ``f`` (the hook's
    caller): its name as :func:`_gen1_name` gives it and, unless ``tiles`` is ``None``, the tiles among
    the arguments of the simulator's frames up to that call appended to ``tiles`` (the operands, as
    the kernel gave them: views included)."""
    name = None
    for _ in range(10):
        if f is None:
            break
        code = f.f_code
        ci = _CODES.get(id(code))
        if ci is None or ci[0] is not code:
            ci = _code_info(code)
        _, own, args, op, get = ci
        if args is None:
            break
        if op or tiles is not None:
            loc = f.f_locals
            if op:
                own = loc.get("name") or loc.get("opname") or code.co_name
                if own == "iop":
                    own = "iadd"
                elif own.startswith(("_", "<")):
                    own = None
            if tiles is not None and args:
                try:
                    vals = get(loc) if get is not None else (loc.get(args[0]),)
                except KeyError:  # (an argument deleted in its function)
                    vals = [loc.get(a) for a in args]
                for v in compress(vals, map(_HOLDS.__getitem__, map(type, vals))):
                    if isinstance(v, Tile):
                        tiles.append(v)
                    elif isinstance(v, (list, tuple)):
                        tiles.extend(x for x in v if isinstance(x, Tile))
                    else:
                        _arg_tiles(v.values(), tiles)
        if own is not None:
            name = own
        f = f.f_back
    return name or "instr", tiles


class _Holds(dict):
    """type -> whether a value of it may hold tiles (a tile, a list or tuple, a dict), learnt on first
    sight: the walk then skips the other arguments (most of them) without a bytecode each."""

    def __missing__(self, t):
        v = self[t] = issubclass(t, (Tile, list, tuple, dict))
        return v


_HOLDS = _Holds()

# id(code) -> (code, its own API name or None, its argument names or None outside the simulator (the
# walk stops there), whether it is a generated op naming itself in its closure, an itemgetter of its
# arguments' values from the frame's locals when it has two or more): what _gen1_call reads of each
# frame, once per function (keyed by id: a code object's own hash reads its whole bytecode)
_CODES = {}


def _code_info(code):
    if not code.co_filename.startswith(_SIM_DIR):
        ci = (code, None, None, False, None)
    else:
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
        co = code.co_name
        args = code.co_varnames[:n]
        # (the arguments' values in one call: a tuple when there are two or more)
        ci = (code, None if co.startswith(("_", "<")) else co, args, co in ("op", "iop"),
              operator.itemgetter(*args) if len(args) > 1 else None)
    if len(_CODES) > 4096:
        _CODES.clear()
    _CODES[id(code)] = ci
    return ci


def _rec_elems(rec) -> int:
    """Elements per partition of a memory-model record (its whole tile)."""
    dt = rec.dtype
    isz = _ITEMSIZE.get(dt)
    if isz is None:
        isz = _ITEMSIZE[dt] = max(1, np.dtype(dt).itemsize)
    return max(1, rec.nbytes // isz)


def _read_operands(recs, views):
    """``(operands, records, elements per partition)`` that a first-generation op read: per record the
    memory model saw it read, each distinct view of it among ``views`` (:func:`_view_reads`), or the
    whole record when the op was given the tile itself or no view of it."""
    if not any(v[1] is not None for v in views):  # (the common case: whole tiles only)
        return [_rec_operand(r) for r in recs], list(recs), [_rec_elems(r) for r in recs]
    ops, out_recs, elems = [], [], []
    for r in recs:
        mine = [v for v in views if v[0] is r]
        if not mine or any(v[1] is None for v in mine):
            mine = ((r, _rec_operand(r), _rec_elems(r)),)
        first = len(ops)
        for _, op, n in mine:
            if op in ops[first:]:  # (the same region twice, e.g. nl.multiply(v, v): one operand)
                i = ops.index(op, first)
                elems[i] = max(elems[i], n)
                continue
            ops.append(op)
            out_recs.append(r)
            elems.append(n)
    return ops, out_recs, elems


# id(Index) -> (Index, tensor shape, itemsize, box, rows, contiguous bytes per row, elements): resolved
# indices are never changed and a loop's accesses share them (indexing.resolve), so each is measured once
_ACCESS_GEOMETRY = {}
_ACCESS_GEOMETRY_MAX = 8192


def _access_geometry(access, tensor):
    """``(box, rows, contiguous bytes per row, elements)`` of a DMA's HBM ``access`` of ``tensor``:
    :func:`_hbm_box`, the partition rows of the region, :func:`_chunk_bytes` and its element count
    (no mask applied)."""
    idx = access.index
    shape = tensor.shape
    isz = tensor.dtype.itemsize
    ent = _ACCESS_GEOMETRY.get(id(idx))
    if ent is not None and ent[0] is idx and ent[1] == shape and ent[2] == isz and access.tensor is tensor:
        return ent[3:]
    out_shape = idx.out_shape
    geo = (_hbm_box(access), _partitions(out_shape) if len(out_shape) else 1, _chunk_bytes(idx, tensor),
           math.prod(out_shape))
    if access.tensor is tensor:
        if len(_ACCESS_GEOMETRY) >= _ACCESS_GEOMETRY_MAX:
            _ACCESS_GEOMETRY.clear()
        _ACCESS_GEOMETRY[id(idx)] = (idx, shape, isz) + geo
    return geo


def _chunk_bytes(idx, tensor):
    """Contiguous bytes per row of an HBM access through ``idx`` (for the report's small-buffer count)."""
    isz = tensor.dtype.itemsize
    basic = idx.basic
    if basic is None or idx.perm is not None or not idx.out_shape:
        return isz
    last = basic[len(tensor.shape) - 1] if len(basic) >= len(tensor.shape) else slice(None)
    if isinstance(last, slice) and (last.step in (None, 1)):
        return int(idx.out_shape[-1]) * isz
    return isz


def _hbm_box(access):
    """Element ranges per dimension that an HBM access touches (its bounding box), or ``None``."""
    idx = getattr(access, "index", None)
    basic = getattr(idx, "basic", None)
    if basic is None or idx.perm is not None:
        return None
    shape = access.tensor.shape
    out = []
    for i, n in enumerate(shape):
        k = basic[i] if i < len(basic) else slice(None)
        if isinstance(k, slice):
            a, b, s = k.indices(n)
            if s < 0:
                a, b = b + 1, a + 1
            out.append((a, max(a, b)))
        elif isinstance(k, (int, np.integer)):
            k = int(k) + n if int(k) < 0 else int(k)
            out.append((k, k + 1))
        else:
            return None
    return tuple(out)


def _hbm_operand(x):
    """``("hbm", tensor, box)`` of an HBM tensor or access, and the tensor."""
    t = x.tensor if isinstance(x, Access) else x
    box = _hbm_box(x) if isinstance(x, Access) else None
    return ("hbm", (t.name, id(t)), box), t


def _partitions(shape) -> int:
    """Partition-axis size of a result without a declared partition axis: axis 0, or for a block
    tensor's result (three or more axes) the largest leading axis of at most 128 (its partition axis)."""
    if not shape:
        return 1
    if len(shape) <= 2:
        return max(1, int(shape[0]))
    lead = [int(s) for s in shape[:-1] if s <= 128]
    return max(lead) if lead else max(1, int(shape[0]))


def _per_partition(shape, pdim=None) -> int:
    n = math.prod(int(s) for s in shape) if shape else 1
    p = int(shape[pdim]) if pdim is not None and len(shape) > pdim else _partitions(shape)
    return max(1, n // max(1, p))


def _tile_geometry(tile):
    """``(partitions, elements per partition)`` of a tile (its block axes in the free size)."""
    shape = tuple(tile.shape)
    pdim = tile.pdim if tile.pdim < len(shape) else 0
    return (int(shape[pdim]) if shape else 1), _per_partition(shape, pdim)
