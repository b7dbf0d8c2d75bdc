"""``nki.isa.NkiScalar`` and ``nisa.scalar_load`` / ``scalar_store`` (NKI 0.7.0, "the future
replacement for VirtualRegister", Migrating from NKI 0.6.0 to NKI 0.7.0).

From the pages (nki.isa.NkiScalar, nki.isa.scalar_load / scalar_store, NKI Scalar Values):

* "NkiScalar is the core scalar type in NKI. It holds one integer, computed on device, and can be
  used as an operand of arithmetic, as the scalar_offset of an access pattern, and as a bound of
  nki.language.fori_loop()." It comes from ``nisa.scalar_load`` of a 1x1 ``nl.int32`` / ``nl.int64``
  tensor (SBUF or HBM; "Unsigned dtypes are not accepted"), or is the iteration value
  ``nl.fori_loop`` gives its body when no bound is a VirtualRegister.
* "the other operand of an arithmetic operator may be a Python int or another NkiScalar so long as
  the dtypes match. Every operator returns a new NkiScalar." "Width is fixed at creation. A 32-bit
  scalar is never widened, so arithmetic that outgrows 32 bits wraps rather than promoting: 100000 *
  100000 yields 1410065408". "At 64 bits only addition, subtraction and multiplication are
  available"; comparisons (``< <= > >= == !=``) are "Traced, but the result cannot be used" at 32
  bits and "Rejected at compile time" at 64; a 64-bit scalar cannot bound ``fori_loop`` ("the
  trip-count comparison has no 64-bit form"); as a ``scalar_offset`` "on an SBUF or PSUM operand the
  offset must be nl.int32".
* Arithmetic "is traced, not evaluated": a scalar has no value at specialization, so it cannot
  decide a Python ``if`` / ``while`` nor become a Python int (the simulator knows the value and
  refuses those uses rather than let a kernel the tracer rejects run).
* ``scalar_store(dst, value)``: "dst must have the same width as value"; "value must be an
  NkiScalar. A Python int is not accepted" (use ``nisa.memset``).
* "Only the tracer frontend supports this. The parser frontend rejects the call": refused under
  ``NKI_COMPILER_FRONTEND=custom`` (:mod:`..specialization`).
"""

from __future__ import annotations

import numpy as np

from .. import specialization as _specialization
from .. import transfers as _transfers
from ..core import Access, HBMTensor, Tile, sbuf
from ..errors import NKIError
from .operands import tile_operand, write

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
    ``nl.int64``); arithmetic wraps at that width. See the module's docstring for its rules."""

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


def _one_by_one(x, name, op):
    if tuple(x.shape) != (1, 1):
        raise NKIError("operand shapes", f"nisa.{op}: {name} has shape {tuple(x.shape)}; it must be a 1x1 tensor")


def _int_dtype(x, name, op):
    return _width(x.dtype, f"nisa.{op}: {name}")


def scalar_load(src):
    """``nisa.scalar_load(src) -> NkiScalar``: the one element of a 1x1 ``nl.int32`` / ``nl.int64`` tensor in
    SBUF or HBM, of that width (not truncated). Tracer frontend only."""
    op = "scalar_load"
    _specialization.require_tracing(f"nisa.{op}")
    if isinstance(src, (Access, HBMTensor)):
        acc = src if isinstance(src, Access) else src[...]
        _one_by_one(acc, "src", op)
        d = _int_dtype(acc, "src", op)
        vals = acc.index.read(acc.tensor.data, None, what=acc.tensor.name)
    else:
        t = tile_operand(src, "src", op, (sbuf,))
        _one_by_one(t, "src", op)
        d = _int_dtype(t, "src", op)
        vals = t.data
    return NkiScalar(int(np.asarray(vals).reshape(-1)[0]), d)


def scalar_store(dst, value):
    """``nisa.scalar_store(dst, value)``: NkiScalar ``value`` into the 1x1 ``dst`` (SBUF or HBM) of the same
    width. Tracer frontend only."""
    op = "scalar_store"
    _specialization.require_tracing(f"nisa.{op}")
    if not isinstance(value, NkiScalar):
        raise NKIError("scalar value", f"nisa.{op}: value must be an NkiScalar, got {type(value).__name__} (a Python "
                       "int stores nothing on the device; write a compile-time constant with nisa.memset)")
    v = value.value(f"nisa.{op}")
    if isinstance(dst, (Access, HBMTensor)):
        acc = dst if isinstance(dst, Access) else dst[...]
        target = acc
    else:
        if not isinstance(dst, Tile) or dst.buffer is not sbuf:
            tile_operand(dst, "dst", op, (sbuf,))  # (raises the operand-memory message)
        target = dst
    _one_by_one(target, "dst", op)
    d = _int_dtype(target, "dst", op)
    if d != value.dtype:
        raise NKIError("scalar dtype", f"nisa.{op}: dst is {d} but the value is an {value.dtype} NkiScalar; dst must "
                       "have the same width as value (store at the scalar's own width and convert in memory)")
    vals = np.full(tuple(target.shape), v, dtype=d)
    if target is dst and isinstance(dst, Tile):
        write(dst, vals, op)
    else:
        _transfers.store(target, vals)


__all__ = ["NkiScalar", "scalar_load", "scalar_store"]
