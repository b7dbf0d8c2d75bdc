"""SBUF / PSUM peaks of small kernels against hand-computed live sets.

The model (NKI Direct Allocation guide, issue 15): a tile is live from the instruction that writes
it (or its allocation) to the last instruction that reads it; a block of a block-dimension tensor
only between its own first write and last read ("the block dimension ... does not reflect the number
of physical tiles being allocated"); bytes are per partition. Each expected figure below is worked
out by hand in the comment next to it.
"""

import numpy as np
import pytest

from nki_kernels.simulator import config, profile
from nki_kernels.simulator import compiler as ncc
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.errors import NKIError
from nki_kernels.simulator.launch import jit
from nki_kernels.simulator.instructions import target

A = np.random.default_rng(1).standard_normal((8, 128, 512)).astype(np.float32)
KB = 1024
F32_TILE = 512 * 4  # a (128, 512) fp32 tile: 2 KiB per partition


def peaks(kernel, *args):
    rep = profile(kernel, *args)
    return rep.sbuf_peak, rep.psum_peak


@jit
def rebinding_in_a_loop(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.load(a[i])
        t = nl.exp(t)  # reads the load, writes a new tile: 2 live
        t = nl.multiply(t, 2.0)  # the same again; the load is dead
        nl.store(out[i], t)
    return out


def test_rebinding_in_a_loop():
    np.testing.assert_allclose(rebinding_in_a_loop(A), 2 * np.exp(A[:4].astype(np.float64)), rtol=1e-5)
    assert peaks(rebinding_in_a_loop, A) == (2 * F32_TILE, 0)


@jit
def kept_across_a_loop(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    first = nl.load(a[0])  # live until the last store
    for i in nl.affine_range(3):
        y = nl.exp(nl.load(a[i + 1]))  # the load and its exp, with `first`: 3 tiles
        nl.store(out[i], y)
    nl.store(out[3], first)
    return out


def test_tile_kept_across_a_loop():
    out = kept_across_a_loop(A)
    np.testing.assert_allclose(out[:3], np.exp(A[1:4].astype(np.float64)), rtol=1e-5)
    np.testing.assert_array_equal(out[3], A[0])
    assert peaks(kept_across_a_loop, A) == (3 * F32_TILE, 0)


@jit
def nested_loops_with_an_accumulator(a):
    out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)  # one per outer iteration
        for j in nl.affine_range(3):
            x = nl.load(a[3 * i + j])
            acc += x  # in place: acc and x, no third tile
        nl.store(out[i], acc)
    return out


def test_nested_loops_with_an_accumulator():
    ref = A[:6].astype(np.float64).reshape(2, 3, 128, 512).sum(axis=1)
    np.testing.assert_allclose(nested_loops_with_an_accumulator(A), ref, rtol=1e-5, atol=1e-5)
    assert peaks(nested_loops_with_an_accumulator, A) == (2 * F32_TILE, 0)


@jit
def two_block_dimensions(a):
    out = nl.ndarray((4, 128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((2, 2, nl.par_dim(128), 256), dtype=nl.float32, buffer=nl.sbuf)  # 4 KiB logically
    for i in nl.affine_range(2):
        for j in nl.affine_range(2):
            t[i, j] = nl.load(a[2 * i + j, :, 0:256])
        for j in nl.affine_range(2):  # row i's two 1 KiB blocks are live together, row i - 1's are dead
            nl.store(out[2 * i + j], t[i, j])
    return out


def test_two_block_dimensions():
    np.testing.assert_array_equal(two_block_dimensions(A), A[:4, :, :256])
    assert peaks(two_block_dimensions, A) == (2 * KB, 0)


@jit
def psum_blocks_one_at_a_time(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(a[0, :, 0:128])  # 512 B, live until the last matmul
    p = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)  # 8 KiB logically
    for i in nl.affine_range(4):
        m = nl.load(a[i + 1])  # 2 KiB, dead after the matmul
        p[i] = nisa.nc_matmul(s, m)  # one 2 KiB bank per block
        nl.store(out[i], nl.copy(p[i]))  # the copy (2 KiB) is made after m died: s + one tile
    return out


def test_psum_blocks_one_at_a_time():
    s = A[0, :, :128].astype(np.float64)
    np.testing.assert_allclose(psum_blocks_one_at_a_time(A), [s.T @ A[i + 1] for i in range(4)], rtol=1e-4, atol=1e-4)
    assert peaks(psum_blocks_one_at_a_time, A) == (512 + F32_TILE, F32_TILE)


@jit
def psum_double_buffer(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(a[0, :, 0:128])
    m = nl.load(a[1])
    p = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    p[0] = nisa.nc_matmul(s, m)
    p[1] = nisa.nc_matmul(m[:, 0:128], m)  # both banks hold results when the add reads them: 4 KiB
    nl.store(out, nl.add(p[0], p[1]))
    return out


def test_psum_two_banks_live_together():
    s, m = A[0, :, :128].astype(np.float64), A[1].astype(np.float64)
    np.testing.assert_allclose(psum_double_buffer(A), s.T @ m + m[:, :128].T @ m, rtol=1e-4, atol=1e-4)
    # SBUF: s (512 B) and m (2 KiB) until the second matmul; then m dies and the add's 2 KiB result
    assert peaks(psum_double_buffer, A) == (512 + F32_TILE, 2 * F32_TILE)


@jit
def fewer_partitions_same_bytes(a):
    out = nl.ndarray((32, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a[0, 0:32])  # 32 partitions x 2 KiB: 2 KiB per partition, like a full tile
    nl.store(out, nl.exp(x))
    return out


def test_bytes_are_per_partition():
    np.testing.assert_allclose(fewer_partitions_same_bytes(A), np.exp(A[0, :32].astype(np.float64)), rtol=1e-5)
    assert peaks(fewer_partitions_same_bytes, A) == (2 * F32_TILE, 0)


@jit
def mod_alloc_double_buffer(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    for i in nl.affine_range(4):
        t[i] = nl.load(a[i])
        nl.store(out[i], t[i])  # block i dead before block i + 2 reuses its bytes
    return out


def test_mod_alloc_blocks_on_shared_bytes():
    np.testing.assert_array_equal(mod_alloc_double_buffer(A), A[:4])
    assert peaks(mod_alloc_double_buffer, A) == (F32_TILE, 0)


# The Direct Allocation guide's "Lifetime Conflicts" example and its "Correct way".
@jit
def guide_lifetime_conflict(a):
    out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t1 = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32,
                    buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    for i in nl.affine_range(8):
        t1[i] = nl.load(a[i])
    # all eight logical tiles must be alive here, on two physical tiles
    for i in nl.affine_range(8):
        r[...] = nl.exp(t1[i])
        nl.store(out[i], r)
    return out


@jit
def guide_correct_way(a):
    out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    for i in nl.affine_range(4):
        t1 = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        for j in nl.affine_range(2):
            t1[j] = nl.load(a[2 * i + j])
            r[...] = nl.exp(t1[j])  # t1[j] is dead after this
            nl.store(out[2 * i + j], r)
    return out


def test_guide_lifetime_conflict_reported():
    with pytest.raises(NKIError) as e:
        guide_lifetime_conflict(A)
    msg = str(e.value)
    assert e.value.rule == "allocation conflict" and "block (0,)" in msg and "block (2,)" in msg


def test_guide_correct_way_runs_with_two_physical_tiles():
    np.testing.assert_allclose(guide_correct_way(A), np.exp(A.astype(np.float64)), rtol=1e-5)
    assert peaks(guide_correct_way, A) == (F32_TILE + F32_TILE, 0)  # r and one t1 block


def test_two_placed_tensors_overlapping_partly_conflict():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda idx, p, f: (0, 4096)))
        y = nl.ndarray((64, 256), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda idx, p, f: (64, 6144 - 4)))
        x[...] = nl.load(a[0])
        y[...] = nl.load(a[1, 0:64, 0:256])  # partitions 64..127, bytes 6140..7163: x's last 4 bytes
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda idx, p, f: (0, 16384)))
        r[...] = nl.copy(x)
        r[64:128, 0:256] = nl.add(r[64:128, 0:256], y)
        nl.store(out, r)
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "allocation conflict" and "bytes 4096..6143" in str(e.value) \
        and "bytes 6140..7163" in str(e.value)


def test_peaks_are_per_program_of_a_grid():
    """Every program of an SPMD grid has its own SBUF: the peak is one program's, whichever runs."""

    @jit
    def k(a):
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        x = nl.load(a[i])
        nl.store(out[i], nl.exp(x))
        return out

    with config.override(capacity="error"):
        np.testing.assert_allclose(k[4](A[:4]), np.exp(A[:4].astype(np.float64)), rtol=1e-5)
    rep = profile(k[4], A[:4])
    assert (rep.sbuf_peak, rep.psum_peak) == (2 * F32_TILE, 0)


def test_a_grid_program_other_than_the_first_that_overflows_is_rejected():
    """Vectorised launches run the first program alone with every check and batch the rest only
    where they do the same thing; a program that branches on its id runs alone and is checked."""

    @jit
    def k(a):
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        x = nl.load(a[i])
        if i == 2:  # only program 2 reads two 100 KiB tiles in one instruction
            t1 = nl.zeros((128, 100 * 256), dtype=nl.float32)
            t2 = nl.zeros((128, 100 * 256), dtype=nl.float32)
            nl.add(t1, t2)
        nl.store(out[i], x)
        return out

    assert config.vectorize
    with target.use("gen2"), pytest.raises(NKIError) as e:  # (two 100 KiB tiles: over trn1's 192 KiB)
        k[4](A[:4])
    assert e.value.rule == "SBUF capacity" and "program (2,)" in str(e.value)


def test_profile_script_plots_the_occupancy_of_any_kernel(tmp_path):
    """scripts/profile_kernel.py --kernel FILE:NAME profiles a kernel it did not know about."""
    import importlib.util
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "profile_kernel.py"
    spec = importlib.util.spec_from_file_location("profile_kernel_script", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reports = mod.main(["--kernel", f"{__file__}:rebinding_in_a_loop", "--arg", "4x128x512:float32",
                        "--out", str(tmp_path)])
    rep = reports["rebinding_in_a_loop"]
    assert rep.sbuf_peak == 2 * F32_TILE  # as test_rebinding_in_a_loop works out
    png = tmp_path / "rebinding_in_a_loop.memory.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="SHAPE"):
        mod.random_input("4 by 128", np.random.default_rng(0))
