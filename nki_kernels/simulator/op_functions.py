"""The NumPy function of each ``nl`` operator: the element-wise math of the first generation's
``nl`` functions, and what an ``op=`` argument (``nl.add``, ``np.add``, ``nl.exp`` ...) computes.

Pure NumPy: the instructions, the LNC collectives and the ``nl`` front end all look operators up here.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import NKIError


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
