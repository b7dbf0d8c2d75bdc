"""range_select, select_reduce, tensor_scalar_cumulative, reciprocal, scalar_tensor_tensor,
sequence_bounds, nc_n_gather, nonzero_with_count, dma_compute and dma_transpose against NumPy
references written from their reference pages (both API generations where both document them)."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa1
from nki_kernels.simulator import language as nl1
from nki_kernels.simulator import nki as nki1
from nki_kernels.simulator import standalone as nki
from tests.isa_helpers import to_hbm, to_sbuf

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(15)


_sb, _out = to_sbuf, to_hbm


# ---------------------------------------------------------------------------
# range_select / select_reduce (with reduction registers)
# ---------------------------------------------------------------------------
@nki.jit
def range_select_kernel(x, lo, hi, cmd="reset_reduce", repeat=1):
    t = _sb(x)
    b0 = _sb(lo)
    b1 = _sb(hi)  # (bounds are [P, 1] fp32 tiles; on_false_value must be FP32_MIN, the default)
    d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in range(repeat):
        nisa.range_select(dst=d, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=b0,
                          bound1=b1, reduce_cmd=cmd if i == 0 else nisa.reduce_cmd.reduce, reduce_res=r,
                          reduce_op=nl.maximum, range_start=2.0)
    return _out(d), _out(r)


def test_range_select_and_reduction():
    x = RNG.standard_normal((8, 32)).astype(np.float32)
    lo = RNG.integers(0, 10, (8, 1)).astype(np.float32)
    got, red = nki.simulate(range_select_kernel)(x, lo, np.full((8, 1), 20.0, np.float32))
    idx = np.arange(32)[None, :] + 2.0
    want = np.where((idx >= lo) & (idx < 20.0), x, np.finfo(np.float32).min)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(red, want.max(axis=1, keepdims=True))


def test_reduce_cmd_reduce_accumulates_across_instructions():
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    lo = np.zeros((4, 1), np.float32)
    # reset_reduce then reduce: max of max over the same data is the same max; with add it would differ.
    _, red = nki.simulate(range_select_kernel)(x, lo, np.full((4, 1), 100.0, np.float32), repeat=2)
    np.testing.assert_array_equal(red, x.max(axis=1, keepdims=True))


def test_range_select_needs_neuroncore_v3():
    from nki_kernels.simulator.instructions import target

    x = np.zeros((4, 16), np.float32)
    with target.use("gen2"), pytest.raises(NKIError, match="NeuronCore-v3"):
        nki.simulate(range_select_kernel)(x, np.zeros((4, 1), np.float32), np.ones((4, 1), np.float32))


@nki.jit
def select_reduce_kernel(x, pred, fill):
    t = _sb(x)
    p = _sb(pred)
    d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=d, predicate=p, on_true=t, on_false=fill, reduce_res=r,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _out(d), _out(r)


def test_select_reduce():
    x = RNG.standard_normal((16, 24)).astype(np.float32)
    pred = (RNG.random((16, 24)) > 0.5).astype(np.uint8)
    got, red = nki.simulate(select_reduce_kernel)(x, pred, -5.0)
    want = np.where(pred != 0, x, np.float32(-5.0))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(red, want.max(axis=1, keepdims=True))


def test_select_reduce_rejects_uint32_predicate():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(NKIError, match="predicate dtype"):
        nki.simulate(select_reduce_kernel)(x, np.ones((4, 8), np.uint32), 0.0)


# ---------------------------------------------------------------------------
# tensor_scalar_cumulative
# ---------------------------------------------------------------------------
@nki.jit
def cumulative_kernel(x, cmd="reset_reduce", imm1=None, twice=False):
    t = _sb(x)
    d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(dst=d, src=t, op0=nl.multiply, op1=nl.add, imm0=2.0, imm1=imm1, reduce_cmd=cmd)
    if twice:
        nisa.tensor_scalar_cumulative(dst=d, src=t, op0=nl.multiply, op1=nl.add, imm0=2.0,
                                      reduce_cmd=nisa.reduce_cmd.reduce)
    return _out(d)


def test_tensor_scalar_cumulative_sum_load_and_continue():
    x = RNG.standard_normal((8, 10)).astype(np.float32)
    got = nki.simulate(cumulative_kernel)(x)
    np.testing.assert_allclose(got, np.cumsum(2.0 * x.astype(np.float64), axis=1), rtol=1e-5, atol=1e-5)
    got = nki.simulate(cumulative_kernel)(x, cmd="load_reduce", imm1=3.0)
    np.testing.assert_allclose(got, 3.0 + np.cumsum(2.0 * x.astype(np.float64), axis=1), rtol=1e-5, atol=1e-5)
    got = nki.simulate(cumulative_kernel)(x, twice=True)
    first = np.cumsum(2.0 * x.astype(np.float64), axis=1)
    np.testing.assert_allclose(got, first[:, -1:] + first, rtol=1e-5, atol=1e-5)


def test_tensor_scalar_cumulative_rejects_int32():
    with pytest.raises(NKIError, match="not supported"):
        nki.simulate(cumulative_kernel)(np.zeros((4, 8), np.int32))


# ---------------------------------------------------------------------------
# reciprocal / scalar_tensor_tensor in both generations
# ---------------------------------------------------------------------------
def test_reciprocal_and_scalar_tensor_tensor_both_generations():
    x = (RNG.random((16, 20)) + 0.5).astype(np.float32)
    y = RNG.standard_normal((16, 20)).astype(np.float32)
    col = RNG.standard_normal((16, 1)).astype(np.float32)

    @nki.jit
    def k2(a, b, c):
        ta, tb, tc = _sb(a), _sb(b), _sb(c)
        r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=r, data=ta)
        s = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=s, data=ta, op0=nl.subtract, operand0=tc, op1=nl.multiply, operand1=tb)
        return _out(r), _out(s)

    @nki1.jit
    def k1(a, b, c):
        ta, tb, tc = nl1.load(a), nl1.load(b), nl1.load(c)
        r = nisa1.reciprocal(ta)
        s = nisa1.scalar_tensor_tensor(data=ta, op0=np.subtract, operand0=tc, op1=np.multiply, operand1=tb,
                                       reverse1=True)
        outs = [nl1.ndarray(a.shape, dtype=nl1.float32, buffer=nl1.shared_hbm) for _ in range(2)]
        nl1.store(outs[0], r)
        nl1.store(outs[1], s)
        return tuple(outs)

    want_r = 1.0 / x.astype(np.float64)
    want_s = (x.astype(np.float64) - col) * y
    for r, s in (nki.simulate(k2)(x, y, col), k1(x, y, col)):
        np.testing.assert_allclose(r, want_r, rtol=1e-6)
        np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# GpSimd: sequence_bounds, nc_n_gather, nonzero_with_count
# ---------------------------------------------------------------------------
def _bounds_ref(seq):
    """Start and one-past-end of each element's segment; padding (0) gets (n, -1)."""
    n = len(seq)
    lo, hi = [], []
    for i, s in enumerate(seq):
        if s == 0:
            lo.append(n)
            hi.append(-1)
            continue
        a = i
        while a > 0 and seq[a - 1] == s:
            a -= 1
        b = i
        while b < n - 1 and seq[b + 1] == s:
            b += 1
        lo.append(a)
        hi.append(b + 1)
    return np.array([lo, hi])


def test_sequence_bounds_both_generations():
    seq = np.array([[1, 1, 1, 2, 2, 3, 0, 0, 4, 4, 4, 4, 0, 5, 5, 5]], np.int32)

    @nki.jit
    def k2(s):
        t = _sb(s)
        d = nl.ndarray((1, 2, s.shape[1]), dtype=nl.int32, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=d, segment_ids=t)
        return _out(d)

    @nki1.jit
    def k1(s):
        b = nisa1.sequence_bounds(segment_ids=nl1.load(s), dtype=nl1.float32)
        o = nl1.ndarray(b.shape, dtype=b.dtype, buffer=nl1.shared_hbm)
        nl1.store(o, b)
        return o

    want = _bounds_ref(list(seq[0]))[None]
    np.testing.assert_array_equal(nki.simulate(k2)(seq), want)
    np.testing.assert_array_equal(k1(seq), want.astype(np.float32))


@nki.jit
def n_gather_kernel(x, idx):
    t, i = _sb(x), _sb(idx)
    d = nl.ndarray(idx.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.nc_n_gather(dst=d, data=t, indices=i)
    return _out(d)


def test_nc_n_gather():
    x = RNG.standard_normal((8, 4, 16)).astype(np.float32)
    idx = RNG.integers(0, 64, (8, 10)).astype(np.uint32)
    got = nki.simulate(n_gather_kernel)(x, idx)
    np.testing.assert_array_equal(got, np.take_along_axis(x.reshape(8, 64), idx.astype(np.int64), axis=1))


def test_nc_n_gather_rejects_int32_indices_and_out_of_bounds():
    x = np.zeros((4, 16), np.float32)
    with pytest.raises(NKIError, match="uint32"):
        nki.simulate(n_gather_kernel)(x, np.zeros((4, 2), np.int32))
    with pytest.raises(NKIError, match="out of bounds"):
        nki.simulate(n_gather_kernel)(x, np.full((4, 2), 16, np.uint32))


def test_nonzero_with_count_touches_every_16th_partition_only():
    x = (RNG.random((32, 12)) > 0.6).astype(np.float32) * RNG.standard_normal((32, 12)).astype(np.float32)

    @nki.jit
    def k(a):
        t = _sb(a)
        d = nl.full((32, 13), 7, dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=d, src=t, index_offset=100, padding_val=-1)
        return _out(d)

    got = nki.simulate(k)(x)
    want = np.full((32, 13), 7, np.int32)
    for p in (0, 16):
        nz = np.flatnonzero(x[p])
        want[p] = -1
        want[p, :nz.size] = nz + 100
        want[p, 12] = nz.size
    np.testing.assert_array_equal(got, want)


def test_gpsimd_cannot_read_psum():
    @nki.jit
    def k(a):
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)
        d = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.sbuf)
        i = nl.zeros((a.shape[0], 2), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.nc_n_gather(dst=d, data=p, indices=i)
        return _out(d)

    with pytest.raises(NKIError, match="PSUM"):
        nki.simulate(k)(np.zeros((4, 8), np.float32))


# ---------------------------------------------------------------------------
# DMA: dma_compute, dma_transpose (gen-1 too)
# ---------------------------------------------------------------------------
def test_dma_compute_sums_sources_from_hbm_and_sbuf():
    a = RNG.standard_normal((16, 32)).astype(np.float32)
    b = RNG.standard_normal((16, 32)).astype(np.float32)
    c = RNG.standard_normal((16, 32)).astype(np.float32)

    @nki.jit
    def k(x, y, z):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        tz = _sb(z)
        nisa.dma_compute(out, (x, y, tz), scales=(1.0, 1.0, 1.0), reduce_op=nl.add)
        return out

    got = nki.simulate(k)(a, b, c)
    want = (a.astype(np.float32) + b + c).astype(got.dtype)
    np.testing.assert_array_equal(got, want)


def test_dma_compute_rejects_scale_and_op():
    a = np.zeros((4, 8), np.float32)

    @nki.jit
    def k(x, scale=2.0, op=nl.add):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_compute(dst=out, srcs=[x, x], reduce_op=op, scales=[1.0, scale])
        return out

    with pytest.raises(NKIError, match="scales"):
        nki.simulate(k)(a)
    with pytest.raises(NKIError, match="reduce_op"):
        nki.simulate(k)(a, scale=1.0, op=nl.maximum)


def test_gen1_dma_transpose():
    x = RNG.standard_normal((32, 64)).astype(np.float32)

    @nki1.jit
    def k(a):
        t = nisa1.dma_transpose(a)
        o = nl1.ndarray(t.shape, dtype=t.dtype, buffer=nl1.shared_hbm)
        nl1.store(o, t)
        return o

    np.testing.assert_array_equal(k(x), x.T)


def test_gen1_tensor_copy_dynamic_src_and_dst():
    x = RNG.standard_normal((16, 64)).astype(np.float32)

    @nki1.jit
    def k(a):
        t = nl1.load(a)
        i_p, i_f = nl1.mgrid[0:16, 0:8]
        src = nisa1.tensor_copy_dynamic_src(t[i_p, 24 + i_f])
        d = nl1.zeros((16, 64), dtype=nl1.float32)
        nisa1.tensor_copy_dynamic_dst(dst=d[i_p, 40 + i_f], src=src)
        outs = [nl1.ndarray(v.shape, dtype=v.dtype, buffer=nl1.shared_hbm) for v in (src, d)]
        nl1.store(outs[0], src)
        nl1.store(outs[1], d)
        return tuple(outs)

    got_src, got_dst = k(x)
    np.testing.assert_array_equal(got_src, x[:, 24:32])
    want = np.zeros_like(x)
    want[:, 40:48] = x[:, 24:32]
    np.testing.assert_array_equal(got_dst, want)


def _local_gather_ref(src, index, n, nv):
    """Per 16-partition core: the core's indices read column by column, the first nv kept; each
    partition of the core takes n contiguous elements of its own row at every index."""
    P = src.shape[0]
    flat_src = src.reshape(P, -1)
    out = np.empty((P, nv, n), src.dtype)
    for c in range(0, P, 16):
        idx = index[c:c + 16].T.reshape(-1)[:nv].astype(np.int64)
        for p in range(c, c + 16):
            for j, i in enumerate(idx):
                out[p, j] = flat_src[p, i:i + n]
    return out


def test_local_gather_both_generations():
    P, n = 32, 4
    src = RNG.standard_normal((P, 64, n)).astype(np.float32)
    rows_ = RNG.integers(0, 64, (16, 3))
    index = (np.tile(rows_, (P // 16, 1)) * n).astype(np.uint16)  # element offsets of whole rows

    @nki.jit
    def k2(s, i, nv=None):
        ts, ti = _sb(s), _sb(i)
        count = nv or 48
        d = nl.ndarray((P, count * n), dtype=s.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=d, src_buffer=ts, index=ti, num_elem_per_idx=n, num_valid_indices=nv)
        return _out(d)

    @nki1.jit
    def k1(s, i):
        g = nisa1.local_gather(nl1.load(s), nl1.load(i), n)
        o = nl1.ndarray(g.shape, dtype=g.dtype, buffer=nl1.shared_hbm)
        nl1.store(o, g)
        return o

    want = _local_gather_ref(src, index, n, 48)
    np.testing.assert_array_equal(nki.simulate(k2)(src, index).reshape(P, 48, n), want)
    np.testing.assert_array_equal(nki.simulate(k2)(src, index, nv=20).reshape(P, 20, n), want[:, :20])
    got1 = k1(src, index)
    assert got1.shape == (P, 3, 16, n)
    np.testing.assert_array_equal(got1.reshape(P, 48, n), want)


def test_local_gather_rejects_out_of_bounds_index():
    src = np.zeros((16, 8), np.float32)

    @nki.jit
    def k(s, i):
        d = nl.ndarray((16, 32), dtype=s.dtype, buffer=nl.sbuf)
        nisa.local_gather(dst=d, src_buffer=_sb(s), index=_sb(i), num_elem_per_idx=2)
        return _out(d)

    with pytest.raises(NKIError, match="out of bounds"):
        nki.simulate(k)(src, np.full((16, 1), 7, np.uint16))
