"""``nki.isa.NkiScalar``: one integer computed on device, of a width fixed at creation (NKI 0.7.0).

It sits below the access-pattern layer, which takes a scalar as a ``scalar_offset``
(:mod:`.nki_tensor`, :mod:`.dynamic_addressing`); ``nisa.scalar_load`` / ``scalar_store`` and the
rules quoted from the pages are in :mod:`.instructions.scalars`.
"""

from __future__ import annotations

import numpy as np

from .errors import NKIError

_WIDTHS = {np.dtype(np.int32): 32, np.dtype(np.int64): 64}


def _width(dtype, what):
    d = np.dtype(dtype)
    if d not in _WIDTHS:
        hint = " (unsigned dtypes are not accepted; use the signed dtype of the same width)" if d.kind == "u" else ""
        raise NKIError("scalar dtype", f"{what}: an NkiScalar is nl.int32 or nl.int64, got {d}{hint}")
    return d


def _wrap(v: int, dtype) -> int:
    bits = _WIDTHS[dtype]
    return (int(v) + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1)


class NkiScalar:
    """One integer computed on device (``nki.isa.NkiScalar``), of fixed width ``dtype`` (``nl.int32`` /
    ``nl.int64``); arithmetic wraps at that width. Its rules, quoted from the pages: :mod:`.instructions.scalars`."""

    __slots__ = ("_value", "dtype", "is_comparison")

    def __init__(self, state, dtype=None, is_comparison=False):
        self.dtype = _width(np.int32 if dtype is None else dtype, "nki.isa.NkiScalar")
        if isinstance(state, NkiScalar):
            state = state._value
        if isinstance(state, (bool, np.bool_)) or not isinstance(state, (int, np.integer)):
            raise NKIError("scalar value", f"nki.isa.NkiScalar holds an integer, got {type(state).__name__}")
        self._value = _wrap(state, self.dtype)
        self.is_comparison = bool(is_comparison)

    # -- reading the value (the simulator's; a use the tracer refuses is refused here) --------------------
    def value(self, what):
        """The value, for ``what`` (a loop bound, an offset, a store); a comparison's result cannot be used."""
        if self.is_comparison:
            raise NKIError("scalar comparison", f"{what}: this NkiScalar is the result of a comparison; comparisons "
                           "of nl.int32 scalars are traced, but the result cannot be used")
        return self._value

    def bound(self, what):
        """The value as a ``fori_loop`` bound: 32-bit only ("A bound must be 32-bit")."""
        if self.dtype == np.int64:
            raise NKIError("loop bound", f"{what}: an nl.int64 NkiScalar cannot bound nl.fori_loop: the loop "
                           "compiles into a compare-and-branch that has no 64-bit form (load the bound from an "
                           "nl.int32 tile; a 64-bit scalar can still be computed inside the body and used as an "
                           "offset there)")
        return self.value(what)

    def __bool__(self):
        raise NKIError("scalar condition", "an NkiScalar is computed on device: arithmetic on it is traced, not "
                       "evaluated, so it cannot decide a Python if / while; use nl.while_loop (or nl.fori_loop) "
                       "for a loop on a run-time value")

    def __int__(self):
        raise NKIError("scalar value", "an NkiScalar is computed on device and has no Python value at "
                       "specialization; use it as an operand of arithmetic, a scalar_offset, a fori_loop bound or "
                       "store it with nisa.scalar_store")

    def __repr__(self):
        return f"NkiScalar({self._value}, dtype={self.dtype}{', is_comparison=True' if self.is_comparison else ''})"

    # -- arithmetic ------------------------------------------------------------------------------------
    def _other(self, other, sym):
        if isinstance(other, NkiScalar):
            if other.dtype != self.dtype:
                raise NKIError("scalar dtype", f"NkiScalar {sym}: the operands' dtypes must match, got {self.dtype} "
                               f"and {other.dtype} (width is fixed at creation; a scalar is never widened)")
            return other.value(f"NkiScalar {sym}")
        if isinstance(other, (bool, np.bool_)) or not isinstance(other, (int, np.integer)):
            return None
        return int(other)

    def _arith(self, other, sym, fn, reflected=False):
        o = self._other(other, sym)
        if o is None:
            return NotImplemented
        a = self.value(f"NkiScalar {sym}")
        return NkiScalar(fn(o, a) if reflected else fn(a, o), self.dtype)

    def __add__(self, o):
        return self._arith(o, "+", lambda a, b: a + b)

    def __radd__(self, o):
        return self._arith(o, "+", lambda a, b: a + b, True)

    def __sub__(self, o):
        return self._arith(o, "-", lambda a, b: a - b)

    def __rsub__(self, o):
        return self._arith(o, "-", lambda a, b: a - b, True)

    def __mul__(self, o):
        return self._arith(o, "*", lambda a, b: a * b)

    def __rmul__(self, o):
        return self._arith(o, "*", lambda a, b: a * b, True)

    def __neg__(self):
        return NkiScalar(-self.value("NkiScalar unary -"), self.dtype)

    # -- comparisons: traced at 32 bits (the result unusable), rejected at 64 --------------------------
    def _compare(self, other, sym, fn):
        o = self._other(other, sym)
        if o is None:
            return NotImplemented
        if self.dtype == np.int64:
            raise NKIError("scalar comparison", f"NkiScalar {sym}: comparisons of nl.int64 scalars are rejected at "
                           "compile time (at 64 bits only +, - and * are available)")
        return NkiScalar(int(fn(self.value(f"NkiScalar {sym}"), o)), self.dtype, is_comparison=True)

    def __lt__(self, o):
        return self._compare(o, "<", lambda a, b: a < b)

    def __le__(self, o):
        return self._compare(o, "<=", lambda a, b: a <= b)

    def __gt__(self, o):
        return self._compare(o, ">", lambda a, b: a > b)

    def __ge__(self, o):
        return self._compare(o, ">=", lambda a, b: a >= b)

    def __eq__(self, o):
        return self._compare(o, "==", lambda a, b: a == b)

    def __ne__(self, o):
        return self._compare(o, "!=", lambda a, b: a != b)

    __hash__ = object.__hash__
