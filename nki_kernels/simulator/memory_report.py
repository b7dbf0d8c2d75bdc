"""The end of a program in the memory model: live ranges, the occupancy curve and its peaks, and
what cannot work on hardware.

:func:`finish` turns the program's records (:mod:`.memory`) into live ranges and the per-slot
occupancy of SBUF and PSUM, then reports, under the ``capacity`` check:

* an instruction whose operands and result cannot fit at once (no allocation or spill helps);
* two placed tiles sharing bytes while both are live (:mod:`.placement`);
* a memory whose tensors are placed and automatically allocated in one kernel.

Source lines are not recorded on the hot path: when a problem is found, the program is run again
with line recording on (``_tls.lines``) and the report names the lines. :mod:`.memory`
re-exports these names.
"""

from __future__ import annotations

import numpy as np

from . import config as _config
from . import diagnostics as _diag
from .buffers import NAMES, PSUM, SBUF
from .context import _tls, current_or_none, set_current
from .errors import NKIError


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
        # per tile: memory, bytes, first slot, slot after its last. (One column at a time: an array
        # made from a tuple per tile took a few microseconds a tile, about one per instruction.)
        k = len(spans)
        buf = np.fromiter([r.buf for r in spans], np.int64, k)
        nbytes = np.fromiter([r.nbytes for r in spans], np.int64, k)
        first = np.fromiter([r.first for r in spans], np.int64, k)
        end = np.maximum(np.maximum(np.fromiter([r.last for r in spans], np.int64, k),
                                    np.fromiter([r.lastc for r in spans], np.int64, k)), first) + 1
        np.add.at(curve, (buf, first), nbytes)
        np.subtract.at(curve, (buf, end), nbytes)
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
    if rerun is not None and not _tls.lines:
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
        f"(its operands and result), over the {m.cap[buf]} B a partition has "
        f"({'8 banks x 2 KiB' if buf == PSUM else f'{m.cap[buf] // 1024} KiB'}); no allocation or spill can make it fit. "
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
    again = type(prog)(prog.launch, prog.pid)  # (a fresh core.Program: this module sits below core)
    outer = current_or_none()
    _tls.lines = True  # (record source lines while the program is re-run for this report)
    again.mem.lines = True  # (made before the flag was set: programs made during the re-run copy it)
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
        _tls.lines = False
        set_current(outer)
