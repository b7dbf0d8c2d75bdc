"""Indirect DMA (per-partition vector_offset access patterns) with oob_mode: error raises on a row
outside the tensor, skip leaves / drops those partitions, as the dma_copy page states."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(19)


@nki.jit
def gather_kernel(table, idx, init, mode):
    R, F = table.shape
    P = idx.shape[0]
    out = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.shared_hbm)
    i = nl.ndarray(idx.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    d = nl.ndarray((P, F), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=init)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=i, indirect_dim=0)
    nisa.dma_copy(dst=d, src=rows, oob_mode=mode)
    nisa.dma_copy(dst=out, src=d)
    return out


@nki.jit
def scatter_kernel(table, idx, vals, mode):
    R, F = table.shape
    P = idx.shape[0]
    i = nl.ndarray(idx.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=idx)
    v = nl.ndarray(vals.shape, dtype=vals.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=vals)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, vector_offset=i, indirect_dim=0)
    nisa.dma_copy(dst=rows, src=v, oob_mode=mode)
    return table


def test_gather_skip_leaves_out_of_bounds_partitions():
    table = RNG.standard_normal((10, 6)).astype(np.float32)
    idx = np.array([[3], [12], [0], [-1], [9]], np.int32)
    init = np.full((5, 6), -7.0, np.float32)
    got = nki.simulate(gather_kernel)(table, idx, init, nisa.oob_mode.skip)
    want = init.copy()
    for p, r in enumerate(idx[:, 0]):
        if 0 <= r < 10:
            want[p] = table[r]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(NKIError, match="out-of-bounds|oob"):
        nki.simulate(gather_kernel)(table, idx, init, nisa.oob_mode.error)


def test_scatter_skip_drops_out_of_bounds_partitions():
    table = np.zeros((8, 4), np.float32)
    idx = np.array([[1], [8], [5]], np.int32)
    vals = RNG.standard_normal((3, 4)).astype(np.float32)
    got = nki.simulate(scatter_kernel)(table.copy(), idx, vals, nisa.oob_mode.skip)
    want = table.copy()
    want[1] = vals[0]
    want[5] = vals[2]
    np.testing.assert_array_equal(got, want)


@nki.jit
def direct_skip_store_kernel(a, rows, offset):
    """Loads ``a`` and stores it through a static ``.ap`` view of a (rows, F) output at ``offset``, with
    oob_mode=skip on both DMAs, as nki-library's MoE CTE stores its down-projection tiles."""
    P, F = a.shape
    out = nl.ndarray((rows, F), dtype=a.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((rows, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.memset(zero, 0)
    nisa.dma_copy(dst=out, src=zero)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a, oob_mode=nisa.oob_mode.skip)
    nisa.dma_copy(dst=out.ap(pattern=[[F, P], [1, F]], offset=offset), src=t, oob_mode=nisa.oob_mode.skip)
    return out


def test_skip_on_a_direct_access_is_the_plain_copy():
    # the pages give skip a meaning only for run-time offsets; a direct access copies as with error
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    got = nki.simulate(direct_skip_store_kernel)(a, 8, 2 * 6)
    want = np.zeros((8, 6), np.float32)
    want[2:6] = a
    np.testing.assert_array_equal(got, want)


def test_skip_on_a_direct_access_is_still_bounds_checked():
    # static bounds are not run-time ones: rows 6..9 of an 8-row output are an error even with skip
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    with pytest.raises(NKIError, match="out-of-bounds"):
        nki.simulate(direct_skip_store_kernel)(a, 8, 6 * 6)


@nki.jit
def scalar_scatter_kernel(table, start, vals, mode):
    """Rows of vals stored from row start[0, 0] of table (a scalar offset read from SBUF at run time)."""
    R, F = table.shape
    P = vals.shape[0]
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=start)
    v = nl.ndarray(vals.shape, dtype=vals.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=vals)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, scalar_offset=s, indirect_dim=0)
    nisa.dma_copy(dst=rows, src=v, oob_mode=mode)
    return table


@nki.jit
def scalar_gather_kernel(table, start, init, mode):
    R, F = table.shape
    P = init.shape[0]
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=start)
    d = nl.ndarray(init.shape, dtype=init.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=init)
    rows = table.ap(pattern=[[F, P], [1, F]], offset=0, scalar_offset=s, indirect_dim=0)
    nisa.dma_copy(dst=d, src=rows, oob_mode=mode)
    out = nl.ndarray(init.shape, dtype=init.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=d)
    return out


@pytest.mark.parametrize("start", [0, 3, 6, 9, -2, -1000000])
def test_scalar_offset_scatter_skip_drops_what_falls_outside(start):
    table = np.zeros((8, 4), np.float32)
    vals = RNG.standard_normal((4, 4)).astype(np.float32)
    got = nki.simulate(scalar_scatter_kernel)(table.copy(), np.array([[start]], np.int32), vals,
                                              nisa.oob_mode.skip)
    want = table.copy()
    for r in range(4):
        if 0 <= start + r < 8:
            want[start + r] = vals[r]
    np.testing.assert_array_equal(got, want)
    if not 0 <= start <= 4:  # part of the access falls outside: oob_mode.error rejects it at the DMA
        with pytest.raises(NKIError, match="out-of-bounds"):
            nki.simulate(scalar_scatter_kernel)(table.copy(), np.array([[start]], np.int32), vals,
                                                nisa.oob_mode.error)


def test_scalar_offset_gather_skip_keeps_dst_where_source_is_outside():
    table = RNG.standard_normal((8, 4)).astype(np.float32)
    init = np.full((4, 4), -3.0, np.float32)
    got = nki.simulate(scalar_gather_kernel)(table, np.array([[6]], np.int32), init, nisa.oob_mode.skip)
    want = init.copy()
    want[:2] = table[6:8]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(NKIError, match="out-of-bounds|oob"):
        nki.simulate(scalar_gather_kernel)(table, np.array([[6]], np.int32), init, nisa.oob_mode.error)


@pytest.mark.parametrize("start", [0, 2, 4])
def test_scalar_offset_scatter_and_gather_with_skip(start):
    # oob_mode=skip on scalar_offset (run-time) accesses, as nki-library's indexed_flatten uses it:
    # an in-bounds access moves everything.
    table = np.zeros((8, 4), np.float32)
    vals = RNG.standard_normal((4, 4)).astype(np.float32)
    got = nki.simulate(scalar_scatter_kernel)(table.copy(), np.array([[start]], np.int32), vals,
                                              nisa.oob_mode.skip)
    want = table.copy()
    want[start:start + 4] = vals
    np.testing.assert_array_equal(got, want)
    src = RNG.standard_normal((8, 4)).astype(np.float32)
    init = np.full((4, 4), -3.0, np.float32)
    got = nki.simulate(scalar_gather_kernel)(src, np.array([[start]], np.int32), init, nisa.oob_mode.skip)
    np.testing.assert_array_equal(got, src[start:start + 4])
