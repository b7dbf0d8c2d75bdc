"""Checks that need more than one op to see: SPMD races, loop-carried dependencies, uninitialised reads.

Each check is a rule of :mod:`.config` (``race``, ``loop_carried``, ``uninit``;
``capacity`` and ``operand`` are checked where the op runs) reported as an
:class:`NKIError` naming the rule, the tensors, the regions and the kernel
``file:line``, or as a warning, or not at all.

The checks in layers (each imports only the ones above it in this list):

* :mod:`.source_lines`: the kernel's ``file:line`` (:func:`where`);
* :mod:`.regions`: what an index selects (:class:`Region`: a box, exact elements on demand);
* :mod:`.lnc_checks`: what the race check needs across the logical cores of a launch;
* :mod:`.hbm_checks`: the per-launch HBM access log (races between programs, uninitialised
  HBM, returned outputs left unwritten), analysed at the end of the launch;
* this module: the hooks the data model and the instructions call on every access
  (:func:`on_read`, :func:`on_write`, :func:`on_view`, :func:`hbm_access` ...), the tile
  checks (uninitialised ``nl.ndarray`` tiles) and the ``affine_range`` loop-carried check, with
  their state (the thread's ``context._tls.loops``, a ``LoopStack`` carrying the read cache); it
  re-exports the names above.

Cost model of the checks (the default mode must stay cheap):

* HBM accesses are logged per launch as ``(program, tensor, index, mask,
  line)`` -- no boxes, no element lists (see :mod:`.hbm_checks`).
* Loads from an HBM tensor allocated uninitialised (``nl.ndarray`` in HBM)
  build a bool "written" mask on first use, replaying the launch's writes.
* Tiles carry a small :class:`TileInfo` only when allocated with
  ``nl.ndarray`` (uninitialised) or created inside an ``affine_range``;
  outside affine loops an op pays one attribute test per operand.
"""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np

from . import config
from .context import _tls
from .errors import NKIError
# The checks' parts, re-exported: this module is the hooks' face (``_diag.where``, ``_diag.Region`` ...).
from .hbm_checks import (LaunchLog, _check_hbm_init, _returned_output, _tensor_key,  # noqa: F401
                         launch_begin, launch_end, wants_old_values)
from .regions import (_REGION_OF, _WHOLE, Region, _common_elements, _strided_elements,  # noqa: F401
                      _union_covers, sorted_unique)
from .source_lines import (definition, fmt_where, where,  # noqa: F401
                           where_from)

_rule_modes = config._modes  # (config.enabled(rule) without the call, on the per-access path)


# ---------------------------------------------------------------------------
# HBM accesses: the hook (the log and its analysis are in hbm_checks)
# ---------------------------------------------------------------------------
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
    loops = _tls.loops
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
                    _loop_log(tensor, region, "r", True, key, loops)
                return
    log.add(tensor, access, mask, write, prog, values=values if write else None)
    if loops:
        _loop_log(tensor, Region.of(access.index, mask), "w" if write else "r", True, None, loops)


# ---------------------------------------------------------------------------
# tiles: uninitialised nl.ndarray tiles, affine_range loop-carried dependencies
# ---------------------------------------------------------------------------
class TileInfo:
    """Diagnostic state of a tile: loop iterations it was created in, elements written (for
    ``nl.ndarray`` tiles), and for views the root tile and index they select."""

    __slots__ = ("created", "written", "root", "index", "accumulated", "marked", "checked")

    def __init__(self, created=(), written=None, root=None, index=None):
        self.created = created
        self.written = written  # None: fully defined; False: nothing written; _Boxes; bool array: per element
        self.marked = 0  # elements marked written so far, overlaps counted again (a bound for the all() test)
        self.checked = None  # boxes (lo, hi) found or marked fully written: writes only add to `written`
        self.root = root
        self.index = index
        self.accumulated = False


class _Boxes:
    """What a tile's writes covered while every write was an exact box (the blocks of a block-dimension
    tensor assigned one by one, ``b[k] = nl.load(...)``): the boxes themselves, until a check needs
    elements. The per-element record (:func:`_elements_written`) is made only then; a tensor written
    block by block never needs it: a read inside one written box is answered from the box, and
    disjoint boxes adding up to the tile's size cover it (a bitmap the size of the tensor, marked
    block by block and scanned at the end, cost more than copying the blocks did)."""

    __slots__ = ("shape", "size", "boxes", "count", "disjoint")

    MAX = 64  # boxes kept; beyond, the per-element record is cheaper than comparing boxes

    def __init__(self, shape):
        self.shape = shape
        self.size = math.prod(shape)
        self.boxes = []  # (lo, hi) of every box written
        self.count = 0  # elements written, overlaps counted again
        self.disjoint = True  # no two boxes overlap: count is the number of elements written

    def add(self, region) -> bool:
        """Record an exact box written; False (nothing recorded) once there are too many."""
        boxes = self.boxes
        if len(boxes) >= self.MAX:
            return False
        lo, hi = region.lo, region.hi
        if self.disjoint:
            for blo, bhi in boxes:
                for a, b, c, d in zip(lo, hi, blo, bhi):
                    if not (a < d and c < b):
                        break  # (apart along this axis: blocks are apart along the first)
                else:
                    self.disjoint = False
                    break
        boxes.append((lo, hi))
        self.count += region.box_size()
        return True

    def contains(self, region) -> bool:
        """Whether the exact ``region`` lies inside one written box."""
        lo, hi = region.lo, region.hi
        return any(all(a <= c and d <= b for a, b, c, d in zip(blo, bhi, lo, hi)) for blo, bhi in self.boxes)


def _elements_written(rinfo):
    """Make ``rinfo.written`` the per-element record of what its boxes (:class:`_Boxes`) covered."""
    w = rinfo.written
    arr = np.zeros(w.shape, dtype=bool)
    for lo, hi in w.boxes:
        arr[tuple(slice(l, max(l, h)) for l, h in zip(lo, hi))] = True
    rinfo.written = arr
    rinfo.marked = w.count
    return arr


def _created_tag():
    # (frame, iteration) of every active loop: the innermost frame keeps it for its iteration
    return _tls.loops[-1].tag if _tls.loops else ()


def mark_uninitialised(tile) -> None:
    """An ``nl.ndarray`` SBUF/PSUM tile: nothing of it is defined until written."""
    info = tile._diag
    if info is None:
        info = tile._diag = TileInfo(_created_tag() if _tls.loops else ())
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
        view._diag = TileInfo(_created_tag() if _tls.loops else (), None, root, index)
    _tls.loops.state += 1  # (_changed inlined)


# Reads of a tile inside affine loops are checked and logged once per stretch of diagnostics
# state: an instruction reading one tile several times (the layers of an instruction each take
# their operands), or two instructions reading it with nothing written, created or iterated in
# between, get the same verdict and the same log entry as the first read.
# (the read cache, _tls.loops.state / reads_state / reads: bumped by every event that can change what a
# read reports, see _changed; tile ids read since it last changed; a new tile changes it: no id reuse)


def _changed() -> None:
    _tls.loops.state += 1


def read(tile) -> None:
    """The read hook: an op reads ``tile`` as an operand. Every operand path calls this one function;
    its test (the tile has diagnostics state, or an ``affine_range`` loop is open) is the only place
    the condition is written, and costs one context field and one attribute when both are off. The
    test and the work are one function: a read is one Python call, and a read answered by the read
    cache returns before anything else."""
    loops = _tls.loops  # (one thread-local lookup: the stack carries the read cache)
    if loops:
        if loops.reads_state != loops.state:
            loops.reads.clear()
            loops.reads_state = loops.state
        elif id(tile) in loops.reads:
            return  # (read again with nothing changed since: the same verdicts, the same log entry)
    elif tile._diag is None:
        return  # (no diagnostics state, no affine loop: nothing to check or log)
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
            loops.reads.add(id(tile))  # (made in the running iteration of every loop: private, as _loop_log finds)
            return
        if region is None:  # (_region_of inlined, with Region.whole's cache hit)
            if info is not None and info.root is not None:
                region = Region.of(info.index)
            else:
                shape = tile._data.shape if tile._thunk is None and not tile.nb else tile.shape  # (no property call)
                region = _WHOLE.get(shape) if type(shape) is tuple else None
                if region is None:
                    region = Region.whole(shape)
        _loop_log(root, region, "r", False, None, loops)
        loops.reads.add(id(tile))


# The read hook's work under the name the callers that skip no test use (the same function).
on_read = read


def _region_of(tile, info):
    if info is not None and info.root is not None:
        return Region.of(info.index)
    return Region.whole(tile.shape)


def _check_created(tile, info):
    for fr, it in info.created:
        if fr in _tls.loops and fr.iter != it:
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
    if type(w) is _Boxes:
        if region.exact and region.shape == w.shape:
            key = (region.lo, region.hi)
            done = rinfo.checked
            if (done is not None and key in done) or w.contains(region):
                (done if done is not None else _new_checked(rinfo)).add(key)
                return
        w = _elements_written(rinfo)
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


def on_write(tile, index, value=None, loops=None) -> None:
    """Hook for ``tile[index] = value`` (``loops``: the thread's loop stack, from a caller that has it)."""
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
    if loops is None:
        loops = _tls.loops
    if loops:
        if rinfo is not None and rinfo.created is loops[-1].tag:
            return  # (made in the running iteration of every loop: private to it, as _loop_log finds)
        vinfo = None if value is None or type(value) is np.ndarray else getattr(value, "_diag", None)
        kind = "a" if (vinfo is not None and vinfo.accumulated and vinfo.root is root) else "w"
        _loop_log(root, region, kind, False, None, loops)


def _set_written(root, rinfo, region):
    _changed()
    if region.exact and region.lo == (0,) * len(root.shape) and region.hi == tuple(root.shape):
        rinfo.written = None
        return
    block = region.exact and region.shape == tuple(root.shape)
    if block:
        # (a tiled loop writes the same block again and again -- a matmul accumulating into
        # psum[0:128, 0:T] -- and a block known written whole needs no marking, nor a count)
        key = (region.lo, region.hi)
        done = rinfo.checked
        if done is not None and key in done:
            return
    w = rinfo.written
    if w is False:
        w = rinfo.written = _Boxes(tuple(root.shape))
    if type(w) is _Boxes:
        if block and w.add(region):
            (done if done is not None else _new_checked(rinfo)).add(key)
            if w.count >= w.size and (w.disjoint or _elements_written(rinfo).all()):
                rinfo.written = None
            return
        _elements_written(rinfo)
    if block:
        rinfo.written[region.box()] = True
        rinfo.marked += region.box_size()
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
    if type(rinfo.written) is _Boxes:
        _elements_written(rinfo)
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
    if _tls.loops:
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
        self.outer = _tls.loops[-1].tag if _tls.loops else ()  # the enclosing loops' tag (fixed while this one runs)
        self.tag = ()  # (frame, iteration) of the enclosing loops and this one: tiles made now carry it
        self.written = set()  # keys logged with a write or an accumulation (only those are analysed)


def _loop_log(obj, region, kind, hbm=False, key=None, loops=None):
    # (``loops``: the thread's loop stack, from a caller that has it: one thread-local lookup fewer)
    if _rule_modes["loop_carried"] == "off":
        return
    frames = loops = _tls.loops if loops is None else loops
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
    iw = loops.site  # (the thread's running instruction, reached from its loop stack: no thread-local lookup)
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
        loops.state += 1  # (_changed inlined)


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
    loops = _tls.loops  # (this thread's: the generator runs in the thread that iterates it)
    loops.append(fr)
    ok = False
    try:
        fr.iters = its = r if type(r) is range else list(r)
        for fr.n, i in enumerate(its):
            fr.iter = i
            fr.tag = fr.outer + ((fr, i),)
            loops.state += 1  # (_changed inlined)
            yield i
        ok = True
    finally:
        loops.remove(fr)
        loops.state += 1  # (_changed inlined)
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
