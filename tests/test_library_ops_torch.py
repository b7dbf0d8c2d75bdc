"""The library ops in PyTorch against torch.nn.functional in float64: values, gradients, modules."""

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torch_ops

from . import library_refs as R

TDT = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _rand(shape, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(TDT[dtype]).requires_grad_()


def _double(*ts):
    return [t.detach().double().requires_grad_() for t in ts]


def _grads(out, inputs, cts):
    """Gradients of ``sum(out_i * ct_i)`` (float64 cotangents cast to each output's dtype)."""
    outs = out if isinstance(out, tuple) else (out,)
    return torch.autograd.grad(outs, inputs, [c.to(o.dtype) for o, c in zip(outs, cts)])


@pytest.mark.parametrize("dtype", list(TDT))
@pytest.mark.parametrize("shape,dim", [((5,), 0), ((7, 300), -1), ((2, 65, 129), 1), ((130, 2500), -1)])
def test_softmax_and_module(shape, dim, dtype):
    x = _rand(shape, dtype, 3.0, seed=sum(shape))
    ct = torch.randn(shape, dtype=torch.float64)
    y = torch_ops.Softmax(dim=dim)(x)
    assert y.dtype == x.dtype
    (xd,) = _double(x)
    yd = nn.Softmax(dim=dim)(xd)
    R.close(y, R.f64(yd), dtype)
    R.close(_grads(y, [x], [ct])[0], R.f64(_grads(yd, [xd], [ct])[0]), dtype)


@pytest.mark.parametrize("dtype", list(TDT))
@pytest.mark.parametrize("shape", [(1, 1), (4, 7), (70, 1000), (3, 9, 33), (6, 40000)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_and_module(shape, reduction, dtype):
    logits = _rand(shape, dtype, 4.0, seed=sum(shape))
    classes = shape[1] if len(shape) > 1 else shape[0]
    target_shape = (shape[0],) + tuple(shape[2:])
    g = torch.Generator().manual_seed(1)
    target = torch.randint(0, classes, target_shape, generator=g)
    target.view(-1)[1::4] = -100
    loss = torch_ops.CrossEntropyLoss(reduction=reduction)(logits, target)
    (ld,) = _double(logits)
    ref = nn.CrossEntropyLoss(reduction=reduction)(ld, target)
    assert loss.shape == ref.shape and loss.dtype == logits.dtype
    R.close(loss, R.f64(ref), dtype, scale=R.f64(ref).__abs__().max() + 1.0)
    ct = torch.randn(ref.shape, dtype=torch.float64)
    R.close(_grads(loss, [logits], [ct])[0], R.f64(_grads(ref, [ld], [ct])[0]), dtype)


def test_cross_entropy_ignore_index_and_unsupported_options():
    logits = _rand((10, 5), "float32", seed=3)
    target = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    got = torch_ops.cross_entropy(logits, target, ignore_index=2)
    R.close(got, R.f64(F.cross_entropy(logits.double(), target, ignore_index=2)), "float32")
    with pytest.raises(ValueError, match="label_smoothing"):
        torch_ops.CrossEntropyLoss(label_smoothing=0.1)
    with pytest.raises(ValueError, match="weight"):
        torch_ops.CrossEntropyLoss(weight=torch.ones(5))
    with pytest.raises(TypeError, match="class-index"):
        torch_ops.cross_entropy(logits, torch.softmax(logits.detach(), -1))


@pytest.mark.parametrize("dtype", list(TDT))
@pytest.mark.parametrize("shape", [(1, 1), (5, 300), (2, 70, 513), (3, 17000)])
def test_residual_rms_norm(shape, dtype):
    x, res = _rand(shape, dtype, seed=1), _rand(shape, dtype, seed=2)
    w = _rand(shape[-1:], dtype, seed=3)
    y, h = torch_ops.residual_rms_norm(x, res, w, eps=1e-6)
    assert y.dtype == h.dtype == x.dtype
    # The reference normalises h rounded to the input dtype, as the op (and x + residual in torch) does.
    h_ref = (x + res).detach().double().requires_grad_()
    (wd,) = _double(w)
    y_ref = F.rms_norm(h_ref, (shape[-1],), wd, 1e-6)
    np.testing.assert_array_equal(R.f64(h), R.f64(h_ref))
    R.close(y, R.f64(y_ref), dtype)
    cts = [torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)]
    dx, dres, dw = _grads((y, h), [x, res, w], cts)
    dh_ref, dw_ref = torch.autograd.grad((y_ref, h_ref), [h_ref, wd], cts)
    rstd = 1 / np.sqrt((R.f64(h_ref) ** 2).mean(-1, keepdims=True) + 1e-6)
    terms = (rstd * np.abs(R.f64(cts[0]) * R.f64(w))).max() + np.abs(R.f64(cts[1])).max()
    R.close(dx, R.f64(dh_ref), dtype, scale=terms, what="dx")
    R.close(dres, R.f64(dh_ref), dtype, scale=terms, what="dresidual")
    R.close(dw, R.f64(dw_ref), dtype, scale=np.abs(R.f64(dw_ref)).max() + np.abs(R.f64(cts[0])).max(), what="dw")


@pytest.mark.parametrize("dtype", list(TDT))
@pytest.mark.parametrize("b,h,hkv,sq,sk,d,causal", [
    (1, 1, 1, 1, 1, 8, False),
    (2, 4, 2, 70, 90, 16, True),
    (1, 2, 1, 130, 600, 32, False),
    (1, 2, 2, 150, 150, 64, True),
])
def test_flash_attention(b, h, hkv, sq, sk, d, causal, dtype):
    q, k, v = _rand((b, h, sq, d), dtype, seed=1), _rand((b, hkv, sk, d), dtype, seed=2), \
        _rand((b, hkv, sk, d), dtype, seed=3)
    o = torch_ops.flash_attention(q, k, v, causal=causal)
    assert o.dtype == q.dtype
    qd, kd, vd = _double(q, k, v)
    o_ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, enable_gqa=True)
    R.close(o, R.f64(o_ref), dtype)
    ct = torch.randn(o.shape, dtype=torch.float64)
    want = [R.f64(g) for g in _grads(o_ref, [qd, kd, vd], [ct])]
    floor = max(np.abs(g).max() for g in want)  # a vanishing gradient (one key: dq = 0) on the others' scale
    for got, ref, name in zip(_grads(o, [q, k, v], [ct]), want, ("dq", "dk", "dv")):
        assert got.dtype == q.dtype
        R.close(got, ref, dtype, scale=floor * 0.1, what=name)


def test_flash_attention_scale():
    q, k, v = (_rand((1, 2, 40, 16), "float32", seed=s) for s in range(3))
    want = F.scaled_dot_product_attention(*_double(q, k, v), scale=0.3)
    R.close(torch_ops.flash_attention(q, k, v, scale=0.3), R.f64(want), "float32")


def test_library_ops_compile_without_graph_breaks():
    """The ops are torch.library custom ops: torch.compile(fullgraph=True) traces through them."""
    x, r = _rand((6, 40), "float32", seed=1), _rand((6, 40), "float32", seed=2)
    w = _rand((40,), "float32", seed=3)
    target = torch.tensor([0, 1, 2, 3, 4, 5])

    def f(x, r, w):
        y, h = torch_ops.residual_rms_norm(x, r, w)
        return torch_ops.cross_entropy(torch_ops.softmax(y, -1) + h, target)

    compiled = torch.compile(f, fullgraph=True)
    R.close(compiled(x, r, w), R.f64(f(x, r, w)), "float32")


def test_saved_statistics_are_differentiable():
    """The ops' aux outputs (lse) carry gradients in torch too."""
    from nki_kernels.library import ops as L

    logits = _rand((9, 130), "float32", 3.0, seed=4)
    labels = torch.arange(9, dtype=torch.int32)
    (lse,) = L.cross_entropy_rows(logits, labels)[1:]
    (ld,) = _double(logits)
    ct = torch.randn(9, dtype=torch.float64)
    R.close(_grads(lse, [logits], [ct])[0], R.f64(_grads(torch.logsumexp(ld, -1), [ld], [ct])[0]), "float32")

    q, k, v = _rand((1, 2, 70, 16), "float32", seed=5), _rand((1, 1, 90, 16), "float32", seed=6), \
        _rand((1, 1, 90, 16), "float32", seed=7)
    lse = L.flash_attention_op(q, k, v, causal=True)[1]
    qd, kd = _double(q, k)
    s = qd @ kd.repeat_interleave(2, 1).transpose(-1, -2) / 4.0
    s = s.masked_fill(~torch.ones(70, 90, dtype=torch.bool).tril(), float("-inf"))
    ct = torch.randn(lse.shape, dtype=torch.float64)
    want = _grads(torch.logsumexp(s, -1, keepdim=True), [qd, kd], [ct])
    for g, r in zip(_grads(lse, [q, k], [ct]), want):
        R.close(g, R.f64(r), "float32")
