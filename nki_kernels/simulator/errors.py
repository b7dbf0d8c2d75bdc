"""The one exception the simulator raises for NKI rule violations, with the kernel line."""

from __future__ import annotations

import os
import sys
import threading

_SIM_DIR = os.path.dirname(os.path.abspath(__file__))
_THREADING_FILE = threading.__file__


class _ThreadWhere(threading.local):
    """Per thread: the ``(file, line, function)`` to report when no kernel frame is on the stack (a
    simulated core's thread sets its kernel's return line once the kernel returned, so end-of-program
    reports do not point into ``threading.py``)."""

    fallback = None


thread_where = _ThreadWhere()


class NKIError(ValueError):
    """A kernel broke a rule the Neuron compiler or the hardware enforces.

    The message names the rule, the offending shape or value, and the kernel
    source line (``file:line``) where the violating call was made.
    """

    def __new__(cls, rule: str = "", detail: str = "", where: str | None = None):
        # An out-of-bounds access is also an IndexError, the type the official simulator raises and
        # the documentation's example tests catch; still an NKIError (a ValueError) for everyone
        # catching the simulator's rules.
        if cls is NKIError and rule == OUT_OF_BOUNDS:
            cls = OutOfBoundsNKIError
        return super().__new__(cls, rule, detail, where)

    def __init__(self, rule: str, detail: str, where: str | None = None):
        self.rule = rule
        self.detail = detail
        self.where = where if where is not None else kernel_location()
        super().__init__(f"[{rule}] {detail} (at {self.where})")


OUT_OF_BOUNDS = "out-of-bounds access"


class OutOfBoundsNKIError(NKIError, IndexError):
    """An ``[out-of-bounds access]`` NKIError: an index outside its tensor, unmasked (or, for an indirect
    DMA, outside the tensor with ``oob_mode=error``). ``except IndexError`` catches it."""


def kernel_location() -> str:
    """``file:line`` of the innermost frame outside the simulator package (the kernel's line)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_SIM_DIR) and frame.f_code.co_filename != _THREADING_FILE:
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    fb = thread_where.fallback
    return f"{fb[0]}:{fb[1]} in {fb[2]}" if fb else "<unknown>"


class NotBatchable(Exception):
    """Internal signal: a batch of SPMD programs cannot run as one vectorised program.

    Raised while a kernel runs in batched mode (see :mod:`.vectorize`) when it
    does something whose meaning differs per program (Python control flow on
    ``program_id``, a mask that is not all-true for every program of the batch,
    an op without a batched implementation). The launcher then runs those
    programs one at a time, the reference path. ``hint`` optionally names the
    sub-box ``{grid_axis: (lo, hi)}`` of the batch (relative positions) that can
    stay batched. Never reaches users.
    """

    def __init__(self, why: str, hint=None):
        super().__init__(why)
        self.hint = hint
