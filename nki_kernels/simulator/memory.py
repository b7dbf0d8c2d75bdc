"""On-chip memory of one program: the live-range records its tiles keep, and the NaN fill.

What the hardware and compiler do (NKI Direct Allocation Developer Guide, nki.compiler.* pages):

* SBUF is 128 partitions x 192 KiB; PSUM 128 partitions x 8 banks x 2 KiB.
* A tensor with block dimensions ``(B, P, F)`` has ``B`` *logical* tiles; "the block dimension
  ... does not reflect the number of physical tiles being allocated". Each block here is live
  only from its own first access to its last one.
* Automatic allocation (``nl.sbuf`` / ``nl.psum``, ``ncc.*.auto_alloc()``) may spill: "on-chip
  memory over-subscription causing excessive spills of intermediate data to device memory" is a
  performance problem, not an error. What can never work is one instruction whose operands do
  not fit at once, or one tile larger than the memory: those are ``capacity`` errors.
* Direct allocation (``ncc.sbuf.alloc/mod_alloc``, ``ncc.psum.alloc/mod_alloc``, the standalone
  ``nl.ndarray(..., address=)``) puts tiles on fixed bytes of one per-program storage, so
  overlapping placements alias as on hardware (``mod_alloc`` block ``i`` and ``i + n`` share
  storage). Two placed tiles whose live ranges overlap on the same bytes are a conflict, and
  per memory either every tensor is placed or none is ("All SBUF tensors in a kernel must either
  all be marked as auto_alloc(), or all be allocated with alloc or mod_alloc").

Bookkeeping cost: every program counts instruction slots (``ic``: one per engine instruction or
DMA, see :mod:`.profile`). A tile's record keeps its first and last slot; a read updates them and,
once per slot, a running per-instruction working set -- O(1) per access. Live ranges, the
occupancy curve and conflicts are computed when the program ends (:func:`finish`). Source lines
are not recorded on the hot path: when a problem is found the program is run again with line
recording on, and the report names the lines.

The memory model in four modules, each below the next: :mod:`.buffers` (the sizes),
:mod:`.placement` (direct allocation, trace-once placement in loops), :mod:`.memory_report` (the
end of a program: occupancy, peaks, capacity and placement errors) and this one (the records and
the hooks the tiles and instructions call on the hot path), which re-exports the others' names.
"""

from __future__ import annotations

import math

import numpy as np

from . import config as _config
from . import diagnostics as _diag
from .dtypes import INT_SENTINEL, sentinel  # noqa: F401 - the fill values, named here too
from .context import _tls
from .errors import NKIError
# The memory model's other parts live in their own modules, below this one; their names stay
# importable from here (``memory.place``, ``memory.finish`` ...), as the simulator's modules use them.
from .buffers import (CAPACITY, NAMES, PMAX, PSUM, PSUM_BANK, PSUM_BANKS, PSUM_BYTES, SBUF,  # noqa: F401
                      SBUF_BYTES, SBUF_PLACEABLE, SBUF_RESERVED, _SBUF_BY_VERSION, buffer_index, sbuf_bytes)
from .placement import (AutoAlloc, HbmAddress, Placement, _TracedLoop, _call_alloc, _check_place,  # noqa: F401
                        _storage, _trace_key, check_hbm_address, mark_placed, place, resolve_buffer, traced_loop, view,
                        whole_block_tensor)
from .memory_report import (_at, _conflicts, _live_at, _mixed, _problem, _tile_lines,  # noqa: F401
                            _with_lines, _ws_error, finish)

# No instruction touches more tiles than this (operands, result, side outputs such as reduce_res=);
# a slot with more is several instructions an op path did not count apart, and is not judged.
MAX_INSTRUCTION_TILES = 8


# ---------------------------------------------------------------------------
# the NaN fill of uninitialised memory
# ---------------------------------------------------------------------------
def uninitialised(shape, dtype) -> np.ndarray:
    """A new array for memory nothing wrote yet: NaN (floats) or 4 (integers) when
    ``config.nan_fill`` is on (the official simulator's sentinels), else ``np.empty``."""
    if not _config.nan_fill:
        return np.empty(shape, dtype)
    return np.full(shape, sentinel(dtype), dtype)


def poison(array: np.ndarray) -> None:
    """Fill ``array`` (memory a launch hands out uninitialised) with the sentinel when enabled."""
    if _config.nan_fill:
        array[...] = sentinel(array.dtype)


# ---------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------
class Rec:
    """Live-range record of one physical tile: an ordinary tile, one block of a block-dimension
    tensor, or a whole block-dimension tensor accessed at once."""

    __slots__ = ("mem", "buf", "nbytes", "first", "last", "lastc", "moved", "place", "shape", "dtype",
                 "name", "blocks", "root", "key", "alloc_at", "last_at", "tiles", "declared")

    def __init__(self, mem, buf, nbytes, shape, dtype, name="", root=None, key=None):
        self.mem = mem
        self.buf = buf
        self.nbytes = nbytes
        self.first = None  # first slot it is live (allocation, or a block's first access)
        self.last = -1  # last slot an engine read or wrote it
        self.lastc = -1  # last slot a tile copy (t[...] = x) touched it
        self.moved = -1  # slot of the instruction that produced it straight into another tile
        self.place = None  # (start_partition, partitions, lo, hi) bytes within a partition
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.blocks = None  # block index -> Rec, for block-dimension tensors
        self.root = root
        self.key = key
        self.alloc_at = None
        self.last_at = None
        self.tiles = None  # block index -> Tile, for placed block-dimension tensors
        self.declared = False  # made by nl.ndarray / nl.zeros ... (a tensor, not an instruction's result)

    def end(self) -> int:
        """Last slot the tile is live."""
        return max(self.last, self.lastc, self.first)

    def elided(self) -> bool:
        """Produced straight into another tile (``t[...] = nl.load(...)``): never a tile of its own."""
        return self.moved >= 0 and max(self.last, self.lastc) <= self.moved

    def describe(self) -> str:
        """``name shape dtype (bytes B/partition)`` for reports."""
        what = f"{NAMES[self.buf]} tile"
        if self.root is not None:
            what = f"block {self.key} of {NAMES[self.buf]} tensor"
        label = f" '{self.name}'" if self.name else ""
        return f"{what}{label} {self.shape} {self.dtype} ({self.nbytes} B/partition)"


class ProgramMemory:
    """The memory state of one program (``Program.mem``)."""

    __slots__ = ("prog", "ic", "fresh", "recs", "ws_c", "rsum", "rmax", "wsum", "ws_recs", "ws_bad",
                 "storage", "placed", "flags", "curve", "peak", "peak_at", "last_result", "last_alloc",
                 "loops", "entries", "traced", "traces_loops", "lines", "cap")

    def __init__(self, prog):
        self.prog = prog
        # bytes per partition of SBUF and PSUM on the program's target (SBUF: 192 / 224 / 256 KiB on
        # NeuronCore-v2 / v3 / v4, the architecture guides)
        self.cap = (sbuf_bytes(prog), PSUM_BYTES)
        self.ic = 0  # instruction slot counter
        self.fresh = False  # the last event was an engine instruction: its result tile comes next
        self.recs = []
        self.ws_c = 0  # slot of the working set being summed
        self.rsum = [0, 0]
        self.rmax = [0, 0]
        self.wsum = [0, 0]
        self.ws_recs = []
        self.ws_bad = None  # (slot, needed, buf, recs) of the first instruction that cannot fit
        self.storage = [None, None]  # per-memory byte storage of placed tensors
        self.placed = [False, False]
        self.flags = _kernel_flags(prog)
        self.curve = None
        self.peak = [0, 0]
        self.peak_at = [0, 0]
        self.last_result = None  # the tile the last instruction produced (may be moved into another)
        self.last_alloc = None
        self.loops = []  # active traced (affine / sequential) loops, outermost first
        self.entries = 0  # entries of outermost traced loops so far
        self.traced = {}  # trace key -> placement made the first time that allocation was traced
        # In the standalone API (NKI 0.7+) affine_range / sequential_range "are deprecated and
        # default to Python range" (NKI Loops guide): unrolled, so every iteration is traced.
        kernel = getattr(getattr(prog, "launch", None), "kernel", None)
        self.traces_loops = not getattr(kernel, "options", {}).get("lnc_brackets", False)
        # Record source lines (a re-run for a capacity report, see memory_report): the thread's flag,
        # copied here because every instruction's hooks test it (a field of the program's memory is
        # a slot read, the thread context's a dictionary lookup).
        self.lines = _tls.lines

    # -- working set of the current instruction ---------------------------------
    def close(self, c: int) -> None:
        """Check the working set of slot ``ws_c`` and start slot ``c``."""
        rsum, wsum = self.rsum, self.wsum
        w0, w1 = wsum
        # (a slot needs at most rsum + |wsum| bytes: most slots fit without a closer look; |w| without
        # the builtin call, as this runs twice per dst= instruction)
        cap = self.cap
        if self.ws_bad is None and (rsum[0] + (w0 if w0 >= 0 else -w0) > cap[0]
                                    or rsum[1] + (w1 if w1 >= 0 else -w1) > cap[1]):
            for b in (SBUF, PSUM):
                need = rsum[b] + max(0, wsum[b] - self.rmax[b])
                if need > cap[b] and self.ws_bad is None and len(self.ws_recs) <= MAX_INSTRUCTION_TILES:
                    self.ws_bad = (self.ws_c, need, b, [r for r in self.ws_recs if r.buf == b])
        rsum[0] = rsum[1] = wsum[0] = wsum[1] = 0  # (in place: no one keeps these lists, unlike ws_recs)
        rmax = self.rmax
        rmax[0] = rmax[1] = 0
        self.ws_recs = []  # (a new list: the profile recorder keeps the slot's list)
        self.ws_c = c

    def wrote(self, rec, c: int) -> None:
        """``rec`` written by the instruction of slot ``c`` (its result)."""
        if rec.first is None or rec.first > c:
            rec.first = c
        if rec.last >= c:
            return
        rec.last = c
        if self.ws_c < c:
            self.close(c)
        if self.ws_c == c:
            self.wsum[rec.buf] += rec.nbytes
            self.ws_recs.append(rec)
        if self.lines:
            rec.last_at = _diag.where()


def touch(rec) -> None:
    """An engine instruction reads (or updates in place) the tile of ``rec``: O(1)."""
    m = rec.mem
    c = m.ic
    if rec.last != c:
        rec.last = c
        if rec.first is None:
            rec.first = c
        if m.ws_c != c:
            m.close(c)
        b = rec.buf
        n = rec.nbytes
        m.rsum[b] += n
        if n > m.rmax[b]:
            m.rmax[b] = n
        m.ws_recs.append(rec)
        if m.lines:
            rec.last_at = _diag.where()


def copied(rec) -> None:
    """A tile copy (``t[...] = x``) touches ``rec``: extends its live range, no engine working set."""
    m = rec.mem
    c = m.ic
    if rec.first is None:
        rec.first = c
    if rec.lastc < c:
        rec.lastc = c
        if m.lines:
            rec.last_at = _diag.where()


def _kernel_flags(prog):
    kernel = getattr(getattr(prog, "launch", None), "kernel", None)
    flags = set(getattr(kernel, "_nki_compiler_flags", ()))
    flags |= set(getattr(getattr(kernel, "func", None), "_nki_compiler_flags", ()))
    return flags


# ---------------------------------------------------------------------------
# hooks from core.Tile and the ops
# ---------------------------------------------------------------------------
def on_alloc(tile, prog, shape, dtype):
    """A new tile (not a view) of ``shape`` and ``dtype`` in ``prog``: its record, with the single-tile
    capacity check."""
    m = prog.mem
    buf = PSUM if tile.buffer.name == "psum" else SBUF
    pdim = tile.pdim
    if len(shape) > pdim:
        nbytes = math.prod(shape) // shape[pdim] * dtype.itemsize if shape[pdim] else 0
    else:
        nbytes = dtype.itemsize
    rec = Rec(m, buf, nbytes, shape, dtype)
    m.recs.append(rec)
    if m.lines:
        rec.alloc_at = _diag.where()
    per_block = nbytes // math.prod(shape[:pdim]) if pdim else nbytes
    cap = m.cap[buf]
    if per_block > cap and _config.enabled("capacity"):
        what = "a block of " if pdim else ""
        _config.report("capacity", NKIError(
            f"{NAMES[buf]} capacity",
            f"{what}a {NAMES[buf]} tile of shape {shape} {dtype} needs {per_block} B per partition, "
            f"more than the {cap} B ({cap // 1024} KiB) a partition has; no allocation "
            "can hold it (split it into smaller tiles)"))
    if pdim:
        rec.blocks = {}  # a block-dimension tensor: its blocks are live only when used
        return rec
    c = m.ic
    if m.fresh:  # the result of the instruction just counted
        m.fresh = False
        m.last_result = rec
        m.wrote(rec, c - 1)
    else:
        rec.first = c  # nl.ndarray: live from here; joins working sets only when used
        m.last_alloc = rec
    return rec


def declared(rec, name="") -> None:
    """``rec``'s tile is a declared tensor (nl.ndarray, nl.zeros, ...), never an instruction's
    result that a later assignment or dst write could belong to."""
    rec.declared = True
    rec.name = name
    m = rec.mem
    if m.last_result is rec:
        m.last_result = None


def block_rec(root_rec, bidx):
    """The record of block ``bidx`` (a tuple of ints) of a block-dimension tensor."""
    rec = root_rec.blocks.get(bidx)
    if rec is None:
        n = root_rec.nbytes
        for s in root_rec.shape[:len(bidx)]:
            n //= s
        rec = Rec(root_rec.mem, root_rec.buf, n, root_rec.shape[len(bidx):], root_rec.dtype, root_rec.name,
                  root_rec, bidx)
        root_rec.blocks[bidx] = rec
        root_rec.mem.recs.append(rec)
    return rec


def block_index(tile, key):
    """The block of a block-dimension ``tile`` that ``key`` selects, as a tuple of ints, or None."""
    pdim = tile.pdim
    if not pdim:
        return None
    parts = key if isinstance(key, tuple) else (key,)
    if len(parts) < pdim:
        return None
    out = []
    for k, n in zip(parts[:pdim], tile.shape[:pdim]):
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            out.append(k + n if k < 0 else k)
        else:
            return None
    return tuple(out)


def assigned(dest_rec, value) -> bool:
    """``dest[...] = value``: if ``value`` is the result the last instruction just produced, that
    instruction wrote ``dest`` directly (its own tile is elided); returns True then. Otherwise the
    assignment is a tile copy."""
    m = dest_rec.mem
    v = getattr(value, "_mem", None)
    if v is not None and v is m.last_result and getattr(value, "_parent", 1) is None and v.moved < 0:
        # No instruction ran since it was produced (its own op may have read it, e.g. reduce_res=).
        v.moved = max(v.first, v.last, v.lastc)
        m.last_result = None
        if m.ws_c == v.first:
            m.wsum[v.buf] -= v.nbytes
        elif m.ws_c == v.last:  # read back by its own op after the instruction was counted
            m.rsum[v.buf] -= v.nbytes
        m.wrote(dest_rec, v.first)
        return True
    if v is not None:
        copied(v)
    copied(dest_rec)
    return False


def accumulated(dest_rec, value) -> bool:
    """``dest += value`` where ``value`` was just produced (``psum[...] += nisa.nc_matmul(...)``):
    the producing instruction accumulates into ``dest``; the add itself takes no working set."""
    m = dest_rec.mem
    v = getattr(value, "_mem", None)
    # Only the PE array accumulates into its destination (a PSUM accumulation group); `sbuf_t += x`
    # is a Vector instruction reading both tiles, even when x was just loaded.
    if v is None or v is not m.last_result or getattr(value, "_parent", 1) is not None or dest_rec.buf != PSUM:
        return False
    c = v.first
    v.moved = m.ic
    m.last_result = None
    if m.ws_c == c and v.last == c:
        m.wsum[v.buf] -= v.nbytes
    if dest_rec.last < c:  # the accumulator is read and written by the producing instruction
        dest_rec.last = c
        if dest_rec.first is None:
            dest_rec.first = c
        if m.ws_c == c:
            m.rsum[dest_rec.buf] += dest_rec.nbytes
            m.rmax[dest_rec.buf] = max(m.rmax[dest_rec.buf], dest_rec.nbytes)
            m.ws_recs.append(dest_rec)
    # the add's own slot: its reads are part of the producing instruction
    v.last = m.ic
    dest_rec.last = max(dest_rec.last, m.ic)
    return True


def in_place(rec) -> None:
    """The instruction just counted updated ``rec``'s tile in place (``t += x``): it has no result
    tile, so the next tile allocated is not its output."""
    rec.mem.fresh = False


def counted(prog, engine: bool) -> None:
    """One engine instruction (``engine``: its result tile, if new, comes next) or one DMA done
    (called from :mod:`.profile`)."""
    m = prog.mem
    if m.last_alloc is None:  # (_ended without the call: nothing allocated in the slot)
        m.last_result = None
        m.ic += 1
    else:
        _ended(m)
    m.fresh = engine


def wrote_dst(rec, prog) -> None:
    """A ``dst=`` instruction wrote ``rec``'s tile: part of its working set; the instruction ends."""
    m = prog.mem
    r = m.last_result
    c = m.ic
    if r is not None and r.first == c - 1:
        # the instruction just counted wrote its result r (or a side output such as reduce_res=);
        # once: the next dst= instruction is a new one (nki-library: a DMA into a fresh tensor, then
        # instructions writing other tensors placed over dead ones' bytes)
        m.last_result = None
        m.wrote(rec, c - 1)
        return
    m.wrote(rec, c)
    if m.last_alloc is None:  # (slot_done without the calls: nothing allocated in the slot)
        m.last_result = None
        m.ic = c + 1
        m.fresh = False
        return
    slot_done(prog)


def functional_result(rec, prog) -> None:
    """A first-generation functional op allocated ``rec``'s tile and its instruction wrote it as
    ``dst`` (the slot has ended): the tile is that instruction's result, so a following
    ``t[...] = result`` moves it into ``t`` (as a slot's own new tile is, see :func:`_ended`), and no
    tile allocated after it is that instruction's result (``fresh`` ends: the next ``nl.load`` tile is
    the load's own)."""
    prog.mem.fresh = False
    if rec.blocks is None and not rec.declared:
        prog.mem.last_result = rec


def slot_done(prog) -> None:
    """An instruction that writes its ``dst=`` ended (its result is no new tile)."""
    _ended(prog.mem)
    prog.mem.fresh = False
    prog.mem.last_result = None  # a dst= tensor allocated in the slot is no result a later write moves


def _ended(m) -> None:
    # A tile allocated in this slot and written by the instruction (nl.load's tile, the new
    # destination of a functional nisa op) is its result: a later `t[...] = result` moves it.
    r = m.last_alloc
    m.last_alloc = None
    m.last_result = None
    if r is not None and r.first == m.ic and r.blocks is None and not r.declared:
        m.last_result = r
        if r.last == m.ic and m.ws_c == m.ic:  # counted as read while being written
            m.rsum[r.buf] -= r.nbytes
            m.wsum[r.buf] += r.nbytes
    m.ic += 1
