"""Float64 NumPy references (values and analytic gradients) for the kernel library tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
# Max error relative to the reference's magnitude: a few ulps of the output dtype.
TOL = {"float32": 3e-5, "bfloat16": 2e-2}


def f64(a):
    """``a`` as float64 NumPy (from NumPy, bf16, JAX or torch)."""
    if hasattr(a, "detach"):
        a = a.detach().float().numpy()
    return np.asarray(a).astype(np.float64)


def close(got, ref, dtype, scale=None, what="value"):
    """Assert ``max|got - ref| <= TOL[dtype] * scale``; scale is at least the reference's max magnitude."""
    got = f64(got)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    scale = max(np.abs(ref).max() if ref.size else 0.0, 0.0 if scale is None else scale) + 1e-12
    err = np.abs(got - ref).max() / scale if ref.size else 0.0
    assert err <= TOL[dtype], f"{what}: max relative error {err:.3g} > {TOL[dtype]}"


def softmax(x):
    x = f64(x)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def softmax_grad(x, dy):
    y = softmax(x)
    dy = f64(dy)
    return y * (dy - (dy * y).sum(-1, keepdims=True))


def logsumexp(x):
    x = f64(x)
    m = x.max(-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]


def cross_entropy_rows(logits, labels, ignore_index=-100):
    """Per-row losses (0 where ignored) of 2-D ``logits`` and 1-D ``labels``."""
    x = f64(logits)
    labels = np.asarray(labels)
    valid = labels != ignore_index
    picked = x[np.arange(len(labels)), np.where(valid, labels, 0)]
    return np.where(valid, logsumexp(x) - picked, 0.0)


def cross_entropy(logits, labels, ignore_index=-100):
    """``torch.nn.functional.cross_entropy`` (mean over non-ignored rows)."""
    return cross_entropy_rows(logits, labels, ignore_index).sum() / (np.asarray(labels) != ignore_index).sum()


def cross_entropy_rows_grad(logits, labels, dloss, ignore_index=-100, dlse=None):
    """Gradient of the per-row losses for upstream row gradients ``dloss`` [N] (and ``dlse`` [N] of the lse)."""
    x = f64(logits)
    labels = np.asarray(labels)
    valid = labels != ignore_index
    onehot = np.zeros_like(x)
    onehot[np.arange(len(labels)), np.where(valid, labels, 0)] = 1.0
    extra = 0.0 if dlse is None else softmax(x) * f64(dlse)[:, None]
    return (softmax(x) - onehot) * (f64(dloss) * valid)[:, None] + extra


def residual_rms_norm(x, residual, w, eps, dtype):
    """``(y, h, rstd)`` with ``h = x + residual`` rounded to ``dtype`` (as the frameworks do)."""
    h = f64(np.asarray(f64(x) + f64(residual)).astype(DTYPES[dtype]))
    rstd = 1.0 / np.sqrt((h * h).mean(-1, keepdims=True) + eps)
    return h * rstd * f64(w), h, rstd


def rms_norm_grad(h, w, rstd, dy, drstd=None):
    """``(dh, dw)`` of ``y = h * rstd * w`` (rstd depending on h; ``drstd`` [..., 1]: gradient of rstd too)."""
    hhat, g = h * rstd, f64(dy) * f64(w)
    dh = rstd * (g - hhat * (g * hhat).mean(-1, keepdims=True))
    if drstd is not None:  # rstd = (mean(h**2) + eps)**-0.5
        dh = dh - f64(drstd) * rstd ** 3 * h / h.shape[-1]
    return dh, (f64(dy) * hhat).reshape(-1, h.shape[-1]).sum(0)


def attention(q, k, v, causal=False, scale=None):
    """``(o, lse, p)`` of scaled dot-product attention, grouped k/v heads repeated."""
    q, k, v = f64(q), f64(k), f64(v)
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, 1), np.repeat(v, group, 1)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.swapaxes(-1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
    lse = logsumexp(s)
    p = np.exp(s - lse[..., None])
    return p @ v, lse, p


def attention_grad(q, k, v, do, causal=False, scale=None, dlse=None):
    """``(dq, dk, dv)`` of :func:`attention` (and of its lse, given ``dlse`` [..., Sq]), k/v summed per group."""
    _, _, p = attention(q, k, v, causal, scale)
    group = q.shape[1] // k.shape[1]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    kk, vv, do = np.repeat(f64(k), group, 1), np.repeat(f64(v), group, 1), f64(do)
    dv = p.swapaxes(-1, -2) @ do
    dp = do @ vv.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True) + (0.0 if dlse is None else f64(dlse)[..., None]))
    dq = ds @ kk * scale
    dk = ds.swapaxes(-1, -2) @ f64(q) * scale
    b, hkv = k.shape[:2]
    fold = lambda g: g.reshape(b, hkv, group, *g.shape[2:]).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)
