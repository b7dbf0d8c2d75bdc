"""Affine loops run batched: the iterations of an ``nl.affine_range`` loop as one NumPy program.

``nl.affine_range`` iterations are independent by the language's contract, so, as the launcher
batches the programs of a grid (:mod:`.vectorize`), a loop's iterations can run together: the
loop index becomes a symbolic batch index (:class:`~.index_expr.BExpr`), an HBM access one strided
view over every iteration's region, and each tile the body makes carries the iterations as a
leading axis. One run of the body then does the work of every iteration with whole-array NumPy.

The per-iteration path stays the reference:

* The first two iterations always run one at a time through the user's own ``for`` statement,
  with every diagnostic (the loop-carried check compares them; the memory model traces them).
* The rest run batched only when the loop body is *self-contained*, decided from its source
  (:mod:`.loop_body`): assignments, calls, nested loops and branches on static options; names it
  binds unread elsewhere; tiles from outside read (:class:`_Outer`), assigned region by region
  with the loop index or accumulated into; other values from outside without Python state.
* Then the body runs once, compiled from its source as a function of the loop index (the
  iterator calls it; the ``for`` statement's own body is not re-entered). The first thing with no
  batched meaning (an op without a batched form, Python control flow or ``int()`` on the index, a
  load of what the launch writes, iterations storing to overlapping elements, an HBM allocation)
  raises :class:`NotBatchable`; so does any error. The HBM and tile writes made so far are then
  undone (:class:`LoopBatch` keeps their old values) and the iterations run one at a time through
  the ``for`` statement, the reference (a site that failed is not tried again for that trip
  count). A mask cutting a ragged last tile batches the iterations before it; a batch holds as
  many iterations as :data:`BATCH_BYTES` of new tiles allow, the loop then runs in several.
* HBM writes of a batch are logged for the launch's race / uninitialised-output analysis when it
  completes, as the program's own writes; its assignments into tiles from outside are marked
  written and copied into (``uninit``, live ranges). The reference iterator then goes past the
  batched iterations, so the loop-carried analysis of the two that ran still runs.

On when the launcher may batch (:func:`.vectorize.enabled`: not in thorough diagnostics mode,
not while a profile is recorded, not with ``NKI_SIM_VECTORIZE=0``) and ``NKI_SIM_LOOP_BATCH`` is
not ``0``, only in a program that runs alone (not in a batch of grid programs, not on a simulated
LNC core).
"""

from __future__ import annotations

import math

import numpy as np

from . import config
from . import diagnostics as _diag
from .core import Program, Tile, _language_helpers, current_or_none, flush_pending, psum, set_current
from . import dtypes as dt
from . import memory as _memory
from .errors import NotBatchable
from .index_expr import AffineExpr, BExpr
from .indexing import resolve, resolve_batched

batched_iterations = 0  # iterations run batched in this process (a count for tests and benchmarks)
BATCH_BYTES = 256 * 1024 * 1024  # tiles one batch may make (as the grid batches': vectorize.BATCH_BYTES)


class LoopBatch(Program):
    """The iterations ``rest`` of an affine loop of program ``outer`` run as one program with one
    leading batch axis (``nb == 1``); HBM writes keep their old values in ``undo`` until it ends."""

    loop_batch = True

    def __init__(self, outer, rest):
        super().__init__(outer.launch, outer.pid)
        self.nb = 1
        self.bshape = (len(rest),)
        self.staged = []  # HBM writes, logged for diagnostics when the batch completes
        self.undo = []  # (view, old values) of each HBM write, restored if the batch fails
        self.outer = []  # data of the tiles made before the loop that the body reads
        self.tile_writes = []  # (tile made before the loop, batched index) of each assignment into one
        self.nbytes = 0  # of the tiles the batch made so far

    def charge(self, shape, dtype) -> None:
        """A tile of ``shape`` (with the iteration axis) was made: raise :class:`_TooLarge` once the
        batch's tiles pass :data:`BATCH_BYTES`, naming the iterations that would have fitted."""
        self.nbytes += math.prod(shape) * np.dtype(dtype).itemsize
        if self.nbytes > BATCH_BYTES:
            n = self.bshape[0]
            raise _TooLarge("a batch of loop iterations outgrew its memory", {0: (0, n * BATCH_BYTES // self.nbytes)})

    def writes_outer(self, data) -> bool:
        """Whether a copy-on-write of ``data`` would be a write into a tile made before the loop
        (the batch sees those read-only; the reference path would change them)."""
        return any(np.may_share_memory(data, a) for a in self.outer)


def enabled() -> bool:
    """Whether affine loops may run batched now: when the launcher may batch grids and
    ``config.loop_batch`` (env ``NKI_SIM_LOOP_BATCH``) is on."""
    from . import vectorize

    return config.loop_batch and vectorize.enabled()


def iterate(loop, body, values):
    """Iterate affine ``loop`` (a ``nl.affine_range``): two reference iterations through the ``for``
    statement, then the rest in batches of ``body`` while they can run so, else one at a time (the
    same reference iterator goes on: diagnostics and the memory model see one loop). A batch holds
    as many iterations as :data:`BATCH_BYTES` of new tiles allow; where only the last iterations
    cannot batch (a mask cutting a ragged last tile), the others batch and those run one at a time."""
    r = loop._r
    it = loop._reference(r)
    until = 0
    try:
        for n, i in enumerate(it):
            if n < until:
                continue  # (run in a batch)
            yield i
            if n == 1:
                # (the reference iterator then goes past the batched iterations without running them: at
                # its end come the loop-carried analysis of the iterations that ran and the loop's exit)
                until = n + 1
                while until < len(r):
                    k = _batch(body, values, r[until:])
                    if not k:
                        break
                    until += k
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


class _TooLarge(NotBatchable):
    """A batch's new tiles outgrew :data:`BATCH_BYTES`; ``hint`` names the iterations that fit."""


def _batch(body, values, rest) -> int:
    """Run the first iterations of ``rest`` as one batch of ``body``: as many as fit in memory, or
    those before a ragged end; returns how many ran (0: none, their writes undone)."""
    if body.plan.get(len(rest)) == 0:
        return 0
    n = min(len(rest), body.chunk)
    while n >= 2:
        try:
            _run_batch(body, values, rest[:n])
            return n
        except NotBatchable as e:
            hi = e.hint.get(0, (1, 0)) if isinstance(e.hint, dict) else (1, 0)
            if not (hi[0] == 0 and 2 <= hi[1] < n):
                break
            if isinstance(e, _TooLarge):
                body.chunk = hi[1]  # (later batches of this loop take no more)
            n = hi[1]  # the iterations that fit, or those before a ragged end
        except Exception:  # noqa: BLE001 - an error the reference iterations will raise with its context
            break
    body.plan[len(rest)] = 0
    return 0


class _Outer(Tile):
    """A tile made before the loop, as every iteration of a batch sees it: its values broadcast
    along the batch axis. ``t[key]`` whose key moves with the loop index selects one region per
    iteration (one strided view over the iterations). Only a tile the body assigns into
    (``written``) takes assignments, each writing every iteration's region at once (regions of
    different iterations must not overlap); any other write into it, or into a view of it, raises
    NotBatchable where the tile would take its copy-on-write copy. Reading elements never written
    (an uninitialised read, a PSUM accumulation group's start), views and placed tensors, masked or
    ``loop_reduce`` values raise NotBatchable too."""

    __slots__ = ("outer", "batch", "written", "batch_written", "was_read", "accumulated")

    @classmethod
    def of(cls, tile, batch, written):
        """``tile`` as ``batch`` sees it (``written``: the body assigns into it)."""
        m = tile._mem
        if written:
            if tile._parent is not None or (m is not None and (m.tiles is not None or m.place is not None)):
                raise NotBatchable("an assignment into a view or a placed tile made before the loop")
            tile.own()  # (its private, writeable storage: a loaded tile may view HBM)
        data = tile.data
        if not written:
            batch.outer.append(data)
        self = cls(np.broadcast_to(data, batch.bshape + data.shape), tile.buffer, tile.pdim)
        self.outer, self.batch, self.written, self.batch_written = tile, batch, written, None
        self.was_read = self.accumulated = False
        return self

    # A tile the iterations accumulate into holds the sum of all of them once the batch has added
    # them: a read of it in the body (before or after) would see other iterations' values than the
    # reference path's, so a body may accumulate into a tile or read it, not both.
    def _read(self):
        if self.accumulated:
            raise NotBatchable("a read of a tile the batch's iterations accumulate into")
        self.was_read = True

    @property
    def data(self):
        """The values every iteration sees (see :meth:`_read`)."""
        self._read()
        return Tile.data.fget(self)

    def _raw(self):
        self._read()
        return Tile._raw(self)

    def _index(self, key):
        t = self.outer
        if t._as_column(key) is not None:
            raise NotBatchable("a vector addressed as a column")
        return resolve_batched(t.shape, key, t.buffer.tile_label, self.batch.bshape)

    def __getitem__(self, key):
        idx = self._index(key)
        if idx is None and self.written:
            return _Accumulator(self, key)  # (the same region in every iteration: only `t[key] += x`)
        self._read()
        if idx is None:
            return Tile.__getitem__(self, key)
        t = self.outer
        unwritten = _diag.unwritten(t)
        if unwritten is not None and self.batch_written is not None:
            unwritten &= ~self.batch_written  # (what the batch assigned is marked written when it completes)
        if unwritten is not None and idx.view(unwritten).any():
            raise NotBatchable("a read of elements never written (an uninitialised read, or a PSUM accumulation "
                               "group's start)")
        view = idx.view(t._data)
        # (a tile the batch assigns into is read as a copy: the body writes through no name bound from it)
        return Tile(np.array(view) if self.written else _read_only_view(view), t.buffer, 0)

    def __setitem__(self, key, value):
        if not self.written:
            Tile.__setitem__(self, key, value)  # (raises NotBatchable where it would copy the tile)
            raise NotBatchable("a write into a tile made before a batched loop")
        if type(value) is _Sum and value.target is self and value.key is key:
            self._accumulate(key, value.addend)
            return
        idx = self._index(key)
        if idx is None:
            raise NotBatchable("every iteration assigns into the same region of a tile made before the loop")
        if getattr(value, "_accumulate_into", None) is not None or getattr(value, "_written", None) is not None:
            raise NotBatchable("a masked or loop_reduce result assigned into a tile made before the loop")
        t = self.outer
        data = t._data
        if idx._overlaps(data):
            raise NotBatchable("iterations assign into overlapping elements of a tile made before the loop")
        flush_pending()
        view = idx.view(data)
        _fit, _values = _language_helpers()
        vals = _fit(_values(value, "value"), view.shape, "tile assignment", t.buffer.region_label)
        self.batch.undo.append((view, view.copy()))
        view[...] = dt.cast(vals, data.dtype)
        self.batch.tile_writes.append((t, idx))
        if t._diag is not None and t._diag.written is not None:
            if self.batch_written is None:
                self.batch_written = np.zeros(t.shape, bool)
            idx.view(self.batch_written)[...] = True


    def _accumulate(self, key, addend):
        """``t[key] += addend`` of every iteration, in iteration order: the reference path's fp32
        in-place adds, one per iteration (an accumulation across iterations, which affine loops
        allow), into a region written before (a PSUM accumulation group's start stays per iteration)."""
        t = self.outer
        idx = resolve(t.shape, key, t.buffer.tile_label)
        if not idx.is_view:
            raise NotBatchable("an accumulation into a gathered region")
        unwritten = _diag.unwritten(t)
        if unwritten is not None and idx.view(unwritten).any():
            raise NotBatchable("an accumulation into elements never written")
        flush_pending()
        self._add_in_order(idx, _language_helpers()[1](addend, "other"))

    def accumulate_iterations(self, vals, all_written) -> None:
        """``nisa.nc_matmul(dst=t, ...)`` of every iteration into ``t``, a whole PSUM tile made before
        the loop (a matmul accumulation group spanning the loop): the products ``vals`` (iteration
        axis first) added in iteration order, as the reference path's fp32 in-place adds. Only where
        every element of ``t`` holds a value already (``all_written(t)``, the matmul's own record),
        so every iteration accumulates; a group's start stays per iteration."""
        t = self.outer
        if t._parent is not None or t.buffer is not psum or (t._mem is not None and t._mem.tiles is not None):
            raise NotBatchable("a matmul accumulating into a view or a placed tile made before the loop")
        if not all_written(t) or t._thunk is not None or not t._data.flags.writeable:
            raise NotBatchable("a matmul accumulation group's start in a batch")
        flush_pending()
        self._add_in_order(resolve(t.shape, Ellipsis, t.buffer.tile_label), vals)

    def _add_in_order(self, idx, vals):
        """Add each iteration's ``vals`` into region ``idx`` of the outer tile, in iteration order."""
        if self.was_read:
            raise NotBatchable("an accumulation into a tile the batch's iterations read")
        self.accumulated = True
        t = self.outer
        cur = idx.view(t._data)
        if np.ndim(vals) < 1 or np.shape(vals)[0] != self.batch.bshape[0]:
            raise NotBatchable("an accumulated value without the iteration axis")
        self.batch.undo.append((cur, cur.copy()))
        for v in vals:
            if cur.dtype == np.float32 and np.result_type(cur, v) == np.float32 and np.shape(v) == cur.shape:
                np.add(cur, v, out=cur)  # (the reference path's fp32 in-place add)
            else:
                cur[...] = dt.cast(np.add(dt.compute_view(cur), v), cur.dtype)
        self.batch.tile_writes.append((t, idx))


class _Accumulator:
    """``t[key]`` of a tile from outside that every iteration of a batch reads at the same region:
    it may only be the target of ``+=`` (an accumulation across iterations); any other use fails and
    the iterations run one at a time."""

    __slots__ = ("target", "key")

    def __init__(self, target, key):
        self.target, self.key = target, key

    def __iadd__(self, addend):
        return _Sum(self.target, self.key, addend)


class _Sum:
    """``t[key] + addend`` of every iteration, which only ``t[key] = ...`` (the end of ``+=``) takes."""

    __slots__ = ("target", "key", "addend")

    def __init__(self, target, key, addend):
        self.target, self.key, self.addend = target, key, addend


def _read_only_view(a):
    v = a.view()
    v.flags.writeable = False
    return v


def _assigned(tile, idx):
    """Bookkeeping of the reference path's assignments for a batch's writes into ``tile`` (made
    before the loop) through ``idx``: the elements are written (``uninit``), and the tile -- or each
    block of a block-dimension tile -- is copied into now (the memory model's live ranges)."""
    m = tile._mem
    if (tile._diag is None or tile._diag.written is None) and m is None:
        return
    written = np.zeros(tile.shape, bool)
    idx.view(written)[...] = True
    _diag.mark_written(tile, written)
    if m is not None and m.blocks is not None:
        lead = tile.shape[:tile.pdim]
        for b in np.argwhere(written.reshape(lead + (-1,)).any(axis=-1)):
            _memory.copied(_memory.block_rec(m, tuple(int(i) for i in b)))
    elif m is not None:
        _memory.copied(m)


def _run_batch(body, values, rest) -> None:
    """Run iterations ``rest`` as one batch of ``body``; on any error the batch's HBM writes are
    undone and the error (NotBatchable, or one the reference path will raise) propagates."""
    from .cores import in_worker

    outer = current_or_none()
    if type(outer) is not Program or in_worker():
        # (a simulated core's HBM writes carry the values the LNC race analysis compares)
        raise NotBatchable("loops batch only in a program running alone")
    flush_pending()
    batch = LoopBatch(outer, rest)
    loops = list(_diag.loops)
    _diag.loops.clear()  # (tile-level checks were made by the reference iterations)
    set_current(batch)
    index = BExpr(AffineExpr((), rest.start, ()), (rest.step,), (len(rest),))
    try:
        body.fn(index, *[_Outer.of(v, batch, name in body.writes) if type(v) is Tile else v
                         for name, v in zip(body.free, values)])
    except BaseException:
        for view, old in reversed(batch.undo):
            view[...] = old
        raise
    finally:
        set_current(outer)
        _diag.loops[:] = loops
    for tile, idx in batch.tile_writes:
        _assigned(tile, idx)
    log = getattr(outer.launch, "diag", None)
    if log is not None:
        for tensor, access, mask, wh in batch.staged:
            log.add(tensor, access, mask, True, outer, wh)
    global batched_iterations
    batched_iterations += len(rest)
