"""Operators given as ``op=``: the NumPy function behind an operator identifier, as an ALU
operation or as a reduction.

* :func:`alu`: ``nl.*`` and ``np.*`` names of the "Supported Math Operators" table, ``nl.max`` /
  ``np.max`` / ``np.min`` / ``np.sum`` as their pairwise forms, ``nl.copy`` / ``np.copy`` as the
  identity (looked up once per operator object);
* :func:`reducer` / :func:`identity_of`: the reduction of an operator, and its identity element;
* :data:`BITVEC`, :func:`is_bitvec`, :func:`bitvec_on_integers`: the bitvec operators and their
  rule (integer tiles only).

:mod:`.operands` re-exports these names.
"""

from __future__ import annotations

import numpy as np

from .. import op_functions as _op_functions
from ..core import Tile
from ..errors import NKIError


def _identity(x):
    return np.array(x, copy=True)


# NumPy reductions and copies the "Supported Math Operators" / activation tables list as
# operator identifiers: as an ALU operator a reduction is its pairwise form.
_NUMPY_ALIASES = {np.max: np.maximum, np.amax: np.maximum, np.min: np.minimum, np.amin: np.minimum,
                  np.sum: np.add, np.prod: np.multiply, np.copy: _identity}
_NL_REDUCTIONS = {"max": np.maximum, "min": np.minimum, "sum": np.add, "prod": np.multiply}


_ALU = {}  # operator identifier -> its NumPy function (identifiers are module-level functions)


def alu(op):
    """The NumPy function behind an operator identifier (``nl.add``, ``np.add``, ``nl.max``,
    ``np.max``, ``np.sum``, ``nl.copy``, ``np.copy``, ``nl.exp`` ...)."""
    if isinstance(op, Tile):  # (not a key: Tile overloads ==)
        return _alu(op)
    try:
        fn = _ALU.get(op)
    except TypeError:  # an unhashable operator object: looked up every time
        return _alu(op)
    if fn is None:
        fn = _alu(op)
        if len(_ALU) < 1024:
            _ALU[op] = fn
    return fn


def _alu(op):
    if op is None:
        raise NKIError("op", "an operator is required here (nl.add, nl.maximum, ...)")
    try:
        alias = _NUMPY_ALIASES.get(op)
    except TypeError:
        alias = None
    if alias is not None:
        return alias
    name = getattr(op, "__name__", None)
    mod = getattr(op, "__module__", "") or ""
    if name in _NL_REDUCTIONS and "nki_kernels" in mod:
        return _NL_REDUCTIONS[name]
    if name in ("copy", "identity", "bypass") and "nki_kernels" in mod:
        return _identity
    return _op_functions.np_function(op)


# The bitvec operators of the "Supported Math Operators" table (by their NumPy functions): they treat
# elements as bit patterns, so the instructions that take them need integer tiles.
BITVEC = frozenset({np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert, np.left_shift, np.right_shift})


def is_bitvec(op) -> bool:
    """Whether operator ``op`` (``nl.bitwise_and``, ``np.left_shift`` ...) is a bitvec operator."""
    return op is not None and alu(op) in BITVEC


def bitvec_on_integers(op, opname, *tiles):
    """The pages' rule for bitvec operators (tensor_scalar, tensor_tensor, tensor_reduce): "the
    input/output data types must be integer types" (elements are bit patterns, never cast). ``tiles``
    are ``(what, tile)`` pairs; scalars are skipped."""
    for what, t in tiles:
        if isinstance(t, Tile) and t.dtype.kind not in "iu":
            raise NKIError("bitvec dtype", f"nisa.{opname}: op {getattr(op, '__name__', op)} is a bitvec operator "
                           f"but {what} (shape {t.shape}) has dtype {t.dtype}; with bitvec operators the input/output "
                           "data types must be integer types")


_REDUCERS = {np.add: np.sum, np.maximum: np.max, np.minimum: np.min, np.multiply: np.prod}
V4_OPERATORS = ("abs_max", "abs_min")  # ALU operators of NeuronCore-v4 ("trn3 only", NKI 0.4.0 release notes)


def v4_operator(op):
    """The name of ``op`` when it is ``nl.abs_max`` / ``nl.abs_min`` (NeuronCore-v4 operators), else ``None``."""
    name = getattr(op, "__name__", None)
    return name if name in V4_OPERATORS and "nki_kernels" in (getattr(op, "__module__", "") or "") else None


def _magnitude_reduction(larger):
    """The reduction of ``abs_max`` (``larger``) / ``abs_min``: the signed element of largest (smallest)
    magnitude. The pairwise operator keeps ``x`` only when ``|x|`` is strictly beyond ``|y|`` (the
    page: "x if |x| > |y|, else y"), so a fold from the left gives a tie to the later element."""

    def reduce(values, axis=-1, keepdims=False):
        v = np.asarray(values)
        mag = np.flip(np.abs(v), axis)
        last = v.shape[axis] - 1 - (np.argmax(mag, axis) if larger else np.argmin(mag, axis))
        out = np.take_along_axis(v, np.expand_dims(last, axis), axis)
        return out if keepdims else np.squeeze(out, axis)

    return reduce


_MAGNITUDE_REDUCERS = {"abs_max": _magnitude_reduction(True), "abs_min": _magnitude_reduction(False)}


def reducer(op):
    """``f(values, axis=..., keepdims=...)`` reducing with operator ``op`` (``nl.add``, ``np.max`` ...)."""
    name = v4_operator(op)
    if name is not None:  # (activate2's reduce_op takes them: "nl.abs_max, nl.abs_min")
        return _MAGNITUDE_REDUCERS[name]
    fn = alu(op)
    if fn in _REDUCERS:
        return _REDUCERS[fn]
    if getattr(fn, "__name__", None) == "average" and "nki_kernels" in (getattr(fn, "__module__", "") or ""):
        return fn  # nl.average: a reduction operator only (the mean), no pairwise form
    if isinstance(fn, np.ufunc) and fn.nin == 2:
        return fn.reduce
    raise NKIError("op", f"{op!r} cannot be used as a reduction operator (use nl.add, nl.maximum, nl.minimum, "
                   "np.sum, np.max, ...)")


def identity_of(op):
    """The reduction identity of ``op`` (0 for add, 1 for multiply, -inf for max, +inf for min; 0 for
    abs_max and +inf for abs_min, the magnitudes every value reaches)."""
    name = v4_operator(op)
    if name is not None:
        return 0.0 if name == "abs_max" else np.inf
    fn = alu(op if op is not None else np.add)
    return {np.multiply: 1.0, np.maximum: -np.inf, np.minimum: np.inf}.get(fn, 0.0)
