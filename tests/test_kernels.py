"""The add and RMSNorm kernels against float64 NumPy references."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nki_kernels as K

DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# Tolerances per dtype: ~2 ulps of the output dtype relative to the output magnitude.
TOL = {"float32": 2e-5, "bfloat16": 2e-2, "float16": 2e-3}


def rms_ref(x, w, eps):
    x = x.astype(np.float64)
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * r * w.astype(np.float64), r


def rms_bwd_ref(dy, x, w, eps):
    _, r = rms_ref(x, w, eps)
    x, dy, w = x.astype(np.float64), dy.astype(np.float64), w.astype(np.float64)
    xhat, g = x * r, dy * w
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdims=True))
    dw = (dy * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def close(got, ref, dtype, scale=None):
    got = np.asarray(got).astype(np.float64)
    scale = np.abs(ref).max() + 1e-12 if scale is None else scale
    err = np.abs(got - ref).max() / scale
    assert err <= TOL[dtype], f"max relative error {err:.3g} > {TOL[dtype]}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(1, 1), (127, 511), (128, 512), (129, 513), (300, 1000), (256, 1536), (2, 3, 700), (5,)])
def test_tensor_add_matches_numpy(shape, dtype):
    rng = np.random.default_rng(hash(shape) % 2**32)
    a = rng.standard_normal(shape).astype(DTYPES[dtype])
    b = rng.standard_normal(shape).astype(DTYPES[dtype])
    c = K.tensor_add(a, b)
    assert c.shape == a.shape and c.dtype == a.dtype
    ref = a.astype(np.float64) + b.astype(np.float64)
    # One rounding of the exact sum to the output dtype.
    np.testing.assert_array_equal(c, ref.astype(DTYPES[dtype]))


def test_tensor_add_int32_exact():
    a = np.arange(300 * 700, dtype=np.int32).reshape(300, 700)
    np.testing.assert_array_equal(K.tensor_add(a, a), a * 2)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 400), cols=st.integers(1, 1300))
def test_tensor_add_any_shape(rows, cols):
    rng = np.random.default_rng(rows * 7919 + cols)
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    b = rng.standard_normal((rows, cols)).astype(np.float32)
    np.testing.assert_array_equal(K.tensor_add(a, b), a + b)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("rows,hidden", [(1, 1), (1, 64), (127, 300), (128, 512), (129, 513), (300, 1000),
                                         (200, 2049), (130, 8192)])
def test_rms_norm_forward(rows, hidden, dtype):
    rng = np.random.default_rng(rows * 31 + hidden)
    x = rng.standard_normal((rows, hidden)).astype(DTYPES[dtype])
    w = rng.standard_normal(hidden).astype(DTYPES[dtype])
    y = K.rms_norm(x, w, eps=1e-5)
    assert y.shape == x.shape and y.dtype == x.dtype
    ref, _ = rms_ref(x, w, 1e-5)
    close(y, ref, dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(1, 1), (127, 300), (129, 513), (3, 50, 257), (260, 4096)])
def test_rms_norm_backward(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(DTYPES[dtype])
    dy = rng.standard_normal(shape).astype(DTYPES[dtype])
    w = rng.standard_normal(shape[-1]).astype(DTYPES[dtype])
    dx, dw = K.rms_norm_backward(dy, x, w, eps=1e-6)
    assert dx.shape == x.shape and dx.dtype == x.dtype and dw.shape == w.shape and dw.dtype == w.dtype
    dx_ref, dw_ref = rms_bwd_ref(dy, x, w, 1e-6)
    # dx is a difference of two terms of size rstd*|dy*w|; rounding is relative to them.
    _, r = rms_ref(x, w, 1e-6)
    terms = (r * np.abs(dy.astype(np.float64) * w.astype(np.float64))).max()
    close(dx, dx_ref, dtype, scale=max(np.abs(dx_ref).max(), terms))
    # dw sums many rows: compare against the sum's magnitude.
    close(dw, dw_ref, dtype, scale=np.abs(dw_ref).max() + np.abs(dy).astype(np.float64).max())


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 300), hidden=st.integers(1, 2600), eps=st.sampled_from([0.0, 1e-6, 1e-2]))
def test_rms_norm_any_shape(rows, hidden, eps):
    rng = np.random.default_rng(rows * 13 + hidden)
    x = rng.standard_normal((rows, hidden)).astype(np.float32) + 0.1
    w = rng.standard_normal(hidden).astype(np.float32)
    ref, _ = rms_ref(x, w, eps)
    close(K.rms_norm(x, w, eps=eps), ref, "float32")


def test_rms_norm_rstd_output():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 96)).astype(np.float32)
    w = np.ones(96, np.float32)
    y, rstd = K.rms_norm_fwd_kernel[K.row_grid(200)](x, w, eps=1e-6, return_rstd=True)
    _, r = rms_ref(x, w, 1e-6)
    assert rstd.shape == (200, 1) and rstd.dtype == np.float32
    np.testing.assert_allclose(rstd, r, rtol=1e-5)


def test_rms_norm_backward_partials_per_program():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 40)).astype(np.float32)
    dy = rng.standard_normal((300, 40)).astype(np.float32)
    w = rng.standard_normal(40).astype(np.float32)
    _, rstd = K.rms_norm_fwd_kernel[K.row_grid(300)](x, w, eps=1e-6, return_rstd=True)
    dx, dwp = K.rms_norm_bwd_kernel[K.row_grid(300)](dy, x, w, rstd)
    assert dwp.shape == (3, 40)
    _, r = rms_ref(x, w, 1e-6)
    xhat = x.astype(np.float64) * r
    for p in range(3):
        rows = slice(p * 128, min(300, (p + 1) * 128))
        np.testing.assert_allclose(dwp[p], (dy[rows] * xhat[rows]).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda: K.tensor_add(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)), ValueError, ["b", "(3, 2)"]),
        (lambda: K.tensor_add(np.ones(3, np.float32), np.ones(3, np.float16)), TypeError, ["float16"]),
        (lambda: K.tensor_add(np.ones(3, np.float64), np.ones(3, np.float64)), TypeError, ["a", "float64"]),
        (lambda: K.tensor_add([1, 2], [1, 2]), TypeError, ["a", "list"]),
        (lambda: K.rms_norm(np.ones((4, 8), np.float32), np.ones(7, np.float32)), ValueError, ["weight", "(7,)", "8"]),
        (lambda: K.rms_norm(np.ones((4, 8), np.float32), np.ones((1, 8), np.float32)), ValueError, ["weight", "1-D"]),
        (lambda: K.rms_norm(np.ones((4, 8), np.int32), np.ones(8, np.int32)), TypeError, ["x", "int32"]),
        (lambda: K.rms_norm(np.ones((4, 8), np.float32), np.ones(8, np.float16)), TypeError, ["weight", "float16"]),
        (lambda: K.rms_norm(np.ones((4, 8), np.float32), np.ones(8, np.float32), eps=float("nan")), ValueError, ["eps"]),
        (lambda: K.rms_norm(np.ones((4, 8), np.float32), np.ones(8, np.float32), eps=-1.0), ValueError, ["eps"]),
        (lambda: K.rms_norm_backward(np.ones((4, 7), np.float32), np.ones((4, 8), np.float32), np.ones(8, np.float32)),
         ValueError, ["dy", "(4, 7)"]),
    ],
)
def test_caller_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value)
