"""The library's differentiable ops, each declared once with :func:`nki_kernels.op`.

Every op here works on NumPy arrays (the simulator), JAX arrays (a ``custom_vjp``
op: ``jit`` / ``grad`` / ``vmap`` / sharding) and torch tensors (a
``torch.library`` op with autograd). The forward and backward callables only use
array methods (``reshape``, ``sum``), so one function serves every framework;
they check their arguments first (clear ``ValueError`` / ``TypeError`` naming the
argument) and launch the kernels of the sibling modules.

- :data:`softmax` ``(x)``: over the last axis.
- :func:`cross_entropy` ``(logits, labels, ignore_index=-100)``: mean over the
  rows whose label is not ``ignore_index``, as ``torch.nn.functional.cross_entropy``;
  built on :data:`cross_entropy_rows` (per-row losses, the op).
- :func:`residual_rms_norm` ``(x, residual, weight, eps=1e-6) -> (y, h)``.
- :func:`flash_attention` ``(q, k, v, causal=False, scale=None)``.

The ops save statistics for their backward as extra ``aux`` outputs (``rstd``,
``lse``), differentiable too (their gradients, when any flowed, enter the
backward kernels); the public functions return what their framework counterparts
return.
"""

from __future__ import annotations

import math

from .. import validation as v
from ..op import Rows, op
from .cross_entropy import IGNORE_INDEX, cross_entropy_bwd_kernel, cross_entropy_fwd_kernel
from .flash_attention import (attention_grid, flash_attention_bwd_dkdv_kernel, flash_attention_bwd_dq_kernel,
                              flash_attention_fwd_kernel, kv_grid)
from .residual_rms_norm import residual_rms_norm_bwd_kernel, residual_rms_norm_fwd_kernel
from .rows import row_grid
from .softmax import softmax_bwd_kernel, softmax_fwd_kernel

__all__ = ["softmax", "cross_entropy", "cross_entropy_rows", "residual_rms_norm", "residual_rms_norm_op",
           "flash_attention", "flash_attention_op"]

FLOATS = ("float32", "bfloat16")
LABEL_DTYPES = ("int32", "int64", "int16", "int8", "uint8")


def _rows(x):
    """``x`` as 2-D ``[rows, last axis]``."""
    shape = tuple(x.shape)
    return x.reshape((math.prod(shape[:-1]), shape[-1]))


def _require_rows(x, name):
    v.require_array(x, name)
    v.require_dtype(x, name, FLOATS)
    if len(x.shape) < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; it needs a non-empty last axis")


# --- softmax ------------------------------------------------------------------------------------

def _softmax_forward(x):
    _require_rows(x, "x")
    x2 = _rows(x)
    if x2.shape[0] == 0:
        return x * 1
    return softmax_fwd_kernel[row_grid(x2.shape[0])](x2).reshape(tuple(x.shape))


def _softmax_backward(y, dy):
    y2 = _rows(y)
    if y2.shape[0] == 0:
        return dy * 0
    return softmax_bwd_kernel[row_grid(y2.shape[0])](y2, _rows(dy)).reshape(tuple(y.shape))


softmax = op("nki::softmax", forward=_softmax_forward, backward=_softmax_backward,
             residuals=lambda inputs, outputs: (outputs[0],), partition="rows")
softmax.__doc__ = "Softmax over the last axis of ``x`` (float32 / bfloat16, any shape), fp32 statistics."


# --- cross-entropy ---------------------------------------------------------------------------------

def _cross_entropy_forward(logits, labels, ignore_index: int = IGNORE_INDEX):
    _require_rows(logits, "logits")
    v.require_array(labels, "labels")
    v.require_dtype(labels, "labels", LABEL_DTYPES)
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"labels has shape {tuple(labels.shape)} but logits has shape {tuple(logits.shape)}; "
                         f"labels must have logits' shape without the class axis, {tuple(logits.shape[:-1])}")
    x2 = _rows(logits)
    n = x2.shape[0]
    loss, lse = cross_entropy_fwd_kernel[row_grid(n)](x2, labels.reshape((n,)), ignore_index=int(ignore_index))
    return loss.reshape(tuple(labels.shape)), lse.reshape(tuple(labels.shape))


def _cross_entropy_backward(logits, labels, lse, dloss, dlse=None, ignore_index: int = IGNORE_INDEX):
    x2 = _rows(logits)
    n = x2.shape[0]
    extra = () if dlse is None else (dlse.reshape((n, 1)),)  # the saved lse's gradient, when one flowed
    g = cross_entropy_bwd_kernel[row_grid(n)](x2, labels.reshape((n,)), lse.reshape((n, 1)),
                                              dloss.reshape((n, 1)), *extra, ignore_index=int(ignore_index))
    return g.reshape(tuple(logits.shape))


cross_entropy_rows = op("nki::cross_entropy_rows", forward=_cross_entropy_forward, backward=_cross_entropy_backward,
                        residuals=lambda inputs, outputs: (inputs[0], inputs[1], outputs[1]), aux=(1,),
                        partition="rows")
cross_entropy_rows.__doc__ = ("Per-row cross-entropy ``(loss, lse)`` of ``logits`` [..., C] against integer "
                              "``labels`` [...]; ``loss`` is 0 where the label is ``ignore_index``.")


def cross_entropy(logits, labels, ignore_index=IGNORE_INDEX):
    """``torch.nn.functional.cross_entropy(logits, labels)`` (mean reduction) with the NKI kernels.

    ``logits`` [..., C] float32 / bfloat16 (vocabularies of any size are streamed),
    ``labels`` [...] integer class indices; rows labelled ``ignore_index`` count neither
    in the sum nor in the mean's denominator. The result is float32.
    """
    loss, _ = cross_entropy_rows(logits, labels, ignore_index=ignore_index)
    return loss.sum() / (labels != ignore_index).sum()


# --- residual RMSNorm -------------------------------------------------------------------------------

def _residual_rms_norm_forward(x, residual, weight, eps: float = 1e-6):
    v.require_rmsnorm_args(x, weight, eps)
    v.require_dtype(x, "x", FLOATS)
    v.require_array(residual, "residual")
    v.require_same(residual, x, "residual", "x")
    if v.dtype_name(weight) != v.dtype_name(x):
        raise TypeError(f"weight has dtype {v.dtype_name(weight)} but x has dtype {v.dtype_name(x)}; "
                        "they must be equal")
    x2 = _rows(x)
    shape = tuple(x.shape)
    y, h, rstd = residual_rms_norm_fwd_kernel[row_grid(x2.shape[0])](x2, _rows(residual), weight, eps=float(eps))
    return y.reshape(shape), h.reshape(shape), rstd.reshape(shape[:-1] + (1,))


def _residual_rms_norm_backward(h, weight, rstd, dy, dh, drstd=None):
    h2 = _rows(h)
    extra = () if drstd is None else (_rows(drstd),)  # the saved rstd's gradient, when one flowed
    dx, dw_partial = residual_rms_norm_bwd_kernel[row_grid(h2.shape[0])](h2, weight, _rows(rstd), _rows(dy),
                                                                         _rows(dh), *extra)
    dx = dx.reshape(tuple(h.shape))
    return dx, dx, dw_partial.sum(0)


residual_rms_norm_op = op("nki::residual_rms_norm", forward=_residual_rms_norm_forward,
                          backward=_residual_rms_norm_backward,
                          residuals=lambda inputs, outputs: (outputs[1], inputs[2], outputs[2]), aux=(2,),
                          partition=Rows(shared=("weight",)))


def residual_rms_norm(x, residual, weight, eps=1e-6):
    """``(y, h)``: ``h = x + residual`` (in x's dtype) and ``y = rms_norm(h) * weight``.

    The pre-norm transformer step: ``h`` is the new residual stream, ``y`` the next
    sublayer's input. ``x``, ``residual``: same shape ``(..., D)`` and dtype (float32 /
    bfloat16); ``weight``: ``(D,)``; ``eps``: a static float. Statistics in fp32.
    """
    y, h, _ = residual_rms_norm_op(x, residual, weight, eps=eps)
    return y, h


# --- flash attention ---------------------------------------------------------------------------------

def _require_attention(q, k, v_, scale):
    for name, t in (("q", q), ("k", k), ("v", v_)):
        v.require_array(t, name)
        v.require_dtype(t, name, FLOATS)
        if len(t.shape) != 4:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; attention takes (batch, heads, seq, head_dim)")
    v.require_same(v_, k, "v", "k")
    if v.dtype_name(q) != v.dtype_name(k):
        raise TypeError(f"q has dtype {v.dtype_name(q)} but k has dtype {v.dtype_name(k)}; they must be equal")
    (b, h, sq, d), (bk, hk, sk, dk) = tuple(q.shape), tuple(k.shape)
    if b != bk or d != dk:
        raise ValueError(f"q has shape {tuple(q.shape)} and k has shape {tuple(k.shape)}: batch and head_dim "
                         "must be equal")
    if hk == 0 or h % hk:
        raise ValueError(f"q has {h} heads and k has {hk}: the query heads must be a multiple of the key/value "
                         "heads (grouped-query attention)")
    if not 1 <= d <= 128:
        raise ValueError(f"head_dim is {d}; the kernels take 1 <= head_dim <= 128 (one partition tile)")
    if min(b, h, sq, sk) == 0:
        raise ValueError(f"q has shape {tuple(q.shape)} and k has shape {tuple(k.shape)}: no axis may be empty")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale)):
        raise ValueError(f"scale must be a finite Python float or None, got {scale!r}")


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _flash_attention_forward(q, k, v, causal: bool = False, scale: float | None = None):
    _require_attention(q, k, v, scale)
    grid = attention_grid(tuple(q.shape), tuple(k.shape))
    return flash_attention_fwd_kernel[grid](q, k, v, causal=bool(causal), scale=_scale(q, scale))


def _flash_attention_backward(q, k, v, o, lse, do, dlse=None, causal: bool = False, scale: float | None = None):
    kw = dict(causal=bool(causal), scale=_scale(q, scale))
    arrays = (q, k, v, o, lse, do) + (() if dlse is None else (dlse,))  # the saved lse's gradient, if any
    dq = flash_attention_bwd_dq_kernel[attention_grid(tuple(q.shape), tuple(k.shape))](*arrays, **kw)
    dk, dv = flash_attention_bwd_dkdv_kernel[kv_grid(tuple(k.shape))](*arrays, **kw)
    return dq, dk, dv


flash_attention_op = op("nki::flash_attention", forward=_flash_attention_forward, backward=_flash_attention_backward,
                        residuals="inputs+outputs", aux=(1,), partition="rows")


def flash_attention(q, k, v, causal=False, scale=None):
    """Scaled dot-product attention with the NKI flash-attention kernels.

    As ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
    scale=scale, enable_gqa=True)``: ``q`` (batch, heads, seq_q, head_dim), ``k`` / ``v``
    (batch, kv_heads, seq_k, head_dim) with heads a multiple of kv_heads, head_dim <= 128;
    ``scale`` defaults to ``1 / sqrt(head_dim)``; causal keeps key ``j`` for query ``i``
    when ``j <= i``. float32 / bfloat16, softmax statistics in fp32.
    """
    return flash_attention_op(q, k, v, causal=causal, scale=scale)[0]
