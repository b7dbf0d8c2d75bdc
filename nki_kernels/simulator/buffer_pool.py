"""Large result buffers reused across instructions and launches instead of freshly mapped.

A large NumPy array is mapped from the OS on allocation and unmapped when freed, so
every first write to it page-faults and the kernel zeroes each page: writing a fresh
128 MiB fp32 result costs about twice what writing into a buffer already touched does
(19 ms against 9.6 ms on the 2-core CI machine). A kernel's temporaries on batched
tiles are that large (the RMSNorm backward makes five of them per launch), so the
simulator takes them from this pool.

Safety rests on one fact: every NumPy array made from a buffer (a view, a reshape, a
view of a view, a memoryview of one) keeps a reference to the array that owns the
memory. The pool owns each buffer as a flat ``uint8`` array and hands it out again
only when nothing but the pool refers to it, so memory still readable through any
object is never reused.

The pool holds at most ``limit`` bytes (env ``NKI_SIM_BUFFER_POOL_MB``, default 1024;
0 turns it off): free buffers beyond that are dropped, oldest first, and returned to
the OS by NumPy as usual. :func:`release` drops every free buffer now.
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

MIN_BYTES = 4 << 20  # smaller arrays come from malloc's own free lists, already touched


def _limit_from_env() -> int:
    text = os.environ.get("NKI_SIM_BUFFER_POOL_MB", "1024").strip() or "1024"
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if mb < 0:
        raise ValueError(f"NKI_SIM_BUFFER_POOL_MB={text!r}: expected a size in MiB >= 0 (0 turns the pool off)")
    return int(mb * (1 << 20))


limit = _limit_from_env()
_held: list = []  # flat uint8 buffers, oldest first (in use or free)
_lock = threading.Lock()


def _counts(bufs) -> list:
    # Every check goes through this one comprehension: its references to a buffer are the
    # same for the calibration below and for the pool (they differ between Python versions).
    return [sys.getrefcount(b) for b in bufs]


_FREE = _counts([np.empty(1, np.uint8)])[0]  # a buffer that only its list refers to


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype``; a pooled buffer when it is large."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MIN_BYTES or nbytes > limit or dtype.hasobject:
        return np.empty(shape, dtype)
    with _lock:
        for i, refs in enumerate(_counts(_held)):
            if refs == _FREE and _held[i].nbytes == nbytes:
                buf = _held.pop(i)
                _held.append(buf)  # most recently used last: eviction drops the oldest
                return buf.view(dtype).reshape(shape)
        total = sum(b.nbytes for b in _held) + nbytes
        while _held and total > limit:
            # A buffer in use leaves the pool too: its arrays keep it alive and NumPy frees it.
            total -= _held.pop(0).nbytes
        buf = np.empty(nbytes, np.uint8)
        _held.append(buf)
        return buf.view(dtype).reshape(shape)


def copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` (``a.copy()``) in a pooled buffer when it is large."""
    out = empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def held_bytes() -> tuple:
    """``(bytes held, bytes of them free)`` now."""
    with _lock:
        counts = _counts(_held)
        return sum(b.nbytes for b in _held), sum(b.nbytes for b, n in zip(_held, counts) if n == _FREE)


def release() -> None:
    """Drop every free buffer (NumPy returns their memory to the OS); buffers in use stay valid."""
    with _lock:
        _held[:] = [b for b, n in zip(_held, _counts(_held)) if n != _FREE]
