"""On-chip memory model: live ranges (hand-computed peaks), capacity rejections, direct allocation
(aliasing through mod_alloc, conflicts, the all-or-nothing rule) and the NaN fill."""

import numpy as np
import pytest

from nki_kernels.simulator import config, profile
from nki_kernels.simulator import compiler as ncc
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.errors import NKIError
from nki_kernels.simulator.launch import jit

A = np.arange(4 * 128 * 512, dtype=np.float32).reshape(4, 128, 512) / 1e5
KB = 1024


def peaks(kernel, *args):
    rep = profile(kernel, *args)
    return rep.sbuf_peak, rep.psum_peak


# ----------------------------------------------------------------------------- live ranges
@jit
def rebinding(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[0])
    for _ in range(4):
        t = nl.exp(t)  # each new tile is live with the one it reads, never more
    nl.store(out, t)
    return out


@jit
def held_in_list(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    keep = [nl.load(a[i]) for i in range(4)]  # loads referenced by the list but each read once below
    acc = nl.add(keep[0], keep[1])
    acc = nl.add(acc, keep[2])
    acc = nl.add(acc, keep[3])
    nl.store(out, acc)
    return out


@jit
def blocks(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        t[i] = nl.load(a[i])
        nl.store(out[i], t[i])  # block i is dead after this store
    return out


@jit
def psum_accumulate(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    s = nl.load(a[0, :, 0:128])
    for k in nl.affine_range(2):
        m = nl.load(a[k])
        acc += nisa.nc_matmul(s, m)  # accumulates in place: no second PSUM tile
    nl.store(out, nl.copy(acc))
    return out


def test_rebinding_keeps_two_tiles_live():
    assert peaks(rebinding, A) == (2 * 2 * KB, 0)


def test_tiles_held_in_a_list_die_at_last_use():
    # keep[0..3] (2 KiB each) are all loaded first, so 4 are live; the first add reads two and
    # produces a third while the other two wait: 5 tiles.
    assert peaks(held_in_list, A) == (5 * 2 * KB, 0)


def test_a_block_lives_from_its_first_write_to_its_last_read():
    out = blocks(A)
    np.testing.assert_array_equal(out, A)
    assert peaks(blocks, A) == (2 * KB, 0)


def test_matmul_accumulates_into_one_psum_tile():
    s, p = peaks(psum_accumulate, A)
    assert p == 2 * KB
    np.testing.assert_allclose(profile(psum_accumulate, A).outputs,
                               sum(A[0, :, :128].astype(np.float64).T @ A[k] for k in range(2)), rtol=1e-5)


# ----------------------------------------------------------------------------- capacity
def test_single_200kib_tile_rejected():
    @jit
    def k(a):
        nl.ndarray((128, 200 * 256), dtype=nl.float32, buffer=nl.sbuf)
        return a

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "SBUF capacity" and "(128, 51200)" in str(e.value) and "204800" in str(e.value)


def test_two_100kib_tiles_read_by_one_instruction_rejected():
    @jit
    def k(a):
        t1 = nl.zeros((128, 100 * 256), dtype=nl.float32)
        t2 = nl.zeros((128, 100 * 256), dtype=nl.float32)
        nl.add(t1, t2)
        return a

    with pytest.raises(NKIError) as e:
        k(A)
    msg = str(e.value)
    assert e.value.rule == "SBUF capacity" and "204800" in msg and "196608" in msg
    assert msg.count("(128, 25600)") >= 2 and "test_sim_memory.py" in msg  # the tiles and their lines

    @jit
    def ok(a):  # the same two tiles used one at a time fit (the allocator may spill either)
        t1 = nl.zeros((128, 100 * 256), dtype=nl.float32)
        t2 = nl.zeros((128, 100 * 256), dtype=nl.float32)
        nl.exp(t1)
        nl.exp(t2)
        return a

    ok(A)


# ----------------------------------------------------------------------------- direct allocation
def test_mod_alloc_addresses_follow_the_documented_formula():
    func = ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)).func
    assert [func((i,), 128, 1024) for i in range(4)] == [(0, 1024), (0, 2048), (0, 1024), (0, 2048)]
    pfunc = ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(3,)).func
    assert [pfunc((i,), 128, 2048)[0] for i in range(4)] == [2, 3, 4, 2]


@jit
def mod_alloc_alias(a):
    """Block i and i + 2 share storage: block 2's write replaces block 0's values."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    t[0] = nl.load(a[0])
    nl.store(out, t[0])  # block 0 dead here
    t[2] = nl.load(a[2])
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
    r[...] = nl.copy(t[0])  # reads the shared bytes: block 2's values, as on hardware
    nl.store(out, r)
    return out


def test_mod_alloc_aliases_block_i_and_i_plus_n():
    with config.override(uninit="off", capacity="off"):
        np.testing.assert_array_equal(mod_alloc_alias(A), A[2])


def test_conflicting_placements_reported():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t0 = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t1 = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        t0[...] = nl.load(a[0])
        t1[...] = nl.load(a[1])  # overlaps bytes 1024..2047 of t0, which is still live
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        r[...] = nl.add(t0, t1)
        nl.store(out, r)
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "allocation conflict" and "bytes 0..2047" in str(e.value) and "bytes 1024..3071" in str(e.value)

    @jit
    def ok(a):  # the same bytes, one after the other
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t0 = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t0[...] = nl.load(a[0])
        nl.store(out, t0)
        t1 = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        t1[...] = nl.load(a[1])
        nl.store(out, t1)
        return out

    np.testing.assert_array_equal(ok(A), A[1])


def test_mixing_placed_and_automatic_sbuf_rejected():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(a[0])
        nl.store(out, nl.exp(t))  # nl.exp's result is a new, automatically allocated tile
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "allocation mixing" and "SBUF" in str(e.value)

    @jit
    def forced(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(a[0])
        nl.store(out, nl.exp(t))
        return out

    ncc.force_auto_alloc(forced)  # documented: every direct allocation is ignored
    np.testing.assert_allclose(forced(A), np.exp(A[0]), rtol=1e-6)


def test_psum_bank_out_of_range_rejected():
    @jit
    def k(a):
        nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=8))
        return a

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "placement" and "bank 8" in str(e.value)


# ----------------------------------------------------------------------------- NaN fill
def test_nan_fill_makes_an_uninitialised_read_visible():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[:, 0:256] = nl.load(a[0, :, 0:256])  # the right half is never written
        nl.store(out, nl.add(t, 1.0))
        return out

    with config.override(uninit="off"):
        out = k(A)
    np.testing.assert_array_equal(out[:, :256], A[0, :, :256] + 1.0)
    assert np.isnan(out[:, 256:]).all()
