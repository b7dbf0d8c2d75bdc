"""The simulator's nl / nisa operations against NumPy, one small kernel each."""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki

RNG = np.random.default_rng(0)


def run1(fn, *arrays, grid=(), **static):
    """Run ``fn`` (body returning a tile) as a kernel that stores the tile into a fresh output."""

    @nki.jit
    def kernel(*tensors, **kw):
        tiles = [nl.load(t) for t in tensors]
        res = fn(*tiles, **kw)
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out

    return kernel[grid](*arrays, **static)


X = RNG.standard_normal((64, 96)).astype(np.float32)
Y = RNG.standard_normal((64, 96)).astype(np.float32) + 3.0
POS = np.abs(X) + 0.5

UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "square": np.square,
    "abs": np.abs, "negative": np.negative, "reciprocal": lambda v: 1 / v, "sign": np.sign, "tanh": np.tanh,
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "relu": lambda v: np.maximum(v, 0),
    "silu": lambda v: v / (1 + np.exp(-v)), "softplus": lambda v: np.log1p(np.exp(v)),
    "sin": np.sin, "cos": np.cos,
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    data = POS if name in ("log", "sqrt", "rsqrt", "reciprocal") else X
    got = run1(lambda t: getattr(nl, name)(t), data)
    np.testing.assert_allclose(got, UNARY[name](data.astype(np.float64)), rtol=2e-6, atol=2e-6)


def test_gelu_and_erf_match_math_erf():
    import math

    v = np.linspace(-4, 4, 128 * 8, dtype=np.float32).reshape(128, 8)
    erf = np.vectorize(math.erf)(v.astype(np.float64))
    np.testing.assert_allclose(run1(nl.erf, v), erf, atol=3e-7)
    erf_s = np.vectorize(math.erf)(v.astype(np.float64) / math.sqrt(2.0))
    np.testing.assert_allclose(run1(nl.gelu, v), 0.5 * v * (1 + erf_s), atol=2e-6)


BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "power": np.power}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_tile_tile_and_scalar(name):
    a, b = (POS, Y) if name == "power" else (X, Y)
    np.testing.assert_allclose(run1(lambda s, t: getattr(nl, name)(s, t), a, b), BINARY[name](a, b), rtol=1e-6)
    np.testing.assert_allclose(run1(lambda s: getattr(nl, name)(s, 2.0), a), BINARY[name](a, np.float32(2.0)),
                               rtol=1e-6)


def test_python_operators_and_broadcast_free_axis():
    col = RNG.standard_normal((64, 1)).astype(np.float32)
    got = run1(lambda s, t, c: (s + t) * c - s / t, X, Y, col)
    np.testing.assert_allclose(got, (X + Y) * col - X / Y, rtol=1e-5)


def test_comparisons_default_to_bool_and_where():
    got = run1(lambda s, t: nl.where(nl.greater(s, t), s, t), X, Y)
    np.testing.assert_array_equal(got, np.maximum(X, Y))
    cmp = run1(lambda s: s > 0.0, X)
    assert cmp.dtype == np.bool_
    np.testing.assert_array_equal(cmp, X > 0)
    cmp = run1(lambda s: nl.less(s, 0.0, dtype=nl.float32), X)
    np.testing.assert_array_equal(cmp, (X < 0).astype(np.float32))


@pytest.mark.parametrize("a,b,want", [
    (nl.float32, nl.bfloat16, nl.float32), (nl.float16, nl.bfloat16, nl.float32),
    (nl.float8_e4m3, nl.float8_e5m2, nl.bfloat16), (nl.float8_e4m3, nl.float16, nl.float16),
    (nl.int32, nl.float16, nl.float16), (nl.int8, nl.uint8, nl.int16), (nl.int8, nl.uint16, nl.int32),
    (nl.int32, nl.uint32, nl.float32), (nl.int16, nl.int32, nl.int32)])
def test_type_promotion_table(a, b, want):
    x = np.ones((4, 4), a)
    y = np.ones((4, 4), b)
    assert run1(lambda s, t: nl.add(s, t), x, y).dtype == want


def test_python_scalars_are_weakly_typed_as_widest_hw_type():
    half = np.ones((4, 4), np.float16)
    assert run1(lambda s: s * 1.5, half).dtype == np.float32
    assert run1(lambda s: nl.multiply(s, 1.5, dtype=nl.float16), half).dtype == np.float16
    assert run1(lambda s: s + 2, np.ones((4, 4), np.int8)).dtype == np.int32


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean),
                                      ("prod", np.prod), ("var", np.var)])
def test_reductions_over_free_axes(name, ref):
    v = RNG.standard_normal((32, 6, 8)).astype(np.float32) * 0.5 + 1
    got = run1(lambda t: getattr(nl, name)(t, axis=[1, 2], keepdims=True), v)
    np.testing.assert_allclose(got, ref(v.astype(np.float64), axis=(1, 2), keepdims=True), rtol=1e-5)
    got = run1(lambda t: getattr(nl, name)(t, axis=2), v)
    np.testing.assert_allclose(got, ref(v.astype(np.float64), axis=2), rtol=1e-5)


@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_of_products_over_last_axis(keepdims):
    # sum(x * y) and sum(x ** 2) over the last axis take a path that skips the product temporary.
    x64, y64 = X.astype(np.float64), Y.astype(np.float64)
    got = run1(lambda a, b: nl.sum(nl.multiply(a, b), axis=1, keepdims=keepdims), X, Y)
    np.testing.assert_allclose(got, (x64 * y64).sum(1, keepdims=keepdims), rtol=1e-5, atol=1e-4)
    got = run1(lambda a: nl.sum(nl.square(a), axis=[1], keepdims=keepdims), X)
    np.testing.assert_allclose(got, (x64 ** 2).sum(1, keepdims=keepdims), rtol=1e-5, atol=1e-4)


def test_summed_product_tile_keeps_its_values():
    def body(a, b):
        prod = nl.multiply(a, b)
        total = nl.sum(prod, axis=1, keepdims=True)
        return nl.subtract(prod, total)  # the product itself is still needed here

    x64, y64 = X.astype(np.float64), Y.astype(np.float64)
    want = x64 * y64 - (x64 * y64).sum(1, keepdims=True)
    np.testing.assert_allclose(run1(body, X, Y), want, rtol=1e-5, atol=1e-4)


def test_all_any():
    v = (RNG.standard_normal((16, 8)) > 0).astype(np.float32)
    np.testing.assert_array_equal(run1(lambda t: nl.all(t, axis=1), v), np.all(v != 0, axis=1))
    np.testing.assert_array_equal(run1(lambda t: nl.any(t, axis=1), v), np.any(v != 0, axis=1))


def test_softmax():
    got = run1(lambda t: nl.softmax(t, axis=1), X)
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_matmul_and_transpose():
    a = RNG.standard_normal((64, 128)).astype(np.float32)  # [M, K]
    b = RNG.standard_normal((128, 512)).astype(np.float32)  # [K, N]
    got = run1(lambda s, t: nl.matmul(s, t), a, b)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    got = run1(lambda s, t: nl.matmul(s, t, transpose_x=True), a.T.copy(), b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(run1(nl.transpose, a[:, :100]), a[:, :100].T)


def test_nc_matmul_contracts_partition_axis_into_psum_fp32():
    s = RNG.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    m = RNG.standard_normal((128, 300)).astype(ml_dtypes.bfloat16)

    @nki.jit
    def k(st, mv):
        out = nl.ndarray((64, 300), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nisa.nc_matmul(nl.load(st), nl.load(mv))
        assert res.buffer is nl.psum and res.dtype == nl.float32
        nl.store(out, value=res)
        return out

    ref = s.astype(np.float64).T @ m.astype(np.float64)
    np.testing.assert_allclose(k(s, m), ref, rtol=1e-5, atol=1e-4)


def test_psum_accumulation_over_k():
    a = RNG.standard_normal((512, 128)).astype(np.float32)  # [K, M]
    b = RNG.standard_normal((512, 256)).astype(np.float32)  # [K, N]

    @nki.jit
    def k(at, bt):
        out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.psum)
        for kk in nl.affine_range(4):
            acc += nisa.nc_matmul(nl.load(at[kk * 128:(kk + 1) * 128, :]), nl.load(bt[kk * 128:(kk + 1) * 128, :]))
        nl.store(out, value=nl.copy(acc))
        return out

    np.testing.assert_allclose(k(a, b), a.astype(np.float64).T @ b, rtol=1e-4, atol=1e-3)


def test_nisa_activation_scale_bias_and_tensor_ops():
    bias = RNG.standard_normal((64, 1)).astype(np.float32)
    got = run1(lambda t, bb: nisa.activation(nl.exp, t, bias=bb, scale=0.5), X, bias)
    np.testing.assert_allclose(got, np.exp(X * 0.5 + bias), rtol=1e-5)
    got = run1(lambda s, t: nisa.tensor_tensor(s, t, op=nl.maximum), X, Y)
    np.testing.assert_array_equal(got, np.maximum(X, Y))
    got = run1(lambda t: nisa.tensor_scalar(t, np.multiply, 3.0, op1=np.add, operand1=1.0), X)
    np.testing.assert_allclose(got, X * 3 + 1, rtol=1e-6)
    got = run1(lambda t: nisa.tensor_scalar(t, np.subtract, 1.0, reverse0=True), X)
    np.testing.assert_allclose(got, 1 - X, rtol=1e-6)
    got = run1(lambda t: nisa.tensor_reduce(np.add, t, axis=1, keepdims=True), X)
    np.testing.assert_allclose(got, X.sum(1, keepdims=True), rtol=1e-5)
    got = run1(lambda t: nisa.tensor_partition_reduce(np.add, t), X)
    np.testing.assert_allclose(got, X.sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
    got = run1(lambda t: nisa.tensor_copy(t, dtype=nl.bfloat16), X)
    np.testing.assert_array_equal(got, X.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(run1(lambda t: nisa.nc_transpose(t), X), X.T)


def test_iota_memset_and_mgrid():
    @nki.jit
    def k():
        out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
        i = nl.mgrid[0:128, 0:64]
        t = nisa.iota(i.p * 64 + i.x, dtype=nl.int32)
        nl.store(out[i.p, i.x], value=t)
        return out

    np.testing.assert_array_equal(k(), np.arange(128 * 64, dtype=np.int32).reshape(128, 64))
    z = run1(lambda t: nisa.memset((64, 96), 2.5, nl.float32), X)
    np.testing.assert_array_equal(z, np.full((64, 96), 2.5, np.float32))


def test_bf16_rounding_on_store_and_fp32_compute():
    a = np.array([[1.0, 1.0]], dtype=ml_dtypes.bfloat16)
    b = np.array([[2.0 ** -9, 2.0 ** -7]], dtype=ml_dtypes.bfloat16)
    got = run1(lambda s, t: s + t, a, b)
    assert got.dtype == ml_dtypes.bfloat16
    # 1 + 2^-9 rounds to 1 in bf16 (8 mantissa bits); 1 + 2^-7 is representable.
    np.testing.assert_array_equal(got.astype(np.float32), [[1.0, 1.0 + 2.0 ** -7]])


def test_load_store_dtype_conversion_and_fp8():
    v = RNG.standard_normal((32, 16)).astype(np.float32)
    got = run1(lambda t: nl.copy(t, dtype=nl.float8_e4m3), v)
    np.testing.assert_array_equal(got, v.astype(ml_dtypes.float8_e4m3fn))
    got = run1(lambda t: nl.copy(t, dtype=nl.int32), np.array([[1.5, 2.5, -1.5, 3.7]], np.float32))
    np.testing.assert_array_equal(got, [[1, 2, -1, 3]])  # (float -> int truncates, see dtypes.cast)


def test_masked_load_store_touch_only_masked_elements():
    src = RNG.standard_normal((100, 40)).astype(np.float32)

    @nki.jit
    def k(s):
        out = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        ip, jf = nl.arange(128)[:, None], nl.arange(64)[None, :]
        t = nl.load(s[ip, jf], mask=(ip < 100) & (jf < 40))
        nl.store(out[ip, jf], value=t, mask=(ip < 50) & (jf < 40))
        return out

    ref = np.zeros((128, 64), np.float32)
    ref[:50, :40] = src[:50]
    np.testing.assert_array_equal(k(src), ref)


def test_spmd_grid_ids_and_spmd_dim():
    @nki.jit
    def k(dummy):
        out = nl.ndarray((4, 3, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        val = nl.full((1, 1), i * 100 + j * 10 + nl.program_ndim(), dtype=nl.int32)
        nl.store(out[i, j, 0:1], value=val[0:1, 0:1].broadcast_to((1, 1)))
        nl.store(out[i, j, 1:2], value=nl.full((1, 1), nl.num_programs(0), dtype=nl.int32))
        nl.store(out[i, j, 2:3], value=nl.full((1, 1), nl.num_programs(), dtype=nl.int32))
        return out

    got = k[nl.spmd_dim(nl.nc(2), 2), 3](np.zeros(1, np.float32))
    for i in range(4):
        for j in range(3):
            np.testing.assert_array_equal(got[i, j], [i * 100 + j * 10 + 2, 4, 12])


def test_grid_int_and_no_grid_and_simulate_kernel():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0) * 8 + nl.arange(8)[:, None]
        nl.store(out[i, nl.arange(4)[None, :]], value=nl.load(a[i, nl.arange(4)[None, :]]) * 2.0)
        return out

    a = RNG.standard_normal((32, 4)).astype(np.float32)
    np.testing.assert_array_equal(k[4](a), a * 2)
    np.testing.assert_array_equal(nki.simulate_kernel(k[4], a), a * 2)
    np.testing.assert_array_equal(k(a[:8]), a[:8] * 2)


def test_sbuf_blocks_par_dim_and_hbm_reshape():
    a = RNG.standard_normal((4 * 128, 32)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((4, 128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        xr = x.reshape((4, 128, 32))
        buf = nl.ndarray((4, nl.par_dim(128), 32), dtype=x.dtype, buffer=nl.sbuf)
        for b in nl.affine_range(4):
            buf[b] = nl.load(xr[b])
        for b in nl.sequential_range(4):
            nl.store(out[b], value=nl.negative(buf[b]))
        return out

    np.testing.assert_array_equal(k(a), -a.reshape(4, 128, 32))


def test_transposed_access_pattern_and_load_transpose2d():
    a = RNG.standard_normal((96, 128)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.arange(128)[:, None], nl.arange(96)[None, :]
        t = nl.load(x[jf, ip])  # partition walks x's columns
        nl.store(out[ip, jf], value=t)
        return out

    np.testing.assert_array_equal(k(a), a.T)
    np.testing.assert_array_equal(run1(lambda t: t, a), a)

    @nki.jit
    def k2(x):
        out = nl.ndarray((128, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load_transpose2d(x))
        return out

    np.testing.assert_array_equal(k2(a), a.T)


def test_avg_pool_multi_axis_access_pattern():
    # Official average-pool pattern: a 5-D access of a 3-D tile, reducing axes 2 and 4.
    v = RNG.standard_normal((16, 12, 8)).astype(np.float32)

    @nki.jit
    def k(x):
        c, h, w = x.shape
        p = 2
        out = nl.ndarray((c, h // p, w // p), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i0, i1, i2, i3, i4 = nl.mgrid[0:c, 0:h // p, 0:p, 0:w // p, 0:p]
        pooled = nl.sum(t[i0, p * i1 + i2, p * i3 + i4], axis=[2, 4]) * (1.0 / (p * p))
        nl.store(out, value=pooled)
        return out

    ref = v.reshape(16, 6, 2, 4, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(k(v), ref, rtol=1e-6)


def test_tile_views_write_through_and_psum_tile_slices():
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.zeros((64, 96), dtype=nl.float32)
        t[:, 0:48] = nl.load(x[:, 0:48])
        t[:, 48:96] = nl.exp(nl.load(x[:, 48:96]))
        t[:, 0:10] += 1.0
        nl.store(out, value=t)
        return out

    ref = np.concatenate([X[:, :48], np.exp(X[:, 48:])], 1)
    ref[:, :10] += 1
    np.testing.assert_allclose(k(X), ref, rtol=1e-6)


def test_inputs_are_not_modified_and_zero_copy_loads_are_copy_on_write():
    a = X.copy()

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        t[0:1, :] = nl.zeros((1, 96), dtype=nl.float32)
        nl.store(out, value=t)
        return out

    got = k(a)
    np.testing.assert_array_equal(a, X)
    np.testing.assert_array_equal(got[1:], X[1:])
    np.testing.assert_array_equal(got[0], 0)


def test_deferred_results_see_operands_as_they_were():
    # Element-wise results may be computed late (straight into a store); writes in between
    # must not leak into them.
    src = RNG.standard_normal((64, 96)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((3, 64, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        c = t + 1.0
        d = t * 2.0  # a second deferred op forces the first
        t[...] = nl.zeros((64, 96), dtype=nl.float32)  # write an operand after both ops
        nl.store(out[0], value=c)
        nl.store(out[1], value=d)
        nl.store(out[2], value=c * 3.0)  # c is still usable after being stored
        return out

    got = k(src)
    np.testing.assert_allclose(got[0], src + 1, rtol=1e-6)
    np.testing.assert_allclose(got[1], src * 2, rtol=1e-6)
    np.testing.assert_allclose(got[2], (src + 1) * 3, rtol=1e-6)


def test_deferred_store_into_the_tensor_it_reads():
    src = RNG.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        kept = nl.load(out)
        shifted = nl.load(out[0:64, :]) + 1.0
        nl.store(out[64:128, :], value=shifted)  # overwrites rows `kept` still views
        nl.store(out[0:64, :], value=kept[64:128, :] * 1.0)
        return out

    got = k(src)
    np.testing.assert_allclose(got[64:], src[:64] + 1, rtol=1e-6)
    np.testing.assert_allclose(got[:64], src[64:], rtol=1e-6)


def test_bn_stats_and_bn_aggr_give_mean_and_population_variance():
    v = RNG.standard_normal((32, 1000)).astype(np.float32) * 3 + 1

    @nki.jit
    def k(x):
        out = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        stats = nl.ndarray((32, 12), dtype=nl.float32)
        stats[:, 0:6] = nisa.bn_stats(t[:, 0:500])
        stats[:, 6:12] = nisa.bn_stats(t[:, 500:1000])
        nl.store(out, value=nisa.bn_aggr(stats))
        return out

    got = k(v)
    np.testing.assert_allclose(got[:, 0], v.astype(np.float64).mean(1), rtol=1e-5)
    np.testing.assert_allclose(got[:, 1], v.astype(np.float64).var(1), rtol=1e-4)


@nki.jit
def _rows_scaled_by_weight(x, w):
    """x * w per row, indexed with dummy mgrid axes (the pattern of the official RMSNorm /
    LayerNorm tutorials): the unowned size-1 axis leaves the tile, the weight loads as [1, F]."""
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, iunit, iw = nl.mgrid[0:128, 0:1, 0:f]
    wp, wf, wunit = nl.mgrid[0:128, 0:f, 0:1]
    w_tile = nl.load(w.reshape((1, f))[wunit, wf])  # owners in subscript order: [1, F]
    assert w_tile.shape == (1, f)
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + ip
        x_tile = nl.load(x[rows, iw], mask=rows < n)
        assert x_tile.shape == (128, f)
        y = nl.multiply(x_tile, w_tile.broadcast_to((128, f)), mask=rows < n)  # mask laid onto [128, F]
        nl.store(out[rows, iw], value=y, mask=rows < n)
    return out


@pytest.mark.parametrize("n", [256, 200])
def test_mgrid_dummy_axes_follow_the_owning_subscripts(n):
    x = RNG.standard_normal((n, 96)).astype(np.float32)
    w = RNG.standard_normal(96).astype(np.float32)
    np.testing.assert_allclose(_rows_scaled_by_weight(x, w), x * w, rtol=1e-6)


def test_index_shapes_without_dummy_axes_are_unchanged():
    a = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    ip, jf = nl.mgrid[0:8, 0:16]

    @nki.jit
    def kernel(x):
        # Swapped arange subscripts keep NumPy's broadcast order: a transposed [16, 8] view.
        tr = nl.load(x[nl.arange(8)[None, :], nl.arange(16)[:, None]])
        row = nl.load(x[nl.arange(1)[:, None], nl.arange(16)[None, :]])
        full = nl.load(x[ip, jf])
        out = nl.ndarray((16, 8 + 1 + 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[nl.arange(16)[:, None], nl.arange(8)[None, :]], value=tr)
        nl.store(out[nl.arange(16)[:, None], 8 + nl.arange(1)[None, :]], value=nl.transpose(row))
        nl.store(out[nl.arange(16)[:, None], 9 + nl.arange(8)[None, :]], value=nl.transpose(full))
        return out

    got = kernel(a)
    np.testing.assert_array_equal(got[:, :8], a.T)
    np.testing.assert_array_equal(got[:, 8], a[0])
    np.testing.assert_array_equal(got[:, 9:], a.T)


@nki.jit
def _per_head_copy(q):
    """out[b, h] = 2 * q[b, h], addressing each head's [S, D] region and then rows within it."""
    b_, h_, s_, d_ = q.shape
    out = nl.ndarray(q.shape, dtype=q.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(b_):
        for h in nl.affine_range(h_):
            src, dst = q[b, h], out[b, h]
            for t in nl.affine_range((s_ + 127) // 128):
                rows = t * 128 + nl.arange(128)[:, None]
                cols = nl.arange(d_)[None, :]
                tile = nl.load(src[rows, cols], mask=rows < s_)
                nl.store(dst[rows, cols], value=nl.multiply(tile, 2.0), mask=rows < s_)
    return out


def test_hbm_region_indexed_again():
    q = RNG.standard_normal((2, 3, 200, 32)).astype(np.float32)
    np.testing.assert_array_equal(_per_head_copy(q), 2 * q)


def test_hbm_region_indexed_again_checks_the_region_bounds():
    @nki.jit
    def kernel(a, masked):
        out = nl.zeros((64, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        rows = nl.arange(64)[:, None] + 32
        region = a[0:64, :]  # rows 32..95 of it: half outside the region, all inside the tensor
        tile = nl.load(region[rows, nl.arange(8)[None, :]], mask=(rows < 64) if masked else None)
        nl.store(out, value=tile)
        return out

    a = RNG.standard_normal((128, 8)).astype(np.float32)
    got = kernel(a, masked=True)
    np.testing.assert_array_equal(got[:32], a[32:64])
    np.testing.assert_array_equal(got[32:], 0)
    with pytest.raises(NKIError, match=r"out-of-bounds.*region of a"):
        kernel(a, masked=False)


def test_nisa_tensor_scalar_reduce_returns_result_and_fills_reduce_res():
    v = RNG.standard_normal((64, 48)).astype(np.float32) - 3.0

    @nki.jit
    def kernel(a):
        t = nl.load(a)
        res = nl.ndarray((64, 1), dtype=nl.float32)
        out = nisa.tensor_scalar_reduce(data=t, op0=np.add, operand0=1.5, reduce_op=np.add, reduce_res=res)
        both = nl.ndarray((64, 49), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(both[nl.arange(64)[:, None], nl.arange(48)[None, :]], value=out)
        nl.store(both[nl.arange(64)[:, None], 48 + nl.arange(1)[None, :]], value=res)
        return both

    got = kernel(v)
    np.testing.assert_allclose(got[:, :48], v + 1.5, rtol=1e-6)
    np.testing.assert_allclose(got[:, 48], (v.astype(np.float64) + 1.5).sum(1), rtol=1e-5)
