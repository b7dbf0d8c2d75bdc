"""The standalone `nki` front end: kernels with dst= ISA ops, checked against NumPy references."""

import importlib
import os
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

from nki_kernels import simulator
from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa
HERE = os.path.basename(__file__)
rng = np.random.default_rng(8)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------
@nki.jit
def matmul_basic(lhsT, rhs):
    """[K, M].T @ [K, N] in one nc_matmul (K=128, M=64, N=512)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def matmul_tiled_psum(lhsT, rhs, explicit=False):
    """Tiles M by 128, N by 512, K by 128; K partial products accumulate in one PSUM tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                if explicit:
                    nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=(k > 0))
                else:
                    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=res)
    return out


@nki.jit
def matmul_blocked_sbuf(lhsT, rhs):
    """Each K block's product overwrites PSUM; an SBUF fp32 tile accumulates them with tensor_tensor."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=rhs.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for k in nl.sequential_range(K // 128):
        a = nl.ndarray((128, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
        part = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=part, stationary=a, moving=b, accumulate=False)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=nl.add)
    res = nl.ndarray((M, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


@nki.jit
def softmax_rows(x):
    """Row softmax of a [128, F] input: max (tensor_reduce), exp(x - max) with a row-sum (activation),
    normalise (tensor_scalar)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True, keepdims=True)
    e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max, reduce_op=nl.add, reduce_res=sums,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    y = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=e, op0=nl.divide, operand0=sums)
    nisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def softmax_rows_sum_reduce(x):
    """The same softmax with the row sum from tensor_reduce and a reciprocal multiply."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    m = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=m, op=nl.maximum, data=t, axis=1)
    shifted = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=shifted, data=t, op0=nl.subtract, operand0=m)
    e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=e, op=nl.exp, data=shifted)
    s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=e, axis=[1])
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=r, data=s)
    y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=r)
    nisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def transpose_kernel(x):
    """[P, F] -> [F, P] through the Tensor engine (SBUF -> PSUM) and a copy to SBUF."""
    P, F = x.shape
    out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    tp = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=tp, data=t)
    ts = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ts, src=tp)
    nisa.dma_copy(dst=out, src=ts)
    return out


@nki.jit
def transpose_vector_blocks(x):
    """[32, 128] -> four 32x32 Vector-engine transposes written into views of one SBUF tile."""
    out = nl.ndarray((32, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((32, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((32, 128), dtype=x.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(4):
        nisa.nc_transpose(dst=r[:, j * 32:(j + 1) * 32], data=t[:, j * 32:(j + 1) * 32],
                          engine=nisa.engine.vector)
    nisa.dma_copy(dst=out, src=r)
    return out


# ---------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------
def test_basic_matmul_64x128x512():
    lhsT, rhs = _f32(128, 64), _f32(128, 512)
    out = matmul_basic(lhsT, rhs)
    assert isinstance(out, np.ndarray) and out.shape == (64, 512) and out.dtype == np.float32
    np.testing.assert_allclose(out, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("explicit", [False, True])
def test_tiled_matmul_accumulates_over_k_in_psum(explicit):
    lhsT, rhs = _f32(384, 256), _f32(384, 1024)
    out = matmul_tiled_psum(lhsT, rhs, explicit=explicit)
    np.testing.assert_allclose(out, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_blocked_matmul_accumulates_in_sbuf_bf16():
    lhsT = _f32(256, 128).astype(ml_dtypes.bfloat16)
    rhs = _f32(256, 512).astype(ml_dtypes.bfloat16)
    out = matmul_blocked_sbuf(lhsT, rhs)
    assert out.dtype == ml_dtypes.bfloat16
    ref = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("kernel", [softmax_rows, softmax_rows_sum_reduce])
def test_row_softmax(kernel):
    x = _f32(128, 512) * 3
    out = kernel(x)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_transpose_tensor_engine():
    x = _f32(128, 96)
    np.testing.assert_array_equal(transpose_kernel(x), x.T)


def test_transpose_vector_engine_into_views():
    x = _f32(32, 128)
    ref = np.concatenate([x[:, j * 32:(j + 1) * 32].T for j in range(4)], axis=1)
    np.testing.assert_array_equal(transpose_vector_blocks(x), ref)


def test_spmd_grid_and_program_id():
    @nki.jit
    def scale_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=1.0)
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t)
        return out

    x = _f32(384, 64)
    np.testing.assert_allclose(scale_rows[3](x), x * 2 + 1, rtol=1e-6)


def test_tensor_copy_and_dma_copy_cast_through_fp32():
    @nki.jit
    def casts(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        h = nl.ndarray(x.shape, dtype=nl.float16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=h, src=t)
        nisa.dma_copy(dst=out, src=h)  # fp16 -> bf16 in the DMA
        return out

    x = _f32(64, 32)
    ref = x.astype(np.float16).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(casts(x), ref)


def test_matmul_into_psum_views_and_iota_memset():
    @nki.jit
    def halves(lhsT, rhs):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # one bank, two column halves
        for k in nl.affine_range(2):
            a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
            for j in nl.affine_range(2):
                b = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, j * 256:(j + 1) * 256])
                # accumulate=None: each half's first matmul overwrites, the second accumulates
                nisa.nc_matmul(dst=acc[:, j * 256:(j + 1) * 256], stationary=a, moving=b)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    lhsT, rhs = _f32(256, 128), _f32(256, 512)
    np.testing.assert_allclose(halves(lhsT, rhs), lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)

    @nki.jit
    def fill():
        out = nl.ndarray((4, 6), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 2, 3), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[10, 2], [1, 3]], offset=5, channel_multiplier=100)
        z = nl.ndarray((4, 6), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=z, value=7)
        nisa.tensor_tensor(dst=z, data1=t, data2=z, op=nl.add)
        nisa.dma_copy(dst=out, src=z)
        return out

    ref = 5 + 100 * np.arange(4)[:, None] + (10 * np.arange(2)[:, None] + np.arange(3)[None, :]).reshape(-1) + 7
    np.testing.assert_array_equal(fill(), ref)


def test_activation_reduce_registers_accumulate_across_calls():
    @nki.jit
    def two_halves(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.square, data=t[:, 0:256], reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(dst=y, op=nl.square, data=t[:, 256:512], reduce_op=nl.add, reduce_res=s,
                        reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.dma_copy(dst=out, src=s)
        return out

    x = _f32(128, 512)
    np.testing.assert_allclose(two_halves(x)[:, 0], (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)


def test_full_psum_is_not_overcommitted_by_intermediates():
    @nki.jit
    def eight_banks(lhsT, rhs):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        banks = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(8)]
        a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        nisa.nc_matmul(dst=banks[7], stationary=a, moving=b)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=banks[7])
        nisa.dma_copy(dst=out, src=res)
        return out

    lhsT, rhs = _f32(128, 128), _f32(128, 512)
    np.testing.assert_allclose(eight_banks(lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=1e-4)


def test_first_generation_ops_mix_with_standalone_tiles():
    @nki.jit
    def mixed(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)  # experimental high-level ops remain in nki.language
        y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.copy, data=nl.exp(t), scale=1.0)
        nl.store(out, y)
        return out

    x = _f32(128, 64)
    np.testing.assert_allclose(mixed(x), np.exp(x), rtol=1e-6)


# ---------------------------------------------------------------------------
# planted bugs: rules of the dst= generation
# ---------------------------------------------------------------------------
def _raises(kernel, *args, rule, words):
    with pytest.raises(NKIError) as ei:
        kernel(*args)
    err = ei.value
    assert err.rule == rule, str(err)
    msg = str(err)
    for w in words:
        assert w in msg, f"{w!r} not in: {msg}"
    assert HERE in err.where, err.where  # the kernel's own file:line
    return err


def test_bug_dst_wrong_shape():
    @nki.jit
    def bad(x):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        half = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=half, src=t)
        return x

    _raises(bad, _f32(128, 512), rule="dst shape", words=["tensor_copy", "(128, 256)", "(128, 512)"])


def test_bug_matmul_dst_wrong_shape():
    @nki.jit
    def bad(lhsT, rhs):
        a = nl.ndarray(lhsT.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray(rhs.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # should be (64, 512)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
        return lhsT

    _raises(bad, _f32(128, 64), _f32(128, 512), rule="dst shape", words=["nc_matmul", "(128, 512)", "(64, 512)"])


def test_bug_matmul_dst_outside_psum():
    @nki.jit
    def bad(lhsT, rhs):
        a = nl.ndarray(lhsT.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray(rhs.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        acc = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
        return lhsT

    _raises(bad, _f32(128, 64), _f32(128, 512), rule="dst memory", words=["nc_matmul", "SBUF", "PSUM"])


def test_bug_matmul_accumulate_true_on_fresh_psum():
    @nki.jit
    def bad(lhsT, rhs):
        a = nl.ndarray(lhsT.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray(rhs.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        acc = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=True)
        return lhsT

    _raises(bad, _f32(128, 64), _f32(128, 512), rule="matmul accumulate", words=["accumulate=True", "never written"])


def test_bug_matmul_dst_dtype():
    @nki.jit
    def bad(lhsT, rhs):
        a = nl.ndarray(lhsT.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray(rhs.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        acc = nl.ndarray((64, 512), dtype=nl.float16, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
        return lhsT

    _raises(bad, _f32(128, 64), _f32(128, 512), rule="dst dtype", words=["float16", "float32"])


def test_bug_compute_dst_in_hbm():
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_tensor(dst=out, data1=t, data2=t, op=nl.add)  # compute engines cannot write HBM
        return out

    _raises(bad, _f32(128, 64), rule="dst memory", words=["tensor_tensor", "HBM", "dma_copy"])


def test_bug_dma_into_psum():
    @nki.jit
    def bad(x):
        p = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.dma_copy(dst=p, src=x)
        return x

    _raises(bad, _f32(128, 64), rule="dst memory", words=["dma_copy", "PSUM", "SBUF"])


def test_bug_dma_element_count():
    @nki.jit
    def bad(x):
        t = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        return x

    _raises(bad, _f32(128, 64), rule="dst shape", words=["dma_copy", "(128, 32)", "(128, 64)"])


def test_bug_transpose_dtype_and_engine_memory():
    @nki.jit
    def bad_dtype(x):
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tp = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_transpose(dst=tp, data=t)
        return x

    _raises(bad_dtype, _f32(128, 64), rule="dst dtype", words=["nc_transpose", "bfloat16", "float32"])

    @nki.jit
    def bad_engine(x):
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        tp = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=tp, data=t, engine=nisa.engine.tensor)
        return x

    _raises(bad_engine, _f32(128, 64), rule="operand memory", words=["Tensor engine", "PSUM"])


def test_bug_tensor_tensor_broadcast_is_tensor_scalars_job():
    @nki.jit
    def bad(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        col = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=col, value=1.0)
        nisa.tensor_tensor(dst=t, data1=t, data2=col, op=nl.multiply)
        return x

    _raises(bad, _f32(128, 64), rule="operand shapes", words=["(128, 64)", "(128, 1)", "tensor_scalar"])


def test_bug_tensor_reduce_non_trailing_axis():
    @nki.jit
    def bad(x):
        t = nl.ndarray((128, 4, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=1)
        return x

    _raises(bad, _f32(128, 64), rule="reduce axes", words=["axis=1", "last contiguous"])


def test_bug_iota_and_gpsimd_cannot_touch_psum():
    @nki.jit
    def bad_iota():
        p = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.iota(dst=p, pattern=[[1, 8]])

    _raises(bad_iota, rule="dst memory", words=["iota", "PSUM", "SBUF"])

    @nki.jit
    def bad_gpsimd(x):
        p = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.0)
        s = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=p, engine=nisa.engine.gpsimd)
        return x

    _raises(bad_gpsimd, _f32(128, 64), rule="operand memory", words=["GpSimd", "PSUM"])


def test_bug_first_generation_operand_rules_still_apply():
    @nki.jit
    def bad(lhsT, rhs):
        a = nl.ndarray(lhsT.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        acc = nl.ndarray((64, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
        return lhsT

    from nki_kernels.simulator.instructions import target

    with target.use("gen3"), pytest.raises(NKIError) as ei:  # (the rule of NeuronCore-v2/v3: the current API's default target is v4)
        bad(_f32(128, 64), _f32(128, 1024))
    assert ei.value.rule in ("PSUM bank", "matmul operands") and HERE in ei.value.where


# ---------------------------------------------------------------------------
# dispatch and install
# ---------------------------------------------------------------------------
def test_standalone_kernel_with_numpy_runs_the_simulator(monkeypatch):
    from nki_kernels.simulator import launch

    calls = []
    real = launch.simulate
    monkeypatch.setattr(launch, "simulate", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    assert isinstance(matmul_basic, launch.Kernel) and matmul_basic.options.get("lnc_brackets")  # standalone jit
    out = matmul_basic(_f32(128, 64), _f32(128, 512))
    assert isinstance(out, np.ndarray) and calls == [matmul_basic]
    out3 = nki.simulate(matmul_basic)(_f32(128, 64), _f32(128, 512))
    assert out3.shape == (64, 512)


def _clear(prefix):
    for name in list(sys.modules):
        if name == prefix or name.startswith(prefix + "."):
            del sys.modules[name]


def test_install_registers_standalone_modules_and_is_idempotent():
    assert simulator.install() is True
    assert simulator.install() is True
    import nki as top
    import nki.isa as isa_mod
    import nki.language as lang_mod
    import nki.typing as typing_mod

    assert top is simulator.standalone and isa_mod is nisa and lang_mod is nl and typing_mod is nki.typing
    import neuronxcc.nki as gen1

    assert gen1 is simulator.nki  # both generations side by side


def test_install_treats_placeholder_as_absent_and_keeps_a_genuine_package(tmp_path, monkeypatch):
    placeholder = tmp_path / "placeholder" / "nki"
    placeholder.mkdir(parents=True)
    (placeholder / "__init__.py").write_text('raise ImportError("WRONG PACKAGE: install nki from the Neuron repo")\n')
    genuine = tmp_path / "genuine" / "nki"
    genuine.mkdir(parents=True)
    (genuine / "__init__.py").write_text("def jit(f=None, **kw):\n    return f\nGENUINE = True\n")
    (genuine / "language.py").write_text("")
    (genuine / "isa.py").write_text("")
    saved = {k: v for k, v in sys.modules.items() if k == "nki" or k.startswith("nki.")}
    try:
        _clear("nki")
        monkeypatch.syspath_prepend(str(tmp_path / "placeholder"))
        importlib.invalidate_caches()
        assert simulator.install() is True
        assert sys.modules["nki"] is simulator.standalone

        _clear("nki")
        monkeypatch.syspath_prepend(str(tmp_path / "genuine"))
        importlib.invalidate_caches()
        simulator.install()
        import nki as top

        assert getattr(top, "GENUINE", False) and sys.modules["nki"] is not simulator.standalone
    finally:
        _clear("nki")
        sys.modules.update(saved)


def test_official_style_kernel_runs_through_install(tmp_path, monkeypatch):
    src = textwrap.dedent('''
        import nki
        import nki.isa as nisa
        import nki.language as nl


        @nki.jit
        def nki_tensor_add_kernel(a_input, b_input):
            """The getting-started add kernel, in the standalone style."""
            c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
            a_tile = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_tile, src=a_input)
            b_tile = nl.ndarray(b_input.shape, dtype=b_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=b_tile, src=b_input)
            c_tile = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
            nisa.dma_copy(dst=c_output, src=c_tile)
            return c_output
    ''')
    (tmp_path / "official_add_standalone.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    simulator.install()
    mod = importlib.import_module("official_add_standalone")
    a, b = _f32(128, 512), _f32(128, 512)
    np.testing.assert_allclose(mod.nki_tensor_add_kernel(a, b), a + b)


def test_blocked_sbuf_tiles_integer_views_and_reshape():
    @nki.jit
    def blocked(lhsT, rhs):
        K, M = lhsT.shape
        _, N = rhs.shape  # N = 2 x 512
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 2, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        rhs_t = nl.ndarray((128, K // 128, N), dtype=rhs.dtype, buffer=nl.sbuf)
        lhs_t = nl.ndarray((128, K // 128, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // 128):
            nisa.dma_copy(dst=rhs_t[0:128, k, 0:N], src=rhs[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(dst=lhs_t[0:128, k, 0:M], src=lhsT[k * 128:(k + 1) * 128, :])
        for j in nl.affine_range(2):
            part = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                nisa.nc_matmul(dst=part, stationary=lhs_t[0:128, k, 0:M], moving=rhs_t[0:128, k, j * 512:(j + 1) * 512])
            nisa.tensor_tensor(dst=acc[0:128, j, 0:512], data1=acc[0:128, j, 0:512], data2=part, op=nl.add)
        flat = acc.reshape((128, N))
        nisa.dma_copy(dst=out, src=flat[0:128, 0:N])
        return out

    lhsT, rhs = _f32(256, 128), _f32(256, 1024)
    np.testing.assert_allclose(blocked(lhsT, rhs), lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_bug_reshape_changes_partition_size():
    @nki.jit
    def bad(x):
        t = nl.ndarray((128, 4, 16), dtype=nl.float32, buffer=nl.sbuf)
        t.reshape((64, 128))
        return x

    _raises(bad, _f32(4, 4), rule="reshape", words=["(128, 4, 16)", "(64, 128)", "partition"])


def test_standalone_kernel_dispatches_jax_arrays_through_jax_ops():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    lhsT, rhs = _f32(128, 64), _f32(128, 512)
    ref = lhsT.T.astype(np.float64) @ rhs
    eager = matmul_basic(jnp.asarray(lhsT), jnp.asarray(rhs))
    jitted = jax.jit(lambda a, b: matmul_basic(a, b))(jnp.asarray(lhsT), jnp.asarray(rhs))
    assert isinstance(eager, jax.Array) and isinstance(jitted, jax.Array)
    np.testing.assert_allclose(np.asarray(eager), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(jitted), ref, rtol=1e-4, atol=1e-4)


def test_standalone_kernel_dispatches_torch_tensors_through_torch_ops():
    torch = pytest.importorskip("torch")
    x = _f32(128, 512)
    out = softmax_rows(torch.from_numpy(x))
    assert isinstance(out, torch.Tensor)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_bug_dma_from_unwritten_sbuf_tile_is_an_uninitialised_read():
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)  # nl.ndarray memory is uninitialised
        nisa.dma_copy(dst=out, src=t)
        return out

    _raises(bad, _f32(128, 4), rule="uninit", words=["sbuf tile (128, 4)", "nl.ndarray"])


def test_tensor_scalar_unary_and_integer_ops():
    @nki.jit
    def ops(x, n):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        out_i = nl.ndarray(n.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.abs, operand0=None, op1=nl.add, operand1=1.0)
        nisa.dma_copy(dst=out, src=t)
        i = nl.ndarray(n.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=n)
        nisa.tensor_tensor(dst=i, data1=i, data2=i, op=nl.multiply)  # int32 stays exact (native integer math)
        nisa.dma_copy(dst=out_i, src=i)
        return out, out_i

    x = _f32(128, 16)
    n = rng.integers(-40000, 40000, (128, 16)).astype(np.int32)
    a, b = ops(x, n)
    np.testing.assert_allclose(a, np.abs(x) + 1, rtol=1e-6)
    np.testing.assert_array_equal(b, n * n)


@nki.jit
def scaled_row_extrema(x, scale):
    """y = x * scale with each row's max (reduce_res) and negated min through tensor_scalar_reduce."""
    p, f = x.shape
    y = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    stats = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    st = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=out, data=t, op0=nl.multiply, operand0=scale, reduce_op=nl.maximum,
                              reduce_res=st[:, 0:1])
    nisa.tensor_scalar_reduce(dst=out, data=t, op0=nl.multiply, operand0=scale, reduce_op=nl.minimum,
                              reduce_res=st[:, 1:2], reduce_res_negate=True)
    nisa.dma_copy(dst=y, src=out)
    nisa.dma_copy(dst=stats, src=st)
    return y, stats


def test_tensor_scalar_reduce_max_and_negated_min():
    # All-negative rows: a max register reset to 0 instead of -inf would give 0.
    x = -np.abs(_f32(128, 96)) - 0.5
    y, stats = scaled_row_extrema(x, 2.0)
    np.testing.assert_allclose(y, x * 2.0, rtol=1e-6)
    np.testing.assert_allclose(stats[:, 0], (x * 2.0).max(1), rtol=1e-6)
    np.testing.assert_allclose(stats[:, 1], -(x * 2.0).min(1), rtol=1e-6)


@nki.jit
def partition_reduce(x, op):
    """``nisa.tensor_partition_reduce`` of ``x`` into one partition of x's dtype."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_partition_reduce(dst=r, op=op, data=t)
    nisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("op,ref", [(nl.bitwise_and, np.bitwise_and), (nl.bitwise_or, np.bitwise_or),
                                    (nl.add, np.add), (nl.maximum, np.maximum)])
def test_partition_reduce_of_int32_keeps_every_bit(op, ref):
    # Values above 2**24 have no exact fp32 form: a reduction computed in fp32 would round them.
    x = rng.integers(2**24, 2**31 - 1, size=(128, 16)).astype(np.int32)
    x[:, 0] = 2**31 - 1
    got = partition_reduce(x, op)
    expect = ref.reduce(x, axis=0, keepdims=True, dtype=np.int32)
    np.testing.assert_array_equal(got, expect)


def test_partition_reduce_average_is_the_mean_over_partitions():
    # nl.average: an op of nisa.tensor_partition_reduce ("add, average, max, bitwise_or, bitwise_and")
    x = _f32(128, 24)
    got = partition_reduce(x, nl.average)
    np.testing.assert_allclose(got, x.mean(axis=0, keepdims=True, dtype=np.float64), rtol=1e-5, atol=1e-6)
    assert "average" in nl.__all__


@nki.jit
def strided_load_reshaped(x):
    """A DMA reading every 4th row group of ``x`` [4 * 128, F] into a [128, F, 4] tile (a strided
    .ap source, as nki-samples' MX tutorial lays out its data), then the tile reshaped to [128, 4F]."""
    P, F = 128, x.shape[1]
    t = nl.ndarray((P, F, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[F, P], [1, F], [P * F, 4]], offset=0))
    flat = t.reshape((P, F * 4))
    out = nl.ndarray((P, F * 4), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=flat)
    return out


def test_a_tile_loaded_by_a_strided_dma_reshapes_like_its_memory():
    x = _f32(4 * 128, 16)
    got = strided_load_reshaped(x)
    # t[p, f, k] = x[k * 128 + p, f]; the reshape reads t's row-major memory
    expect = x.reshape(4, 128, 16).transpose(1, 2, 0).reshape(128, 64)
    np.testing.assert_array_equal(got, expect)


def test_the_official_target_variable_selects_the_neuroncore(monkeypatch):
    from nki_kernels.simulator.instructions import target

    monkeypatch.delenv("NKI_SIM_NC_VERSION", raising=False)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    assert target.get_nc_version() is target.nc_version.gen4
    monkeypatch.setenv("NKI_SIM_NC_VERSION", "gen2")  # the simulator's own variable wins
    assert target.get_nc_version() is target.nc_version.gen2
    monkeypatch.delenv("NKI_SIM_NC_VERSION")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(ValueError, match="NEURON_PLATFORM_TARGET_OVERRIDE='trn9'"):
        target.get_nc_version()
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE")
    assert target.get_nc_version() is target.nc_version.gen3


# ---------------------------------------------------------------------------
# dst= instructions in affine loops
# ---------------------------------------------------------------------------
@nki.jit
def k_loop(lhsT, rhs, start, read_inside):
    """``acc`` accumulates over the k loop (from iteration ``start + 1`` on; before that each matmul
    overwrites it); with ``read_inside`` every iteration also stores what ``acc`` holds then."""
    out = nl.ndarray((lhsT.shape[0] if read_inside else 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(lhsT.shape[0] // 128):
        a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=(k > start))
        if read_inside:
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[k * 128:(k + 1) * 128, :], src=res)
    if not read_inside:
        final = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=final, src=acc)
        nisa.dma_copy(dst=out[0:128, :], src=final)
    return out


@pytest.mark.parametrize("start, read_inside", [(0, False), (3, False), (0, True)],
                         ids=["accumulating after the first", "overwriting in early iterations",
                              "read inside the loop"])
def test_an_accumulation_group_across_an_affine_loop_with_accumulate_from_the_loop_index(start, read_inside):
    lhsT = rng.standard_normal((1024, 128), dtype=np.float32)
    rhs = rng.standard_normal((1024, 512), dtype=np.float32)
    got = k_loop(lhsT, rhs, start, read_inside)
    l64, r64 = lhsT.astype(np.float64), rhs.astype(np.float64)
    if read_inside:  # iteration k sees the products of iterations 0..k
        want = np.concatenate([l64[:(k + 1) * 128].T @ r64[:(k + 1) * 128] for k in range(8)])
    else:
        want = l64[start * 128:].T @ r64[start * 128:]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@nki.jit
def halves_then_k_loop(lhsT, rhs):
    """``acc`` written half by half (the left half twice, accumulating), then accumulated whole over
    the k loop: a PSUM tile every element of which holds a value by the time the loop starts."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT[0:128, :])
    nisa.dma_copy(dst=b, src=rhs[0:128, :])
    nisa.nc_matmul(dst=acc[:, 0:256], stationary=a, moving=b[:, 0:256])
    nisa.nc_matmul(dst=acc[:, 0:256], stationary=a, moving=b[:, 0:256])  # (accumulates: right half unwritten)
    nisa.nc_matmul(dst=acc[:, 256:512], stationary=a, moving=b[:, 256:512])
    for k in nl.affine_range(lhsT.shape[0] // 128 - 1):
        ak = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        bk = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ak, src=lhsT[(k + 1) * 128:(k + 2) * 128, :])
        nisa.dma_copy(dst=bk, src=rhs[(k + 1) * 128:(k + 2) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=ak, moving=bk)
    final = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=final, src=acc)
    nisa.dma_copy(dst=out, src=final)
    return out


def test_a_psum_tile_completed_by_view_writes_accumulates_over_a_loop():
    # Whether every element of acc holds a value is found (not yet: the right half) between the view
    # writes; the write completing it must count, so the loop's matmuls accumulate.
    lhsT = rng.standard_normal((1024, 128), dtype=np.float32)
    rhs = rng.standard_normal((1024, 512), dtype=np.float32)
    got = halves_then_k_loop(lhsT, rhs)
    l64, r64 = lhsT.astype(np.float64), rhs.astype(np.float64)
    want = l64.T @ r64
    want[:, :256] += l64[:128].T @ r64[:128, :256]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@nki.jit
def load_scale_store(x):
    """Each iteration DMAs rows of ``x`` into a fresh tile, doubles the tile in place, stores it."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out


@nki.jit
def load_then_overwrite_the_source(x):
    """A copy ``src`` of ``x`` in HBM; each iteration loads rows of ``src``, then overwrites those rows
    with zeros, then stores what it loaded: the values from before the overwrite."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        z = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[i * 128:(i + 1) * 128, :])
        nisa.memset(dst=z, value=0.0)
        nisa.dma_copy(dst=src[i * 128:(i + 1) * 128, :], src=z)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out, src


def test_fresh_tiles_loaded_in_a_loop_view_hbm_copy_on_write():
    # A DMA from HBM into a fresh tile views HBM instead of copying: a write into the tile must not
    # reach HBM, and a write into HBM must not reach the tile loaded before it.
    x = rng.standard_normal((1024, 256), dtype=np.float32)
    keep = x.copy()
    got = load_scale_store(x)
    np.testing.assert_array_equal(got, keep * 2.0)
    np.testing.assert_array_equal(x, keep)  # the input is untouched

    got, src = load_then_overwrite_the_source(x)
    np.testing.assert_array_equal(got, keep)
    np.testing.assert_array_equal(src, 0.0)


@nki.jit
def row_softmax_scaled(x, y, bias):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    f = x.shape[1]
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        c = nl.ndarray((128, f), dtype=x.dtype, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        bt = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=b, src=y[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=bt, src=bias)  # the same source in every iteration
        nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.multiply)
        nisa.activation(dst=a, op=nl.exp, data=c, bias=bt, scale=0.5)
        nisa.tensor_reduce(dst=s, op=nl.add, data=a, axis=1)
        nisa.tensor_scalar(dst=c, data=a, op0=nl.divide, operand0=s, op1=nl.add, operand1=1.0)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=c)
    return out


def test_elementwise_activation_and_reduction_instructions_in_a_loop():
    x, y = (rng.standard_normal((1024, 96), dtype=np.float32) for _ in range(2))
    bias = rng.standard_normal((128, 1), dtype=np.float32)
    got = row_softmax_scaled(x, y, bias)
    e = np.exp(x.astype(np.float64) * y * 0.5 + np.tile(bias, (8, 1)))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True) + 1, rtol=1e-5)


@nki.jit
def cast_copy_fill(x):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        h = nl.ndarray((128, x.shape[1]), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :])
        nisa.memset(dst=h, value=0.0)
        nisa.tensor_copy(dst=h[:, 0:32], src=a[:, 0:32])  # a view of the tile as dst
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=h)
    return out


def test_dtype_conversion_memset_and_a_view_as_dst_in_a_loop():
    x = rng.standard_normal((768, 64), dtype=np.float32)
    got = cast_copy_fill(x)
    want = np.zeros_like(x)
    want[:, :32] = x[:, :32]
    np.testing.assert_array_equal(got, want.astype(ml_dtypes.bfloat16))


@nki.jit
def transposed_reciprocals(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        pos = nl.ndarray((128, x.shape[1]), dtype=nl.int32, buffer=nl.sbuf)
        t = nl.ndarray((x.shape[1], 128), dtype=x.dtype, buffer=nl.psum)
        r = nl.ndarray((x.shape[1], 128), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :])
        nisa.iota(dst=pos, pattern=[[1, x.shape[1]]], offset=1, channel_multiplier=x.shape[1])
        nisa.tensor_tensor(dst=a, data1=a, data2=pos, op=nl.add)
        nisa.nc_transpose(dst=t, data=a)
        nisa.reciprocal(dst=r, data=t)
        nisa.dma_copy(dst=out[:, i * 128:(i + 1) * 128], src=r)
    return out


def test_iota_transpose_and_reciprocal_in_a_loop():
    x = rng.uniform(0.5, 1.0, (768, 64)).astype(np.float32)
    got = transposed_reciprocals(x)
    pos = np.tile(np.arange(128 * 64, dtype=np.float64).reshape(128, 64) + 1, (6, 1))
    np.testing.assert_allclose(got, 1.0 / (x + pos).T, rtol=1e-6)


@nki.jit
def transpose_3d(x):
    out = nl.ndarray((x.shape[0] // 128 * 64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, 2, 32), dtype=x.dtype, buffer=nl.sbuf)
        t = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.psum)
        r = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :, :])
        nisa.nc_transpose(dst=t, data=a)  # the free axes flattened
        nisa.tensor_copy(dst=r, src=t)
        nisa.dma_copy(dst=out[i * 64:(i + 1) * 64, :], src=r)
    return out


@nki.jit
def transposed_blend(x, y, w):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        xt = nl.ndarray((x.shape[1], 128), dtype=x.dtype, buffer=nl.sbuf)
        yt = nl.ndarray((x.shape[1], 128), dtype=x.dtype, buffer=nl.sbuf)
        wt = nl.ndarray((x.shape[1], 128), dtype=x.dtype, buffer=nl.sbuf)
        s = nl.ndarray((x.shape[1], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=xt, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_transpose(dst=yt, src=y[i * 128:(i + 1) * 128, :])
        nisa.dma_transpose(dst=wt, src=w)  # the same source in every iteration
        nisa.tensor_reduce(dst=s, op=nl.max, data=yt, axis=1)
        # yt = (s - xt) * wt, then xt = xt - (yt + 0.5): both operand orders of both operators
        nisa.scalar_tensor_tensor(dst=yt, data=xt, op0=nl.subtract, operand0=s, op1=nl.multiply, operand1=wt,
                                  reverse0=True)
        nisa.scalar_tensor_tensor(dst=xt, data=yt, op0=nl.add, operand0=0.5, op1=nl.subtract, operand1=xt,
                                  reverse1=True)
        nisa.dma_copy(dst=out[:, i * 128:(i + 1) * 128], src=xt)
    return out


def test_dma_transposes_and_scalar_tensor_tensor_in_a_loop():
    x, y = (rng.standard_normal((640, 32), dtype=np.float32) for _ in range(2))
    w = rng.standard_normal((128, 32), dtype=np.float32)
    got = transposed_blend(x, y, w)
    xt, yt, wt = x.T.astype(np.float64), y.T, np.tile(w.T, (1, 5))
    s = np.concatenate([np.broadcast_to(yt[:, i * 128:(i + 1) * 128].max(1, keepdims=True), (32, 128))
                        for i in range(5)], axis=1)
    np.testing.assert_allclose(got, xt - ((s - xt) * wt + 0.5), rtol=1e-5, atol=1e-5)


@nki.jit
def tile_rows(row, n):
    out = nl.ndarray((n * 128, row.shape[1]), dtype=row.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=row)  # HBM to HBM, the same source each time
    return out


def test_a_dma_of_one_source_into_every_iteration_s_region():
    row = rng.standard_normal((128, 40), dtype=np.float32)
    got = tile_rows(row, 7)
    np.testing.assert_array_equal(got, np.tile(row, (7, 1)))


@nki.jit
def psum_halves(lhsT, rhs):
    out = nl.ndarray((lhsT.shape[1], 256), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(lhsT.shape[1] // 128):
        a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 256), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[:, m * 128:(m + 1) * 128])
        nisa.dma_copy(dst=b, src=rhs)
        acc = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc[:, 0:128], stationary=a, moving=b[:, 0:128])  # views of a PSUM tile
        nisa.nc_matmul(dst=acc[:, 128:256], stationary=a, moving=b[:, 128:256])
        nisa.nc_matmul(dst=acc[:, 128:256], stationary=a, moving=b[:, 128:256])  # accumulates
        res = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, :], src=res)
    return out


@nki.jit
def sums_in_registers(x):
    out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        e = nl.ndarray((128, x.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :])
        nisa.activation(dst=e, op=nl.exp, data=a, reduce_op=nl.add, reduce_res=s)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=s)
    return out


@nki.jit
def add_into_hbm(x, acc_in):
    out = nl.ndarray(acc_in.shape, dtype=acc_in.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc_in)
    for i in nl.affine_range(x.shape[0] // 128):
        a = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=a, dst_rmw_op=nl.add)
    return out


def _psum_halves_case():
    lhsT = rng.standard_normal((128, 640), dtype=np.float32)
    rhs = rng.standard_normal((128, 256), dtype=np.float32)
    want = lhsT.T.astype(np.float64) @ rhs
    want[:, 128:] *= 2
    return psum_halves, (lhsT, rhs), want


def _registers_case():
    x = rng.standard_normal((640, 48), dtype=np.float32)
    return sums_in_registers, (x,), np.exp(x.astype(np.float64)).sum(1, keepdims=True)


def _rmw_case():
    x, base = (rng.standard_normal((640, 32), dtype=np.float32) for _ in range(2))
    return add_into_hbm, (x, base), base.astype(np.float64) + x


def _transpose_3d_case():
    x = rng.standard_normal((640, 2, 32), dtype=np.float32)
    return transpose_3d, (x,), np.concatenate([x[i * 128:(i + 1) * 128].reshape(128, 64).T for i in range(5)])


@pytest.mark.parametrize("case", [_psum_halves_case, _registers_case, _rmw_case, _transpose_3d_case],
                         ids=["matmuls into views of a PSUM tile", "accumulation registers", "dst_rmw_op",
                              "transpose of a three-axis tile"])
def test_more_instructions_in_a_loop(case):
    kernel, args, want = case()
    got = kernel(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@nki.jit
def reads_past_the_end(x):
    out = nl.ndarray((x.shape[0], 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(6):
        a = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, 0:64])
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=a)
    return out


def test_bug_dma_out_of_bounds_in_a_late_iteration():
    x = rng.standard_normal((5 * 128, 64), dtype=np.float32)  # iteration 5 reads past the end
    with pytest.raises(NKIError, match="out of bounds|outside"):
        reads_past_the_end(x)
