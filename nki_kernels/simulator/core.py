"""The simulator's data model: on-chip tiles, and the names of its other parts in one place.

* ``Tile``: an SBUF/PSUM tensor whose partition dimension comes first (after
  optional block dimensions); the operand and result of every compute op. Its values
  may be deferred, its writes keep the memory model and the diagnostics informed.
* ``par_dim``, :func:`uninitialised_tile`, :func:`read_inside`: a shape's partition
  dimension, a new ``nl.ndarray`` tile, an operand as a masked instruction reads it.

Defined below this module and re-exported here: the memories (``Buffer``, ``sbuf`` ...,
:mod:`.buffers`), the running program (``Program``, ``current``, ``flush_pending``,
:mod:`.program`), HBM tensors (``HBMTensor``, ``Access``, :mod:`.hbm_tensors`) and a tile's
deferred values (``fill_sentinel``, ``OutOfBoundsRead``, :mod:`.deferred_values`).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import weakref

import numpy as np

from . import buffer_pool as _pool
from . import config as _config
from . import diagnostics as _diag
from . import memory as _memory
from . import indexing as _indexing
from .context import _tls, current_or_none, set_current  # noqa: F401 - the running program (re-exported)
from .nki_tensor import NkiTensor, _dtype as _view_dtype
from .errors import NKIError, OutOfBoundsNKIError, NotBatchable
from .indexing import resolve, tile_view
from .values import _broadcast_view
# The one write into a tile (assignments and instructions alike) lives below this module.
from .tile_writes import write, wrote_whole  # noqa: F401 - (re-exported)
from .indexing import full_mask
from .index_expr import Mask
# The data model's other parts live in their own modules, below this one; their names stay
# importable from here (``core.Program``, ``core.HBMTensor`` ...), as the simulator's modules use them.
from .buffers import (Buffer, PMAX, PSUM_BANK_BYTES, PSUM_BYTES_PER_PARTITION,  # noqa: F401
                      SBUF_BYTES_PER_PARTITION, hbm, private_hbm, psum, sbuf, shared_hbm)
from .program import Program, current, flush_pending  # noqa: F401
from .hbm_tensors import Access, HBMTensor, _InHBM  # noqa: F401
from .deferred_values import OutOfBoundsRead, fill_sentinel

# (bound by assignment, not import: CPython compiles ``name.get(...)`` of an imported name as a module
# attribute lookup, which makes a bound method per call; this keeps the dict's LOAD_METHOD)
_WHOLE_INDEX = _indexing._WHOLE_INDEX

# PSUM bytes per partition one tensor may span. A first-generation PSUM tile fits one bank
# (nl.tile_size.psum_fmax); the standalone API's nl.ndarray may span banks (its tile_size says
# psum_fmax "does not represent the free-dim size per partition"), while each matmul result still
# fits one bank. The standalone allocators raise this with psum_tensors_span_banks().
# Per thread: the cores of a multi-core launch run as threads, and one core's allocation leaving
# the context must not reset (or leave raised) another's. A process-wide value did, so a later
# first-generation kernel's too-wide PSUM tile went unrefused (an intermittent CI failure).
_psum_span = threading.local()
_F32 = np.dtype(np.float32)
_POOL_MIN_BYTES = _pool.MIN_BYTES


class psum_tensors_span_banks(contextlib.ContextDecorator):
    """``with``-context in which new PSUM tensors may span all PSUM banks of a partition; as a decorator
    (``psum_tensors_span_banks()(allocate)``), the standalone API's allocators."""

    def _recreate_cm(self):
        return type(self)()  # (each call saves its own previous value)

    def __enter__(self):
        self.saved = getattr(_psum_span, "bytes", PSUM_BANK_BYTES)
        _psum_span.bytes = PSUM_BYTES_PER_PARTITION

    def __exit__(self, *exc):
        _psum_span.bytes = self.saved


class par_dim:
    """Marks the partition dimension in a shape with leading block dimensions."""

    def __init__(self, size: int):
        self.size = int(size)

    def __index__(self):
        return self.size

    def __int__(self):
        return self.size

    def __repr__(self):
        return f"par_dim({self.size})"


# --------------------------------------------------------------------------
# On-chip tiles
# --------------------------------------------------------------------------
def uninitialised_tile(shape, dtype, buffer, pdim=0) -> "Tile":
    """A new ``nl.ndarray`` tile (not placed; one program's, or a batch's with the batch axes leading
    ``shape``). Its NaN (sentinel) fill is deferred like an element-wise op: the first read fills
    it, and an instruction writing the whole tile first (a DMA into a fresh tile, a matmul's first
    result) skips the fill it would overwrite, as does an assignment of a whole block of a
    block-dimension tile for that block."""
    # (a large one from the pool: a block-dimension tensor declared in a loop, as the matmul tutorial's
    # hoisted kernels do, would otherwise be fresh pages the OS zeroes for every iteration)
    data = _pool.empty(shape, dtype) if _config.nan_fill else _memory.uninitialised(shape, dtype)
    tile = Tile(data, buffer, pdim)
    if _config.nan_fill:
        # (not the program's pending op: nothing reads this thunk's operands)
        tile._thunk = (fill_sentinel, (data, set(), pdim), data.shape, data.dtype)
    return tile


def _caller_outside_numpy():
    """``file:line`` of the innermost frame outside the simulator and NumPy (the host code that handed
    a tile to NumPy)."""
    skip = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.abspath(np.__file__)))
    frame = sys._getframe(2)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skip):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}" if frame else "<unknown>"


def read_inside(x, mask):
    """Operand ``x`` as an instruction with ``mask=`` reads it: nothing (a zero tile of its shape)
    under a mask that is ``False`` as a whole; itself, unless it is a view reaching outside its
    tile; then, when ``mask`` (written over the operand's index variables, as the
    layernorm tutorial's ``bn_stats(t[i_p, j * F + i_f], mask=(j * F + i_f < n))``) hides every
    element outside, a tile of its inside values (zero outside: never read); otherwise the view's
    out-of-bounds error."""
    if type(x) is Tile and (mask is False or mask is np.False_):
        # A mask that selects nothing (``mask=(k == 0)`` in iteration 1 of an affine loop) disables
        # the instruction: it reads none of its operands, so it orders nothing against other
        # iterations (nki-samples contributed LoRA backward's first-iteration-only reductions).
        # (a view of x, not an allocation of its own: a kernel placing its SBUF tensors by hand, as
        # nki-samples' allocated rmsnorm_qkv masks the iterations past seqlen, has no automatic tile)
        return Tile(np.zeros(x.shape, x.dtype), x.buffer, x.pdim, parent=x)
    outside = x.out_of_bounds() if type(x) is Tile else None
    if outside is None:
        return x

    try:
        keep = None if mask is None else full_mask(mask, tuple(x.shape))
    except NKIError:
        keep = None  # (a mask of the result's shape does not guard this operand)
    if keep is None or (keep & ~outside.inside).any():
        raise outside.error
    return Tile(outside.values, x.buffer, 0, parent=x._parent)


class MaskedOperand:
    """``tile[mask]``: a matmul operand under "operand masking" (NKI API Masking: ``nl.matmul(
    lhs_T[i_lhs_f <= 64], rhs[i_rhs_f <= 256], transpose_x=True)``; "currently only matmult APIs
    support operand masking"). ``mask`` is written over the tile's own index variables; the matmul
    contracts only the selected elements and writes only the result rows / columns whose stationary /
    moving column has one (:func:`.instructions.functional.unmask_operand`)."""

    __slots__ = ("tile", "mask")

    def __init__(self, tile, mask):
        self.tile, self.mask = tile, mask

    @property
    def shape(self):
        """The masked tile's shape."""
        return self.tile.shape

    @property
    def dtype(self):
        """The masked tile's dtype."""
        return self.tile.dtype


def _out_of_bounds_view(parent, idx, data, err):
    """A view of ``parent`` at ``idx`` that reaches outside it: its values are deferred to an
    :class:`OutOfBoundsRead` (see there)."""
    prog = _tls.program
    if prog is not None and prog.nb:
        raise NotBatchable("a tile view reaching outside its tile")
    arrays = [np.broadcast_to(a, idx.out_shape) for a in idx.arrays()]
    inside = np.ones(idx.out_shape, bool)
    for a, dim in zip(arrays, idx.shape):
        inside &= (a >= 0) & (a < dim)
    values = np.zeros(idx.out_shape, data.dtype)
    values[inside] = data[tuple(a[inside] for a in arrays)]
    reader = OutOfBoundsRead(err, values, inside)
    view = Tile(None, parent.buffer, 0, parent=parent, thunk=(reader, (), values.shape, values.dtype))
    reader._tile = weakref.ref(view)
    return view


class Tile(NkiTensor):
    """An SBUF or PSUM tensor; the first dimension after ``pdim`` block dims is the partition.

    A tile's values may be *deferred*: an element-wise op records ``fn(*args)``
    instead of computing it, so that a following ``nl.store`` can compute
    straight into HBM (``fn(*args, out=view)``) instead of into a tile and then
    copying. Reading ``data`` computes it; every write path first forces the
    program's pending tile, so operands are never changed under a deferred op.
    """

    __array_ufunc__ = None  # NumPy defers to the Tile's own operators
    __slots__ = ("_data", "_thunk", "buffer", "pdim", "_mem", "_parent", "_review", "_written", "_diag", "nb",
                 "_views",
                 "__weakref__")

    def __init__(self, data, buffer=sbuf, pdim: int = 0, parent: "Tile" = None, thunk=None):
        self._data = data
        self._thunk = thunk  # (ufunc, args, shape, dtype) while deferred
        self.buffer = buffer
        self.pdim = pdim
        self._parent = parent
        self._review = None  # for a view: parent data -> this view's data (re-derived on copy-on-write)
        self._written = None  # for an instruction's result under mask=: the elements it wrote
        self._mem = parent._mem if parent is not None else None  # live-range record (memory.Rec)
        self._views = None  # weak references to views made while this tile views HBM (copy-on-write)
        if parent is not None and parent._thunk is None and not parent._data.flags.writeable:
            views = parent._views
            if views is None:
                views = parent._views = []
            elif len(views) >= 64 and not len(views) & (len(views) - 1):
                views[:] = [r for r in views if r() is not None]  # (a tile viewed in a long loop: drop the dead)
            views.append(weakref.ref(self))
        prog = _tls.program
        self.nb = nb = prog.nb if prog is not None else 0
        full = thunk[2] if thunk is not None else data.shape
        if nb:
            if full[:nb] != prog.bshape:
                raise NotBatchable(f"a tile of shape {full} lacks the batch axes {prog.bshape}")
            shape = tuple(full[nb:])
        else:
            shape = full if type(full) is tuple else tuple(full)
        loops = _tls.loops
        if loops:  # diagnostics state: the creating iterations (diagnostics.on_new_tile, inlined)
            loops.state += 1
            self._diag = _diag.TileInfo(loops[-1].tag)
        else:
            self._diag = None
        if len(shape) > pdim and shape[pdim] > PMAX:
            raise NKIError(
                "partition dimension",
                f"a {buffer.name} tile of shape {shape} has partition dimension "
                f"{shape[pdim]} > {PMAX} (nl.tile_size.pmax)",
            )
        # (an allocation's rule: a view -- a broadcast with zero strides included -- takes no PSUM of its own)
        if buffer is psum and parent is None and self.bytes_per_partition() // self.blocks() > (
                _psum_tensor_bytes := getattr(_psum_span, "bytes", PSUM_BANK_BYTES)):
            if _psum_tensor_bytes == PSUM_BANK_BYTES:
                room = f"more than one {PSUM_BANK_BYTES} B bank (at most 512 fp32 elements; nl.tile_size.psum_fmax)"
            else:
                room = f"more than the {_psum_tensor_bytes} B of PSUM a partition has (8 banks of {PSUM_BANK_BYTES} B)"
            raise NKIError("PSUM bank", f"a PSUM tile of shape {shape} {self.dtype} needs "
                           f"{self.bytes_per_partition() // self.blocks()} B per partition, {room}")
        if parent is None and prog is not None:
            self._mem = _memory.on_alloc(self, prog, shape, thunk[3] if thunk is not None else data.dtype)
            if thunk is not None:
                prog.defer(self)

    # -- values ------------------------------------------------------------
    @property
    def data(self) -> np.ndarray:
        """The tile's values as a NumPy array (computing a deferred op now); an engine reading them
        (the tile is live at this instruction)."""
        m = self._mem
        if m is not None and m.last != m.mem.ic:  # (touch's own test: a tile read again in one instruction is no call)
            _memory.touch(m)
        if self._thunk is not None:
            self.force()
        return self._data

    @data.setter
    def data(self, value):
        self._thunk = None
        self._data = value

    def force(self, out=None):
        """Compute a deferred op (into ``out`` when given); returns the values."""
        fn, args, shape, dtype = self._thunk
        self._thunk = None
        if out is None and type(fn) is np.ufunc and dtype.kind == "f":
            # (float operands give a ufunc's result in the recorded dtype; integer ones may not:
            # np.divide of int32 arrays is float64. The pool's own size test, without its call and
            # dtype normalising for the small tiles of most ops: they come from malloc as it would)
            out = (np.empty(shape, dtype) if math.prod(shape) * dtype.itemsize < _POOL_MIN_BYTES
                   else _pool.empty(shape, dtype))
        self._data = fn(*args) if out is None else fn(*args, out=out)
        return self._data

    # -- geometry ----------------------------------------------------------
    @property
    def shape(self):
        """Shape of the tile (block dims, partition dim, free dims) in one program."""
        full = self._data.shape if self._thunk is None else self._thunk[2]
        return full[self.nb:] if self.nb else full

    @property
    def dtype(self):
        """Element dtype."""
        return self._thunk[3] if self._thunk is not None else self._data.dtype

    @property
    def ndim(self):
        """Number of dimensions."""
        return len(self.shape)

    def blocks(self) -> int:
        """Number of tiles in the leading block dimensions."""
        return math.prod(self.shape[: self.pdim]) if self.pdim else 1

    def bytes_per_partition(self) -> int:
        """Bytes this tile takes in each partition it spans."""
        shape = self.shape
        return math.prod(shape[self.pdim + 1:]) * self.dtype.itemsize * (math.prod(shape[:self.pdim]) if self.pdim else 1)

    # -- copy-on-write for tiles that view HBM -----------------------------
    def own(self) -> None:
        """Make ``data`` a private, writeable copy (tiles loaded without a copy view HBM).

        Called before every write to the tile; it also computes the program's
        pending deferred op, whose operands might include this tile."""
        prog = _tls.program
        if prog is not None and prog.pending is not None:  # (flush_pending's test: most writes find none)
            flush_pending()
        if self._thunk is not None:
            self.force()
        if not self._data.flags.writeable:
            if self._review is not None:
                # A view of a copy-on-write tile: the parent takes its private copy and the view
                # is derived again from it, so writes through the view reach the parent.
                self._parent.own()
                self.data = self._review(self._parent._raw())
                if self._data.flags.writeable:
                    self._follow()
                    return
            self.data = _pool.copy(self._data)
            self._follow()

    def _follow(self) -> None:
        """This tile just took its private copy: the views made of it while it viewed HBM are
        derived again from the copy (they would go on reading HBM, and miss its later writes)."""
        views = self._views
        if views is None:
            return
        self._views = None
        data = self._data
        for ref in views:
            v = ref()
            if v is not None and v._review is not None and v._thunk is None and not v._data.flags.writeable:
                v._data = v._review(data)
                v._follow()

    def _raw(self) -> np.ndarray:
        """``data`` without counting an engine read (indexing and copies account for themselves)."""
        if self._thunk is not None:
            self.force()
        return self._data

    def _placed_block(self, key):
        """``(block tile, rest of key)`` when this is a placed block-dimension tensor (its blocks
        live where the allocation put them, so they are reached one at a time), else None."""
        m = self._mem
        if m is None or m.tiles is None:
            return None
        b = _memory.block_index(self, key)
        if b is None:
            _memory.whole_block_tensor()
        blk = m.tiles.get(b)
        if blk is None:
            part, lo = m.place[b]
            data = _memory.view(m.mem, m.buf, part, lo, self.shape[self.pdim], self.shape[self.pdim + 1:],
                                self.dtype)
            blk = Tile(data, self.buffer, 0, parent=self)
            blk._mem = _memory.block_rec(m, b)
            _memory.mark_placed(blk._mem, part, lo, self.shape[self.pdim])
            # Each block is its own logical tensor even where its bytes alias another block's, so
            # what it holds counts as written only once written through it: a PSUM `+=` into it
            # then starts a new accumulation group instead of adding to the aliased block's sums.
            _diag.mark_uninitialised(blk)
            # Made on first use, perhaps inside a loop, but it belongs to the tensor: created with it.
            blk._diag.created = self._diag.created if self._diag is not None else ()
            m.tiles[b] = blk
        rest = (key if isinstance(key, tuple) else (key,))[self.pdim:]
        return blk, (rest if rest else ...)

    # -- indexing ----------------------------------------------------------
    def _as_column(self, key):
        """A ``[P]`` vector indexed with two subscripts (``v[:, 0]``, as kernels written for the
        ``[P, 1]`` column it stands for do) is addressed as that ``[P, 1]`` column."""
        if type(key) is tuple and len(key) == 2 and len(self.shape) == 1 and not self.pdim:
            raw = self._raw()
            col = raw.reshape(raw.shape + (1,))
            view = Tile(col, self.buffer, 0, parent=self)
            view._review = lambda d: d.reshape(d.shape + (1,))
            if self._diag is not None or _tls.loops:
                _diag.on_view(self, view, resolve(self.shape, ..., self.buffer.tile_label))
            return view
        return None

    def __getitem__(self, key):
        if isinstance(key, Mask):
            return MaskedOperand(self, key)
        if type(key) is int and self.pdim == 1 and not self.nb and (self._mem is None or self._mem.tiles is None):
            return self._block(key)
        placed = self._placed_block(key)
        if placed is not None:
            blk, rest = placed
            return blk if rest is ... else blk[rest]
        col = self._as_column(key)
        if col is not None:
            return col[key]
        key = self._keep_partition(key)
        idx = resolve(self.shape, key, self.buffer.tile_label)
        # Integers on block axes only (t[b] / t[b0, b1] of a block-dimension tensor) select a block:
        # the view keeps the partition axis, after the block axes the integers left.
        lead = (key,) if isinstance(key, (int, np.integer)) and not isinstance(key, bool) else key
        block_ints = (self.pdim and type(lead) is tuple and len(lead) <= self.pdim
                      and all(isinstance(k, (int, np.integer)) for k in lead))
        data = self._raw()  # making a view reads nothing; the view's readers are counted
        if self.nb:
            try:
                vals = tile_view(idx, data, self.nb)
            except OutOfBoundsNKIError:
                raise NotBatchable("a tile view reaching outside its tile") from None
            view = Tile(vals, self.buffer, 0, parent=self)
            view._review = lambda d, nb=self.nb: tile_view(idx, d, nb)
        else:
            view = self._plain_view(idx, data)
        if block_ints:
            view.pdim = self.pdim - len(lead)
        return self._finish_view(view, key, idx)

    def _block(self, key):
        """``self[key]`` for an integer ``key`` of a one-block-dimension tensor, not placed, not a batch's
        (a hoisted matmul's ``a[k]`` operands): :meth:`__getitem__`'s steps for that key, without its
        tests for the other kinds."""
        idx = resolve(self.shape, key, self.buffer.tile_label)
        return self._finish_view(self._plain_view(idx, self._raw()), key, idx)

    def _plain_view(self, idx, data):
        """The tile ``idx`` selects from this tile's ``data`` (making a view reads nothing; the view's
        readers are counted): a NumPy view where the index allows one, else a copy."""
        if idx.is_view:
            view = Tile(idx.view(data), self.buffer, 0, parent=self)
            view._review = idx.view
            return view
        try:
            return Tile(idx.read(data, what=self.buffer.tile_label), self.buffer, 0, parent=self)
        except OutOfBoundsNKIError as err:
            return _out_of_bounds_view(self, idx, data, err)

    def _finish_view(self, view, key, idx):
        """``view`` of ``self[key]`` given a block's own live range and announced to the diagnostics."""
        m = self._mem
        if m is not None and m.blocks is not None:  # a block of a block-dimension tensor: its own live range
            b = _memory.block_index(self, key)
            if b is not None:
                view._mem = _memory.block_rec(m, b)
        if self._diag is not None or _tls.loops:
            _diag.on_view(self, view, idx)
        return view

    def _keep_partition(self, key):
        """``key`` with an integer partition subscript made a one-partition slice when free axes are
        selected too: ``t[0, 0:M]`` of a ``[1, M]`` tile is that ``[1, M]`` row, the form the NKI Known
        Issues page prescribes for ``[1, M]`` buffers; dropping the axis would make ``M`` the
        partition size. (All-integer subscripts and block subscripts keep NumPy's meaning.)"""
        if type(key) is not tuple or len(key) <= self.pdim + 1:
            return key
        t = self
        while t is not None:  # (a view of a block-dimension tensor may not know where its partition axis is)
            if t.pdim and t is not self:
                return key
            t = t._parent
        k = key[self.pdim]
        if not (isinstance(k, (int, np.integer)) and not isinstance(k, bool)):
            return key
        if all(isinstance(r, (int, np.integer)) for r in key[self.pdim + 1:]):
            return key
        n = self.shape[self.pdim]
        k = int(k) + n if int(k) < 0 else int(k)
        if not 0 <= k < n:
            return key  # (the bounds error names the integer as written)
        return key[:self.pdim] + (slice(k, k + 1),) + key[self.pdim + 1:]

    def out_of_bounds(self):
        """For a view reaching outside its tile (``t[i_p, j * F + i_f]`` at a ragged edge), the
        :class:`OutOfBoundsRead` its reads raise unless an instruction's ``mask=`` hides those
        elements; else ``None``."""
        thunk = self._thunk
        return thunk[0] if thunk is not None and type(thunk[0]) is OutOfBoundsRead else None

    def __setitem__(self, key, value):
        if type(key) is int and type(value) is Tile and self.pdim == 1 and self._set_block(key, value):
            return
        placed = self._placed_block(key)
        if placed is not None:
            blk, rest = placed
            blk[rest] = value
            return
        into = getattr(value, "_accumulate_into", None)
        if into is not None:  # an nl.loop_reduce result combines with what the region holds
            into(self[key])
            return
        col = self._as_column(key)
        if col is not None:
            self.own()
            col = self._as_column(key)  # a view of the now-private data
            col[key] = value
            return
        write(self, value, key=key)

    def _set_block(self, k, value) -> bool:
        """``self[k] = value`` (:meth:`__setitem__`) for block ``k`` of a one-block-dimension fp32 tile
        (not placed, not a view, no pending op but its deferred fill) and an fp32 tile of the block's
        shape written whole (no mask): the same bookkeeping and the same copy without the general
        layers (``b[k] = nl.load(...)`` of a hoisted matmul). Returns False, having done nothing,
        otherwise."""
        data, vdata, m, thunk = self._data, value._data, self._mem, self._thunk
        if (self._parent is not None or self.nb or value.nb or value._written is not None or value._thunk is not None
                or data.dtype is not _F32 or vdata.dtype is not _F32 or (m is not None and m.tiles is not None)
                or (thunk is not None and thunk[0] is not fill_sentinel) or vdata.shape != data.shape[1:]
                or not -data.shape[0] <= k < data.shape[0]):
            return False
        b = k + data.shape[0] if k < 0 else k
        if thunk is None:
            self.own()  # (copy-on-write of a tile viewing HBM, and the pending op, as the general path)
            data = self._data
        else:
            flush_pending()  # (the fill stays deferred: this block needs none)
        if m is not None:
            if m.blocks is not None:
                m = _memory.block_rec(m, (b,))
            if value._mem is not m:
                _memory.assigned(m, value)
        diag = self._diag is not None or _tls.loops  # (before the write: a fill completed below drops no state)
        _diag.read(value)
        self._written = None
        data[b] = vdata
        if thunk is not None:
            written = thunk[1][1]
            written.add((b,))
            if len(written) == data.shape[0]:
                self._thunk = None  # every block written whole: nothing left to fill
        if diag:
            _diag.on_write(self, resolve(data.shape, k, self.buffer.tile_label), value)
        return True

    def _unfilled_block(self, key, value):
        """The block ``self[key] = value`` writes whole when this is a block-dimension tile whose
        deferred fill is pending (that block then needs no fill), else None."""
        thunk = self._thunk
        if thunk is None or thunk[0] is not fill_sentinel or not self.pdim or self._parent is not None or self.nb:
            return None
        if isinstance(value, Tile) and value._written is not None:
            return None  # a masked result writes only part of the block
        parts = key if type(key) is tuple else (key,)
        if len(parts) < self.pdim or any(not (k is Ellipsis or (type(k) is slice and k == slice(None)))
                                         for k in parts[self.pdim:]):
            return None
        return _memory.block_index(self, key)

    def broadcast_to(self, shape):
        """This tile broadcast to ``shape`` (size-1 dims repeat); same as ``nl.broadcast_to``."""
        return _broadcast_view(self, shape, Tile)

    def reshape(self, *shape):
        """A view of the same on-chip memory with another shape and the same partition size
        (the standalone ``nki`` API's ``tensor.reshape``); writes through it reach this tile."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        base = self.shape[self.pdim:] if self.pdim else self.shape
        if not base:
            base = (1,)  # a single value (t[0, 0]) sits on one partition
        if not shape or shape[0] != base[0] or math.prod(shape) != math.prod(self.shape):
            raise NKIError("reshape", f"cannot reshape a {self.buffer.name} tile of shape {self.shape} into "
                           f"{shape}: the element count and the partition size ({base[0]}) must stay")
        try:
            data = np.reshape(self.data, self.data.shape[:self.nb] + shape, copy=False)
        except ValueError:
            data = None
            if self._parent is None and not self._data.flags.writeable:
                # a whole tile still viewing HBM copy-on-write (a strided DMA's source): its own,
                # row-major copy reshapes as the tile's memory does
                self.own()
                data = np.reshape(self.data, self.data.shape[:self.nb] + shape, copy=False)
        if data is None:
            raise NKIError("reshape", f"a {self.buffer.name} tile view of shape {self.shape} cannot be reshaped "
                           f"into {shape} without a copy; reshape the whole tile instead") from None
        view = Tile(data, self.buffer, 0, parent=self)
        view._review = lambda d, full=self.data.shape[:self.nb] + shape: np.reshape(d, full, copy=False)
        if self._diag is not None or _tls.loops:
            _diag.on_view(self, view, resolve(self.shape, ..., self.buffer.tile_label))
        return view

    def view(self, dtype):
        """The storage reinterpreted as ``dtype`` (``NkiTensor.view``: "NO copy will occur"). A tile of a
        first-generation tensor with leading block dimensions (``(B, par_dim(P), F)``, which the
        NkiTensor layouts do not take) reinterprets its NumPy storage along the last axis, as the
        Neuron team's contributed rmsnorm_quant views its fp32 scale block as fp8; any other tile
        as :meth:`.nki_tensor.NkiTensor.view`."""
        root = self
        while root._parent is not None:
            root = root._parent
        if not root.pdim or self.nb:
            return super().view(dtype)
        new = _view_dtype(dtype)
        root.own()  # views write into the root's memory: it must be private and writeable
        if self is not root and self._review is not None and not np.may_share_memory(self._raw(), root._raw()):
            self.own()  # a view made before its root took its private copy: derived again from the copy
        try:
            data = self.data.view(new)
        except ValueError as e:
            raise NKIError("view", f"NkiTensor.view: a {self.buffer.name} tile of shape {self.shape} {self.dtype} "
                           f"cannot be reinterpreted as {new}: {e}") from None
        view = Tile(data, self.buffer, self.pdim, parent=self)
        view._review = lambda d, new=new: d.view(new)
        # (no diagnostics region of its own: the element sizes differ, so a region of the view is no
        # region of the root; its reads are not checked for uninitialised elements, and writes through
        # it do not count as the root's)
        return view

    def __repr__(self):
        return f"Tile(shape={self.shape}, dtype={self.dtype}, buffer={self.buffer!r})"

    def __bool__(self):
        # A standalone-API kernel tests an optional tensor for presence (nki-library mlp/moe tkg:
        # `if params.expert_params.expert_index:`): an allocated tensor, or a view of one, is a Python
        # object there, truthy like any other. A computed tile's value is only known on the device.
        root = self
        while root._parent is not None:
            root = root._parent
        kernel = getattr(getattr(current_or_none(), "launch", None), "kernel", None)
        if root._mem is not None and root._mem.declared and getattr(kernel, "options", {}).get("lnc_brackets"):
            return True
        raise NKIError("control flow on tile", "a tile's value is only known on the device; Python "
                       "`if`/`while` on a tile is not allowed (use nl.where or masks)")

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        raise NKIError("tile iteration", "tiles cannot be iterated in Python; index them or use nl ops")

    def __array__(self, dtype=None, copy=None):
        # NumPy asks for this when a tile reaches host code: a kernel that returned an SBUF/PSUM tile
        # (its caller compares the result with NumPy) or host math on a tile inside a kernel.
        if current_or_none() is None:
            raise NKIError("kernel result", f"a {self.buffer.name.upper()} tile of shape {self.shape} reached host "
                           "code: on-chip memory does not outlive its kernel, and a top-level kernel returns HBM "
                           "tensors (NKI Known Issues: \"Top-level tensors must be on HBM\"); nl.store the tile "
                           "into an nl.ndarray(..., buffer=nl.shared_hbm) and return that", _caller_outside_numpy())
        raise NKIError("operand type", f"a tile of shape {self.shape} is on-chip data, not a host array; compute "
                       "on it with nl / nisa ops")
