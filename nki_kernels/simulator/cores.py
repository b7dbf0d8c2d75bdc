"""Logical NeuronCores and collective ranks: several simulated cores running one launch together.

``kernel[2](...)`` is a launch on two logical cores (LNC=2): each core runs the kernel
with its own ``nl.program_id(0)`` (0 or 1, ``nl.num_programs() == 2``) on the same HBM.
A first-generation grid with an ``nl.nc`` part (``kernel[nl.spmd_dim(nl.nc(2), 2), 2]``)
spreads its programs over cores as the ``nl.spmd_dim`` reference page describes; each core
runs its programs in grid order. :func:`simulate_ranks` runs a launch once per rank of a
simulated collective world (``nki.collectives``).

Each core of each rank is a *worker*: a thread running the kernel. Workers take turns
(cooperative scheduling): exactly one runs at a time and control passes only at a
synchronisation point (``nisa.sendrecv``, ``nisa.core_barrier``, a collective) or when a
worker finishes. Runs are deterministic, the diagnostics' per-process state stays
consistent, and a deadlock is found exactly, not by a timeout: when the running worker
blocks and no worker can go on, one :class:`NKIError` names what every worker waits for
and its kernel source line (or where a finished worker returned).

Barriers order HBM accesses for the race checker (:mod:`.lnc_checks`): each core counts the
barriers it has passed on a tensor's memory; at the end of each turn a core's final values are
recorded there.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections import defaultdict, deque

import numpy as np

from . import diagnostics as _diag
from . import dtypes as dt
from . import recording as _prof
from .context import _worker_tls
from .core import (Access, HBMTensor, Program, Tile, current_or_none, flush_pending, private_hbm, sbuf,
                   set_current)
from .errors import NKIError, NotBatchable, thread_where
from .instructions import target as _target
# The race check's per-core part; before_load / after_load are re-exported for the DMA instructions.
from .lnc_checks import _segment_end, _segment_start, after_load, before_load, memory_id  # noqa: F401


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


_SYNC_NAMES = frozenset({"sendrecv", "core_barrier", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                         "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
                         "all_gather_v", "all_to_all_v"})


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
    return func is not None and bool(_names_used(func.__code__) & _SYNC_NAMES)


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
        self.loops = []  # the diagnostics' affine_range frames while another worker runs
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
            _diag.loops.clear()
            raise
        for t in threads:
            t.join()
        _diag.loops.clear()
        if self.failure is not None:
            raise self.failure

    def _main(self, w) -> None:
        _worker_tls.worker = w
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
            w.loops = list(_diag.loops)
            _diag.loops.clear()
            self._pass_turn(w)
            while self.turn is not w and self.failure is None:
                self.cv.wait()
            if self.failure is not None:
                raise _Aborted
            w.status, w.wait = "running", None
            _segment_start(w)
            _diag.loops[:] = w.loops

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
    return getattr(_worker_tls, "worker", None) is not None


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


def simulate_ranks(kernel, ranks: int, *arrays, **static):
    """Run ``kernel`` (or ``kernel[grid]``) on a simulated world of ``ranks`` ranks; returns the
    list of each rank's outputs (NumPy arrays, as ``kernel(...)`` returns them).

    Every rank runs the whole launch (all programs and logical cores of its grid) on its own
    HBM; ``nki.collectives.rank_id()`` says which rank a program belongs to, and collectives
    meet across the ranks of their replica group. A positional argument is either one
    array, which every rank gets its own copy of, or a list/tuple of ``ranks`` arrays, the
    r-th for rank r. Keyword arguments are static and the same for all ranks.
    """
    from . import launch as _launch

    if isinstance(kernel, _launch.Launch):
        kernel, grid = kernel.kernel, kernel.grid
    else:
        grid = ()
    if not isinstance(kernel, _launch.Kernel):
        raise TypeError(f"simulate_ranks: kernel must be an @nki.jit kernel, got {type(kernel).__name__}")
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"simulate_ranks: ranks must be a positive integer, got {ranks!r}")
    ranks = int(ranks)
    per_rank = []
    for k, a in enumerate(arrays):
        if isinstance(a, (list, tuple)):
            if len(a) != ranks:
                raise ValueError(f"simulate_ranks: positional argument {k} lists {len(a)} arrays; give one "
                                 f"array (every rank gets a copy) or one per rank ({ranks})")
            per_rank.append([np.asarray(x) for x in a])
        else:
            per_rank.append([np.array(a, copy=True) for _ in range(ranks)])
    grid = _launch.normalize_grid(grid)
    pids = list(itertools.product(*(range(g) for g in grid)))
    ncores = cores_of(grid)
    group = Group(kernel, world=ranks)
    states, last = [], []
    with _launch._one_launch_at_a_time:
        for r in range(ranks):
            args, kw = _launch._bind(kernel, [p[r] for p in per_rank], static)
            state = _launch._LaunchState(kernel, grid)
            _diag.launch_begin(state)
            states.append(state)
            ws = [group.add(r, c, [p for p in pids if ncores == 1 or grid.core_of(p) == c], state, args, kw)
                  for c in range(ncores)]
            last.append(ws[grid.core_of(pids[-1]) if ncores > 1 else 0])
        group.run()
        for state, w in zip(states, last):
            _diag.launch_end(state, w.result)
    return [_launch._unwrap(w.result) for w in last]


# ---------------------------------------------------------------------------
# nisa.sendrecv / nisa.core_barrier
# ---------------------------------------------------------------------------
class _Message:
    __slots__ = ("data", "shape", "dtype", "where", "taken")

    def __init__(self, data, where):
        self.data, self.shape, self.dtype, self.where, self.taken = data, data.shape, data.dtype, where, False


def _rank_arg(x, name, op, ncores):
    try:
        v = int(x)
    except (TypeError, ValueError):
        raise NKIError(op, f"nisa.{op}: {name} must be an integer core rank, got {type(x).__name__}") from None
    if isinstance(x, bool) or v not in (0, 1):
        raise NKIError(op, f"nisa.{op}: {name}={x!r}; the cores of a logical NeuronCore are ranks 0 and 1")
    if v >= ncores:
        raise NKIError(op, f"nisa.{op}: {name}={v} but this launch runs on {ncores} logical core(s); launch the "
                       "kernel as kernel[2](...) (LNC=2) to exchange data between two cores")
    return v


def _sbuf_tile(x, name, op):
    if isinstance(x, (HBMTensor, Access)):
        raise NKIError("operand memory", f"nisa.{op}: {name} is in HBM (shape {tuple(x.shape)}); both src and dst "
                       "must be SBUF tiles")
    if not isinstance(x, Tile):
        raise NKIError("operand type", f"nisa.{op}: {name} must be an SBUF tile, got {type(x).__name__}")
    if x.buffer is not sbuf:
        raise NKIError("operand memory", f"nisa.{op}: {name} (shape {x.shape}) is in {x.buffer.name.upper()}; both "
                       "src and dst must be SBUF tiles")
    return x


_GPSIMD_BYTES = {4: 1024, 2: 512, 1: 256}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Send SBUF tile ``src`` to core ``send_to_rank`` while receiving core ``recv_from_rank``'s
    tile into SBUF tile ``dst`` (``nki.isa.sendrecv``, LNC=2).

    The call returns once this core has received and its own data was received: calls with
    the same ``pipe_id`` meet. ``src`` and ``dst`` have the same shape and dtype, and so must
    the peer's ``src``. A peer that never makes the matching call is reported as a deadlock.
    ``dma_engine`` (earlier releases) selects the transfer mechanism; ``gpsimd_dma`` limits
    the partitions to a multiple of 16 and the bytes per partition (1024 for 32-bit types,
    512 for 16-bit, 256 for 8-bit). ``name`` is accepted and unused.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.sendrecv.html)
    """
    op = "sendrecv"
    w = current_worker("nisa.sendrecv")
    _target.require(op, _target.nc_version.gen3)
    _sbuf_tile(src, "src", op)
    _sbuf_tile(dst, "dst", op)
    if src.dtype != dst.dtype:
        raise NKIError("dtype", f"nisa.sendrecv: src is {src.dtype} and dst is {dst.dtype}; they must have the "
                       "same data type")
    if tuple(src.shape) != tuple(dst.shape):
        raise NKIError("shape", f"nisa.sendrecv: src has shape {src.shape} and dst {dst.shape}; they must have the "
                       "same shape and layout")
    if getattr(dma_engine, "name", dma_engine) == "gpsimd_dma":
        per_part = int(np.prod(src.shape[1:])) * src.dtype.itemsize
        limit = _GPSIMD_BYTES.get(src.dtype.itemsize, 256)
        if src.shape[0] % 16 or per_part > limit:
            raise NKIError(op, f"nisa.sendrecv(dma_engine=gpsimd_dma): tiles of shape {src.shape} {src.dtype} have "
                           f"{src.shape[0]} partitions and {per_part} B per partition; gpsimd_dma needs a multiple "
                           f"of 16 partitions and at most {limit} B per partition for {8 * src.dtype.itemsize}-bit types")
    if isinstance(pipe_id, bool) or not isinstance(pipe_id, (int, np.integer)) or pipe_id < 0:
        raise NKIError(op, f"nisa.sendrecv: pipe_id must be a non-negative integer, got {pipe_id!r}")
    ncores = w.group.cores(w.rank) if w is not None else 1
    to = _rank_arg(send_to_rank, "send_to_rank", op, ncores)
    frm = _rank_arg(recv_from_rank, "recv_from_rank", op, ncores)
    _diag.on_read(src)
    got = _exchange(w, f"nisa.sendrecv(pipe_id={int(pipe_id)})", ("pipe", int(pipe_id)), src, dst, to, frm)
    dst[...] = got
    return None


def _exchange(w, what, channel, src, dst, to, frm):
    """Send a copy of ``src`` to core ``to`` and return what core ``frm`` sends on ``channel``
    (checked against ``dst``'s shape and dtype); returns once both transfers are done."""
    msg = _Message(np.array(src.data, copy=True), _diag.where())
    if w is None:  # one core exchanging with itself
        return msg.data
    g, me, rank = w.group, w.core, w.rank
    inbox = g.mail[(rank, channel, frm, me)]
    with g.cv:
        g.mail[(rank, channel, me, to)].append(msg)
    g.block(w, lambda: bool(inbox), lambda: f"{what} waits for core {frm} to send (recv_from_rank={frm})")
    with g.cv:
        got = inbox.popleft()
        got.taken = True
    if got.shape != tuple(dst.shape) or got.dtype != dst.dtype:
        raise NKIError("shape", f"{what}: core {me} receives into dst {dst.shape} {dst.dtype} at "
                       f"{_diag.fmt_where(msg.where)} but core {frm} sent {got.shape} {got.dtype} at "
                       f"{_diag.fmt_where(got.where)}; the two cores' tiles must match")
    g.block(w, lambda: msg.taken,
            lambda: f"{what} sent to core {to}, which has not received it (no matching call with "
                    f"recv_from_rank={me})")
    return got.data


def sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op, name=None):
    """Exchange ``src`` with core ``recv_from_rank`` / ``send_to_rank`` like ``nisa.sendrecv`` and
    write ``reduce_op(src, peer's src)`` (``nl.add``, ``nl.maximum`` or ``nl.minimum``, in fp32)
    into ``dst`` (``nki.isa.sendrecv_compute``; LNC degree > 1). ``src`` and ``dst`` are both in
    SBUF or both in private HBM, with the same shape and dtype. ``name`` is accepted and unused.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.sendrecv_compute.html)
    """
    from . import language as _nl

    op = "sendrecv_compute"
    w = current_worker(f"nisa.{op}")
    _target.require(op, _target.nc_version.gen3)
    mems = []
    for x, nm in ((src, "src"), (dst, "dst")):
        if isinstance(x, Tile) and x.buffer is sbuf:
            mems.append("SBUF")
        elif isinstance(x, (HBMTensor, Access)) and (x.tensor if isinstance(x, Access) else x).buffer is private_hbm:
            mems.append("private HBM")
        else:
            where = x.buffer.name if isinstance(x, (Tile, HBMTensor, Access)) else type(x).__name__
            raise NKIError("operand memory", f"nisa.{op}: {nm} is in {where}; src and dst must both be in SBUF or "
                           "both in private HBM (shared HBM is not supported)")
    if mems[0] != mems[1]:
        raise NKIError("operand memory", f"nisa.{op}: src is in {mems[0]} and dst in {mems[1]}; they must be in the "
                       "same memory")
    if src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
        raise NKIError("shape", f"nisa.{op}: src {tuple(src.shape)} {src.dtype} and dst {tuple(dst.shape)} {dst.dtype} "
                       "must have the same shape and dtype")
    fn = reduction(reduce_op, f"nisa.{op}")
    ncores = w.group.cores(w.rank) if w is not None else 1
    to = _rank_arg(send_to_rank, "send_to_rank", op, ncores)
    frm = _rank_arg(recv_from_rank, "recv_from_rank", op, ncores)
    mine = read_values(src)
    peer = _exchange(w, f"nisa.{op}", ("compute",), _Held(mine), dst, to, frm)
    f32 = [dt.compute_view(a).astype(np.float32) for a in (mine, peer)]
    out = fn(*f32)
    if isinstance(dst, Tile):
        dst[...] = out
    else:
        _nl.store(dst, dt.cast(out, dst.dtype))
    return None


def reduction(op, what):
    """The NumPy function of a collective reduction ``op``: ``nl.add``, ``nl.minimum`` or ``nl.maximum``."""
    from . import language as _nl

    try:
        fn = _nl.np_function(op)
    except NKIError:
        fn = None
    if fn not in (np.add, np.maximum, np.minimum):
        raise NKIError("op", f"{what}: op={op!r}; the reduction must be nl.add, nl.minimum or nl.maximum")
    return fn


def read_values(x):
    """A copy of the values of SBUF tile or HBM tensor/region ``x``, telling the diagnostics."""
    if isinstance(x, Tile):
        _diag.on_read(x)
        return np.array(x.data, copy=True)
    acc = x[...] if isinstance(x, HBMTensor) else x
    vals = np.array(acc.index.read(acc.tensor.data, None, what=acc.tensor.name), copy=True)
    _prof.dma(acc.tensor, vals, "read", acc, None)
    return vals


class _Held:
    """Values already read, in the place of a tile for :func:`_exchange`."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


def core_barrier(data, cores, engine=None, name=None):
    """Wait until every core in ``cores`` reaches its matching barrier (``nki.isa.core_barrier``).

    ``data`` is the shared HBM tensor the cores synchronise on: the race checker treats the
    barrier as ordering the cores' accesses to it (writes before the barrier on one core,
    reads after it on the other are not a race). The page says it "must be data in shared HBM",
    but nki-library's shard-on-I MoE CTE kernel (a Trn2 test of its own suite) passes an SBUF tile
    as a plain synchronisation point, so an on-chip tile is accepted: the cores wait for each
    other, and no HBM access is ordered by it. ``cores`` must be ``(0, 1)`` (or ``(c,)``, a barrier
    of one core with itself) and include the calling core. ``engine`` and ``name`` are accepted
    and unused.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.core_barrier.html)
    """
    w = current_worker("nisa.core_barrier")
    _target.require("core_barrier", _target.nc_version.gen3)
    if isinstance(data, Tile):
        tensor = None  # a synchronisation point only
    elif not isinstance(data, (HBMTensor, Access)):
        raise NKIError("operand type", f"nisa.core_barrier: data must be a shared HBM tensor (or an on-chip tile), "
                       f"got {type(data).__name__}")
    else:
        tensor = data.tensor if isinstance(data, Access) else data
    if tensor is not None and tensor.buffer is private_hbm:
        raise NKIError("operand memory", f"nisa.core_barrier: data {tensor.name} is in private_hbm; the barrier "
                       "synchronises on shared HBM that several cores access")
    try:
        members = tuple(int(c) for c in cores)
    except TypeError:
        raise NKIError("core_barrier", f"nisa.core_barrier: cores must be a tuple of core ids such as (0, 1), got "
                       f"{cores!r}") from None
    ncores = w.group.cores(w.rank) if w is not None else 1
    me = w.core if w is not None else 0
    if not members or len(set(members)) != len(members) or any(c not in (0, 1) for c in members):
        raise NKIError("core_barrier", f"nisa.core_barrier: cores={cores!r}; only cores=(0, 1) is supported (distinct "
                       "core ids 0 and 1)")
    if any(c >= ncores for c in members):
        raise NKIError("core_barrier", f"nisa.core_barrier(cores={members}) in a launch on {ncores} logical core(s); "
                       "launch the kernel as kernel[2](...) (LNC=2)")
    if me not in members:
        raise NKIError("core_barrier", f"nisa.core_barrier(cores={members}) is called by core {me}, which is not "
                       "one of the cores it synchronises")
    if w is None:
        return None
    g = w.group
    key = (w.rank, frozenset(members))
    with g.cv:
        g.arrivals[key][me] += 1
        n = g.arrivals[key][me]
    arrivals = g.arrivals[key]

    def missing():
        return [c for c in members if arrivals[c] < n]

    g.block(w, lambda: not missing(),
            lambda: f"nisa.core_barrier(cores={members}) #{n} waits for core(s) {missing()} to reach barrier #{n}")
    if tensor is not None:
        w.epochs[memory_id(tensor)] += 1
    return None
