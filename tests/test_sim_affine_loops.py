"""First-generation kernels built around ``nl.affine_range`` loops, against NumPy.

Element-wise and matmul loops, tiles made before a loop and read, assigned region by region or
accumulated into by its iterations, Python in loop bodies (branches on the loop index or on static
options, helpers, lists, a name read after the loop), and the diagnostics of a late iteration (an
out-of-bounds access, a loop-carried read, a race between programs).
"""

import dataclasses

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl

rng = np.random.default_rng(11)


# --- loops over tiles ----------------------------------------------------------------------------
@nki.jit
def exp_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.exp(t) * 2.0 + t)
    return out


def test_an_elementwise_loop():
    x = rng.standard_normal((1024, 96), dtype=np.float32)
    got = exp_rows(x)
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)) * 2 + x, rtol=1e-5, atol=1e-6)


@nki.jit
def tiled_matmul(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 256):
            acc = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b = nl.load(rhs[k * 128:(k + 1) * 128, n * 256:(n + 1) * 256])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * 128:(m + 1) * 128, n * 256:(n + 1) * 256], value=nl.copy(acc))
    return out


def test_a_tiled_matmul_accumulating_over_k_in_psum():
    lhsT = rng.standard_normal((384, 512), dtype=np.float32)
    rhs = rng.standard_normal((384, 768), dtype=np.float32)
    got = tiled_matmul(lhsT, rhs)
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-4)


@nki.jit
def hoisted_blocks(lhsT, rhs):
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT = K // 128
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        a = nl.ndarray((KT, nl.par_dim(128), 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            a[k] = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
        b = nl.ndarray((KT, nl.par_dim(128), N), dtype=rhs.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            b[k] = nl.load(rhs[k * 128:(k + 1) * 128, :])
        acc = nl.zeros((128, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(KT):
            acc += nisa.nc_matmul(a[k], b[k])
        row = nl.sum(acc, axis=1, keepdims=True)
        nl.store(out[m * 128:(m + 1) * 128, :], value=acc - row)
    return out


def test_block_tiles_made_in_the_body_and_a_reduction():
    lhsT = rng.standard_normal((256, 640), dtype=np.float32)
    rhs = rng.standard_normal((256, 128), dtype=np.float32)
    got = hoisted_blocks(lhsT, rhs)
    p = lhsT.T.astype(np.float64) @ rhs
    np.testing.assert_allclose(got, p - p.sum(axis=1, keepdims=True), rtol=1e-3, atol=1e-3)


@nki.jit
def strided_stores(x):
    # iteration i writes rows 2i*64 .. and (2i+1)*64 ..: each store is strided through the output
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        for h in nl.affine_range(2):
            t = nl.load(x[(2 * i + h) * 64:(2 * i + h + 1) * 64, :])
            nl.store(out[(2 * i + h) * 64:(2 * i + h + 1) * 64, :], value=t + 1.0)
    return out


def test_stores_strided_through_the_output():
    x = rng.standard_normal((768, 64), dtype=np.float32)
    got = strided_stores(x)
    np.testing.assert_array_equal(got, x + np.float32(1))


@nki.jit
def ragged_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    for i in nl.affine_range((x.shape[0] + 127) // 128):
        rows = i * 128 + i_p
        t = nl.load(x[rows, i_f], mask=(rows < x.shape[0]))
        nl.store(out[rows, i_f], value=nl.sqrt(nl.abs(t)), mask=(rows < x.shape[0]))
    return out


def test_a_ragged_last_tile_cut_by_a_mask():
    x = rng.standard_normal((6 * 128 + 50, 40), dtype=np.float32)
    got = ragged_rows(x)  # (iteration 6: rows 768..817 of 818)
    np.testing.assert_allclose(got, np.sqrt(np.abs(x)), rtol=1e-6)


@nki.jit
def weights_loaded_before_the_loop(w, x):
    out = nl.ndarray((x.shape[0], w.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    wt = nl.load(w)  # [K, N], read by every iteration
    bias = nl.load(x[0:128, 0:1])
    for i in nl.affine_range(x.shape[0] // 128):
        xt = nl.load(x[i * 128:(i + 1) * 128, :])  # [128, K]
        p = nisa.nc_matmul(nisa.nc_transpose(xt), wt)
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.copy(p) + bias)
    return out


def test_tiles_made_before_the_loop_are_read_by_every_iteration():
    w = rng.standard_normal((64, 96), dtype=np.float32)
    x = rng.standard_normal((640, 64), dtype=np.float32)
    got = weights_loaded_before_the_loop(w, x)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w + np.tile(x[:128, :1], (5, 1)), rtol=1e-4, atol=1e-4)


@nki.jit
def write_through_a_view_of_an_outer_tile(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        top = acc[0:64, :]
        top[...] = nl.load(x[i * 128:i * 128 + 64, :])
    nl.store(out, value=acc)
    return out


def test_a_write_through_a_view_reaches_the_tile_made_before_the_loop():
    x = rng.standard_normal((512, 48), dtype=np.float32)
    got = write_through_a_view_of_an_outer_tile(x)
    np.testing.assert_array_equal(got[:64], x[384:448])  # the last iteration's rows, as Python runs it
    np.testing.assert_array_equal(got[64:], 0)


@nki.jit
def names_reused_by_later_loops(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 256):
        t = nl.load(x[i * 256:i * 256 + 128, :])
        nl.store(out[i * 256:i * 256 + 128, :], value=t * 2.0)
    for i in nl.affine_range(x.shape[0] // 256):  # the same names, bound again before any read
        t = nl.load(x[i * 256 + 128:(i + 1) * 256, :])
        nl.store(out[i * 256 + 128:(i + 1) * 256, :], value=t - 1.0)
    return out


@nki.jit
def name_read_after_a_later_loop(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    last = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    for j in nl.affine_range(0):  # never runs: t is still the first loop's last tile
        t = nl.load(x[0:128, :])
    nl.store(last, value=t)
    return out, last


def test_names_bound_again_by_later_loops():
    x = rng.standard_normal((1024, 32), dtype=np.float32)
    got = names_reused_by_later_loops(x)
    expected = x.reshape(4, 2, 128, 32) * np.array([2, 1], np.float32)[:, None, None] - np.array([0, 1], np.float32)[:, None, None]
    np.testing.assert_array_equal(got, expected.reshape(x.shape))


def test_a_name_read_after_the_loop_holds_its_last_iteration_s_value_past_a_loop_that_binds_it():
    x = rng.standard_normal((512, 32), dtype=np.float32)
    out, last = name_read_after_a_later_loop(x)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(last, x[384:])


# --- assignments into tiles made before the loop ---------------------------------------------------
@nki.jit
def hoisted_into_an_outer_buffer(v, q):
    n, d = v.shape[0] // 128, v.shape[1]
    out = nl.ndarray((128, n * d), dtype=nl.float32, buffer=nl.shared_hbm)
    trans = nl.ndarray((nl.par_dim(128), n, d), dtype=v.dtype)  # written tile by tile below
    ip, jf = nl.arange(128)[:, None], nl.arange(d)[None, :]
    for i in nl.affine_range(n):
        trans[ip, i, jf] = nl.load(v[i * 128 + ip, jf])
    blocks = nl.ndarray((n, nl.par_dim(128), d), dtype=v.dtype)  # a block-dimension tile
    for i in nl.affine_range(n):
        blocks[i] = nl.exp(nl.load(q[i * 128:(i + 1) * 128, :]))
    sums = nl.zeros((nl.par_dim(128), n, d), dtype=nl.float32)
    for i in nl.affine_range(n):
        sums[ip, i, jf] += trans[ip, i, jf] * blocks[i]
    for i in nl.affine_range(n):
        nl.store(out[:, i * d:(i + 1) * d], value=sums[ip, i, jf])
    return out


def test_loads_hoisted_into_tiles_made_before_the_loop_stay_defined():
    v = rng.standard_normal((768, 32), dtype=np.float32)
    q = rng.standard_normal((768, 32), dtype=np.float32)
    got = hoisted_into_an_outer_buffer(v, q)  # (each loop's reads after it find every tile written)
    want = (v.astype(np.float64) * np.exp(q.astype(np.float64))).reshape(6, 128, 32).transpose(1, 0, 2).reshape(128, -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@nki.jit
def matmul_groups_into_an_outer_psum(lhsT, rhs):
    n = rhs.shape[1] // 128
    out = nl.ndarray((128, rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(lhsT)
    ps = nl.ndarray((n, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(n):
        ps[j] += nisa.nc_matmul(a, nl.load(rhs[:, j * 128:(j + 1) * 128]))  # starts each group
    for j in nl.affine_range(n):
        nl.store(out[:, j * 128:(j + 1) * 128], value=nl.copy(ps[j]))
    return out


def test_accumulation_groups_starting_in_a_psum_tile_made_before_the_loop():
    lhsT = rng.standard_normal((64, 128), dtype=np.float32)
    rhs = rng.standard_normal((64, 512), dtype=np.float32)
    got = matmul_groups_into_an_outer_psum(lhsT, rhs)  # (each += onto never-written PSUM starts a group)
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-4)


@nki.jit
def same_region_every_iteration(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, x.shape[1]), dtype=x.dtype)
    for i in nl.affine_range(x.shape[0] // 128):
        buf[...] = nl.load(x[i * 128:(i + 1) * 128, :])
    nl.store(out, value=buf)
    return out


@nki.jit
def write_through_a_name_bound_from_an_outer_buffer(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.zeros((x.shape[0] // 128, nl.par_dim(128), x.shape[1]), dtype=x.dtype)
    for i in nl.affine_range(x.shape[0] // 128):
        buf[i] = nl.load(x[i * 128:(i + 1) * 128, :])
        row = buf[i]
        row[0:1, :] = 0.0  # writes buf's block i in the reference path
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=buf[i])
    return out


@nki.jit
def overlapping_column_windows(x):
    n = x.shape[1] // 16
    out = nl.ndarray((128, 8 * n + 8), dtype=x.dtype, buffer=nl.shared_hbm)
    wide = nl.zeros((128, 8 * n + 8), dtype=x.dtype)
    for i in nl.affine_range(n):
        wide[:, i * 8:i * 8 + 16] = nl.load(x[:, i * 16:(i + 1) * 16])  # overlaps the next iteration's window
    nl.store(out, value=wide)
    return out


def test_assignments_into_a_tile_made_before_the_loop_in_program_order():
    x = rng.standard_normal((512, 16), dtype=np.float32)
    got = same_region_every_iteration(x)
    np.testing.assert_array_equal(got, x[384:])
    got = write_through_a_name_bound_from_an_outer_buffer(x)
    want = x.copy()
    want[::128] = 0
    np.testing.assert_array_equal(got, want)
    y = rng.standard_normal((128, 96), dtype=np.float32)
    got = overlapping_column_windows(y)
    want = np.zeros((128, 56), np.float32)
    for i in range(6):
        want[:, i * 8:i * 8 + 16] = y[:, i * 16:(i + 1) * 16]
    np.testing.assert_array_equal(got, want)


@nki.jit
def reads_the_previous_iterations_tile(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.zeros((x.shape[0] // 128 + 1, nl.par_dim(128), x.shape[1]), dtype=x.dtype)
    for i in nl.affine_range(x.shape[0] // 128):
        buf[i + 1] = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=buf[i])  # iteration i-1 wrote it
    return out


def test_a_loop_carried_read_through_a_tile_made_before_the_loop_is_reported():
    x = rng.standard_normal((512, 16), dtype=np.float32)
    with pytest.raises(NKIError, match="loop_carried"):
        reads_the_previous_iterations_tile(x)


@nki.jit
def accumulate_products_across_iterations(lhsT, rhs):
    out = nl.ndarray((lhsT.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((lhsT.shape[1], rhs.shape[1]), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(lhsT.shape[0] // 128):
        acc += nisa.nc_matmul(nl.load(lhsT[k * 128:(k + 1) * 128, :]), nl.load(rhs[k * 128:(k + 1) * 128, :]))
    part = nl.zeros((lhsT.shape[1], rhs.shape[1]), nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(lhsT.shape[0] // 128):
        part[...] += nl.load_transpose2d(lhsT[k * 128:(k + 1) * 128, 0:rhs.shape[1]])
    nl.store(out, value=acc + part)
    return out


def test_accumulations_across_iterations():
    lhsT = rng.standard_normal((768, 128), dtype=np.float32)
    rhs = rng.standard_normal((768, 128), dtype=np.float32)
    got = accumulate_products_across_iterations(lhsT, rhs)
    part = lhsT.astype(np.float64).reshape(6, 128, 128).transpose(0, 2, 1).sum(0)
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs + part, rtol=1e-4, atol=1e-3)
    x = rng.standard_normal((512, 64), dtype=np.float32)
    got = accumulate_into_an_outer_tile(x)
    np.testing.assert_allclose(got, x[:128] + x[128:256] + x[256:384] + x[384:512], rtol=1e-5, atol=1e-5)


@nki.jit
def subtract_across_iterations(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        acc -= nl.load(x[i * 128:(i + 1) * 128, :])
    nl.store(out, value=acc)
    return out


@nki.jit
def count_iterations(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    copies = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n = 0
    for i in nl.affine_range(4):
        n += 1
        nl.store(copies[i * 128:(i + 1) * 128, :], value=nl.load(x[i * 128:(i + 1) * 128, :]))
    nl.store(out, value=nl.load(x[0:128, :]) * float(n))
    return out


@dataclasses.dataclass(frozen=True)
class Options:
    scale: float = 2.0
    shift: bool = True


@nki.jit
def static_options(x, square=False, options=Options()):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[nl.ds(i * 128, 128), :])
        if square:
            t = t * t
        elif options.shift:
            t = t + options.scale
        nl.store(out[nl.ds(i * 128, 128), :], value=t)
    return out


@pytest.mark.parametrize("square, options, expected", [
    (True, Options(), lambda x: x * x),
    (False, Options(), lambda x: x + np.float32(2)),
    (False, Options(3.0, False), lambda x: x),
])
def test_branches_on_static_options_and_a_frozen_options_record(square, options, expected):
    x = rng.standard_normal((640, 32), dtype=np.float32)
    got = static_options(x, square=square, options=options)
    np.testing.assert_array_equal(got, expected(x))


# --- Python in loop bodies: as Python runs the loop -----------------------------------------------
@nki.jit
def branch_on_index(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        if i == 0:
            t = t * 3.0
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out


@nki.jit
def branch_on_a_tile(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    flag = nl.load(x[0:1, 0:1])
    for i in nl.affine_range(4):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        if flag is not None:
            t = t + 1.0
        nl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out


@nki.jit
def last_tile_used_after_the_loop(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
    nl.store(out, value=t)  # the last iteration's tile, as Python runs the loop
    return out


@nki.jit
def accumulate_into_an_outer_tile(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, x.shape[1]), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        acc += nl.load(x[i * 128:(i + 1) * 128, :])
    nl.store(out, value=acc)
    return out


def _scale(t):
    return t * 2.0


@nki.jit
def user_helper_in_the_body(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        nl.store(out[i * 128:(i + 1) * 128, :], value=_scale(nl.load(x[i * 128:(i + 1) * 128, :])))
    return out


@nki.jit
def list_from_outside(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    scales = [1.0, 2.0, 3.0, 4.0]
    for i in nl.affine_range(4):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(x[i * 128:(i + 1) * 128, :]) * scales[i])
    return out


@nki.jit
def store_then_dma_copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=t + 1.0)
        u = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=x[i * 128:(i + 1) * 128, :])
        nl.store(out2[i * 128:(i + 1) * 128, :], value=u)
    return out, out2


@pytest.mark.parametrize("kernel, expected", [
    (branch_on_index, lambda x: np.concatenate([x[:128] * 3, x[128:512]])),
    (last_tile_used_after_the_loop, lambda x: x[384:512]),
    (branch_on_a_tile, lambda x: x[:512] + np.float32(1)),
    (user_helper_in_the_body, lambda x: x[:512] * 2),
    (list_from_outside, lambda x: x[:512] * np.repeat([1, 2, 3, 4], 128)[:, None].astype(np.float32)),
    (subtract_across_iterations, lambda x: -x[:128] - x[128:256] - x[256:384] - x[384:512]),
    (count_iterations, lambda x: x[:128] * 4),
])
def test_python_in_loop_bodies_runs_as_written(kernel, expected):
    x = rng.standard_normal((512, 64), dtype=np.float32)
    got = kernel(x)
    np.testing.assert_allclose(got, expected(x), rtol=1e-6)


def test_a_standalone_dma_copy_after_a_store_in_the_same_body():
    x = rng.standard_normal((512, 64), dtype=np.float32)
    out, out2 = store_then_dma_copy(x)
    np.testing.assert_array_equal(out, x + np.float32(1))
    np.testing.assert_array_equal(out2, x)


# --- diagnostics of late iterations ----------------------------------------------------------------
@nki.jit
def past_the_end(x):
    out = nl.ndarray((640, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(5):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(x[i * 128:(i + 1) * 128, :]))
    return out


def test_an_out_of_bounds_access_in_a_late_iteration_is_reported():
    x = rng.standard_normal((600, 64), dtype=np.float32)  # iteration 4 reads rows 512..640 of 600
    with pytest.raises(NKIError, match="out-of-bounds"):
        past_the_end(x)


@nki.jit
def both_programs_write_every_row(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    scale = nl.program_id(0) + 1.0  # (programs storing identical values would be benign, no race)
    for i in nl.affine_range(x.shape[0] // 128):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(x[i * 128:(i + 1) * 128, :]) * scale)
    return out


def test_a_race_between_programs_through_loop_iterations_is_reported():
    x = rng.standard_normal((512, 64), dtype=np.float32)
    with pytest.raises(NKIError, match=r"\[race\]"):
        both_programs_write_every_row[2](x)


@nki.jit
def rows_on_each_core(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(0)
    half = x.shape[0] // 2
    for i in nl.affine_range(half // 128):
        rows = c * half + i * 128
        nl.store(out[rows:rows + 128, :], value=nl.load(x[rows:rows + 128, :]) * 2.0)
    return out


def test_loops_on_simulated_logical_cores():
    x = rng.standard_normal((1024, 32), dtype=np.float32)
    got = rows_on_each_core[nl.nc(2)](x)
    np.testing.assert_array_equal(got, x * np.float32(2))


def test_a_kernel_defined_inside_a_function_reads_its_closure():
    scale = 3.0

    @nki.jit
    def scaled(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(x.shape[0] // 128):
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(x[i * 128:(i + 1) * 128, :]) * scale)
        return out

    x = rng.standard_normal((640, 32), dtype=np.float32)
    got = scaled(x)
    np.testing.assert_array_equal(got, x * np.float32(3))
