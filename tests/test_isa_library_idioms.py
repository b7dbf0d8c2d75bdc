"""Idioms of production kernels (nki-library) that the current docs allow, checked against NumPy:
PSUM tensors spanning banks with one matmul per bank, strided host arrays as kernel arguments,
``tensor != None`` tests of optional operands, and the ``cpu_simulate`` entry point's treatment of
unwritten memory."""

import os
import warnings

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator.instructions import target
from nki_kernels.simulator import language as nl1
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator import config
from nki_kernels.simulator.standalone.simulate import cpu_simulate

from .isa_helpers import to_hbm, to_sbuf

nl = nki.language
nisa = nki.isa
HERE = os.path.basename(__file__)
rng = np.random.default_rng(21)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------
# PSUM tensors spanning banks
# ---------------------------------------------------------------------------
@nki.jit
def matmul_per_bank(lhsT, rhs):
    """One [M, N] PSUM tensor over N/512 banks, one nc_matmul into each bank's slice."""
    K, M = lhsT.shape
    _, N = rhs.shape
    a, b = to_sbuf(lhsT), to_sbuf(rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(N // 512):
        nisa.nc_matmul(dst=acc[:, nl.ds(i * 512, 512)], stationary=a, moving=b[:, nl.ds(i * 512, 512)])
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    return to_hbm(res)


@pytest.mark.parametrize("n", [1024, 4096])
def test_psum_tensor_spans_banks_one_matmul_per_bank(n):
    lhsT, rhs = _f32(128, 96), _f32(128, n)
    out = matmul_per_bank(lhsT, rhs)
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_bug_matmul_result_crossing_a_bank_rejected():
    @nki.jit
    def crossing(lhsT, rhs):
        a, b = to_sbuf(lhsT), to_sbuf(rhs)
        acc = nl.ndarray((64, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc[:, 256:768], stationary=a, moving=b)  # bytes 1024..3071: banks 0 and 1
        return lhsT

    with target.use("gen3"), pytest.raises(NKIError) as ei:  # (the rule of NeuronCore-v2/v3: the current API's default target is v4)
        crossing(_f32(128, 64), _f32(128, 512))
    assert ei.value.rule == "PSUM bank" and "bank 0 into bank 1" in str(ei.value) and HERE in ei.value.where


def test_bug_psum_tensor_larger_than_psum_rejected():
    @nki.jit
    def too_big(x):
        nl.ndarray((128, 4097), dtype=nl.float32, buffer=nl.psum)  # 16388 B > 8 banks x 2 KiB
        return x

    with pytest.raises(NKIError) as ei:
        too_big(_f32(2, 2))
    assert ei.value.rule == "PSUM bank" and "16388 B" in str(ei.value) and "16384 B" in str(ei.value)


def test_bug_first_generation_psum_tile_still_one_bank():
    from nki_kernels.simulator import launch

    @launch.jit
    def gen1(x):
        nl1.zeros((128, 1024), dtype=nl1.float32, buffer=nl1.psum)
        return x

    with pytest.raises(NKIError) as ei:
        gen1(_f32(2, 2))
    assert ei.value.rule == "PSUM bank" and "2048 B bank" in str(ei.value)


# ---------------------------------------------------------------------------
# kernel arguments and optional operands
# ---------------------------------------------------------------------------
@nki.jit
def double_rows(x):
    """2 * x via an access pattern over the argument's flat storage (row-major)."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[F, P], [1, F]], offset=0))
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    return to_hbm(t)


def test_strided_host_array_is_addressed_row_major():
    base = _f32(48, 64)
    x = base.T  # a transposed view: not C-contiguous
    np.testing.assert_allclose(double_rows(x), 2.0 * x.astype(np.float64), rtol=1e-6)


def test_kernel_writes_reach_a_strided_argument():
    @nki.jit
    def fill_in_place(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=3.0)
        nisa.dma_copy(dst=x, src=t)
        return x

    base = np.zeros((16, 8), np.float32)
    x = base[:, ::2]  # every other column
    fill_in_place(x)
    assert (base[:, ::2] == 3.0).all() and (base[:, 1::2] == 0.0).all()


@nki.jit
def scaled(x, scale=None):
    """x * scale when a scale tile is given, else x (the optional-operand test nki-library writes)."""
    t = to_sbuf(x)
    s = None
    if scale is not None:
        s = to_sbuf(scale)
    if s != None:  # noqa: E711 - the idiom under test
        nisa.tensor_tensor(dst=t, data1=t, data2=s, op=nl.multiply)
    assert not (t == None)  # noqa: E711
    return to_hbm(t)


def test_tile_compared_with_none_is_identity():
    x, s = _f32(32, 16), _f32(32, 16)
    np.testing.assert_allclose(scaled(x, s), x.astype(np.float64) * s, rtol=1e-6)
    np.testing.assert_allclose(scaled(x), x, rtol=0)


# ---------------------------------------------------------------------------
# cpu_simulate: unwritten memory is sentinel-filled, reported as a warning
# ---------------------------------------------------------------------------
@nki.jit
def half_written(x):
    """Writes partitions 0..63 of a tile, copies all 128 through, returns only the written half."""
    t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:64, :], src=x)
    u = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t)
    out = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u[0:64, :])
    return out


def test_cpu_simulate_warns_on_unwritten_reads_and_nki_simulate_raises():
    x = _f32(64, 8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = cpu_simulate(half_written)[1](x=x)
    np.testing.assert_array_equal(out, x)
    assert any("[uninit]" in str(w.message) for w in seen)
    assert config.get("uninit") == "error"  # restored after the run
    with pytest.raises(NKIError) as ei:
        nki.simulate(half_written)(x)
    assert ei.value.rule == "uninit"


def test_cpu_simulate_garbage_still_poisons_results():
    @nki.jit
    def sums_garbage(x):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:64, :], src=x)
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = cpu_simulate(sums_garbage)[1](x=_f32(64, 8))
    assert np.isnan(out[64:]).all()


# ---------------------------------------------------------------------------
# packed MX tensors in the race checker
# ---------------------------------------------------------------------------
@nki.jit
def both_cores_store_packed(x):
    """Both logical cores store the same packed MX rows into one output (identical values: no race)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = to_sbuf(x)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_identical_packed_mx_stores_from_two_cores_are_not_a_race():
    from nki_kernels.simulator import dtypes as sdt

    vals = rng.choice([-2.0, -0.5, 0.0, 1.0, 3.0], size=(32, 16)).astype(np.float32)
    x = sdt.pack_x4(vals, sdt.float8_e4m3fn_x4)
    out = both_cores_store_packed[2](x)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(sdt.unpack_x4(out), vals)


def swap_halves(x):
    """A plain (undecorated) function, as nki-library's tests hand kernels to cpu_simulate: two
    logical cores swap their rows with nisa.sendrecv."""
    c = nl.program_id(0)
    P, F = x.shape
    mine = nl.ndarray((P // 2, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=x[nl.ds(c * (P // 2), P // 2), :])
    theirs = nl.ndarray((P // 2, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[nl.ds(c * (P // 2), P // 2), :], src=theirs)
    return out


def test_cpu_simulate_plain_function_bracket_is_logical_cores():
    x = _f32(8, 4)
    out = cpu_simulate(swap_halves)[2](x=x)
    np.testing.assert_array_equal(out, np.concatenate([x[4:], x[:4]]))
    np.testing.assert_array_equal(nki.simulate(nki.jit(swap_halves)[2])(x), out)


def test_broadcast_view_of_a_psum_tensor_is_not_an_allocation():
    """A PSUM vector broadcast along a new free axis (nki-library's layernorm) is larger than a bank
    as a view, but occupies no PSUM of its own."""

    @nki.jit
    def centre(x):
        P, F = x.shape
        t = to_sbuf(x)
        mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_reduce(dst=mean, data=t, op=nl.add, axis=1)
        wide = mean.expand_dim(2).broadcast(2, 600)  # (P, 1, 600) fp32: 2400 B per partition as a view
        d = nl.ndarray((P, 1, 600), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=d, src=wide)
        return to_hbm(d)

    x = _f32(16, 8)
    np.testing.assert_allclose(centre(x)[:, 0, :], np.repeat(x.astype(np.float64).sum(1, keepdims=True), 600, 1),
                               rtol=1e-5)


# ---------------------------------------------------------------------------
# An output written through access patterns, then read whole (nki-library's experimental dynamic
# elementwise add stores its tiles with result.ap(...) and ends with an "HBM fence",
# dma_copy(dst=result, src=result)): the read sees every store, whichever view made it.
# ---------------------------------------------------------------------------
def _ap_writes_then_whole_read(rows_written):
    @nki.jit
    def k(a):
        M, H = a.shape
        result = nl.ndarray((M, H), dtype=a.dtype, buffer=nl.shared_hbm)
        for m in range(rows_written // 128):
            t = nl.ndarray((128, H), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a.ap(pattern=[[H, 128], [1, H]], offset=m * 128 * H))
            nisa.dma_copy(dst=result.ap(pattern=[[H, 128], [1, H]], offset=m * 128 * H), src=t)
        nisa.dma_copy(dst=result, src=result)
        return result
    return k


def test_a_tensor_written_through_access_patterns_reads_back_whole():
    a = _f32(256, 64)
    np.testing.assert_array_equal(_ap_writes_then_whole_read(256)(a), a)


def test_a_whole_read_of_a_tensor_half_written_through_access_patterns_is_uninit():
    with pytest.raises(NKIError, match=r"\[uninit\] nl.load reads 8192 element\(s\) of out0 \(256, 64\)"):
        _ap_writes_then_whole_read(128)(_f32(256, 64))
