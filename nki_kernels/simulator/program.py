"""The running program: one SPMD program instance of a launch, and its pending deferred op.

* ``Program``: its ids, the launch's shared outputs, its on-chip memory (:mod:`.memory`) and the
  one tile whose element-wise op is deferred (:meth:`Program.defer`);
* :func:`current`: the program running on this thread (:mod:`.context` holds it);
* :func:`flush_pending`: compute the deferred op before anything is written.

Below the tensors (:mod:`.hbm_tensors`, :mod:`.core`), which flush the pending op before a write;
:mod:`.core` re-exports these names.
"""

from __future__ import annotations

import weakref

from . import memory as _memory
from . import specialization as _specialization
from .context import _tls
from .errors import NKIError
from .scheduling import ProgramSchedule


class Program:
    """One SPMD program instance of a launch: its ids and its on-chip memory usage.

    ``nb``/``bshape``: a batched program (:mod:`.vectorize`) stands for a box of
    ``bshape`` programs of the grid; every tile it makes carries ``nb`` leading
    batch axes. One program at a time has ``nb == 0``.
    """

    nb = 0
    bshape = ()
    box = None  # the grid box a batch of programs stands for (vectorize.BatchProgram)
    schedule = None  # (set per program: see __init__)
    current_api = False  # a kernel of the current (standalone) nki API, not neuronxcc.nki's
    custom_frontend = False  # a current-API kernel launched with NKI_COMPILER_FRONTEND=custom (specialization)
    sbuf_placed_low = None  # lowest byte of an SBUF tensor this program placed (a placement error's hint)
    v_prepare = None  # the last all_*_v_prepare handle (NKI 0.7.0 prepare / trigger, see collectives)

    def __init__(self, launch, pid: tuple):
        self.launch = launch
        self.pid = pid
        self.shared_index = 0
        self.sbuf_peak = 0  # live bytes per partition at the peak (set when the program ends)
        self.psum_peak = 0
        self.pending = None  # weakref to the tile whose op is deferred
        kernel = getattr(launch, "kernel", None)
        self.current_api = bool(getattr(kernel, "options", {}).get("lnc_brackets"))  # (the memory model reads it)
        # NKI 0.7.0: the environment's specialization, read per launch (see .specialization)
        self.custom_frontend = self.current_api and _specialization.custom_requested()
        self.mem = _memory.ProgramMemory(self)
        # a current-API kernel's scheduling state (nisa.NkiInstruction handles, no_reorder, with_schedule)
        self.schedule = ProgramSchedule() if self.current_api else None

    def finish(self, rerun=None) -> None:
        """The program ended: live ranges, peaks and the capacity / placement checks
        (:func:`.memory.finish`; ``rerun()`` runs it again to name source lines in a report), then its
        scheduling edges (``kernel.with_schedule``'s names resolved, no cycle)."""
        _memory.finish(self, rerun)
        if self.v_prepare is not None:
            self.v_prepare.check_triggered()
        if self.schedule is not None:
            self.schedule.finish(getattr(getattr(self.launch, "kernel", None), "schedule", ()))

    def defer(self, tile) -> None:
        """Make ``tile`` the program's one pending deferred op (computing the previous one)."""
        prev = self.pending() if self.pending is not None else None
        if prev is not None and prev._thunk is not None:
            prev.force()
        self.pending = weakref.ref(tile)


def current() -> Program:
    """The program being simulated on this thread (error outside a kernel launch)."""
    prog = _tls.program
    if prog is None:
        raise NKIError("kernel context", "this NKI call is only valid inside a running kernel "
                       "(launch it with kernel[grid](...))")
    return prog


def flush_pending() -> None:
    """Compute the running program's deferred op, if any (before anything is written)."""
    prog = _tls.program
    if prog is not None and prog.pending is not None:
        tile = prog.pending()
        prog.pending = None
        if tile is not None and tile._thunk is not None:
            tile.force()
