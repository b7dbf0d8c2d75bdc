"""What is running on this thread: one explicit context object with every piece of running state.

The lowest layer of the simulator's running state, importing nothing of it: the checks, the data
model, the instructions and the runtime all read and write the fields of :data:`_tls`, the
:class:`RunContext` of the calling thread (``core`` re-exports :func:`current_or_none` /
:func:`set_current`). Nothing of a running launch lives in module globals, so launches in
different threads (XLA runs the custom-calls of a sharded program on several) run at once
without seeing each other. Hot paths read a field as ``_tls.program`` without a call.
"""

from __future__ import annotations

import threading


class InstructionState:
    """The running instruction of a thread: its nesting ``depth`` (an instruction calling another
    counts once), its ``op`` name and the kernel line ``where`` it was called from, found once per
    instruction (its accesses are logged under that line), and the ``prog`` it runs in (which stays
    known while its body computes with no program current)."""

    __slots__ = ("depth", "where", "op", "prog", "loops", "recorder")

    def __init__(self):
        self.depth = 0
        self.where = self.op = self.prog = None
        self.loops = None  # the thread's LoopStack (set with it: one thread-local lookup reaches both)
        self.recorder = None  # the thread's profile recorder (RunContext.recorder keeps it here)


class LoopStack(list):
    """The thread's active ``affine_range`` frames of the diagnostics (innermost last), carrying the
    diagnostics' read cache: ``state`` (bumped by every event that can change what a read reports),
    ``reads_state`` (the ``state`` the cache is valid for) and ``reads`` (ids of the tiles read since).
    They live on the stack, not as fields of the context, because every instruction's hooks read them:
    each field of a ``threading.local`` costs a lookup of the thread's dictionary (about 0.1 us on
    the development host), an attribute of this object a slot read."""

    __slots__ = ("state", "reads_state", "reads", "site")

    def __init__(self):
        super().__init__()
        self.state = 0
        self.reads_state = -1
        self.reads = set()
        self.site = None  # the thread's InstructionState (a slot read where the stack is at hand)


class RunContext(threading.local):
    """The running state of the calling thread (a ``threading.local``: each thread sees its own).

    * ``program``: the :class:`~.core.Program` being simulated (``None`` outside a kernel launch);
    * ``site``: the running instruction (:class:`InstructionState`: its name and kernel line);
    * ``loops``: the active ``affine_range`` frames of the diagnostics, innermost last, with the
      diagnostics' read cache (a :class:`LoopStack`);
    * ``recorder``: the profile recorder receiving this thread's instruction and DMA hooks;
    * ``lines``: the memory model is re-running a program to report source lines;
    * ``worker``: the :class:`~.cores.Worker` (one logical core of a multi-core launch) this
      thread runs, once it has run one (workers run in their own threads).

    A launch's worker threads start from the launching thread's ``recorder`` (see ``cores``)."""

    def __init__(self):
        self.program = None
        # The running instruction and the loop stack are fixed for the thread's life (never reassigned):
        # each names the other, so a hook holding one reaches the other without a thread-local lookup
        # (each field of a threading.local costs a lookup of the thread's dictionary, several times a
        # slot read).
        self.site = site = InstructionState()
        self.loops = loops = LoopStack()
        site.loops, loops.site = loops, site
        self.lines = False
        self.worker = None

    # The recorder is kept on the running instruction's state (its one place): an instruction's
    # wrapper and the write path, which hold that state or the loop stack, read it as a slot.
    @property
    def recorder(self):
        """The profile recorder receiving this thread's instruction and DMA hooks, or ``None``."""
        return self.site.recorder

    @recorder.setter
    def recorder(self, rec):
        self.site.recorder = rec


_tls = RunContext()


def running_program():
    """The program whose code runs on this thread: the current one, else the one the running instruction
    belongs to (an instruction's body may compute with no program current)."""
    return _tls.program or _tls.site.prog


def current_or_none():
    """The running program or ``None``."""
    return _tls.program


def set_current(prog) -> None:
    """Install ``prog`` as this thread's running program (``None`` clears it)."""
    _tls.program = prog
