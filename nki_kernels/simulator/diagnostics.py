"""Checks that need more than one op to see: SPMD races, loop-carried dependencies, uninitialised reads.

Each check is a rule of :mod:`.config` (``race``, ``loop_carried``, ``uninit``;
``capacity`` and ``operand`` are checked where the op runs) reported as an
:class:`NKIError` naming the rule, the tensors, the regions and the kernel
``file:line``, or as a warning, or not at all.

Cost model of the checks (the default mode must stay cheap):

* HBM accesses are logged per launch as ``(program, tensor, index, mask,
  line)`` -- no boxes, no element lists. At the end of the launch only tensors
  that were written are analysed: accesses become boxes (exact for basic
  slices and ragged-edge masks, bounding boxes otherwise) and a sort-and-sweep
  over the boxes finds overlapping pairs from different programs; pairs whose
  bounding boxes overlap but are not exact compare element indices.
* Loads from an HBM tensor allocated uninitialised (``nl.ndarray`` in HBM)
  build a bool "written" mask on first use, replaying the launch's writes.
* Tiles carry a small :class:`TileInfo` only when allocated with
  ``nl.ndarray`` (uninitialised) or created inside an ``affine_range``;
  outside affine loops an op pays one attribute test per operand.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import warnings

import numpy as np

from . import config
from . import dtypes as dt
from .errors import _THREADING_FILE, NKIError, thread_where
from .index_expr import Mask
from .indexing import full_mask

_current_or_none = None  # core.current_or_none, bound on first use (core imports this module)

_SIM_DIR = os.path.dirname(os.path.abspath(__file__))
_is_sim_file = {}

loops = []  # active affine_range frames, innermost last
_rule_modes = config._modes  # (config.enabled(rule) without the call, on the per-access path)


# ---------------------------------------------------------------------------
# kernel source locations
# ---------------------------------------------------------------------------
def where(depth: int = 1):
    """``(file, line, function)`` of the innermost frame outside the simulator (cheap, cached per file)."""
    return where_from(sys._getframe(depth))


def where_from(f):
    """:func:`where` starting the search at frame ``f``."""
    while f is not None:
        fn = f.f_code.co_filename
        sim = _is_sim_file.get(fn)
        if sim is None:
            sim = _is_sim_file[fn] = os.path.abspath(fn).startswith(_SIM_DIR) or fn == _THREADING_FILE
        if not sim:
            return (fn, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return thread_where.fallback or ("<unknown>", 0, "?")  # (a core's thread: its kernel's return)


class InstructionState:
    """How many ``dst=`` instructions are running (operands.instruction), the outermost one's name
    and its kernel location once looked up. The accesses of one instruction share one source line,
    so it is found once per instruction."""

    __slots__ = ("depth", "where", "op")

    def __init__(self):
        self.depth = 0
        self.where = self.op = None


class _InstructionWhere(threading.local):
    """Per thread (the cores of a multi-core launch take turns in threads): its
    :class:`InstructionState` (one thread-local lookup per use, plain attributes after it)."""

    def __init__(self):
        self.state = InstructionState()


instruction_where = _InstructionWhere()


def fmt_where(w) -> str:
    """``file:line in function`` for a :func:`where` tuple."""
    return f"{w[0]}:{w[1]} in {w[2]}"


def definition(kernel):
    """``file:line in function`` of a kernel's (or function's) ``def`` line, or ``None``."""
    code = getattr(getattr(kernel, "func", kernel), "__code__", None)
    return None if code is None else fmt_where((code.co_filename, code.co_firstlineno, code.co_name))


# ---------------------------------------------------------------------------
# regions: what an index (and mask) selects, as a box plus exact elements on demand
# ---------------------------------------------------------------------------
def _strided_elements(index):
    """The flat indices a strided (affine) index selects, made in increasing order without a sort:
    its tile axes walked from the largest flat step to the smallest. ``None`` when that order is
    not increasing (a negative step, steps whose ranges interleave or repeat elements), or for
    another kind of index. (A batch of grid programs' tiles strided through an output: sorting the
    million indices of each such store took most of a launch's race check.)"""
    if index.strided is None:
        return None
    start, coefs = index.strided
    row = [math.prod(index.shape[t + 1:]) for t in range(len(index.shape))]
    out = index.out_shape
    steps = [sum(c[ax] * r for c, r in zip(coefs, row)) for ax in range(len(out))]
    axes = sorted((ax for ax, n in enumerate(out) if n > 1), key=lambda ax: -steps[ax])
    if any(steps[ax] <= 0 for ax in axes):
        return None
    e = np.array([sum(s * r for s, r in zip(start, row))], np.int64)
    for ax in axes:
        e = np.add.outer(e, np.arange(out[ax], dtype=np.int64) * steps[ax]).ravel()
    if e.size > 1 and not (e[1:] > e[:-1]).all():
        return None
    return e


def sorted_unique(a) -> np.ndarray:
    """The sorted distinct values of ``a``, by sorting: NumPy 2.4's hash-based ``np.unique`` takes
    about 2 s for the million element indices of one large tile view, sorting about 0.05 s (the
    uninit checks of nki-library's LNC=2 RMSNorm spent 22 of 27 s there). Many integers within a
    span at most 64 times their count are marked in a map of the span instead: nki-library moe_cte's
    token-row gathers and scatters (393k elements) took 20 ms each to sort, ~5 ms this way."""
    a = np.asarray(a).ravel()
    if a.size > 1024 and a.dtype == np.intp:  # (flat element indices; no overflow in a - lo below)
        lo, hi = int(a.min()), int(a.max())
        span = hi - lo + 1
        if span <= 64 * a.size and span <= 1 << 28:
            seen = np.zeros(span, bool)
            seen[a - lo] = True
            return np.flatnonzero(seen) + lo
    a = np.sort(a)
    if a.size > 1:
        keep = np.empty(a.size, bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    return a


class Region:
    """The elements an :class:`~.indexing.Index` (with ``mask``) selects in an array of ``shape``.

    ``lo``/``hi`` bound a box (half-open per axis); ``exact`` says the box is
    exactly the selection. :meth:`elements` gives flat element indices.
    """

    __slots__ = ("shape", "lo", "hi", "exact", "index", "mask", "_elems")

    def __init__(self, shape, lo, hi, exact, index=None, mask=None):
        self.shape = tuple(shape)
        self.lo, self.hi, self.exact = tuple(lo), tuple(hi), exact
        self.index, self.mask = index, mask
        self._elems = None

    @classmethod
    def whole(cls, shape):
        """All of an array of ``shape`` (one shared object per shape: regions are not changed once made)."""
        shape = tuple(shape)
        r = _WHOLE.get(shape)
        if r is None:
            if len(_WHOLE) >= 4096:
                _WHOLE.clear()
            r = _WHOLE[shape] = cls(shape, (0,) * len(shape), tuple(shape), True)
        return r

    @classmethod
    def of(cls, index, mask=None):
        """The region of a resolved index, honouring ``mask`` (unmasked: one shared object per
        index, as resolved indices are shared by the iterations of a loop)."""
        if mask is None:
            hit = _REGION_OF.get(id(index))
            if hit is not None and hit[0] is index:
                return hit[1]
            region = cls._of(index, None)
            if len(_REGION_OF) >= 8192:
                _REGION_OF.clear()
            _REGION_OF[id(index)] = (index, region)
            return region
        return cls._of(index, mask)

    @classmethod
    def _of(cls, index, mask):

        if mask is not None:
            box, sub = index._boxed(mask)
            if sub is not None:
                if not all(b.stop > b.start for b in box):
                    return cls(index.shape, (0,) * len(index.shape), (0,) * len(index.shape), True)
                index, mask = sub, None
            elif full_mask(mask, index.out_shape) is None:
                mask = None
        shape = index.shape
        if index.basic is not None and mask is None:
            lo, hi, exact = [], [], True
            for b, dim in zip(index.basic, shape):
                if type(b) is int or isinstance(b, (np.integer,)):
                    lo.append(int(b))
                    hi.append(int(b) + 1)
                    continue
                if b.start is None or b.stop is None or b.step is None:
                    b = slice(*b.indices(dim))
                n = len(range(b.start, b.stop, b.step))
                if n == 0:
                    return cls(shape, (0,) * len(shape), (0,) * len(shape), True)
                lo.append(b.start)
                hi.append(b.start + b.step * (n - 1) + 1)
                exact = exact and (b.step == 1 or n == 1)
            return cls(shape, lo, hi, exact, None if exact else index)
        if index.strided is not None and mask is None:
            box = _strided_box(index)
            if box is not None:
                return cls(shape, box[0], box[1], True)
        # Strided views, gathers and general masks: a bounding box, elements when needed.
        lo, hi = [], []
        for c, dim in zip(index.comps, shape):
            if isinstance(c, (int, np.integer)):
                lo.append(int(c))
                hi.append(int(c) + 1)
            elif hasattr(c, "bounds"):
                a, b = c.bounds()
                lo.append(max(0, a))
                hi.append(min(dim, b + 1))
            else:
                a = np.asarray(c)
                lo.append(max(0, int(a.min())) if a.size else 0)
                hi.append(min(dim, int(a.max()) + 1) if a.size else 0)
        return cls(shape, lo, hi, False, index, mask)

    def empty(self) -> bool:
        """Whether the region selects nothing."""
        return any(h <= l for l, h in zip(self.lo, self.hi))

    def elements(self) -> np.ndarray:
        """Sorted unique flat indices of the selected elements."""
        if self._elems is None:
            if self.exact:
                grids = np.ix_(*(np.arange(l, h) for l, h in zip(self.lo, self.hi)))
                self._elems = np.ravel_multi_index(grids, self.shape).ravel()
            else:
                from .indexing import full_mask

                m = self.mask
                e = _strided_elements(self.index) if m is None else None
                if e is None:
                    e = self.index.element_indices(m if full_mask(m, self.index.out_shape) is not None else None) \
                        if m is not None else self.index.element_indices()
                    e = sorted_unique(e)
                self._elems = e
        return self._elems

    def box(self) -> tuple:
        """The bounding box as a tuple of slices (the selection itself when ``exact``)."""
        return tuple(slice(l, max(l, h)) for l, h in zip(self.lo, self.hi))

    def box_overlaps(self, other) -> bool:
        """Whether the bounding boxes intersect."""
        return all(a < d and c < b for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi))

    def overlap(self, other):
        """A description of the common elements (``None`` if none), e.g. ``[0:128, 0:512]``."""
        if self.shape != other.shape:
            common = np.intersect1d(self.elements(), other.elements(), assume_unique=True)
            return None if common.size == 0 else _describe_elems(common, self.shape)
        if not self.box_overlaps(other):
            return None
        if self.exact and other.exact:
            return "[" + ", ".join(f"{max(a, c)}:{min(b, d)}" for a, b, c, d in
                                   zip(self.lo, self.hi, other.lo, other.hi)) + "]"
        common = _common_elements(self, other)
        return None if common.size == 0 else _describe_elems(common, self.shape)

    def contains(self, other) -> bool:
        """Whether every element of ``other`` is in this region."""
        if self.shape == other.shape and self.exact and other.exact:
            return all(a <= c and d <= b for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi))
        if self.shape == other.shape and not self.box_overlaps(other):
            return other.empty()
        return bool(np.isin(other.elements(), self.elements(), assume_unique=True).all())

    def describe(self) -> str:
        """``[lo:hi, ...]`` (the bounding box; ``~`` marks a non-box selection)."""
        box = "[" + ", ".join(f"{a}:{b}" for a, b in zip(self.lo, self.hi)) + "]"
        return box if self.exact else f"~{box} (strided/masked)"


_bitmap_of = [None, None]  # (region, bool map of its elements): the race check meets one region many times in a row


def _common_elements(a, b) -> np.ndarray:
    """The sorted flat indices two regions of one shape both select (``np.intersect1d``'s result).

    nki-library's MoE CTE scatters token rows by indirect DMA: every such region's bounding box is
    the whole output, and intersecting two lists of ~400k elements took ~120 ms per pair of them
    (most of a 15-minute test); a map of ``a``'s elements answers it in a few ms."""
    size = math.prod(a.shape)
    if size > 1 << 26:
        return np.intersect1d(a.elements(), b.elements(), assume_unique=True)
    if _bitmap_of[0] is not a:
        bits = np.zeros(size, bool)
        bits[a.elements()] = True
        _bitmap_of[:] = [a, bits]
    eb = b.elements()  # (sorted: so is what it keeps)
    return eb[_bitmap_of[1][eb]]


_WHOLE = {}  # shape -> Region.whole(shape)
_REGION_OF = {}  # id(index) -> (index, Region.of(index)) (the index is kept, so its id stays its own)


def _strided_box(index):
    """``(lo, hi)`` when a strided index selects exactly a box: each tensor axis is walked by its
    own tile axes as one contiguous mixed-radix range (e.g. a batch of programs' row blocks
    ``pid * 128 + p``), else ``None``."""
    lo, hi, used = [], [], set()
    for c in index.comps:
        if isinstance(c, (int, np.integer)):
            lo.append(int(c))
            hi.append(int(c) + 1)
            continue
        walk = sorted((k, n, ax) for ax, (k, n) in enumerate(zip(c.coefs, c.shape)) if k and n > 1)
        span = 1
        for k, n, ax in walk:
            if k != span or ax in used:
                return None
            used.add(ax)
            span *= n
        lo.append(c.offset)
        hi.append(c.offset + span)
    return lo, hi


def _describe_elems(flat, shape):
    idx = np.unravel_index(flat, shape)
    box = "[" + ", ".join(f"{int(a.min())}:{int(a.max()) + 1}" for a in idx) + "]"
    first = tuple(int(a[0]) for a in idx)
    return f"{flat.size} element(s) within {box}, first {first}"


def _union_covers(regions, target) -> bool:
    """Whether the union of ``regions`` covers ``target``."""
    for r in regions:
        if r.contains(target):
            return True
    if not regions:
        return target.empty()
    same = [r for r in regions if r.shape == target.shape]
    if target.exact and all(r.exact for r in same):
        # Boxes: mark each region's intersection with the target's box (no element lists, no sort).
        if target.empty():
            return True
        cover = np.zeros([h - l for l, h in zip(target.lo, target.hi)], dtype=bool)
        for r in same:
            sl = tuple(slice(max(a, c) - c, min(b, d) - c) for a, b, c, d in zip(r.lo, r.hi, target.lo, target.hi))
            if all(x.stop > x.start for x in sl):
                cover[sl] = True
        return bool(cover.all())
    elems = sorted_unique(np.concatenate([r.elements() for r in regions if r.shape == target.shape] or [np.empty(0, int)]))
    return bool(np.isin(target.elements(), elems, assume_unique=True).all())


# ---------------------------------------------------------------------------
# HBM: per-launch access log (races, uninitialised outputs)
# ---------------------------------------------------------------------------
def _tensor_key(t):
    """Identity of the memory a tensor views (reshapes of one buffer share their base)."""
    k = t.__dict__.get("_dkey")
    if k is None:
        d = t.data
        k = (d.__array_interface__["data"][0], d.shape, d.strides)
        t._dkey = k
    return k


class LaunchLog:
    """HBM accesses of one launch: ``key -> [tensor, reads, writes]`` with ``(pid, index, mask, where, stamp)``
    (``stamp``: a :class:`~.cores.Stamp` for the cores of a multi-core launch, else ``None``)."""

    def __init__(self):
        self.tensors = {}
        # key -> indices of writes that stored exactly the values already there (written by an
        # earlier program): programs storing identical data is benign, not a race.
        self.repeats = {}
        self.extent = {}  # key -> (lo, hi) box around all writes so far, None once unknown
        self.writers = {}  # key -> program ids that wrote it
        self.finals = {}  # (key, core) -> (values, written) each core of a multi-core launch left (cores.py)

    def add(self, tensor, access, mask, write, prog, wh=None, values=None):
        """Log one access of ``tensor`` by ``prog`` (``write`` or read) made at ``wh`` (file, line, fn);
        ``values`` (about to be written) let a write that changes nothing be told apart."""
        key = _tensor_key(tensor)
        ent = self.tensors.get(key)
        if ent is None:
            ent = self.tensors[key] = [tensor, [], []]
        rec = (prog.pid, access.index, mask, wh or where(), _core_stamp(prog, tensor))
        if write and values is not None and rec[4] is not None:
            from .cores import note_write

            note_write(rec[4], tensor, access, mask, values)
        if write and values is not None and ent[2] and self._may_overlap(key, access, mask, prog.pid, ent[2]) \
                and _rewrites_same(tensor, access, mask, values):
            self.repeats.setdefault(key, set()).add(len(ent[2]))
        if write:
            self._grow_extent(key, access, mask, not ent[2])
            self.writers.setdefault(key, set()).add(prog.pid)
        ent[2 if write else 1].append(rec)
        if write and tensor.__dict__.get("written") is not None:
            _mark_written(tensor, access.index, mask)


    def _may_overlap(self, key, access, mask, pid, writes) -> bool:
        """Cheap test whether this write can touch what another program wrote before."""
        if self.writers.get(key) == {pid}:
            return False
        ext = self.extent.get(key)
        box = _fast_box(access.index, mask)
        if ext is None or box is None:
            return True
        return all(l < eh and el < h for l, h, el, eh in zip(box[0], box[1], ext[0], ext[1]))

    def _grow_extent(self, key, access, mask, first):
        box = _fast_box(access.index, mask)
        if box is None:
            self.extent[key] = None
        elif first:
            self.extent[key] = (list(box[0]), list(box[1]))
        elif self.extent.get(key) is not None:
            lo, hi = self.extent[key]
            self.extent[key] = ([min(a, b) for a, b in zip(lo, box[0])], [max(a, b) for a, b in zip(hi, box[1])])


def _rewrites_same(tensor, access, mask, values) -> bool:
    """Whether storing ``values`` at ``access`` leaves ``tensor`` unchanged (NaN equal to NaN)."""

    shape = access.index.out_shape
    old = access.index.read(tensor.data, mask)
    new = np.broadcast_to(np.asarray(values), shape).astype(tensor.dtype)
    m = full_mask(mask, shape)
    if m is not None:
        new = np.where(m, new, np.zeros((), tensor.dtype))
    if tensor.dtype.fields is not None:  # packed MX elements (a structured dtype): compare their bits
        return np.ascontiguousarray(old).tobytes() == np.ascontiguousarray(new).tobytes()
    kind = tensor.dtype.kind
    return bool(np.array_equal(old, new, equal_nan=kind in "fc" or not np.issubdtype(tensor.dtype, np.number)))


def wants_old_values(tensor, access, mask) -> bool:
    """Whether a store must leave ``tensor`` untouched until :func:`hbm_access` has compared the
    values it writes with what another program wrote there (so a deferred op cannot write in place)."""
    prog = (_current_or_none or _bind_current())()
    log = getattr(prog.launch, "diag", None) if prog is not None and not prog.nb else None
    if log is None or not config.enabled("race"):
        return False
    key = _tensor_key(tensor)
    ent = log.tensors.get(key)
    return bool(ent and ent[2] and log._may_overlap(key, access, mask, prog.pid, ent[2]))


def _bind_current():
    global _current_or_none
    from .core import current_or_none as _current_or_none

    return _current_or_none


def _core_stamp(prog, tensor):
    """The core and barrier count of an access by a core of a multi-core launch (else ``None``)."""
    if getattr(prog, "worker", None) is None:
        return None
    from .cores import access_stamp

    return access_stamp(prog, tensor)


def _barrier_ordered(ra, rb) -> bool:
    """Whether two logged accesses by different cores are ordered by a ``core_barrier``."""
    if ra[4] is None or rb[4] is None:
        return False
    from .cores import barrier_ordered

    return barrier_ordered(ra[4], rb[4])


def _read_discarded(stamp) -> bool:
    """Whether a core's logged HBM read brought values nothing used afterwards (see cores.read_discarded)."""
    if stamp is None or stamp.loaded is None:
        return False
    from .cores import read_discarded

    return read_discarded(stamp)


def _write_keeps(rec, region) -> bool:
    """Whether a core's logged HBM write left every element of ``region`` as it was (see cores.write_keeps)."""
    if rec[4] is None or rec[4].kept is None:
        return False
    from .cores import write_keeps

    return write_keeps(rec, region)


def _same_final_values(tensor, state, ra, rb, rec_a, rec_b) -> bool:
    """Whether two cores' overlapping writes left the same final values (see cores.same_final_values)."""
    if rec_a[4] is None or rec_b[4] is None:
        return False
    from .cores import same_final_values

    return same_final_values(_tensor_key(tensor), state.diag, ra, rb, rec_a[4], rec_b[4])


def _mark_written(tensor, index, mask):
    index.write(tensor.written, np.True_, mask)


def hbm_access(tensor, access, mask, write, values, prog) -> None:
    """Hook for every DMA between HBM and on-chip memory (``nl.load``/``nl.store``/``dma_copy``) by
    the running program ``prog`` (or none); for a write, ``values`` are what is about to be stored
    (``None`` once already stored)."""
    if prog is None:
        return
    if write and not tensor.is_output:
        prog.launch.wrote_inputs = True
    if prog.nb:
        # A batch logs its writes once it has run to the end (see vectorize); it never reads
        # what the launch writes, so its reads need no log.
        if write:
            prog.staged.append((tensor, access, mask, where()))
        return
    log = getattr(prog.launch, "diag", None)
    if log is None:
        return
    td = tensor.__dict__
    if not write:
        if td.get("uninit") and config.enabled("uninit"):
            _check_hbm_init(tensor, access, mask, log)
        # Reads of kernel inputs are logged only once the input has been written in this
        # launch (in-place kernels), or always in thorough mode: the common case, inputs
        # that are only read, then costs nothing. Launch outputs are always logged.
        if "uninit" not in td and not config.thorough:
            key = td.get("_dkey") or _tensor_key(tensor)
            if key not in log.tensors:
                if loops:
                    index = access.index
                    hit = _REGION_OF.get(id(index)) if mask is None else None  # (Region.of's cache hit)
                    region = hit[1] if hit is not None and hit[0] is index else Region.of(index, mask)
                    _loop_log(tensor, region, "r", hbm=True, key=key)
                return
    log.add(tensor, access, mask, write, prog, values=values if write else None)
    if loops:
        _loop_log(tensor, Region.of(access.index, mask), "w" if write else "r", hbm=True)


def _check_hbm_init(tensor, access, mask, log):
    if tensor.__dict__.get("written") is None:
        tensor.written = np.zeros(tensor.shape, dtype=bool)
        ent = log.tensors.get(_tensor_key(tensor))
        for _, idx, m, *_ in (ent[2] if ent else ()):
            _mark_written(tensor, idx, m)
    got = access.index.read(tensor.written, mask)

    m = full_mask(mask, access.index.out_shape)
    missing = ~got if m is None else (~got & m)
    if missing.any():
        first = tuple(int(i) for i in np.argwhere(missing)[0])
        region = Region.of(access.index, mask)
        config.report("uninit", NKIError(
            "uninit",
            f"nl.load reads {int(missing.sum())} element(s) of {tensor.name} {tensor.shape} (region "
            f"{region.describe()}, first unwritten tile position {first}) that no program has written yet; "
            f"{tensor.name} was allocated uninitialised with nl.ndarray, so on hardware these are garbage. "
            "Store to it before loading, or allocate it with nl.zeros"))


def launch_begin(state) -> None:
    """Start logging a launch (called by ``run_programs``)."""
    state.diag = LaunchLog() if (config.enabled("race") or config.enabled("uninit")) else None


def launch_end(state, result=None) -> None:
    """Analyse a finished launch: races between programs, returned outputs left unwritten."""
    log = getattr(state, "diag", None)
    if log is None:
        return
    entries = []  # (tensor, writes, disjoint, regions) of every tensor written
    for key, (tensor, reads, writes) in log.tensors.items():
        if not writes:
            continue
        disjoint, regions = False, None
        if config.enabled("race"):
            disjoint, regions = _check_races(tensor, reads, writes, state, log.repeats.get(key, ()))
            _bitmap_of[:] = [None, None]
        entries.append((tensor, writes, disjoint, regions))
    for out in _hbm_results(result):
        _returned_output(out, entries)


def _returned_output(out, entries) -> None:
    """A launch returns ``out``, an output tensor or a view of one (``out.reshape(...)``). Elements of
    an uninitialised (``nl.ndarray``) output that no program stored are what the hardware leaves
    there: the simulator fills them with the NaN sentinel, as the official simulator fills new
    tensors, so no stale value passes for a result. A kernel may leave padding it knows its caller
    never reads, which runs on hardware: that is a warning (``uninit``), not an error. An output
    that nothing was stored into at all is an error."""
    root = out.__dict__.get("_storage_root", out)
    if not root.__dict__.get("uninit"):
        return
    mine = [(t, w, d, r) for t, w, d, r in entries if _same_memory(t, root)
            or t.__dict__.get("_storage_root") is root]
    if not mine:
        if config.enabled("uninit"):
            config.report("uninit", NKIError(
                "uninit", f"kernel returns {out.name} {out.shape} (allocated with nl.ndarray) but no program "
                "stored anything into it; its contents would be garbage on hardware", where=fmt_where(where())))
        return
    if len(mine) == 1 and _same_memory(mine[0][0], root) and _covered(*mine[0]):
        return  # (the common case: one whole-tensor alias whose writes cover it)
    written = np.zeros(root.data.size, dtype=bool)
    for tensor, writes, _, regions in mine:
        bits = _element_view(written, root, tensor)
        for r in (regions if regions is not None else _boxes(writes)):
            if r.shape == tensor.shape and not r.empty():
                if r.exact:
                    bits[r.box()] = True
                else:
                    _mark_elements(bits, r)
    mine_bits = _element_view(written, root, out)
    if mine_bits.all():
        return
    fill = root.data.reshape(-1)  # (an output's storage is C-contiguous: a view, no copy)
    fill[~written] = dt.sentinel(root.dtype)
    if config.enabled("uninit"):
        missing = ~mine_bits
        first = tuple(int(v) for v in np.argwhere(missing)[0])
        wh = mine[-1][1][-1][3]  # (where the last store into it was made: the kernel's line)
        warnings.warn_explicit(
            f"[uninit] kernel returns {out.name} {out.shape} (allocated with nl.ndarray) but {int(missing.sum())} of "
            f"its {missing.size} elements were never stored (first at {first}); they hold "
            f"{dt.sentinel(root.dtype)!r}, as on the official simulator (on hardware: whatever was there). "
            f"Cover the whole output if its caller reads them, or allocate it with nl.zeros (at {fmt_where(wh)})",
            config.NKIWarning, wh[0], wh[1])


def _covered(tensor, writes, disjoint, regions) -> bool:
    """Whether the write regions (boxes, not overlapping) add up to every element of ``tensor``."""
    regions = regions if regions is not None else _boxes(writes)
    return disjoint and all(r.exact for r in regions) and \
        sum(math.prod(h - l for l, h in zip(r.lo, r.hi)) for r in regions) >= math.prod(tensor.shape)


def _element_view(bits, root, tensor):
    """The elements of flat bool array ``bits`` (one per element of ``root``, C order) that ``tensor``,
    a view of ``root``'s storage, addresses, with ``tensor``'s shape."""
    d, r = tensor.data, root.data
    size = d.dtype.itemsize
    offset = (d.__array_interface__["data"][0] - r.__array_interface__["data"][0]) // size
    strides = tuple(s // size for s in d.strides)
    return np.lib.stride_tricks.as_strided(bits[offset:], d.shape, strides, writeable=True)


def _mark_elements(bits, region) -> None:
    """Mark the elements ``region`` lists (flat C-order positions in ``bits``' shape) in ``bits``."""
    if bits.flags.c_contiguous:
        bits.reshape(-1)[region.elements()] = True
        return
    flat = np.zeros(bits.shape, bool).reshape(-1)
    flat[region.elements()] = True
    bits |= flat.reshape(bits.shape)


def _same_memory(a, b) -> bool:
    """``a`` is ``b`` or a whole-tensor reshape of it (``out.reshape(...)`` stores)."""
    if a is b:
        return True
    da, db = a.data, b.data
    return (da.size == db.size and da.__array_interface__["data"][0] == db.__array_interface__["data"][0]
            and da.flags.c_contiguous and db.flags.c_contiguous)


def _hbm_results(result):
    from .core import HBMTensor

    if isinstance(result, HBMTensor):
        yield result
    elif isinstance(result, (tuple, list)):
        for r in result:
            yield from _hbm_results(r)


def _fast_box(index, mask):
    """``(lo, hi)`` of a plain basic-slice access with no effective mask, else ``None``."""
    if index.basic is None or (mask is not None and not (isinstance(mask, Mask) and mask.all_true())):
        return None
    lo, hi = [], []
    for b in index.basic:
        if type(b) is int:
            lo.append(b)
            hi.append(b + 1)
        elif type(b) is slice and b.step == 1 and b.start is not None and b.stop is not None and b.stop > b.start:
            lo.append(b.start)
            hi.append(b.stop)
        else:
            return None
    return lo, hi


def _boxes(recs):
    """Regions of logged accesses; plain box accesses skip the general :meth:`Region.of`."""
    out = []
    for _, idx, m, *_ in recs:
        fb = _fast_box(idx, m)
        out.append(Region(idx.shape, fb[0], fb[1], True) if fb is not None else Region.of(idx, m))
    return out


def _candidate_pairs(lo, hi):
    """Index pairs ``(i, j)``, i < j, whose boxes overlap (sort-and-sweep along the most spread axis)."""
    n, d = lo.shape
    if n < 2:
        return np.empty(0, int), np.empty(0, int)
    ax = int(np.argmax([np.unique(lo[:, a]).size for a in range(d)])) if d else 0
    order = np.argsort(lo[:, ax], kind="stable")
    slo, shi = lo[order], hi[order]
    ends = np.searchsorted(slo[:, ax], shi[:, ax], side="left")
    counts = np.maximum(ends - np.arange(n) - 1, 0)
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, int), np.empty(0, int)
    i = np.repeat(np.arange(n), counts)
    start = np.cumsum(counts) - counts
    j = i + 1 + (np.arange(total) - np.repeat(start, counts))
    ok = np.all((slo[i] < shi[j]) & (slo[j] < shi[i]), axis=1)
    return order[i[ok]], order[j[ok]]


def _check_races(tensor, reads, writes, state, repeats=()):
    """Report the first cross-program write/write or read/write overlap; return whether the
    writes are pairwise disjoint boxes (the output coverage shortcut; False when a write is not a
    box, as that shortcut then does not apply). Writes in ``repeats``
    stored exactly what was already there: overlapping an earlier write with them is benign."""
    recs = [(r, True) for r in writes] + [(r, False) for r in reads]
    regions = _boxes([r for r, _ in recs])
    shapes = {r.shape for r in regions}
    if len(shapes) != 1:
        return None, regions[:len(writes)]
    d = len(tensor.shape) if regions else 0
    lo = np.array([r.lo for r in regions], dtype=np.int64).reshape(len(regions), d)
    hi = np.array([r.hi for r in regions], dtype=np.int64).reshape(len(regions), d)
    pid = [r[0][0] for r in recs]
    is_w = np.array([w for _, w in recs])
    i, j = _candidate_pairs(lo, hi)
    keep = is_w[i] | is_w[j]
    i, j = i[keep], j[keep]
    # Disjoint writes matter only to the output-coverage shortcut, which needs every write region a
    # box: otherwise (indirect scatters) a pair that cannot race needs no overlap computed (nki-library
    # moe_cte: ~10k same-core or barrier-ordered pairs of 400k-element scatters, seconds per launch).
    writes_disjoint = all(r.exact for r in regions[:len(writes)])
    for a, b in zip(i.tolist(), j.tolist()):
        same = pid[a] == pid[b]
        both_w = is_w[a] and is_w[b]
        if same and not both_w:
            continue
        benign = same or (both_w and max(a, b) in repeats) or _barrier_ordered(recs[a][0], recs[b][0])
        if benign and not (both_w and writes_disjoint):
            continue
        common = regions[a].overlap(regions[b])
        if common is None:
            continue
        if both_w:
            writes_disjoint = False
        if benign:
            continue
        if is_w[a] and is_w[b] and _same_final_values(tensor, state, regions[a], regions[b], recs[a][0], recs[b][0]):
            continue
        if not is_w[a]:
            a, b = b, a
        if not is_w[b] and (_read_discarded(recs[b][0][4]) or _write_keeps(recs[a][0], regions[b])):
            continue  # the values read were never used, or are the same before and after the write
        (pa, _, _, wa, sa), (pb, _, _, wb, sb) = recs[a][0], recs[b][0]
        what = "also writes" if is_w[b] else "reads"
        if sa is not None and sb is not None:
            wb = (*wb[:2], f"{wb[2]} (logical cores {sa.core} and {sb.core}, with no nisa.core_barrier on "
                  f"{tensor.name} between the two accesses)")
        config.report("race", NKIError(
            "race",
            f"programs {pa} and {pb} of the SPMD grid {state.grid} both touch {tensor.name} {tensor.shape} "
            f"({tensor.buffer!r}) at {common}: program {pa} writes it at {fmt_where(wa)}, program {pb} "
            f"{what} it at {fmt_where(wb)}. Programs run in any order or concurrently on hardware, so the "
            "result depends on scheduling; give each program its own output region",
            where=fmt_where(wb)))
        return False, regions[:len(writes)]
    return writes_disjoint, regions[:len(writes)]


# ---------------------------------------------------------------------------
# tiles: uninitialised nl.ndarray tiles, affine_range loop-carried dependencies
# ---------------------------------------------------------------------------
class TileInfo:
    """Diagnostic state of a tile: loop iterations it was created in, elements written (for
    ``nl.ndarray`` tiles), and for views the root tile and index they select."""

    __slots__ = ("created", "written", "root", "index", "accumulated", "marked", "checked")

    def __init__(self, created=(), written=None, root=None, index=None):
        self.created = created
        self.written = written  # None: fully defined; False: nothing written; bool array: per element
        self.marked = 0  # elements marked written so far, overlaps counted again (a bound for the all() test)
        self.checked = None  # boxes (lo, hi) found or marked fully written: writes only add to `written`
        self.root = root
        self.index = index
        self.accumulated = False


def _created_tag():
    # (frame, iteration) of every active loop: the innermost frame keeps it for its iteration
    return loops[-1].tag if loops else ()


def mark_uninitialised(tile) -> None:
    """An ``nl.ndarray`` SBUF/PSUM tile: nothing of it is defined until written."""
    info = tile._diag
    if info is None:
        info = tile._diag = TileInfo(_created_tag() if loops else ())
    info.written = False
    info.marked = 0
    info.checked = None
    _changed()


def on_view(parent, view, index) -> None:
    """``parent[index]`` made ``view``: reads of the view are reads of the parent's region."""
    pinfo = parent._diag
    if pinfo is not None and pinfo.root is not None:
        root, index = pinfo.root, pinfo.index  # a view of a view: the parent's region (a superset)
    else:
        root = parent
    info = view._diag
    if info is not None and info.root is None and info.written is None:
        info.root, info.index = root, index  # (the TileInfo Tile() gave the new view in a loop: its tag is now's)
    else:
        view._diag = TileInfo(_created_tag() if loops else (), None, root, index)
    global _state
    _state += 1  # (_changed inlined)


def _root_region(tile):
    info = tile._diag
    if info is not None and info.root is not None:
        from .indexing import resolve  # noqa: F401 - index already resolved

        return info.root, Region.of(info.index)
    return tile, Region.whole(tile.shape)


# Reads of a tile inside affine loops are checked and logged once per stretch of diagnostics
# state: an instruction reading one tile several times (the layers of an instruction each take
# their operands), or two instructions reading it with nothing written, created or iterated in
# between, get the same verdict and the same log entry as the first read.
_state = 0  # bumped by every event that can change what a read reports (see _changed)
_reads_state = -1
_reads = set()  # ids of the tiles read since _state last changed (a new tile changes it: no id reuse)


def _changed() -> None:
    global _state
    _state += 1


def on_read(tile) -> None:
    """Hook for an op reading ``tile`` as an operand."""
    global _reads_state
    if loops:
        if _reads_state != _state:
            _reads.clear()
            _reads_state = _state
        elif id(tile) in _reads:
            return  # (read again with nothing changed since: the same verdicts, the same log entry)
    info = tile._diag
    root, region = tile, None
    if info is not None:
        if info.root is not None:
            root = info.root
        if loops and info.created and info.created is not loops[-1].tag and config.enabled("loop_carried"):
            _check_created(tile, info)  # (made in the running iterations of all loops: nothing to check)
    rinfo = root._diag
    if rinfo is not None and rinfo.written is not None and config.enabled("uninit"):
        region = _region_of(tile, info)
        _check_tile_init(root, rinfo, region, "reads")
    if loops:
        if rinfo is not None and rinfo.created is loops[-1].tag:
            _reads.add(id(tile))  # (made in the running iteration of every loop: private, as _loop_log finds)
            return
        if region is None:  # (_region_of inlined, with Region.whole's cache hit)
            if info is not None and info.root is not None:
                region = Region.of(info.index)
            else:
                shape = tile._data.shape if tile._thunk is None and not tile.nb else tile.shape  # (no property call)
                region = _WHOLE.get(shape) if type(shape) is tuple else None
                if region is None:
                    region = Region.whole(shape)
        _loop_log(root, region, "r")
        _reads.add(id(tile))


def _region_of(tile, info):
    if info is not None and info.root is not None:
        return Region.of(info.index)
    return Region.whole(tile.shape)


def _check_created(tile, info):
    for fr, it in info.created:
        if fr in loops and fr.iter != it:
            config.report("loop_carried", NKIError(
                "loop_carried",
                f"iteration {fr.iter} of the nl.affine_range loop at {fmt_where(fr.where)} reads a "
                f"{tile.buffer.name} tile {tile.shape} produced by iteration {it} (a value carried across "
                "iterations through a Python variable). affine_range iterations are independent; use "
                "nl.sequential_range for a loop-carried dependency, or accumulate with += into a tile "
                "allocated before the loop"))
            return


def _check_tile_init(root, rinfo, region, verb):
    w = rinfo.written
    if w is False:
        bad = not region.empty()
    elif region.exact and region.shape == w.shape:
        # A kernel reads the same block of a partly written tile many times (a matmul's stationary
        # for every moving tile): each block's all() pass runs once.
        key = (region.lo, region.hi)
        done = rinfo.checked
        bad = False
        if done is None or key not in done:
            bad = not bool(w[region.box()].all())
            if not bad:
                (done if done is not None else _new_checked(rinfo)).add(key)
    else:
        bad = not bool(w.reshape(-1)[region.elements()].all()) if not region.empty() else False
    if bad:
        config.report("uninit", NKIError(
            "uninit",
            f"{verb} {region.describe()} of a {root.buffer.name} tile {root.shape} {root.dtype} allocated with "
            "nl.ndarray before anything was written there; its contents are undefined on hardware "
            "(write it first, or allocate it with nl.zeros)"))


def _new_checked(rinfo):
    rinfo.checked = set()
    return rinfo.checked


def on_write(tile, index, value=None) -> None:
    """Hook for ``tile[index] = value``."""
    info = tile._diag
    root = tile if info is None or info.root is None else info.root
    if root is tile:
        hit = _REGION_OF.get(id(index))  # (Region.of's cache hit, without the call: every dst= write)
        region = hit[1] if hit is not None and hit[0] is index else Region.of(index)
    else:
        region = _region_of(tile, info)
    rinfo = root._diag
    if rinfo is not None and rinfo.written is not None:
        _set_written(root, rinfo, region)
    if loops:
        if rinfo is not None and rinfo.created is loops[-1].tag:
            return  # (made in the running iteration of every loop: private to it, as _loop_log finds)
        vinfo = None if value is None or type(value) is np.ndarray else getattr(value, "_diag", None)
        kind = "a" if (vinfo is not None and vinfo.accumulated and vinfo.root is root) else "w"
        _loop_log(root, region, kind)


def _set_written(root, rinfo, region):
    _changed()
    if region.exact and region.lo == (0,) * len(root.shape) and region.hi == tuple(root.shape):
        rinfo.written = None
        return
    if rinfo.written is False:
        rinfo.written = np.zeros(root.shape, dtype=bool)
    if region.exact and region.shape == rinfo.written.shape:
        # (a tiled loop writes the same block again and again -- a matmul accumulating into
        # psum[0:128, 0:T] -- and a block known written whole needs no marking, nor a count)
        key = (region.lo, region.hi)
        done = rinfo.checked
        if done is not None and key in done:
            return
        rinfo.written[region.box()] = True
        rinfo.marked += math.prod(max(0, h - l) for l, h in zip(region.lo, region.hi))
        (done if done is not None else _new_checked(rinfo)).add(key)
    elif not region.empty():
        elems = region.elements()
        rinfo.written.reshape(-1)[elems] = True
        rinfo.marked += elems.size
    # The whole tile can only be written once at least its size was marked: the all() pass (the
    # size of the tile) runs then, not on every write of a block of a large tile.
    if rinfo.marked >= rinfo.written.size and rinfo.written.all():
        rinfo.written = None


def unwritten(tile):
    """Which elements of ``tile`` (an ``nl.ndarray`` tile or a view of one) were never written, as a
    bool array of the tile's shape; ``None`` when all are defined or that is not tracked here."""
    info = tile._diag
    root = tile if info is None or info.root is None else info.root
    rinfo = root._diag
    if rinfo is None or rinfo.written is None:
        return None
    if rinfo.written is False:
        return np.ones(tile.shape, dtype=bool)
    region = _region_of(tile, info)
    if not (region.exact and region.shape == rinfo.written.shape):
        return None
    got = rinfo.written[region.box()]
    return ~got.reshape(tile.shape) if got.size == math.prod(tile.shape) else None


def on_accumulate(tile, starts_group=False) -> None:
    """Hook for ``tile += x`` (and ``-=``, ``*=``, ``/=``): an accumulation, not a plain read.
    ``starts_group``: a PSUM ``+=`` whose never-written elements begin an accumulation group
    (the first matmul into them overwrites), so they are written, not read."""
    info = tile._diag
    root = tile if info is None or info.root is None else info.root
    region = _region_of(tile, info)
    rinfo = root._diag
    if rinfo is not None and rinfo.written is not None:
        if starts_group:
            _set_written(root, rinfo, region)
        elif config.enabled("uninit"):
            _check_tile_init(root, rinfo, region, "accumulates (+=) into")
    if info is not None and info.root is not None:
        info.accumulated = True
    if loops:
        _loop_log(root, region, "a")


class _Loop:
    """One running ``affine_range`` loop: its current iteration and the accesses of outside objects.

    The log holds, per object, runs of accesses: ``[kind, first, last, region, where, seq]`` is the
    same access (kind, region and source line) in the consecutive iterations ``first..last``
    (ordinals into ``iters``) with nothing else of that object logged in between, so a loop that
    touches an object the same way in every iteration keeps one entry, not one per iteration.
    :func:`_entries` expands runs back into one entry per iteration for :func:`_analyse`: the
    members of a run all sit between the same neighbours of that object's log, so one ``seq``
    orders them exactly."""

    __slots__ = ("iter", "n", "iters", "where", "log", "keep", "seq", "tag", "outer", "written")

    def __init__(self):
        self.iter = None
        self.n = -1  # ordinal of the running iteration (iters[n] is its value)
        self.iters = ()
        self.where = where()
        self.log = {}
        self.keep = {}
        self.seq = 0
        self.outer = loops[-1].tag if loops else ()  # the enclosing loops' tag (fixed while this one runs)
        self.tag = ()  # (frame, iteration) of the enclosing loops and this one: tiles made now carry it
        self.written = set()  # keys logged with a write or an accumulation (only those are analysed)


def _loop_log(obj, region, kind, hbm=False, key=None):
    if _rule_modes["loop_carried"] == "off":
        return
    frames = loops
    if hbm:
        if key is None:  # (an HBM caller may pass the _tensor_key it already has)
            key = _tensor_key(obj)
    else:
        info = obj._diag
        if info is not None and info.created:
            created = info.created
            if created is frames[-1].tag:
                return  # created in the running iteration of every loop: private to it
            # A tile created inside loops is private to them: they are the outermost active loops
            # (a creation tag is a snapshot of the loop stack), so the log skips that prefix.
            k = 0
            for (f, _), fr in zip(created, frames):
                if f is not fr:
                    break
                k += 1
            if k:
                frames = frames[k:]
        key = id(obj)
    iw = instruction_where.state
    wh = iw.where if iw.depth else None  # (a running dst= instruction's line: its accesses share it)
    read = kind == "r"
    for fr in frames:
        ent = fr.log.get(key)
        n = fr.n
        if ent is None:
            ent = fr.log[key] = []
            fr.keep[key] = (obj, hbm)
        else:
            last = ent[-1]
            ln = last[2]
            lr = last[3]
            if ln == n - 1:
                # (_same_region inlined: the starts differ for most accesses of a tiled loop)
                if last[0] == kind and (lr is region or (lr.exact and region.exact and lr.lo == region.lo
                                                         and lr.hi == region.hi and lr.shape == region.shape)):
                    if wh is None:
                        wh = where_from(sys._getframe(2))
                        if iw.depth:
                            iw.where = wh
                    if last[4] == wh:
                        last[2] = n  # the previous iteration's access again: the run grows
                        continue
            elif ln == n and read and last[0] == "r" and (
                    lr is region or (lr.exact and region.exact and lr.lo == region.lo and lr.hi == region.hi
                                     and lr.shape == region.shape)):
                # The same read again with nothing of this object logged in between: _analyse
                # would give it the verdict of the logged one.
                continue
        if not read:
            fr.written.add(key)  # (the first access of a key may be its write)
        if wh is None:
            wh = where_from(sys._getframe(2))  # (from the hook's caller: this function and the hooks are ours)
            if iw.depth:
                iw.where = wh
        fr.seq = seq = fr.seq + 1
        ent.append([kind, n, n, region, wh, seq])
    if not read:
        global _state
        _state += 1  # (_changed inlined)


def _entries(fr, runs):
    """One ``(kind, iteration, region, where, seq)`` per logged access of a key (runs expanded)."""
    iters = fr.iters
    return [(kind, iters[n], region, wh, seq) for kind, first, last, region, wh, seq in runs
            for n in range(first, last + 1)]


def _same_region(a, b) -> bool:
    """Whether two regions select the same elements of the same array (boxes compared; other
    selections only when they are the same object)."""
    return a is b or (a.exact and b.exact and a.shape == b.shape and a.lo == b.lo and a.hi == b.hi)


def loop_iter(r: range, kind: str):
    """Iterate an NKI loop range (``affine``/``sequential``/``static``); affine loops are checked."""
    if kind != "affine" or not config.enabled("loop_carried"):
        return iter(r)
    return _affine(r)


def _affine(r):
    fr = _Loop()
    loops.append(fr)
    ok = False
    try:
        fr.iters = its = r if type(r) is range else list(r)
        for fr.n, i in enumerate(its):
            fr.iter = i
            fr.tag = fr.outer + ((fr, i),)
            global _state
            _state += 1  # (_changed inlined)
            yield i
        ok = True
    finally:
        loops.remove(fr)
        _changed()
        try:
            if ok:
                _analyse(fr)
        finally:
            # The frame is in reference cycles (its tag names it; its log keeps the tiles whose creation
            # tags name it): broken now, its iterations' tiles are freed at once, not by the cyclic
            # collector hundreds of tiles later (whose memory would then be new pages for the next ones).
            fr.log = fr.keep = fr.written = None
            fr.tag = fr.outer = ()


def _analyse(fr):
    written = fr.written
    for key, runs in fr.log.items():
        if key not in written:  # only read: nothing to report
            continue
        if len(runs) == 1 and runs[0][1] == runs[0][2]:
            continue  # (one access of one iteration)
        obj, hbm = fr.keep[key]
        if not hbm and not any(run[0] == "r" for run in runs):
            continue  # (a tile only written: the reports below start from a read, or are of HBM stores)
        entries = _entries(fr, runs)
        if len({e[1] for e in entries}) < 2:
            continue
        name = f"{obj.name} {obj.shape} (HBM)" if hbm else f"{obj.buffer.name} tile {obj.shape}"
        writes = [e for e in entries if e[0] != "r"]
        for kind, it, region, wh, seq in entries:
            if kind != "r":
                continue
            own_before = [e[2] for e in writes if e[1] == it and e[4] < seq and e[0] == "w"]
            if own_before and _union_covers(own_before, region):
                continue
            other = [e for e in writes if e[1] != it and e[2].overlap(region) is not None]
            if not other:
                continue
            own_after = [e[2] for e in writes if e[1] == it and e[4] > seq]
            if own_after and _union_covers(own_after, region):
                continue  # read-modify-write of the same region: an associative reduction
            w = other[0]
            _report_carried(fr, name, it, region, wh, w)
            return
        if hbm:
            plain = [e for e in writes if e[0] == "w"]
            for a, b in itertools.combinations(plain, 2):
                if a[1] != b[1]:
                    common = a[2].overlap(b[2])
                    if common is not None:
                        config.report("loop_carried", NKIError(
                            "loop_carried",
                            f"iterations {a[1]} and {b[1]} of the nl.affine_range loop at {fmt_where(fr.where)} "
                            f"both store to {name} at {common} ({fmt_where(a[3])}, {fmt_where(b[3])}); the "
                            "final value depends on iteration order. Use nl.sequential_range, or store "
                            "each iteration's result to its own region", where=fmt_where(b[3])))
                        return


def _report_carried(fr, name, it, region, wh, w):
    kind = "accumulated into (+=)" if w[0] == "a" else "written"
    config.report("loop_carried", NKIError(
        "loop_carried",
        f"iteration {it} of the nl.affine_range loop at {fmt_where(fr.where)} reads {region.describe()} of "
        f"{name} at {fmt_where(wh)}, which iteration {w[1]} {kind} at {fmt_where(w[3])}. affine_range "
        "iterations are independent and may be reordered or run in parallel, so this loop-carried "
        "dependency is unsafe (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/"
        "nki.language.sequential_range.html); use nl.sequential_range, or only accumulate with += and read "
        "the result after the loop", where=fmt_where(wh)))
