"""HBM checks of a launch: the per-launch access log, races between programs, uninitialised data.

Every DMA between HBM and on-chip memory is logged per launch as ``(program, index, mask, line,
stamp)`` -- no boxes, no element lists (:class:`LaunchLog`; the hook is
:func:`.diagnostics.hbm_access`). At the end of the launch (:func:`launch_end`) only tensors that
were written are analysed: accesses become boxes (exact for basic slices and ragged-edge masks,
bounding boxes otherwise) and a sort-and-sweep over the boxes finds overlapping pairs from different
programs; pairs whose bounding boxes overlap but are not exact compare element indices. Accesses by
different cores of a multi-core launch are judged with :mod:`.lnc_checks`. Loads from an HBM tensor
allocated uninitialised (``nl.ndarray`` in HBM) build a bool "written" mask of its storage on first
use, replaying the launch's writes through it and every view of it; a returned output left partly unwritten is filled with the NaN sentinel.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from . import config
from . import dtypes as dt
from .context import current_or_none
from .errors import NKIError
from .index_expr import Mask
from .indexing import full_mask
from .lnc_checks import (access_stamp, barrier_ordered, note_write, read_discarded, read_of_own_identical_writes,
                         same_final_values,
                         write_keeps)
from .regions import Region, _bitmap_of
from .source_lines import fmt_where, where


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
    (``stamp``: a :class:`~.lnc_checks.Stamp` for the cores of a multi-core launch, else ``None``)."""

    def __init__(self):
        self.tensors = {}
        # key -> indices of writes that stored exactly the values already there (written by an
        # earlier program): programs storing identical data is benign, not a race.
        self.repeats = {}
        self.extent = {}  # key -> (lo, hi) box around all writes so far, None once unknown
        self.writers = {}  # key -> program ids that wrote it
        self.finals = {}  # (key, core) -> (values, written) each core of a multi-core launch left (lnc_checks.py)

    def add(self, tensor, access, mask, write, prog, wh=None, values=None):
        """Log one access of ``tensor`` by ``prog`` (``write`` or read) made at ``wh`` (file, line, fn);
        ``values`` (about to be written) let a write that changes nothing be told apart."""
        key = _tensor_key(tensor)
        ent = self.tensors.get(key)
        if ent is None:
            ent = self.tensors[key] = [tensor, [], []]
        rec = (prog.pid, access.index, mask, wh or where(), _core_stamp(prog, tensor))
        if write and values is not None and rec[4] is not None:
            note_write(rec[4], tensor, access, mask, values)
        if write and values is not None and ent[2] and self._may_overlap(key, access, mask, prog.pid, ent[2]) \
                and _rewrites_same(tensor, access, mask, values):
            self.repeats.setdefault(key, set()).add(len(ent[2]))
        if write:
            self._grow_extent(key, access, mask, not ent[2])
            self.writers.setdefault(key, set()).add(prog.pid)
        ent[2 if write else 1].append(rec)
        if write:
            root = tensor.__dict__.get("_storage_root", tensor)
            bits = root.__dict__.get("written_bits")
            if bits is not None:
                access.index.write(_element_view(bits, root, tensor), np.True_, mask)


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
    prog = current_or_none()
    log = getattr(prog.launch, "diag", None) if prog is not None and not prog.nb else None
    if log is None or not config.enabled("race"):
        return False
    key = _tensor_key(tensor)
    ent = log.tensors.get(key)
    return bool(ent and ent[2] and log._may_overlap(key, access, mask, prog.pid, ent[2]))


def _core_stamp(prog, tensor):
    """The core and barrier count of an access by a core of a multi-core launch (else ``None``)."""
    if getattr(prog, "worker", None) is None:
        return None
    return access_stamp(prog, tensor)


def _barrier_ordered(ra, rb) -> bool:
    """Whether two logged accesses by different cores are ordered by a ``core_barrier``."""
    if ra[4] is None or rb[4] is None:
        return False
    return barrier_ordered(ra[4], rb[4])


def _read_discarded(stamp) -> bool:
    """Whether a core's logged HBM read brought values nothing used afterwards (see lnc_checks.read_discarded)."""
    if stamp is None or stamp.loaded is None:
        return False
    return read_discarded(stamp)


def _write_keeps(rec, region) -> bool:
    """Whether a core's logged HBM write left every element of ``region`` as it was (see lnc_checks.write_keeps)."""
    if rec[4] is None or rec[4].kept is None:
        return False
    return write_keeps(rec, region)


def _same_final_values(tensor, state, ra, rb, rec_a, rec_b) -> bool:
    """Whether two cores' overlapping writes left the same final values (see lnc_checks.same_final_values)."""
    if rec_a[4] is None or rec_b[4] is None:
        return False
    return same_final_values(_tensor_key(tensor), state.diag, ra, rb, rec_a[4], rec_b[4])


def _written_bits(root, log):
    """One bool per element of ``root``'s storage (C order): which the launch stored into, through
    ``root`` or any view of it (a ``.ap()`` pattern, a reshape). Built from the log on first use,
    then kept up to date by :meth:`LaunchLog.add`."""
    bits = root.__dict__.get("written_bits")
    if bits is None:
        bits = root.written_bits = np.zeros(root.data.size, dtype=bool)
        for t, _, writes in log.tensors.values():
            if writes and (t.__dict__.get("_storage_root") is root or _same_memory(t, root)):
                view = _element_view(bits, root, t)
                for _, idx, m, *_ in writes:
                    idx.write(view, np.True_, m)
    return bits


def _check_hbm_init(tensor, access, mask, log):
    root = tensor.__dict__.get("_storage_root", tensor)
    got = access.index.read(_element_view(_written_bits(root, log), root, tensor), mask)

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
    if hasattr(type(result), "is_output"):  # an HBMTensor (told by its class attribute: core imports the checks)
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
        if not is_w[b] and (_read_discarded(recs[b][0][4]) or _write_keeps(recs[a][0], regions[b])
                            or read_of_own_identical_writes(writes, recs[a][0], recs[b][0], regions[b])):
            continue  # the values read were never used, or are the same before and after the write, or the
            # reader's own writes of the same values
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
