"""Direct allocation: tensors placed on fixed bytes of one per-program SBUF / PSUM storage.

What the hardware and compiler do (NKI Direct Allocation Developer Guide, nki.compiler.* pages):
``ncc.sbuf.alloc/mod_alloc``, ``ncc.psum.alloc/mod_alloc`` and the standalone
``nl.ndarray(..., address=)`` put tiles on fixed bytes, so overlapping placements alias as on
hardware (``mod_alloc`` block ``i`` and ``i + n`` share storage).

* :func:`resolve_buffer`: a ``buffer=`` (``Placement``, ``AutoAlloc``, ``ncc.sbuf``) and
  ``address=`` as ``(memory, Placement or None)``;
* :func:`place` / :func:`view`: the checked placement of a tensor (or of each block) and the
  array viewing those bytes of the program's storage;
* :func:`traced_loop`: ``affine_range`` / ``sequential_range`` bodies are traced once by the
  compiler, so a placement made in one is reused by the later iterations;
* :func:`mark_placed` / :func:`whole_block_tensor`: where a live-range record's tile lives, and the
  error of reading a placed block tensor whole.

The conflicts between placed tiles are found when the program ends (:mod:`.memory_report`).
:mod:`.memory` re-exports these names.
"""

from __future__ import annotations

import inspect

import numpy as np

from . import buffer_pool as _pool
from . import config as _config
from . import diagnostics as _diag
from .buffers import PMAX, PSUM, PSUM_BANK, PSUM_BANKS, SBUF_RESERVED, buffer_index, sbuf_bytes
from .context import current_or_none
from .errors import NKIError


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


class HbmAddress:
    """``nl.ndarray(..., buffer=<HBM>, address=(free_offset,))``: "For SBUF/PSUM this is a 2-tuple
    (partition_offset, free_offset); for HBM it is a 1-tuple (free_offset,)" (nki.language.ndarray, Neuron
    2.33.0). The simulator keeps every HBM tensor in its own array, so it does not alias placed HBM tensors:
    :func:`check_hbm_address` refuses two whose bytes overlap in one program rather than give them separate
    values."""

    def __init__(self, address):
        try:
            (free,) = address
        except (TypeError, ValueError):
            raise TypeError(f"nl.ndarray: an HBM address is a 1-tuple (free_offset,), got {address!r}") from None
        if type(free) is not int or free < 0:
            raise TypeError(f"nl.ndarray: an HBM address's free_offset must be a non-negative int, got {free!r}")
        self.free = free

    def __repr__(self):
        return f"address=({self.free},)"


def check_hbm_address(address, nbytes, buffer, name, prog) -> None:
    """Record HBM tensor ``name`` placed at ``address`` (an :class:`HbmAddress`) in ``prog``; an NKIError if
    its ``nbytes`` overlap an HBM tensor the program placed before in the same memory."""
    if prog is None:
        return
    placed = prog.__dict__.setdefault("hbm_placed", [])
    lo, hi = address.free, address.free + nbytes
    for other_buffer, olo, ohi, other in placed:
        if other_buffer is buffer and lo < ohi and olo < hi:
            raise NKIError("address", f"{name or 'an HBM tensor'} at {address!r} ({nbytes} B, bytes {lo}..{hi}) "
                           f"overlaps {other} (bytes {olo}..{ohi}) in {buffer!r}: tensors placed on the same HBM "
                           "bytes alias on hardware, which the simulator does not model; place them apart")
    placed.append((buffer, lo, hi, name or f"HBM tensor #{len(placed)}"))


def resolve_buffer(buffer, address=None):
    """``(core buffer, Placement, HbmAddress or None)`` for a ``buffer=`` (and standalone ``address=``)
    argument."""
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
        return buffer, HbmAddress(address)
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
        n = m.cap[buf]
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
    else:
        try:
            blocks = _place_blocks(placement, buf, bshape, pdim_size, fbytes)
        except NKIError as e:
            raise _with_carried_over_hint(e, buf, prog) from None
        if buf != PSUM and blocks:
            low = min(lo for _, lo in blocks.values())
            prog.sbuf_placed_low = low if prog.sbuf_placed_low is None else min(prog.sbuf_placed_low, low)
    if key is not None and hit is None:
        m.traced[key] = ((buf, tuple(shape), pdim, dtype), blocks)
    if not pdim:
        part, lo = blocks[()]
        return (view(m, buf, part, lo, pdim_size, fshape, dtype), (part, lo)), None
    return None, blocks


def _place_blocks(placement, buf, bshape, pdim_size, fbytes):
    """Block index -> checked ``(partition, byte)`` from the allocation function (``()`` alone for a
    tensor without block dimensions)."""
    if not bshape:
        loc = _call_alloc(placement.func, (), pdim_size, fbytes)
        return {(): _check_place(buf, loc, pdim_size, fbytes, placement.what, placement.psum_origin_only)}
    blocks = {}
    for idx in np.ndindex(*bshape):
        loc = _call_alloc(placement.func, tuple(idx), pdim_size, fbytes)
        blocks[tuple(idx)] = _check_place(buf, loc, pdim_size, fbytes, f"{placement.what} block {tuple(idx)}",
                                          placement.psum_origin_only)
    return blocks


def _with_carried_over_hint(e, buf, prog):
    """``e``, and where an SBUF tile ran past the top while this program placed nothing below some
    byte, a note of that: addresses computed by Python state that outlives a launch (the nki-samples
    attention tutorial's module-level ``SBufAllocator`` advances on every trace) start where the
    previous launch stopped, which looks like the simulator leaking state between launches."""
    low = prog.sbuf_placed_low
    if buf == PSUM or e.rule != "placement" or "does not fit below" not in e.detail or not low:
        return e
    return NKIError("placement", f"{e.detail}; this launch's placed SBUF tensors so far start at byte {low}, none "
                    "below it: if the kernel computes addresses from Python state kept between launches (an "
                    "allocator object at module level), that state continues from the previous launch (each call "
                    "traces the kernel again) and is not reset by the simulator", e.where)


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
# placed block tensors
# ---------------------------------------------------------------------------
def whole_block_tensor(*_):
    """Reading a placed block-dimension tensor as a whole (its blocks live at unrelated addresses)."""
    raise NKIError("placement", "a block-dimension tensor with direct allocation is read or written one "
                   "block at a time (t[i, ...]); its blocks live at the addresses the allocation gives them")
