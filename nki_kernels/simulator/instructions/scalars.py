"""``nki.isa.NkiScalar`` (the class: :mod:`..scalar_values`) and ``nisa.scalar_load`` / ``scalar_store``
(NKI 0.7.0, "the future replacement for VirtualRegister", Migrating from NKI 0.6.0 to NKI 0.7.0).

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
from ..scalar_values import NkiScalar, _width
from .operands import tile_operand, write

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
