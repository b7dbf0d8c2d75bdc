"""The first generation's ``nl`` math on tiles: element-wise functions (``nl.exp``, ``nl.add`` ...,
made from the operator tables of :mod:`.op_functions`), ``nl.where``, reductions over free axes,
``nl.softmax``, ``nl.rms_norm`` and ``nl.prelu``.

Ops take SBUF/PSUM tiles (never HBM tensors), compute in fp32 and write a new tile whose dtype is
``dtype=`` or the highest-precision input dtype; reductions run over free axes only; ``mask=``
leaves masked-off elements untouched. A plain element-wise op is deferred (its tile holds
``fn(*args)`` until read), so a following ``nl.store`` can compute it straight into HBM.
"""

from __future__ import annotations

import builtins
import functools as _functools

import numpy as np

from . import diagnostics as _diag
from . import dtypes as dt
from . import recording as _prof
from .core import Tile, read_inside as _read_inside, sbuf
from .errors import NKIError
from .indexing import _full_mask
from .instructions.target import get_nc_version as _get_nc_version, nc_version as _nc_version
from .op_functions import _BINARY, _UNARY
from .tile_ops import _axes, _broadcast_check, _dtype_of, _nb, _out_dtype, _result, _values
from .values import _partition_first


_UFUNC_OUT = {}  # (ufunc, operand descriptors) -> the dtype NumPy gives (None: unknown)


def _ufunc_out(fn, descr):
    """The dtype ufunc ``fn`` gives for operands described by ``descr`` (dtypes, or ``int`` /
    ``float`` for Python scalars), or ``None`` if NumPy cannot say. Cached: a kernel repeats few."""
    key = (fn, descr)
    got = _UFUNC_OUT.get(key, False)
    if got is False:
        try:
            got = fn.resolve_dtypes(descr + (None,) * fn.nout)[-1]
        except (TypeError, ValueError, AttributeError):  # (no loop for these dtypes, or NumPy < 1.24)
            got = None
        _UFUNC_OUT[key] = got
    return got


def _keeps_dtype(fn, args, dtype) -> bool:
    """Whether ``fn(*args)`` is computed in ``dtype`` itself, so a deferred op needs no rounding
    step. ``np.result_type`` of the operands is not enough for an integer ``dtype``: it knows
    nothing of the op, and NumPy's true divide (and exp, sqrt, ...) of integers is float64,
    which the eager path rounds to the integer dtype (:func:`.tile_ops._result`) and a deferred one would
    not (issue 28: ``iota_int32 / 38`` held 0.53 in an int32 tile, 1 once rounded)."""
    if dtype.kind == "f":
        return True  # (a float ufunc of float operands stays in their promoted float dtype)
    descr = tuple(a.dtype if isinstance(a, (np.ndarray, np.generic)) else
                  type(a) if type(a) in (int, float) else np.asarray(a).dtype for a in args)
    return _ufunc_out(fn, descr) == dtype


class _OutShape:
    """The output shape of a deferred op, for the profiler's recorder (it reads only ``.shape``):
    the op is counted when it is issued, before its values exist."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)


def _deferred(fn, args, dtype, mask, engine):
    """A tile whose ufunc ``fn(*args)`` runs later (maybe straight into a store), or ``None``.

    Only plain cases defer: a NumPy ufunc, no mask, and an output dtype equal to what the
    ufunc produces (so no rounding step). A profile being recorded defers the same ops as a
    plain call, so both compute the same values the same way (issue 28).
    """
    if not isinstance(fn, np.ufunc):
        return None
    a0 = args[0]
    if len(args) == 2:
        a1 = args[1]
        plain = (type(a0) is np.ndarray and type(a1) is np.ndarray and a1.shape == a0.shape
                 and a1.dtype == a0.dtype)
    else:
        plain = type(a0) is np.ndarray and builtins.all(type(a) is np.ndarray and a.shape == a0.shape
                                                         and a.dtype == a0.dtype for a in args)
    if plain:
        shape, rtype = a0.shape, a0.dtype  # (the common case, without NumPy's general promotion)
    else:
        shape, rtype = np.broadcast_shapes(*(np.shape(a) for a in args)), np.result_type(*args)
    if rtype != dtype or len(shape) < 1 or (mask is not None and _full_mask(mask, shape) is not None):
        return None
    if not _keeps_dtype(fn, args, dtype):
        return None  # (e.g. integers divide to a float, rounded to the integer dtype by _result)
    # Counted now (the memory model's instruction slot); the recorder reads the output's shape.
    _prof.instruction(engine, a0 if plain else _OutShape(shape))
    return Tile(None, sbuf, thunk=(fn, args, shape, dtype))


# The trailing parameters (dtype, keepdims, transpose_x ...) may also be passed by position, as the
# current nki.language signatures allow (`nl.exp(x, dtype=None)`); the first generation's pages make
# them keyword-only, and calls by keyword behave the same either way. `mask` stays keyword-only.
def _make_unary(name, fn):
    lazy_ok = isinstance(fn, np.ufunc) and name not in _BOOL_RESULT

    def op(x, dtype=None, *, mask=None):
        if lazy_ok and dtype is None and mask is None and type(x) is Tile:
            # A tile's own dtype out (most uses): _deferred's tile without the general layers.
            _diag.read(x)
            a = x.data
            d = a.dtype
            if (type(a) is np.ndarray and a.ndim and d not in dt._LOW_FLOATS
                    and (d.kind == "f" or _keeps_dtype(fn, (a,), d))):  # (int exp/sqrt: float64)
                _prof.instruction("Scalar", a)  # (as _deferred: counted now; a has the result's shape)
                return Tile(None, sbuf, thunk=(fn, (a,), a.shape, d))
            a = dt.compute_view(a)
        else:
            if mask is not None:
                x = _read_inside(x, mask)
            a = _values(x, "x")
        out_dtype = _out_dtype(dtype if dtype is not None or name not in _BOOL_RESULT else dt.bool_, x)
        lazy = _deferred(fn, (a,), out_dtype, mask, "Scalar")
        return lazy if lazy is not None else _result(fn(a), out_dtype, mask, engine="Scalar")

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Element-wise ``{name}`` of a tile (``nl.{name}``); fp32 compute, output in ``dtype``."
    op._np = fn
    return op


# Comparisons and logical ops produce booleans unless dtype= says otherwise (nl API docs).
_BOOL_RESULT = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and",
                "logical_or", "logical_xor", "logical_not"}


def _align_partitions(x, y, a, b):
    """Tiles broadcast with their partition axes aligned (NKI), not right-aligned (NumPy): a
    reduced ``[P]`` tile combines with a ``[P, F]`` tile as ``[P, 1]``, as the official
    samples rely on (``nl.multiply(a_tile, nl.rsqrt(nl.sum(sq, axis=[1]) / n))`` in the NKI
    RMSNorm tutorial)."""
    if not (isinstance(x, Tile) and isinstance(y, Tile)) or x.ndim == y.ndim:
        return a, b
    rank, nb = builtins.max(x.ndim, y.ndim), _nb()
    return _partition_first(a, rank, nb), _partition_first(b, rank, nb)


def _make_binary(name, fn):
    lazy_ok = isinstance(fn, np.ufunc) and name not in _BOOL_RESULT

    def op(x, y, dtype=None, *, mask=None):
        if lazy_ok and dtype is None and mask is None and type(x) is Tile and type(y) is Tile:
            # Two tiles of one dtype and shape (most ops of a kernel): _deferred's tile without the
            # general layers (_values, _out_dtype, NumPy's promotion); the same hooks in the same order.
            _diag.read(x)
            a = x.data
            _diag.read(y)
            b = y.data
            d = a.dtype
            if (type(a) is np.ndarray and type(b) is np.ndarray and b.dtype == d and a.shape == b.shape
                    and a.ndim and d not in dt._LOW_FLOATS
                    and (d.kind == "f" or _keeps_dtype(fn, (a, b), d))):  # (integer division: a float result)
                _prof.instruction("Vector", a)  # (as _deferred: counted now; a has the result's shape)
                return Tile(None, sbuf, thunk=(fn, (a, b), a.shape, d))
            a, b = dt.compute_view(a), dt.compute_view(b)
        elif lazy_ok and dtype is None and mask is None and type(x) is Tile and type(y) is float:
            # An fp32 tile and a Python float (an fp32 scalar): fp32 out, as promotion gives.
            _diag.read(x)
            a = x.data
            if type(a) is np.ndarray and a.dtype == dt.float32 and a.ndim:
                _prof.instruction("Vector", a)
                return Tile(None, sbuf, thunk=(fn, (a, y), a.shape, a.dtype))
            a, b = dt.compute_view(a), y
        else:
            if mask is not None:
                x, y = _read_inside(x, mask), _read_inside(y, mask)
            a, b = _values(x, "x"), _values(y, "y")
        if (a.shape != b.shape) if type(a) is np.ndarray and type(b) is np.ndarray else np.shape(a) != np.shape(b):
            a, b = _align_partitions(x, y, a, b)
            _broadcast_check(name, Tile(a, sbuf, parent=x) if isinstance(x, Tile) else x,
                             Tile(b, sbuf, parent=y) if isinstance(y, Tile) else y)
        out_dtype = _out_dtype(dtype if dtype is not None or name not in _BOOL_RESULT else dt.bool_, x, y)
        lazy = _deferred(fn, (a, b), out_dtype, mask, "Vector")
        return lazy if lazy is not None else _result(fn(a, b), out_dtype, mask)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"Element-wise ``{name}`` of two tiles or a tile and a scalar (``nl.{name}``), "
                  "broadcasting size-1 dims; output in ``dtype`` or the widest input dtype.")
    op._np = fn
    return op


for _n, _f in _UNARY.items():
    globals()[_n] = _make_unary(_n, _f)
for _n, _f in _BINARY.items():
    globals()[_n] = _make_binary(_n, _f)


def _integer_only(op, operands):
    """``op`` refusing floating-point ``operands`` (``"x"`` / ``"y"``): the bitwise pages say "Inputs must
    be integer typed". NumPy would raise a bare TypeError, and only once the deferred result is computed."""
    name = op.__name__

    @_functools.wraps(op)
    def checked(*args, **kwargs):
        given = dict(zip(operands, args))
        given.update((k, kwargs[k]) for k in operands if k in kwargs)
        for arg, v in given.items():
            if isinstance(v, (Tile, bool, int, float, np.generic)) and dt.is_float(_dtype_of(v)):
                raise NKIError("integer operands", f"nl.{name}: operand {arg} has dtype {_dtype_of(v)}; "
                               f"nl.{name} takes integer inputs only (\"Inputs must be integer typed\")")
        return op(*args, **kwargs)

    return checked


for _n in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"):
    globals()[_n] = _integer_only(globals()[_n], ("x", "y"))
invert = _integer_only(invert, ("x",))  # noqa: F821 - made by the loop above


def _from_gen4(op):
    """Element-wise ``op`` refused on targets older than NeuronCore-v4, as its page says."""

    @_functools.wraps(op)
    def gated(*args, **kwargs):

        cur = _get_nc_version()
        if cur.value < _nc_version.gen4.value:
            raise NKIError("target", f"nl.{op.__name__} is available only on NeuronCore-v4 (trn3) and newer; the "
                           f"simulated target is {cur.name} (NeuronCore-v{cur.value}); select it with "
                           "NKI_SIM_NC_VERSION=gen4")
        return op(*args, **kwargs)

    return gated


abs_max = _from_gen4(abs_max)  # noqa: F821 - current-only names (see _CURRENT_ONLY)
abs_min = _from_gen4(abs_min)  # noqa: F821


def where(condition, x, y, dtype=None, *, mask=None):
    """Element-wise select: ``x`` where ``condition`` is non-zero, else ``y`` (``nl.where``)."""
    c = _values(condition, "condition")
    a, b = _values(x, "x"), _values(y, "y")
    rank = builtins.max((t.ndim for t in (condition, x, y) if isinstance(t, Tile)), default=0)
    nb = _nb()
    c, a, b = (_partition_first(v, rank, nb) if isinstance(t, Tile) else v
               for v, t in ((c, condition), (a, x), (b, y)))
    _broadcast_check("where", c, a, b)
    return _result(np.where(np.asarray(c) != 0, a, b), _out_dtype(dtype, x, y), mask)


def _sum_of_products(x, axes, keepdims):
    """``sum(a * b)`` (or ``sum(a ** 2)``) over the last axis of a deferred product, without
    forming the product: one read of each operand instead of a full-size temporary. The
    product tile stays deferred for any other use. ``None`` when the pattern does not apply."""
    fn, args, shape, dtype = x._thunk
    if dtype != dt.float32 or axes != (len(shape) - 1,) or fn not in (np.multiply, np.square):
        return None
    a, b = (args[0], args[0]) if fn is np.square else args
    for o in (a, b):  # (nl's own `all` shadows the builtin here)
        if not (isinstance(o, np.ndarray) and o.dtype == dt.float32 and o.shape[-1:] == shape[-1:]):
            return None
    res = np.einsum("...i,...i->...", a, b)
    return res[..., None] if keepdims else res


def _make_reduce(name, fn, out_float=False):
    def op(x, axis, dtype=None, keepdims=False, *, mask=None):
        axes = _axes(x, axis, name)
        if isinstance(x, Tile) and x.nb:
            axes = tuple(a + x.nb for a in axes)
        if name == "sum" and mask is None and isinstance(x, Tile) and x._thunk is not None:
            res = _sum_of_products(x, axes, keepdims)
            if res is not None:
                return _result(res, dt.as_dtype(dtype) or x.dtype, engine="Vector")
        if mask is not None and isinstance(x, Tile):
            x = _read_inside(x, mask)  # (a window reaching outside its tile where the mask hides it)
        v = _values(x, "x")
        m = _full_mask(mask, np.shape(v)) if mask is not None else None
        if m is not None:
            ident = {"sum": 0, "mean": 0, "prod": 1, "max": -np.inf, "min": np.inf, "all": 1, "any": 0}
            v = np.where(m, v, ident.get(name, 0))
        res = fn(v, axis=axes, keepdims=keepdims)
        d = dt.as_dtype(dtype) or (dt.float32 if out_float and not dt.is_float(x.dtype) else x.dtype)
        return _result(res, d, engine="Vector")

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"``{name}`` over free ``axis`` (int or list) of a tile (``nl.{name}``); the partition "
                  "axis cannot be reduced.")
    op._np = fn
    return op


sum = _make_reduce("sum", np.sum)  # noqa: A001 - NKI's name
mean = _make_reduce("mean", np.mean, out_float=True)
max = _make_reduce("max", np.max)  # noqa: A001
min = _make_reduce("min", np.min)  # noqa: A001
prod = _make_reduce("prod", np.prod)
all = _make_reduce("all", lambda v, axis, keepdims: np.all(v != 0, axis=axis, keepdims=keepdims))  # noqa: A001
any = _make_reduce("any", lambda v, axis, keepdims: np.any(v != 0, axis=axis, keepdims=keepdims))  # noqa: A001
var = _make_reduce("var", np.var, out_float=True)


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None):
    """Softmax over free ``axis`` of a tile (``nl.softmax``)."""
    axes = tuple(a + x.nb for a in _axes(x, axis, "softmax"))
    v = _values(x, "x").astype(np.float32, copy=False)
    e = np.exp(v - np.max(v, axis=axes, keepdims=True))
    return _result(e / np.sum(e, axis=axes, keepdims=True), _out_dtype(dtype, x), mask, engine="Scalar")


def rms_norm(x, w, axis, n, epsilon=1e-6, dtype=None, compute_dtype=None, *, mask=None):
    """``x / sqrt(sum(x**2, axis) / n + epsilon) * w`` (``nl.rms_norm``), fp32 statistics."""
    axes = _axes(x, axis, "rms_norm")
    v = np.asarray(_values(x, "x"), dtype=np.float32)
    wv = _values(w, "w")
    if isinstance(w, Tile) and isinstance(x, Tile) and w.ndim < x.ndim and w.shape[0] == x.shape[0]:
        wv = np.reshape(wv, np.shape(wv) + (1,) * (x.ndim - w.ndim))
    ms = np.sum(np.square(v), axis=tuple(a + _nb() for a in axes), keepdims=True) / float(n)
    out = v / np.sqrt(ms + np.float32(epsilon)) * wv
    return _result(out, _out_dtype(dtype if dtype is not None else compute_dtype, x), mask, engine="Vector")


def prelu(x, alpha, *, dtype=None, mask=None):
    """Parametric ReLU (``nl.prelu``): ``x`` where ``x >= 0``, else ``alpha * x``."""
    v = _values(x, "x")
    a = _values(alpha, "alpha")
    return _result(np.where(v >= 0, v, a * v), _out_dtype(dtype, x), mask, engine="Scalar")
