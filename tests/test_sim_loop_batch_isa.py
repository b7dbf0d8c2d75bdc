"""Standalone ``dst=`` instructions in batched affine loops (instructions marked ``batched``).

Every kernel runs with batching on and off (``config.vectorize``): results must be bit-identical
and match NumPy, and the loops must batch where every instruction of the body has a batched form.
Cases without one (masked or accumulating writes, a write into a view of a PSUM tile, the
Scalar engine's accumulation registers, ``dst_rmw_op``) run one iteration at a time with the
same results, and errors are those of the reference path.
"""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError, config, loop_body
from nki_kernels.simulator import standalone as nki

from .test_sim_loop_batch import run
from .test_standalone import matmul_tiled_psum

nl, nisa = nki.language, nki.isa
rng = np.random.default_rng(23)


@pytest.fixture(autouse=True)
def _fresh_sites():
    # A loop site whose batch failed is not tried again for that trip count: cases sharing a kernel
    # must not see each other's failures.
    loop_body._sites.clear()


@pytest.mark.parametrize("explicit", [False, True])
def test_a_tiled_matmul_of_dst_instructions_batches_and_accumulates_the_same_bits(explicit):
    lhsT = rng.standard_normal((384, 512), dtype=np.float32)
    rhs = rng.standard_normal((384, 2048), dtype=np.float32)
    got, batched = run(matmul_tiled_psum, lhsT, rhs, explicit=explicit)
    # the reference m iterations batch their n loops (2 of 4 each), then m iterations 2 and 3 batch
    assert batched == 2 * (4 - 2) + (4 - 2)
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-4)


def test_a_matmul_accumulation_group_across_the_k_loop_batches_in_iteration_order():
    lhsT = rng.standard_normal((1024, 256), dtype=np.float32)
    rhs = rng.standard_normal((1024, 1024), dtype=np.float32)
    for explicit in (False, True):  # accumulate=None, and accumulate=(k > 0) from the loop index
        got, batched = run(matmul_tiled_psum, lhsT, rhs, explicit=explicit)
        assert batched == 2 * 2 * (8 - 2)  # every k loop: 8 iterations, 2 of them the reference
        np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-4)


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


@pytest.mark.parametrize("start, read_inside, batches", [(0, False, True), (3, False, False), (0, True, False)],
                         ids=["accumulating after the first", "overwriting in batched iterations",
                              "read inside the loop"])
def test_an_accumulation_group_batches_only_where_every_batched_iteration_accumulates_unread(start, read_inside,
                                                                                           batches):
    lhsT = rng.standard_normal((1024, 128), dtype=np.float32)
    rhs = rng.standard_normal((1024, 512), dtype=np.float32)
    got, batched = run(k_loop, lhsT, rhs, start, read_inside)
    assert batched == (6 if batches else 0)
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


def test_a_psum_tile_completed_by_view_writes_accumulates_in_a_batched_loop():
    # Whether every element of acc holds a value is found (not yet: the right half) between the view
    # writes; the write completing it must count, or the loop's accumulation group would not batch.
    lhsT = rng.standard_normal((1024, 128), dtype=np.float32)
    rhs = rng.standard_normal((1024, 512), dtype=np.float32)
    got, batched = run(halves_then_k_loop, lhsT, rhs)
    assert batched == 7 - 2
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


def test_a_batch_of_fresh_tiles_views_hbm_copy_on_write():
    # A DMA from HBM into a fresh tile in a batched loop views HBM instead of copying, as one
    # iteration's does: a write into the tile must not reach HBM, and a write into HBM must not
    # reach the tile loaded before it.
    x = rng.standard_normal((1024, 256), dtype=np.float32)
    keep = x.copy()
    got, batched = run(load_scale_store, x)
    assert batched == 8 - 2
    np.testing.assert_array_equal(got, keep * 2.0)
    np.testing.assert_array_equal(x, keep)  # the input is untouched

    (got, src), batched = run(load_then_overwrite_the_source, x)
    assert batched == 8 - 2
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


def test_elementwise_activation_and_reduction_instructions_batch():
    x, y = (rng.standard_normal((1024, 96), dtype=np.float32) for _ in range(2))
    bias = rng.standard_normal((128, 1), dtype=np.float32)
    got, batched = run(row_softmax_scaled, x, y, bias)
    assert batched == 8 - 2
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


def test_dtype_conversion_memset_and_a_view_as_dst_batch():
    x = rng.standard_normal((768, 64), dtype=np.float32)
    got, batched = run(cast_copy_fill, x)
    assert batched == 6 - 2
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


def test_iota_transpose_and_reciprocal_batch():
    x = rng.uniform(0.5, 1.0, (768, 64)).astype(np.float32)
    got, batched = run(transposed_reciprocals, x)
    assert batched == 6 - 2
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
        nisa.nc_transpose(dst=t, data=a)  # the free axes flattened: no batched form
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


def test_dma_transposes_and_scalar_tensor_tensor_batch():
    x, y = (rng.standard_normal((640, 32), dtype=np.float32) for _ in range(2))
    w = rng.standard_normal((128, 32), dtype=np.float32)
    got, batched = run(transposed_blend, x, y, w)
    assert batched == 5 - 2
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


def test_a_dma_of_one_source_into_every_iteration_s_region_batches():
    row = rng.standard_normal((128, 40), dtype=np.float32)
    got, batched = run(tile_rows, row, 7)
    assert batched == 7 - 2
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
def test_bodies_without_a_batched_form_run_per_iteration_with_the_same_bits(case):
    kernel, args, want = case()
    got, batched = run(kernel, *args)
    assert batched == 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@nki.jit
def reads_past_the_end(x):
    out = nl.ndarray((x.shape[0], 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(6):
        a = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[i * 128:(i + 1) * 128, 0:64])
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=a)
    return out


def test_an_out_of_bounds_access_in_a_late_iteration_is_the_same_error(monkeypatch):
    x = rng.standard_normal((5 * 128, 64), dtype=np.float32)  # iteration 5 reads past the end
    messages = []
    for on in (False, True):
        monkeypatch.setattr(config, "vectorize", on)
        with pytest.raises(NKIError, match="out of bounds|outside") as e:
            reads_past_the_end(x)
        messages.append(str(e.value))
    assert messages[0] == messages[1]
