"""The current ``nki.isa`` instructions against their v2.32 reference pages, for the points an audit
found wrong: results checked against NumPy written from each page's pseudo-code, documented usage
accepted, and usage a page rules out rejected with an ``NKIError`` naming the argument and the rule
(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.32.0/nki/api/generated/nki.isa.<name>.html)."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa1
from nki_kernels.simulator import nki as nki1
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.instructions import target
from tests.isa_helpers import to_hbm, to_sbuf

nl = nki.language
nisa = nki.isa
nl1 = nki1.language
RNG = np.random.default_rng(2032)
FP32_MIN = float(np.finfo(np.float32).min)


def _sb(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def _run(body, *arrays, out_shape, out_dtype=np.float32):
    """Run ``body(*sbuf_tiles) -> tile`` in a kernel and return the tile's values."""

    @nki.jit
    def kernel(*ins):
        res = body(*[to_sbuf(a) for a in ins])
        out = nl.ndarray(out_shape, dtype=out_dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    return nki.simulate(kernel)(*arrays)


# ---------------------------------------------------------------------------
# A1. tensor_tensor_scan: the per-partition chain runs over all of a partition's free elements
# ---------------------------------------------------------------------------
def _scan_reference(d0, d1, init, f0, f1):
    """The page's pseudo-code on [P, n] rows: result[:, i] = op1(op0(data0[:, i], result[:, i-1]), data1[:, i])."""
    a, b = d0.reshape(d0.shape[0], -1), d1.reshape(d1.shape[0], -1)
    out = np.empty_like(a)
    prev = np.broadcast_to(np.float32(init), (a.shape[0],)) if np.ndim(init) == 0 else init.reshape(-1)
    for i in range(a.shape[1]):
        prev = f1(f0(a[:, i], prev), b[:, i])
        out[:, i] = prev
    return out.reshape(d0.shape)


def test_tensor_tensor_scan_3d_runs_one_chain_per_partition():
    d0 = RNG.uniform(0.5, 1.0, (4, 3, 5)).astype(np.float32)
    d1 = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    got = _run(lambda a, b: (o := _sb((4, 3, 5)),
                             nisa.tensor_tensor_scan(dst=o, data0=a, data1=b, initial=0.5, op0=nl.multiply,
                                                     op1=nl.add))[0], d0, d1, out_shape=(4, 3, 5))
    want = _scan_reference(d0, d1, 0.5, np.multiply, np.add)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # (the old simulator restarted the chain at each row of the middle axis: row 1 started from 0.5 again)
    assert not np.allclose(got[:, 1, 0], d0[:, 1, 0] * 0.5 + d1[:, 1, 0])


def test_gen1_tensor_tensor_scan_3d_runs_one_chain_per_partition():
    # the v2.26 page (neuronxcc.nki.isa) has the same per-partition pseudo-code
    d1 = RNG.standard_normal((2, 2, 3)).astype(np.float32)

    @nki1.jit
    def kernel(x, z):
        out = nl1.ndarray(x.shape, dtype=nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, nisa1.tensor_tensor_scan(nl1.load(z), nl1.load(x), 0.0, np.add, np.add))
        return out

    got = kernel(d1, np.zeros_like(d1))
    np.testing.assert_allclose(got, np.cumsum(d1.reshape(2, -1), axis=1).reshape(d1.shape), rtol=1e-6)


def test_tensor_tensor_scan_rejects_data1_with_other_elements_per_partition():
    a, b = np.ones((4, 6), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(NKIError, match=r"data0 \(4, 6\) and data1 \(4, 5\)"):
        _run(lambda x, y: (o := _sb((4, 6)),
                           nisa.tensor_tensor_scan(dst=o, data0=x, data1=y, initial=0.0, op0=nl.add,
                                                   op1=nl.add))[0], a, b, out_shape=(4, 6))


# ---------------------------------------------------------------------------
# A2 / C10. range_select: on_false_value is FP32_MIN; the page's operator, dtype and bound rules
# ---------------------------------------------------------------------------
def _range_select(x, lo, hi, **kw):
    def body(t, b0, b1):
        o = _sb(x.shape)
        nisa.range_select(dst=o, on_true_tile=t, comp_op0=kw.pop("comp_op0", nl.greater_equal),
                          comp_op1=nl.less, bound0=kw.pop("bound0", b0), bound1=b1, **kw)
        return o

    return _run(body, x, lo, hi, out_shape=x.shape)


def test_range_select_fills_with_fp32_min_by_default():
    x = RNG.standard_normal((4, 12)).astype(np.float32)
    lo = np.array([[0], [3], [5], [11]], np.float32)
    hi = np.array([[4], [9], [6], [12]], np.float32)
    got = _range_select(x, lo, hi)
    idx = np.arange(12, dtype=np.float32)[None, :]
    np.testing.assert_array_equal(got, np.where((idx >= lo) & (idx < hi), x, np.float32(FP32_MIN)))


@pytest.mark.parametrize("fill", [FP32_MIN, -3.4028235e38, Ellipsis])
def test_range_select_accepts_fp32_min_spellings(fill):
    # nki-library passes its _FLOAT32_MIN = -3.4028235e38; the v2.32 signature's default is Ellipsis
    assert float(np.float32(-3.4028235e38)) == FP32_MIN
    x = np.ones((2, 4), np.float32)
    got = _range_select(x, np.zeros((2, 1), np.float32), np.full((2, 1), 2, np.float32), on_false_value=fill)
    np.testing.assert_array_equal(got, np.where(np.arange(4) < 2, 1.0, np.float32(FP32_MIN))[None].repeat(2, 0))


@pytest.mark.parametrize("kw, match", [
    (dict(on_false_value=0.0), "on_false_value=0.0.*FP32_MIN"),
    (dict(on_false_value=-1e30), "on_false_value.*FP32_MIN"),
    (dict(comp_op0=nl.not_equal), "comp_op0.*equal, nl.less"),
    (dict(reduce_op=nl.add), "reduce_op.*maximum"),
    (dict(bound0=1.0), "bound0 is a float.*tiles with one element per partition"),
])
def test_range_select_rejects_what_the_page_rules_out(kw, match):
    x = np.ones((2, 4), np.float32)
    with pytest.raises(NKIError, match=match):
        _range_select(x, np.zeros((2, 1), np.float32), np.full((2, 1), 2, np.float32), **kw)


def test_range_select_rejects_integer_on_true_and_bf16_bounds():
    with pytest.raises(NKIError, match=r"on_true_tile \(shape \(2, 4\)\) has dtype int32.*FP dtypes"):
        _range_select(np.ones((2, 4), np.int32), np.zeros((2, 1), np.float32), np.full((2, 1), 2, np.float32))
    import ml_dtypes

    with pytest.raises(NKIError, match=r"bound0 \(shape \(2, 1\)\) has dtype bfloat16.*FP32"):
        _range_select(np.ones((2, 4), np.float32), np.zeros((2, 1), ml_dtypes.bfloat16),
                      np.full((2, 1), 2, np.float32))


def test_gen1_range_select_keeps_its_fp32_min_default_and_scalar_bounds():
    x = RNG.standard_normal((4, 8)).astype(np.float32)

    @nki1.jit
    def kernel(x):
        out = nl1.ndarray(x.shape, dtype=nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, nisa1.range_select(on_true_tile=nl1.load(x), comp_op0=np.greater_equal, comp_op1=np.less,
                                          bound0=2.0, bound1=6.0))
        return out

    got = kernel(x)
    idx = np.arange(8)[None, :]
    np.testing.assert_array_equal(got, np.where((idx >= 2) & (idx < 6), x, np.float32(FP32_MIN)))


# ---------------------------------------------------------------------------
# B3. tensor_scalar / tensor_scalar_reduce with a unary op0: operand0 "Must be None or 0"
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("op, ref", [(nl.exp, np.exp), (nl.abs, np.abs)])
@pytest.mark.parametrize("operand0", [0, 0.0, None])
def test_tensor_scalar_unary_op0_with_operand0_none_or_zero(op, ref, operand0):
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    got = _run(lambda t: (o := _sb((4, 6)), nisa.tensor_scalar(dst=o, data=t, op0=op, operand0=operand0,
                                                               op1=nl.multiply, operand1=2.0))[0],
               x, out_shape=(4, 6))
    np.testing.assert_allclose(got, ref(x) * 2.0, rtol=1e-6)


def test_tensor_scalar_unary_op0_rejects_a_non_zero_operand0():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(NKIError, match="op0=abs is a unary operator, so operand0 must be None or 0; got 1.5"):
        _run(lambda t: (o := _sb((4, 6)), nisa.tensor_scalar(dst=o, data=t, op0=nl.abs, operand0=1.5))[0],
             x, out_shape=(4, 6))


def test_tensor_scalar_reduce_abs_with_operand0_zero():
    # nki-library rmsnorm_quant / mlp_cte_quantization: op0=nl.abs, operand0=0.0, reduce_op=nl.maximum
    x = RNG.standard_normal((8, 16)).astype(np.float32)

    @nki.jit
    def kernel(x):
        t = to_sbuf(x)
        o, r = _sb((8, 16)), _sb((8, 1))
        nisa.tensor_scalar_reduce(dst=o, data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.maximum, reduce_res=r)
        return to_hbm(o), to_hbm(r)

    got, red = nki.simulate(kernel)(x)
    np.testing.assert_array_equal(got, np.abs(x))
    np.testing.assert_array_equal(red, np.abs(x).max(axis=1, keepdims=True))


def test_tensor_scalar_op1_without_operand1_is_an_nki_error():
    with pytest.raises(NKIError, match="op1=add is given without operand1"):
        _run(lambda t: (o := _sb((4, 6)), nisa.tensor_scalar(dst=o, data=t, op0=nl.multiply, operand0=2.0,
                                                             op1=nl.add))[0],
             np.ones((4, 6), np.float32), out_shape=(4, 6))


# ---------------------------------------------------------------------------
# B4. tensor_reduce over several axes with a non-reorderable operator (subtract)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("keepdims", [False, True])
def test_tensor_reduce_subtract_over_two_axes_folds_the_flattened_elements(keepdims):
    x = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    shape = (4, 1, 1) if keepdims else (4,)
    got = _run(lambda t: (o := _sb(shape), nisa.tensor_reduce(dst=o, op=nl.subtract, data=t, axis=(1, 2),
                                                              keepdims=keepdims))[0], x, out_shape=shape)
    flat = x.reshape(4, -1)
    want = flat[:, 0] - flat[:, 1:].sum(axis=1)  # x0 - x1 - x2 - ... in row-major order
    np.testing.assert_allclose(got.reshape(4), want, rtol=1e-5, atol=1e-6)


def test_tensor_reduce_max_over_two_axes_with_negate():
    x = RNG.standard_normal((4, 3, 2, 5)).astype(np.float32)
    got = _run(lambda t: (o := _sb((4, 3)), nisa.tensor_reduce(dst=o, op=nl.maximum, data=t, axis=(2, 3),
                                                               negate=True))[0], x, out_shape=(4, 3))
    np.testing.assert_array_equal(got, -x.max(axis=(2, 3)))


def test_tensor_reduce_bitwise_or_keeps_integer_bits():
    x = RNG.integers(0, 2 ** 31 - 1, (4, 2, 8), dtype=np.int32)
    got = _run(lambda t: (o := _sb((4, 1), nl.int32), nisa.tensor_reduce(dst=o, op=nl.bitwise_or, data=t,
                                                                         axis=(1, 2)))[0],
               x, out_shape=(4, 1), out_dtype=np.int32)
    np.testing.assert_array_equal(got[:, 0], np.bitwise_or.reduce(x.reshape(4, -1), axis=1))


# ---------------------------------------------------------------------------
# B5. memset: value=0 on the x4 packed dtypes; other values still rejected
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"])
def test_memset_zero_on_x4_packed_dtypes(name):
    from nki_kernels.simulator import dtypes as dt

    dtype = getattr(dt, name)
    got = {}

    @nki.jit
    def kernel(value):
        t = _sb((4, 8), dtype)
        nisa.memset(dst=t, value=value)
        got["bits"] = np.array(t.data).view(np.uint8)
        o = _sb((4, 1))
        nisa.memset(dst=o, value=0.0)
        return to_hbm(o)

    nki.simulate(kernel)(0)
    assert got["bits"].size and not got["bits"].any()  # every packed element's bits clear
    with pytest.raises(NKIError, match=f"{name}; only value=0 is supported"):
        nki.simulate(kernel)(1.0)


# ---------------------------------------------------------------------------
# B6. tensor_copy_predicated with a scalar src. The 2.32 page said only "the scalar is copied"; the
# 2.33 page: "only the kind must match dst: a Python float requires a float dst dtype and a Python int
# requires an integer dst dtype" (an int into a float dst is refused since)
# ---------------------------------------------------------------------------
def test_copy_predicated_scalar_src_of_dst_kind():
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    pred = (RNG.random((4, 5)) > 0.5).astype(np.uint8)

    def body(t, p, value):
        o = _sb((4, 5))
        nisa.tensor_copy(dst=o, src=t)
        nisa.tensor_copy_predicated(dst=o, src=value, predicate=p)
        return o

    got = _run(lambda t, p: body(t, p, 3.0), x, pred, out_shape=(4, 5))
    np.testing.assert_array_equal(got, np.where(pred != 0, np.float32(3.0), x))
    with pytest.raises(NKIError, match="a Python int src .3. needs an integer dst"):
        _run(lambda t, p: body(t, p, 3), x, pred, out_shape=(4, 5))


# ---------------------------------------------------------------------------
# B7. nl.prelu as the activation op; the slope is relu_param (activate2; activation has none: refused)
# ---------------------------------------------------------------------------
def test_activate2_prelu_uses_relu_param_as_the_negative_slope():
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    slope = RNG.uniform(0.05, 0.5, (8, 1)).astype(np.float32)

    def body(t, s):
        o1, o2 = _sb((8, 16)), _sb((8, 16))
        nisa.activate2(dst=o1, op=nl.prelu, data=t, imm0=2.0, imm1=0.0, op0=nl.multiply, op1=nl.bypass,
                       relu_param=0.1)
        nisa.activate2(dst=o2, op=nl.prelu, data=o1, imm0=0.0, imm1=0.0, op0=nl.bypass, op1=nl.bypass,
                       relu_param=s)
        return o2

    with target.use("gen4"):
        got = _run(body, x, slope, out_shape=(8, 16))
    v = x * np.float32(2.0)
    first = np.where(v >= 0, v, np.float32(0.1) * v)
    np.testing.assert_allclose(got, np.where(first >= 0, first, slope * first), rtol=1e-6)


def test_activation_refuses_prelu_whose_slope_it_cannot_take():
    # The slope is "controlled by the relu_param argument"; nisa.activation has none, and a guessed
    # slope would be a silent wrong answer.
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    with pytest.raises(NKIError, match="relu_param"):
        _run(lambda t: (o := _sb((8, 16)), nisa.activation(dst=o, op=nl.prelu, data=t, scale=3.0))[0],
             x, out_shape=(8, 16))


# ---------------------------------------------------------------------------
# D. raw Python errors turned into NKIErrors naming the rule
# ---------------------------------------------------------------------------
def test_bitvec_operators_on_float_tiles_are_nki_errors():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(NKIError, match=r"bitwise_and is a bitvec operator but data \(shape \(4, 6\)\) has dtype "
                                       "float32.*must be integer types"):
        _run(lambda t: (o := _sb((4, 6)), nisa.tensor_scalar(dst=o, data=t, op0=nl.bitwise_and, operand0=1))[0],
             x, out_shape=(4, 6))
    with pytest.raises(NKIError, match="bitvec operator but data1.*integer types"):
        _run(lambda a, b: (o := _sb((4, 6)), nisa.tensor_tensor(dst=o, data1=a, data2=b, op=nl.bitwise_and))[0],
             x, x, out_shape=(4, 6))
    with pytest.raises(NKIError, match="bitvec operator but data.*integer types"):
        _run(lambda t: (o := _sb((4, 1)), nisa.tensor_reduce(dst=o, op=nl.bitwise_or, data=t, axis=1))[0],
             x, out_shape=(4, 1))
    with pytest.raises(NKIError, match="op0=bitwise_and is a bitvec operator.*not supported"):
        _run(lambda a, b: (o := _sb((4, 6)), nisa.scalar_tensor_tensor(dst=o, data=a, op0=nl.bitwise_and, operand0=1,
                                                                       op1=nl.add, operand1=b))[0],
             x, x, out_shape=(4, 6))


def test_bitvec_tensor_tensor_on_integers_is_exact():
    a = RNG.integers(0, 2 ** 31 - 1, (4, 6), dtype=np.int32)
    b = RNG.integers(0, 2 ** 31 - 1, (4, 6), dtype=np.int32)
    got = _run(lambda x, y: (o := _sb((4, 6), nl.int32), nisa.tensor_tensor(dst=o, data1=x, data2=y,
                                                                            op=nl.bitwise_xor))[0],
               a, b, out_shape=(4, 6), out_dtype=np.int32)
    np.testing.assert_array_equal(got, a ^ b)


def test_scalar_tensor_tensor_dst_of_another_size_is_an_nki_error():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(NKIError, match=r"dst \(4, 5\) and data \(4, 6\)"):
        _run(lambda a, b: (o := _sb((4, 5)), nisa.scalar_tensor_tensor(dst=o, data=a, op0=nl.multiply, operand0=2.0,
                                                                       op1=nl.add, operand1=b))[0],
             x, x, out_shape=(4, 5))


def test_bn_aggr_needs_a_multiple_of_three_elements():
    with pytest.raises(NKIError, match=r"data \(shape \(4, 7\)\) has 7 elements per partition.*multiple of three"):
        _run(lambda t: (o := _sb((4, 2)), nisa.bn_aggr(dst=o, data=t))[0], np.ones((4, 7), np.float32),
             out_shape=(4, 2))


# ---------------------------------------------------------------------------
# C8. dma_transpose: dst in SBUF, src.dtype == dst.dtype, the page's axes, the hwdge limits
# ---------------------------------------------------------------------------
def _dma_transpose(x, dst_shape, dst_dtype=None, dst_hbm=False, **kw):
    @nki.jit
    def kernel(a):
        out = nl.ndarray(dst_shape, dtype=dst_dtype or a.dtype, buffer=nl.shared_hbm)
        if dst_hbm:
            nisa.dma_transpose(dst=out, src=a, **kw)
            return out
        t = _sb(dst_shape, dst_dtype or a.dtype)
        nisa.dma_transpose(dst=t, src=a, **kw)
        nisa.dma_copy(dst=out, src=t)
        return out

    return nki.simulate(kernel)(x)


def test_dma_transpose_valid_calls_at_the_edges():
    import ml_dtypes

    x = RNG.standard_normal((16, 128)).astype(ml_dtypes.bfloat16)  # hwdge: 16 partitions, 128 <= 128, 2 bytes
    np.testing.assert_array_equal(_dma_transpose(x, (128, 16), dge_mode=nisa.dge_mode.hwdge), x.T)
    x4 = RNG.standard_normal((2, 3, 8, 5)).astype(ml_dtypes.bfloat16)  # 2 * 8 = 16: a multiple of 16
    np.testing.assert_array_equal(_dma_transpose(x4, (5, 3, 8, 2), axes=(3, 1, 2, 0), dge_mode=nisa.dge_mode.hwdge),
                                  np.transpose(x4, (3, 1, 2, 0)))


@pytest.mark.parametrize("shape, dst_shape, kw, match", [
    ((16, 8), (8, 16), dict(dst_hbm=True), r"dst \(shape \(8, 16\)\) is in HBM.*must be a tile in SBUF"),
    ((2, 3, 4), (2, 4, 3), dict(axes=(0, 2, 1)), r"axes=\(0, 2, 1\); the supported axes"),
    ((16, 8), (8, 16), dict(dst_dtype=np.float32), "src dtype bfloat16 and dst dtype float32 differ"),
    ((8, 16), (16, 8), dict(dge_mode="hwdge"), r"src shape \(8, 16\).*src.shape\[0\] == 16 for a 2-D src"),
    ((2, 3, 4, 5), (5, 3, 4, 2), dict(dge_mode="hwdge"), r"\(src.shape\[0\] \* src.shape\[-2\]\) % 16 == 0"),
])
def test_dma_transpose_rejects_what_the_page_rules_out(shape, dst_shape, kw, match):
    import ml_dtypes

    if kw.get("dge_mode") == "hwdge":
        kw["dge_mode"] = nisa.dge_mode.hwdge
    with pytest.raises(NKIError, match=match):
        _dma_transpose(np.ones(shape, ml_dtypes.bfloat16), dst_shape, **kw)


def test_dma_transpose_hwdge_needs_a_two_byte_dtype():
    with pytest.raises(NKIError, match="a 2-byte src.dtype"):
        _dma_transpose(np.ones((16, 8), np.float32), (8, 16), dge_mode=nisa.dge_mode.hwdge)


def test_gen1_dma_transpose_keeps_any_permutation():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)

    @nki1.jit
    def kernel(a):
        t = nisa1.dma_transpose(a, axes=(0, 2, 1))
        o = nl1.ndarray(t.shape, dtype=t.dtype, buffer=nl1.shared_hbm)
        nl1.store(o, t)
        return o

    np.testing.assert_array_equal(kernel(x), np.transpose(x, (0, 2, 1)))


# ---------------------------------------------------------------------------
# C9. local_gather: num_elem_per_idx in [1, 2, 4, 8, 16, 32]; uint16 indices; no casting; <= 4096 per core
# ---------------------------------------------------------------------------
def _local_gather(src, index, n=1, nv=None, dst_dtype=None):
    count = (nv or 16 * int(np.prod(index.shape[1:]))) * n

    def body(s, i):
        d = _sb((src.shape[0], count), dst_dtype or src.dtype)
        nisa.local_gather(dst=d, src_buffer=s, index=i, num_elem_per_idx=n, num_valid_indices=nv)
        return d

    return _run(body, src, index, out_shape=(src.shape[0], count), out_dtype=dst_dtype or src.dtype)


def test_local_gather_4096_indices_per_core_and_32_elements():
    src = RNG.standard_normal((16, 64)).astype(np.float32)
    index = RNG.integers(0, 64, (16, 256)).astype(np.uint16)  # 16 * 256 = 4096 indices: the limit
    got = _local_gather(src, index).reshape(16, 4096)
    flat = index.T.reshape(-1)  # partition-first flattening
    np.testing.assert_array_equal(got, src[:, flat])
    got32 = _local_gather(src, np.zeros((16, 1), np.uint16), n=32, nv=2).reshape(16, 2, 32)
    np.testing.assert_array_equal(got32, np.broadcast_to(src[:, None, :32], (16, 2, 32)))


@pytest.mark.parametrize("kw, match", [
    (dict(n=3), r"num_elem_per_idx=3; it must be one of \[1, 2, 4, 8, 16, 32\]"),
    (dict(index_dtype=np.int32), r"index \(shape \(16, 2\)\) has dtype int32.*must be uint16"),
    (dict(dst_dtype=np.float16), "dst dtype float16 differs from src_buffer dtype float32.*no casting"),
    (dict(cols=257), "4112 indices per GpSimd core.*<= 4096"),
])
def test_local_gather_rejects_what_the_page_rules_out(kw, match):
    src = np.zeros((16, 64), np.float32)
    index = np.zeros((16, kw.pop("cols", 2)), kw.pop("index_dtype", np.uint16))
    with pytest.raises(NKIError, match=match):
        _local_gather(src, index, **kw)


# ---------------------------------------------------------------------------
# C11. tensor_scalar: bitvec and arithmetic not mixed; bitvec on Vector; GpSimd only for rsqrt
# ---------------------------------------------------------------------------
def _tensor_scalar(x, out_dtype=np.float32, **kw):
    return _run(lambda t: (o := _sb(x.shape, out_dtype), nisa.tensor_scalar(dst=o, data=t, **kw))[0], x,
                out_shape=x.shape, out_dtype=out_dtype)


def test_tensor_scalar_bitvec_pair_on_vector_and_rsqrt_on_gpsimd():
    a = RNG.integers(0, 2 ** 20, (4, 6), dtype=np.int32)
    got = _tensor_scalar(a, np.int32, op0=nl.bitwise_and, operand0=0xFF0, op1=nl.bitwise_or, operand1=1,
                         engine=nisa.vector_engine)
    np.testing.assert_array_equal(got, (a & 0xFF0) | 1)
    x = RNG.uniform(0.5, 4.0, (4, 6)).astype(np.float32)
    got = _tensor_scalar(x, op0=nl.rsqrt, operand0=None, engine=nisa.gpsimd_engine)
    np.testing.assert_allclose(got, 1.0 / np.sqrt(x), rtol=1e-6)


@pytest.mark.parametrize("kw, match", [
    (dict(op0=nl.bitwise_and, operand0=1, op1=nl.add, operand1=1), "mix a bitvec and an arithmetic operator"),
    (dict(op0=nl.bitwise_and, operand0=1, engine="scalar"), "bitvec operators run on the Vector engine only"),
    (dict(op0=nl.add, operand0=1.0, engine="gpsimd"), "engine=gpsimd is only allowed for rsqrt.*op0=add"),
])
def test_tensor_scalar_rejects_the_pages_operator_engine_rules(kw, match):
    kw = dict(kw)
    if "engine" in kw:
        kw["engine"] = {"scalar": nisa.scalar_engine, "gpsimd": nisa.gpsimd_engine}[kw["engine"]]
    with pytest.raises(NKIError, match=match):
        _tensor_scalar(np.ones((4, 6), np.int32), np.int32, **kw)


# ---------------------------------------------------------------------------
# C12 / C13. reduce_res (P, 1); max8 src up to 3-D, dst 2-D; tensor_reduce negate arithmetic only;
# memset on Vector or GpSimd; iota up to a 4-D pattern
# ---------------------------------------------------------------------------
def test_activation_and_select_reduce_reduce_res_is_one_column():
    x = RNG.standard_normal((4, 6)).astype(np.float32)

    def act(t, width):
        o, r = _sb((4, 6)), _sb((4, width))
        nisa.activation(dst=o, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        return r

    np.testing.assert_allclose(_run(lambda t: act(t, 1), x, out_shape=(4, 1)), np.exp(x).sum(1, keepdims=True),
                               rtol=1e-5)
    with pytest.raises(NKIError, match=r"reduce_res has shape \(4, 2\); it must be a tile of shape \(4, 1\)"):
        _run(lambda t: act(t, 2), x, out_shape=(4, 2))

    def sel(t, p, width):
        o, r = _sb((4, 6)), _sb((4, width))
        nisa.select_reduce(dst=o, predicate=p, on_true=t, on_false=-5.0, reduce_res=r,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce)
        return r

    pred = (RNG.random((4, 6)) > 0.5).astype(np.uint8)
    np.testing.assert_array_equal(_run(lambda t, p: sel(t, p, 1), x, pred, out_shape=(4, 1)),
                                  np.where(pred != 0, x, np.float32(-5.0)).max(1, keepdims=True))
    with pytest.raises(NKIError, match=r"select_reduce: reduce_res has shape \(4, 2\)"):
        _run(lambda t, p: sel(t, p, 2), x, pred, out_shape=(4, 2))


def test_max8_src_up_to_3d_and_dst_2d():
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    got = _run(lambda t: (o := _sb((4, 8)), nisa.max8(dst=o, src=t))[0], x, out_shape=(4, 8))
    np.testing.assert_array_equal(got, -np.sort(-x.reshape(4, -1), axis=1)[:, :8])
    with pytest.raises(NKIError, match=r"src has shape \(4, 3, 1, 5\); the source tile can be up to 3-dimensional"):
        _run(lambda t: (o := _sb((4, 8)), nisa.max8(dst=o, src=t))[0], x.reshape(4, 3, 1, 5), out_shape=(4, 8))
    with pytest.raises(NKIError, match=r"dst \(4, 2, 4\).*always 2-dimensional"):
        _run(lambda t: (o := _sb((4, 2, 4)), nisa.max8(dst=o, src=t))[0], x, out_shape=(4, 2, 4))


def test_tensor_reduce_negate_is_for_arithmetic_operators_only():
    x = np.ones((4, 6), np.int32)
    with pytest.raises(NKIError, match="negate=True with the bitvec operator bitwise_or"):
        _run(lambda t: (o := _sb((4, 1), nl.int32), nisa.tensor_reduce(dst=o, op=nl.bitwise_or, data=t, axis=1,
                                                                      negate=True))[0],
             x, out_shape=(4, 1), out_dtype=np.int32)


def test_memset_engines():
    def body(t, eng):
        o = _sb((4, 6))
        nisa.memset(dst=o, value=2.5, engine=eng)
        return o

    for eng in (nisa.vector_engine, nisa.gpsimd_engine, nisa.engine.unknown):
        np.testing.assert_array_equal(_run(lambda t: body(t, eng), np.zeros((4, 6), np.float32), out_shape=(4, 6)),
                                      np.full((4, 6), 2.5, np.float32))
    with pytest.raises(NKIError, match="memset: engine=.*scalar.*vector or nki.isa.engine.gpsimd"):
        _run(lambda t: body(t, nisa.scalar_engine), np.zeros((4, 6), np.float32), out_shape=(4, 6))


def test_iota_pattern_up_to_4d():
    def body(t, pattern):
        o = _sb((4, 2, 3, 2, 2), nl.int32)
        nisa.iota(dst=o, pattern=pattern, offset=1, channel_multiplier=100)
        return o

    got = _run(lambda t: body(t, [[12, 2], [4, 3], [2, 2], [1, 2]]), np.zeros((4, 1), np.float32),
               out_shape=(4, 2, 3, 2, 2), out_dtype=np.int32)
    want = 1 + 100 * np.arange(4)[:, None] + np.arange(24)[None, :]
    np.testing.assert_array_equal(got.reshape(4, 24), want)
    with pytest.raises(NKIError, match="has 5 .step, num. entries; the access pattern is up to 4D"):
        _run(lambda t: body(t, [[12, 2], [4, 3], [2, 2], [1, 2], [1, 1]]), np.zeros((4, 1), np.float32),
             out_shape=(4, 2, 3, 2, 2), out_dtype=np.int32)
