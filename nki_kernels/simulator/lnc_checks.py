"""The race check across the logical cores of a multi-core launch (LNC=2, simulated ranks).

What the HBM access log (:mod:`.hbm_checks`) needs to tell a race between two cores from an
ordered or benign overlap:

* a :class:`Stamp` on each access: the core and the number of ``nisa.core_barrier`` calls it had
  passed on the memory (equal counts: concurrent; different: ordered by a barrier,
  :func:`barrier_ordered`);
* for a DMA read into a tile, which tile took the values (:func:`before_load` / :func:`after_load`),
  so that a read nothing used is not a race (:func:`read_discarded`);
* for a write, the elements it left as they were (:func:`note_write`, :func:`write_keeps`), and a
  read of values the reading core itself wrote, identical to the other core's
  (:func:`read_of_own_identical_writes`);
* the values each core's last writes left (:class:`CoreFinals`, recorded at the end of each of its
  turns by :func:`_segment_end`): two cores storing the same final values is benign
  (:func:`same_final_values`).

The scheduler (:mod:`.cores`) calls :func:`_segment_start` / :func:`_segment_end` as a core gets and
gives up the turn; the DMA instructions call :func:`before_load` / :func:`after_load`.
"""

from __future__ import annotations

import itertools

import numpy as np

from .context import _tls
from .regions import Region, _common_elements


class Stamp:
    """What the race checker needs of one HBM access by a core: the core, the number of
    ``core_barrier`` calls it had passed on the tensor's memory; for a DMA read into an on-chip
    tile, that tile's live-range record and the slot the DMA wrote it in (``loaded``); for a
    write, the elements it left as they were (``kept``)."""

    __slots__ = ("core", "epoch", "loaded", "kept", "seq")

    def __init__(self, core, epoch):
        self.core, self.epoch, self.loaded = core, epoch, None
        self.kept = None  # for a write: where it stored what was there (bits packed, in the access's shape)
        self.seq = next(_SEQ)  # the order the simulator made the accesses in (a core's: its program order)


_SEQ = itertools.count()


def memory_id(tensor) -> int:
    """Identity of the memory an HBM tensor (or a reshape/view of it) lives in."""
    a = tensor.data
    while isinstance(a.base, np.ndarray):
        a = a.base
    return id(a)


def access_stamp(prog, tensor):
    """A :class:`Stamp` for an access by a program of a multi-core launch, else ``None``."""
    w = getattr(prog, "worker", None)
    if w is None or w.group.cores(w.rank) < 2:
        return None
    st = w.last_stamp = Stamp(w.core, w.epochs[memory_id(tensor)])
    return st


def before_load() -> None:
    """A DMA is about to read HBM into an on-chip tile: forget earlier accesses (see :func:`after_load`)."""
    w = _tls.worker
    if w is not None:
        w.last_stamp = None


def after_load(dst) -> None:
    """The DMA begun with :func:`before_load` wrote ``dst``: if its HBM read was logged for the race
    check, remember which tile took the values and in which slot, so that :func:`read_discarded`
    can tell later whether the kernel ever used them."""
    w = _tls.worker
    if w is None or w.last_stamp is None:
        return
    st, w.last_stamp = w.last_stamp, None
    rec = getattr(dst, "_mem", None)
    if rec is not None:
        st.loaded = (rec, max(rec.last, rec.lastc))


def note_write(stamp, tensor, access, mask, values) -> None:
    """A core is about to store ``values`` at ``access``: remember which elements keep the value
    they hold (bit for bit), for :func:`write_keeps`."""
    old = access.index.read(tensor.data, mask)
    new = np.asarray(values)
    if new.shape != old.shape:
        new = new.reshape(old.shape) if new.size == old.size else np.broadcast_to(new, old.shape)
    new = new.astype(tensor.dtype, copy=False)
    size = tensor.dtype.itemsize
    if tensor.dtype.fields is not None or size not in (1, 2, 4, 8):
        return  # (packed MX records: counted as changed everywhere)
    bits = np.dtype(f"u{size}")
    kept = np.ascontiguousarray(old).view(bits) == np.ascontiguousarray(new).view(bits)
    if kept.any():
        stamp.kept = (np.packbits(kept, axis=None), kept.shape)  # 1 bit an element: kept for the launch


def write_keeps(write_rec, region) -> bool:
    """Whether a logged HBM write (``(pid, index, mask, where, stamp)``) stored, on every element
    of ``region`` it covers, the value already there. A read of those elements by another core
    then sees the same values whichever access comes first: nki-library's MoE CTE kernel has both
    cores rewrite the zeros of its padding token's row while the other core reads it."""
    st = write_rec[4]
    if st is None or st.kept is None:
        return False
    _, idx, m = write_rec[:3]
    changed = np.zeros(idx.shape, bool)
    packed, shape = st.kept
    idx.write(changed, ~np.unpackbits(packed, count=int(np.prod(shape))).view(bool).reshape(shape), m)
    if region.exact:
        return not changed[region.box()].any()
    return not changed.reshape(-1)[region.elements()].any()


def _on(region, a):
    """The elements of tensor-shaped array ``a`` in ``region``."""
    return a[region.box()] if region.exact else a.reshape(-1)[region.elements()]


def _changed(rec, region):
    """``(written, changed)`` of a logged write over ``region``: which elements it wrote, and which it wrote
    with a value other than the one there (every written one when no element kept its value)."""
    _, idx, m = rec[:3]
    written = np.zeros(idx.shape, bool)
    idx.write(written, np.True_, m)
    st = rec[4]
    if st.kept is None:
        w = _on(region, written)
        return w, w
    packed, shape = st.kept
    changed = np.zeros(idx.shape, bool)
    idx.write(changed, ~np.unpackbits(packed, count=int(np.prod(shape))).view(bool).reshape(shape), m)
    return _on(region, written), _on(region, changed)


def read_of_own_identical_writes(writes, write_rec, read_rec, region) -> bool:
    """Whether core B's read (``read_rec``, of ``region``) overlapping core A's write (``write_rec``), in one
    barrier interval, sees the same values whichever comes first: B itself wrote every element of
    ``region`` before the read, after A's write, each time storing the value already there (so A's), and
    A left its written values there afterwards (its later writes keep them). The read then
    gets that value in every interleaving: nki-library's dynamic elementwise add has both logical cores
    compute the whole output, then read it back (its "HBM fence" copy). ``writes``: the tensor's logged
    writes."""
    sa, sb = write_rec[4], read_rec[4]
    if sa is None or sb is None or sa.core == sb.core:
        return False
    covered = ok = None
    for rec in writes:
        st = rec[4]
        if st is None or st.seq <= sa.seq:
            continue
        if st.core == sb.core and st.seq < sb.seq:
            written, changed = _changed(rec, region)
            covered = written if covered is None else covered | written
            ok = ~(written & changed) if ok is None else ok & ~(written & changed)
        elif st.core == sa.core:
            written, changed = _changed(rec, region)
            if (written & changed).any():
                return False
    return covered is not None and bool(covered.all() and ok.all())


def read_discarded(stamp) -> bool:
    """Whether a core's DMA read of HBM brought values into a tile that nothing used afterwards.

    Another core writing those HBM elements in the same barrier interval leaves the values read
    indeterminate on hardware (the old ones or the new ones), which matters only if the kernel uses
    them: nki-library's MoE CTE kernel loads a whole block of output rows on each core and uses only
    its own half. Only a plain tile (not a block of a block-dimension tensor, not placed at an
    address other tensors may share) is judged, and any later touch of it counts as a use."""
    if stamp is None or stamp.loaded is None:
        return False
    rec, slot = stamp.loaded
    if rec.root is not None or rec.blocks is not None or rec.place is not None:
        return False
    return max(rec.last, rec.lastc) <= slot


def _segment_start(w) -> None:
    """Note how many HBM writes the launch log holds as ``w`` gets the turn (see :func:`_segment_end`)."""
    log = getattr(w.state, "diag", None)
    w.segment = {k: len(ent[2]) for k, ent in log.tensors.items()} if log is not None else None


def _segment_end(w) -> None:
    """Record, for every HBM element core ``w`` wrote since it got the turn, the value it left there.

    Only ``w`` ran meanwhile, so the memory holds exactly that value; :func:`same_final_values`
    uses these per-core final values to tell a benign overlap of two cores' writes from a race."""
    log = getattr(w.state, "diag", None)
    seg = getattr(w, "segment", None)
    if log is None or seg is None or w.group.cores(w.rank) < 2:
        return

    for key, (tensor, _, writes) in log.tensors.items():
        start = seg.get(key, 0)
        if start >= len(writes):
            continue
        regions = [Region.of(idx, m) for _, idx, m, *_ in writes[start:]]
        fin = log.finals.get((key, w.core))
        if fin is None:
            fin = log.finals[(key, w.core)] = CoreFinals(tensor)
        boxes = [r for r in regions if not r.empty()]
        if boxes:  # grown once per turn: the box's arrays are copied only when it grows
            fin.cover([min(r.lo[a] for r in boxes) for a in range(tensor.ndim)],
                      [max(r.hi[a] for r in boxes) for a in range(tensor.ndim)])
        for r, (_, idx, m, *_) in zip(regions, writes[start:]):
            fin.record(tensor, idx, m, r)
    w.segment = None


class CoreFinals:
    """The values one core's last writes left in one HBM tensor of a multi-core launch, kept over
    the bounding box of what it wrote (not the whole tensor): cores that write their own parts
    keep one copy of their part each."""

    __slots__ = ("lo", "values", "written")

    def __init__(self, tensor):
        self.lo = None  # the box's first corner; values / written cover the box
        self.values = np.zeros((0,) * tensor.ndim, tensor.dtype)
        self.written = np.zeros((0,) * tensor.ndim, bool)

    def cover(self, lo, hi) -> None:
        """Grow the box to take the box ``[lo, hi)`` (around a turn's writes), keeping what it holds."""
        if self.lo is not None:
            old_hi = [a + n for a, n in zip(self.lo, self.values.shape)]
            if all(a <= b for a, b in zip(self.lo, lo)) and all(a >= b for a, b in zip(old_hi, hi)):
                return
            lo = [min(a, b) for a, b in zip(self.lo, lo)]
            hi = [max(a, b) for a, b in zip(old_hi, hi)]
        shape = tuple(h - l for l, h in zip(lo, hi))
        values, written = np.zeros(shape, self.values.dtype), np.zeros(shape, bool)
        if self.lo is not None:
            at = tuple(slice(a - b, a - b + n) for a, b, n in zip(self.lo, lo, self.values.shape))
            values[at], written[at] = self.values, self.written
        self.lo, self.values, self.written = lo, values, written

    def _local(self, coords) -> tuple:
        return tuple(c - l for c, l in zip(coords, self.lo))

    def record(self, tensor, idx, mask, region) -> None:
        """Take the values memory holds now at a write's elements (``idx`` / ``mask``, ``region``)."""
        if region.empty():
            return
        if region.exact:  # a box: the write's elements are exactly the box's
            box = region.box()
            at = tuple(slice(b.start - l, b.stop - l) for b, l in zip(box, self.lo))
            self.values[at] = tensor.data[box]
            self.written[at] = True
            return
        coords = np.unravel_index(region.elements(), tensor.shape)
        at = self._local(coords)
        self.values[at] = tensor.data[coords]
        self.written[at] = True

    def at(self, elems, shape):
        """``(values, written)`` at flat indices ``elems`` of the tensor (``shape``); ``None`` when
        some lie outside the box (not written by this core)."""
        coords = np.unravel_index(elems, shape)
        if self.lo is None or any(((c < l) | (c >= l + n)).any() for c, l, n in zip(coords, self.lo, self.values.shape)):
            return None
        at = self._local(coords)
        return self.values[at], self.written[at]

    def box(self, sel):
        """``(values, written)`` over the tensor box ``sel`` (slices); ``None`` when it leaves the box."""
        if self.lo is None or any(s.start < l or s.stop > l + n for s, l, n in zip(sel, self.lo, self.values.shape)):
            return None
        at = tuple(slice(s.start - l, s.stop - l) for s, l in zip(sel, self.lo))
        return self.values[at], self.written[at]


def same_final_values(key, log, ra, rb, sa, sb) -> bool:
    """Whether two cores' unordered, overlapping HBM writes (regions ``ra``/``rb``, stamps ``sa``/``sb``)
    are benign: on every common element both cores' *last* writes store the same value. Each core's
    writes reach the memory in its program order, so every interleaving ends with one core's last
    write, and the result does not depend on scheduling (nki-library's router top-k: both cores zero
    the same rows, then scatter identical values into them)."""
    if sa is None or sb is None or sa.core == sb.core:
        return False
    fa, fb = log.finals.get((key, sa.core)), log.finals.get((key, sb.core))
    if fa is None or fb is None or ra.shape != rb.shape or fa.values.ndim != len(ra.shape):
        return False
    if ra.exact and rb.exact:
        sel = tuple(slice(max(a, c), min(b, d)) for a, b, c, d in zip(ra.lo, ra.hi, rb.lo, rb.hi))
        got_a, got_b = fa.box(sel), fb.box(sel)
    else:
        sel = _common_elements(ra, rb)  # (intersect1d's result; the race check's map of ra is reused)
        got_a, got_b = fa.at(sel, ra.shape), fb.at(sel, ra.shape)
    if got_a is None or got_b is None:
        return False
    (va, da), (vb, db) = got_a, got_b
    return bool(da.all() and db.all()) and np.ascontiguousarray(va).tobytes() == np.ascontiguousarray(vb).tobytes()


def barrier_ordered(a, b) -> bool:
    """Whether two overlapping accesses by different cores have a ``core_barrier`` on the memory
    between them: one core's access came before a barrier the other core passed before its own."""
    return a.core != b.core and a.epoch != b.epoch
