"""First-generation (neuronxcc.nki, v2.26 reference pages) documented usages, each against
independent NumPy math or the page's rule, with the rule's planted-bug side checked too."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki
from nki_kernels.simulator import standalone as snki
from nki_kernels.simulator.instructions import target

from .test_isa_vector import predicated_kernel  # (the current generation's copy-predicated kernel)

RNG = np.random.default_rng(26)


# ---------------------------------------------------------------------------
# nisa.oob_mode (nki.isa.dma_copy page: oob_mode=oob_mode.error, nisa.oob_mode.skip/.error)
# ---------------------------------------------------------------------------
def test_oob_mode_is_in_the_gen1_namespace():
    assert nisa.oob_mode is target.oob_mode
    assert {m.name for m in nisa.oob_mode} >= {"error", "skip"}


@nki.jit
def _indirect_dma_copy(in_tensor):
    """The dma_copy page's indirect load (example 2) with oob_mode=nisa.oob_mode.error."""
    out_tensor = nl.ndarray([64, 512], dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:64, 0:512]
    idx_tile = nisa.iota(2 * nl.arange(64)[:, None], dtype=np.int32)
    out_tile = nisa.memset(shape=(64, 512), value=-1, dtype=in_tensor.dtype)
    nisa.dma_copy(src=in_tensor[idx_tile, iy], dst=out_tile[ix, iy], oob_mode=nisa.oob_mode.error)
    nl.store(out_tensor, value=out_tile)
    return out_tensor


def test_dma_copy_with_oob_mode_error():
    a = RNG.random((128, 512)).astype(np.float32)
    np.testing.assert_array_equal(_indirect_dma_copy(a), a[2 * np.arange(64)])


# ---------------------------------------------------------------------------
# bool predicates (tensor_copy_predicated / select_reduce pages pass np.bool_ arrays; the v2.26 dtype
# table: bool is "boolean stored as uint8")
# ---------------------------------------------------------------------------
@nki.jit
def _copy_predicated(predicate, on_true, on_false):
    out = nl.ndarray(on_true.shape, dtype=on_true.dtype, buffer=nl.shared_hbm)
    pre = nl.load(predicate)
    src = nl.load(on_true)
    dst = nl.ndarray(on_true.shape, dtype=on_true.dtype, buffer=nl.sbuf)
    dst[...] = nl.load(on_false)
    nisa.tensor_copy_predicated(src=src, dst=dst, predicate=pre)
    nl.store(out, dst)
    return out


def test_copy_predicated_bool_predicate():
    a = (RNG.random((128, 512)) * 100).astype(np.float32)
    b = (RNG.random((128, 512)) * 100).astype(np.float32)
    pred = np.less_equal(a, 30.0)  # (the page's test: a NumPy bool array)
    assert pred.dtype == np.bool_ and pred.any() and not pred.all()
    np.testing.assert_array_equal(_copy_predicated(pred, a, b), np.where(pred, a, b))


def test_copy_predicated_still_rejects_a_float_predicate():
    a = np.ones((16, 8), np.float32)
    with pytest.raises(NKIError, match="predicate dtype"):
        _copy_predicated(np.ones((16, 8), np.float32), a, a)


@nki.jit
def _select_reduce(predicate, on_true, on_false):
    result = nl.ndarray(on_true.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((on_true.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    pre = nl.load(predicate)
    t = nl.load(on_true)
    f = nl.load(on_false)
    dst = nl.ndarray(on_true.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((on_true.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=dst, predicate=pre, on_true=t, on_false=f, reduce_cmd=nisa.reduce_cmd.reset_reduce,
                       reduce_res=r, reduce_op=np.max)
    nl.store(result, dst)
    nl.store(red, r)
    return result, red


def test_select_reduce_bool_predicate():
    pred = RNG.integers(0, 2, size=(128, 512)).astype(np.bool_)  # (the page's test)
    t = RNG.standard_normal((128, 512)).astype(np.float32)
    f = RNG.standard_normal((128, 1)).astype(np.float32)
    got, red = _select_reduce(pred, t, f)
    want = np.where(pred, t, f)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(red, want.max(axis=1, keepdims=True))


def test_select_reduce_still_rejects_an_int32_predicate():
    t = np.zeros((8, 16), np.float32)
    with pytest.raises(NKIError, match="predicate dtype"):
        _select_reduce(np.ones((8, 16), np.int32), t, np.zeros((8, 1), np.float32))


def test_current_generation_keeps_its_page_predicate_dtypes():
    # The current page lists uint8/uint16/uint32 predicates and no bool example: bool stays rejected there.
    a = np.ones((16, 8), np.float32)
    with pytest.raises(NKIError, match="predicate dtype"):
        snki.simulate(predicated_kernel)(a, np.ones((16, 8), np.bool_), a)


# ---------------------------------------------------------------------------
# An integer on the partition axis keeps it: a[0, src_mgrid.x] of a [1, 128] tile is [1, 128]
# (nki.isa.nc_stream_shuffle example 2)
# ---------------------------------------------------------------------------
@nki.jit
def _shuffle_broadcast(in_tensor):
    out_tensor = nl.ndarray(shape=(32, 128), dtype=np.float32, buffer=nl.shared_hbm)
    a = nl.load(in_tensor)
    b = nl.ndarray(shape=(32, 128), dtype=np.float32)
    dst_mgrid = nl.mgrid[0:32, 0:128]
    src_mgrid = nl.mgrid[0:1, 0:128]
    row = a[0, src_mgrid.x]
    assert row.shape == (1, 128)
    nisa.nc_stream_shuffle(src=row, dst=b[dst_mgrid.p, dst_mgrid.x], shuffle_mask=[0] * 32)
    nl.store(out_tensor, value=b)
    return out_tensor


def test_int_partition_subscript_keeps_the_partition_axis():
    x = RNG.standard_normal((1, 128)).astype(np.float32)
    np.testing.assert_array_equal(_shuffle_broadcast(x), np.broadcast_to(x, (32, 128)))


@nki.jit
def _row_broadcast_add(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ta = nl.load(a)
    row = ta[0, nl.arange(a.shape[1])[None, :]]  # [1, F]: broadcast over the partitions
    nl.store(out, nl.add(ta, row))
    return out


def test_int_partition_subscript_row_broadcasts_over_partitions():
    a = RNG.standard_normal((4, 128)).astype(np.float32)
    np.testing.assert_array_equal(_row_broadcast_add(a), a + a[0:1])


@nki.jit
def _column_and_dummy_axes(b, w):
    """The rules beside it stay: tb[i_p, 0] is the per-partition column; an mgrid's surplus
    unit axis still leaves the tile (w.reshape((1, F))[wunit, wf] is [1, F])."""
    out = nl.ndarray((b.shape[0], w.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    tb = nl.load(b)
    col = tb[nl.arange(b.shape[0])[:, None], 0]
    f = w.shape[0]
    _, wf, wunit = nl.mgrid[0:1, 0:f, 0:1]
    wt = nl.load(w.reshape((1, f))[wunit, wf])
    assert wt.shape == (1, f)
    nl.store(out, nl.add(col, wt))
    return out


def test_column_and_mgrid_dummy_axes_unchanged():
    b = RNG.standard_normal((128, 4)).astype(np.float32)
    w = RNG.standard_normal(96).astype(np.float32)
    np.testing.assert_array_equal(_column_and_dummy_axes(b, w), b[:, 0:1] + w[None, :])


# ---------------------------------------------------------------------------
# A [P] index tile loaded from a 1-D tensor gathers [P, F] rows (nki.language.load example 12,
# nki.language.store example 16)
# ---------------------------------------------------------------------------
@nki.jit
def _indirect_load(data_tensor, idx_tensor):
    out_tensor = nl.ndarray([64, 512], dtype=data_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(512)[None, :]
    idx_tile = nl.load(idx_tensor[i_p])  # indices have to be in SBUF
    data_tile = nl.load(data_tensor[idx_tile[i_p, 0], i_f])
    nl.store(out_tensor, value=data_tile)
    return out_tensor


def test_indirect_load_with_a_loaded_1d_index_tile():
    d = RNG.random((128, 512)).astype(np.float32)
    idx = RNG.permutation(128)[:64].astype(np.int32)
    np.testing.assert_array_equal(_indirect_load(d, idx), d[idx])


@nki.jit
def _indirect_store(in_tensor, idx_tensor):
    data_tensor = nl.ndarray([128, 512], dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    nl.store(data_tensor, value=nl.zeros((128, 512), dtype=in_tensor.dtype))
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(512)[None, :]
    idx_tile = nl.load(idx_tensor[i_p])
    data_tile = nl.load(in_tensor)
    nl.store(data_tensor[idx_tile[i_p, 0], i_f], value=data_tile[0:64, 0:512])
    return data_tensor


def test_indirect_store_with_a_loaded_1d_index_tile():
    src = RNG.random((64, 512)).astype(np.float32)
    idx = RNG.permutation(128)[:64].astype(np.int32)
    want = np.zeros((128, 512), np.float32)
    want[idx] = src
    np.testing.assert_array_equal(_indirect_store(src, idx), want)


def test_indirect_load_still_checks_the_offsets():
    d = RNG.random((128, 512)).astype(np.float32)
    idx = np.arange(64, dtype=np.int32) + 100  # 128.. out of bounds
    with pytest.raises(NKIError, match="out-of-bounds"):
        _indirect_load(d, idx)


@nki.jit
def _reciprocal_by_mgrid(in_tensor):
    """The nisa.reciprocal page's example: the tensors indexed by one nl.mgrid object."""
    out = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    x = nl.load(in_tensor[nl.mgrid[0:128, 0:512]])
    nl.store(out[nl.mgrid[0:128, 0:512]], value=nisa.reciprocal(x))
    return out


def test_an_mgrid_object_indexes_a_tensor_whole():
    a = np.random.default_rng(3).uniform(0.5, 2.0, (128, 512)).astype(np.float32)
    np.testing.assert_allclose(_reciprocal_by_mgrid(a), 1.0 / a, rtol=1e-6)


@nki.jit
def _copy_blocks(a):
    """b[i, j] = a[i, j] over a 2-D grid of programs (the SPMD page's kernel)."""
    b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    nl.store(b[i, j], nl.load(a[i, j]))
    return b


@pytest.mark.parametrize("grid", [lambda: (nl.nc(2) * 2, 2), lambda: (2 * nl.nc(2), 2)])
def test_the_spmd_grid_shorthand_is_an_spmd_dim(grid):
    # "nl.nc(2) * 2" is nl.spmd_dim(nl.nc(2), 2) and "2 * nl.nc(2)" nl.spmd_dim(2, nl.nc(2)): 4 x 2 programs
    g = grid()
    assert isinstance(g[0], nl.spmd_dim) and int(g[0]) == 4 and g[0].cores == 2
    a = np.random.default_rng(4).standard_normal((4, 2, 128, 64)).astype(np.float32)
    np.testing.assert_array_equal(_copy_blocks[g](a), a)
