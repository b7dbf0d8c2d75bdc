"""Items of the NKI release notes for NKI 0.4.0 (Neuron 2.30.0) and NKI 0.3.0 (Neuron 2.29.0), each
checked with a small current-API kernel against an independent NumPy reference, with the Neuron 2.32
``nki.isa`` / ``nki.language`` reference stubs for the semantics:

0.4.0 simulator fixes: dma_copy(oob_mode=skip) keeps integer bits; nc_stream_shuffle mask 255 keeps
dst; local_gather into a sub-view / ``.ap()`` dst; nc_matmul with 3-D+ operands; quantize_mx into
float8_e4m3fn_x4; iota / affine_select with register offsets; dma_compute without a scale mode;
nl.logical_and. 0.4.0 features: nl.abs_max / nl.abs_min (trn3, also as tensor_scalar op0 and
activate2 reduce_op); square / relu as op0; nl.prelu / nl.bypass with activate2; tile_size's
byte-sized SBUF / PSUM fields per target; dma_compute's oob_mode; nc_matmul float8_e4m3fn on trn3.
0.3.0: affine_select's offset keyword; dma_copy hwdge dtypes; memset's strict value type; no DMA
from PSUM.

Each rule involved has a refused case and an allowed edge case.
"""

import math

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install
from nki_kernels.simulator.instructions import target
from tests.isa_helpers import to_hbm, to_sbuf
from nki_kernels.simulator.instructions.mx import use_scale_rule

install()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(404)
BF16 = ml_dtypes.bfloat16


# (an SBUF copy of an HBM tensor, and an HBM copy of a tile: the helpers of the test_isa_* files)
_load, _store = to_sbuf, to_hbm


# --------------------------------------------------------------------------------------------------------
# 1. dma_copy(oob_mode=skip) keeps integer bit patterns (0.4.0 fix; already right)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def gather_rows(table, idx, init, mode):
    """dst = init, then the rows of table that idx names (vector_offset gather)."""
    F, P = table.shape[1], idx.shape[0]
    i = _load(idx)
    d = _load(init)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=i, indirect_dim=0)
    nisa.dma_copy(dst=d, src=rows, oob_mode=mode)
    return _store(d)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int16])
def test_dma_copy_skip_keeps_integer_bits(dtype):
    info = np.iinfo(dtype)
    # values an fp32 round trip changes: 2**24 + 1 and the extremes
    table = np.array([[info.max, info.min + 1, min(2 ** 24 + 1, info.max - 3), info.max - 1]] * 6, dtype)
    table[3] = np.arange(4, dtype=dtype) + info.max - 5
    idx = np.array([[0], [9], [3], [-1]], np.int32)
    init = np.full((4, 4), info.max - 2, dtype)
    want = init.copy()
    want[0], want[2] = table[0], table[3]
    got = gather_rows(table, idx, init, nisa.oob_mode.skip)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    with pytest.raises(NKIError, match="out-of-bounds|oob|bounds"):  # refused: the same gather with error
        gather_rows(table, idx, init, nisa.oob_mode.error)


# --------------------------------------------------------------------------------------------------------
# 2. nc_stream_shuffle: mask 255 leaves that dst partition unmodified (0.4.0 fix; already right)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def shuffle(x, init, mask):
    s, d = _load(x), _load(init)
    nisa.nc_stream_shuffle(dst=d, src=s, shuffle_mask=mask)
    return _store(d)


def test_stream_shuffle_mask_255_keeps_destination():
    x = RNG.standard_normal((64, 5)).astype(np.float32)
    init = RNG.standard_normal((64, 5)).astype(np.float32)
    mask = [255 if i % 3 == 0 else 31 - i for i in range(32)]
    want = init.copy()
    for p in range(64):  # the same mask in each 32-partition quadrant
        m = mask[p % 32]
        if m != 255:
            want[p] = x[(p // 32) * 32 + m]
    np.testing.assert_array_equal(shuffle(x, init, mask), want)
    np.testing.assert_array_equal(shuffle(x, init, [255] * 32), init)  # edge: all kept
    with pytest.raises(NKIError, match="shuffle_mask"):  # refused: 254 is neither a partition nor 255
        shuffle(x, init, [254] + list(range(1, 32)))


# --------------------------------------------------------------------------------------------------------
# 3. local_gather into a sub-view / .ap() destination (0.4.0 fix; already right)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def local_gather_into_view(src, idx, mode, n):
    s, ix = _load(src), _load(idx)
    big = nl.ndarray((32, 20), src.dtype, buffer=nl.sbuf)
    nisa.memset(dst=big, value=-1.0)
    if mode == "slice":
        dst = big[:, 4:4 + 8 * n]
    else:  # every other element from element 1
        dst = big.ap(pattern=[[20, 32], [2, 8 * n]], offset=1)
    nisa.local_gather(dst=dst, src_buffer=s, index=ix, num_elem_per_idx=n, num_valid_indices=8)
    return _store(big)


def local_gather_reference(src, idx, mode, n):
    """The page's rule: each 16-partition core flattens its indices partition-first, and each partition
    takes the n elements of its own data from each index."""
    big = np.full((32, 20), -1.0, np.float32)
    for c in range(0, 32, 16):
        flat = idx[c:c + 16].reshape(-1, order="F")[:8]
        g = np.concatenate([src[c:c + 16, i:i + n] for i in flat], axis=1)
        if mode == "slice":
            big[c:c + 16, 4:4 + 8 * n] = g
        else:
            big[c:c + 16, 1:1 + 16 * n:2] = g
    return big


@pytest.mark.parametrize("mode,n", [("slice", 1), ("slice", 2), ("ap", 1)])
def test_local_gather_into_a_view(mode, n):
    src = RNG.standard_normal((32, 10)).astype(np.float32)
    idx = RNG.integers(0, 9, (32, 1)).astype(np.uint16)
    np.testing.assert_array_equal(local_gather_into_view(src, idx, mode, n), local_gather_reference(src, idx, mode, n))


def test_local_gather_view_of_the_wrong_size_is_refused():
    @nki.jit
    def k(src, idx):
        s, ix = _load(src), _load(idx)
        big = nl.ndarray((32, 20), src.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=big[:, 0:7], src_buffer=s, index=ix, num_valid_indices=8)
        return _store(big)

    with pytest.raises(NKIError, match="dst"):
        k(RNG.standard_normal((32, 10)).astype(np.float32), np.zeros((32, 1), np.uint16))


# --------------------------------------------------------------------------------------------------------
# 4. nc_matmul with 3-D+ operands multiplies every element (0.4.0 fix)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def matmul(s, m, dshape):
    a, b = _load(s), _load(m)
    p = nl.ndarray(dshape, nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)
    o = nl.ndarray(dshape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=p)
    return _store(o)


def _mm_reference(s, m):
    """stationary.T @ moving over their free axes flattened row-major (float64)."""
    K = s.shape[0]
    return s.reshape(K, -1).astype(np.float64).T @ m.reshape(K, -1).astype(np.float64)


@pytest.mark.parametrize("sshape,mshape,dshape", [
    ((32, 16), (32, 4, 8), (16, 4, 8)),          # 3-D moving and dst
    ((32, 16), (32, 4, 8), (16, 32)),            # 3-D moving, 2-D dst
    ((32, 2, 8), (32, 3, 2, 5), (16, 30)),       # 3-D stationary, 4-D moving
    ((32, 2, 64), (32, 512), (128, 512)),        # edge: a flattened stationary of exactly 128
])
def test_matmul_operands_of_three_or_more_axes(sshape, mshape, dshape):
    s = RNG.standard_normal(sshape).astype(np.float32)
    m = RNG.standard_normal(mshape).astype(np.float32)
    got = matmul(s, m, dshape)
    np.testing.assert_allclose(got.reshape(dshape[0], -1), _mm_reference(s, m), rtol=1e-5, atol=1e-4)


def test_matmul_three_axis_operand_limits_still_apply():
    s = RNG.standard_normal((32, 2, 72)).astype(np.float32)  # 144 stationary columns > 128
    m = RNG.standard_normal((32, 8)).astype(np.float32)
    with pytest.raises(NKIError, match="stationary free size"):
        matmul(s, m, (128, 8))
    s = RNG.standard_normal((32, 16)).astype(np.float32)
    m = RNG.standard_normal((32, 4, 8)).astype(np.float32)
    with pytest.raises(NKIError, match="dst"):  # a dst of the wrong element count
        matmul(s, m, (16, 4, 4))


# --------------------------------------------------------------------------------------------------------
# 5. quantize_mx into float8_e4m3fn_x4 (0.4.0 fix; already right)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def quantize(x, odt):
    t = _load(x)
    P, F = x.shape
    d = nl.ndarray((P, F // 4), odt, buffer=nl.sbuf)
    s = nl.ndarray((P, F // 4), nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=d, src=t, dst_scale=s)
    raw = nl.ndarray((P, F), nl.uint8, buffer=nl.sbuf)
    nisa.tensor_copy(dst=raw, src=d.view(nl.uint8))
    return _store(raw), _store(s)


def test_quantize_mx_float8_e4m3fn_x4_against_the_page():
    # the Neuron 2.32 page's block scale: X = 2 ** (floor(log2(amax)) - (Emax - 1)), Emax 8 for e4m3fn;
    # the values divided by X rounded to float8_e4m3fn (saturated at 448)
    x = (RNG.standard_normal((32, 16)) * np.exp2(RNG.integers(-6, 6, (32, 16)))).astype(BF16)
    x[8:16, 4:8] = 0  # an all-zero group: scale 2 ** -127 (biased 0)
    with use_scale_rule("double"):
        raw, scales = quantize(x, nl.float8_e4m3fn_x4)
    xf = x.astype(np.float32)
    for g in range(4):
        for j in range(4):
            grp = xf[8 * g:8 * g + 8, 4 * j:4 * j + 4]
            amax = np.abs(grp).max()
            e = math.floor(math.log2(amax)) - 7 if amax else -127
            assert scales[g, j] == e + 127
            want = np.clip(grp.astype(np.float64) / 2.0 ** e, -448, 448).astype(ml_dtypes.float8_e4m3fn)
            np.testing.assert_array_equal(raw[8 * g:8 * g + 8, 4 * j:4 * j + 4], want.view(np.uint8))
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):  # refused before trn3
        quantize(x, nl.float8_e4m3fn_x4)


# --------------------------------------------------------------------------------------------------------
# 6. iota / affine_select with register offsets (0.4.0 fix; already right) and affine_select's
#    offset keyword (0.3.0: "offset moved from 3rd positional argument to keyword argument")
# --------------------------------------------------------------------------------------------------------
@nki.jit
def iota_and_select_from_register(n, x):
    n_sb = _load(n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, n_sb)
    io = nl.ndarray((4, 8), nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=io, pattern=[[1, 8]], offset=reg, channel_multiplier=10)
    t = _load(x)
    r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.affine_select(r, [[-1, 8]], 1, t, -9.0, nl.greater_equal, offset=reg)  # the page's positional order
    return _store(io), _store(r)


def test_iota_and_affine_select_with_a_register_offset():
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    for n in (7, -2):
        io, r = iota_and_select_from_register(np.array([[n]], np.int32), x)
        p, f = np.arange(4)[:, None], np.arange(8)[None, :]
        np.testing.assert_array_equal(io, n + 10 * p + f)
        np.testing.assert_array_equal(r, np.where(n + p - f >= 0, x, -9.0))


def test_affine_select_takes_offset_as_a_keyword_only_after_cmp_op():
    @nki.jit
    def old_order(x):
        t = _load(x)
        r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.affine_select(r, [[-1, 8]], 0, 1, t, -9.0)  # before 0.3.0: (dst, pattern, offset, cm, tile, value)
        return _store(r)

    with pytest.raises((NKIError, TypeError)):
        old_order(RNG.standard_normal((4, 8)).astype(np.float32))


# --------------------------------------------------------------------------------------------------------
# 7. dma_compute: scales only 1.0 (0.4.0 fix) and oob_mode (0.4.0 feature)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def dma_sum(a, b, scales):
    d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_compute(dst=d, srcs=[_load(a), _load(b)], reduce_op=nl.add, scales=scales)
    return _store(d)


def test_dma_compute_has_no_scale_mode():
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    b = RNG.standard_normal((4, 6)).astype(BF16)
    want = a + b.astype(np.float32)
    np.testing.assert_array_equal(dma_sum(a, b, None), want)
    np.testing.assert_array_equal(dma_sum(a, b, [1.0, 1.0]), want)
    for scales in ([2.0, 1.0], [1.0, 0.0]):
        with pytest.raises(NKIError, match="scales"):
            dma_sum(a, b, scales)


@nki.jit
def gather_add(table, idx, init, mode):
    """Gather RMW: dst(SB) = dst + table[idx] (the page's "Gather RMW" form)."""
    F, P = table.shape[1], idx.shape[0]
    i = _load(idx)
    d = _load(init)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=i, indirect_dim=0)
    nisa.dma_compute(dst=d, srcs=[rows, d], reduce_op=nl.add, oob_mode=mode)
    return _store(d)


@nki.jit
def scatter_add(table, idx, vals, mode):
    """Scatter RMW: dst(HBM)[idx] = dst[idx] + vals (the page's "Scatter RMW" form)."""
    F, P = table.shape[1], idx.shape[0]
    i = _load(idx)
    v = _load(vals)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=i, indirect_dim=0)
    nisa.dma_compute(dst=rows, srcs=[rows, v], reduce_op=nl.add, oob_mode=mode)
    return table


def test_dma_compute_oob_skip_gather_and_scatter():
    table = RNG.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([[2], [6], [0], [-3]], np.int32)
    init = RNG.standard_normal((4, 4)).astype(np.float32)
    want = init.copy()
    want[0] += table[2]
    want[2] += table[0]
    np.testing.assert_allclose(gather_add(table, idx, init, nisa.oob_mode.skip), want, rtol=1e-6)
    vals = RNG.standard_normal((4, 4)).astype(np.float32)
    want = table.copy()
    want[2] += vals[0]
    want[0] += vals[2]
    np.testing.assert_allclose(scatter_add(table.copy(), idx, vals, nisa.oob_mode.skip), want, rtol=1e-6)
    # in bounds, error and skip agree (edge)
    ok = np.array([[5], [0], [3], [1]], np.int32)
    np.testing.assert_array_equal(gather_add(table, ok, init, nisa.oob_mode.error),
                                  gather_add(table, ok, init, nisa.oob_mode.skip))
    with pytest.raises(NKIError, match="out-of-bounds|oob|bounds"):  # refused: out of bounds with error
        gather_add(table, idx, init, nisa.oob_mode.error)


def test_dma_compute_skip_needs_indirect_operands():
    @nki.jit
    def direct(a, mode):
        t = _load(a)
        d = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_compute(dst=d, srcs=[t, t], reduce_op=nl.add, oob_mode=mode)
        return _store(d)

    a = RNG.standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_array_equal(direct(a, nisa.oob_mode.error), a + a)
    with pytest.raises(NKIError, match="oob_mode=skip is only for indirect"):
        direct(a, nisa.oob_mode.skip)
    with pytest.raises(NKIError, match="oob_mode"):
        direct(a, "skip")


# --------------------------------------------------------------------------------------------------------
# 8. nl.logical_and (0.4.0 fix; already right)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def logical(a, b):
    return _store(nl.logical_and(_load(a), _load(b)))


def test_logical_and_against_numpy():
    a = np.array([[0, 1, 1, 0, 2, -3, 0.5]], np.float32)
    b = np.array([[0, 0, 1, 1, 3, 1, 0.25]], np.float32)
    np.testing.assert_array_equal(logical(a, b).astype(bool), np.logical_and(a, b))
    ai, bi = a.astype(np.int32), b.astype(np.int32)  # 0.5 / 0.25 truncate to 0: edge of a false operand
    np.testing.assert_array_equal(logical(ai, bi).astype(bool), np.logical_and(ai, bi))


# --------------------------------------------------------------------------------------------------------
# 9. nl.abs_max / nl.abs_min: trn3 only; element-wise, as tensor_scalar(_reduce) op0 and activate2's
#    reduce_op (0.4.0 features)
# --------------------------------------------------------------------------------------------------------
def abs_max_ref(x, y):
    """The page: x if |x| > |y|, else y (the signed value)."""
    return np.where(np.abs(x) > np.abs(y), x, y)


def abs_min_ref(x, y):
    """The page: x if |x| < |y|, else y."""
    return np.where(np.abs(x) < np.abs(y), x, y)


X = np.array([[-5, 3, -1, 2, 0.5, -0.25, 7, -0.0]], np.float32)
Y = np.array([[3, -5, 1, -2, -0.75, 0.125, -7.5, 1e-3]], np.float32)


@nki.jit
def elementwise(a, b, which):
    return _store(getattr(nl, which)(_load(a), _load(b)))


@nki.jit
def scalar_op0(a, op, imm):
    d = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=d, data=_load(a), op0=op, operand0=imm)
    return _store(d)


@nki.jit
def scalar_reduce(a, op, imm, rop):
    d = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=d, data=_load(a), op0=op, operand0=imm, reduce_op=rop, reduce_res=r)
    return _store(d), _store(r)


@pytest.mark.parametrize("which,ref", [("abs_max", abs_max_ref), ("abs_min", abs_min_ref)])
def test_abs_max_abs_min_on_trn3(which, ref):
    op = getattr(nl, which)
    with target.use("gen4"):
        np.testing.assert_array_equal(elementwise(X, Y, which), ref(X, Y))
        np.testing.assert_array_equal(scalar_op0(X, op, 2.0), ref(X, np.float32(2.0)))
        d, r = scalar_reduce(X, op, -0.5, nl.add)
        np.testing.assert_array_equal(d, ref(X, np.float32(-0.5)))
        np.testing.assert_allclose(r, ref(X, np.float32(-0.5)).sum(1, keepdims=True), rtol=1e-6)
        with pytest.raises(NKIError, match="reduce_op"):  # the page's reduce_op list: add, multiply, max, min
            scalar_reduce(X, nl.add, 0.0, op)
    for gen in ("gen2", "gen3"):
        with target.use(gen):
            for call in (lambda: elementwise(X, Y, which), lambda: scalar_op0(X, op, 2.0),
                         lambda: scalar_reduce(X, op, 1.0, nl.add)):
                with pytest.raises(NKIError, match="NeuronCore-v4"):
                    call()


@nki.jit
def activate2_reduce(a, op, rop, relu_param=0.0, op0=None, op1=None, imm0=0.0, imm1=0.0):
    d = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=d, op=op, data=_load(a), imm0=imm0, imm1=imm1, op0=op0 or nl.bypass, op1=op1 or nl.bypass,
                   relu_param=relu_param, reduce_op=rop, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _store(d), _store(r)


def _fold(ref, row):
    """A left fold of the pairwise operator over a row, from the reduction's identity element."""
    acc = row[0]
    for v in row[1:]:
        acc = ref(acc, v)
    return acc


@pytest.mark.parametrize("which,ref", [("abs_max", abs_max_ref), ("abs_min", abs_min_ref)])
def test_activate2_reduces_with_abs_max_abs_min(which, ref):
    x = RNG.standard_normal((8, 24)).astype(np.float32)
    x[3] = [2.0, -2.0] * 12  # ties of magnitude: the pairwise rule's "else y" takes the later element
    with target.use("gen4"):
        d, r = activate2_reduce(x, nl.bypass, getattr(nl, which))
        np.testing.assert_array_equal(d, x)
        np.testing.assert_array_equal(r[:, 0], [_fold(ref, row) for row in x])
        with pytest.raises(NKIError, match="reduce_op"):  # refused: not one of the page's reduce_ops
            activate2_reduce(x, nl.bypass, nl.subtract)


# --------------------------------------------------------------------------------------------------------
# 10. square / relu as tensor_scalar op0 on trn3; nl.prelu / nl.bypass with activate2 (0.4.0 features)
# --------------------------------------------------------------------------------------------------------
def test_square_and_relu_as_op0_on_trn3():
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    with target.use("gen4"):
        np.testing.assert_array_equal(scalar_op0(x, nl.square, 0.0), np.square(x))
        np.testing.assert_array_equal(scalar_op0(x, nl.relu, None), np.maximum(x, 0))
        d, r = scalar_reduce(x, nl.square, 0.0, nl.add)
        np.testing.assert_allclose(r, np.square(x).sum(1, keepdims=True), rtol=1e-5)
        with pytest.raises(NKIError, match="operand0"):  # a unary op0: operand0 None or 0
            scalar_op0(x, nl.square, 2.0)


def test_prelu_and_bypass_with_activate2():
    x = RNG.standard_normal((6, 10)).astype(np.float32)
    with target.use("gen4"):
        # scale 2, bias -0.25, then PReLU with negative slope 0.1
        d, r = activate2_reduce(x, nl.prelu, nl.maximum, relu_param=0.1, op0=nl.multiply, op1=nl.add,
                                imm0=2.0, imm1=-0.25)
        v = x * np.float32(2.0) + np.float32(-0.25)
        want = np.where(v >= 0, v, np.float32(0.1) * v)
        np.testing.assert_allclose(d, want, rtol=1e-6)
        np.testing.assert_allclose(r[:, 0], want.max(1), rtol=1e-6)
        d, _ = activate2_reduce(x, nl.prelu, nl.add)  # edge: the default slope 0.0 is relu
        np.testing.assert_array_equal(d, np.maximum(x, 0))
        d, _ = activate2_reduce(x, nl.bypass, nl.add, op0=nl.subtract, imm0=1.5)  # bypass: identity
        np.testing.assert_array_equal(d, x - np.float32(1.5))
        with pytest.raises(NKIError, match="relu_param"):  # refused: a slope for a non-parametric op
            activate2_reduce(x, nl.bypass, nl.add, relu_param=0.2)
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):
        activate2_reduce(x, nl.prelu, nl.add)


# --------------------------------------------------------------------------------------------------------
# 11. tile_size's byte-sized SBUF / PSUM fields (0.4.0 feature), per NeuronCore version
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gen,kib", [("gen2", 192), ("gen3", 224), ("gen4", 256)])
def test_tile_size_sbuf_and_psum_fields_per_target(gen, kib):
    # architecture guides: SBUF 24 / 28 / 32 MiB over 128 partitions; PSUM 2 MiB, 8 banks of 2 KiB
    with target.use(gen):
        ts = nl.tile_size
        assert ts.sbuf_fmax_bytes == kib * 1024
        assert ts.sbuf_fmax == kib * 1024 // 4
        assert ts.sbuf_size_bytes == 128 * kib * 1024 == {192: 24, 224: 28, 256: 32}[kib] * 2 ** 20
        assert ts.total_available_sbuf_size == ts.sbuf_fmax_bytes  # deprecated: "returns the same value"
        assert ts.psum_bank_fmax_bytes == 2048 and ts.psum_bank_fmax == 512 == ts.psum_fmax
        assert ts.psum_num_banks * ts.psum_bank_fmax_bytes * 128 == 2 * 2 ** 20


def test_tile_size_sbuf_fmax_is_the_largest_tile_the_target_places():
    @nki.jit
    def one_tile(x, nbytes):
        t = nl.ndarray((128, nbytes // 4), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        return x

    x = np.zeros((1, 1), np.float32)
    for gen in ("gen3", "gen4"):
        with target.use(gen):
            one_tile(x, nl.tile_size.sbuf_fmax_bytes)  # edge: exactly the partition
            with pytest.raises(NKIError):
                one_tile(x, nl.tile_size.sbuf_fmax_bytes + 4096)


# --------------------------------------------------------------------------------------------------------
# 12. nc_matmul float8_e4m3fn on trn3, never mixed with float8_e4m3 (0.4.0 feature)
# --------------------------------------------------------------------------------------------------------
def test_matmul_float8_e4m3fn_on_trn3():
    s = RNG.standard_normal((32, 16)).astype(ml_dtypes.float8_e4m3fn)
    m = RNG.standard_normal((32, 24)).astype(ml_dtypes.float8_e4m3fn)
    m5 = RNG.standard_normal((32, 24)).astype(ml_dtypes.float8_e5m2)
    mleg = RNG.standard_normal((32, 24)).astype(ml_dtypes.float8_e4m3)
    with target.use("gen4"):
        np.testing.assert_allclose(matmul(s, m, (16, 24)), _mm_reference(s.astype(np.float32), m.astype(np.float32)),
                                   rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(matmul(s, m5, (16, 24)),  # edge: e4m3fn with e5m2
                                   _mm_reference(s.astype(np.float32), m5.astype(np.float32)), rtol=1e-5, atol=1e-4)
        with pytest.raises(NKIError, match="cannot be mixed"):
            matmul(s, mleg, (16, 24))
    with target.use("gen3"):
        with pytest.raises(NKIError, match="NeuronCore-v4"):
            matmul(s, m, (16, 24))
        matmul(mleg[:, :16].copy(), mleg, (16, 24))  # edge: legacy e4m3 stays accepted


# --------------------------------------------------------------------------------------------------------
# 13. NKI 0.3.0 breaking changes: dma_copy hwdge dtypes, memset value types, no DMA from PSUM
# --------------------------------------------------------------------------------------------------------
def test_dma_copy_hwdge_needs_matching_dtypes():
    @nki.jit
    def k(x, dtype, reinterpret):
        t = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
        src = x.view(dtype) if reinterpret else x
        nisa.dma_copy(dst=t, src=src, dge_mode=nisa.dge_mode.hwdge)
        return _store(t)

    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(k(x, nl.float32, False), x)
    np.testing.assert_array_equal(k(x, nl.int32, True), x.view(np.int32))  # edge: .view() reinterprets
    with pytest.raises(NKIError, match="hwdge"):
        k(x, nl.bfloat16, False)


def test_memset_value_matches_the_destination_dtype():
    @nki.jit
    def k(x, value, dtype):
        t = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=value)
        return _store(t)

    x = np.zeros((2, 4), np.float32)
    np.testing.assert_array_equal(k(x, 2, nl.int32), np.full((2, 4), 2, np.int32))
    np.testing.assert_array_equal(k(x, 2, nl.float32), np.full((2, 4), 2, np.float32))  # edge: int into float
    for dtype in (nl.int32, nl.uint8):
        with pytest.raises(NKIError, match="memset"):
            k(x, 2.5, dtype)
    # edge: a whole float into an integer tile, as nki-library's cross_partition_copy fills a uint32 tile
    # with value=0.0 (the release note's example refuses 2.0; the official library's kernel must run)
    np.testing.assert_array_equal(k(x, 0.0, nl.uint32), np.zeros((2, 4), np.uint32))
    np.testing.assert_array_equal(k(x, 2.0, nl.int32), np.full((2, 4), 2, np.int32))
    with pytest.raises(NKIError, match="x4|packed"):
        k(x, 1.0, nl.float8_e4m3fn_x4)


def test_dma_copy_does_not_read_psum():
    @nki.jit
    def k(x, via_sbuf):
        p = nl.ndarray(x.shape, x.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=p, src=_load(x))
        if via_sbuf:
            s = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=s, src=p)
            p = s
        o = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=p)
        return o

    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(k(x, True), x)
    with pytest.raises(NKIError, match="PSUM"):
        k(x, False)
