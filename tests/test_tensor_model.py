"""The NkiTensor model (``nki.language.NkiTensor``, "NKI Access Patterns" deep dive): every tensor is a
view of a storage; ``.ap`` and the view methods against NumPy's own strided views and explicit
index arithmetic; aliasing through views; every illegal pattern rejected with its rule."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import dtypes as dt
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.core import HBMTensor, Tile, hbm, psum, sbuf

nl = nki.language
nisa = nki.isa
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sbuf(shape, dtype=np.float32, buffer=sbuf):
    return Tile(np.arange(math.prod(shape), dtype=np.int64).astype(dtype).reshape(shape), buffer)


def _hbm(shape, dtype=np.float32):
    return HBMTensor(np.arange(math.prod(shape), dtype=np.int64).astype(dtype).reshape(shape), hbm, "x")


def _same_view(view, ref, root_data):
    """``view`` addresses exactly what the NumPy view ``ref`` of ``root_data`` does."""
    assert view.shape == ref.shape
    np.testing.assert_array_equal(view.data, ref)
    isz = ref.dtype.itemsize
    # the stride of a size-1 dimension is never used (NumPy sets it freely)
    assert [s for s, n in zip(view.strides, ref.shape) if n > 1] == \
        [s // isz for s, n in zip(ref.strides, ref.shape) if n > 1]
    assert view.offset * isz == ref.__array_interface__["data"][0] - root_data.__array_interface__["data"][0]
    assert [n for _, n in view.get_pattern()] == list(ref.shape)
    assert [s for s, _ in view.get_pattern()] == list(view.strides)


# ---------------------------------------------------------------------------
# documented examples
# ---------------------------------------------------------------------------
def test_slice_equals_hand_written_ap_as_the_deep_dive_states():
    t = _sbuf((128, 64))
    u = t.slice(dim=1, start=8, end=24)
    assert u.get_pattern() == [[64, 128], [1, 16]] and u.offset == 8
    v = t.ap(pattern=[[64, 128], [1, 16]], offset=8)
    assert v.get_pattern() == u.get_pattern() and v.offset == u.offset
    np.testing.assert_array_equal(u.data, t.data[:, 8:24])
    np.testing.assert_array_equal(v.data, t.data[:, 8:24])


def test_concrete_example_of_the_deep_dive():
    t = _sbuf((16, 16))
    access = t.ap(pattern=[[16, 16], [1, 8]], offset=8)
    flat = t.data.reshape(-1)
    expect = np.array([[flat[8 + w * 16 + z] for z in range(8)] for w in range(16)])
    np.testing.assert_array_equal(access.data, expect)


def test_ap_reinterprets_int32_as_bf16_with_doubled_counts():
    t = _sbuf((128, 256), np.int32)
    cast = t.ap(pattern=[[512, 128], [1, 512]], offset=0, dtype=nl.bfloat16)
    assert cast.shape == (128, 512) and cast.dtype == dt.bfloat16
    np.testing.assert_array_equal(cast.data.view(np.uint16), t.data.view(np.uint16))


def test_ap_of_an_ap_is_replaced_not_composed():
    t = _sbuf((128, 256))
    inner = t.ap(pattern=[[256, 128], [2, 128]])
    outer = inner.ap(pattern=[[256, 128], [1, 64]])
    np.testing.assert_array_equal(outer.data, t.data[:, :64])


def test_ap_offset_adds_to_the_view_offset_and_none_keeps_it():
    out = _hbm((4, 8, 16))
    region = out[2]
    np.testing.assert_array_equal(region.ap([[16, 8], [1, 16]], offset=0).data, out.data[2])
    np.testing.assert_array_equal(region.ap([[16, 8], [1, 4]]).data, out.data[2, :, :4])
    np.testing.assert_array_equal(region.ap([[16, 8], [1, 4]], offset=3).data, out.data[2, :, 3:7])


def test_documented_view_method_shapes():
    t = _sbuf((128, 4, 8))
    assert t.permute((0, 2, 1)).shape == (128, 8, 4)
    assert _sbuf((128, 1, 64)).broadcast(1, 8).shape == (128, 8, 64)
    assert _sbuf((128, 64)).expand_dim(1).shape == (128, 1, 64)
    assert _sbuf((128, 1, 64)).squeeze_dim(1).shape == (128, 64)
    assert _sbuf((128, 24)).reshape_dim(1, (4, -1)).shape == (128, 4, 6)
    assert _sbuf((128, 2, 3, 4)).flatten_dims(1, 2).shape == (128, 6, 4)
    assert _sbuf((128, 4, 6)).reshape((128, 2, 12)).shape == (128, 2, 12)
    assert _sbuf((128, 64)).slice(1, 0, 64, 2).shape == (128, 32)
    assert _sbuf((128, 8, 64)).select(1, 3).shape == (128, 64)
    assert _sbuf((128, 64)).view(nl.uint8).shape == (128, 256)
    assert _sbuf((128, 256), np.uint8).view(nl.float32).shape == (128, 64)
    r = _sbuf((128, 24)).rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4})
    assert r.shape == (128, 6, 4)
    np.testing.assert_array_equal(r.data, _sbuf((128, 24)).data.reshape(128, 4, 6).transpose(0, 2, 1))


def test_is_contiguous_skips_the_partition_dim_on_chip():
    t = _sbuf((16, 8, 4))
    assert t.is_contiguous() and t.slice(0, 2, 10).is_contiguous()
    assert not t.slice(2, 0, 2).is_contiguous()
    assert not t.permute((0, 2, 1)).is_contiguous()
    h = _hbm((16, 8))
    assert h.is_contiguous() and not h.slice(0, 0, 16, 2).is_contiguous()
    assert h.slice(0, 2, 5).is_contiguous()


# ---------------------------------------------------------------------------
# property tests: view chains and .ap against NumPy
# ---------------------------------------------------------------------------
@st.composite
def _chain(draw, on_chip):
    rank = draw(st.integers(1, 3))
    shape = (draw(st.integers(1, 6)),) + tuple(draw(st.integers(1, 5)) for _ in range(rank))
    steps = draw(st.lists(st.tuples(st.sampled_from(
        ["slice", "select", "permute", "broadcast", "expand", "squeeze", "reshape_dim", "flatten", "reshape"]),
        st.integers(0, 10 ** 6)), max_size=5))
    return shape, steps


def _apply(op, seed, view, ref, on_chip):
    """One view method on ``view`` and its NumPy counterpart on ``ref`` (None when not applicable)."""
    rng = np.random.default_rng(seed)
    nd, lo = ref.ndim, (1 if on_chip else 0)
    dims = list(range(lo, nd))
    if op == "slice":
        d = int(rng.integers(0, nd))
        n = ref.shape[d]
        start = int(rng.integers(0, n))
        end = int(rng.integers(start + 1, n + 1))
        step = 1 if (on_chip and d == 0) else int(rng.integers(1, 3))
        key = [slice(None)] * nd
        key[d] = slice(start, end, step)
        return view.slice(d, start, end, step), ref[tuple(key)]
    if not dims:
        return None
    d = int(rng.choice(dims))
    if op == "select" and nd > 1:
        i = int(rng.integers(0, ref.shape[d]))
        return view.select(d, i), np.take(ref, i, axis=d) if False else ref[(slice(None),) * d + (i,)]
    if op == "permute":
        rest = list(rng.permutation(dims))
        perm = tuple(range(lo)) + tuple(int(x) for x in rest)
        return view.permute(perm), ref.transpose(perm)
    if op == "broadcast" and ref.shape[d] == 1:
        size = int(rng.integers(1, 4))
        shape = list(ref.shape)
        shape[d] = size
        return view.broadcast(d, size), np.broadcast_to(ref, shape)
    if op == "expand":
        e = int(rng.integers(lo, nd + 1))
        return view.expand_dim(e), np.expand_dims(ref, e)
    if op == "squeeze" and ref.shape[d] == 1 and nd > 1:
        return view.squeeze_dim(d), ref.squeeze(axis=d)
    if op == "reshape_dim":
        n = ref.shape[d]
        divs = [k for k in range(1, n + 1) if n % k == 0]
        a = int(rng.choice(divs))
        split = ref.reshape(ref.shape[:d] + (a, n // a) + ref.shape[d + 1:])
        return view.reshape_dim(d, (a, -1)), split
    if op == "flatten" and len(dims) >= 2:
        a = int(rng.integers(lo, nd - 1))
        b = int(rng.integers(a + 1, nd))
        shape = ref.shape[:a] + (math.prod(ref.shape[a:b + 1]),) + ref.shape[b + 1:]
        try:
            expect = np.reshape(ref, shape, copy=False)
        except ValueError:
            with pytest.raises(NKIError, match="flatten_dims"):
                view.flatten_dims(a, b)
            return None
        return view.flatten_dims(a, b), expect
    if op == "reshape":
        total = math.prod(ref.shape[lo:])
        divs = [k for k in range(1, total + 1) if total % k == 0]
        a = int(rng.choice(divs))
        shape = ref.shape[:lo] + (a, total // a)
        try:
            expect = np.reshape(ref, shape, copy=False)
        except ValueError:
            with pytest.raises(NKIError, match="reshape"):
                view.reshape(shape)
            return None
        return view.reshape(shape), expect
    return None


@SETTINGS
@given(_chain(on_chip=True), st.booleans())
def test_view_chains_on_chip_match_numpy_views(case, use_psum):
    shape, steps = case
    t = _sbuf(shape, buffer=psum if use_psum and math.prod(shape[1:]) * 4 <= 2048 else sbuf)
    view, ref = t, t.data
    for op, seed in steps:
        got = _apply(op, seed, view, ref, True)
        if got is not None:
            view, ref = got
            _same_view(view, ref, t.data)
            assert isinstance(view, Tile) and view.buffer is t.buffer


@SETTINGS
@given(_chain(on_chip=False))
def test_view_chains_in_hbm_match_numpy_views(case):
    shape, steps = case
    t = _hbm(shape)
    view, ref = t, t.data
    for op, seed in steps:
        got = _apply(op, seed, view, ref, False)
        if got is not None:
            view, ref = got
            _same_view(view, ref, t.data)


@st.composite
def _pattern(draw, on_chip):
    parts = draw(st.integers(1, 6))
    free = draw(st.integers(1, 24))
    storage = (parts, free)
    dims = [(draw(st.integers(-4, 6)), draw(st.integers(1, 4))) for _ in range(draw(st.integers(1, 3)))]
    return storage, dims, draw(st.integers(0, 10 ** 6)), draw(st.integers(1, parts))


def _expected(flat, offset, pattern):
    idx = np.indices([n for _, n in pattern]).reshape(len(pattern), -1)
    addr = offset + sum(i * s for i, (s, _) in zip(idx, pattern))
    return flat[addr].reshape([n for _, n in pattern])


@SETTINGS
@given(_pattern(on_chip=False))
def test_ap_in_hbm_is_the_documented_loop_over_the_flat_storage(case):
    storage, dims, seed, _ = case
    t = _hbm(storage)
    n = t.data.size
    lo = sum(min(0, (k - 1) * s) for s, k in dims)
    hi = sum(max(0, (k - 1) * s) for s, k in dims)
    pattern = [[s, k] for s, k in dims]
    if hi - lo >= n:
        with pytest.raises(NKIError, match="out-of-bounds"):
            t.ap(pattern, offset=-lo).data  # noqa: B018 - made freely, refused where it is used
        return
    offset = -lo + np.random.default_rng(seed).integers(0, n - (hi - lo))
    v = t.ap(pattern, offset=int(offset))
    np.testing.assert_array_equal(v.data, _expected(t.data.reshape(-1), int(offset), pattern))
    assert v.get_pattern() == pattern and v.offset == offset


@SETTINGS
@given(_pattern(on_chip=True))
def test_ap_on_chip_walks_whole_partitions_and_stays_inside_one(case):
    (parts, free), dims, seed, nparts = case
    t = _sbuf((parts, free))
    pattern = [[free, nparts]] + [[s, k] for s, k in dims]
    lo = sum(min(0, (k - 1) * s) for s, k in dims)
    hi = sum(max(0, (k - 1) * s) for s, k in dims)
    rng = np.random.default_rng(seed)
    p0 = int(rng.integers(0, parts - nparts + 1))
    if hi - lo >= free:
        with pytest.raises(NKIError, match="out-of-bounds"):
            t.ap(pattern, offset=p0 * free - lo).data  # noqa: B018 - made freely, refused where it is used
        return
    f0 = -lo + int(rng.integers(0, free - (hi - lo)))
    v = t.ap(pattern, offset=p0 * free + f0)
    np.testing.assert_array_equal(v.data, _expected(t.data.reshape(-1), p0 * free + f0, pattern))


# ---------------------------------------------------------------------------
# view(dtype) against NumPy's view
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("src, dst", [(np.float32, np.uint8), (np.float32, np.int32), (np.uint8, np.float32),
                                      (np.int32, dt.bfloat16), (np.uint16, np.int32)])
def test_view_dtype_matches_numpy_view(src, dst):
    t = _sbuf((8, 16), src)
    v = t.view(dst)
    _same_view(v, t.data.view(dst), t.data)
    h = _hbm((4, 8, 16), src)[1:3, 2:6]
    _same_view(h.view(dst), h.tensor.data[1:3, 2:6].view(dst), h.tensor.data)
    assert t.reinterpret_cast(dst).shape == v.shape


def test_packed_mx_dtype_view_holds_four_values_per_element():
    vals = np.array([[0.5, 1, -6, 3, 2, 0, 1.5, -0.5]] * 4, np.float32)
    packed = dt.pack_x4(vals, nl.float8_e4m3fn_x4)
    t = Tile(packed.view(np.uint8).copy(), sbuf)  # raw bytes, as a DMA of an MX tensor lands them
    mx = t.view(nl.float8_e4m3fn_x4)
    assert mx.shape == (4, 2) and mx.dtype.itemsize == 4
    np.testing.assert_array_equal(dt.unpack_x4(mx.data), vals)
    assert nl.float8_e4m3 != nl.float8_e4m3fn and nl.float8_e4m3fn_x4 != nl.float8_e5m2_x4
    assert float(np.float32(300).astype(nl.float8_e4m3fn)) == 288.0  # e4m3fn reaches 448
    assert not np.isfinite(np.float32(300).astype(nl.float8_e4m3))  # e4m3 (IEEE-style) tops out at 240


# ---------------------------------------------------------------------------
# aliasing: writes through a view are visible through every other view
# ---------------------------------------------------------------------------
def test_isa_writes_through_views_reach_the_storage():
    @nki.jit
    def k(a):
        out = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        nisa.dma_copy(dst=t.slice(1, 8, 24), src=a)  # columns 8..23
        nisa.memset(dst=t.ap([[32, 8], [2, 4]], offset=8 * 32 + 1), value=-1.0)  # rows 8..15, cols 1,3,5,7
        even = t.reshape((16, 16, 2)).select(2, 0)  # a second view of the same storage
        tmp = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=tmp, src=even)
        nisa.dma_copy(dst=out.ap([[32, 16], [2, 16]], offset=1), src=tmp)  # odd HBM columns
        nisa.dma_copy(dst=out.ap([[32, 16], [2, 16]]), src=t.ap([[32, 16], [2, 16]], offset=1))
        return out

    a = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    t = np.zeros((16, 32), np.float32)
    t[:, 8:24] = a
    t[8:, 1:8:2] = -1
    expect = np.empty((16, 32), np.float32)
    expect[:, 1::2] = t[:, 0::2]
    expect[:, 0::2] = t[:, 1::2]
    np.testing.assert_array_equal(nki.simulate(k)(a), expect)


def test_dma_into_an_hbm_view_writes_the_tensor_in_place():
    @nki.jit
    def k(x, y):
        t = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=y)
        nisa.dma_copy(dst=x.permute((1, 0)).slice(1, 2, 6), src=t.permute((0, 1)))  # x[2:6, :] transposed
        return x

    x = np.zeros((8, 8), np.float32)
    y = np.arange(32, dtype=np.float32).reshape(8, 4)
    out = nki.simulate(k)(x, y)
    expect = np.zeros((8, 8), np.float32)
    expect[2:6, :] = y.T
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(x, expect)  # the kernel wrote its input in place


def test_dynamic_select_reads_its_index_when_used_not_when_made():
    @nki.jit
    def k(a):
        out = nl.ndarray((3, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=idx, value=0)
        src = a.select(0, idx)  # made once, index written later
        for i, b in enumerate((3, 1, 2)):
            nisa.memset(dst=idx, value=b)
            nisa.dma_copy(dst=out[i], src=src)
        return out

    a = np.random.default_rng(1).normal(size=(4, 128, 16)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(a), a[[3, 1, 2]])


def test_ap_scalar_offset_scales_by_the_base_tensor_stride():
    @nki.jit
    def k(a):
        idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=idx, value=3 * 128)
        result = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=result, src=a.ap([[512, 128], [1, 256]], offset=0, scalar_offset=idx, indirect_dim=0))
        return result

    a = np.random.default_rng(2).normal(size=(512, 512)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(a), a[384:, :256])


def test_vector_select_gathers_rows_and_scatters_back():
    @nki.jit
    def k(a, rows):
        offsets = nl.ndarray((64, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=offsets, src=rows)
        g = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=g, src=a.vector_select(0, offsets))
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        zero = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=zero, value=0.0)
        nisa.dma_copy(dst=out, src=zero)
        nisa.dma_copy(dst=out.ap([[32, 64], [1, 32]], vector_offset=offsets, indirect_dim=0), src=g)
        return out

    rng = np.random.default_rng(3)
    a = rng.normal(size=(128, 32)).astype(np.float32)
    rows = rng.permutation(128)[:64].astype(np.int32).reshape(64, 1)
    expect = np.zeros_like(a)
    expect[rows[:, 0]] = a[rows[:, 0]]
    np.testing.assert_array_equal(nki.simulate(k)(a, rows), expect)


def test_vector_offset_out_of_bounds_is_an_error():
    @nki.jit
    def k(a):
        offsets = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(offsets, [[1, 1]], 126, 1)  # rows 126..129 of a 128-row tensor
        g = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=g, src=a.vector_select(0, offsets))
        return a

    with pytest.raises(NKIError, match="out-of-bounds"):
        nki.simulate(k)(np.zeros((128, 8), np.float32))


# ---------------------------------------------------------------------------
# illegal patterns and view calls
# ---------------------------------------------------------------------------
ILLEGAL = [
    ("every other partition", lambda: _sbuf((16, 32)).ap([[64, 8], [1, 32]], offset=0), "partition step"),
    ("past the last partition", lambda: _sbuf((16, 32)).ap([[32, 16], [1, 32]], offset=32).data, "out-of-bounds"),
    ("free pattern leaves its partition", lambda: _sbuf((16, 32)).ap([[32, 16], [1, 32]], offset=1).data,
     "out-of-bounds"),
    ("past the end of HBM", lambda: _hbm((4, 8)).ap([[8, 4], [1, 8]], offset=1).data, "out-of-bounds"),
    ("negative address", lambda: _hbm((4, 8)).ap([[-1, 2]], offset=0).data, "out-of-bounds"),
    ("num 0", lambda: _hbm((4, 8)).ap([[1, 0]]), "access pattern"),
    ("scalar and vector offset", lambda: _hbm((4, 8)).ap([[8, 4], [1, 8]], scalar_offset=_sbuf((1, 1), np.int32),
                                                          vector_offset=_sbuf((4, 1), np.int32)), "dynamic offset"),
    ("vector offset on dim 1", lambda: _hbm((4, 8)).ap([[8, 4], [1, 8]], vector_offset=_sbuf((4, 1), np.int32),
                                                        indirect_dim=1), "vector offset"),
    ("partition moved", lambda: _sbuf((8, 4, 2)).permute((1, 0, 2)), "partition dimension"),
    ("not a permutation", lambda: _hbm((8, 4)).permute((0, 0)), "permute"),
    ("broadcast of size 2", lambda: _sbuf((8, 2)).broadcast(1, 4), "broadcast"),
    ("broadcast partitions", lambda: _sbuf((1, 4)).broadcast(0, 4), "partition dimension"),
    ("squeeze of size 4", lambda: _sbuf((8, 4)).squeeze_dim(1), "squeeze_dim"),
    ("expand before partitions", lambda: _sbuf((8, 4)).expand_dim(0), "partition dimension"),
    ("split partitions", lambda: _sbuf((8, 4)).reshape_dim(0, (2, 4)), "partition dimension"),
    ("split of the wrong size", lambda: _sbuf((8, 6)).reshape_dim(1, (4, 2)), "reshape"),
    ("merge after permute", lambda: _sbuf((8, 2, 3)).permute((0, 2, 1)).flatten_dims(1, 2), "flatten_dims"),
    ("merge across a size-1 dim", lambda: _hbm((2, 3, 4)).slice(1, 0, 1).slice(2, 0, 2).flatten_dims(0, 2),
     "flatten_dims"),
    ("merge partitions", lambda: _sbuf((8, 2, 3)).flatten_dims(0, 1), "partition dimension"),
    ("reshape changes partitions", lambda: _sbuf((8, 6)).reshape((4, 12)), "reshape"),
    ("reshape needs a copy", lambda: _hbm((4, 6)).permute((1, 0)).reshape((24,)), "reshape"),
    ("slice out of range", lambda: _sbuf((8, 6)).slice(1, 4, 9), "slice"),
    ("slice with step 0", lambda: _sbuf((8, 6)).slice(1, 0, 6, 0), "slice"),
    ("strided partitions", lambda: _sbuf((8, 6)).slice(0, 0, 8, 2), "partition step"),
    ("select out of range", lambda: _hbm((8, 6)).select(1, 6), "select"),
    ("select removes partitions", lambda: _sbuf((8, 6)).select(0, 1), "partition dimension"),
    ("dynamic select of partitions", lambda: _sbuf((8, 6)).select(0, _sbuf((1, 1), np.int32)),
     "partition dimension"),
    ("view of a strided last dim", lambda: _sbuf((8, 6)).slice(1, 0, 6, 2).view(np.uint8), "view"),
    ("view groups an odd last dim", lambda: _sbuf((8, 6), np.uint8).view(np.float32), "view"),
    ("vector_select on chip", lambda: _sbuf((8, 6)).vector_select(0, _sbuf((8, 1), np.int32)), "vector_select"),
    ("vector_select on dim 1", lambda: _hbm((8, 6)).vector_select(1, _sbuf((8, 1), np.int32)), "vector_select"),
    ("two dynamic selects", lambda: _hbm((4, 8, 6)).select(0, _sbuf((1, 1), np.int32)).select(
        0, _sbuf((1, 1), np.int32)), "indirect view"),
    ("view of a dynamic view", lambda: _hbm((4, 8, 6)).select(0, _sbuf((1, 1), np.int32)).view(np.uint8),
     "indirect view"),
    ("float dynamic index", lambda: _hbm((4, 8)).ap([[8, 2], [1, 8]], scalar_offset=_sbuf((1, 1))).data,
     "dynamic offset"),
]


@pytest.mark.parametrize("name, make, rule", ILLEGAL, ids=[c[0] for c in ILLEGAL])
def test_illegal_views_are_rejected_with_their_rule(name, make, rule):
    with pytest.raises(NKIError, match=rule):
        make()


def test_a_view_past_its_tensor_is_refused_where_an_instruction_uses_it():
    # "calling .ap on a tensor does not do any computation": nki-library's output_projection_tkg builds
    # such a view for a tile it then skips (output_projection_tkg.py:941 before `if h_2_idx < h_2_size`)
    t = _sbuf((16, 32))
    beyond = t.ap([[32, 16], [1, 32]], offset=1)
    assert beyond.shape == (16, 32)
    with pytest.raises(NKIError, match=r"out-of-bounds access.*the view was made at"):
        nisa.tensor_copy(dst=_sbuf((16, 32)), src=beyond)
    with pytest.raises(NKIError, match="out-of-bounds access"):
        nisa.memset(dst=beyond, value=0.0)
    with pytest.raises(NKIError, match="out-of-bounds access"):
        beyond.slice(1, 0, 4)
    with pytest.raises(NKIError, match="out-of-bounds access"):
        nisa.dma_copy(dst=_sbuf((4, 8)), src=_hbm((4, 8)).ap([[8, 4], [1, 8]], offset=1))
    np.testing.assert_array_equal(t.data, _sbuf((16, 32)).data)  # nothing was written
    # an HBM view's geometry too (nki-library's MoE CTE shard-on-block sizes an SBUF buffer from
    # `block_to_expert.ap(pattern, offset=shard_id).shape` of a view that reaches past the tensor)
    hbm_beyond = _hbm((4, 8)).ap([[16, 3], [2, 5]], offset=1)
    assert (hbm_beyond.shape, hbm_beyond.dtype, hbm_beyond.ndim, len(hbm_beyond)) == ((3, 5), np.float32, 2, 3)
    with pytest.raises(NKIError, match="out-of-bounds access"):
        nisa.dma_copy(dst=_sbuf((3, 5)), src=hbm_beyond)


def test_legal_edges_are_accepted():
    t = _sbuf((16, 32))
    assert t.ap([[32, 16], [1, 32]], offset=0).shape == (16, 32)  # the whole tensor
    assert t.ap([[999, 1], [1, 32]], offset=15 * 32).shape == (1, 32)  # one partition: its step is moot
    assert t.ap([[32, 16], [-1, 32]], offset=31).data[0, 0] == t.data[0, 31]  # reversed free walk
    assert _hbm((4, 8)).ap([[0, 3], [1, 8]]).shape == (3, 8)  # re-reading rows (stride 0) is legal
    assert _sbuf((8, 1)).broadcast(1, 4).is_contiguous() is False
    assert _sbuf((8, 4)).reshape_dim(0, (8,)).shape == (8, 4)  # a trivial split of the partition dim
    h = _hbm((2, 3, 4))
    merged = h.expand_dim(1).flatten_dims(0, 2)  # size-1 dims merge with anything
    np.testing.assert_array_equal(merged.data, h.data.reshape(6, 4))


# ---------------------------------------------------------------------------
# nl.NKIObject and nl.NkiTensor as types
# ---------------------------------------------------------------------------
def test_nkiobject_is_the_base_of_config_dataclasses():
    from dataclasses import FrozenInstanceError, dataclass

    @dataclass(frozen=True, eq=True)
    class HardwareParams(nl.NKIObject):
        alus: int = 8
        index_dtype: type = nl.uint32

    @dataclass
    class Config(nl.NKIObject):
        k: int
        sorted: bool

    hw = HardwareParams()
    assert hw.alus == 8 and hw.index_dtype == nl.uint32 and hw == HardwareParams() and hash(hw) == hash(HardwareParams())
    with pytest.raises(FrozenInstanceError):
        hw.alus = 4
    cfg = Config(k=2, sorted=True)
    cfg.k = 3
    assert cfg == Config(3, True) and isinstance(cfg, nl.NKIObject)

    class Plain(nl.NKIObject):
        pass

    assert Plain(a=1, b="x").b == "x"
    with pytest.raises(TypeError, match="subclass"):
        nl.NKIObject(a=1)


def test_nkiobject_dataclass_reads_plain_class_assignments_as_fields():
    # nki-library attention_cte: `@dataclass class SectionParams(nl.NKIObject): section_idx = None ...`
    # (no annotations), built as SectionParams(section_idx=..., ...)
    from dataclasses import FrozenInstanceError, dataclass, fields

    @dataclass
    class Section(nl.NKIObject):
        idx = None
        offset = 0
        scratch = []  # a mutable default stays a class attribute, not a shared field default

        def end(self, n):
            return self.offset + n

    s = Section(idx=3, offset=128)
    assert (s.idx, s.offset, s.end(2)) == (3, 128, 130) and Section() == Section(None, 0)
    assert [f.name for f in fields(Section)] == ["idx", "offset"]
    with pytest.raises(TypeError, match="scratch"):
        Section(scratch=[1])

    @dataclass(frozen=True)
    class Mixed(nl.NKIObject):
        k: int
        sorted: bool = False
        io_type = None  # unannotated ones follow the annotated fields

    m = Mixed(4, io_type=nl.bfloat16)
    assert (m.k, m.sorted, m.io_type) == (4, False, nl.bfloat16) and Mixed(4, True, None) == Mixed(k=4, sorted=True)
    with pytest.raises(FrozenInstanceError):
        m.io_type = None


def test_every_tensor_is_an_nkitensor():
    t, h = _sbuf((4, 8)), _hbm((4, 8))
    for x in (t, t[0:2, :], t.slice(1, 0, 4), h, h[1], h.ap([[8, 2], [1, 8]])):
        assert isinstance(x, nl.NkiTensor) and isinstance(x, nl.NKIObject)
    assert nki.tensor.NkiTensor is nl.NkiTensor and h.size == 32 and h[1].size == 8


def test_scalar_offset_from_a_virtual_register_is_read_at_use():
    regs = pytest.importorskip("nki_kernels.simulator.instructions.registers")
    h = _hbm((4, 6))
    reg = regs.VirtualRegister(1)
    row = h.select(0, reg)
    np.testing.assert_array_equal(row.data, h.data[1])
    reg.value = 3
    np.testing.assert_array_equal(row.data, h.data[3])
    reg.value = 4
    with pytest.raises(NKIError, match="out-of-bounds"):
        row.data


def test_compute_instructions_read_and_write_views():
    @nki.jit
    def k(x, w):
        xs = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
        ws = nl.ndarray((64, 2, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        nisa.dma_copy(dst=ws, src=w.reshape((64, 2, 32)))
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=0.0)
        # x.T @ w[:, 1, :] into columns 32..63 of the PSUM tile, through a strided SBUF view
        nisa.nc_matmul(dst=acc.slice(1, 32, 64), stationary=xs, moving=ws.select(1, 1))
        res = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=res, op=nl.exp, data=acc)
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    rng = np.random.default_rng(5)
    x = rng.normal(size=(64, 128)).astype(np.float32) / 8
    w = rng.normal(size=(64, 64)).astype(np.float32) / 8
    expect = np.ones((128, 128))
    expect[:, 32:64] = np.exp(x.astype(np.float64).T @ w[:, 32:64])
    np.testing.assert_allclose(nki.simulate(k)(x, w), expect, rtol=1e-5)


def test_an_allocated_tensor_is_truthy_in_a_standalone_kernel_and_a_tile_value_is_not():
    # nki-library mlp/moe tkg test an optional tensor for presence: `if params.expert_params.expert_index:`
    from nki_kernels.simulator import language as gen1_nl
    from nki_kernels.simulator import nki as gen1_nki

    @nki.jit
    def k(x):
        out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if t and t[0:4, :]:
            nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(nki.simulate(k)(x), x)

    @gen1_nki.jit
    def g(x):  # first generation: `if` on a tile's value is a compile error
        t = gen1_nl.load(x)
        if t > 1.0:
            gen1_nl.store(x, t)

    with pytest.raises(NKIError, match="control flow on tile"):
        g(np.ones((8, 4), np.float32))


def test_oob_skip_gather_inside_a_loop_is_logged_like_any_dma():
    # nki-library moe_cte: dma_copy(oob_mode=skip) of a vector_offset view inside a loop, where the
    # diagnostics log every HBM access (it crashed on the skipped-access path: no access to log)
    from nki_kernels.simulator.standalone.constants import oob_mode

    @nki.jit
    def k(x, idx):
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        i_sb = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=i_sb, src=idx)
        g = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(g, -1.0)
        for _ in nl.affine_range(1):
            nisa.dma_copy(dst=g, src=x.ap([[8, 4], [1, 8]], vector_offset=i_sb, indirect_dim=0),
                          oob_mode=oob_mode.skip)
        nisa.dma_copy(dst=out, src=g)
        return out

    x = np.arange(48, dtype=np.float32).reshape(6, 8)
    idx = np.array([[1], [7], [0], [5]], np.int32)  # row 7 is outside: that partition keeps -1
    want = np.full((4, 8), -1.0, np.float32)
    want[[0, 2, 3]] = x[[1, 0, 5]]
    np.testing.assert_array_equal(nki.simulate(k)(x, idx), want)
