"""Tiles as Python values: the operators on tiles (``a + b``, ``a < b``, ``-a``, ``t += x`` in place,
``psum[...] += nisa.nc_matmul(...)`` accumulating), ``nl.loop_reduce``, and the tile functions
``nl.matmul``, ``nl.transpose``, ``nl.copy``, ``nl.broadcast_to`` and ``nl.expand_dims``.

Importing this module installs the operators on :class:`~.core.Tile`.
"""

from __future__ import annotations

import sys as _sys
import weakref as _weakref

import numpy as np

from .context import _tls
from . import diagnostics as _diag
from . import dtypes as dt
from . import memory as _memory
from . import nl_math as _math
from . import recording as _prof
from . import rebound as _rebound
from .core import PMAX, MaskedOperand, Tile, current, current_or_none, psum, read_inside as _read_inside, sbuf
from .errors import NKIError
from .instructions.functional import nc_matmul as _nc_matmul, tensor_copy as _tensor_copy
from .instructions.functional import transposed_mask as _transposed_mask, unmask_operand as _unmask_operand
from .index_expr import AffineExpr, BExpr
from .index_expr import runtime_offset as _runtime_offset
from .op_functions import _BINARY, np_function
from .tile_ops import _need_tile, _out_dtype, _result, _values
from .values import _broadcast_view, _fit


def matmul(x, y, transpose_x=False, *, mask=None):
    """``x @ y`` on the Tensor engine (``nl.matmul``); result in PSUM, fp32.

    Without ``transpose_x`` x is [M, K] (M <= 128, K <= 128); with it x is
    [K, M]. y is [K, N] with N <= 512: K is the partition (contraction) axis.
    """
    if isinstance(x, MaskedOperand) and not transpose_x:  # (operand masking: the mask moves with the transpose)
        t, keep = _unmask_operand(x, "x")
        t = transpose(t)
        return _nc_matmul(t if keep is None else MaskedOperand(t, keep.T), _masked_or_tile(y, "y"), mask=mask)
    return _nc_matmul(_masked_or_tile(x, "x") if transpose_x else transpose(_need_tile(x, "x", "nl.matmul")),
                      _masked_or_tile(y, "y"), mask=mask)


def _masked_or_tile(x, name):
    """A matmul operand: ``tile[mask]`` (operand masking) as it is, else a checked tile."""
    return x if isinstance(x, MaskedOperand) else _need_tile(x, name, "nl.matmul")


def transpose(x, dtype=None, *, mask=None):
    """Swap the partition and free axes of a 2-D tile (``nl.transpose``); both <= 128."""
    x = _need_tile(x, "x", "nl.transpose")
    if x.ndim != 2:
        raise NKIError("transpose", f"nl.transpose needs a 2-D tile, got shape {x.shape}")
    if x.shape[1] > PMAX:
        raise NKIError("transpose", f"nl.transpose of a tile of shape {x.shape}: the free size "
                       f"{x.shape[1]} becomes the partition size and must be <= {PMAX}")
    if mask is not None:
        x = _read_inside(x, mask)
    return _result(np.swapaxes(_values(x, "x"), -1, -2), _out_dtype(dtype, x), _transposed_mask(mask, x),
                   engine="Tensor")


def copy(x, dtype=None, *, mask=None):
    """Copy a tile (SBUF or PSUM) into a new SBUF tile, optionally casting: the first generation's
    ``nisa.tensor_copy`` (one implementation of the copy)."""
    if not isinstance(x, Tile):
        _need_tile(x, "x", "nl.copy")  # raises the HBM / type error naming nl.copy
    return _tensor_copy(x, dtype=dtype, mask=mask)


def broadcast_to(x, shape):
    """Broadcast size-1 dims of a tile to ``shape`` (``nl.broadcast_to`` / ``tile.broadcast_to``)."""
    if not isinstance(x, Tile):
        _need_tile(x, "x", "nl.broadcast_to")  # raises the HBM / type error
    return _broadcast_view(x, shape, Tile)  # a zero-stride view of x's memory, not a tile of its own


def expand_dims(x, axis):
    """Insert a size-1 free axis (``nl.expand_dims``)."""
    x = _need_tile(x, "x", "nl.expand_dims")
    axis = axis + x.nb if isinstance(axis, (int, np.integer)) and axis >= 0 else axis
    return Tile(np.expand_dims(x.data, axis), x.buffer, parent=x)


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, name=""):
    """Reduce ``x`` with ``op`` over the iterations of ``loop_indices`` (``nl.loop_reduce``).

    "The destination tile is also the rhs input to op": ``b = nl.loop_reduce(a, np.add, [k])``
    with ``b`` a tile of ``a``'s shape is ``b = op(b, a)``, accumulated into ``b`` in place (so ``b``
    stays the tile made before the loop, the reduction the loop-carried check allows); assigned
    into a region (``acc[i] = nl.loop_reduce(x, np.add, (j,))``) the result combines with what the
    region holds (``acc[i] = op(acc[i], x)``)."""
    fn = {np.max: np.maximum, np.amax: np.maximum, np.min: np.minimum, np.amin: np.minimum,
          np.sum: np.add, np.prod: np.multiply}.get(op) or np_function(op)
    name = next((n for n, f in _BINARY.items() if f is fn), None)
    if name is None:
        raise NKIError("loop_reduce op", f"nl.loop_reduce: {op!r} is not a binary NKI operator (np.add, "
                       "nl.maximum, ...)")
    if not isinstance(loop_indices, (tuple, list)):
        loop_indices = (loop_indices,)
    caller = _sys._getframe(1)
    target = _rebound.rebound_name(caller)
    dst = caller.f_locals.get(target) if target is not None else None
    if type(dst) is Tile and mask is None and isinstance(x, Tile) and dst.shape == x.shape \
            and (dtype is None or dt.as_dtype(dtype) == dst.dtype):
        _inplace(name)(dst, x)
        return dst
    if dtype is None and mask is None:
        # The reduction reads x and writes the tile it is assigned into: one instruction, no result tile
        # of its own (a copy would be an automatically allocated SBUF tile, which a kernel placing its
        # SBUF tensors by hand, as the contributed pipelined attention does, cannot have).
        x = _need_tile(x, "x", "nl.loop_reduce")
        r = Tile(np.array(x.data), x.buffer, parent=x)
    else:
        r = copy(x, dtype=dtype, mask=mask)
    r.__class__ = _loop_reduced(name)
    return r


_LOOP_REDUCED = {}


def _loop_reduced(name):
    """The tile class of a ``loop_reduce`` result with operator ``name``: assigning one accumulates."""
    cls = _LOOP_REDUCED.get(name)
    if cls is None:
        def accumulate_into(self, dst):
            self.__class__ = Tile  # from here on an ordinary operand
            wrote = self._written
            if wrote is None:
                _inplace(name)(dst, self)
            elif wrote.any():  # under mask=: only the elements the mask selects accumulate
                res = getattr(_math, name)(dst, self)
                res._written = wrote
                dst[...] = res
            # (a mask that selects nothing, e.g. mask=(k == 0) in iteration 1: no instruction, no write)

        cls = _LOOP_REDUCED[name] = type(f"LoopReduced_{name}", (Tile,), {
            "__slots__": (), "_accumulate_into": accumulate_into})
    return cls


# ---------------------------------------------------------------------------
# Python operators on tiles
# ---------------------------------------------------------------------------
_EXACT_UFUNCS = (np.add, np.subtract, np.multiply)  # correctly rounded: any blocking gives the same bits
_BLOCK_BYTES = 1 << 20  # rows per block of a fused in-place update: about this many bytes


def _take_pending_product(tile, other):
    """``other`` when it is the program's pending deferred ``a <op> b`` (add / subtract / multiply of
    fp32 arrays) of ``tile``'s full shape, with ``tile`` an fp32 SBUF tile: it is then no longer
    pending, so making ``tile`` private does not compute it. Else ``None``."""
    prog = current_or_none()
    if (type(other) is not Tile or other._thunk is None or prog is None or prog.pending is None
            or prog.pending() is not other or tile.buffer is not sbuf or tile.dtype != dt.float32):
        return None
    fn, args, shape, dtype = other._thunk
    if (fn not in _EXACT_UFUNCS or len(args) != 2 or dtype != dt.float32 or tuple(shape) != tuple(tile._raw().shape)
            or any(type(a) is not np.ndarray or a.dtype != dt.float32 for a in args)):
        return None
    prog.pending = None
    return other


def _update_blocked(fn, cur, other) -> bool:
    """``cur = fn(cur, other)`` for ``other`` a deferred ``a <op> b`` (see :func:`_take_pending_product`),
    computed block by block through a small buffer instead of forming ``a <op> b`` whole: the same
    bits (each element's product is rounded to fp32 either way). ``other`` stays deferred, pending
    again, for any later use. False (nothing done) when ``cur`` shares memory with ``a`` or ``b``."""
    op, (a, b), _, _ = other._thunk
    if not cur.flags.writeable or np.may_share_memory(cur, a) or np.may_share_memory(cur, b):
        return False
    _diag.read(other)
    m = other._mem
    if m is not None and m.last != m.mem.ic:  # (Tile.data's live-range touch, without computing it)
        _memory.touch(m)
    a, b = np.broadcast_to(a, cur.shape), np.broadcast_to(b, cur.shape)
    step = max(1, _BLOCK_BYTES * cur.shape[0] // max(cur.nbytes, 1)) if cur.ndim else 1
    buf = np.empty((min(step, cur.shape[0]),) + cur.shape[1:], cur.dtype) if cur.ndim else None
    for lo in range(0, cur.shape[0], step) if cur.ndim else ():
        hi = min(cur.shape[0], lo + step)
        part = op(a[lo:hi], b[lo:hi], out=buf[:hi - lo])
        fn(cur[lo:hi], part, out=cur[lo:hi])
    current().pending = _weakref.ref(other)
    return True


def _inplace(opname):
    """``tile <op>= other`` for binary operator ``opname``: accumulation in place (``+=`` into PSUM
    from ``nc_matmul``, ``nl.loop_reduce`` results), fp32 math rounded on write."""
    fn = _BINARY[opname]

    def iop(self, other):
        # In-place accumulation (e.g. `psum_tile += nc_matmul(...)`): fp32 math, round on write.
        if self._mem is not None:  # `psum[...] += nc_matmul(...)`: the matmul accumulates in place
            _memory.accumulated(self._mem, other)
        lazy = _take_pending_product(self, other) if fn in _EXACT_UFUNCS else None
        self.own()
        fresh = None
        if self.buffer is psum and opname == "add" and self._diag is not None:
            fresh = _diag.unwritten(self)
            fresh = fresh if fresh is not None and fresh.any() else None
        if self._diag is not None or _tls.loops:
            _diag.on_accumulate(self, starts_group=fresh is not None)
        cur = self.data
        if lazy is not None and cur.ndim and _update_blocked(fn, cur, lazy):
            _prof.instruction("Vector", cur)
            if self._mem is not None:
                _memory.in_place(self._mem)
            return self
        vals = _values(other, "other")
        if np.shape(vals) != cur.shape:
            vals = _fit(vals, cur.shape, f"tile {opname} in place (+=, -=, ...)", f"{self.buffer.name} tile")
        if fresh is not None:
            # PSUM accumulation group start: the first result into never-written elements
            # overwrites them (an nl.ndarray PSUM tile holds garbage, or NaN here, before).
            res = np.where(fresh, vals, np.add(dt.compute_view(cur), vals))
            _prof.instruction("Tensor", cur)
            if self._mem is not None:
                _memory.in_place(self._mem)
            cur[...] = dt.cast(res, cur.dtype)
            return self
        _prof.instruction("Vector" if self.buffer is sbuf else "Tensor", cur)
        if self._mem is not None:
            _memory.in_place(self._mem)
        if cur.dtype == np.float32 and isinstance(fn, np.ufunc) and (
                (type(vals) is np.ndarray and vals.dtype == np.float32 and vals.shape == cur.shape)  # (a product)
                or (np.result_type(cur, vals) == np.float32 and np.shape(vals) == cur.shape)):
            fn(cur, vals, out=cur)  # fp32 in, fp32 out: the same values as computing then copying
        else:
            res = fn(dt.compute_view(cur), vals)
            cur[...] = dt.cast(res, cur.dtype)
        return self

    return iop


def _install_operators():
    g = vars(_math)  # (the element-wise ops, looked up when called, as nl's own names)
    pairs = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "pow": "power",
             "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
             "and": "logical_and", "or": "logical_or", "xor": "logical_xor", "mod": "mod"}
    for dunder, opname in pairs.items():
        fn = g[opname]
        setattr(Tile, f"__{dunder}__", (lambda f: lambda self, other: f(self, other))(fn))
        if dunder not in ("lt", "le", "gt", "ge"):
            setattr(Tile, f"__r{dunder}__", (lambda f: lambda self, other: f(other, self))(fn))
    # A one-element integer tile plus or minus an index expression is a run-time offset (see
    # index_expr.runtime_offset), not an element-wise op on an index.
    for dunder, sign, flip in (("add", 1, False), ("radd", 1, False), ("sub", 1, True), ("rsub", -1, False)):
        plain = getattr(Tile, f"__{dunder}__")

        def op(self, other, plain=plain, sign=sign, flip=flip):
            if isinstance(other, (AffineExpr, BExpr)):
                v = _runtime_offset(self)
                if v is None:
                    raise NKIError("index type", f"a tile of shape {self.shape} {self.dtype} combined with an index "
                                   "expression: only a one-element integer tile (a scalar read from SBUF) is a "
                                   "run-time index offset")
                return (-other if flip else other) + sign * v
            return plain(self, other)

        setattr(Tile, f"__{dunder}__", op)
    # `tile != None` (an optional operand test, as nki-library writes it) is Python identity, not an op.
    Tile.__eq__ = lambda self, other: NotImplemented if other is None else g["equal"](self, other)
    Tile.__ne__ = lambda self, other: NotImplemented if other is None else g["not_equal"](self, other)
    Tile.__hash__ = object.__hash__
    Tile.__neg__ = lambda self: g["negative"](self)
    Tile.__abs__ = lambda self: g["abs"](self)
    Tile.__invert__ = lambda self: g["invert"](self)
    for dunder, opname in (("iadd", "add"), ("isub", "subtract"), ("imul", "multiply"),
                           ("itruediv", "divide")):
        setattr(Tile, f"__{dunder}__", _inplace(opname))


_install_operators()
