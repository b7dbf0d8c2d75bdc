"""What is running on this thread: the simulated program, and the logical core that runs it.

The lowest layer of the simulator's running state, importing nothing of it: the checks, the data
model and the runtime all ask it (``core`` re-exports :func:`current_or_none` / :func:`set_current`).

* ``_tls.program``: the :class:`~.core.Program` being simulated on this thread (``None`` outside
  a kernel launch). Hot paths read it as ``getattr(_tls, "program", None)`` without a call.
* ``_worker_tls.worker``: the :class:`~.cores.Worker` (one logical core of one rank of a
  multi-core launch) this thread runs, once it has run one (workers run in their own threads).
"""

from __future__ import annotations

import threading

_tls = threading.local()
_worker_tls = threading.local()


def current_or_none():
    """The running program or ``None``."""
    return getattr(_tls, "program", None)


def set_current(prog) -> None:
    """Install ``prog`` as this thread's running program (``None`` clears it)."""
    _tls.program = prog
