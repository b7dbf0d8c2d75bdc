"""NeuronCore-v4 Scalar/Vector additions (activate2, exponential) and the GpSimd topk, against NumPy
references written from their reference pages."""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki
from tests.isa_helpers import to_hbm, to_sbuf
from nki_kernels.simulator.instructions import target

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(18)


_sb, _out = to_sbuf, to_hbm


@nki.jit
def activate2_kernel(x, col, op0, op1, reverse0=False, reduce_op=None, relu_param=0.0, act=None):
    t, c = _sb(x), _sb(col)
    d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activate2(dst=d, op=act or nl.exp, data=t, imm0=c, imm1=0.5, op0=op0, op1=op1, reverse0=reverse0,
                   relu_param=relu_param, reduce_op=reduce_op, reduce_res=r,
                   reduce_cmd=nisa.reduce_cmd.reset_reduce if reduce_op is not None else nisa.reduce_cmd.idle)
    return _out(d), _out(r)


def test_activate2_pairs_and_reduction():
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    col = RNG.standard_normal((8, 1)).astype(np.float32)
    x64, c64 = x.astype(np.float64), col.astype(np.float64)
    with target.use("gen4"):
        d, r = nki.simulate(activate2_kernel)(x, col, nl.multiply, nl.subtract, reduce_op=nl.maximum)
        np.testing.assert_allclose(d, np.exp(x64 * c64 - 0.5), rtol=1e-5)
        np.testing.assert_allclose(r, np.exp(x64 * c64 - 0.5).max(1, keepdims=True), rtol=1e-5)
        d, _ = nki.simulate(activate2_kernel)(x, col, nl.subtract, nl.bypass, reverse0=True)
        np.testing.assert_allclose(d, np.exp(c64 - x64), rtol=1e-5)
        d, _ = nki.simulate(activate2_kernel)(x, col, nl.bypass, nl.bypass, act=nl.relu, relu_param=0.1)
        np.testing.assert_allclose(d, np.where(x64 > 0, x64, 0.1 * x64), rtol=1e-6)


def test_activate2_rules():
    x = np.ones((4, 8), np.float32)
    col = np.ones((4, 1), np.float32)
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):
        nki.simulate(activate2_kernel)(x, col, nl.multiply, nl.add)
    with target.use("gen4"), pytest.raises(NKIError, match="supported pairs"):
        nki.simulate(activate2_kernel)(x, col, nl.add, nl.multiply)


@nki.jit
def exponential_kernel(x, mx, chain=False):
    t, m = _sb(x), _sb(mx)
    d = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.exponential(dst=d, src=t, max_value=m, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    if chain:
        nisa.exponential(dst=d, src=t, max_value=m, reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)
    return _out(d), _out(r)


def test_exponential_and_running_sum():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    mx = x.max(axis=1, keepdims=True)
    e = np.exp(x.astype(np.float64) - mx)
    with target.use("gen4"):
        d, r = nki.simulate(exponential_kernel)(x, mx)
        _, r2 = nki.simulate(exponential_kernel)(x, mx, chain=True)
    np.testing.assert_array_equal(d, e.astype(np.float32).astype(ml_dtypes.bfloat16))
    np.testing.assert_allclose(r, e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(r2, 2 * e.sum(1, keepdims=True), rtol=1e-5)


@nki.jit
def topk_kernel(x, n, k):
    t = _sb(x)
    v = nl.zeros((x.shape[0], k), dtype=nl.bfloat16, buffer=nl.sbuf)
    i = nl.zeros((x.shape[0], k), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.topk(v, i, t, n)
    return _out(v), _out(i)


def test_topk_snake_layout_per_16_partition_group():
    P, F, n, k = 32, 8, 100, 32
    x = RNG.permutation(P * F).astype(np.float32).reshape(P, F).astype(ml_dtypes.bfloat16)
    v, i = nki.simulate(topk_kernel)(x, n, k)
    for g in range(0, P, 16):
        snake = x[g:g + 16].astype(np.float64).T.reshape(-1)[:n]  # element e = p + 16 * c
        top = np.sort(np.argsort(-snake)[:k])
        got_idx = np.array([i[g + j % 16, j // 16] for j in range(k)])
        got_val = np.array([v[g + j % 16, j // 16] for j in range(k)], np.float64)
        np.testing.assert_array_equal(np.sort(got_idx), top)
        np.testing.assert_array_equal(got_val, snake[got_idx])
        assert np.all(np.diff(got_val) >= 0)  # ascending
    assert not np.any(v[:, k // 16:].astype(np.float32))  # columns past ceil(k/16) untouched


def test_topk_rules():
    x = np.zeros((16, 8), ml_dtypes.bfloat16)
    with pytest.raises(NKIError, match="multiple of 16"):
        nki.simulate(topk_kernel)(x, 100, 20)
    with pytest.raises(NKIError, match="bfloat16"):
        nki.simulate(topk_kernel)(np.zeros((16, 8), np.float32), 100, 16)


@nki.jit
def pe_transpose_kernel(x, ident, psum_dtype, transpose=True):
    t, eq = _sb(x), _sb(ident)
    res = nl.ndarray((x.shape[1], x.shape[0]), dtype=psum_dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=res, stationary=t, moving=eq, is_transpose=transpose)
    sb = nl.ndarray(res.shape, dtype=psum_dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sb, src=res)
    out = nl.ndarray(res.shape, dtype=psum_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=sb)
    return out


def test_pe_transpose_writes_its_input_dtype_on_trn2():
    # nc_matmul(is_transpose=True) is nc_transpose's Tensor-engine form: its dst has the data's dtype
    # on every NeuronCore version (bf16 PSUM on Trn2), bit-exact; a real bf16 matmul result still
    # needs NeuronCore-v4.
    x = RNG.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    eye = np.eye(128, dtype=ml_dtypes.bfloat16)
    with target.use("gen3"):
        got = pe_transpose_kernel(x, eye, nl.bfloat16)
        np.testing.assert_array_equal(got, x.T)
        with pytest.raises(NKIError, match="NeuronCore-v4"):
            pe_transpose_kernel(x, eye, nl.bfloat16, transpose=False)  # planted: a bf16 matmul result on Trn2
