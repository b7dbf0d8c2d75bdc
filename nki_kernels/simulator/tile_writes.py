"""The one write into a tile: every assignment (``t[key] = v``) and every instruction's ``dst=``
write goes through :func:`write` (its fast branch included); :func:`wrote_whole` is the
bookkeeping tail it shares with the fast writes that do not copy (a DMA borrowing HBM, a PSUM
accumulation in place).

Below :mod:`.core`, which re-exports these names: it knows a tile by its attributes and methods,
and the class itself through :data:`.tensor_types.registered`.
"""

from __future__ import annotations

import math

import numpy as np

from . import diagnostics as _diag
from . import dtypes as dt
from . import memory as _memory
from . import psum_record as _psum_record
from . import recording as _prof
from .buffers import psum, sbuf
from .context import _tls
from .deferred_values import fill_sentinel
from .errors import NKIError, NotBatchable
from .indexing import _WHOLE_INDEX as _WHOLE_INDEX_CACHE, _full_mask, _whole_index, resolve, tile_write
from .program import flush_pending
from .psum_record import root_of
from .tensor_types import registered as _cls
from .values import _fit, _host_values as _values, fit_dst

_F32 = np.dtype(np.float32)


# (bound by assignment: a module global's .get is one lookup, see core)
_WHOLE_INDEX = _WHOLE_INDEX_CACHE


# --------------------------------------------------------------------------
# The one write into a tile
# --------------------------------------------------------------------------
def write(dst, values, op=None, what="result", mask=None, add=False, key=None, compute=None):
    """Write ``values`` into tile ``dst``: every assignment (``t[key] = v``, :meth:`Tile.__setitem__`,
    ``key=`` given) and every instruction's ``dst=`` write (``op`` names the instruction, for
    messages; all of ``dst``, a tile or a view of one) ends here, and so does a DMA into SBUF that
    copies (:func:`.operands.borrow` makes a tile view HBM instead, with :func:`wrote_whole`'s
    bookkeeping). In this one place: values round to ``dst.dtype``; elements ``mask`` excludes (an
    instruction's ``mask=``, or the elements an assigned masked result did not write) keep their
    values; a tile viewing HBM takes its private copy (copy-on-write) and the program's pending
    deferred op is computed first; a deferred NaN fill is skipped where the write covers it; the
    memory model's hooks (the live range, the instruction's slot) and the diagnostics' write hook
    run; an instruction's write into PSUM marks the elements that now hold a value (``add=True``
    adds in place instead, as a matmul accumulates).

    ``compute=(fn, b, dtype, engine)``: the values are ``fn(values, b)`` rounded to ``dtype``, one
    ``engine`` instruction. Fast branch: a NumPy ufunc on fp32 arrays of an fp32 SBUF tile's shape
    (or a copy of an array of its dtype), the tile plain (not a view, a batch, a placed block tensor
    or viewing HBM), no mask: computed straight into the tile's memory with the bookkeeping above
    and nothing else (``dst`` aliasing an operand is fine: ufuncs buffer overlapping inputs)."""
    data = dst._data
    m = dst._mem
    thunk = dst._thunk
    if (key is None and mask is None and not add and dst._parent is None and not dst.nb and dst.buffer is sbuf
            and type(values) is np.ndarray and (thunk is None or thunk[0] is fill_sentinel)
            and (m is None or m.tiles is None) and values.shape == data.shape and data.flags.writeable
            and (values.dtype is data.dtype if compute is None else (
                values.dtype is _F32 and data.dtype is _F32 and compute[2] is _F32 and type(compute[0]) is np.ufunc
                and type(compute[1]) is np.ndarray and compute[1].dtype is _F32 and compute[1].shape == data.shape))):
        dst._thunk = None  # the whole tile is written: its deferred NaN fill would be overwritten
        prog = _tls.program
        if prog is not None and prog.pending is not None:
            flush_pending()  # a deferred op may still read the memory about to be written
        if compute is None:
            data[...] = values
        else:
            compute[0](values, compute[1], out=data)
            _prof.instruction(compute[3], data)
        dst._written = None
        if m is not None:
            _memory.copied(m)
        wrote_whole(dst, data, m, prog, data)
        return
    if compute is not None:
        fn, b, dtype, engine = compute
        values = dt.cast(fn(values, b), dtype)
        _prof.instruction(engine, values)
        write(dst, values, op, what, mask, add)
        return
    if key is not None:
        _assign(dst, key, values)
        return
    vals = values if type(values) is np.ndarray else np.asarray(values)
    if dst.nb:
        _write_batched(dst, vals, op, what, mask, add)
        return
    if thunk is None:  # (dst.shape / dst.dtype without the property calls: nb is 0 here)
        dshape, ddtype = data.shape, data.dtype
    else:
        dshape, ddtype = dst.shape, dst.dtype
    if vals.shape != dshape:
        vals = fit_dst(dst, vals, op, what)
    root = dst if dst._parent is None else root_of(dst._parent)
    prog = _tls.program
    if prog is not None and prog.pending is not None:
        flush_pending()  # a deferred op may still read the memory about to be written
    dynamic = getattr(dst, "_layout", None) is not None  # (a dynamic view writes through its layout)
    if dst is not root and not dynamic:
        data = dst._raw()
        if not data.flags.writeable and dst._review is not None:
            dst.own()  # a view of a tile viewing HBM copy-on-write: the tile takes its copy, the view follows
            data = dst._raw()
        if not data.flags.writeable or not np.may_share_memory(data, root._raw()):
            raise NKIError("dst view", f"nisa.{op}: dst (shape {dst.shape}) is a copy, not a view, of a "
                           f"{root.buffer.name} tile {root.shape}; write to a basic-slice view of the tile "
                           "(e.g. t[0:128, 0:512]) or to the tile itself")
    keep = None if mask is None else (mask if isinstance(mask, np.ndarray) and mask.dtype == bool
                                      else _full_mask(mask, tuple(dst.shape)))
    new = vals if vals.dtype == ddtype else dt.cast(vals, ddtype)
    if keep is not None:
        new = np.where(np.broadcast_to(keep, new.shape), new, dst.data)
    if dynamic:
        dst.write_whole(new, add)
    else:
        _write_all(dst, new, add)
    if prog is not None and dst._mem is not None:  # the instruction wrote dst: one memory slot
        _memory.wrote_dst(dst._mem, prog)
    if root.buffer is psum and not add:  # (an add writes only elements that hold a value already)
        _psum_record.mark(root, dst, keep)
        _psum_record.mark_writer(root, dst, keep, op)


def _write_all(dst, values, add):
    """:func:`write`'s element write of all of ``dst`` (``values`` of its shape and dtype; the
    pending op computed): in place, or as an assignment for a batch or a placed block tensor."""
    m = dst._mem
    thunk = dst._thunk
    shape = dst._data.shape if thunk is None else thunk[2]  # (dst.shape without the call, as nb == 0 here)
    if dst.nb or (m is not None and m.tiles is not None) or values.shape != shape:
        if add:
            values = dt.compute_view(dst._raw()) + values
        dst[...] = values  # batched, or a placed block tensor (an error there): the general path
        return
    if thunk is not None and thunk[0] is fill_sentinel and not add and dst._parent is None:
        dst._thunk = thunk = None  # the whole tile is written: its deferred fill would be overwritten
    data = dst._data
    if thunk is not None or not data.flags.writeable:
        dst.own()
        data = dst._data  # (own() computed a deferred value, or made a private copy)
    if m is not None:
        _memory.copied(m)
    dst._written = None
    if add:
        np.add(data, values, out=data)
    elif values.dtype == data.dtype:
        data[...] = values  # (np.copyto's values, without its Python-level dispatch)
    else:
        np.copyto(data, values)
    if dst._diag is not None or _tls.loops:
        idx = _WHOLE_INDEX.get(shape)
        _diag.on_write(dst, idx if idx is not None else _whole_index(shape, dst.buffer.tile_label), values)


def _write_batched(dst, vals, op, what, mask, add):
    """:func:`write` in a batch of programs: ``vals`` carry ``dst``'s batch axes (or none, the same
    values for each program). A mask, an in-place add, and a PSUM destination other than a whole
    tile (whose written-elements record is per program) have no batched form here."""
    if mask is not None or add:
        raise NotBatchable(f"nisa.{op}: a masked or accumulating write in a batch of programs")
    root = root_of(dst)
    if root.buffer is psum and dst is not root:
        raise NotBatchable(f"nisa.{op}: a write into a view of a PSUM tile in a batch of programs")
    vals = fit_dst(dst, vals, op, what)
    if dst is not root and getattr(dst, "_layout", None) is None:
        data = dst._raw()
        if not data.flags.writeable or not np.may_share_memory(data, root._raw()):
            raise NotBatchable(f"nisa.{op}: dst is not a writeable view of its tile in a batch of programs")
    prog = _tls.program
    if prog is not None and prog.pending is not None:
        flush_pending()
    new = vals if vals.dtype == dst.dtype else dt.cast(vals, dst.dtype)
    if getattr(dst, "_layout", None) is not None:
        dst.write_whole(new)
    else:
        _write_all(dst, new, False)
    if root.buffer is psum:
        _psum_record.mark_all(root)
        _psum_record.mark_writer(root, root, None, op)


def _assign(self, key, value):
    """:func:`write`'s assignment ``self[key] = value`` (:meth:`Tile.__setitem__` has taken the
    keys that address a placed block, a column or an ``nl.loop_reduce`` result)."""
    unfilled = self._unfilled_block(key, value)
    if unfilled is None:
        self.own()
    else:
        flush_pending()  # (own() would fill the blocks this assignment and later ones write whole)
    idx = resolve(self.shape, key, self.buffer.tile_label)
    m = self._mem
    if m is not None:
        if m.blocks is not None:
            b = _memory.block_index(self, key)
            m = _memory.block_rec(m, b) if b is not None else m
        if getattr(value, "_mem", None) is not m:  # (not `t[i] = t[i]` after `t[i] += x`)
            _memory.assigned(m, value)
    src = value
    wrote = None
    if isinstance(value, _cls.Tile):
        _diag.read(value)
        src = dt.compute_view(value._raw())
        wrote = value._written
    data = self._raw() if unfilled is None else self._data
    self._written = None
    if wrote is not None and wrote.size == math.prod(idx.out_shape) and not self.nb:
        # An instruction under mask= writes only the elements its mask selects: the rest of the
        # destination keeps its values (not the zeros the functional result holds there).
        vals = _fit(_values(src, "value"), idx.out_shape, "tile assignment", self.buffer.region_label)
        idx.write(data, dt.cast(np.broadcast_to(vals, idx.out_shape), data.dtype),
                  np.reshape(wrote, idx.out_shape), what=self.buffer.tile_label)
    elif wrote is not None and self.nb:
        raise NotBatchable("a masked instruction's result assigned in a batch of programs")
    elif self.nb:
        full = data.shape[:self.nb] + idx.out_shape
        vals = _fit(_values(src, "value"), full, "tile assignment", self.buffer.region_label)
        tile_write(idx, data, dt.cast(vals, data.dtype), self.nb)
    else:
        vals = _fit(_values(src, "value"), idx.out_shape, "tile assignment", self.buffer.region_label)
        idx.write(data, dt.cast(vals, data.dtype), what=self.buffer.tile_label)
    if unfilled is not None:
        written = self._thunk[1][1]
        written.add(unfilled)
        if len(written) == self.blocks():
            self._thunk = None  # every block written whole: nothing left to fill
    if self._diag is not None or _tls.loops:
        _diag.on_write(self, idx, value)


def wrote_whole(dst, data, m, prog, values):
    """The diagnostics' write hook and the instruction's memory slot after an instruction wrote all
    of the plain tile ``dst`` (array ``data``, record ``m``) with ``values`` (:func:`write`'s fast
    branch, and the fast writes that share its bookkeeping: a DMA borrowing HBM, a PSUM add)."""
    if dst._diag is not None or _tls.loops:
        shape = dst.shape if dst.nb else data.shape  # (a batch's tile: its programs' shape)
        idx = _WHOLE_INDEX.get(shape)
        _diag.on_write(dst, idx if idx is not None else _whole_index(shape, dst.buffer.tile_label), values)
    if prog is not None and m is not None:  # the instruction wrote dst: one memory slot
        _memory.wrote_dst(m, prog)
