"""Vector Engine instructions (nc_stream_shuffle, tensor_copy_predicated, max8, nc_find_index8,
nc_match_replace8) in both API generations, against NumPy references written from their pages."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa1
from nki_kernels.simulator import language as nl1
from nki_kernels.simulator import nki as nki1
from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(14)


def _shuffle_ref(dst, src, mask):
    """dst partition q*32+i takes src partition q*32+mask[i]; 255 keeps dst."""
    out = dst.copy()
    for p in range(dst.shape[0]):
        m = mask[p % 32]
        if m != 255:
            out[p] = src[(p // 32) * 32 + m]
    return out


# ---------------------------------------------------------------------------
# nc_stream_shuffle
# ---------------------------------------------------------------------------
@nki.jit
def shuffle_kernel(x, init, mask, src_parts=None, dst_lo=0, dst_hi=None):
    P, F = init.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    d = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    nisa.dma_copy(dst=d, src=init)
    hi = P if dst_hi is None else dst_hi
    src = s if src_parts is None else s[0:src_parts, :]
    nisa.nc_stream_shuffle(dst=d[dst_lo:hi, :], src=src, shuffle_mask=mask)
    nisa.dma_copy(dst=out, src=d)
    return out


def test_stream_shuffle_reverses_each_quadrant():
    x = RNG.standard_normal((128, 16)).astype(np.float32)
    init = np.zeros((128, 16), np.float32)
    mask = list(range(31, -1, -1))
    got = nki.simulate(shuffle_kernel)(x, init, mask)
    np.testing.assert_array_equal(got, _shuffle_ref(init, x, mask))


def test_stream_shuffle_255_keeps_partition():
    x = RNG.standard_normal((64, 8)).astype(np.float32)
    init = RNG.standard_normal((64, 8)).astype(np.float32)
    mask = [255 if i % 3 == 0 else (i + 5) % 32 for i in range(32)]
    got = nki.simulate(shuffle_kernel)(x, init, mask)
    np.testing.assert_array_equal(got, _shuffle_ref(init, x, mask))


def test_stream_shuffle_broadcast_one_partition_into_a_later_quadrant():
    # src is partition 0 only; dst is quadrant 2 (partitions 64..95): every dst row copies src row 0.
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    init = np.full((128, 8), -1.0, np.float32)
    got = nki.simulate(shuffle_kernel)(x, init, [0] * 32, src_parts=1, dst_lo=64, dst_hi=96)
    want = init.copy()
    want[64:96] = x[0]
    np.testing.assert_array_equal(got, want)


def test_stream_shuffle_rejects_crossing_a_quadrant():
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    init = np.zeros((128, 8), np.float32)
    with pytest.raises(NKIError, match="quadrant"):
        nki.simulate(shuffle_kernel)(x, init, [0] * 32, src_parts=1, dst_lo=16, dst_hi=48)


def test_stream_shuffle_start_partition_rules():
    # num_active_partitions = 64: starts 0 or 64 only (32 is a quadrant boundary but not allowed)
    x = RNG.standard_normal((64, 8)).astype(np.float32)
    init = np.zeros((128, 8), np.float32)
    mask = list(range(32))
    got = nki.simulate(shuffle_kernel)(x, init, mask, dst_lo=64, dst_hi=128)
    want = init.copy()
    want[64:] = x
    np.testing.assert_array_equal(got, want)
    with pytest.raises(NKIError, match="0/64"):
        nki.simulate(shuffle_kernel)(x, init, mask, dst_lo=32, dst_hi=96)
    with pytest.raises(NKIError, match="0/64"):
        nki.simulate(shuffle_kernel)(x, init, mask, dst_lo=16, dst_hi=80)
    # num_active_partitions = 96: start 0 only
    x96 = RNG.standard_normal((96, 8)).astype(np.float32)
    with pytest.raises(NKIError, match="must be 0"):
        nki.simulate(shuffle_kernel)(x96, init, mask, dst_lo=32, dst_hi=128)
    # 32 active, a short access inside a quadrant must still start on its boundary
    with pytest.raises(NKIError, match="0/32/64/96"):
        nki.simulate(shuffle_kernel)(x[:1], init, [0] * 32, src_parts=1, dst_lo=40, dst_hi=48)


def test_stream_shuffle_rejects_short_mask_and_missing_source_partition():
    x = RNG.standard_normal((32, 8)).astype(np.float32)
    init = np.zeros((32, 8), np.float32)
    with pytest.raises(NKIError, match="32"):
        nki.simulate(shuffle_kernel)(x, init, [0] * 16)
    with pytest.raises(NKIError, match="source partition"):
        nki.simulate(shuffle_kernel)(x, init, [5] * 32, src_parts=2)


def test_stream_shuffle_rejects_dtype_mismatch():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        d = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=x)
        nisa.nc_stream_shuffle(dst=d, src=s, shuffle_mask=list(range(32)))
        return out

    with pytest.raises(NKIError, match="dtype"):
        nki.simulate(k)(np.zeros((32, 4), np.float32))


def test_gen1_stream_shuffle_in_place_with_mask():
    x = RNG.standard_normal((32, 8)).astype(np.float32)
    mask = [(i + 1) % 32 for i in range(32)]

    @nki1.jit
    def k(a):
        out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
        t = nl1.load(a)
        d = nl1.zeros(a.shape, dtype=a.dtype)
        i_p, i_f = nl1.mgrid[0:32, 0:8]
        nisa1.nc_stream_shuffle(t, d, mask, mask=(i_f < 4))
        nl1.store(out, d)
        return out

    got = k(x)
    want = np.zeros_like(x)
    want[:, :4] = _shuffle_ref(np.zeros_like(x), x, mask)[:, :4]
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------
# tensor_copy_predicated
# ---------------------------------------------------------------------------
@nki.jit
def predicated_kernel(src, pred, init, reverse=False, scalar=None):
    out = nl.ndarray(init.shape, dtype=init.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    p = nl.ndarray(pred.shape, dtype=pred.dtype, buffer=nl.sbuf)
    d = nl.ndarray(init.shape, dtype=init.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=src)
    nisa.dma_copy(dst=p, src=pred)
    nisa.dma_copy(dst=d, src=init)
    nisa.tensor_copy_predicated(dst=d, src=s if scalar is None else scalar, predicate=p, reverse_pred=reverse)
    nisa.dma_copy(dst=out, src=d)
    return out


def test_copy_predicated():
    src = RNG.standard_normal((64, 40)).astype(np.float32)
    init = RNG.standard_normal((64, 40)).astype(np.float32)
    pred = (RNG.random((64, 40)) > 0.5).astype(np.uint8) * 7
    got = nki.simulate(predicated_kernel)(src, pred, init)
    np.testing.assert_array_equal(got, np.where(pred != 0, src, init))


@pytest.mark.parametrize("reverse", [False, True])
def test_copy_predicated_scalar_src(reverse):
    init = RNG.standard_normal((16, 8)).astype(np.float32)
    pred = (RNG.random((16, 8)) > 0.5).astype(np.uint32)
    got = nki.simulate(predicated_kernel)(init, pred, init, reverse, scalar=2.5)
    np.testing.assert_array_equal(got, np.where((pred != 0) != reverse, np.float32(2.5), init))


def test_copy_predicated_reverse_needs_a_scalar_src():
    # 2.33 page: "reverse_pred can only be set to true if src is a scalar"
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    pred = (RNG.random((16, 8)) > 0.5).astype(np.uint8)
    with pytest.raises(NKIError, match="reverse_pred can only be set to true if src is a scalar"):
        nki.simulate(predicated_kernel)(x, pred, x, True)


def test_copy_predicated_rejects_float_predicate():
    # (a scalar src of dst's kind is valid: tests/test_isa_pages.py::test_copy_predicated_scalar_src_of_dst_kind)
    init = np.zeros((16, 8), np.float32)
    with pytest.raises(NKIError, match="predicate"):
        nki.simulate(predicated_kernel)(init, np.ones((16, 8), np.float32), init)


def test_gen1_copy_predicated():
    src = RNG.standard_normal((32, 16)).astype(np.float32)
    pred = (RNG.random((32, 16)) > 0.3).astype(np.uint16)

    @nki1.jit
    def k(a, p):
        out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
        d = nl1.zeros(a.shape, dtype=a.dtype)
        nisa1.tensor_copy_predicated(src=nl1.load(a), dst=d, predicate=nl1.load(p))
        nl1.store(out, d)
        return out

    np.testing.assert_array_equal(k(src, pred), np.where(pred != 0, src, 0))


# ---------------------------------------------------------------------------
# max8 / nc_find_index8 / nc_match_replace8
# ---------------------------------------------------------------------------
@nki.jit
def top8_kernel(x, vals_in):
    P = x.shape[0]
    mx = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    idx = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    rep = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ridx = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    m = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=m, src=t)
    nisa.dma_copy(dst=mx, src=m)
    v = nl.ndarray((P, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=vals_in)
    i = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=i, data=t, vals=v)
    nisa.dma_copy(dst=idx, src=i)
    r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    ri = nl.ndarray((P, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=r, data=t, vals=v, imm=-1e9, dst_idx=ri)
    nisa.dma_copy(dst=rep, src=r)
    nisa.dma_copy(dst=ridx, src=ri)
    return mx, idx, rep, ridx


def test_max8_find_index8_match_replace8():
    x = RNG.permutation(np.arange(16 * 100, dtype=np.float32)).reshape(16, 100)
    top = -np.sort(-x, axis=1)[:, :8]
    mx, idx, rep, ridx = nki.simulate(top8_kernel)(x, top)
    np.testing.assert_array_equal(mx, top)
    want_idx = np.array([[np.flatnonzero(x[p] == v)[0] for v in top[p]] for p in range(16)])
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(ridx, want_idx)
    want_rep = x.copy()
    np.put_along_axis(want_rep, want_idx, -1e9, axis=1)
    np.testing.assert_array_equal(rep, want_rep)


def test_find_index8_and_match_replace8_duplicates_follow_the_page():
    # data = [1, 2, 3, 4, 8 x 7], vals = [3, 8 x 7] (the nc_match_replace8 page's example).
    data = np.array([[1, 2, 3, 4] + [8] * 7 + [0] * 5], np.float32)
    vals = np.array([[3] + [8] * 7], np.float32)
    _, idx, _, ridx = nki.simulate(top8_kernel)(data, vals)
    np.testing.assert_array_equal(ridx[0], [2, 10, 9, 8, 7, 6, 5, 4])
    np.testing.assert_array_equal(idx[0], [2, 4, 5, 6, 7, 8, 9, 10])


def test_find_index8_value_not_found_gives_sentinel():
    data = np.arange(16, dtype=np.float32)[None, :]
    vals = np.array([[0, 1, 2, 3, 4, 5, 6, 99]], np.float32)
    _, idx, _, _ = nki.simulate(top8_kernel)(data, vals)
    assert idx[0, 7] == 0xFFFFFFFF and list(idx[0, :7]) == list(range(7))


def test_max8_rejects_too_few_elements():
    with pytest.raises(NKIError, match="8..16384"):
        nki.simulate(top8_kernel)(np.zeros((4, 7), np.float32), np.zeros((4, 8), np.float32))


def test_gen1_max8_find_index8_match_replace8():
    x = RNG.standard_normal((8, 64)).astype(np.float32)

    @nki1.jit
    def k(a):
        t = nl1.load(a)
        m = nisa1.max8(src=t)
        i = nisa1.nc_find_index8(data=t, vals=m)
        r = nisa1.nc_match_replace8(data=t, vals=m, imm=0.0)
        outs = [nl1.ndarray(v.shape, dtype=v.dtype, buffer=nl1.shared_hbm) for v in (m, i, r)]
        for o, v in zip(outs, (m, i, r)):
            nl1.store(o, v)
        return tuple(outs)

    m, i, r = k(x)
    top = -np.sort(-x, axis=1)[:, :8]
    np.testing.assert_array_equal(m, top)
    assert i.dtype == np.uint32
    np.testing.assert_array_equal(i, np.argsort(-x, axis=1, kind="stable")[:, :8])
    want = x.copy()
    np.put_along_axis(want, i.astype(np.int64), 0.0, axis=1)
    np.testing.assert_array_equal(r, want)


# ---------------------------------------------------------------------------
# tensor_tensor (first generation): same elements per partition, no free-axis broadcasting
# ---------------------------------------------------------------------------
def test_gen1_tensor_tensor_pairs_a_partition_vector_with_a_p_by_1_tile():
    # The contributed pipelined attention: running_max[ip, g] (ip from nl.mgrid[0:128, 0:1]) is a
    # [128] vector, final_reduce_max[g] a [128, 1] tile; element p pairs with element p.
    a = RNG.standard_normal((128, 6)).astype(np.float32)
    b = RNG.standard_normal((128, 1)).astype(np.float32)

    @nki1.jit
    def k(x, y):
        t = nl1.load(x)
        ip, _ = nl1.mgrid[0:128, 0:1]
        t[ip, 2] = nisa1.tensor_tensor(t[ip, 2], nl1.load(y), op=nl1.minimum)
        out = nl1.ndarray((128, 6), nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, t)
        return out

    want = a.astype(np.float64).copy()
    want[:, 2] = np.minimum(want[:, 2], b[:, 0])
    np.testing.assert_array_equal(k(a, b), want)


def test_gen1_tensor_tensor_broadcasts_a_column_as_the_compiler_does():
    # The page asks for equal elements per partition, but a [P, 1] operand runs on hardware as a
    # zero-step free access pattern (nki-samples' quantized_double_row_matmul scales [128, N] by
    # [128, 1] and matches NumPy on Trainium): accepted either side, any other mismatch refused.
    @nki1.jit
    def k(x, y):
        r = nisa1.tensor_tensor(nl1.load(x), nl1.load(y), op=np.subtract)
        out = nl1.ndarray(r.shape, nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, r)
        return out

    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    col = np.arange(128, dtype=np.float32).reshape(128, 1) * 3
    np.testing.assert_array_equal(k(a, col), a - col)
    np.testing.assert_array_equal(k(col, a), col - a)
    with pytest.raises(NKIError, match=r"tensor_tensor.*\(128, 8\).*\(128, 4\).*same number of elements per partition"):
        k(a, np.ones((128, 4), np.float32))
