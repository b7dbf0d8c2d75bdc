"""``nki.language`` (``nl``) on NumPy: memory, indexing, element-wise math, reductions.

Semantics follow the neuronxcc.nki.language reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.language.html):
ops take SBUF/PSUM tiles (never HBM tensors), compute in fp32 and write a new
tile whose dtype is ``dtype=`` or the highest-precision input dtype; reductions
run over free axes only; ``mask=`` leaves masked-off elements untouched.
"""

from __future__ import annotations

import builtins
import functools as _functools
import math
import sys as _sys
import weakref as _weakref

import numpy as np

from . import diagnostics as _diag
from . import dtypes as dt
from . import memory as _memory
from . import profile as _prof
from . import rebound as _rebound
from .core import (Access, Buffer, HBMTensor, PMAX, Tile, current, current_or_none, hbm, par_dim,
                   private_hbm, psum, sbuf, shared_hbm)
from .core import fill_sentinel as _fill_sentinel, uninitialised_tile as _uninitialised_tile
from .core import read_inside as _read_inside
from .dtypes import (bfloat16, bool_, float8_e4m3, float8_e5m2, float16, float32, int8, int16, int32,
                     tfloat32, uint8, uint16, uint32)
from .errors import NKIError, NotBatchable
from .index_expr import AffineExpr, BExpr, Mask  # noqa: F401 - Mask is part of nl's surface
from .index_expr import runtime_offset as _runtime_offset
from .indexing import _full_mask, mask_box
from .instructions.dma import accumulate_into_hbm as _accumulate_into_hbm
from .instructions.operands import alu as _alu
from .instructions.target import get_nc_version as _get_nc_version, nc_version as _nc_version

__all__ = [n for n in dir() if not n.startswith("_")]


class tile_size:
    """Hardware tile limits (``nl.tile_size``)."""

    pmax = PMAX
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_max_size = 16 * 1024 // 4 // 1  # fp32 elements per partition over all 8 banks
    total_available_sbuf_size = 192 * 1024


# ---------------------------------------------------------------------------
# operands and results
# ---------------------------------------------------------------------------
def _values(x, name: str):
    """The array an engine reads for operand ``x`` (fp32 for low-precision tiles)."""
    if isinstance(x, Tile):
        if x._diag is not None or _diag.loops:
            _diag.on_read(x)
        return dt.compute_view(x.data)
    if isinstance(x, (Access, HBMTensor)):
        t = x.tensor if isinstance(x, Access) else x
        raise NKIError("compute on HBM", f"operand {name} ({t.name}, shape {x.shape}) is in HBM; "
                       "load it into SBUF with nl.load first")
    if isinstance(x, (bool, int, float, np.generic, np.ndarray)):
        return x
    raise NKIError("operand type", f"operand {name} of type {type(x).__name__} is not a tile or scalar")


def _dtype_of(x):
    return x.dtype if isinstance(x, Tile) else dt.scalar_dtype(x)


def _nb() -> int:
    """Batch axes of the running program (0 unless a vectorised batch of programs runs)."""
    prog = current_or_none()
    return prog.nb if prog is not None else 0


def _result(values, dtype, mask=None, buffer=sbuf, engine="Vector") -> Tile:
    """Write computed ``values`` into a new tile of ``dtype``. Under ``mask=`` the masked-off elements
    are zero in the new tile and are left untouched when it is assigned into a destination."""
    values = np.asarray(values)
    shape = values.shape[_nb():] if mask is not None else values.shape
    box = mask_box(mask, shape) if isinstance(mask, Mask) else None
    m = _full_mask(mask, shape) if mask is not None and box is None else None
    out = dt.cast(values, dtype)
    wrote = None
    if box is not None:
        kept = np.zeros(out.shape, out.dtype)
        box = (Ellipsis,) + tuple(box)
        kept[box] = out[box]
        out = kept
        wrote = np.zeros(out.shape, bool)
        wrote[box] = True
    elif m is not None:
        out = np.where(m, out, np.zeros((), out.dtype))
        wrote = np.broadcast_to(m, out.shape)
    elif out.base is not None or not out.flags.writeable:
        out = out.copy()  # a result must own its memory, never alias an operand
    _prof.instruction(engine, out)
    tile = Tile(out, buffer)
    tile._written = wrote  # assigning the result writes only these elements (see Tile.__setitem__)
    return tile


def _out_dtype(dtype, *operands):
    if dtype is None and len(operands) == 2 and type(operands[0]) is Tile and type(operands[1]) is Tile:
        a, b = operands[0].dtype, operands[1].dtype
        if a == b:
            return a  # (dt.promote of one dtype)
    d = dt.as_dtype(dtype)
    return d if d is not None else dt.promote(*(_dtype_of(o) for o in operands))


def _broadcast_check(name, *operands):
    # Size-1 dims broadcast on free *and* partition axes: the nki.language.add reference shows
    # "[1, 512] is broadcasted to [128, 512]" (partition broadcast, slower on hardware but legal).
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.add.html
    shapes = [np.shape(o.data) if isinstance(o, Tile) else np.shape(o) for o in operands]
    if shapes.count(shapes[0]) == len(shapes):  # (the module's `all` is nl.all)
        return shapes[0]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise NKIError("operand shapes", f"nl.{name}: operand shapes {shapes} do not broadcast "
                       "(free dims must match or be 1; partition dims must match)") from None


# ---------------------------------------------------------------------------
# element-wise ops
# ---------------------------------------------------------------------------
def _erf(x):
    # Taylor series near 0 (keeps relative accuracy), Numerical Recipes' erfc Chebyshev fit
    # (fractional error < 1.2e-7) elsewhere; float64 inside, fp32 out.
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    far = np.sign(x) * (1.0 - t * np.exp(-z * z + poly))
    x2 = x * x
    near = (2.0 / math.sqrt(math.pi)) * x * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (
        1 / 216 + x2 * (-1 / 1320 + x2 * (1 / 9360)))))))
    return np.where(z < 0.5, near, far).astype(np.float32)


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


_UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "square": np.square, "abs": np.abs, "negative": np.negative, "reciprocal": lambda x: 1.0 / x,
    "sign": np.sign, "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x * _sigmoid(x), "softplus": lambda x: np.logaddexp(0, x), "erf": _erf,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arctan": np.arctan, "ceil": np.ceil,
    "floor": np.floor, "trunc": np.trunc, "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "logical_not": lambda x: (np.asarray(x) == 0), "invert": np.invert,
    "erf_dx": lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-np.square(x)),
    "identity": lambda x: np.array(x, copy=True),
    # Activation derivatives and approximations (nki.language math / activation tables).
    "gelu_dx": lambda x: 0.5 * (1.0 + _erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * np.square(x)) / math.sqrt(
        2.0 * math.pi),
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "gelu_apprx_sigmoid_dx": lambda x: _sigmoid(1.702 * x) * (1.0 + 1.702 * x * (1.0 - _sigmoid(1.702 * x))),
    "silu_dx": lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
}

_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "maximum": np.maximum, "minimum": np.minimum, "fmod": np.fmod,
    "mod": np.mod, "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": lambda a, b: (np.asarray(a) != 0) & (np.asarray(b) != 0),
    "logical_or": lambda a, b: (np.asarray(a) != 0) | (np.asarray(b) != 0),
    "logical_xor": lambda a, b: (np.asarray(a) != 0) ^ (np.asarray(b) != 0),
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    # Magnitude comparisons keep the signed value; ties return y (nki.language.abs_max / abs_min).
    "abs_max": lambda a, b: np.where(np.abs(a) > np.abs(b), a, b),
    "abs_min": lambda a, b: np.where(np.abs(a) < np.abs(b), a, b),
}


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
    which the eager path rounds to the integer dtype (:func:`_result`) and a deferred one would
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
            if x._diag is not None or _diag.loops:
                _diag.on_read(x)
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
            if x._diag is not None or _diag.loops:
                _diag.on_read(x)
            a = x.data
            if y._diag is not None or _diag.loops:
                _diag.on_read(y)
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
            if x._diag is not None or _diag.loops:
                _diag.on_read(x)
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


def np_function(op):
    """The NumPy function behind an ``nl`` op or a NumPy ufunc given as ``op=``."""
    if hasattr(op, "_np"):
        return op._np
    if isinstance(op, np.ufunc) or op in (np.add, np.subtract, np.multiply, np.maximum, np.minimum):
        return op
    if callable(op) and getattr(op, "__name__", None) in _BINARY:
        return _BINARY[op.__name__]
    if callable(op) and getattr(op, "__name__", None) in _UNARY:
        return _UNARY[op.__name__]
    raise NKIError("op", f"{op!r} is not an NKI operator (use nl.add, nl.exp, np.add, ...)")


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


# ---------------------------------------------------------------------------
# reductions (free axes only)
# ---------------------------------------------------------------------------
def _axes(x, axis, name):
    nd = x.ndim if isinstance(x, Tile) else np.ndim(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) + nd if int(a) < 0 else int(a) for a in axes)
    pdim = x.pdim if isinstance(x, Tile) else 0
    for a in axes:
        if a == pdim:
            raise NKIError("partition reduction", f"nl.{name}: axis {a} is the partition dimension of a tile "
                           f"of shape {getattr(x, 'shape', np.shape(x))}; reductions run over free axes only "
                           "(use a matmul against ones, a transpose, or nisa.tensor_partition_reduce)")
        if not 0 <= a < nd:
            raise NKIError("axis", f"nl.{name}: axis {a} out of range for a tile of rank {nd}")
    return axes


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


# ---------------------------------------------------------------------------
# matmul / transpose (Tensor engine)
# ---------------------------------------------------------------------------
def _need_tile(x, name, op):
    if not isinstance(x, Tile):
        _values(x, name)  # raises the HBM / type error
        raise NKIError("operand type", f"{op}: operand {name} must be a tile, got {type(x).__name__}")
    if x._diag is not None or _diag.loops:
        _diag.on_read(x)
    return x


def matmul(x, y, transpose_x=False, *, mask=None):
    """``x @ y`` on the Tensor engine (``nl.matmul``); result in PSUM, fp32.

    Without ``transpose_x`` x is [M, K] (M <= 128, K <= 128); with it x is
    [K, M]. y is [K, N] with N <= 512: K is the partition (contraction) axis.
    """
    from .isa import nc_matmul

    x = _need_tile(x, "x", "nl.matmul")
    y = _need_tile(y, "y", "nl.matmul")
    stationary = x if transpose_x else transpose(x)
    return nc_matmul(stationary, y, mask=mask)


def transpose(x, dtype=None, *, mask=None):
    """Swap the partition and free axes of a 2-D tile (``nl.transpose``); both <= 128."""
    x = _need_tile(x, "x", "nl.transpose")
    if x.ndim != 2:
        raise NKIError("transpose", f"nl.transpose needs a 2-D tile, got shape {x.shape}")
    if x.shape[1] > PMAX:
        raise NKIError("transpose", f"nl.transpose of a tile of shape {x.shape}: the free size "
                       f"{x.shape[1]} becomes the partition size and must be <= {PMAX}")
    return _result(np.swapaxes(_values(x, "x"), -1, -2), _out_dtype(dtype, x), mask, engine="Tensor")


# ---------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------
# Shapes of plain ints seen so far, each mapped to itself: a kernel allocates the same few shapes in
# its loops, and a tuple of NumPy integers (equal, with an equal hash) finds its Python-int form here.
_PLAIN_SHAPES = {}


def _parse_shape(shape):
    if type(shape) is tuple:
        try:
            hit = _PLAIN_SHAPES.get(shape)
        except TypeError:  # (an unhashable entry: the checks below report it)
            hit = None
        if hit is not None:
            return hit, 0
        if builtins.all(type(s) is int for s in shape):
            if len(_PLAIN_SHAPES) < 4096:
                _PLAIN_SHAPES[shape] = shape
            return shape, 0  # (plain ints, no par_dim)
    if isinstance(shape, (int, np.integer, par_dim)):
        shape = (shape,)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    if len(pdims) > 1:
        raise NKIError("par_dim", f"shape {shape} marks more than one partition dimension")
    return tuple(int(s) for s in shape), (pdims[0] if pdims else 0)


def _allocate(shape, dtype, buffer, fill=None, name="", address=None):
    shape, pdim = _parse_shape(shape)
    dtype = dt.as_dtype(dtype) if dtype is not None else dt.float32
    buffer = sbuf if buffer is None else buffer
    buffer, placement = _memory.resolve_buffer(buffer, address)
    if not isinstance(buffer, Buffer):
        raise NKIError("buffer", f"buffer={buffer!r} is not an NKI memory (nl.sbuf, nl.psum, nl.hbm, "
                       "nl.shared_hbm, nl.private_hbm, or an nki.compiler allocation)")
    if not buffer.on_chip:
        from .launch import allocate_hbm

        return allocate_hbm(shape, dtype, buffer, fill, name)
    prog = current_or_none()
    if placement is not None and prog is not None and "force_auto_alloc" in prog.mem.flags:
        placement = None  # "This will ignore any direct allocation inside the kernel"
    if prog is not None and prog.nb:
        if placement is not None:
            raise NotBatchable("placed tensors live in per-program storage")
        # One tile per program, writeable like the per-program path (views of it write through); its
        # NaN fill deferred alike (a DMA from HBM into it then views HBM instead of copying).
        full = prog.bshape + shape
        if fill is None:
            return _uninitialised_tile(full, dtype, buffer, pdim)
        return Tile(np.zeros(full, dtype) if fill == 0 else np.full(full, fill, dtype), buffer, pdim)
    if placement is not None and prog is not None:
        return _placed(shape, pdim, dtype, buffer, placement, fill, name, prog)
    if fill is None:
        tile = _uninitialised_tile(shape, dtype, buffer, pdim)
    else:
        data = np.full(shape, fill, dtype)
        _prof.instruction("GpSimd", data)
        tile = Tile(data, buffer, pdim)
    if tile._mem is not None:
        _memory.declared(tile._mem, name)
    if fill is None:
        _diag.mark_uninitialised(tile)  # reads before a write are the `uninit` diagnostic
    return tile


def _placed(shape, pdim, dtype, buffer, placement, fill, name, prog):
    """A tensor on the bytes ``placement`` gives it (direct allocation): it aliases whatever else
    lives there, as on hardware (:mod:`.memory`)."""
    data, blocks = _memory.place(shape, pdim, dtype, placement, prog)
    if blocks is None:
        data, (part, lo) = data
        tile = Tile(data, buffer, pdim)
        rec = tile._mem
        _memory.mark_placed(rec, part, lo, shape[pdim])
    else:
        # Blocks live at unrelated addresses: the tensor is reached one block at a time, and
        # reading it whole raises (the deferred-value slot holds the error).
        tile = Tile(np.broadcast_to(np.zeros((), dtype), shape), buffer, pdim)
        tile._thunk = (_memory.whole_block_tensor, (), shape, dtype)
        rec = tile._mem
        rec.place, rec.tiles = blocks, {}
    _memory.declared(rec, name)  # never taken for the result of the instruction counted just before
    if fill is not None:
        for b in (blocks or ((),)):
            tile[b + (...,)] = fill
    elif blocks is None:
        _diag.mark_uninitialised(tile)
    return tile


def ndarray(shape, dtype, buffer=None, name="", address=None, *, lazy_initialization=False):
    """Allocate an uninitialised tensor in ``buffer`` (default SBUF; HBM for kernel outputs).

    ``buffer`` may be an ``nki.compiler`` allocation (``ncc.sbuf.mod_alloc(...)``), and
    ``address=(partition_offset, free_offset)`` (standalone ``nki``) places an SBUF/PSUM tensor
    at those bytes; placed tensors share storage where their bytes overlap."""
    return _allocate(shape, dtype, buffer, None, name, address)


def zeros(shape, dtype, buffer=None, name="", *, lazy_initialization=False):
    """A tensor of zeros (``nl.zeros``). ``lazy_initialization`` (a scheduling hint of the official
    samples) does not change the values."""
    return _allocate(shape, dtype, buffer, 0, name)


def ones(shape, dtype, buffer=None, name="", *, lazy_initialization=False):
    """A tensor of ones (``nl.ones``)."""
    return _allocate(shape, dtype, buffer, 1, name)


def full(shape, fill_value, dtype, buffer=None, name="", *, lazy_initialization=False):
    """A tensor filled with ``fill_value`` (``nl.full``)."""
    return _allocate(shape, dtype, buffer, fill_value, name)


def _like(a, dtype, buffer, fill):
    buf = buffer if buffer is not None else getattr(a, "buffer", sbuf)
    return _allocate(a.shape, dtype if dtype is not None else a.dtype, buf, fill)


def zeros_like(a, dtype=None, buffer=None, name=""):
    """Zeros with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, 0)


def ones_like(a, dtype=None, buffer=None, name=""):
    """Ones with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, 1)


def full_like(a, fill_value, dtype=None, buffer=None, name=""):
    """``fill_value`` with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, fill_value)


def empty_like(a, dtype=None, buffer=None, name=""):
    """Uninitialised tensor with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, None)


def _as_access(x, name, op):
    if isinstance(x, HBMTensor):
        return x[...]
    if isinstance(x, Access):
        return x
    if isinstance(x, Tile):
        raise NKIError("memory", f"{op}: {name} is a {x.buffer.name} tile; {op} moves data between HBM "
                       "and SBUF, so it needs an HBM tensor here")
    raise NKIError("operand type", f"{op}: {name} must be an HBM tensor, got {type(x).__name__}")


def load(src, dtype=None, *, mask=None):
    """DMA an HBM region into a new SBUF tile (``nl.load``); masked-off elements are not read."""
    acc = _as_access(src, "src", "nl.load")
    mask = acc.local_mask(mask)
    prog = current_or_none()
    if prog is not None and prog.nb:
        from .vectorize import load_batched

        return load_batched(prog, acc, mask, dtype)
    tile = _loaded_tile(acc.tensor, acc.index.read(acc.tensor.data, mask, what=acc.tensor.name), dtype)
    if mask is not None:
        # the DMA moves only the selected elements: assigned into a tile, the rest keep their values
        tile._written = _full_mask(mask, tile.shape)
    _prof.dma(acc.tensor, tile.data, "read", acc, mask)
    return tile


def _loaded_tile(tensor, data, dtype) -> Tile:
    """A new SBUF tile holding ``data`` read from HBM ``tensor``, cast to ``dtype`` when given.

    A view of HBM stays zero-copy: the tile views HBM until either side is written
    (copy-on-write through ``tensor``'s borrowers)."""
    d = dt.as_dtype(dtype) if dtype is not None else None
    if d is not None and d != data.dtype:
        data = dt.cast(data, d)
    elif data.base is not None:
        data = data.view()
        data.flags.writeable = False
    tile = Tile(data, sbuf)
    if not data.flags.writeable:
        tensor._borrowers.add(tile)
    return tile


def store(dst, value, *, mask=None):
    """DMA an SBUF/PSUM tile (or scalar) into an HBM region, rounding to its dtype (``nl.store``)."""
    if isinstance(dst, Tile):
        raise NKIError("store destination", f"nl.store destination is a {dst.buffer.name} tile of shape "
                       f"{dst.shape}; stores write HBM tensors only (assign tiles with t[...] = value)")
    acc = _as_access(dst, "dst", "nl.store")
    if getattr(acc.tensor, "constant", False):
        raise NKIError("store destination", f"nl.store into {acc.tensor.name} {list(acc.tensor.shape)}: a shared "
                       "constant (nl.shared_constant, nl.shared_identity_matrix) holds compile-time data and is "
                       "read-only; store into an nl.ndarray output")
    mask = acc.local_mask(mask)
    if isinstance(value, (Access, HBMTensor)):
        raise NKIError("store value", "nl.store value is an HBM tensor; load it into SBUF first")
    prog = current_or_none()
    if prog is not None and prog.nb:
        from .vectorize import store_batched

        return store_batched(prog, acc, value, mask)
    if isinstance(value, Tile) and value._thunk is not None and _store_deferred(acc, value, mask):
        return
    vals = _fit(_values(value, "value"), acc.shape, "nl.store", f"{acc.tensor.name}{list(acc.shape)}")
    t = acc.tensor
    if t._borrowers:
        t.materialize_borrowers()
    _prof.dma(t, np.broadcast_to(vals, acc.shape), "write", acc, mask)
    acc.index.write(t.data, dt.cast(vals, t.dtype), mask, what=t.name)


def _store_deferred(acc, value: Tile, mask) -> bool:
    """Compute a deferred tile straight into its HBM destination when nothing else is needed."""
    t = acc.tensor
    idx = acc.index
    if (value._thunk[0] is _fill_sentinel or value.dtype != t.dtype or value.shape != acc.shape or not idx.is_view
            or _full_mask(mask, acc.shape) is not None or not t.data.flags.writeable):
        return False
    view = idx.view(t.data)
    if (idx.basic is None and idx._overlaps(t.data)) or _diag.wants_old_values(t, acc, mask):
        return False
    _compute_into(t, value, view)
    _prof.dma(t, view, "write", acc, mask, written=True)
    return True


def _compute_into(t, value: Tile, view) -> None:
    """Compute deferred tile ``value`` straight into ``view`` of HBM tensor ``t``. The tile then
    keeps viewing what it wrote (copy-on-write if ``t`` is written again)."""
    current().pending = None  # computed right here; other borrowers of t get copies first
    if t._borrowers:
        t.materialize_borrowers()
    value.force(out=view)
    ro = view.view()
    ro.flags.writeable = False
    value._data = ro
    t._borrowers.add(value)


def _partition_first(vals, ndim, nb=0):
    """A lower-rank tile's values padded with trailing size-1 axes up to ``ndim``: tiles broadcast
    with their partition axes aligned (a ``[P]`` vector is ``[P, 1]``), never NumPy's right-aligned
    way, which would spread a per-partition vector along the free axis when ``P`` equals it."""
    vshape = np.shape(vals)
    if len(vshape) - nb >= ndim or len(vshape) == nb:
        return vals
    return np.reshape(vals, vshape + (1,) * (ndim - len(vshape) + nb))


def _fit(vals, shape, op, dst):
    """``vals`` shaped for a destination of ``shape``: equal up to size-1 dims, or broadcastable
    with partition axes aligned (see :func:`_partition_first`)."""
    vshape = np.shape(vals)
    if vshape == tuple(shape) or not vshape:
        return vals
    if 0 < len(vshape) < len(shape) and vshape[0] == shape[0]:
        vals = _partition_first(vals, len(shape))
        vshape = np.shape(vals)
    if [d for d in vshape if d != 1] == [d for d in shape if d != 1]:
        return np.reshape(vals, shape)
    try:
        if np.broadcast_shapes(vshape, shape) == tuple(shape):
            return vals
    except ValueError:
        pass
    raise NKIError("shape mismatch", f"{op}: a value of shape {vshape} does not fit the destination {dst} "
                   f"of shape {tuple(shape)}")


def atomic_rmw(dst, value, op, *, mask=None):
    """Atomic read-modify-write of HBM, ``dst = op(dst, value)`` (``nl.atomic_rmw``).

    As the reference page documents, ``dst`` is an HBM tensor indexed with an indirect (dynamic)
    index (an SBUF tile of integer offsets) and ``op`` is ``np.add`` (or ``nl.add``). Each element
    update is atomic: offsets that repeat add every contribution, and programs of a grid may
    accumulate into the same rows without racing."""

    acc = _as_access(dst, "dst", "nl.atomic_rmw")
    if _alu(op) is not np.add:
        raise NKIError("atomic_rmw op", f"nl.atomic_rmw: op {getattr(op, '__name__', op)!r} is not supported; "
                       "the only atomic operation is np.add (nl.add)")
    if not builtins.any(isinstance(c, np.ndarray) and c.ndim for c in acc.index.comps):
        raise NKIError("atomic_rmw index", f"nl.atomic_rmw: dst {acc.tensor.name}{list(acc.shape)} is indexed "
                       "directly; atomic_rmw supports only indirect dynamic indexing (index an axis with an "
                       "SBUF tile of offsets, e.g. t[idx_tile, nl.arange(M)[None, :]])")
    if isinstance(value, (Access, HBMTensor)):
        raise NKIError("atomic_rmw value", "nl.atomic_rmw value is an HBM tensor; load it into SBUF first")
    mask = acc.local_mask(mask)
    vals = _fit(_values(value, "value"), acc.shape, "nl.atomic_rmw", f"{acc.tensor.name}{list(acc.shape)}")
    _accumulate_into_hbm(acc, vals, mask, "nl.atomic_rmw")


def load_transpose2d(src, dtype=None, *, mask=None):
    """Load a 2-D HBM region transposed: its free axis becomes the partition axis."""
    acc = _as_access(src, "src", "nl.load_transpose2d")
    mask = acc.local_mask(mask)
    if len(acc.shape) != 2:
        raise NKIError("load_transpose2d", f"needs a 2-D region, got shape {acc.shape}")
    prog = current_or_none()
    if prog is not None and prog.nb:
        from .vectorize import load_batched

        data = np.swapaxes(load_batched(prog, acc, mask, None).data, -1, -2)
        return Tile(np.ascontiguousarray(dt.cast(data, dt.as_dtype(dtype) or data.dtype)), sbuf)
    data = acc.index.read(acc.tensor.data, mask, what=acc.tensor.name).T
    d = dt.as_dtype(dtype) or data.dtype
    _prof.dma(acc.tensor, data, "read", acc, mask)
    return Tile(np.ascontiguousarray(dt.cast(data, d)), sbuf)


def copy(x, dtype=None, *, mask=None):
    """Copy a tile (SBUF or PSUM) into a new SBUF tile, optionally casting: the first generation's
    ``nisa.tensor_copy`` (one implementation of the copy)."""
    from .isa import tensor_copy

    if not isinstance(x, Tile):
        _need_tile(x, "x", "nl.copy")  # raises the HBM / type error naming nl.copy
    return tensor_copy(x, dtype=dtype, mask=mask)


def broadcast_to(x, shape):
    """Broadcast size-1 dims of a tile to ``shape`` (``nl.broadcast_to`` / ``tile.broadcast_to``)."""
    x = _need_tile(x, "x", "nl.broadcast_to")
    shape = tuple(int(s) for s in shape)
    try:
        data = np.broadcast_to(_partition_first(x.data, len(shape), x.nb), x.data.shape[:x.nb] + shape)
    except ValueError:
        raise NKIError("broadcast", f"cannot broadcast a tile of shape {x.shape} to {shape} "
                       "(only size-1 dims broadcast)") from None
    return Tile(data, x.buffer, parent=x)  # a zero-stride view of x's memory, not a tile of its own


def expand_dims(x, axis):
    """Insert a size-1 free axis (``nl.expand_dims``)."""
    x = _need_tile(x, "x", "nl.expand_dims")
    axis = axis + x.nb if isinstance(axis, (int, np.integer)) and axis >= 0 else axis
    return Tile(np.expand_dims(x.data, axis), x.buffer, parent=x)


def device_print(prefix, x):
    """Print a tile's values (``nl.device_print``; the simulator prints them right away)."""
    print(prefix, x.data if isinstance(x, Tile) else x)


def _rng():
    """The running program's random generator (``nl.random_seed`` resets it), else NumPy's global one."""
    prog = current_or_none()
    if prog is None:
        return np.random
    if getattr(prog, "rng", None) is None:
        launch = getattr(prog, "launch", None)
        seed = getattr(launch, "seed", None)
        pid = tuple(int(i) for i in prog.pid) if seed is not None and not getattr(prog, "nb", 0) else None
        prog.rng = np.random.default_rng(None if pid is None else [seed, len(pid), *pid])
    return prog.rng


def random_seed(seed, *, mask=None):
    """Seed the random generator of ``nl.dropout`` / ``nl.rand`` for this program (``nl.random_seed``).

    ``seed`` is an int or a tile whose first element is the seed (the official samples pass a
    ``[1, 1]`` tile loaded from HBM). Same seed, same random stream."""
    if isinstance(seed, (Access, HBMTensor)):
        _values(seed, "seed")  # the HBM error (reading it as an array would index past its end)
    value = seed
    if isinstance(seed, Tile):
        value = np.asarray(_values(seed, "seed")).reshape(-1)
        if value.size == 0:
            raise NKIError("random_seed", f"nl.random_seed: the seed tile of shape {seed.shape} is empty")
        value = value[0]
    current().rng = np.random.default_rng(int(np.asarray(value).astype(np.int64)) & 0xFFFFFFFF)


def dropout(x, rate, dtype=None, *, mask=None):
    """Zero elements of ``x`` with probability ``rate`` (``nl.dropout``), no rescaling.

    ``rate`` is a scalar or a tile broadcasting against ``x`` (per-partition rates as a
    ``[P, 1]`` tile); draws come from the program's generator (see :func:`random_seed`)."""
    v = _values(x, "x")
    r = _values(rate, "rate")
    if isinstance(rate, Tile) and rate.ndim == 1 and isinstance(x, Tile) and x.ndim > 1:
        r = np.reshape(r, np.shape(r) + (1,) * (x.ndim - 1))
    keep = _rng().random(np.shape(v)) >= np.asarray(r, dtype=np.float64)
    return _result(np.where(keep, v, 0), _out_dtype(dtype, x), mask)


def rand(shape, dtype=None, *, buffer=None, name="", mask=None):
    """A new tile of uniform random values in ``[0, 1)`` (``nl.rand``), from the program's generator."""
    tile = _allocate(shape, dtype if dtype is not None else float32, buffer, 0, name)
    tile.data[...] = dt.cast(_rng().random(tile.data.shape, dtype=np.float32), tile.dtype)
    return tile


def static_cast(x, dtype):
    """``x`` converted to ``dtype`` (``nl.static_cast``): a tile in a kernel, or a NumPy array
    outside one (as the official tests prepare inputs: ``nl.static_cast(q, nl.bfloat16)``).
    Floats round to nearest even; float to int rounds and saturates like the engines do."""
    d = dt.as_dtype(dtype)
    if isinstance(x, Tile):
        return _result(_values(x, "x"), d, engine="Scalar")
    if isinstance(x, (Access, HBMTensor)):
        _values(x, "x")  # the HBM error
    return dt.cast(np.asarray(x), d)


class finfo:
    """Machine limits of a floating dtype (``nl.finfo``), ml_dtypes' bf16/fp8 included:
    ``min``, ``max``, ``eps``, ``tiny``, ``bits``, ``dtype``."""

    def __init__(self, dtype):
        d = dt.as_dtype(dtype)
        if not dt.is_float(d):
            raise TypeError(f"nl.finfo: dtype {d} is not a floating type (use numpy.iinfo for integers)")
        import ml_dtypes

        info = ml_dtypes.finfo(d)
        self.dtype = d
        self.bits = int(info.bits)
        self.min = float(info.min)
        self.max = float(info.max)
        self.eps = float(info.eps)
        self.tiny = float(info.tiny)

    def __repr__(self):
        return f"finfo(dtype={self.dtype}, min={self.min}, max={self.max}, eps={self.eps})"


fp32 = finfo(float32)  # nl.fp32.min is the most negative fp32, the samples' -inf stand-in


def ds(start, size):
    """The index range ``start, start+1, ..., start+size-1`` (``nl.ds``, a dynamic slice); ``start``
    may be a one-element integer tile, a run-time offset (see index_expr.runtime_offset)."""
    start = _runtime_offset(start, start)
    return slice(start, start + size)


def shared_constant(constant, dtype=None):
    """An HBM tensor holding ``constant`` (``nl.shared_constant``): a NumPy array or the path of
    a ``.npy`` file, converted to ``dtype`` when given. It is read-only: stores into it raise."""
    if isinstance(constant, (str, bytes)) or hasattr(constant, "__fspath__"):
        constant = np.load(constant)
    data = np.array(constant)
    if dtype is not None:
        data = dt.cast(data, dt.as_dtype(dtype))
    data.flags.writeable = False
    t = HBMTensor(data, shared_hbm, "shared_constant")
    t.constant = True  # (compile-time data: nl.store names the rule instead of NumPy's read-only error)
    return t


def shared_identity_matrix(n, dtype=uint8):
    """An ``n`` x ``n`` identity matrix (``nl.shared_identity_matrix``), dtype "default to be np.uint8".

    The first generation's page gives it "the same behavior to nki.language.shared_constant": a
    read-only shared HBM tensor, which kernels bring on chip with ``nl.load`` (the documentation's
    modulo-allocation tests do). The standalone API's identity lives in SBUF (:func:`identity_tile`)."""
    return shared_constant(np.eye(int(n), dtype=np.float32), dtype)


def identity_tile(n, dtype=uint8):
    """An ``n`` x ``n`` identity matrix in a new SBUF tile (the standalone ``nl.shared_identity_matrix``)."""
    tile = _allocate((int(n), int(n)), dtype, sbuf, 0)
    tile.data[...] = np.eye(int(n), dtype=tile.dtype)
    return tile


def gather_flattened(data, indices, *, dtype=None, mask=None):
    """Per-partition gather (``nl.gather_flattened``): ``out[p, j...] = data[p].flatten()[indices[p, j...]]``.

    Indices are unsigned integers addressing each partition's flattened free axes; an index
    outside ``[0, free size)`` is an error, as the hardware reads another partition's data."""
    d = _need_tile(data, "data", "nl.gather_flattened")
    i = _need_tile(indices, "indices", "nl.gather_flattened")
    if not np.issubdtype(i.dtype, np.integer):
        raise NKIError("gather indices", f"nl.gather_flattened: indices of dtype {i.dtype} must be integers")
    if d.shape[0] != i.shape[0]:
        raise NKIError("gather partitions", f"nl.gather_flattened: data {d.shape} and indices {i.shape} must "
                       "have the same partition size")
    flat = np.reshape(_values(d, "data"), (d.shape[0], -1))
    idx = np.reshape(np.asarray(_values(i, "indices")).astype(np.int64), (i.shape[0], -1))
    if idx.size and (idx.min() < 0 or idx.max() >= flat.shape[1]):
        raise NKIError("gather index range", f"nl.gather_flattened: an index ({int(idx.min())}..{int(idx.max())}) "
                       f"is outside the {flat.shape[1]} elements of a partition of data {d.shape}")
    out = np.take_along_axis(flat, idx, axis=1).reshape(i.shape)
    return _result(out, _out_dtype(dtype, d), mask, engine="GpSimd")


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


def _memory_is(x, *buffers):
    buf = x if isinstance(x, Buffer) else getattr(x, "buffer", None)
    if buf is None:
        raise TypeError(f"expected an NKI tensor or memory, got {type(x).__name__}")
    return buf in buffers  # (nl's own `any` shadows the builtin here)


def is_psum(x):
    """Whether tensor (or memory) ``x`` is in PSUM (``nl.is_psum``)."""
    return _memory_is(x, psum)


def is_sbuf(x):
    """Whether tensor (or memory) ``x`` is in SBUF (``nl.is_sbuf``)."""
    return _memory_is(x, sbuf)


def is_hbm(x):
    """Whether tensor (or memory) ``x`` is in device memory, any HBM flavour (``nl.is_hbm``)."""
    return _memory_is(x, hbm, shared_hbm, private_hbm)


def is_on_chip(x):
    """Whether tensor (or memory) ``x`` is in SBUF or PSUM (``nl.is_on_chip``)."""
    return _memory_is(x, sbuf, psum)


# ---------------------------------------------------------------------------
# index expressions and SPMD
# ---------------------------------------------------------------------------
def arange(*args):
    """Index values ``start, start+step, ...`` as a 1-D affine index expression (``nl.arange``)."""
    r = range(*(int(a) for a in args))
    return AffineExpr((len(r),), r.start, (r.step,))


class _Grid(tuple):
    """Open index grid returned by ``nl.mgrid[...]``: the tuple of its axes' index arrays (so it
    indexes a tensor whole, ``in_tensor[nl.mgrid[0:128, 0:512]]``, as the pages' examples do), with
    ``.p`` / ``.x`` / ``.y`` / ``.z`` naming its axes in order (up to 4)."""

    __slots__ = ()

    def __new__(cls, arrays):
        return tuple.__new__(cls, arrays)

    def _axis(self, i, name):
        if i >= len(self):
            raise AttributeError(f"nl.mgrid of {len(self)} axes has no .{name} (axis {i})")
        return self[i]

    @property
    def p(self):
        """The partition index (first axis)."""
        return self._axis(0, "p")

    @property
    def x(self):
        """The first free index (second axis)."""
        return self._axis(1, "x")

    @property
    def y(self):
        """The second free index (third axis)."""
        return self._axis(2, "y")

    @property
    def z(self):
        """The third free index (fourth axis)."""
        return self._axis(3, "z")


class _MGrid:
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for ax, k in enumerate(key):
            r = range(0 if k.start is None else k.start, k.stop, 1 if k.step is None else k.step)
            shape, coefs = [1] * len(key), [0] * len(key)
            shape[ax], coefs[ax] = len(r), r.step
            out.append(AffineExpr(shape, r.start, coefs, own=1 << ax))
        return _Grid(tuple(out))


mgrid = _MGrid()


class nc:
    """A NeuronCore count inside ``nl.spmd_dim`` (``nl.nc(2)``)."""

    def __init__(self, n: int):
        self.n = int(n)

    def __int__(self):
        return self.n

    # The grid shorthand of the SPMD page: `nl.nc(2) * 2` is nl.spmd_dim(nl.nc(2), 2) and
    # `2 * nl.nc(2)` is nl.spmd_dim(2, nl.nc(2)) (the order decides which programs share a core).
    def __mul__(self, other):
        return spmd_dim(self, other)

    def __rmul__(self, other):
        return spmd_dim(other, self)


class spmd_dim:
    """A grid axis split across NeuronCores: its size is the product of its parts."""

    def __init__(self, *parts):
        self.parts = parts
        self.size = int(np.prod([int(p) for p in parts]))
        self.cores = int(np.prod([p.n for p in parts if isinstance(p, nc)])) if parts else 1

    def __int__(self):
        return self.size

    def __index__(self):
        return self.size


def program_id(axis: int = 0):
    """This program's index along grid ``axis`` (``nl.program_id``)."""
    prog = current()
    if prog.box is not None:
        if not 0 <= axis < prog.nb:
            raise NotBatchable("program_id axis outside the grid")
        return BExpr.program_id(axis, prog.box[axis][0], prog.bshape)
    if not prog.pid and axis == 0:
        return 0  # a kernel launched without a grid is a single program
    if not 0 <= axis < len(prog.pid):
        raise NKIError("program_id", f"axis {axis} is outside the launch grid {prog.launch.grid}")
    return prog.pid[axis]


def num_programs(axes=None):
    """Number of programs along ``axes`` (all axes when ``None``) (``nl.num_programs``)."""
    grid = current().launch.grid
    if axes is None:
        return int(np.prod(grid)) if grid else 1
    many = isinstance(axes, (tuple, list))
    sizes = []
    for a in (axes if many else (axes,)):
        if not grid and a == 0:
            sizes.append(1)  # a kernel launched without a grid is one program (program_id(0) is 0)
        elif isinstance(a, (int, np.integer)) and -len(grid) <= a < len(grid):
            sizes.append(grid[a])
        else:
            raise NKIError("num_programs", f"axis {a!r} is outside the launch grid {grid}")
    return int(np.prod(sizes)) if many else sizes[0]


def program_ndim():
    """Number of dimensions of the launch grid (``nl.program_ndim``)."""
    return len(current().launch.grid)


def _loop(kind):
    def make(start, stop=None, step=1, *, directives=None, precise_schedule=False):
        # directives= (nki.compiler.no_reorder() ...) steer scheduling only: same iterations.
        # precise_schedule=True (undocumented; the official contributed pipelined attention passes it to a
        # software-pipelined affine_range whose iteration i+1 reads what iteration i wrote) keeps the
        # iterations in program order, so they run as a sequential_range would.
        r = range(start) if stop is None else range(start, stop, step)
        return _KINDS["sequential" if kind == "affine" and precise_schedule else kind](r.start, r.stop, r.step)

    make.__name__ = f"{kind}_range"
    make.__doc__ = {
        "affine": "Loop with independent iterations (``nl.affine_range``); accumulations allowed.",
        "sequential": "Loop whose iterations run in order (``nl.sequential_range``).",
        "static": "Loop unrolled at trace time (``nl.static_range``).",
    }[kind]
    return make


class _Range:
    def __init__(self, start, stop, step, kind):
        self._r = range(start, stop, step)
        self.kind = kind

    def __iter__(self):
        if _nb():
            return iter(self._r)  # a batch's tile-level checks were made by its reference program
        # one iteration at a time, with the loop's diagnostics
        it = _diag.loop_iter(self._r, self.kind)
        # affine / sequential bodies are traced once: their placements are made once (memory.traced_loop)
        return it if self.kind == "static" else _memory.traced_loop(it)

    def __len__(self):
        return len(self._r)


_KINDS = {k: (lambda k: (lambda a, b, c: _Range(a, b, c, k)))(k) for k in ("affine", "sequential", "static")}
affine_range = _loop("affine")
sequential_range = _loop("sequential")
static_range = _loop("static")


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
            _inplace(name)(dst, self)

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
            or builtins.any(type(a) is not np.ndarray or a.dtype != dt.float32 for a in args)):
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
    if other._diag is not None or _diag.loops:
        _diag.on_read(other)
    m = other._mem
    if m is not None and m.last != m.mem.ic:  # (Tile.data's live-range touch, without computing it)
        _memory.touch(m)
    a, b = np.broadcast_to(a, cur.shape), np.broadcast_to(b, cur.shape)
    step = builtins.max(1, _BLOCK_BYTES * cur.shape[0] // builtins.max(cur.nbytes, 1)) if cur.ndim else 1
    buf = np.empty((builtins.min(step, cur.shape[0]),) + cur.shape[1:], cur.dtype) if cur.ndim else None
    for lo in range(0, cur.shape[0], step) if cur.ndim else ():
        hi = builtins.min(cur.shape[0], lo + step)
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
        if self._diag is not None or _diag.loops:
            _diag.on_accumulate(self, starts_group=fresh is not None)
        cur = self.data
        if lazy is not None and cur.ndim and _update_blocked(fn, cur, lazy):
            _prof.instruction("Vector", cur)
            if self._mem is not None:
                _memory.in_place(self._mem)
            return self
        vals = _values(other, "other")
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
        if cur.dtype == np.float32 and isinstance(fn, np.ufunc) and np.result_type(cur, vals) == np.float32 \
                and np.shape(vals) == cur.shape:
            fn(cur, vals, out=cur)  # fp32 in, fp32 out: the same values as computing then copying
        else:
            res = fn(dt.compute_view(cur), vals)
            cur[...] = dt.cast(res, cur.dtype)
        return self

    return iop


def _install_operators():
    g = globals()
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


# Ops whose code handles the leading batch axes of a vectorised batch of programs
# (nki_kernels.simulator.vectorize); every other op makes such a batch fall back to
# running its programs one at a time.
BATCH_SAFE = set(_UNARY) | set(_BINARY) | {
    "where", "sum", "mean", "max", "min", "prod", "all", "any", "var", "softmax", "matmul", "transpose",
    "ndarray", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "empty_like", "load", "store",
    "load_transpose2d", "ds",
    "copy", "broadcast_to", "expand_dims", "arange", "program_id", "num_programs", "program_ndim",
    "affine_range", "sequential_range", "static_range", "loop_reduce", "np_function", "dynamic_range"}


def _per_program_only(fn, prefix="nl"):
    """``fn`` raising NotBatchable inside a vectorised batch (it has no batched implementation)."""
    import functools

    @functools.wraps(fn)
    def op(*args, **kwargs):
        prog = current_or_none()
        if prog is not None and prog.nb:
            raise NotBatchable(f"{prefix}.{fn.__name__} runs one program at a time")
        return fn(*args, **kwargs)

    return op


def _guard_module(namespace, safe, prefix):
    """Wrap the public functions of ``namespace`` not in ``safe`` with :func:`_per_program_only`."""
    import types

    for name, fn in list(namespace.items()):
        if not name.startswith("_") and isinstance(fn, types.FunctionType) and name not in safe \
                and fn.__module__ == namespace["__name__"]:
            namespace[name] = _per_program_only(fn, prefix)


# Dynamic control flow: loops whose bounds live in registers (nisa.register_*), read at run time.
from .instructions.control import dynamic_range as _dynamic_range, fori_loop, while_loop  # noqa: E402,F401


def dynamic_range(start, stop=None, step=1):
    """A loop whose bounds may be registers (``nl.dynamic_range``), read at run time; ``step`` "must be
    a compile-time positive integer (not VirtualRegister)"."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise NKIError("dynamic_range step", "nl.dynamic_range: step must be a compile-time positive integer "
                       f"(not a VirtualRegister), got {step!r}")
    return _dynamic_range(start, stop, int(step))

from .spmd_reduce import all_reduce  # noqa: E402,F401 - a reduction over the programs of the SPMD grid

_guard_module(globals(), BATCH_SAFE, "nl")

# Implemented here for the standalone nki.language (which exports them) but listed by no
# first-generation neuronxcc.nki.language reference page (v2.20 .. v2.26), so not first-generation names.
_CURRENT_ONLY = ("abs_max", "abs_min", "any", "prelu", "is_psum", "is_sbuf", "is_hbm", "is_on_chip",
                 "gelu_apprx_sigmoid_dx", "dynamic_range", "fori_loop", "while_loop")
# The implementation's own imports and helpers: no page of either generation lists them.
_INTERNAL = ("annotations", "builtins", "math", "np", "dt", "Access", "HBMTensor", "Tile", "current", "Buffer",
             "BATCH_SAFE", "current_or_none", "mask_box", "AffineExpr", "BExpr", "Mask", "NKIError", "NotBatchable",
             "PMAX", "identity", "np_function", "full_like", "ones_like", "identity_tile")
__all__ = sorted(n for n in globals() if not n.startswith("_") and n not in _INTERNAL + _CURRENT_ONLY)
