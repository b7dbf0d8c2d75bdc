"""Idioms of public NKI kernels from outside the official samples (vLLM's paged attention, the
NKI documentation's example tests, course kernels), each checked against the reference page's
rule or NumPy math, with the rule's planted-bug side: a valid kernel runs unmodified, a broken
one still gets the rule's message."""

import sys

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki
from nki_kernels.simulator.instructions import target

RNG = np.random.default_rng(30)


# ---------------------------------------------------------------------------
# nisa.iota of a scalar expression (v2.26 nki.isa.iota: "an input affine expression"; vLLM writes
# nisa.iota(nl.program_id(1), dtype=nl.int32) for the head id)
# ---------------------------------------------------------------------------
@nki.jit
def _iota_of_program_id(x):
    out = nl.ndarray((3, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    head = nisa.iota(nl.program_id(1), dtype=nl.int32)
    assert head.shape == (1, 1)
    nl.store(out[nl.program_id(1)], value=head.reshape((1, 1)))
    return out


@nki.jit
def _iota_of_program_id_grid(x):
    out = nl.ndarray((2, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    v = nisa.iota(i * 10 + j, dtype=nl.int32)
    nl.store(out[i, j], value=v)
    return out


def test_iota_of_a_scalar_expression_is_a_one_element_tile():
    got = _iota_of_program_id[1, 3](np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(got, np.arange(3)[:, None])
    grid = _iota_of_program_id_grid[2, 3](np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(grid, 10 * np.arange(2)[:, None] + np.arange(3)[None, :])


def test_iota_of_an_arange_column_keeps_its_shape():
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.iota(3 * nl.arange(8)[:, None] + nl.program_id(0), dtype=nl.int32))
        return out

    np.testing.assert_array_equal(k[1](np.zeros(1, np.float32)), 3 * np.arange(8)[:, None])


# ---------------------------------------------------------------------------
# An out-of-bounds access is an IndexError too (the documentation's dma_copy tests catch IndexError),
# still an NKIError naming the rule, shapes and line
# ---------------------------------------------------------------------------
@nki.jit
def _indirect_load(in_tensor, step):
    out = nl.ndarray((64, 16), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:64, 0:16]
    idx = nisa.iota(step * nl.arange(64)[:, None], dtype=np.int32)
    tile = nisa.memset(shape=(64, 16), value=-1, dtype=in_tensor.dtype)
    nisa.dma_copy(src=in_tensor[idx, iy], dst=tile[ix, iy], oob_mode=nisa.oob_mode.error)
    nl.store(out, value=tile)
    return out


def test_out_of_bounds_is_an_index_error_and_an_nki_error():
    a = RNG.random((128, 16)).astype(np.float32)
    np.testing.assert_array_equal(_indirect_load(a, 2), a[2 * np.arange(64)])
    with pytest.raises(IndexError) as info:
        _indirect_load(a, 3)
    assert isinstance(info.value, NKIError) and isinstance(info.value, ValueError)
    assert info.value.rule == "out-of-bounds access"
    assert "(128, 16)" in str(info.value) and "test_external_kernels.py" in str(info.value)


def test_other_rules_are_not_index_errors():
    err = NKIError("partition size", "too big")
    assert not isinstance(err, IndexError) and type(err) is NKIError


# ---------------------------------------------------------------------------
# neuronxcc.nki.isa.tensor_scalar_cumulative (dst= form, v2.27 page pseudocode) and
# neuronxcc.nki.isa.constants
# ---------------------------------------------------------------------------
@nki.jit
def _cumulative(src_data, op0, op1, imm0, imm1=None, reduce_cmd=nisa.reduce_cmd.reset_reduce):
    out = nl.ndarray(src_data.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    src = nl.load(src_data)
    dst = nl.ndarray(src_data.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(src=src, dst=dst, op0=op0, op1=op1, imm0=imm0, imm1=imm1, reduce_cmd=reduce_cmd)
    nl.store(out, value=dst)
    return out


def test_gen1_tensor_scalar_cumulative_follows_the_pseudocode():
    x = RNG.random((16, 12)).astype(np.float32)
    # reset_reduce with add: reg starts at 0; reg = (x * 2) + reg
    np.testing.assert_allclose(_cumulative(x, np.multiply, np.add, 2.0), np.cumsum(x * 2, axis=1), rtol=1e-6)
    # load_reduce with max: reg starts at imm1
    got = _cumulative(x, np.add, np.maximum, 1.0, imm1=1.5, reduce_cmd=nisa.reduce_cmd.load_reduce)
    np.testing.assert_allclose(got, np.maximum.accumulate(np.maximum(x + 1.0, 1.5), axis=1), rtol=1e-6)
    assert "tensor_scalar_cumulative" in nisa.__all__


def test_gen1_tensor_scalar_cumulative_rejects_an_unlisted_reduction():
    # the page: op1 "is limited to add, subtract, mult, max, min"
    with pytest.raises(NKIError, match="op1"):
        _cumulative(np.ones((4, 4), np.float32), np.add, np.divide, 1.0)


def test_gen1_isa_constants_module():
    from nki_kernels.simulator import install

    install()
    from neuronxcc.nki.isa.constants import dge_mode, oob_mode  # noqa: E402 - what the docs' test imports

    import neuronxcc.nki.isa as gen1_isa

    assert dge_mode is gen1_isa.dge_mode and oob_mode is gen1_isa.oob_mode
    assert sys.modules["neuronxcc.nki.isa.constants"].dge_mode.hwdge.name == "hwdge"


# ---------------------------------------------------------------------------
# gen-1 dma_transpose's dge_mode (v2.26 page: "HWDGE is only supported for NeuronCore-v3+")
# ---------------------------------------------------------------------------
@nki.jit
def _dma_transpose_hwdge(a):
    b_sb = nisa.dma_transpose(a[:, :], dge_mode=nisa.dge_mode.hwdge)
    b = nl.ndarray(shape=b_sb.shape, dtype=b_sb.dtype, buffer=nl.shared_hbm)
    nl.store(b, value=b_sb)
    return b


def test_gen1_dma_transpose_takes_dge_mode():
    a = (RNG.random((16, 128)) * 100).astype(np.float16)
    with target.use("gen3"):
        np.testing.assert_array_equal(_dma_transpose_hwdge(a), a.T)
    with target.use("gen2"), pytest.raises(NKIError, match="NeuronCore-v3"):
        _dma_transpose_hwdge(a)


# ---------------------------------------------------------------------------
# nki.trace: the documentation's allocation tests write `nki_jit = nki.trace` and pass outputs as
# arguments to nki.simulate_kernel
# ---------------------------------------------------------------------------
def test_nki_trace_kernel_writes_its_output_argument():
    @nki.trace
    def copy_twice(a_ptr, out_ptr):
        t = nl.load(a_ptr)
        nl.store(out_ptr, value=nl.add(t, t))

    a = RNG.random((8, 32)).astype(np.float32)
    out = np.zeros_like(a)
    nki.simulate_kernel(copy_twice, a, out)
    np.testing.assert_array_equal(out, a + a)


def test_nki_trace_kernel_still_checks_rules():
    @nki.trace
    def too_tall(a_ptr, out_ptr):
        nl.store(out_ptr, value=nl.load(a_ptr))

    with pytest.raises(NKIError, match="partition"):
        nki.simulate_kernel(too_tall, np.zeros((256, 4), np.float32), np.zeros((256, 4), np.float32))


# ---------------------------------------------------------------------------
# First-generation indirect DMA with oob_mode=skip (v2.26 nki.isa.dma_copy: "oob_mode.skip: Silently
# skips"; the page's examples 4 and 8): an index tile's out-of-range offsets are skipped
# ---------------------------------------------------------------------------
@nki.jit
def _gather_skip(in_tensor, step):
    out = nl.ndarray((64, 16), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:64, 0:16]
    idx = nisa.iota(step * nl.arange(64)[:, None], dtype=np.int32)
    tile = nisa.memset(shape=(64, 16), value=-1, dtype=in_tensor.dtype)
    nisa.dma_copy(src=in_tensor[idx, iy], dst=tile[ix, iy], oob_mode=nisa.oob_mode.skip)
    nl.store(out, value=tile)
    return out


@nki.jit
def _scatter_skip(in_tensor, step, cols):
    out = nl.ndarray((128, 16), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:64, 0:cols]
    src = nl.load(in_tensor[ix, iy])
    idx = nisa.iota(step * nl.arange(64)[:, None], dtype=np.int32)
    nl.store(out, value=nisa.memset(shape=(128, 16), value=-1, dtype=in_tensor.dtype))
    nisa.dma_copy(dst=out[idx, iy], src=src, oob_mode=nisa.oob_mode.skip)
    return out


def test_gen1_indirect_gather_skips_out_of_range_offsets():
    a = RNG.random((128, 16)).astype(np.float32)
    want = np.full((64, 16), -1, np.float32)
    rows = 3 * np.arange(64)
    want[rows < 128] = a[rows[rows < 128]]
    np.testing.assert_array_equal(_gather_skip(a, 3), want)
    np.testing.assert_array_equal(_gather_skip(a, 2), a[2 * np.arange(64)])  # nothing to skip


def test_gen1_indirect_scatter_skips_out_of_range_offsets():
    a = RNG.random((64, 16)).astype(np.float32)
    want = np.full((128, 16), -1, np.float32)
    rows = 3 * np.arange(64)
    want[rows[rows < 128]] = a[rows < 128]
    np.testing.assert_array_equal(_scatter_skip(a, 3, 16), want)


def test_gen1_indirect_skip_keeps_static_bounds_and_error_mode_names_the_skip():
    # a compile-time offset out of range is not what skip covers: still the rule
    with pytest.raises(NKIError, match="out-of-bounds access"):
        _scatter_skip(np.zeros((64, 32), np.float32), 2, 32)
    with pytest.raises(IndexError, match="oob_mode=nisa.oob_mode.skip"):
        _indirect_load(np.zeros((128, 16), np.float32), 3)


# ---------------------------------------------------------------------------
# mask=(a and b): Python hands the compiler one operand (a mask object is true), so the mask is b
# alone; a warning points at the Known Issues page ("Masks conjunction: Use & ...")
# ---------------------------------------------------------------------------
def _masked_copy(combine):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:8, 0:8]
        nl.store(out, value=nisa.memset((8, 8), 0.0, nl.float32))
        nl.store(out[ix, iy], value=nl.load(x)[ix, iy], mask=combine(ix < 4, iy < 2))
        return out

    return k


def test_python_and_of_masks_keeps_the_second_with_a_warning():
    x = np.ones((8, 8), np.float32)
    cols = np.zeros((8, 8), np.float32)
    cols[:, :2] = 1
    rows = np.zeros((8, 8), np.float32)
    rows[:4] = 1
    with pytest.warns(UserWarning, match=r"`and`.*second.*Known Issues.*`&`"):
        np.testing.assert_array_equal(_masked_copy(lambda a, b: a and b)(x), cols)
    with pytest.warns(UserWarning, match=r"`or`.*first.*`\|`"):
        np.testing.assert_array_equal(_masked_copy(lambda a, b: a or b)(x), rows)
    np.testing.assert_array_equal(_masked_copy(lambda a, b: a & b)(x), rows * cols)  # the documented form


def test_if_or_not_on_a_mask_is_still_an_error():
    def if_mask(a, b):
        if a:
            return b
        return a

    with pytest.raises(TypeError, match="mask="):
        _masked_copy(if_mask)(np.ones((8, 8), np.float32))
    with pytest.raises(TypeError, match="mask="):
        _masked_copy(lambda a, b: (not a) & b)(np.ones((8, 8), np.float32))


# ---------------------------------------------------------------------------
# An instruction's mask= covers its operands' reads (the LayerNorm tutorial v2:
# bn_stats(t[i_p, j * F + i_f], mask=(j * F + i_f < n)) at a ragged last chunk)
# ---------------------------------------------------------------------------
def _bn_stats_chunks(n_cols, masked=True, bound=None):
    bound = n_cols if bound is None else bound

    @nki.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(x.shape[0])[:, None]
        i_f = nl.arange(512)[None, :]
        i_s = nl.arange(6)[None, :]
        t = nl.load(x)
        chunks = (n_cols + 511) // 512
        stats = nl.ndarray((x.shape[0], 6 * chunks), dtype=nl.float32)
        for j in nl.affine_range(chunks):
            if masked:
                stats[i_p, j * 6 + i_s] = nisa.bn_stats(t[i_p, j * 512 + i_f], mask=(j * 512 + i_f < bound),
                                                        dtype=nl.float32)
            else:
                stats[i_p, j * 6 + i_s] = nisa.bn_stats(t[i_p, j * 512 + i_f], dtype=nl.float32)
        nl.store(out, value=nisa.bn_aggr(stats))
        return out

    return k


def test_bn_stats_mask_covers_the_operand_past_the_edge():
    x = RNG.standard_normal((16, 1000)).astype(np.float32)
    got = _bn_stats_chunks(1000)(x)
    np.testing.assert_allclose(got[:, 0], x.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], x.var(axis=1), rtol=1e-4)


def test_max8_mask_in_the_operand_space_selects_what_it_reads():
    @nki.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 8), dtype=x.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
        t = nl.load(x)
        nl.store(out, value=nisa.max8(src=t[ix, iy], mask=(iy < 40)))
        return out

    x = RNG.standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_array_equal(k(x), -np.sort(-x[:, :40], axis=1)[:, :8])


def test_operand_past_the_edge_without_a_covering_mask_is_the_bounds_error():
    x = RNG.standard_normal((16, 1000)).astype(np.float32)
    with pytest.raises(IndexError, match=r"out-of-bounds access.*index 1000 on axis 1"):
        _bn_stats_chunks(1000, masked=False)(x)
    with pytest.raises(NKIError, match="out-of-bounds access"):  # the mask lets 1000..1003 through
        _bn_stats_chunks(1000, bound=1004)(x)

    @nki.jit
    def read_past_edge_in_nl(x):
        out = nl.ndarray((16, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(16)[:, None], nl.arange(512)[None, :]
        t = nl.load(x)
        nl.store(out, value=nl.exp(t[i_p, 512 + i_f]))  # no mask: the view's read is the error
        return out

    with pytest.raises(NKIError, match="out-of-bounds access"):
        read_past_edge_in_nl(x)


def test_elementwise_instruction_mask_covers_its_operand():
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 24), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(8)[:, None], nl.arange(24)[None, :]
        t = nl.load(x)
        nl.store(out, value=nisa.memset((8, 24), 0.0, nl.float32))
        y = nisa.activation(op=nl.exp, data=t[i_p, 16 + i_f], mask=(16 + i_f < 32))
        nl.store(out[i_p, i_f], value=y, mask=(16 + i_f < 32))
        return out

    x = RNG.standard_normal((8, 32)).astype(np.float32)
    want = np.zeros((8, 24), np.float32)
    want[:, :16] = np.exp(x[:, 16:])
    np.testing.assert_allclose(k(x), want, rtol=1e-6)


# ---------------------------------------------------------------------------
# FP8 double-row matmul (documentation test: stationary [K, 2, M], moving [K, 2, N],
# einsum("kli,klj->ij")) and hbm_tensor.view(fp8)
# ---------------------------------------------------------------------------
@nki.jit
def _double_row(a_input, b_input):
    k_, two, m = a_input.shape
    n = b_input.shape[2]
    out = nl.ndarray([m, n], dtype=nl.float32, buffer=nl.shared_hbm)
    a_tile = nl.load(a_input.view(nl.float8_e5m2))
    b_tile = nl.load(b_input.view(nl.float8_e5m2))
    nl.store(out, value=nisa.nc_matmul(a_tile, b_tile, perf_mode="double_row_gen3"))
    return out


def test_double_row_matmul_contracts_the_row_pair():
    import ml_dtypes

    a = RNG.integers(-3, 4, (128, 2, 16)).astype(ml_dtypes.float8_e5m2)
    b = RNG.integers(-3, 4, (128, 2, 64)).astype(ml_dtypes.float8_e5m2)
    want = np.einsum("kli,klj->ij", a.astype(np.float32), b.astype(np.float32))
    with target.use("gen3"):
        np.testing.assert_array_equal(_double_row(a, b), want)
    with target.use("gen2"), pytest.raises(NKIError, match="perf_mode"):  # the mode's NeuronCore-v3 rule
        _double_row(a, b)


def test_three_d_matmul_operands_need_the_double_row_mode():
    @nki.jit
    def plain(a_input, b_input):
        out = nl.ndarray([16, 64], dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.nc_matmul(nl.load(a_input), nl.load(b_input)))
        return out

    with pytest.raises(NKIError, match="2-D tiles.*double_row"):
        plain(np.ones((128, 2, 16), np.float32), np.ones((128, 2, 64), np.float32))


def test_hbm_view_as_fp8_reinterprets_bytes():
    import ml_dtypes

    @nki.jit
    def k(raw):
        out = nl.ndarray(raw.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(raw.view(nl.float8_e4m3)))
        return out

    vals = (RNG.integers(-8, 8, (8, 32)) / 4).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(k(vals.view(np.uint8)), vals.astype(np.float32))


# ---------------------------------------------------------------------------
# t[0, 0:M] of a [1, M] tile is the [1, M] row (NKI Known Issues: "index their [N, 1] or [1, M]
# shaped 2D buffers with both indices, do my_sbuf[0:N, 0] or my_sbuf[0, 0:M]")
# ---------------------------------------------------------------------------
def test_integer_partition_subscript_keeps_the_partition_axis():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        row = t[0, 0:8]
        assert row.shape == (1, 8)
        nl.store(out, value=nl.exp(row))
        return out

    x = RNG.standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_allclose(k(x), np.exp(x[:, :8]), rtol=1e-6)


def test_row_of_a_wider_tile_and_the_column_form():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        col = nl.ndarray((4, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, value=t[2, 0:16])  # partition 2's row, on one partition
        nl.store(col, value=t[0:4, 5])   # the [N, 1] form: one element of each partition
        return out, col

    x = RNG.standard_normal((4, 16)).astype(np.float32)
    row, col = k(x)
    np.testing.assert_array_equal(row, x[2:3])
    np.testing.assert_array_equal(col, x[:, 5:6])


def test_row_subscript_out_of_range_is_still_the_bounds_error():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x)[1, 0:8])  # planted bug: the tile has one partition
        return out

    with pytest.raises(IndexError, match="out-of-bounds access"):
        k(np.zeros((1, 8), np.float32))


# ---------------------------------------------------------------------------
# A scalar read from a tile is a run-time offset: nl.load(t)[0, 0] + nl.arange(...) indexes HBM
# at the value the tile holds (the dma_copy page: "a dynamic start address which depends on a
# variable that cannot be resolved at compile time"), as does nl.ds(scalar, size)
# ---------------------------------------------------------------------------
@nki.jit
def _runtime_rows(x, off):
    out = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    o = nl.load(off)[0, 0]
    i_p, i_f = nl.arange(4)[:, None], nl.arange(8)[None, :]
    a = nl.load(x[o + i_p, i_f])
    b = nl.load(x[o * 2 - i_p + 3, i_f])
    c = nl.load(x[nl.ds(o, 4), :])
    nl.store(out, value=a - b + c)
    return out


def test_scalar_from_a_tile_offsets_an_arange_index():
    x = RNG.standard_normal((10, 8)).astype(np.float32)
    got = _runtime_rows(x, np.array([[3]], np.int32))
    np.testing.assert_array_equal(got, x[3:7] - x[9:5:-1] + x[3:7])


def test_runtime_offset_out_of_range_and_non_integer_offsets_are_refused():
    x = RNG.standard_normal((10, 8)).astype(np.float32)
    with pytest.raises(IndexError, match="out-of-bounds access"):
        _runtime_rows(x, np.array([[7]], np.int32))  # rows 7..10: past the tensor

    @nki.jit
    def float_offset(x, off):
        out = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        o = nl.load(off)[0, 0]  # planted bug: a float is no address
        nl.store(out, value=nl.load(x[o + nl.arange(4)[:, None], nl.arange(8)[None, :]]))
        return out

    with pytest.raises(NKIError, match=r"index type.*one-element integer tile"):
        float_offset(x, np.array([[3.0]], np.float32))


# ---------------------------------------------------------------------------
# neuronxcc.nki.typing.tensor is a type (kernels write isinstance(x, nt.tensor)) and an annotation
# ---------------------------------------------------------------------------
def test_typing_tensor_is_a_type_for_isinstance():
    from nki_kernels.simulator.nki import typing as nt

    seen = {}

    @nki.jit
    def k(x: nt.tensor[8, 8], scale: float):
        seen["arg"] = isinstance(x, nt.tensor)
        t = nl.load(x)
        seen["tile"] = isinstance(t, nt.tensor) and isinstance(t, nt.mutable_tensor)
        seen["number"] = isinstance(scale, nt.tensor)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(t, scale))
        return out

    x = RNG.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_array_equal(k(x, 2.0), x * 2)
    assert seen == {"arg": True, "tile": True, "number": False}
    assert isinstance(nt.tensor, type) and nt.tensor[128, 512] is nt.tensor
    assert not isinstance(np.zeros(3), nt.tensor)  # a host array is not an NKI tensor


def test_nl_op_mask_covers_its_operand_past_the_edge():
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 24), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(8)[:, None], nl.arange(24)[None, :]
        t = nl.load(x)
        nl.store(out, value=nisa.memset((8, 24), 0.0, nl.float32))
        y = nl.add(t[i_p, 16 + i_f], 1.0, mask=(16 + i_f < 32))
        nl.store(out[i_p, i_f], value=nl.exp(y, mask=(16 + i_f < 32)), mask=(16 + i_f < 32))
        return out

    x = RNG.standard_normal((8, 32)).astype(np.float32)
    want = np.zeros((8, 24), np.float32)
    want[:, :16] = np.exp(x[:, 16:] + 1.0)
    np.testing.assert_allclose(k(x), want, rtol=1e-6)


# ---------------------------------------------------------------------------
# A kernel returning an SBUF tile (NKI Known Issues: "Top-level tensors must be on HBM"): NumPy
# meeting the returned tile gets the rule, naming the host line, not a tile-iteration error
# ---------------------------------------------------------------------------
def test_returned_sbuf_tile_meets_numpy_with_the_rule():
    @nki.jit
    def returns_tile(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.exp(nl.load(x))
        nl.store(out, value=t)
        return t  # planted bug: the SBUF tile, not `out`

    # caught where the kernel returns, at the API boundary, naming the kernel's line
    with pytest.raises(NKIError, match=r"kernel result.*SBUF tile of shape \(4, 4\).*HBM.*test_external_kernels"):
        returns_tile(np.zeros((4, 4), np.float32))


def test_a_returned_index_expression_of_an_output_is_the_rule_and_the_tensor_itself_is_not():
    @nki.jit
    def returns_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out[0:2, :]  # planted bug: an index expression, not a tensor

    with pytest.raises(NKIError, match=r"kernel result.*index expression of out.*shape \(2, 4\)"):
        returns_rows(np.zeros((4, 4), np.float32))


def test_a_kernel_named_like_a_test_is_not_collected_by_pytest():
    @nki.jit
    def test_looking_kernel(x):
        return x

    assert test_looking_kernel.__test__ is False


def test_host_math_on_a_tile_inside_a_kernel_is_an_operand_error():
    @nki.jit
    def host_math(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, value=np.asarray(t) + 1)  # planted bug: NumPy on on-chip data
        return out

    with pytest.raises(NKIError, match="on-chip data, not a host array"):
        host_math(np.zeros((4, 4), np.float32))


def test_a_single_value_tile_reshapes_to_one_partition():
    @nki.jit
    def k(x):
        out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        v = nl.load(x)[2, 3]
        nl.store(out, value=v.reshape((1, 1)))
        return out

    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_array_equal(k(x), x[2:3, 3:4])

    @nki.jit
    def too_many(x):
        out = nl.ndarray((1, 2), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x)[2, 3].reshape((1, 2)))  # planted bug: one value, two elements
        return out

    with pytest.raises(NKIError, match="reshape"):
        too_many(x)


def test_block_subscript_of_a_block_view_is_not_taken_for_a_partition():
    # nki-samples' flash attention backward: dy_o_sum[i_q_head] is a view of a
    # (heads, tiles, par_dim(128), 1) tensor; view[i_tile, :, 0] is that block's [128] column
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((2, 3, nl.par_dim(128), 1), dtype=nl.float32)
        for h in nl.affine_range(2):
            for i in nl.affine_range(3):
                buf[h, i, :, 0] = nl.load(x[h * 3 + i])
        head = buf[1]
        col = head[2, :, 0]
        assert col.shape == (128,)
        nl.store(out, value=nl.multiply(col, 2.0))
        return out

    x = RNG.standard_normal((6, 128, 1)).astype(np.float32)
    np.testing.assert_array_equal(k(x), x[5] * 2)


def test_tensor_reduce_mask_in_the_operand_space():
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(8)[:, None], nl.arange(64)[None, :]
        t = nl.load(x)
        nl.store(out, value=nisa.tensor_reduce(np.add, t[i_p, 32 + i_f], axis=(1,), keepdims=True,
                                               mask=(32 + i_f < 48)))
        return out

    x = RNG.standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_allclose(k(x), x[:, 32:48].sum(axis=1, keepdims=True), rtol=1e-5)


# ---------------------------------------------------------------------------
# A padded sliding window (nki-samples' contributed MaxPool2D, PR #67): a reduction over a window
# t[i_p, i_f + i_k - 1] whose mask hides the columns outside the tile. The masked-off elements take
# no part in the reduction; reads outside the tile that the mask does not hide stay an error.
# ---------------------------------------------------------------------------
def _window_reduce(how, lo_guard=True, hi_guard=True, K=3):
    @nki.jit
    def k(x):
        P, N = x.shape
        out = nl.ndarray((P, N), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p = nl.arange(P)[:, None, None]
        i_f = nl.arange(N)[None, :, None]
        i_k = nl.arange(K)[None, None, :]
        j = i_f + i_k - 1
        m = (j >= 0) if lo_guard else (j < N + 5)
        if hi_guard:
            m = m & (j < N)
        if how == "nl.max":
            r = nl.max(t[i_p, j], axis=[2], mask=m)
        elif how == "nl.sum":
            r = nl.sum(t[i_p, j], axis=[2], mask=m)
        else:
            r = nisa.tensor_reduce(np.max, t[i_p, j], axis=[2], mask=m)
        nl.store(out, value=r)
        return out
    return k


def _padded_window(x, K, fill, fn):
    xp = np.pad(x, ((0, 0), (1, K - 2)), constant_values=fill)
    return fn(np.stack([xp[:, s:s + x.shape[1]] for s in range(K)]), axis=0)


@pytest.mark.parametrize("how", ["nl.max", "nl.sum", "nisa.tensor_reduce"])
def test_a_window_reduction_masked_at_the_edges_matches_numpy(how):
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    fill, fn = (0.0, np.sum) if how == "nl.sum" else (-np.inf, np.max)
    np.testing.assert_allclose(_window_reduce(how)(x), _padded_window(x, 3, fill, fn), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["nl.max", "nisa.tensor_reduce"])
@pytest.mark.parametrize("guards", [(False, True), (True, False)])
def test_a_window_reduction_whose_mask_leaves_an_edge_unguarded_is_out_of_bounds(how, guards):
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    with pytest.raises(NKIError, match=r"\[out-of-bounds access\] index (-1|40) on axis 1"):
        _window_reduce(how, *guards)(x)


def test_tensor_reduce_under_a_scattered_mask_leaves_a_result_with_nothing_selected_unwritten():
    @nki.jit
    def k(x):
        P, N = x.shape
        out = nl.ndarray((P, N // 2), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p = nl.arange(P)[:, None, None]
        i_g = nl.arange(N // 2)[None, :, None]
        i_k = nl.arange(2)[None, None, :]
        res = nl.full((P, N // 2), 7.0, dtype=x.dtype)
        # odd groups read their first element only; group 0 nothing (i_g * 2 + i_k > 1 is False there)
        res[...] = nisa.tensor_reduce(np.add, t[i_p, i_g * 2 + i_k], axis=[2],
                                      mask=(i_g * 2 + i_k > 1) & ((i_g % 2 == 0) | (i_k == 0)))
        nl.store(out, value=res)
        return out

    x = RNG.standard_normal((8, 12)).astype(np.float32)
    pairs = x.reshape(8, 6, 2)
    want = np.where(np.arange(6) % 2 == 0, pairs.sum(-1), pairs[..., 0])
    want[:, 0] = 7.0
    np.testing.assert_allclose(k(x), want, rtol=1e-6)


# ---------------------------------------------------------------------------
# An instruction whose mask= is False for a whole iteration (mask=(k == 0) inside an affine loop,
# nki-samples' contributed LoRA backward, PR #46) is no instruction in that iteration: it reads and
# writes nothing, so it is no loop-carried dependency; without the masks the dependency stays an error.
# ---------------------------------------------------------------------------
def _first_iteration_only(masked):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        acc = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        res = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(3):
            if masked:
                acc[...] = nl.loop_reduce(nl.multiply(t, i + 2), op=np.add, loop_indices=[i], mask=(i == 0))
                res[...] = nl.copy(acc, mask=(i == 0))
            else:
                acc[...] = nl.loop_reduce(nl.multiply(t, i + 2), op=np.add, loop_indices=[i])
                res[...] = nl.copy(acc)
        nl.store(out, value=res)
        return out
    return k


def test_a_reduction_masked_to_one_iteration_accumulates_that_iteration_only():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(_first_iteration_only(True)(x), 2 * x, rtol=1e-6)


def test_the_same_reduction_unmasked_is_a_loop_carried_dependency():
    with pytest.raises(NKIError, match=r"\[loop_carried\]"):
        _first_iteration_only(False)(RNG.standard_normal((128, 64)).astype(np.float32))


def test_a_masked_loop_reduce_accumulates_only_the_selected_elements():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p, i_f = nl.mgrid[0:x.shape[0], 0:x.shape[1]]
        acc = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            acc[i_p, i_f] = nl.loop_reduce(t, op=np.add, loop_indices=[i], mask=(i_f < 16 * (i + 1)))
        nl.store(out, value=acc)
        return out

    x = RNG.standard_normal((128, 64)).astype(np.float32)
    times = 4 - np.arange(64) // 16  # column c is accumulated in the iterations with 16 * (i + 1) > c
    np.testing.assert_allclose(k(x), x * times, rtol=1e-6)


# ---------------------------------------------------------------------------
# Operand masking of the matmul APIs (NKI API Masking: "nl.matmul(lhs_T[i_lhs_f <= 64],
# rhs[i_rhs_f <= 256], transpose_x=True)"; nki-samples' contributed rmsnorm_quant, PR #86, masks the
# ragged last tile of its moving operand): only the selected elements are contracted, only the result
# rows / columns with a selected stationary / moving column are written.
# ---------------------------------------------------------------------------
def _operand_masked_matmul(api, m_cols=64, n_cols=256, k_rows=None):
    @nki.jit
    def k(lhsT, rhs):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a, b = nl.load(lhsT), nl.load(rhs)
        i_p = nl.arange(128)[:, None]
        i_lhs_f = nl.arange(128)[None, :]
        i_rhs_f = nl.arange(512)[None, :]
        lhs_mask = (i_lhs_f < m_cols) if k_rows is None else (i_lhs_f < m_cols) & (i_p < k_rows)
        rhs_mask = (i_rhs_f < n_cols) if k_rows is None else (i_rhs_f < n_cols) & (i_p < k_rows)
        res = nl.full((128, 512), -5.0, dtype=nl.float32, buffer=nl.psum)
        if api == "nl.matmul":
            res[...] = nl.matmul(a[i_p, i_lhs_f][lhs_mask], b[i_p, i_rhs_f][rhs_mask], transpose_x=True)
        elif api == "nl.matmul untransposed":
            at = nl.transpose(a)  # [M, K]: the operand mask is over its own (M, K) index variables
            i_m = nl.arange(128)[:, None]
            i_k = nl.arange(128)[None, :]
            at_mask = (i_m < m_cols) if k_rows is None else (i_m < m_cols) & (i_k < k_rows)
            res[...] = nl.matmul(at[i_m, i_k][at_mask], b[i_p, i_rhs_f][rhs_mask])
        else:
            res[...] = nisa.nc_matmul(a[i_p, i_lhs_f][lhs_mask], b[i_p, i_rhs_f][rhs_mask])
        nl.store(out, value=nl.copy(res))
        return out
    return k


@pytest.mark.parametrize("api", ["nl.matmul", "nl.matmul untransposed", "nisa.nc_matmul"])
@pytest.mark.parametrize("k_rows", [None, 96])
def test_operand_masking_contracts_and_writes_only_the_selection(api, k_rows):
    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 512)).astype(np.float32)
    kk = 128 if k_rows is None else k_rows
    want = np.full((128, 512), -5.0, np.float32)
    want[:64, :256] = a[:kk, :64].T.astype(np.float64) @ b[:kk, :256]
    np.testing.assert_allclose(_operand_masked_matmul(api, k_rows=k_rows)(a, b), want, rtol=1e-4, atol=1e-4)


def _ragged_moving(masked):
    @nki.jit
    def k(ones, g):
        n = g.shape[1]  # 300: three 128-column tiles, the last reaching 84 columns past the tensor
        out = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.shared_hbm)
        o = nl.load(ones)
        t = nl.load(g)
        i_k = nl.arange(1)[:, None]
        i_f = nl.arange(128)[None, :]
        for j in nl.affine_range(3):
            src = t[i_k, j * 128 + i_f]
            r = nisa.nc_matmul(o, src[j * 128 + i_f < n] if masked else src)
            nl.store(out[nl.arange(128)[:, None], j * 128 + i_f], value=nl.copy(r), mask=(j * 128 + i_f < n))
        return out
    return k


def test_a_masked_moving_operand_may_reach_past_its_tile_where_masked():
    ones = np.ones((1, 128), np.float32)
    g = RNG.standard_normal((1, 300)).astype(np.float32)
    np.testing.assert_allclose(_ragged_moving(True)(ones, g), np.broadcast_to(g, (128, 300)), rtol=1e-6)
    with pytest.raises(NKIError, match=r"\[out-of-bounds access\]"):
        _ragged_moving(False)(ones, g)


# ---------------------------------------------------------------------------
# The first generation's nisa.tensor_scalar with a one-input operator of the "Supported Math
# Operators" table (nl.abs, nl.rsqrt, nl.reciprocal) and operand0=0.0, as the contributed
# rmsnorm_quant writes tensor_scalar_reduce(op0=nl.abs, operand0=0.0, ...)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("op, ref", [(nl.abs, np.abs), (nl.rsqrt, lambda v: 1 / np.sqrt(np.abs(v))),
                                     (nl.reciprocal, np.reciprocal)])
def test_gen1_tensor_scalar_with_a_unary_operator(op, ref):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        v = nl.abs(t) if op is nl.rsqrt else t
        nl.store(out, value=nisa.tensor_scalar(v, op0=op, operand0=0.0, op1=nl.multiply, operand1=2.0))
        return out

    x = (RNG.uniform(0.5, 2.0, (128, 64)) * RNG.choice([-1, 1], (128, 64))).astype(np.float32)
    np.testing.assert_allclose(k(x), 2 * ref(x), rtol=1e-5)


def test_gen1_tensor_scalar_reduce_with_abs_and_a_nonzero_operand_is_refused():
    @nki.jit
    def k(x, operand0):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        y = nisa.tensor_scalar_reduce(data=nl.load(x), op0=nl.abs, operand0=operand0, reduce_op=nl.max, reduce_res=r)
        nl.store(out, value=y)
        red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(red, value=r)
        return out, red

    x = RNG.standard_normal((128, 64)).astype(np.float32)
    got, red = k(x, 0.0)
    np.testing.assert_array_equal(got, np.abs(x))
    np.testing.assert_array_equal(red, np.abs(x).max(axis=1, keepdims=True))
    with pytest.raises(NKIError, match="op0=abs is a unary operator, so operand0 must be None or 0; got 1.5"):
        k(x, 1.5)


# ---------------------------------------------------------------------------
# A transpose's mask= is over its operand's index variables (NKI API Masking: "which range of indices
# along one of the input tile axes should be valid"; nki-samples' contributed transpose and conv
# kernels, PR #58/#100, write nc_transpose(t[i, j], mask=(i < B) & (j < N))): result [p, q] is written
# when operand [q, p] is selected. Before, a square tile took the mask over the result (silently the
# wrong elements) and a non-square one was refused.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("api", ["nisa.nc_transpose", "nl.transpose"])
@pytest.mark.parametrize("P, F", [(64, 128), (128, 128), (128, 96)])
def test_a_transpose_mask_selects_operand_elements(api, P, F):
    @nki.jit
    def k(x):
        out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i = nl.arange(P)[:, None]
        j = nl.arange(F)[None, :]
        r = nl.full((F, P), 3.0, dtype=nl.float32)
        fn = nisa.nc_transpose if api == "nisa.nc_transpose" else nl.transpose
        r[...] = fn(t[i, j], mask=(i < 40) & (j < F - 8))
        nl.store(out, value=r)
        return out

    x = RNG.standard_normal((P, F)).astype(np.float32)
    want = np.full((F, P), 3.0, np.float32)
    want[:F - 8, :40] = x[:40, :F - 8].T
    np.testing.assert_array_equal(k(x), want)


def test_a_transpose_mask_that_fits_only_the_result_is_taken_over_the_result():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        p = nl.arange(128)[:, None]
        q = nl.arange(64)[None, :]
        r = nl.full((128, 64), 3.0, dtype=nl.float32)
        r[...] = nisa.nc_transpose(nl.load(x), mask=(p < 100) & (q < 64))
        nl.store(out, value=r)
        return out

    x = RNG.standard_normal((64, 128)).astype(np.float32)
    want = np.full((128, 64), 3.0, np.float32)
    want[:100] = x.T[:100]
    np.testing.assert_array_equal(k(x), want)


# ---------------------------------------------------------------------------
# From the Neuron team's contributed kernels (nki-samples PR #104, contributed/neuron-team-kernels)
# ---------------------------------------------------------------------------
def _load_store(out_dtype=None):
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=out_dtype or a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        return out
    return k


def test_a_store_between_equal_dtypes_copies_bytes():
    # rmsnorm_quant packs an fp32 scale into 4 fp8 elements (.view) and stores them: a DMA copies bytes,
    # so fp8 NaN encodings (0x79..0x7f, 0xf9..0xff in float8_e4m3) and the packed scale come back as
    # they were (through fp32 they were canonicalised to 0x7c / 0xfc).
    @nki.jit
    def pack(s):
        out = nl.ndarray((128, 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(s).view(nl.float8_e4m3))
        return out

    raw = np.arange(256, dtype=np.uint8).reshape(128, 2)
    np.testing.assert_array_equal(np.ascontiguousarray(_load_store()(raw.view(ml_dtypes.float8_e4m3))).view(np.uint8),
                                  raw)
    s = (RNG.uniform(1, 4, (128, 1)) / 240).astype(np.float32)
    s[0, 0] = np.frombuffer(bytes.fromhex("9a99793c"), np.float32)[0]  # a byte in the fp8 NaN range
    np.testing.assert_array_equal(np.ascontiguousarray(pack(s)).view(np.uint8), s.view(np.uint8))


def test_a_store_into_another_dtype_still_rounds():
    a = RNG.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(_load_store(nl.bfloat16)(a)).astype(np.float32),
                                  a.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_view_of_a_block_tile_reinterprets_its_bytes():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 4), dtype=nl.uint8, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
        t[1, :, :] = nl.load(a)
        nl.store(out, value=t.view(nl.uint8)[1, :, :4])
        return out

    a = RNG.standard_normal((128, 1)).astype(np.float32)
    np.testing.assert_array_equal(k(a), a.view(np.uint8))


def test_view_of_a_block_tile_into_a_wider_dtype_needs_whole_elements():
    @nki.jit
    def k(a):
        t = nl.ndarray((2, nl.par_dim(128), 3), dtype=nl.uint8, buffer=nl.sbuf)
        t[0, :, :] = nl.load(a)
        t.view(nl.float32)
        return a

    with pytest.raises(NKIError, match=r"\[view\] NkiTensor.view: a sbuf tile of shape \(2, 128, 3\) uint8 cannot be "
                                       r"reinterpreted as float32"):
        k(np.zeros((128, 3), np.uint8))


def test_an_in_place_accumulation_of_another_shape_names_both_shapes():
    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.zeros((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        ps[...] += nisa.nc_matmul(nl.load(a), nl.load(b))
        nl.store(out, value=ps)
        return out

    with pytest.raises(NKIError, match=r"\[shape mismatch\] tile add in place .*\(128, 128\) does not fit the "
                                       r"destination psum tile of shape \(128, 512\)"):
        k(np.ones((128, 128), np.float32), np.ones((128, 128), np.float32))


def test_load_and_store_take_mode_oob_error_and_refuse_other_modes():
    from nki_kernels.simulator.instructions.target import oob_mode

    def make(mode):
        @nki.jit
        def k(a, idx):
            out = nl.ndarray((4, 64), dtype=a.dtype, buffer=nl.shared_hbm)
            i = nl.load(idx)
            t = nl.load(a[i[nl.arange(4)[:, None], 0], nl.arange(64)[None, :]], mode=mode)
            nl.store(out, value=t, mode=oob_mode.error)
            return out
        return k

    a = RNG.standard_normal((8, 64)).astype(np.float32)
    idx = np.array([[3], [0], [7], [1]], np.int32)
    np.testing.assert_array_equal(make(oob_mode.error)(a, idx), a[idx[:, 0]])
    with pytest.raises(NKIError, match=r"\[mode\] nl.load: mode=.*skip.*only oob_mode.error"):
        make(oob_mode.skip)(a, idx)
    with pytest.raises(NKIError, match=r"\[out-of-bounds access\]"):
        make(oob_mode.error)(a, np.array([[3], [0], [9], [1]], np.int32))


@pytest.mark.parametrize("rows", ["prefix", "middle"])
def test_a_partition_mask_on_one_matmul_operand_leaves_those_rows_out_of_both(rows):
    # The blockwise MoE kernel (PR #104) masks the moving rows past I of a ragged last K tile; the
    # stationary rows there were never written (NaN here): they must not reach the result.
    K = 72

    @nki.jit
    def k(a, b):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        jf = nl.arange(128)[None, :]
        st = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
        sel = (ip < K) if rows == "prefix" else (ip >= 16) & (ip < 16 + K)
        st[ip, jf] = nl.load(a[ip, jf], mask=sel)
        mv = nl.load(b)
        ps = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
        ps[...] += nisa.nc_matmul(st[0:128, 0:128], mv[ip, nl.arange(512)[None, :]][sel])
        nl.store(out, value=nl.copy(ps))
        return out

    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 512)).astype(np.float32)
    r = np.arange(128) < K if rows == "prefix" else (np.arange(128) >= 16) & (np.arange(128) < 16 + K)
    np.testing.assert_allclose(k(a, b), a[r].T.astype(np.float64) @ b[r], rtol=1e-4, atol=1e-4)


def test_a_one_element_index_tile_broadcasts_with_the_other_index_expressions():
    # The blockwise MoE kernel (PR #104) loads one expert's weights with w[e[0, 0], i_p, i_f]: the
    # one-element tile broadcasts with i_p [P, 1] and i_f [1, F] to a [P, F] tile, as the nl.load page's
    # gathers (data_tensor[idx_tile[i_p, 0], i_f]); it was [1, P, F], 128 times too large for SBUF at F=4096.
    @nki.jit
    def k(w, e):
        out = nl.ndarray(w.shape[1:], dtype=w.dtype, buffer=nl.shared_hbm)
        be = nl.load(e[0])
        ip, jf = nl.mgrid[0:w.shape[1], 0:w.shape[2]]
        t = nl.load(w[be[0, 0], ip, jf])
        assert t.shape == w.shape[1:]
        nl.store(out[ip, jf], value=t)
        return out

    w = RNG.standard_normal((3, 128, 4096)).astype(np.float16)
    np.testing.assert_array_equal(k(w, np.array([[2], [0]], np.int32)), w[2])


@pytest.mark.parametrize("n", [128, 256])
def test_an_instruction_mask_that_restates_an_operand_mask_restricts_that_operand(n):
    # The blockwise MoE kernel's gate/up projection of a ragged I tile: nc_matmul(w[i_p, idx][idx < I],
    # x, mask=(idx < I)) with idx over the stationary's free axis (the result's rows). Laid over the
    # result, the [1, 128] mask cut the moving operand's columns (the tokens) instead.
    I = 72

    @nki.jit
    def k(w, x):
        out = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        idx = nl.arange(128)[None, :]
        a, b = nl.load(w), nl.load(x)
        ps = nl.full((128, n), 9.0, dtype=nl.float32, buffer=nl.psum)
        ps[...] = nisa.nc_matmul(a[ip, idx][idx < I], b, mask=(idx < I))
        nl.store(out, value=nl.copy(ps))
        return out

    w = RNG.standard_normal((128, 128)).astype(np.float32)
    x = RNG.standard_normal((128, n)).astype(np.float32)
    want = np.full((128, n), 9.0, np.float32)
    want[:I] = (w.T.astype(np.float64) @ x)[:I]
    np.testing.assert_allclose(k(w, x), want, rtol=1e-4, atol=1e-4)
