"""Instruction and DMA accounting hooks (no-ops unless a profile is being recorded).

The full profiler (:func:`nki_kernels.simulator.profile`) installs a recorder
here; the hot path pays one attribute check per instruction otherwise.
"""

from __future__ import annotations

from . import memory as _memory
from .diagnostics import hbm_access as _hbm_access

_recorder = None
_tls = None  # core._tls, bound on first use (core imports modules that import this one)


def _program():
    global _tls
    if _tls is None:
        from .core import _tls as t

        _tls = t
    return getattr(_tls, "program", None)


def instruction(engine: str, out) -> None:
    """Record one engine instruction producing ``out`` (and count its slot for memory live ranges)."""
    prog = getattr(_tls, "program", None) if _tls is not None else _program()
    if prog is not None:
        m = prog.mem
        if m.last_alloc is None:  # (memory.counted's common case without the call: nothing allocated)
            m.last_result, m.ic, m.fresh = None, m.ic + 1, True
        else:
            _memory.counted(prog, True)
    if _recorder is not None:
        _recorder.instruction(engine, out)


def dma(tensor, data, direction: str, access, mask, written=False) -> None:
    """Record one DMA transfer of ``data`` to or from HBM ``tensor`` (and log it for diagnostics).
    A write is recorded before ``tensor`` changes, or with ``written=True`` after."""
    prog = getattr(_tls, "program", None) if _tls is not None else _program()
    _hbm_access(tensor, access, mask, direction == "write", None if written else data, prog)
    if prog is not None:
        m = prog.mem
        if m.last_alloc is None:
            m.last_result, m.ic, m.fresh = None, m.ic + 1, False
        else:
            _memory.counted(prog, False)
    if _recorder is not None:
        _recorder.dma(tensor, data, direction, access, mask)


def set_recorder(rec) -> None:
    """Install (or with ``None`` remove) the active recorder."""
    global _recorder
    _recorder = rec


class _CallableModule(type(__import__("sys"))):
    """Lets ``nki_kernels.simulator.profile(kernel[grid], *arrays)`` run the profiler while this
    module stays the home of the hooks that ``language``/``isa`` call."""

    def __call__(self, kernel, *arrays, **kwargs):
        """Profile a launch: see :func:`nki_kernels.simulator.profiler.profile`."""
        from .profiler import profile as _profile

        return _profile(kernel, *arrays, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
