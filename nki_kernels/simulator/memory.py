"""On-chip memory of one program: live ranges, capacity, direct allocation (placement) and the NaN fill.

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
"""

from __future__ import annotations

import math

import numpy as np

from . import buffer_pool as _pool
from . import config as _config
from . import diagnostics as _diag
from .dtypes import INT_SENTINEL, sentinel  # noqa: F401 - the fill values, named here too
from .context import current_or_none, set_current
from .errors import NKIError
from .instructions.target import get_nc_version

SBUF, PSUM = 0, 1
NAMES = ("SBUF", "PSUM")
PMAX = 128
SBUF_BYTES = 192 * 1024
PSUM_BYTES = 16 * 1024
PSUM_BANK = 2 * 1024
PSUM_BANKS = 8
CAPACITY = (SBUF_BYTES, PSUM_BYTES)
# "a valid byte_addr can be any integer values from 0 (inclusive) to 192KiB-16KiB (exclusive) ...
# 16KiB is allocated for compiler internal usage" (nki.compiler.sbuf.alloc)
SBUF_RESERVED = 16 * 1024
SBUF_PLACEABLE = SBUF_BYTES - SBUF_RESERVED  # NeuronCore-v2 (the page's figure)
# SBUF per partition by NeuronCore version: 24 MiB (v2), 28 MiB (v3, Trn2), 32 MiB (v4, Trn3) over
# 128 partitions (architecture guides); the official allocated kernels place beyond 176 KiB on Trn2.
_SBUF_BY_VERSION = {2: 192 * 1024, 3: 224 * 1024, 4: 256 * 1024}


def sbuf_bytes() -> int:
    """SBUF bytes per partition of the simulated NeuronCore version."""

    v = get_nc_version()
    return _SBUF_BY_VERSION.get(int(getattr(v, "value", v)), SBUF_BYTES)
# No instruction touches more tiles than this (operands, result, side outputs such as reduce_res=);
# a slot with more is several instructions an op path did not count apart, and is not judged.
MAX_INSTRUCTION_TILES = 8

_lines = False  # record source lines (set while a program is re-run for a report)


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
                 "loops", "entries", "traced", "traces_loops")

    def __init__(self, prog):
        self.prog = prog
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

    # -- working set of the current instruction ---------------------------------
    def close(self, c: int) -> None:
        """Check the working set of slot ``ws_c`` and start slot ``c``."""
        rsum, wsum = self.rsum, self.wsum
        # (a slot needs at most rsum + |wsum| bytes: most slots fit without a closer look)
        if self.ws_bad is None and (rsum[0] + abs(wsum[0]) > CAPACITY[0] or rsum[1] + abs(wsum[1]) > CAPACITY[1]):
            for b in (SBUF, PSUM):
                need = rsum[b] + max(0, wsum[b] - self.rmax[b])
                if need > CAPACITY[b] and self.ws_bad is None and len(self.ws_recs) <= MAX_INSTRUCTION_TILES:
                    self.ws_bad = (self.ws_c, need, b, [r for r in self.ws_recs if r.buf == b])
        self.rsum, self.rmax, self.wsum = [0, 0], [0, 0], [0, 0]
        self.ws_recs = []
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
        if _lines:
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
        if _lines:
            rec.last_at = _diag.where()


def copied(rec) -> None:
    """A tile copy (``t[...] = x``) touches ``rec``: extends its live range, no engine working set."""
    m = rec.mem
    c = m.ic
    if rec.first is None:
        rec.first = c
    if rec.lastc < c:
        rec.lastc = c
        if _lines:
            rec.last_at = _diag.where()


def _kernel_flags(prog):
    kernel = getattr(getattr(prog, "launch", None), "kernel", None)
    flags = set(getattr(kernel, "_nki_compiler_flags", ()))
    flags |= set(getattr(getattr(kernel, "func", None), "_nki_compiler_flags", ()))
    return flags


# ---------------------------------------------------------------------------
# hooks from core.Tile and the ops
# ---------------------------------------------------------------------------
def buffer_index(buffer) -> int:
    """``SBUF`` or ``PSUM`` for an on-chip buffer."""
    return PSUM if buffer.name == "psum" else SBUF


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
    if _lines:
        rec.alloc_at = _diag.where()
    per_block = nbytes // math.prod(shape[:pdim]) if pdim else nbytes
    if per_block > CAPACITY[buf] and _config.enabled("capacity"):
        what = "a block of " if pdim else ""
        _config.report("capacity", NKIError(
            f"{NAMES[buf]} capacity",
            f"{what}a {NAMES[buf]} tile of shape {shape} {dtype} needs {per_block} B per partition, "
            f"more than the {CAPACITY[buf]} B ({CAPACITY[buf] // 1024} KiB) a partition has; no allocation "
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
    if rec.last < c or rec.first is None or rec.first > c:
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


# ---------------------------------------------------------------------------
# direct allocation
# ---------------------------------------------------------------------------
class Placement:
    """A ``buffer=`` that places each logical tile: ``func(idx, pdim_size, fdim_size)`` returns
    ``(start_partition, byte_addr)`` (SBUF) or ``(bank, start_partition, byte_addr)`` (PSUM)."""

    def __init__(self, buffer, func, what, psum_origin_only=False, all_or_nothing=True):
        self.buffer = buffer
        self.func = func
        self.what = what
        # nki.compiler's alloc / mod_alloc: "All SBUF tensors in a kernel must either all be marked as
        # auto_alloc(), or all be allocated with alloc or mod_alloc" (sbuf.auto_alloc page). The
        # standalone nl.ndarray(address=) has no such rule: nki-library places some tensors and lets
        # the compiler place others in one kernel.
        self.all_or_nothing = all_or_nothing
        # ncc.psum.alloc / mod_alloc: "start_partition and byte_addr must both be 0" (one tile per bank)
        self.psum_origin_only = psum_origin_only

    def __repr__(self):
        return self.what


class AutoAlloc:
    """``ncc.sbuf.auto_alloc()`` / ``ncc.psum.auto_alloc()``: the compiler places the tensor."""

    def __init__(self, buffer):
        self.buffer = buffer

    def __repr__(self):
        return f"{self.buffer.name}.auto_alloc()"


def resolve_buffer(buffer, address=None):
    """``(core buffer, Placement or None)`` for a ``buffer=`` (and standalone ``address=``) argument."""
    if isinstance(buffer, AutoAlloc):
        return buffer.buffer, None
    if isinstance(buffer, Placement):
        return buffer.buffer, buffer
    core_buffer = getattr(buffer, "_nki_buffer", None)  # ncc.sbuf / ncc.psum used as the buffer
    if core_buffer is not None:
        buffer = core_buffer
    if address is None:
        return buffer, None
    if not getattr(buffer, "on_chip", False):
        raise NKIError("address", f"address={address!r} places a tensor in {buffer!r}; only SBUF and PSUM "
                       "tensors are placed by the simulator")
    try:
        part, free = (int(a) for a in address)
    except (TypeError, ValueError):
        raise TypeError(f"nl.ndarray: address must be a (partition_offset, free_offset) pair of ints, "
                        f"got {address!r}") from None
    if buffer.name == "psum":
        return buffer, Placement(buffer, lambda idx, pdim_size, fdim_size: (free // PSUM_BANK, part, free % PSUM_BANK),
                                 f"address={address!r}", all_or_nothing=False)
    return buffer, Placement(buffer, lambda idx, pdim_size, fdim_size: (part, free), f"address={address!r}",
                             all_or_nothing=False)


def _storage(m, buf):
    s = m.storage[buf]
    if s is None:
        n = sbuf_bytes() if buf == 0 else CAPACITY[buf]
        # 0xFF bytes are NaN in every float format (and -1 in ints): never-written placed memory poisons.
        # (24 MiB of SBUF per core and launch: a pooled buffer, already mapped, fills 10x faster.)
        s = _pool.empty((PMAX, n), np.uint8)
        s.fill(0xFF if _config.nan_fill else 0)
        m.storage[buf] = s
    return s


def _check_place(buf, loc, pdim_size, fbytes, what, psum_origin_only=False):
    if buf == PSUM:
        if len(loc) != 3:
            raise NKIError("placement", f"{what}: a PSUM allocation function returns (bank_id, start_partition, "
                           f"byte_addr), got {loc!r}")
        bank, part, addr = (int(v) for v in loc)
        if not 0 <= bank < PSUM_BANKS:
            raise NKIError("placement", f"{what}: PSUM bank {bank} is not one of the {PSUM_BANKS} banks (0..7)")
        if psum_origin_only and (part or addr):
            raise NKIError("placement", f"{what}: returned (bank_id, start_partition, byte_addr) = {loc!r} for a "
                           f"PSUM tile of {pdim_size} partitions x {fbytes} B; start_partition and byte_addr must "
                           "both be 0 (nki.compiler.psum.alloc: one physical tile per PSUM bank, from partition 0)")
        if addr < 0 or addr + fbytes > PSUM_BANK:
            raise NKIError("placement", f"{what}: a PSUM tile of {fbytes} B/partition at byte {addr} of bank "
                           f"{bank} crosses the {PSUM_BANK} B bank (a PSUM tile cannot span banks)")
        lo = bank * PSUM_BANK + addr
    else:
        if len(loc) != 2:
            raise NKIError("placement", f"{what}: an SBUF allocation function returns (start_partition, "
                           f"byte_addr), got {loc!r}")
        part, addr = (int(v) for v in loc)
        limit = sbuf_bytes() - SBUF_RESERVED
        if addr < 0 or addr + fbytes > limit:
            raise NKIError("placement", f"{what}: an SBUF tile of {fbytes} B/partition at byte_addr {addr} does "
                           f"not fit below {limit} B (the NeuronCore's {sbuf_bytes() // 1024} KiB per partition "
                           "less the 16 KiB the compiler reserves)")
        lo = addr
    # ISA rules on the start partition (nki.compiler.sbuf.alloc)
    ok = (part == 0 if pdim_size > 64 else part in (0, 64) if pdim_size > 32 else part in (0, 32, 64, 96))
    if not ok or part + pdim_size > PMAX:
        raise NKIError("placement", f"{what}: start partition {part} is not allowed for a tile of {pdim_size} "
                       "partitions (over 64: 0; 33..64: 0 or 64; up to 32: 0, 32, 64 or 96)")
    return part, lo


def view(m, buf, part, lo, pdim_size, fshape, dtype):
    """The ``(pdim_size,) + fshape`` array of ``dtype`` at partition ``part``, byte ``lo`` of the storage."""
    s = _storage(m, buf)
    dtype = np.dtype(dtype)
    fbytes = int(np.prod(fshape, dtype=np.int64)) * dtype.itemsize
    return s[part:part + pdim_size, lo:lo + fbytes].view(dtype).reshape((pdim_size,) + tuple(fshape))


def place(shape, pdim, dtype, placement, prog):
    """Storage for a placed tensor: ``((data, (partition, byte)), None)`` for a tensor without block
    dimensions (``data`` views the program's byte storage), ``(None, blocks)`` with block index ->
    ``(partition, byte)`` for a block-dimension tensor.

    Inside an ``affine_range`` / ``sequential_range`` body the placement is the one the compiler
    traced (:func:`traced_loop`): made the first time, reused by later iterations."""
    m = prog.mem
    buf = buffer_index(placement.buffer)
    if placement.all_or_nothing:
        m.placed[buf] = True
    dtype = np.dtype(dtype)
    bshape, pdim_size, fshape = shape[:pdim], shape[pdim], shape[pdim + 1:]
    fbytes = int(np.prod(fshape, dtype=np.int64)) * dtype.itemsize
    key = _trace_key(m)
    hit = m.traced.get(key) if key is not None else None
    if hit is not None and hit[0] == (buf, tuple(shape), pdim, dtype):
        blocks = hit[1]
    elif not pdim:
        loc = _call_alloc(placement.func, (), pdim_size, fbytes)
        blocks = {(): _check_place(buf, loc, pdim_size, fbytes, placement.what, placement.psum_origin_only)}
    else:
        blocks = {}
        for idx in np.ndindex(*bshape):
            loc = _call_alloc(placement.func, tuple(idx), pdim_size, fbytes)
            blocks[tuple(idx)] = _check_place(buf, loc, pdim_size, fbytes, f"{placement.what} block {tuple(idx)}",
                                              placement.psum_origin_only)
    if key is not None and hit is None:
        m.traced[key] = ((buf, tuple(shape), pdim, dtype), blocks)
    if not pdim:
        part, lo = blocks[()]
        return (view(m, buf, part, lo, pdim_size, fshape, dtype), (part, lo)), None
    return None, blocks


# ---------------------------------------------------------------------------
# trace-once placement in non-unrolled loops
# ---------------------------------------------------------------------------
class _TracedLoop:
    """One entry of an ``affine_range`` / ``sequential_range`` loop: ``key`` names it in the
    compiler's trace; ``counts`` numbers what the current iteration met (nested loop entries under
    ``None``, allocation call sites under their source location)."""

    __slots__ = ("key", "counts")

    def __init__(self, key):
        self.key = key
        self.counts = {}


def traced_loop(iterations):
    """Iterate ``iterations`` (an ``affine_range`` / ``sequential_range``) as one traced loop.

    The compiler traces such a body once ("Unlike affine_range or sequential_range, Neuron compiler
    will fully unroll the loop [static_range] during NKI kernel tracing", nki.language.static_range),
    so Python run in the body -- an allocation function, ``base_addr=cur_addr`` with ``cur_addr +=
    ...`` -- is evaluated once and every iteration uses the same physical tiles (the Direct
    Allocation guide's ``mod_alloc`` declared inside ``nl.affine_range(4)``: "t[i] are dead after
    iteration, thus no error"). The simulator runs the body per iteration; this frame lets
    :func:`place` give later iterations the placement the first one made. A loop nested in a traced
    loop is named by its parent and its rank among the loops the parent's iteration entered, so a
    ``static_range`` (unrolled: no frame) inside a traced body keeps one placement per unrolled copy."""
    prog = current_or_none()
    if prog is None or not prog.mem.traces_loops:
        yield from iterations
        return
    stack = prog.mem.loops
    if stack:
        parent = stack[-1]
        n = parent.counts.get(None, 0)
        parent.counts[None] = n + 1
        key = (parent.key, n)
    else:
        prog.mem.entries += 1
        key = (prog.mem.entries,)
    fr = _TracedLoop(key)
    stack.append(fr)
    try:
        for i in iterations:
            if fr.counts:  # (an iteration that met nothing leaves the dict empty: no new one)
                fr.counts = {}
            yield i
    finally:
        stack.remove(fr)


def _trace_key(m):
    """The trace key of a placement made now (loop, source line, rank at that line in the loop's
    current iteration), or None outside traced loops."""
    if not m.loops:
        return None
    fr = m.loops[-1]
    site = _diag.where(2)[:2]
    n = fr.counts.get(site, 0)
    fr.counts[site] = n + 1
    return fr.key, site, n


def _call_alloc(func, idx, pdim_size, fdim_size):
    """``func(idx, pdim_size, fdim_size)``, by the documented keywords when its signature takes them
    (a ``functools.partial`` binding a leading parameter by keyword, as the official allocated
    attention kernel passes), else positionally."""
    import inspect

    try:
        inspect.signature(func).bind(idx=idx, pdim_size=pdim_size, fdim_size=fdim_size)
    except (TypeError, ValueError):
        return func(idx, pdim_size, fdim_size)
    return func(idx=idx, pdim_size=pdim_size, fdim_size=fdim_size)


def mark_placed(rec, part, lo, pdim_size):
    """Record where ``rec``'s tile lives."""
    rec.place = (part, pdim_size, lo, lo + rec.nbytes)
    if rec.last < 0 and rec.lastc < 0:
        # A placed tensor is live from its first use, not from its declaration: nki-library's modular
        # allocator declares every physical tile of a buffer up front, several at the same bytes, and
        # uses them one after another (the Direct Allocation guide's lifetime is write to last read).
        rec.first = None


# ---------------------------------------------------------------------------
# end of a program: live ranges, occupancy, conflicts
# ---------------------------------------------------------------------------
def finish(prog, rerun=None) -> None:
    """Analyse ``prog``'s records: occupancy curve and peaks, then report instructions that cannot
    fit, conflicting placements and mixed allocation. ``rerun()`` runs the program again (with
    source lines recorded) to name lines in a report."""
    m = prog.mem
    m.close(m.ic + 1)
    # (Rec.elided() and Rec.end() inlined: one pass over every tile of the program)
    live = [r for r in m.recs if r.first is not None and r.blocks is None
            and not (r.moved >= 0 and r.last <= r.moved and r.lastc <= r.moved)]
    roots = [r for r in m.recs if r.blocks is not None and r.last >= 0]  # whole block tensors used at once
    n = m.ic + 2
    curve = np.zeros((2, n + 1), np.int64)
    spans = live + roots
    if spans:
        # per tile: memory, bytes, first slot, slot after its last
        cols = np.array([(r.buf, r.nbytes, r.first, max(r.last, r.lastc, r.first) + 1) for r in spans], np.int64)
        np.add.at(curve, (cols[:, 0], cols[:, 2]), cols[:, 1])
        np.subtract.at(curve, (cols[:, 0], cols[:, 3]), cols[:, 1])
    curve = np.cumsum(curve, axis=1)[:, :n]
    m.curve = curve
    for b in (SBUF, PSUM):
        m.peak[b] = int(curve[b].max()) if n else 0
        m.peak_at[b] = int(curve[b].argmax()) if n else 0
    prog.sbuf_peak, prog.psum_peak = m.peak
    problem = _problem(m, live)
    m.recs = []  # (records and the program reference each other: let refcounting free them)
    if problem is None or not _config.enabled("capacity"):
        return
    if rerun is not None and not _lines:
        detail = _with_lines(prog, rerun)
        if detail is not None:
            problem = detail
    _config.report("capacity", problem)


def _problem(m, live):
    if m.ws_bad is not None:
        return _ws_error(m, live)
    conflict = _conflicts(live)
    if conflict is not None:
        return conflict
    return _mixed(m, live)


def _at(w):
    return _diag.fmt_where(w) if w is not None else "?"


def _live_at(live, c, buf):
    return sorted((r for r in live if r.buf == buf and r.first <= c <= r.end()), key=lambda r: -r.nbytes)


def _tile_lines(recs, limit=12):
    rows = [f"  {r.describe()}: allocated at {_at(r.alloc_at or (r.root.alloc_at if r.root else None))}, "
            f"last used at {_at(r.last_at)}" for r in recs[:limit]]
    if len(recs) > limit:
        rows.append(f"  ... and {len(recs) - limit} more")
    return "\n".join(rows)


def _ws_error(m, live):
    c, need, buf, recs = m.ws_bad
    where = next((r.last_at for r in recs if r.last_at is not None), None)
    live_here = _live_at(live, c, buf)
    peak = m.peak[buf]
    return NKIError(
        f"{NAMES[buf]} capacity",
        f"instruction #{c} of program {m.prog.pid} needs {need} B per partition of {NAMES[buf]} at once "
        f"(its operands and result), over the {CAPACITY[buf]} B a partition has "
        f"({'8 banks x 2 KiB' if buf == PSUM else '192 KiB'}); no allocation or spill can make it fit. "
        f"Tiles of the instruction:\n{_tile_lines(recs)}\n"
        f"{sum(r.nbytes for r in live_here)} B/partition live there (peak {peak} at instruction "
        f"#{m.peak_at[buf]}):\n{_tile_lines(live_here)}",
        where=_at(where) if where is not None else None)


def _conflicts(live):
    placed = sorted((r for r in live if r.place is not None), key=lambda r: r.first)
    active = []
    for r in placed:
        active = [a for a in active if a.end() >= r.first]
        for a in active:
            if a.buf != r.buf or a.root is not None and a.root is r.root and a.key == r.key:
                continue
            pa, na, lo_a, hi_a = a.place
            pr, nr, lo_r, hi_r = r.place
            if pa < pr + nr and pr < pa + na and lo_a < hi_r and lo_r < hi_a:
                return NKIError(
                    "allocation conflict",
                    f"two placed {NAMES[r.buf]} tiles share bytes while both are live: {a.describe()} at "
                    f"partitions {pa}..{pa + na - 1}, bytes {lo_a}..{hi_a - 1} (live from instruction #{a.first} "
                    f"to #{a.end()}, allocated at {_at(a.alloc_at or (a.root.alloc_at if a.root else None))}, "
                    f"last used at {_at(a.last_at)}) and {r.describe()} at partitions {pr}..{pr + nr - 1}, bytes "
                    f"{lo_r}..{hi_r - 1} (first written at instruction #{r.first}, "
                    f"{_at(r.alloc_at or (r.root.alloc_at if r.root else None))}). Writing the second overwrites "
                    "the first on hardware (NKI Direct Allocation guide, 'Lifetime Conflicts'): give them "
                    "different addresses or more physical tiles (num_free_tiles / num_bank_tiles)")
        active.append(r)
    return None


def _mixed(m, live):
    for b in (SBUF, PSUM):
        if not m.placed[b]:
            continue
        auto = [r for r in live if r.buf == b and r.place is None]
        if auto:
            r = auto[0]
            return NKIError(
                "allocation mixing",
                f"this kernel places {NAMES[b]} tensors with direct allocation, but {r.describe()} (allocated "
                f"at {_at(r.alloc_at)}) is allocated automatically. All {NAMES[b]} tensors of a kernel are "
                "either auto_alloc() or placed (nki.compiler.sbuf/psum.auto_alloc); an instruction's result "
                "must be assigned into a placed tensor (t[...] = nl.load(...)), not kept as a new tile "
                f"({len(auto)} such tile(s))")
    return None


def _with_lines(prog, rerun):
    """Run the program again recording source lines; the first problem it finds, with lines."""
    global _lines
    again = type(prog)(prog.launch, prog.pid)  # (a fresh core.Program: this module sits below core)
    outer = current_or_none()
    _lines = True
    try:
        set_current(again)
        with _config.override(race="off", loop_carried="off", uninit="off", operand="off", capacity="off"):
            rerun()
        m = again.mem
        m.close(m.ic + 1)
        live = [r for r in m.recs if r.first is not None and r.blocks is None and not r.elided()]
        again.mem.peak = prog.mem.peak
        again.mem.peak_at = prog.mem.peak_at
        return _problem(m, live)
    except Exception:  # noqa: BLE001 - the report without lines is still right
        return None
    finally:
        _lines = False
        set_current(outer)


# ---------------------------------------------------------------------------
# placed block tensors
# ---------------------------------------------------------------------------
def whole_block_tensor(*_):
    """Reading a placed block-dimension tensor as a whole (its blocks live at unrelated addresses)."""
    raise NKIError("placement", "a block-dimension tensor with direct allocation is read or written one "
                   "block at a time (t[i, ...]); its blocks live at the addresses the allocation gives them")
