"""NKI 0.7.0's tiled / blocked layout APIs (Neuron SDK 2.33.0): nl.tiles, nl.blocks, nl.alloc_tiles,
nl.alloc_blocks and the grid classes, in current-API kernels checked against NumPy results computed
independently, with shapes that do not divide evenly (remainder tiles), and one test per documented
error rule next to a valid edge case.

Pages: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.tiles.html
(and .blocks, .alloc_tiles, .alloc_blocks, .NkiGrid, .NkiTileGrid, .NkiBlockGrid).
"""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install

install()
import nki
import nki.isa as nisa
import nki.language as nl

RNG = np.random.default_rng(733)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------------------------------
# nl.tiles over HBM tensors: the NkiTileGrid page's copy example, remainder tiles
# --------------------------------------------------------------------------------------------------
@nki.jit
def add_by_tiles(a, b):
    """out = a + b, one (128, 256) tile at a time through SBUF (the NkiTileGrid page's loop)."""
    ta, tb = nl.tiles(a, tile_shape=(128, 256)), nl.tiles(b, tile_shape=(128, 256))
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    to = nl.tiles(out, tile_shape=(128, 256))
    for i in range(ta.shape[0]):
        for j in range(ta.shape[1]):
            x = nl.ndarray(ta[i, j].element_shape, dtype=a.dtype, buffer=nl.sbuf)
            y = nl.ndarray(tb[i, j].element_shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=ta[i, j].data)
            nisa.dma_copy(dst=y, src=tb[i, j].data)
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
            nisa.dma_copy(dst=to[i, j].data, src=x)
    return out


@pytest.mark.parametrize("shape", [(256, 512), (300, 600), (100, 37)])
def test_tiles_add_with_remainder_tiles(shape):
    a, b = _f32(*shape), _f32(*shape)
    np.testing.assert_allclose(add_by_tiles(a, b), a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)


def test_tile_grid_attributes_and_remainders():
    seen = {}

    @nki.jit
    def k(a):
        g = nl.tiles(a, tile_shape=(128, 256))
        seen["grid"] = (type(g), g.shape, g.tile_shape, g.element_shape, g.index_step_elements, g.is_remainder,
                        g.dtype, g.buffer is a.buffer, isinstance(g, nl.NkiGrid))
        last = g[-1, -1]
        seen["last"] = (type(last), last.shape, last.element_shape, last.is_remainder, last.data.shape)
        seen["first"] = (g[0, 0].element_shape, g[0, 0].is_remainder)
        seen["row"] = (g[1].shape, g[1].element_shape, g[1].is_data_representable, g[1].data.shape)
        seen["col"] = (g[:, 2].shape, g[:, 2].element_shape, g[:, 1].element_shape)
        stepped = g[0, 0:3:2]  # tiles 0 and 2 of row 0: not one strided region of a
        seen["stepped"] = (stepped.shape, stepped.element_shape, stepped.index_step_elements,
                           stepped.is_data_representable)
        seen["len"] = len(g)
        return a

    k(_f32(300, 600))
    assert seen["grid"] == (nl.NkiTileGrid, (3, 3), (128, 256), (300, 600), (128, 256), True, np.float32, True,
                            True)
    # 300 = 128 + 128 + 44, 600 = 256 + 256 + 88: the last tile is clamped to the source extent
    assert seen["last"] == (nl.NkiTileGrid, (), (44, 88), True, (44, 88))
    assert seen["first"] == ((128, 256), False)
    assert seen["row"] == ((3,), (128, 600), True, (128, 600))
    assert seen["col"] == ((3,), (300, 88), (300, 256))
    assert seen["stepped"] == ((2,), (128, 344), (512,), False)  # 256 + 88
    assert seen["len"] == 3


@nki.jit
def stepped_tiles_copy(a):
    """Every other column of tiles of ``a`` ((32, 32) tiles), gathered through the grid."""
    g = nl.tiles(a, tile_shape=(32, 32))
    sel = g[:, ::2]
    out = nl.ndarray(sel.element_shape, dtype=a.dtype, buffer=nl.shared_hbm)
    to = nl.tiles(out, tile_shape=(32, 32))
    for i in range(sel.shape[0]):
        for j in range(sel.shape[1]):
            t = nl.ndarray(sel[i, j].element_shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=sel[i, j].data)
            nisa.dma_copy(dst=to[i, j].data, src=t)
    return out


def test_slice_with_step_selects_every_other_tile():
    a = _f32(64, 150)  # tiles along the free axis: 0..31, 32..63, 64..95, 96..127, 128..149 (remainder)
    expect = np.concatenate([a[:, 0:32], a[:, 64:96], a[:, 128:150]], axis=1)
    np.testing.assert_array_equal(stepped_tiles_copy(a), expect)


@nki.jit
def scale_slabs(x):
    """x of shape (B, M, N): every (128, 128) tile of every slab doubled; the untiled leading dimension
    is indexed one slab at a time."""
    g = nl.tiles(x, tile_shape=(128, 128))
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    go = nl.tiles(out, tile_shape=(128, 128))
    for b in range(g.shape[0]):
        for i in range(g.shape[1]):
            for j in range(g.shape[2]):
                src = g[b, i, j]
                t = nl.ndarray(src.element_shape, dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=src.data)
                nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)
                nisa.dma_copy(dst=go[b, i, j].data, src=t)
    return out


def test_untiled_hbm_prefix_is_indexed_one_slab_at_a_time():
    x = _f32(3, 200, 300)
    np.testing.assert_array_equal(scale_slabs(x), x * np.float32(2))
    seen = {}

    @nki.jit
    def k(x):
        g = nl.tiles(x, tile_shape=(128, 128))
        seen["g"] = (g.shape, g.element_shape, g.index_step_elements, g[1].shape, g[1].element_shape,
                     g[1, 1, 2].element_shape, g[0:2].element_shape)
        return x

    k(x)
    assert seen["g"] == ((3, 2, 3), (3, 200, 300), (1, 128, 128), (2, 3), (200, 300), (72, 44), (2, 200, 300))


# --------------------------------------------------------------------------------------------------
# nl.alloc_tiles in SBUF (dense rank-two layout) and PSUM (nc_matmul)
# --------------------------------------------------------------------------------------------------
@nki.jit
def sbuf_rows_times(a, b):
    """a * b with both loaded tile by tile into alloc_tiles SBUF grids, multiplied one row of tiles at
    a time through the row's aggregate .data (a row of (P, F) tiles is one strided region)."""
    ga = nl.alloc_tiles(tile_shape=(128, 256), element_shape=a.shape, buffer=nl.sbuf, dtype=a.dtype)
    gb = nl.alloc_tiles(tile_shape=(128, 256), element_shape=b.shape, buffer=nl.sbuf, dtype=b.dtype)
    ta, tb = nl.tiles(a, tile_shape=(128, 256)), nl.tiles(b, tile_shape=(128, 256))
    for i in range(ga.shape[0]):
        for j in range(ga.shape[1]):
            nisa.dma_copy(dst=ga[i, j].data, src=ta[i, j].data)
            nisa.dma_copy(dst=gb[i, j].data, src=tb[i, j].data)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    to = nl.tiles(out, tile_shape=(128, 256))
    for i in range(ga.shape[0]):
        row = ga[i].data
        nisa.tensor_tensor(dst=row, data1=row, data2=gb[i].data, op=nl.multiply)
        nisa.dma_copy(dst=to[i].data, src=row)
    return out


@pytest.mark.parametrize("shape", [(256, 512), (200, 700)])
def test_alloc_tiles_sbuf_rows(shape):
    a, b = _f32(*shape), _f32(*shape)
    np.testing.assert_allclose(sbuf_rows_times(a, b), a.astype(np.float64) * b, rtol=1e-6, atol=1e-6)


def test_alloc_tiles_sbuf_layout_and_representability():
    seen = {}

    @nki.jit
    def k(a):
        g = nl.alloc_tiles(tile_shape=(128, 256), element_shape=(300, 600), buffer=nl.sbuf, dtype=nl.float32)
        seen["g"] = (type(g), g.shape, g.buffer is nl.sbuf, g.dtype, g.is_data_representable,
                     g[0].is_data_representable, g[:, 0].is_data_representable, g[2, 2].is_data_representable,
                     g[2, 2].data.shape, g[2].data.shape, g.is_remainder, g[0, 0:2].is_remainder)
        with pytest.raises(NKIError) as e:  # a column of tiles: different slots of the free dimension
            _ = g[:, 0].data
        seen["err"] = (e.value.rule, isinstance(e.value, ValueError))
        return a

    k(_f32(2, 2))
    assert seen["g"] == (nl.NkiTileGrid, (3, 3), True, np.float32, False, True, False, True, (44, 88),
                         (44, 600), True, False)
    assert seen["err"] == ("grid data", True)


@nki.jit
def matmul_psum_grid(lhsT, rhs):
    """lhsT.T @ rhs: K tiles of 128 accumulated into an alloc_tiles PSUM grid of (128, 512) tiles."""
    _K, M = lhsT.shape
    _, N = rhs.shape
    ta = nl.tiles(lhsT, tile_shape=(128, 128))
    tb = nl.tiles(rhs, tile_shape=(128, 512))
    acc = nl.alloc_tiles(tile_shape=(128, 512), element_shape=(M, N), buffer=nl.psum, dtype=nl.float32)
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    to = nl.tiles(out, tile_shape=(128, 512))
    for i in range(acc.shape[0]):
        for j in range(acc.shape[1]):
            for kk in range(ta.shape[0]):
                s = nl.ndarray(ta[kk, i].element_shape, dtype=lhsT.dtype, buffer=nl.sbuf)
                m = nl.ndarray(tb[kk, j].element_shape, dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=s, src=ta[kk, i].data)
                nisa.dma_copy(dst=m, src=tb[kk, j].data)
                nisa.nc_matmul(dst=acc[i, j].data, stationary=s, moving=m, accumulate=kk > 0)
            r = nl.ndarray(acc[i, j].element_shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=r, src=acc[i, j].data)
            nisa.dma_copy(dst=to[i, j].data, src=r)
    return out


def test_alloc_tiles_psum_matmul_with_remainders():
    lhsT, rhs = _f32(256, 200), _f32(256, 700)  # M = 128 + 72, N = 512 + 188
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(matmul_psum_grid(lhsT, rhs), ref, rtol=1e-4, atol=1e-3)


def test_alloc_tiles_hbm_is_the_compact_logical_extent():
    seen = {}

    @nki.jit
    def k(a):
        g = nl.alloc_tiles(tile_shape=(64, 64), element_shape=a.shape, buffer=nl.shared_hbm, dtype=a.dtype)
        seen["g"] = (g.shape, g.is_data_representable, g.data.shape, g[:, 1].data.shape)
        nisa.dma_copy(dst=g.data, src=a)  # the whole grid: one operand
        t = nl.ndarray(g[1, 1].element_shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=g[1, 1].data)
        out = nl.ndarray(t.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = _f32(100, 130)
    np.testing.assert_array_equal(k(a), a[64:100, 64:128])
    assert seen["g"] == ((2, 3), True, (100, 130), (100, 64))


def test_alloc_tiles_reads_are_checked_like_any_tile():
    @nki.jit
    def k(a):
        g = nl.alloc_tiles(tile_shape=(128, 64), element_shape=(128, 128), buffer=nl.sbuf, dtype=a.dtype)
        nisa.dma_copy(dst=g[0, 0].data, src=a[:, 0:64])  # tile (0, 1) never written
        out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=g[0].data)
        return out

    with pytest.raises(NKIError) as e:
        k(_f32(128, 128))
    assert e.value.rule == "uninit"


# --------------------------------------------------------------------------------------------------
# nl.blocks / nl.alloc_blocks
# --------------------------------------------------------------------------------------------------
@nki.jit
def blocks_plus_one(a, one):
    """a + one, moved block by block: each block is copied into an alloc_blocks SBUF grid tile by tile
    (nl.tiles on the block), summed as one block operand, and stored with one DMA of block.data."""
    tile_shape, block_shape = (128, 128), (1, 2)
    src = nl.blocks(a, tile_shape=tile_shape, block_shape=block_shape)
    onesb = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=onesb, src=one)
    sb = nl.alloc_blocks(tile_shape=tile_shape, block_shape=block_shape, element_shape=a.shape,
                         buffer=nl.sbuf, dtype=a.dtype)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    dst = nl.blocks(out, tile_shape=tile_shape, block_shape=block_shape)
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            src_tiles, sb_tiles = nl.tiles(src[i, j]), nl.tiles(sb[i, j])
            for t in range(src_tiles.shape[1]):
                nisa.dma_copy(dst=sb_tiles[0, t].data, src=src_tiles[0, t].data)
            blk = sb[i, j].data
            p, f = blk.shape
            nisa.tensor_tensor(dst=blk, data1=blk, data2=onesb[0:p, 0:f], op=nl.add)
            nisa.dma_copy(dst=dst[i, j].data, src=blk)
    return out


@pytest.mark.parametrize("shape", [(256, 512), (200, 600)])
def test_blocks_with_partial_final_block(shape):
    a = _f32(*shape)
    one = np.ones((128, 256), np.float32)
    np.testing.assert_allclose(blocks_plus_one(a, one), a.astype(np.float64) + 1, rtol=1e-6, atol=1e-6)


def test_block_grid_attributes():
    seen = {}

    @nki.jit
    def k(a):
        g = nl.blocks(a, tile_shape=(128, 256), block_shape=(2, 2))  # 4 x 4 tiles -> 2 x 2 blocks
        seen["g"] = (type(g), g.shape, g.tile_shape, g.block_shape, g.element_shape, g.index_step_elements,
                     g.is_remainder)
        b = g[1, 1]
        seen["b"] = (type(b), b.shape, b.element_shape, b.block_shape, b.is_data_representable, b.data.shape)
        inner = nl.tiles(b)  # the block-to-tile transition keeps the grid's tile_shape
        seen["inner"] = (type(inner), inner.shape, inner.tile_shape, inner[1, 0].element_shape)
        regrouped = nl.blocks(g, block_shape=(1, 4))
        seen["regrouped"] = (regrouped.shape, regrouped.block_shape)
        r = nl.blocks(a[0:400, 0:700], tile_shape=(128, 256), block_shape=(2, 2))
        seen["r"] = (r.shape, r[1, 1].element_shape, r[1, 1].is_remainder, r[0, 0].is_remainder,
                     nl.tiles(r[1, 1]).shape)
        return a

    k(_f32(512, 1024))
    assert seen["g"] == (nl.NkiBlockGrid, (2, 2), (128, 256), (2, 2), (512, 1024), (256, 512), False)
    assert seen["b"] == (nl.NkiBlockGrid, (), (256, 512), (2, 2), True, (256, 512))
    assert seen["inner"] == (nl.NkiTileGrid, (2, 2), (128, 256), (128, 256))
    assert seen["regrouped"] == ((4, 1), (1, 4))
    # 400 = 256 + 144 (two tiles: 128 + 16), 700 = 512 + 188 (one tile): a partial final block
    assert seen["r"] == ((2, 2), (144, 188), True, False, (2, 1))


def test_alloc_blocks_psum_and_grouping_keeps_tile_order():
    seen = {}

    @nki.jit
    def k(a):
        g = nl.alloc_blocks(tile_shape=(128, 128), block_shape=(1, 2), element_shape=(128, 640),
                            buffer=nl.psum, dtype=nl.float32)
        t = nl.alloc_tiles(tile_shape=(128, 128), element_shape=(128, 640), buffer=nl.psum, dtype=nl.float32)
        seen["g"] = (type(g), g.shape, g[0, 2].element_shape, g[0, 2].is_remainder, g[0, 1].data.shape,
                     g._base.shape == t._base.shape)
        return a

    k(_f32(2, 2))
    assert seen["g"] == (nl.NkiBlockGrid, (1, 3), (128, 128), True, (128, 256), True)


# --------------------------------------------------------------------------------------------------
# documented error rules, each with a valid edge case
# --------------------------------------------------------------------------------------------------
def _run(body):
    """Run ``body(a)`` inside a kernel (grids need the simulator's tensors); returns what it returned."""
    box = {}

    @nki.jit
    def k(a):
        box["r"] = body(a)
        return a

    k(np.zeros((4, 4), np.float32))
    return box["r"]


def _alloc(**kw):
    args = {"tile_shape": (128, 64), "element_shape": (128, 256), "buffer": nl.sbuf, "dtype": nl.float32}
    args.update(kw)
    return nl.alloc_tiles(**args)


@pytest.mark.parametrize("bad", [
    {"tile_shape": [128, 64]},            # a list, not a tuple
    {"element_shape": (128, np.int64(256))},  # not an exact Python int
    {"tile_shape": (128, True)},          # bool is not an exact int
    {"buffer": "sbuf"},                   # not a MemoryRegion
])
def test_alloc_tiles_type_errors(bad):
    with pytest.raises(TypeError):
        _run(lambda a: _alloc(**bad))
    assert _run(lambda a: _alloc().shape) == (1, 4)  # the valid form


@pytest.mark.parametrize("bad, edge", [
    ({"element_shape": (128, 0)}, {"element_shape": (128, 1)}),                         # nonpositive
    ({"tile_shape": (-1, 64)}, {"tile_shape": (1, 64)}),
    ({"tile_shape": (128,)}, {"tile_shape": (128, 64)}),                                 # < 2 dims
    ({"tile_shape": (2, 128, 64)}, {"tile_shape": (128, 256)}),                          # rank > element's
])
def test_alloc_tiles_value_errors(bad, edge):
    with pytest.raises(ValueError):
        _run(lambda a: _alloc(**bad))
    g = _run(lambda a: _alloc(**edge))
    assert isinstance(g, nl.NkiTileGrid)


def test_element_shape_equal_to_tile_shape_is_one_whole_tile():
    g = _run(lambda a: _alloc(tile_shape=(128, 256), element_shape=(128, 256)))
    assert (g.shape, g.is_remainder, g.element_shape) == ((1, 1), False, (128, 256))


def test_alloc_tiles_native_allocation_failure_is_an_assertion_error():
    with pytest.raises(AssertionError):
        _run(lambda a: _alloc(tile_shape=(256, 64), element_shape=(256, 64)))  # 256 partitions
    assert _run(lambda a: _alloc(tile_shape=(128, 64), element_shape=(256, 64)).shape) == (2, 1)


def test_alloc_blocks_block_shape_rank_must_equal_tile_shape_rank():
    args = {"tile_shape": (128, 64), "element_shape": (128, 256), "buffer": nl.sbuf, "dtype": nl.float32}
    with pytest.raises(ValueError):
        _run(lambda a: nl.alloc_blocks(block_shape=(2,), **args))
    with pytest.raises(ValueError):
        _run(lambda a: nl.alloc_blocks(block_shape=(1, 0), **args))
    with pytest.raises(TypeError):
        _run(lambda a: nl.alloc_blocks(block_shape=[1, 2], **args))
    assert _run(lambda a: nl.alloc_blocks(block_shape=(1, 2), **args).shape) == (1, 2)


def test_tiles_argument_rules():
    with pytest.raises(TypeError):  # not a tensor or grid
        _run(lambda a: nl.tiles(np.zeros((4, 4)), tile_shape=(2, 2)))
    with pytest.raises(TypeError):  # a tensor source needs tile_shape
        _run(lambda a: nl.tiles(a))
    with pytest.raises(ValueError):  # one dimension
        _run(lambda a: nl.tiles(a, tile_shape=(4,)))
    with pytest.raises(ValueError):  # more dimensions than the source
        _run(lambda a: nl.tiles(a, tile_shape=(1, 2, 2)))
    with pytest.raises(TypeError):  # blocks: block_shape is keyword-only and required
        _run(lambda a: nl.blocks(a, tile_shape=(2, 2)))
    # edges: exactly two dimensions; a grid source keeps its tile_shape
    assert _run(lambda a: nl.tiles(nl.tiles(a, tile_shape=(2, 3))).shape) == (2, 2)
    assert _run(lambda a: nl.blocks(a, tile_shape=(4, 4), block_shape=(1, 1)).shape) == (1, 1)


def test_untiled_leading_dimensions_are_hbm_only():
    def sbuf_3d(a):
        t = nl.ndarray((4, 2, 8), dtype=nl.float32, buffer=nl.sbuf)
        return nl.tiles(t, tile_shape=(2, 8))

    with pytest.raises(ValueError):
        _run(sbuf_3d)
    assert _run(lambda a: nl.tiles(nl.ndarray((4, 2, 8), dtype=nl.float32, buffer=nl.shared_hbm),
                                   tile_shape=(2, 8)).shape) == (4, 1, 1)


def test_grids_are_not_constructed_directly():
    with pytest.raises(TypeError):
        nl.NkiTileGrid()
    with pytest.raises(TypeError):
        nl.NkiGrid(shape=(1, 1))


def test_grid_indexing_rules():
    with pytest.raises(IndexError):
        _run(lambda a: nl.tiles(a, tile_shape=(2, 2))[2, 0])
    with pytest.raises(IndexError):
        _run(lambda a: nl.tiles(a, tile_shape=(2, 2))[0, 0, 0])
    with pytest.raises(ValueError):  # a negative step
        _run(lambda a: nl.tiles(a, tile_shape=(2, 2))[::-1])
    with pytest.raises(TypeError):
        _run(lambda a: nl.tiles(a, tile_shape=(2, 2))[0.5])
    # edges: the last coordinate counted from the end, a step of 2, an ellipsis
    r = _run(lambda a: (nl.tiles(a, tile_shape=(2, 2))[-1, -1].element_shape,
                        nl.tiles(a, tile_shape=(1, 1))[::2, ...].shape))
    assert r == ((2, 2), (2, 4))


# --------------------------------------------------------------------------------------------------
# property: any tile / block geometry moves every element to its own place and back (hypothesis)
# --------------------------------------------------------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _round_trip(a, tile_shape, block_shape):
    """HBM ``a`` -> SBUF alloc_tiles (or alloc_blocks) tile by tile (block by block) through nl.tiles
    (nl.blocks) views, then back into a fresh HBM output the same way: the output must equal ``a``."""

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        if block_shape is None:
            src, dst = nl.tiles(a, tile_shape=tile_shape), nl.tiles(out, tile_shape=tile_shape)
            mid = nl.alloc_tiles(tile_shape=tile_shape, element_shape=a.shape, buffer=nl.sbuf, dtype=a.dtype)
        else:
            src = nl.blocks(a, tile_shape=tile_shape, block_shape=block_shape)
            dst = nl.blocks(out, tile_shape=tile_shape, block_shape=block_shape)
            mid = nl.alloc_blocks(tile_shape=tile_shape, block_shape=block_shape, element_shape=a.shape,
                                  buffer=nl.sbuf, dtype=a.dtype)
        for i in range(src.shape[0]):
            for j in range(src.shape[1]):
                cell = mid[i, j]
                if block_shape is not None:  # a block's tiles, one at a time (block-to-tile transition)
                    inner_src, inner_mid = nl.tiles(src[i, j]), nl.tiles(cell)
                    for u in range(inner_src.shape[0]):
                        for v in range(inner_src.shape[1]):
                            nisa.dma_copy(dst=inner_mid[u, v].data, src=inner_src[u, v].data)
                else:
                    nisa.dma_copy(dst=cell.data, src=src[i, j].data)
        for i in range(src.shape[0]):
            for j in range(src.shape[1]):
                if block_shape is not None:
                    inner_mid, inner_dst = nl.tiles(mid[i, j]), nl.tiles(dst[i, j])
                    for u in range(inner_mid.shape[0]):
                        for v in range(inner_mid.shape[1]):
                            nisa.dma_copy(dst=inner_dst[u, v].data, src=inner_mid[u, v].data)
                else:
                    nisa.dma_copy(dst=dst[i, j].data, src=mid[i, j].data)
        return out

    return k(a)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 200), cols=st.integers(1, 200), tp=st.integers(16, 128), tf=st.integers(16, 96),
       blocks=st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))))
def test_any_geometry_round_trips_every_element(rows, cols, tp, tf, blocks):
    a = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    np.testing.assert_array_equal(_round_trip(a, (tp, tf), blocks), a)
