"""The simulator's data paths for large tiles (nki-library's CTE shapes): dtype conversions of strided
data, the root region of a view, and whole kernels over strided bf16 data -- each against an
independent NumPy reference, bit for bit (rounding of bf16 results included)."""

import math
import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nki_kernels.simulator import NKIError, config
from nki_kernels.simulator import dtypes as dt
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.access_pattern import Layout, _root_index
from nki_kernels.simulator.core import Tile, sbuf
from nki_kernels.simulator.diagnostics import Region

nl = nki.language
nisa = nki.isa
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BF16 = np.dtype(ml_dtypes.bfloat16)
LOW_FLOATS = [BF16, np.dtype(np.float16), np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2),
              np.dtype(ml_dtypes.float8_e4m3)]


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    """The exact value of bf16 bit patterns, from sign, exponent and mantissa in float64 (no ml_dtypes)."""
    bits = bits.astype(np.int64)
    sign = np.where(bits >> 15, -1.0, 1.0)
    exp, man = (bits >> 7) & 0xFF, bits & 0x7F
    normal = sign * np.ldexp(1.0 + man / 128.0, exp - 127)
    sub = sign * np.ldexp(man / 128.0, -126)
    val = np.where(exp == 0, sub, normal)
    val = np.where((exp == 0xFF) & (man == 0), sign * np.inf, val)
    return np.where((exp == 0xFF) & (man != 0), np.nan, val)


def _round_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values (finite, within bf16's range) to bf16 bits, to nearest even, in integers."""
    u = x.astype(np.float32).view(np.uint32).astype(np.int64)
    keep, rest = u >> 16, u & 0xFFFF
    up = (rest > 0x8000) | ((rest == 0x8000) & (keep & 1 == 1))
    return (keep + up).astype(np.uint16)


# ---------------------------------------------------------------------------
# conversions of strided arrays
# ---------------------------------------------------------------------------
def test_every_bf16_pattern_in_a_strided_array_widens_to_its_exact_value():
    bits = np.arange(1 << 16, dtype=np.uint16)
    strided = np.stack([bits, bits[::-1]], axis=1)[:, 0].view(BF16)  # every other element
    assert not strided.flags.c_contiguous
    got = dt.compute_view(strided)
    assert got.dtype == np.float32
    want = _bf16_value(bits)
    finite = np.isfinite(want) | np.isinf(want)
    np.testing.assert_array_equal(got[finite].astype(np.float64), want[finite])
    assert np.isnan(got[~finite]).all()
    # NaN payloads kept bit for bit, as a contiguous conversion keeps them
    np.testing.assert_array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16)


def test_every_fp16_pattern_widens_to_its_exact_value():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    exact = np.array([struct.unpack("<e", struct.pack("<H", int(b)))[0] for b in bits])  # Python's own half floats
    for arr in (bits.view(np.float16), np.stack([bits, bits[::-1]], 1)[:, 0].view(np.float16),
                bits.view(np.float16).reshape(256, 256).T, bits[5:6].view(np.float16).reshape(())):
        got = dt.compute_view(arr)
        assert got.dtype == np.float32 and got.shape == arr.shape and isinstance(got, np.ndarray)
        b = arr.view(np.uint16).astype(np.uint32).reshape(-1)
        g, want = got.reshape(-1), exact[b]
        nan = np.isnan(want)
        np.testing.assert_array_equal(g[~nan].astype(np.float64), want[~nan])
        # a NaN keeps its sign and payload, shifted into fp32's mantissa
        np.testing.assert_array_equal(g[nan].view(np.uint32),
                                      ((b[nan] & 0x8000) << 16) | 0x7F800000 | ((b[nan] & 0x3FF) << 13))


@pytest.mark.parametrize("dtype", LOW_FLOATS, ids=str)
@pytest.mark.parametrize("view", ["columns", "every_other", "transposed_block", "broadcast"])
def test_strided_low_precision_arrays_widen_like_their_contiguous_copies(dtype, view):
    rng = np.random.default_rng(3)
    base = (rng.standard_normal((64, 96)) * 4).astype(dtype)
    v = {"columns": base[:, 8:40], "every_other": base[:, ::2], "transposed_block": base[:32, :48].T[::2],
         "broadcast": np.broadcast_to(base[:, :1], (64, 16))}[view]
    got = dt.compute_view(v)
    want = np.array([[float(e) for e in row] for row in v], dtype=np.float64)  # element by element
    assert got.shape == v.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got.astype(np.float64), want)


@pytest.mark.parametrize("dtype", [d for d in LOW_FLOATS if d.itemsize == 1] + [np.dtype(ml_dtypes.float8_e8m0fnu)],
                         ids=str)
def test_every_fp8_pattern_widens_to_its_value(dtype):
    bits = np.arange(256, dtype=np.uint8)
    for arr in (bits.view(dtype), np.stack([bits, bits], 1)[:, 1].view(dtype), bits[7:8].view(dtype).reshape(())):
        got = dt.compute_view(arr)
        assert got.dtype == np.float32 and got.shape == arr.shape and isinstance(got, np.ndarray)
        want = np.array([float(e) for e in arr.reshape(-1)]).reshape(arr.shape)  # scalar conversions
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan], want[~nan])


@pytest.mark.parametrize("view", ["columns", "every_other", "reversed"])
def test_strided_float32_rounds_to_bf16_to_nearest_even(view):
    rng = np.random.default_rng(4)
    base = rng.standard_normal((128, 256)).astype(np.float32)
    # values halfway between two bf16 numbers, both ways, to pin the ties-to-even rule
    halves = (np.arange(128 * 256, dtype=np.uint32).reshape(128, 256) % 4096 << 16) | 0x8000
    base[:, ::3] = (halves[:, ::3] + (np.uint32(0x3F80) << 16)).view(np.float32)
    v = {"columns": base[:, 100:228], "every_other": base[:, ::2], "reversed": base[::-1, ::-3]}[view]
    got = dt.cast(v, BF16)
    assert got.shape == v.shape and got.dtype == BF16
    np.testing.assert_array_equal(got.view(np.uint16), _round_to_bf16_bits(v))


@pytest.mark.parametrize("dtype", LOW_FLOATS[1:], ids=str)
def test_strided_float32_rounds_to_fp16_and_fp8_like_element_by_element(dtype):
    rng = np.random.default_rng(5)
    v = (rng.standard_normal((64, 128)) * 8).astype(np.float32)[:, 1::3]
    got = dt.cast(v, dtype)
    want = np.array([[dtype.type(float(e)) for e in row] for row in v])  # scalar conversions, one each
    np.testing.assert_array_equal(got.view(np.uint8), want.astype(dtype).view(np.uint8))


# ---------------------------------------------------------------------------
# the root region of an on-chip view (diagnostics' bookkeeping of .ap / view methods)
# ---------------------------------------------------------------------------
@st.composite
def _layouts(draw):
    rshape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=3)))
    rdt = np.dtype(draw(st.sampled_from([np.float32, np.float16, np.int8])))
    ldt = np.dtype(draw(st.sampled_from([np.float32, np.float16, np.int8])))
    total = math.prod(rshape) * rdt.itemsize // ldt.itemsize
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    strides = tuple(draw(st.sampled_from([0, 1, 2, 3, 4, 8, 16, -1, -4])) for _ in shape)
    offset = draw(st.integers(0, max(0, total - 1)))
    return rshape, rdt, ldt, shape, strides, offset


@SETTINGS
@given(_layouts())
def test_root_index_of_a_view_selects_the_elements_its_addresses_name(case):
    rshape, rdt, ldt, shape, strides, offset = case
    total = math.prod(rshape) * rdt.itemsize // ldt.itemsize
    addr = offset + sum(np.arange(n).reshape([-1 if a == i else 1 for a in range(len(shape))]) * s
                        for i, (n, s) in enumerate(zip(shape, strides)))
    addr = np.broadcast_to(addr, shape)
    if total == 0 or addr.min() < 0 or addr.max() >= total:
        return
    root = Tile(np.zeros(rshape, rdt), sbuf)
    index = _root_index(Layout(root, ldt, offset, shape, strides))
    want = addr * ldt.itemsize // rdt.itemsize  # the root element each view element lies in
    data = np.arange(math.prod(rshape)).reshape(rshape)
    np.testing.assert_array_equal(index.read(data), want)
    np.testing.assert_array_equal(Region.of(index).elements(), np.unique(want))


def test_root_index_of_a_block_view_is_an_exact_box_without_index_arrays():
    root = Tile(np.zeros((128, 3, 512), np.float32), sbuf)
    index = _root_index(Layout(root, np.float32, 1536 * 4 + 512 + 64, (120, 256), (1536, 1)))
    assert index.basic is not None  # a NumPy view, not per-element index arrays
    region = Region.of(index)
    assert region.exact and region.lo == (4, 1, 64) and region.hi == (124, 2, 320)


def _uninit_kernel(read_cols):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 2, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t.ap([[128, 128], [1, 64]], offset=0), src=x)  # only t[:, 0, :]
        out_sb = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out_sb, src=t.ap([[128, 128], [1, 64]], offset=read_cols))
        nisa.dma_copy(dst=out, src=out_sb)
        return out

    return k


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_common_elements_of_scattered_regions_are_numpys_intersection(data):
    # the race check's overlap of indirect-DMA regions (a map of one region's elements, reused while
    # the same region meets several others) against np.intersect1d
    from nki_kernels.simulator.diagnostics import _common_elements

    shape = (data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40)))
    size = math.prod(shape)

    def region():
        elems = np.unique(np.array(data.draw(st.lists(st.integers(0, size - 1), max_size=60)), np.int64))
        r = Region(shape, (0, 0), shape, False)
        r._elems = elems
        return r

    a, others = region(), [region() for _ in range(3)]
    for b in others + [a] + others[:1]:
        np.testing.assert_array_equal(_common_elements(a, b), np.intersect1d(a.elements(), b.elements()))
    c = region()
    np.testing.assert_array_equal(_common_elements(c, a), np.intersect1d(c.elements(), a.elements()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 5000), st.integers(-(1 << 40), 1 << 40), st.sampled_from([1, 3, 64, 65, 1000]),
       st.sampled_from([np.int64, np.int32]), st.integers(0, 2**32 - 1))
def test_sorted_unique_is_numpys_unique(n, lo, spread, dtype, seed):
    # dense element lists (the span at most 64 times the count) take a map of the span, others a sort
    from nki_kernels.simulator.diagnostics import sorted_unique

    rng = np.random.default_rng(seed)
    lo = int(np.clip(lo, np.iinfo(dtype).min, np.iinfo(dtype).max - n * spread))
    a = (lo + rng.integers(0, n * spread, size=n)).astype(dtype)
    got, want = sorted_unique(a), np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_reading_the_unwritten_half_of_a_tile_through_a_view_is_reported():
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(nki.simulate(_uninit_kernel(0))(x), x)
    with config.override(uninit="error"), pytest.raises(NKIError, match=r"uninit.*\[0:128, 1:2, 0:64\]"):
        nki.simulate(_uninit_kernel(64))(x)


# ---------------------------------------------------------------------------
# whole kernels over strided bf16 data
# ---------------------------------------------------------------------------
def test_dma_of_column_blocks_between_bf16_and_fp32_rounds_once():
    cols = 96

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 2 * cols), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        wide = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=wide, src=x[:, 64:64 + cols])  # bf16 column block -> fp32
        nisa.dma_copy(dst=out[:, 0:cols], src=wide)  # fp32 -> bf16 column block
        scaled = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=wide, op0=nl.multiply, operand0=1.0 / 3.0)
        nisa.dma_copy(dst=out[:, cols:2 * cols], src=scaled)
        return out

    rng = np.random.default_rng(6)
    x = rng.standard_normal((128, 512)).astype(BF16)
    got = nki.simulate(k)(x)
    src = _bf16_value(x.view(np.uint16))[:, 64:64 + cols]
    np.testing.assert_array_equal(got[:, :cols].view(np.uint16), x[:, 64:64 + cols].view(np.uint16))
    third = (src.astype(np.float32) * np.float32(1.0 / 3.0)).astype(np.float32)
    np.testing.assert_array_equal(got[:, cols:].view(np.uint16), _round_to_bf16_bits(third))


def test_matmul_of_strided_bf16_tiles_of_a_larger_sbuf_tensor():
    @nki.jit
    def k(a, b):
        out = nl.ndarray((64, 2, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        a_sb = nl.ndarray((128, 4, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
        b_sb = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_sb, src=a)
        nisa.dma_copy(dst=b_sb, src=b)
        for j in range(2):
            ps = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
            # stationary: block 2j+1 of a_sb; moving: every other column, from column j
            nisa.nc_matmul(ps, stationary=a_sb[:, 2 * j + 1, :], moving=b_sb.ap([[512, 128], [2, 128]], offset=j))
            res = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=ps)
            nisa.dma_copy(dst=out[:, j, :], src=res)
        return out

    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 4, 64)).astype(BF16)
    b = rng.standard_normal((128, 512)).astype(BF16)
    got = nki.simulate(k)(a, b)
    av, bv = _bf16_value(a.view(np.uint16)), _bf16_value(b.view(np.uint16))
    for j in range(2):
        want = av[:, 2 * j + 1, :].T @ bv[:, j:256 + j:2]  # exact products of bf16 values, float64 sums
        np.testing.assert_allclose(got[:, j, :], want, rtol=2e-6, atol=2e-5)


# ---------------------------------------------------------------------------
# placed tensors declared up front at shared bytes (nki-library's modular allocator)
# ---------------------------------------------------------------------------
def _modular_kernel(overlap):
    """Two SBUF tensors declared first, both at byte 0 (``num_free_tiles=1``), used one after the other
    (or, with ``overlap``, the first read again after the second was written)."""

    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        bufs = [nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0)) for _ in range(2)]
        for i in range(2):
            nisa.dma_copy(dst=bufs[i], src=x[i])
            nisa.dma_copy(dst=out[i], src=bufs[0] if overlap else bufs[i])
        return out

    return k


def test_tensors_declared_at_the_same_bytes_and_used_in_turn_do_not_conflict():
    x = np.arange(2 * 128 * 8, dtype=np.float32).reshape(2, 128, 8)
    np.testing.assert_array_equal(nki.simulate(_modular_kernel(False))(x), x)


def test_tensors_at_the_same_bytes_with_overlapping_lives_still_conflict():
    x = np.arange(2 * 128 * 8, dtype=np.float32).reshape(2, 128, 8)
    with pytest.raises(NKIError, match=r"allocation conflict.*bytes 0\.\.31"):
        nki.simulate(_modular_kernel(True))(x)


@pytest.mark.parametrize("src", [np.dtype(ml_dtypes.float8_e4m3), np.dtype(ml_dtypes.float8_e4m3fn),
                                 np.dtype(ml_dtypes.float8_e5m2)], ids=str)
def test_dma_of_an_fp8_column_block_into_bf16_fp32_and_int8_tiles(src):
    # nki-library MLP/MoE CTE kernels DMA fp8 weight blocks into bf16 SBUF tiles: fp32 on the way, then
    # converted to the tile's dtype (bf16: to nearest even; int8: to nearest even, saturated, as the current
    # API converts: NKI 0.6.0 release notes)
    @nki.jit
    def k(w):
        outs = [nl.ndarray((128, 3, 160), dtype=d, buffer=nl.shared_hbm) for d in (nl.bfloat16, nl.float32, nl.int8)]
        for out in outs:
            t = nl.ndarray((128, 3, 160), dtype=out.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=w[0:128, 1:4, 40:200])
            nisa.dma_copy(dst=out, src=t)
        return outs

    rng = np.random.default_rng(8)
    w = (rng.standard_normal((256, 5, 256)) * 40).astype(src)
    got_bf16, got_f32, got_i8 = nki.simulate(k)(w)
    block = w[0:128, 1:4, 40:200]
    exact = np.array([float(e) for e in block.reshape(-1)]).reshape(block.shape)  # fp8 values, one by one
    assert np.isfinite(exact).all()
    np.testing.assert_array_equal(got_f32.astype(np.float64), exact)
    np.testing.assert_array_equal(got_bf16.view(np.uint16), _round_to_bf16_bits(exact.astype(np.float32)))
    np.testing.assert_array_equal(got_i8, np.clip(np.rint(exact), -128, 127).astype(np.int8))
