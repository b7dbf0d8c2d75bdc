"""Input checks at the public callers: clear errors naming the argument, before any kernel runs.

Framework-neutral: works on NumPy arrays, JAX arrays/tracers and torch tensors
(anything with ``.shape`` and ``.dtype``).
"""

from __future__ import annotations

import math

FLOAT_DTYPES = ("float32", "bfloat16", "float16")


def dtype_name(x) -> str:
    """The dtype of ``x`` as a plain name (``float32``, ``bfloat16``, ...), any framework."""
    name = str(x.dtype)
    return name.split(".")[-1]  # torch.float32 -> float32


def require_array(x, name: str) -> None:
    """``x`` must be an array/tensor (have ``shape`` and ``dtype``)."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise TypeError(f"{name} must be an array or tensor, got {type(x).__name__}")


def require_dtype(x, name: str, allowed=FLOAT_DTYPES) -> None:
    """``x``'s dtype must be one of ``allowed``."""
    if dtype_name(x) not in allowed:
        raise TypeError(f"{name} has dtype {dtype_name(x)}; supported dtypes are {', '.join(allowed)}")


def require_same(a, b, name_a: str, name_b: str) -> None:
    """``a`` and ``b`` must have the same shape and dtype."""
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{name_a} has shape {tuple(a.shape)} but {name_b} has shape {tuple(b.shape)}; "
                         "they must be equal (no broadcasting)")
    if dtype_name(a) != dtype_name(b):
        raise TypeError(f"{name_a} has dtype {dtype_name(a)} but {name_b} has dtype {dtype_name(b)}; "
                        "they must be equal")


def require_rmsnorm_args(x, weight, eps) -> None:
    """Checks for RMSNorm over the last axis of ``x`` with a 1-D ``weight``."""
    require_array(x, "x")
    require_array(weight, "weight")
    require_dtype(x, "x")
    require_dtype(weight, "weight")
    if len(x.shape) < 1:
        raise ValueError("x must have at least 1 dimension (the normalised axis), got a scalar")
    if len(weight.shape) != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight has shape {tuple(weight.shape)} but x has shape {tuple(x.shape)}; "
                         f"weight must be 1-D of length x.shape[-1] = {x.shape[-1]}")
    if x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}: the normalised (last) axis must not be empty")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite non-negative Python float, got {eps!r}")
