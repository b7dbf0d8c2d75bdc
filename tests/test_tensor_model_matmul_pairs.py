"""``nisa.nc_matmul(perf_mode=double_row)`` on ``[K, 2, free]`` operand views: the FP8 double-row mode
packs two rows per partition, and the product contracts over the partitions and the pair (nki-library's
output_projection_tkg lays heads 2p and 2p+1 out as the pair) -- against NumPy float64."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.core import Tile, psum, sbuf

nl = nki.language
nisa = nki.isa


@pytest.mark.parametrize("k, m, n", [(128, 128, 512), (64, 96, 40), (1, 1, 1)])
def test_double_row_contracts_over_partitions_and_the_pair(k, m, n):
    rng = np.random.default_rng(k + m + n)
    st = rng.uniform(-2, 2, (k, 2, m)).astype(nl.float8_e4m3)
    mv = rng.uniform(-2, 2, (k, 2, n)).astype(nl.float8_e4m3)
    dst = Tile(np.zeros((m, n), np.float32), psum)
    nisa.nc_matmul(dst, Tile(st, sbuf), Tile(mv, sbuf), perf_mode=nisa.matmul_perf_mode.double_row)
    want = np.einsum("kjm,kjn->mn", st.astype(np.float64), mv.astype(np.float64))
    np.testing.assert_allclose(dst.data, want, rtol=1e-5, atol=1e-4)


def test_double_row_pairs_of_views_of_a_wider_tile():
    rng = np.random.default_rng(7)
    a = Tile(rng.uniform(-1, 1, (32, 2, 64)).astype(nl.float8_e4m3), sbuf)
    w = Tile(rng.uniform(-1, 1, (32, 2, 100)).astype(nl.float8_e4m3), sbuf)
    dst = Tile(np.zeros((16, 50), np.float32), psum)
    st, mv = a.slice(2, 16, 32), w.slice(2, 50, 100)
    nisa.nc_matmul(dst, st, mv, perf_mode=nisa.matmul_perf_mode.double_row)
    want = np.einsum("kjm,kjn->mn", a.data[:, :, 16:32].astype(np.float64), w.data[:, :, 50:].astype(np.float64))
    np.testing.assert_allclose(dst.data, want, rtol=1e-5, atol=1e-4)


def test_three_d_operands_without_double_row_are_their_flattened_matrices():
    # NKI 0.4.0: "nc_matmul with 3D+ operand shapes now copies all elements" -- without double_row a
    # [K, 2, 4] operand is the [K, 8] matrix of its free axes; a dst of another size is refused
    rng = np.random.default_rng(38)
    a = rng.uniform(-2, 2, (8, 2, 4)).astype(nl.float8_e4m3)
    dst = Tile(np.zeros((8, 8), np.float32), psum)
    nisa.nc_matmul(dst, Tile(a, sbuf), Tile(a, sbuf))
    f = a.reshape(8, 8).astype(np.float64)
    np.testing.assert_allclose(dst.data, f.T @ f, rtol=1e-5, atol=1e-4)
    st = Tile(np.zeros((8, 2, 4), nl.float8_e4m3), sbuf)
    with pytest.raises(NKIError, match="dst"):
        nisa.nc_matmul(Tile(np.zeros((4, 4), np.float32), psum), st, st)
    with pytest.raises(NKIError, match="FP8"):  # double row is the FP8 mode
        b = Tile(np.zeros((8, 2, 4), nl.bfloat16), sbuf)
        nisa.nc_matmul(Tile(np.zeros((4, 4), np.float32), psum), b, b, perf_mode=nisa.matmul_perf_mode.double_row)


@pytest.mark.parametrize("st_shape, mv_shape", [((128, 1, 128), (128, 512)), ((32, 64), (32, 1, 100)),
                                                ((16, 1, 8, 1), (16, 1, 1, 24))])
def test_size_one_free_axes_are_the_plain_matrix(st_shape, mv_shape):
    # nki-library moe_cte multiplies a (128, 1, n) upcast weight tile: a size-1 axis moves no element
    rng = np.random.default_rng(len(st_shape) + len(mv_shape))
    st = rng.uniform(-1, 1, st_shape).astype(nl.bfloat16)
    mv = rng.uniform(-1, 1, mv_shape).astype(nl.bfloat16)
    s2, m2 = st.reshape(st_shape[0], -1), mv.reshape(mv_shape[0], -1)
    dst = Tile(np.zeros((s2.shape[1], m2.shape[1]), np.float32), psum)
    nisa.nc_matmul(dst, Tile(st, sbuf), Tile(mv, sbuf))
    np.testing.assert_allclose(dst.data, s2.astype(np.float64).T @ m2.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_free_axis_of_two_without_double_row_next_to_a_size_one_axis_flattens():
    # [8, 1, 2, 4] without double_row: the size-1 axis dropped, then the [8, 8] matrix (NKI 0.4.0)
    rng = np.random.default_rng(60)
    st = rng.uniform(-1, 1, (8, 1, 2, 4)).astype(nl.bfloat16)
    mv = rng.uniform(-1, 1, (8, 4)).astype(nl.bfloat16)
    dst = Tile(np.zeros((8, 4), np.float32), psum)
    nisa.nc_matmul(dst, Tile(st, sbuf), Tile(mv, sbuf))
    np.testing.assert_allclose(dst.data, st.reshape(8, 8).astype(np.float64).T @ mv.astype(np.float64), rtol=1e-5,
                               atol=1e-4)
