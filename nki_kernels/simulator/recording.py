"""Instruction and DMA accounting hooks (no-ops unless a profile is being recorded).

The profiler (:func:`nki_kernels.simulator.profile`, in :mod:`.profiler`) installs a recorder
here; the hot path pays one attribute check per instruction otherwise. Every instruction's body
calls :func:`instruction` once with its engine and result, every transfer :func:`dma`; both
also end the memory model's instruction slot (liveness is counted in slots).
"""

from __future__ import annotations

from . import memory as _memory
from .context import _tls
from .diagnostics import hbm_access as _hbm_access


def instruction(engine: str, out) -> None:
    """Record one engine instruction producing ``out`` (and count its slot for memory live ranges)."""
    prog = _tls.program
    if prog is not None:
        m = prog.mem
        if m.last_alloc is None:  # (memory.counted's common case without the call: nothing allocated)
            m.last_result, m.ic, m.fresh = None, m.ic + 1, True
        else:
            _memory.counted(prog, True)
    rec = _tls.site.recorder  # (the recorder's one place: RunContext.recorder reads it there)
    if rec is not None:
        rec.instruction(engine, out)


def dma(tensor, data, direction: str, access, mask, written=False) -> None:
    """Record one DMA transfer of ``data`` to or from HBM ``tensor`` (and log it for diagnostics).
    A write is recorded before ``tensor`` changes, or with ``written=True`` after."""
    prog = _tls.program
    _hbm_access(tensor, access, mask, direction == "write", None if written else data, prog)
    if prog is not None:
        m = prog.mem
        if m.last_alloc is None:
            m.last_result, m.ic, m.fresh = None, m.ic + 1, False
        else:
            _memory.counted(prog, False)
    rec = _tls.site.recorder  # (the recorder's one place: RunContext.recorder reads it there)
    if rec is not None:
        rec.dma(tensor, data, direction, access, mask)


def set_recorder(rec) -> None:
    """Install (or with ``None`` remove) the recorder of this thread's launches (a launch's core
    workers inherit it)."""
    _tls.recorder = rec


def recorder():
    """The recorder of this thread's launches, or ``None``."""
    return _tls.recorder
