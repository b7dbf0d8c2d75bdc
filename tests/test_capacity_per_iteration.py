"""Capacity is accounted per iteration of an affine loop, as the hardware runs it (issue 28).

A block-dimension tensor's blocks are live only while used ("The block dimension describes how
many (P, F) logical tiles this tensor has, but does not reflect the number of physical tiles being
allocated", nki.compiler.sbuf.alloc): a PSUM tensor of eight 2 KiB blocks fills the 16 KiB of a
partition's PSUM, and a loop writing one block per iteration needs one block's bytes at a time
beside it. The removed affine-loop batching accounted every batched iteration's tiles at one
instruction slot and rejected such kernels (the nki-samples attention tutorial v3-v8a and v11)."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl

RNG = np.random.default_rng(28)


@nki.jit
def scores_then_row_max(q, k):
    """``q.T @ k`` in eight 128x512 PSUM blocks (all of a partition's PSUM), then each row's max."""
    out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
    q_t, k_t = nl.load(q), nl.load(k)
    qk = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    for j in nl.affine_range(8):
        qk[j, :, :] = nisa.nc_matmul(stationary=q_t, moving=k_t[:, nl.ds(j * 512, 512)])
    row_max = nl.ndarray((nl.par_dim(128), 8), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(8):
        row_max[:, j] = nisa.tensor_reduce(op=nl.max, data=qk[j], axis=1)
    nl.store(out, row_max)
    return out


@nki.jit
def streaming_blocks(x):
    """Thirty-two 8 KiB SBUF blocks (256 KiB in all, more than a partition's SBUF), each written,
    scaled and stored within one iteration: one block is live at a time."""
    out = nl.ndarray((32, 128, 2048), nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((32, nl.par_dim(128), 2048), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(32):
        buf[i] = nl.load(x[i])
        nl.store(out[i], nl.multiply(buf[i], 2.0))
    return out


def test_a_psum_block_tensor_filling_the_psum_runs_and_matches_numpy():
    q = RNG.standard_normal((128, 128), dtype=np.float32)
    k = RNG.standard_normal((128, 4096), dtype=np.float32)
    want = (q.T.astype(np.float64) @ k).reshape(128, 8, 512).max(axis=2)
    np.testing.assert_allclose(scores_then_row_max(q, k), want, rtol=1e-4, atol=1e-4)


def test_an_sbuf_block_tensor_larger_than_the_sbuf_streams():
    x = RNG.standard_normal((32, 128, 2048), dtype=np.float32)
    np.testing.assert_array_equal(streaming_blocks(x), 2 * x)


def test_the_same_bytes_as_one_psum_tile_are_still_rejected():
    # the edge: without the block dimension, 16 KiB of PSUM is one tile, more than a tile may take
    @nki.jit
    def one_tile(q, k):
        out = nl.ndarray((128, 4096), nl.float32, buffer=nl.shared_hbm)
        qk = nl.ndarray((nl.par_dim(128), 4096), dtype=nl.float32, buffer=nl.psum)
        qk[...] = nl.matmul(nl.load(q), nl.load(k), transpose_x=True)
        nl.store(out, nl.copy(qk))
        return out

    with pytest.raises(NKIError, match=r"\[PSUM") as e:
        one_tile(RNG.standard_normal((128, 128), dtype=np.float32), RNG.standard_normal((128, 4096), dtype=np.float32))
    assert "(128, 4096)" in str(e.value)
