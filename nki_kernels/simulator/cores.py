"""Logical NeuronCores and collective ranks: several simulated cores running one launch together.

``kernel[2](...)`` is a launch on two logical cores (LNC=2): each core runs the kernel
with its own ``nl.program_id(0)`` (0 or 1, ``nl.num_programs() == 2``) on the same HBM.
A first-generation grid with an ``nl.nc`` part (``kernel[nl.spmd_dim(nl.nc(2), 2), 2]``)
spreads its programs over cores as the ``nl.spmd_dim`` reference page describes; each core
runs its programs in grid order. :func:`~.ranks.simulate_ranks` runs a launch once per rank of
a simulated collective world (``nki.collectives``).

Each core of each rank is a *worker*: a thread running the kernel. Workers take turns
(cooperative scheduling): exactly one runs at a time and control passes only at a
synchronisation point (``nisa.sendrecv``, ``nisa.core_barrier``, a collective) or when a
worker finishes. Runs are deterministic, the diagnostics' per-process state stays
consistent, and a deadlock is found exactly, not by a timeout: when the running worker
blocks and no worker can go on, one :class:`NKIError` names what every worker waits for
and its kernel source line (or where a finished worker returned).

This module is the runtime (grids over cores, workers, their scheduler). The instructions that
synchronise cores (``nisa.sendrecv``, ``nisa.sendrecv_compute``, ``nisa.core_barrier``) are in
:mod:`.instructions.lnc`, the collectives in :mod:`.collectives`, and the race check across
cores (barrier counts, each core's final values, recorded as a worker gets and gives up the turn)
in :mod:`.lnc_checks`.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections import defaultdict, deque

import numpy as np

from . import diagnostics as _diag
from .context import _tls, current_or_none, set_current
from .instructions import registry as _registry
from .core import Program, flush_pending
from .errors import NKIError, NotBatchable, thread_where
from .instructions import target as _target
# The race check's per-core part; before_load / after_load are re-exported for the DMA instructions.
from .lnc_checks import _segment_end, _segment_start, after_load, before_load  # noqa: F401


# ---------------------------------------------------------------------------
# grids spread over cores
# ---------------------------------------------------------------------------
class CoreGrid(tuple):
    """A launch grid (a tuple of sizes) whose programs run on ``cores`` NeuronCores.

    ``parts[axis]`` lists ``(size, is_core)`` sub-dimensions of that axis, outermost first
    (``nl.spmd_dim(nl.nc(2), 2)`` is ``((2, True), (2, False))``): a program's index along
    the axis is row-major over the parts, and its core is row-major over the ``nc`` parts.
    """

    def __new__(cls, sizes, parts):
        obj = super().__new__(cls, sizes)
        obj.parts = tuple(tuple(p) for p in parts)
        obj.cores = int(np.prod([n for axis in obj.parts for n, is_core in axis if is_core]))
        return obj

    def __getnewargs__(self):
        return tuple(self), self.parts

    def core_of(self, pid) -> int:
        """The core that runs program ``pid``."""
        core = 0
        for i, axis in zip(pid, self.parts):
            sub = []
            for n, _ in reversed(axis):
                sub.append(i % n)
                i //= n
            for (n, is_core), s in zip(axis, reversed(sub)):
                if is_core:
                    core = core * n + s
        return core


def core_grid(raw, sizes: tuple, lnc_brackets=False):
    """``sizes`` as a :class:`CoreGrid` when the launch grid ``raw`` puts programs on several cores
    (an ``nl.nc`` part, or with ``lnc_brackets`` -- a standalone-API kernel -- ``kernel[2]``: LNC=2),
    else ``sizes`` unchanged."""
    if isinstance(raw, CoreGrid):
        return raw
    raw = raw if isinstance(raw, (tuple, list)) else (raw,)
    parts, any_core = [], False
    for g in raw:
        if _is_nc(g):
            parts.append(((int(g), True),))
            any_core = True
        elif hasattr(g, "parts") and hasattr(g, "cores"):  # nl.spmd_dim
            axis = tuple((int(p), _is_nc(p)) for p in g.parts)
            any_core = any_core or any(c for _, c in axis)
            parts.append(axis)
        else:
            parts.append(((int(g), False),))
    if any_core:
        return CoreGrid(sizes, parts)
    if lnc_brackets and sizes == (2,):  # kernel[2]: LNC=2 ("The bracket syntax must contain only one number, the number of cores")
        return CoreGrid(sizes, (((2, True),),))
    return sizes


def _is_nc(g) -> bool:
    return type(g).__name__ == "nc" and hasattr(g, "n")


def cores_of(grid) -> int:
    """Number of logical cores a launch grid runs on."""
    return getattr(grid, "cores", 1)


# nki.collectives' functions meet across ranks too; the instructions that synchronise cores are
# declared so in the registry (registry.sync_names(): sendrecv, sendrecv_compute, core_barrier).
_COLLECTIVE_NAMES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
                               "collective_permute_implicit", "collective_permute_implicit_reduce",
                               "all_gather_v", "all_to_all_v", "all_gather_v_trigger", "all_to_all_v_trigger"})


def sync_names() -> frozenset:
    """Names whose call in a kernel makes its cores meet: the synchronising instructions (as
    declared) and the collectives."""
    return _registry.sync_names() | _COLLECTIVE_NAMES


def _names_used(code) -> set:
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _names_used(c)
    return names


def runs_on_cores(grid, vectorise: bool, kernel=None) -> bool:
    """Whether a launch runs its cores as cooperating workers: always when each core runs one
    program (LNC=2); a grid with several programs per core (``nl.spmd_dim`` with ``nl.nc``) may
    run vectorised unless vectorising is off or the kernel's code names a synchronising call."""
    n = cores_of(grid)
    if n < 2:
        return False
    if int(np.prod(grid)) == n or not vectorise:
        return True
    func = getattr(kernel, "func", None)
    return func is not None and bool(_names_used(func.__code__) & sync_names())


# ---------------------------------------------------------------------------
# workers and their scheduler
# ---------------------------------------------------------------------------
class _Aborted(BaseException):
    """Unwinds a worker after another worker failed or the group deadlocked."""


class _Wait:
    __slots__ = ("ready", "describe", "where")

    def __init__(self, ready, describe, where):
        self.ready, self.describe, self.where = ready, describe, where


class Worker:
    """One core of one rank: the programs it runs and where it is."""

    def __init__(self, group, rank, core, pids, state, args, kwargs):
        self.group, self.rank, self.core, self.pids = group, rank, core, list(pids)
        self.state, self.args, self.kwargs = state, args, kwargs
        self.status = "new"  # new -> running <-> blocked -> done
        self.wait = None
        self.result = None
        self.returned_at = None  # (file, line, function) of the kernel's return
        self.epochs = defaultdict(int)  # id of an HBM memory -> core_barriers passed on it
        self.collectives = defaultdict(int)  # collective key -> calls made
        self.last_stamp = None  # the Stamp of this core's latest logged HBM access (see after_load)

    @property
    def name(self) -> str:
        """``core 1`` (or ``rank 2 core 1`` in a multi-rank run)."""
        return f"rank {self.rank} core {self.core}" if self.group.world > 1 else f"core {self.core}"


class Group:
    """The workers of one (multi-core and/or multi-rank) launch and the turn they take."""

    def __init__(self, kernel, world: int = 1):
        self.kernel, self.world = kernel, world
        self.workers = []
        self.cv = threading.Condition()
        self.turn = None
        self.failure = None
        self.mail = defaultdict(deque)  # (rank, pipe_id, from core, to core) -> messages
        self.arrivals = defaultdict(lambda: defaultdict(int))  # (rank, cores) -> core -> barriers reached
        self.meetings = {}  # collective key -> posts

    def add(self, rank, core, pids, state, args, kwargs) -> Worker:
        """Add a worker running ``pids`` of ``state``'s launch as ``core`` of ``rank``."""
        w = Worker(self, rank, core, pids, state, args, kwargs)
        self.workers.append(w)
        return w

    def cores(self, rank) -> int:
        """Number of cores of ``rank``."""
        return sum(1 for w in self.workers if w.rank == rank)

    # -- running -------------------------------------------------------------
    def run(self) -> None:
        """Run every worker to the end; re-raises the first failure (a deadlock is an NKIError)."""
        threads = [threading.Thread(target=self._main, args=(w,), daemon=True, name=f"nki {w.name}")
                   for w in self.workers]
        self.version = _target.get_nc_version()  # the target is per thread; workers simulate the caller's
        self.recorder = _tls.recorder  # (and a profile being recorded records them too)
        for t in threads:
            t.start()
        try:
            with self.cv:
                self._pass_turn(None)
                while self.failure is None and any(w.status != "done" for w in self.workers):
                    self.cv.wait()
                self.cv.notify_all()
        except BaseException as e:
            # The launching thread was interrupted (Ctrl-C, a test timeout): stop the workers at
            # their next turn instead of leaving them waiting for ever (a pytest-timeout left
            # them blocked and the interpreter aborted at exit), and do not wait for the running one.
            with self.cv:
                if self.failure is None:
                    self.failure = e
                self.cv.notify_all()
            raise
        for t in threads:
            t.join()
        if self.failure is not None:
            raise self.failure

    def _main(self, w) -> None:
        _tls.worker, _tls.recorder = w, self.recorder
        with self.cv:
            while self.turn is not w and self.failure is None:
                self.cv.wait()
            if self.failure is not None:
                w.status = "done"
                self.cv.notify_all()
                return
            w.status = "running"
            _segment_start(w)
        code = self.kernel.func.__code__
        frames = [] if len(self.workers) > 1 else None  # deadlock reports name where a core returned
        try:
            with np.errstate(all="ignore"), _target.use(self.version):  # errstate: masked-off lanes may overflow
                for pid in w.pids:
                    prog = Program(w.state, tuple(pid))
                    prog.worker = w
                    set_current(prog)
                    if frames is not None:
                        sys.settrace(_frame_catcher(code, frames))
                    w.result = self.kernel.func(*w.args, **w.kwargs)
                    if frames:
                        f = frames.pop()  # a finished frame's f_lineno is the line it returned from
                        w.returned_at = (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
                        del f
                    # end-of-program reports (placement, capacity) run outside the kernel's frames
                    thread_where.fallback = w.returned_at
                    # live ranges, capacity, placement; no rerun to name lines (it would repeat the
                    # program's sendrecv / barrier / collective calls without its peers)
                    prog.finish()
                    w.state.programs += 1
            flush_pending()
            _segment_end(w)
        except _Aborted:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised by run() in the launching thread
            with self.cv:
                if self.failure is None:
                    self.failure = e
        finally:
            sys.settrace(None)
            set_current(None)
            thread_where.fallback = None
            with self.cv:
                w.status = "done"
                if self.failure is None:
                    self._pass_turn(w)
                self.cv.notify_all()

    def _pass_turn(self, current) -> None:
        """Give the turn to the next worker that can run (caller holds ``cv``); detect deadlock."""
        ws = self.workers
        k = ws.index(current) + 1 if current is not None else 0
        for w in ws[k:] + ws[:k]:
            if w.status == "new" or (w.status == "blocked" and w.wait.ready()):
                self.turn = w
                self.cv.notify_all()
                return
        self.turn = None
        if any(w.status == "blocked" for w in ws):
            self.failure = self._deadlock()
        self.cv.notify_all()

    def block(self, w, ready, describe) -> None:
        """Let ``w`` wait until ``ready()``, running other workers meanwhile."""
        with self.cv:
            if ready():
                return
            # A deferred op may read HBM another core is about to write: compute it now.
            flush_pending()
            _segment_end(w)
            w.wait = _Wait(ready, describe, _diag.where())
            w.status = "blocked"
            self._pass_turn(w)
            while self.turn is not w and self.failure is None:
                self.cv.wait()
            if self.failure is not None:
                raise _Aborted
            w.status, w.wait = "running", None
            _segment_start(w)

    def _deadlock(self) -> NKIError:
        lines = []
        for w in self.workers:
            if w.status == "blocked":
                lines.append(f"{w.name} waits at {_diag.fmt_where(w.wait.where)}: {w.wait.describe()}")
            elif w.returned_at is not None:
                lines.append(f"{w.name} has finished (the kernel returned at {_diag.fmt_where(w.returned_at)})")
            else:
                lines.append(f"{w.name} has finished")
        first = next(w for w in self.workers if w.status == "blocked")
        return NKIError("deadlock", "no core can make progress: " + "; ".join(lines) + ". On hardware the "
                        "kernel hangs; every core must reach the same nisa.sendrecv (same pipe_id), "
                        "nisa.core_barrier and collective calls in the same order",
                        where=_diag.fmt_where(first.wait.where))


def _frame_catcher(code, frames):
    """A trace function that appends the frame of the next call of the kernel function ``code`` to
    ``frames`` and switches tracing off at once: while a trace function is set, CPython runs every
    instruction of the thread unspecialised (the kernel body ran 1.3-1.4x slower under the former
    per-return tracer), and the finished frame still tells the line the kernel returned from."""

    def tracer(frame, event, arg):
        if frame.f_code is code:
            frames.append(frame)
            sys.settrace(None)
        return None

    return tracer


def in_worker() -> bool:
    """Whether this thread runs a simulated core (its launch already holds the launch lock)."""
    return _tls.worker is not None


def current_worker(op: str):
    """The running program's worker, or ``None`` for a single-core launch; batched programs cannot
    synchronise, so they fall back to per-program runs."""
    prog = current_or_none()
    if prog is None:
        raise NKIError("kernel context", f"{op} is only valid inside a running kernel")
    if prog.nb:
        raise NotBatchable(f"{op} synchronises cores")
    return getattr(prog, "worker", None)


def run_launch(kernel, grid, args, kwargs, state):
    """Run every program of ``grid`` on its core, the cores as cooperating workers; returns the
    result of the grid's last program."""
    group = Group(kernel)
    pids = list(itertools.product(*(range(g) for g in grid)))
    by_core = [[p for p in pids if grid.core_of(p) == c] for c in range(grid.cores)]
    workers = [group.add(0, c, ps, state, args, kwargs) for c, ps in enumerate(by_core)]
    group.run()
    last = grid.core_of(pids[-1])
    return workers[last].result
