"""``.ap`` views made again and again (nki-library's matmul loops over weight tiles allocated again at
the same address) are resolved once per geometry and arguments: each repeated view still addresses
exactly the documented elements of its own tensor, writes through it reach the storage, read-only
memory stays read-only, and the diagnostics still see every view."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.core import HBMTensor, Tile, hbm, sbuf

nl = nki.language
nisa = nki.isa


def _expected(flat, offset, pattern):
    """The documented loop: element ``offset + sum(i_d * step_d)`` of the flat storage."""
    idx = np.indices([n for _, n in pattern]).reshape(len(pattern), -1)
    addr = offset + sum(i * s for i, (s, _) in zip(idx, pattern))
    return flat[addr].reshape([n for _, n in pattern])


_PARTS, _FREE = 8, 48
_VIEWS = [  # (pattern of the free axes, offset): a small pool, so that draws repeat
    ([[1, 16]], 0), ([[1, 16]], 16), ([[3, 16]], 2), ([[12, 4], [1, 12]], 0), ([[12, 3], [1, 12]], 1),
    ([[2, 8], [1, 2]], 30), ([[-1, 8]], 47), ([[1, 48]], 0),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(_VIEWS) - 1), st.integers(1, _PARTS), st.booleans(),
                          st.sampled_from([None, np.int32])), min_size=2, max_size=12))
def test_repeated_ap_views_address_the_documented_elements(calls):
    """One SBUF tile and one HBM tensor, a sequence of ``ap`` calls drawn from a small pool (the repeats
    come from plans): every view against the documented loop over the flat storage."""
    tile = Tile(np.arange(_PARTS * _FREE, dtype=np.float32).reshape(_PARTS, _FREE), sbuf)
    tensor = HBMTensor(np.arange(_PARTS * _FREE, dtype=np.float32).reshape(_PARTS, _FREE) * 2, hbm, "x")
    for k, nparts, on_chip, dtype in calls:
        free_pattern, f0 = _VIEWS[k]
        t = tile if on_chip else tensor
        if dtype is None and nparts == 2:  # `ap` of a view: its pattern is replaced, its offset kept
            flat = t.data.reshape(-1)
            views = [(t[0:_PARTS, at:at + 16] if on_chip else t.reshape((_PARTS * _FREE,)).slice(0, at, at + 16), at)
                     for at in (0, 16, 1)]  # (the first two of one geometry, elsewhere in the storage)
            for u, at in [(t, 0)] + views + [(t, 0)]:
                np.testing.assert_array_equal(u.ap([[_FREE, 2], [1, 8]]).data, _expected(flat, at, [[_FREE, 2], [1, 8]]))
        pattern = [[_FREE, nparts]] + free_pattern
        offset = f0
        flat = t.data.reshape(-1)
        if dtype is not None:  # the same bytes as int32 elements
            flat = flat.view(dtype)
        v = t.ap(pattern, offset=offset, dtype=dtype)
        np.testing.assert_array_equal(v.data, _expected(flat, offset, pattern))
        assert v.get_pattern() == [list(p) for p in pattern] and v.offset == offset


def test_a_weight_tile_viewed_by_ap_in_a_range_loop_multiplies_as_numpy():
    """nki-library's down projection: a placed SBUF weight tile, ``w.ap([[H, 128], [n, 128]],
    offset=h1)`` as the stationary operand of every matmul of a Python loop, each view every n-th
    column; and the same through an allocated tile."""
    n, T = 6, 32

    def kernel(placed):
        @nki.jit
        def k(w, x):
            out = nl.ndarray((n, 128, T), dtype=nl.float32, buffer=nl.shared_hbm)
            wt = nl.ndarray((128, n * 128), dtype=w.dtype, buffer=nl.sbuf, **({"address": (0, 1024)} if placed else {}))
            nisa.dma_copy(dst=wt, src=w)
            xt = nl.ndarray((128, T), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=xt, src=x)
            res = nl.ndarray((128, T), dtype=nl.float32, buffer=nl.sbuf)
            for h1 in range(n):
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for _ in range(2):  # the same view again: overwrite, then accumulate
                    nisa.nc_matmul(dst=acc[0:128, 0:T], stationary=wt.ap([[n * 128, 128], [n, 128]], offset=h1),
                                   moving=xt)
                nisa.tensor_copy(dst=res, src=acc[0:128, 0:T])
                nisa.dma_copy(dst=out[h1], src=res)
            return out

        return k

    rng = np.random.default_rng(2)
    w = rng.standard_normal((128, n * 128)).astype(np.float16)
    x = rng.standard_normal((128, T)).astype(np.float16)
    for placed in (False, True):
        got = kernel(placed)(w, x)
        for h1 in range(n):
            p = w[:, h1::n].astype(np.float32).T @ x.astype(np.float32)
            np.testing.assert_allclose(got[h1], p + p, rtol=1e-5, atol=1e-4)


def test_writes_through_a_repeated_view_reach_the_storage():
    """``nisa`` writes into the same ``ap`` view of one tile, three times with different values; the
    last ones are what the tile holds, and the other columns keep their own."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        for i in range(3):
            view = t.ap([[64, 128], [2, 32]], offset=1)  # the odd columns
            nisa.tensor_scalar(dst=view, data=view, op0=nl.add, operand0=float(i + 1))
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    want = a.copy()
    want[:, 1::2] += 6.0
    np.testing.assert_array_equal(k(a), want)


def test_a_plan_follows_the_tile_when_its_array_is_replaced():
    """A tile's array replaced (as copy-on-write does when a tile viewing HBM takes its own copy): the
    same ``ap`` call then views the new array, not the old one."""
    old = np.arange(4 * 16, dtype=np.float32).reshape(4, 16)
    t = Tile(old.copy(), sbuf)
    pattern = [[16, 4], [2, 8]]
    np.testing.assert_array_equal(t.ap(pattern, offset=1).data, old[:, 1::2])
    np.testing.assert_array_equal(t.ap(pattern, offset=1).data, old[:, 1::2])  # (from the plan)
    before = t.data  # (still alive, as the HBM memory a copy-on-write tile viewed is)
    t.data = old[::-1].copy()
    np.testing.assert_array_equal(t.ap(pattern, offset=1).data, old[::-1, 1::2])
    assert before is not t.data
    h = HBMTensor(old.copy(), hbm, "h")
    np.testing.assert_array_equal(h.ap([[16, 4], [1, 4]], offset=3).data, old[:, 3:7])
    before = h.data
    h.data = old * 10
    np.testing.assert_array_equal(h.ap([[16, 4], [1, 4]], offset=3).data, old[:, 3:7] * 10)


def test_a_read_only_storage_gives_read_only_repeated_views():
    """An HBM tensor over writeable memory and one over a read-only view of the same memory (the same
    addresses and geometry): views of the first are writeable, of the second read-only, each time."""
    data = np.arange(64, dtype=np.float32).reshape(4, 16)
    ro = data.view()
    ro.flags.writeable = False
    rw_tensor, ro_tensor = HBMTensor(data, hbm, "x"), HBMTensor(ro, hbm, "const")
    for _ in range(2):
        assert rw_tensor.ap([[16, 4], [1, 8]], offset=2).data.flags.writeable
        v = ro_tensor.ap([[16, 4], [1, 8]], offset=2).data
        assert not v.flags.writeable
        np.testing.assert_array_equal(v, data[:, 2:10])


@pytest.mark.parametrize("placed", [False, True], ids=["elsewhere", "same_address"])
def test_an_unwritten_tile_read_through_the_same_ap_is_reported(placed):
    """Planted bug next to the plans: two tiles viewed by the same ``ap`` arguments, one written by a
    DMA and one never written -- elsewhere in SBUF, or allocated again at the same address (the same
    plan); reading the second through its view is an uninitialised read."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        at = {"address": (0, 4096)} if placed else {}
        written = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, **at)
        nisa.dma_copy(dst=written, src=a)
        for _ in range(2):
            nisa.tensor_copy(dst=res, src=written.ap([[64, 128], [2, 32]], offset=0))
            nisa.dma_copy(dst=out, src=res)
        never = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, **at)
        nisa.tensor_copy(dst=res, src=never.ap([[64, 128], [2, 32]], offset=0))
        nisa.dma_copy(dst=out, src=res)
        return out

    with pytest.raises(NKIError) as e:
        k(np.ones((128, 64), np.float32))
    assert e.value.rule == "uninit"


def test_a_write_through_a_repeated_view_counts_as_written():
    """A view made twice (the second from its plan), written through the second: the tile's columns it
    covers hold values, so reading them is no uninitialised read, and they are the values written."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        t.ap([[64, 128], [2, 32]], offset=1)  # made, never used
        nisa.dma_copy(dst=t.ap([[64, 128], [2, 32]], offset=1), src=a)
        res = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=t[:, 1:64:2])
        nisa.dma_copy(dst=out, src=res)
        return out

    a = np.arange(128 * 32, dtype=np.float32).reshape(128, 32)
    np.testing.assert_array_equal(k(a), a)


def test_views_across_the_axes_of_a_3d_tile_keep_their_own_elements_for_the_diagnostics():
    """``.ap`` views taking every 4th element of a ``[128, 4, 32]`` tile's partition cross its middle
    axis (no per-axis form: the diagnostics index them element by element, kept for repeated views).
    The view at offset 0 lies in the written half and reads the values written; the same pattern at
    offset 64 lies in the never-written half and is an uninitialised read."""

    def kernel(offsets):
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 4, 32), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t[:, 0:2, :], src=a)
            res = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
            for off in offsets:
                nisa.tensor_copy(dst=res, src=t.ap([[128, 128], [4, 16]], offset=off))
            nisa.dma_copy(dst=out, src=res)
            return out

        return k

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 2, 32)
    np.testing.assert_array_equal(kernel((0, 0, 0))(a), a.reshape(128, 64)[:, 0:64:4])
    with pytest.raises(NKIError) as e:
        kernel((0, 0, 64))(a)
    assert e.value.rule == "uninit"


def test_a_view_made_while_its_tile_viewed_hbm_reads_the_tiles_later_writes():
    """A DMA into a fresh tile views HBM copy-on-write; a view of it made then, ``.ap``'d after the tile
    took its own copy and was written, reads the tile's values -- every time, planned or not -- and
    the HBM input keeps its own."""

    @nki.jit
    def k(a):
        out = nl.ndarray((2, 128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        early = t[:, 0:64]  # made while t views a
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=10.0)
        res = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
        for i in range(2):
            nisa.tensor_copy(dst=res, src=early.ap([[64, 128], [4, 16]], offset=1))
            nisa.dma_copy(dst=out[i], src=res)
        return out

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    keep = a.copy()
    got = k(a)
    for i in range(2):
        np.testing.assert_array_equal(got[i], keep[:, 1:64:4] * 10)
    np.testing.assert_array_equal(a, keep)
