"""Dynamic control flow (``nl.dynamic_range``, ``nl.fori_loop``, ``nl.while_loop``): loops whose
bounds or conditions live in engine registers and are read when the loop runs.

On hardware these compile to compare-and-branch instructions of the engine
sequencers; the simulator runs them as Python loops over the registers' values
at that moment, so a bound loaded from HBM with ``nisa.register_load`` decides
the trip count, as it does on the device.
"""

from __future__ import annotations

import numpy as np

from .. import specialization as _specialization
from ..errors import NKIError
from ..scheduling import dynamic_loop
from .registers import VirtualRegister, value_of
from .scalars import NkiScalar


class _DynamicRange:
    """Iteration values of ``nl.dynamic_range``; the bounds are read when iteration starts."""

    def __init__(self, start, stop, step):
        self._bounds = (start, stop, step)

    def __iter__(self):
        start, stop, step = (value_of(b, "nl.dynamic_range bound") for b in self._bounds)
        if step == 0:
            raise NKIError("dynamic_range", "nl.dynamic_range step must not be 0")
        with dynamic_loop("nl.dynamic_range"):
            yield from range(start, stop, step)


def dynamic_range(start, stop=None, step=1):
    """A loop whose bounds may be registers (``nl.dynamic_range(reg)``), read at run time."""
    if stop is None:
        start, stop = 0, start
    return _DynamicRange(start, stop, step)


def fori_loop(lower, upper, body_fun, step=1):
    """``for i in range(lower, upper, step): body_fun(i)`` with bounds that may be registers or 32-bit
    NkiScalars; ``i`` is passed by value: "i is a NkiScalar unless either lower or upper is a
    VirtualRegister, then it will be a VirtualRegister" (nl.fori_loop, Neuron 2.33.0). Under the previous
    specialization (``NKI_COMPILER_FRONTEND=custom``, no NkiScalar) ``i`` is an int when no bound is a
    register, as in NKI 0.6.0. Returns ``None``."""
    if isinstance(step, (VirtualRegister, NkiScalar)) or isinstance(step, bool) or not isinstance(step, int) \
            or step <= 0:
        raise NKIError("fori_loop", f"nl.fori_loop: step must be a compile-time positive integer, got {step!r}")
    dynamic = isinstance(lower, VirtualRegister) or isinstance(upper, VirtualRegister)
    lo = value_of(lower, "nl.fori_loop lower")
    hi = value_of(upper, "nl.fori_loop upper")
    scalars = not dynamic and _specialization.frontend() == _specialization.TRACING
    with dynamic_loop("nl.fori_loop"):
        for i in range(lo, hi, step):
            body_fun(VirtualRegister(i) if dynamic else NkiScalar(i, np.int32) if scalars else i)


def while_loop(init, body_fun):
    """``r = init; while r != 0: r = body_fun(r)``: the body gets the condition register by value and
    returns the next one; returns ``None``."""
    if not isinstance(init, VirtualRegister):
        raise NKIError("while_loop", f"nl.while_loop: init must be a VirtualRegister, got {type(init).__name__}")
    r = init
    with dynamic_loop("nl.while_loop"):
        while value_of(r, "nl.while_loop condition") != 0:
            nxt = body_fun(VirtualRegister(r.value))
            if not isinstance(nxt, VirtualRegister):
                raise NKIError("while_loop", "nl.while_loop: body_fun must return the next condition register "
                               f"(a VirtualRegister), got {type(nxt).__name__}")
            r = nxt
