"""The library's NKI kernels on the simulator against float64 NumPy references (values and gradients)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki_kernels as K
from nki_kernels.library import cross_entropy as ce
from nki_kernels.library import flash_attention as fa
from nki_kernels.library import residual_rms_norm as rrn
from nki_kernels.library import softmax as sm
from nki_kernels.library.rows import row_grid

from . import library_refs as R

ROW_SHAPES = [(1, 1), (5, 7), (127, 300), (129, 513), (300, 2049), (130, 9000)]


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(R.DTYPES[dtype])


@pytest.mark.parametrize("dtype", list(R.DTYPES))
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_softmax_forward_and_backward(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x, dy = _rand(rng, shape, dtype, 3.0), _rand(rng, shape, dtype)
    y = sm.softmax_fwd_kernel[row_grid(shape[0])](x)
    assert y.dtype == x.dtype
    R.close(y, R.softmax(x), dtype)
    # The backward from the kernel's own (rounded) output: reference from the same y.
    dx = sm.softmax_bwd_kernel[row_grid(shape[0])](y, dy)
    y64, dy64 = R.f64(y), R.f64(dy)
    R.close(dx, y64 * (dy64 - (dy64 * y64).sum(-1, keepdims=True)), dtype)
    R.close(dx, R.softmax_grad(x, dy), dtype, scale=np.abs(R.softmax_grad(x, dy)).max() * 4)


def test_softmax_long_rows_stream():
    """A row longer than the resident budget (fp32 30000) streams from HBM once per pass."""
    rng = np.random.default_rng(3)
    x = _rand(rng, (3, 30000), "float32", 5.0)
    R.close(sm.softmax_fwd_kernel[row_grid(3)](x), R.softmax(x), "float32")


@pytest.mark.parametrize("dtype", list(R.DTYPES))
@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (129, 1000), (200, 5000), (7, 50257)])
def test_cross_entropy_forward_and_backward(shape, dtype):
    n, v = shape
    rng = np.random.default_rng(n * 7 + v)
    logits = _rand(rng, shape, dtype, 4.0)
    labels = rng.integers(0, v, n).astype(np.int32)
    labels[::5] = -100  # ignored rows
    loss, lse = ce.cross_entropy_fwd_kernel[row_grid(n)](logits, labels)
    assert loss.shape == (n, 1) and lse.dtype == np.float32
    ref = R.cross_entropy_rows(logits, labels)
    R.close(loss[:, 0], ref, "float32", scale=np.abs(ref).max() + 1.0)
    R.close(lse[:, 0], R.logsumexp(logits), "float32", scale=np.abs(R.logsumexp(logits)).max())
    dloss = rng.standard_normal((n, 1)).astype(np.float32)
    g = ce.cross_entropy_bwd_kernel[row_grid(n)](logits, labels, lse, dloss)
    assert g.dtype == logits.dtype and g.shape == shape
    R.close(g, R.cross_entropy_rows_grad(logits, labels, dloss[:, 0]), dtype)


def test_cross_entropy_custom_ignore_index():
    rng = np.random.default_rng(5)
    logits = _rand(rng, (9, 20), "float32")
    labels = rng.integers(0, 20, 9).astype(np.int32)
    labels[2] = 3
    loss, _ = ce.cross_entropy_fwd_kernel[row_grid(9)](logits, labels, ignore_index=3)
    R.close(loss[:, 0], R.cross_entropy_rows(logits, labels, ignore_index=3), "float32")
    assert loss[2, 0] == 0.0


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 260), v=st.integers(1, 4500))
def test_cross_entropy_any_shape(n, v):
    rng = np.random.default_rng(n * 31 + v)
    logits = _rand(rng, (n, v), "float32", 3.0)
    labels = rng.integers(0, v, n).astype(np.int32)
    loss, lse = ce.cross_entropy_fwd_kernel[row_grid(n)](logits, labels)
    R.close(loss[:, 0], R.cross_entropy_rows(logits, labels), "float32", scale=np.abs(loss).max() + 1.0)
    dloss = np.ones((n, 1), np.float32) / n
    g = ce.cross_entropy_bwd_kernel[row_grid(n)](logits, labels, lse, dloss)
    R.close(g, R.cross_entropy_rows_grad(logits, labels, dloss[:, 0]), "float32")


def _residual_case(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x, res = _rand(rng, shape, dtype), _rand(rng, shape, dtype)
    w = _rand(rng, shape[-1:], dtype)
    return rng, x, res, w


@pytest.mark.parametrize("dtype", list(R.DTYPES))
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_residual_rms_norm_forward_and_backward(shape, dtype):
    rng, x, res, w = _residual_case(shape, dtype, sum(shape) + 1)
    y, h, rstd = rrn.residual_rms_norm_fwd_kernel[row_grid(shape[0])](x, res, w, eps=1e-6)
    y_ref, h_ref, rstd_ref = R.residual_rms_norm(x, res, w, 1e-6, dtype)
    np.testing.assert_array_equal(R.f64(h), h_ref)  # one rounding of the exact sum
    R.close(y, y_ref, dtype)
    R.close(rstd, rstd_ref, "float32")
    dy, dh = _rand(rng, shape, dtype), _rand(rng, shape, dtype)
    dx, dw_partial = rrn.residual_rms_norm_bwd_kernel[row_grid(shape[0])](h, w, rstd, dy, dh)
    dh_ref, dw_ref = R.rms_norm_grad(h_ref, w, rstd_ref, dy)
    terms = (rstd_ref * np.abs(R.f64(dy) * R.f64(w))).max() + np.abs(R.f64(dh)).max()
    R.close(dx, dh_ref + R.f64(dh), dtype, scale=terms)
    R.close(dw_partial.sum(0), dw_ref, dtype, scale=np.abs(dw_ref).max() + np.abs(R.f64(dy)).max())


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 300), d=st.integers(1, 2600), eps=st.sampled_from([0.0, 1e-6, 1e-2]))
def test_residual_rms_norm_any_shape(n, d, eps):
    _, x, res, w = _residual_case((n, d), "float32", n * 13 + d)
    x = x + np.float32(0.1)  # keep rows away from all-zero when eps is 0
    y, h, _ = rrn.residual_rms_norm_fwd_kernel[row_grid(n)](x, res, w, eps=eps)
    y_ref, _, _ = R.residual_rms_norm(x, res, w, eps, "float32")
    R.close(y, y_ref, "float32")


@pytest.mark.parametrize("dtype", list(R.DTYPES))
@pytest.mark.parametrize("hidden", [16384, 20000])
def test_rms_norm_hidden_beyond_sbuf_streams(hidden, dtype):
    """fp32 hidden 16384 exceeded the 192 KiB SBUF when kept resident; it now streams."""
    rng = np.random.default_rng(hidden)
    x, w = _rand(rng, (130, hidden), dtype), _rand(rng, (hidden,), dtype)
    y_ref, _, rstd = R.residual_rms_norm(x, np.zeros_like(x), w, 1e-6, dtype)
    R.close(K.rms_norm(x, w, eps=1e-6), y_ref, dtype)
    dy = _rand(rng, (130, hidden), dtype)
    dx, dw = K.rms_norm_backward(dy, x, w, eps=1e-6)
    dx_ref, dw_ref = R.rms_norm_grad(R.f64(x), w, rstd, dy)
    R.close(dx, dx_ref, dtype, scale=(rstd * np.abs(R.f64(dy) * R.f64(w))).max())
    R.close(dw, dw_ref, dtype, scale=np.abs(dw_ref).max() + np.abs(R.f64(dy)).max())


def _attention_case(b, h, hkv, sq, sk, d, dtype, seed):
    rng = np.random.default_rng(seed)
    q = _rand(rng, (b, h, sq, d), dtype)
    k = _rand(rng, (b, hkv, sk, d), dtype)
    v = _rand(rng, (b, hkv, sk, d), dtype)
    return rng, q, k, v


def _check_attention(b, h, hkv, sq, sk, d, causal, dtype, seed, scale=None):
    rng, q, k, v = _attention_case(b, h, hkv, sq, sk, d, dtype, seed)
    sc = 1.0 / np.sqrt(d) if scale is None else scale
    grid = fa.attention_grid(q.shape, k.shape)
    o, lse = fa.flash_attention_fwd_kernel[grid](q, k, v, causal=causal, scale=sc)
    o_ref, lse_ref, _ = R.attention(q, k, v, causal, sc)
    assert o.dtype == q.dtype and lse.shape == (b, h, sq, 1)
    R.close(o, o_ref, dtype)
    R.close(lse[..., 0], lse_ref, "float32", scale=np.abs(lse_ref).max() + 1.0)
    do = _rand(rng, o.shape, dtype)
    dq = fa.flash_attention_bwd_dq_kernel[grid](q, k, v, o, lse, do, causal=causal, scale=sc)
    dk, dv = fa.flash_attention_bwd_dkdv_kernel[fa.kv_grid(k.shape)](q, k, v, o, lse, do, causal=causal, scale=sc)
    want = R.attention_grad(q, k, v, do, causal, sc)
    floor = max(np.abs(g).max() for g in want)  # a vanishing gradient (one key: dq = 0) on the others' scale
    for got, ref, name in zip((dq, dk, dv), want, ("dq", "dk", "dv")):
        assert got.dtype == q.dtype
        R.close(got, ref, dtype, scale=floor * 0.1, what=name)


@pytest.mark.parametrize("dtype", list(R.DTYPES))
@pytest.mark.parametrize("b,h,hkv,sq,sk,d,causal", [
    (1, 1, 1, 1, 1, 1, False),
    (1, 2, 1, 130, 600, 16, False),   # GQA, ragged query tile, two key tiles (512 + 88)
    (2, 2, 2, 200, 200, 32, True),
    (1, 4, 2, 77, 77, 8, True),       # GQA causal
    (1, 1, 1, 300, 520, 128, True),   # head_dim 128, queries shorter than keys
    (1, 3, 3, 150, 40, 64, True),     # more queries than keys (causal rows with every key)
])
def test_flash_attention(b, h, hkv, sq, sk, d, causal, dtype):
    _check_attention(b, h, hkv, sq, sk, d, causal, dtype, seed=b + h + sq + sk + d)


def test_flash_attention_custom_scale():
    _check_attention(1, 2, 2, 65, 130, 16, True, "float32", seed=9, scale=0.9)


@settings(max_examples=10, deadline=None)
@given(b=st.integers(1, 2), hkv=st.integers(1, 2), group=st.integers(1, 3), sq=st.integers(1, 200),
       sk=st.integers(1, 600), d=st.sampled_from([1, 8, 24, 64]), causal=st.booleans())
def test_flash_attention_any_shape(b, hkv, group, sq, sk, d, causal):
    _check_attention(b, hkv * group, hkv, sq, sk, d, causal, "float32", seed=sq * 1000 + sk)


def test_gradients_of_the_saved_statistics():
    """lse / rstd are op outputs too: their gradients enter the backward kernels."""
    rng = np.random.default_rng(11)
    logits = _rand(rng, (130, 700), "float32", 3.0)
    labels = rng.integers(0, 700, 130).astype(np.int32)
    labels[::7] = -100
    _, lse = ce.cross_entropy_fwd_kernel[row_grid(130)](logits, labels)
    dloss, dlse = (rng.standard_normal((130, 1)).astype(np.float32) for _ in range(2))
    g = ce.cross_entropy_bwd_kernel[row_grid(130)](logits, labels, lse, dloss, dlse)
    R.close(g, R.cross_entropy_rows_grad(logits, labels, dloss[:, 0], dlse=dlse[:, 0]), "float32")

    _, x, res, w = _residual_case((130, 300), "float32", 12)
    y, h, rstd = rrn.residual_rms_norm_fwd_kernel[row_grid(130)](x, res, w)
    dy, dh = _rand(rng, (130, 300), "float32"), _rand(rng, (130, 300), "float32")
    drstd = rng.standard_normal((130, 1)).astype(np.float32)
    dx, _ = rrn.residual_rms_norm_bwd_kernel[row_grid(130)](h, w, rstd, dy, dh, drstd)
    dh_ref, _ = R.rms_norm_grad(R.f64(h), w, R.f64(rstd), dy, drstd=drstd)
    R.close(dx, dh_ref + R.f64(dh), "float32")

    _, q, k, v = _attention_case(1, 4, 2, 140, 200, 16, "float32", 13)
    grid = fa.attention_grid(q.shape, k.shape)
    o, lse = fa.flash_attention_fwd_kernel[grid](q, k, v, causal=True, scale=0.25)
    do, dlse = _rand(rng, o.shape, "float32"), _rand(rng, lse.shape, "float32")
    dq = fa.flash_attention_bwd_dq_kernel[grid](q, k, v, o, lse, do, dlse, causal=True, scale=0.25)
    dk, dv = fa.flash_attention_bwd_dkdv_kernel[fa.kv_grid(k.shape)](q, k, v, o, lse, do, dlse, causal=True,
                                                                     scale=0.25)
    want = R.attention_grad(q, k, v, do, True, 0.25, dlse=dlse[..., 0])
    for got, ref, name in zip((dq, dk, dv), want, ("dq", "dk", "dv")):
        R.close(got, ref, "float32", what=name)
