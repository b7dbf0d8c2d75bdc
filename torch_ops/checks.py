"""Argument checks for the torch operators: clear errors naming the argument, before any kernel runs.

They use only tensor metadata (shape, dtype, device, requires_grad), so they
run unchanged on real tensors, on FakeTensors inside ``torch.compile`` and
``torch.library`` fake kernels, and on XLA lazy tensors without forcing a
graph execution.
"""

from __future__ import annotations

import math

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# What the add kernel computes exactly (nki_kernels.ADD_DTYPES).
ADD_DTYPES = FLOAT_DTYPES + (torch.int32, torch.int16, torch.int8, torch.uint8)
# Gradients flow only through the floating kernels.
GRAD_DTYPES = FLOAT_DTYPES


def _names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def require_tensor(t, name: str) -> None:
    """``t`` must be a ``torch.Tensor``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def require_dtype(t: torch.Tensor, name: str, allowed, op: str) -> None:
    """``t``'s dtype must be one of ``allowed`` (the kernel's dtypes)."""
    if t.dtype not in allowed:
        kind = "an integer" if not (t.dtype.is_floating_point or t.dtype.is_complex) else "a"
        raise TypeError(f"{name} is {kind} tensor of dtype {str(t.dtype).replace('torch.', '')}; "
                        f"{op} supports {_names(allowed)}")


def require_same_device(named: dict) -> None:
    """Every tensor in ``named`` (argument name -> tensor) must be on the same device."""
    items = list(named.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{first_name} is on {first.device} but {name} is on {t.device}; "
                             "all tensor arguments must be on the same device")


def require_same(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """``a`` and ``b`` must have equal shapes (no broadcasting) and equal dtypes."""
    if a.shape != b.shape:
        raise ValueError(f"{name_a} has shape {tuple(a.shape)} but {name_b} has shape {tuple(b.shape)}; "
                         "they must be equal (no broadcasting)")
    if a.dtype != b.dtype:
        raise TypeError(f"{name_a} has dtype {str(a.dtype).replace('torch.', '')} but {name_b} has dtype "
                        f"{str(b.dtype).replace('torch.', '')}; they must be equal")


def require_grad_dtype(named: dict) -> None:
    """Tensors that require grad must have a dtype the backward kernels handle."""
    for name, t in named.items():
        if t.requires_grad and t.dtype not in GRAD_DTYPES:
            raise TypeError(f"{name} requires grad but has dtype {str(t.dtype).replace('torch.', '')}; "
                            f"gradients are supported for {_names(GRAD_DTYPES)}")


def require_eps(eps) -> None:
    """``eps`` must be a finite, non-negative Python number (it is baked into the kernel launch)."""
    # A chained comparison rather than math.isfinite: under torch.compile(dynamic=True) a float
    # module attribute arrives as a SymFloat, which comparisons accept (NaN fails both).
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (0 <= eps < math.inf):
        raise ValueError(f"eps must be a finite non-negative Python float, got {eps!r}")


def check_add(a, b) -> None:
    """Arguments of ``add(a, b)``."""
    require_tensor(a, "a")
    require_tensor(b, "b")
    require_same_device({"a": a, "b": b})
    require_same(a, b, "a", "b")
    require_dtype(a, "a", ADD_DTYPES, "add")
    require_grad_dtype({"a": a, "b": b})


def check_rms_norm(x, weight, eps) -> None:
    """Arguments of ``rms_norm(x, weight, eps)``: normalisation over the last axis of ``x``."""
    require_tensor(x, "x")
    require_tensor(weight, "weight")
    require_same_device({"x": x, "weight": weight})
    require_dtype(x, "x", FLOAT_DTYPES, "rms_norm")
    require_dtype(weight, "weight", FLOAT_DTYPES, "rms_norm")
    if x.dim() < 1:
        raise ValueError("x must have at least 1 dimension (the normalised axis), got a 0-d tensor")
    if x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}: the normalised (last) axis must not be empty")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight has shape {tuple(weight.shape)} but x has shape {tuple(x.shape)}; "
                         f"weight must be 1-D of length x.shape[-1] = {x.shape[-1]}")
    if weight.dtype != x.dtype:
        raise TypeError(f"weight has dtype {str(weight.dtype).replace('torch.', '')} but x has dtype "
                        f"{str(x.dtype).replace('torch.', '')}; they must be equal")
    require_eps(eps)
    require_grad_dtype({"x": x, "weight": weight})


def check_rms_norm_backward(residuals, grads, eps) -> None:
    """Arguments of ``nki::rms_norm_backward``: residuals ``(x, weight, rstd)``, gradients
    ``(dy, drstd or None)``; ``dy`` like ``x``, ``rstd`` float32 of shape ``x.shape[:-1] + (1,)``."""
    if len(residuals) != 3 or len(grads) != 2:
        raise ValueError(f"nki::rms_norm_backward takes residuals [x, weight, rstd] and grads [dy, drstd or None], "
                         f"got {len(residuals)} residuals and {len(grads)} grads")
    (x, weight, rstd), (dy, _) = residuals, grads
    check_rms_norm(x, weight, eps)
    require_tensor(dy, "dy")
    require_same_device({"x": x, "dy": dy, "rstd": rstd})
    require_same(dy, x, "dy", "x")
    want = tuple(x.shape[:-1]) + (1,)
    if tuple(rstd.shape) != want or rstd.dtype != torch.float32:
        raise ValueError(f"rstd has shape {tuple(rstd.shape)} and dtype {str(rstd.dtype).replace('torch.', '')}; "
                         f"it must be the forward's float32 rstd of shape {want}")
