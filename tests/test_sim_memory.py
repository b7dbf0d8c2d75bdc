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
from nki_kernels.simulator.instructions import target

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
def test_single_200kib_tile_rejected_on_trn1_only():
    """192 KiB per partition on NeuronCore-v2 (trn1), 224 KiB on v3 (trn2): the trn1 / trn2
    architecture guides."""
    @jit
    def k(a):
        nl.ndarray((128, 200 * 256), dtype=nl.float32, buffer=nl.sbuf)
        return a

    with target.use("gen2"), pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "SBUF capacity" and "(128, 51200)" in str(e.value) and "204800" in str(e.value)
    with target.use("gen3"):
        np.testing.assert_array_equal(k(A), A)


def test_two_100kib_tiles_read_by_one_instruction_rejected():
    @jit
    def k(a):
        t1 = nl.zeros((128, 100 * 256), dtype=nl.float32)
        t2 = nl.zeros((128, 100 * 256), dtype=nl.float32)
        nl.add(t1, t2)
        return a

    with target.use("gen2"), pytest.raises(NKIError) as e:  # (trn1's 192 KiB; trn2 has 224 KiB)
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


# ----------------------------------------------------------------------------- more live ranges
@jit
def loop_local(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.load(a[i])
        nl.store(out[i], nl.multiply(t, 2.0))  # t and the product: two tiles per iteration
    return out


@jit
def blocks_all_live(a):
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        t[i] = nl.load(a[i])
    for i in nl.affine_range(4):  # every block was written before any is read: all four live
        nl.store(out[i], t[i])
    return out


@jit
def psum_banks(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(a[0, :, 0:128])
    m = nl.load(a[1])
    p = [nisa.nc_matmul(s, m) for _ in range(3)]  # three 2 KiB PSUM results live together
    acc = nl.add(nl.add(p[0], p[1]), p[2])
    nl.store(out, acc)
    return out


@jit
def mixed_dtypes(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a[0])  # 2 KiB
    h = nl.copy(x, dtype=nl.bfloat16)  # 1 KiB, with x
    y = nl.copy(h, dtype=nl.float32)  # 2 KiB, with h (x is dead)
    nl.store(out, y)
    return out


def test_tile_allocated_in_a_loop_is_live_one_iteration():
    np.testing.assert_array_equal(loop_local(A), 2 * A)
    assert peaks(loop_local, A) == (2 * 2 * KB, 0)


def test_blocks_written_before_any_read_are_all_live():
    np.testing.assert_array_equal(blocks_all_live(A), A)
    assert peaks(blocks_all_live, A) == (4 * 2 * KB, 0)


def test_psum_results_live_together():
    s, p = peaks(psum_banks, A)
    # SBUF: the operands s, m (2.5 KiB) until the last matmul, then the two add results (4 KiB)
    assert p == 3 * 2 * KB and s == 2 * 2 * KB
    ref = 3 * (A[0, :, :128].astype(np.float64).T @ A[1])
    np.testing.assert_allclose(profile(psum_banks, A).outputs, ref, rtol=1e-5)


def test_peak_counts_bytes_of_each_dtype():
    assert peaks(mixed_dtypes, A) == (3 * KB, 0)


def test_occupancy_curve_picture_and_trace(tmp_path):
    import json

    rep = profile(blocks_all_live, A)
    (pid, curve, times), = rep.occupancy
    assert curve.shape[0] == 2 and curve[0].max() == 4 * 2 * KB and curve[1].max() == 0
    assert curve[0][0] == 2 * KB  # the first load's block
    png = rep.plot_memory(tmp_path / "m.png")
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    trace = json.load(open(rep.write_trace(tmp_path / "t.json")))
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters and max(e["args"]["SBUF"] for e in counters) == 4 * 2 * KB


# ----------------------------------------------------------------------------- placement, more
def test_standalone_address_aliases_tensors_on_the_same_bytes():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
        t[...] = nl.load(a[0])
        nl.store(out, t)
        u = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096 + 1024))
        v = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf, address=(0, 16384))
        v[...] = nl.copy(u)  # u starts 256 floats into t's bytes
        nl.store(out[:, 0:256], v)
        return out

    with config.override(uninit="off"):
        out = k(A)
    np.testing.assert_array_equal(out[:, 0:256], A[0, :, 256:512])


def test_standalone_address_placed_tensors_mix_with_compiler_placed_ones():
    # nki.compiler's all-or-nothing rule (sbuf.auto_alloc page) is about ncc alloc / mod_alloc;
    # standalone nl.ndarray(address=) tensors sit beside address-less ones (nki-library's MoE / MLP
    # token-generation kernels place their SBUF tensors and keep a plain PSUM bias tile).
    from nki_kernels.simulator.standalone import isa as nisa2
    from nki_kernels.simulator.standalone import language as nl2

    @jit
    def k(a, b):
        s = nl2.ndarray((128, 128), nl2.float32, buffer=nl2.sbuf, address=(0, 0))
        m = nl2.ndarray((128, 512), nl2.float32, buffer=nl2.sbuf, address=(0, 512))
        nisa2.dma_copy(dst=s, src=a)
        nisa2.dma_copy(dst=m, src=b)
        acc = nl2.ndarray((128, 512), nl2.float32, buffer=nl2.psum)  # automatic
        nisa2.nc_matmul(dst=acc, stationary=s, moving=m)
        res = nl2.ndarray((128, 512), nl2.float32, buffer=nl2.sbuf)  # automatic
        nisa2.tensor_copy(dst=res, src=acc)
        acc2 = nl2.ndarray((128, 512), nl2.float32, buffer=nl2.psum, address=(0, 2048))  # placed
        nisa2.nc_matmul(dst=acc2, stationary=s, moving=res)
        ps = nl2.ndarray((128, 512), nl2.float32, buffer=nl2.psum)  # automatic beside a placed one
        nisa2.tensor_copy(dst=ps, src=acc2)
        nisa2.tensor_copy(dst=res, src=ps)
        out = nl2.ndarray((128, 512), nl2.float32, buffer=nl2.shared_hbm)
        nisa2.dma_copy(dst=out, src=res)
        return out

    s, m = A[0, :, :128], A[1]
    s64 = s.astype(np.float64)
    np.testing.assert_allclose(k(s, m), s64.T @ (s64.T @ m), rtol=1e-5)


def test_psum_mod_alloc_banks_alias():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        m = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        p = nl.ndarray((3, nl.par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
        s[...] = nl.load(a[0, :, 0:128])
        m[...] = nl.load(a[1])
        p[0] = nisa.nc_matmul(s, m)
        r[...] = nl.copy(p[0])  # block 0 dead before block 2 (same bank 2) is written
        p[2, :, 0:128] = nisa.nc_matmul(s, s)
        r[:, 0:128] = nl.copy(p[0][:, 0:128])  # reads bank 2: block 2's values
        nl.store(out, r)
        return out

    with config.override(capacity="off"):
        out = k(A)
    s = A[0, :, :128].astype(np.float64)
    np.testing.assert_allclose(out[:, 128:], (s.T @ A[1])[:, 128:], rtol=1e-5)
    np.testing.assert_allclose(out[:, :128], s.T @ s, rtol=1e-5)


def test_mixing_in_psum_rejected():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.load(a[0, :, 0:128])
        m = nl.load(a[1])
        p = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
        p[...] = nisa.nc_matmul(s, m)
        q = nisa.nc_matmul(s, m)  # a PSUM result kept as a new tile while PSUM is placed
        nl.store(out, nl.add(p, q))
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "allocation mixing" and "PSUM" in str(e.value)


def test_sbuf_placement_rules():
    def run(buf, shape=(128, 512)):
        @jit
        def k(a):
            nl.ndarray(shape, dtype=nl.float32, buffer=buf)
            return a

        with pytest.raises(NKIError) as e:
            k(A)
        return str(e.value)

    from nki_kernels.simulator.instructions import target

    with target.use(target.nc_version.gen2):  # 24 MiB: 192 KiB per partition, 16 KiB reserved
        assert "does not fit below 180224" in run(ncc.sbuf.mod_alloc(base_addr=176 * 1024))
    with target.use(target.nc_version.gen3):  # Trn2: 28 MiB, 224 KiB per partition
        assert "does not fit below 212992" in run(ncc.sbuf.mod_alloc(base_addr=208 * 1024))
    assert "start partition 32" in run(ncc.sbuf.alloc(lambda idx, p, f: (32, 0)))
    assert "start partition 32" in run(ncc.sbuf.alloc(lambda idx, p, f: (32, 0)), shape=(64, 512))

    @jit
    def ok(a):  # 32 partitions may start at 96
        t = nl.ndarray((32, 512), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda idx, p, f: (96, 0)))
        t[...] = nl.load(a[0, 0:32])
        out = nl.ndarray((32, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(ok(A), A[0, 0:32])


def test_mod_alloc_argument_types():
    with pytest.raises(TypeError, match="num_free_tiles"):
        ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=2)
    with pytest.raises(TypeError):
        ncc.sbuf.mod_alloc(0)  # keyword-only, as documented
    with pytest.raises(TypeError):
        ncc.psum.mod_alloc(base_bank=0, nonsense=1)


def test_compiler_module_registered_and_decorators_pass_kernels_through():
    from nki_kernels.simulator.install import install

    install()
    import neuronxcc.nki as nki1
    import neuronxcc.nki.compiler as ncc1

    assert ncc1 is ncc and nki1.compiler is ncc
    assert ncc.sbuf.auto_alloc().buffer is nl.sbuf and ncc.psum.auto_alloc().buffer is nl.psum

    @ncc.enable_stack_allocator
    @ncc.skip_middle_end_transformations
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.auto_alloc())
        t[...] = nl.load(a[0])
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(k(A), A[0])
    assert ncc.multi_buffer(3).factor == 3 and repr(ncc.no_reorder()) == "no_reorder()"


# ----------------------------------------------------------------------------- NaN fill, more
def test_nan_fill_sentinels_and_switch():
    @jit
    def k(a):
        i = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.sbuf)
        f = nl.ndarray((128, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        out_i = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        out_f = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out_i, nl.copy(i))
        nl.store(out_f, nl.copy(f, dtype=nl.float32))
        return out_i, out_f

    with config.override(uninit="off"):
        oi, of = k(A)
    assert (oi == 4).all() and np.isnan(of).all()
    saved = config.nan_fill
    config.nan_fill = False
    try:
        with config.override(uninit="off"):
            oi, of = k(A)
    finally:
        config.nan_fill = saved
    assert not (oi == 4).all() or not np.isnan(of).all()  # np.empty: not the sentinels everywhere


@pytest.mark.parametrize("nan_fill", [True, False])
def test_placed_memory_starts_poisoned_in_every_launch(nan_fill):
    # Each launch's placed SBUF starts as never written (NaN, or zeros with the fill off), not with what
    # the previous launch left at the same address (its storage buffer may be handed out again).
    from nki_kernels.simulator import standalone as sa
    snl, snisa = sa.language, sa.isa

    @sa.jit
    def k(x, write):
        out = snl.ndarray((128, 64), dtype=snl.float32, buffer=snl.shared_hbm)
        t = snl.ndarray((128, 64), dtype=snl.float32, buffer=snl.sbuf, address=(0, 4096))
        if write:
            snisa.dma_copy(dst=t, src=x)
        snisa.dma_copy(dst=out, src=t)
        return out

    x = np.full((128, 64), 7.0, np.float32)
    saved = config.nan_fill
    config.nan_fill = nan_fill
    try:
        with config.override(uninit="off"):
            for _ in range(3):
                np.testing.assert_array_equal(k(x, True), x)
                got = k(x, False)
                assert (np.isnan(got).all() if nan_fill else (got == 0).all()), got[:2, :4]
    finally:
        config.nan_fill = saved


def test_mixing_with_an_automatic_block_tensor_rejected():
    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        b = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)  # automatic
        b[0] = nl.load(a[0])
        t[...] = nl.copy(b[0])
        nl.store(out, t)
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "allocation mixing" and "block (0,)" in str(e.value)


def test_broadcast_view_assigned_into_a_placed_tensor_is_no_tile_of_its_own():
    """``t[...] = v.broadcast_to(shape)`` reads ``v`` through a zero-stride access pattern: in a
    kernel whose SBUF is all placed it is no automatically allocated tile (official allocated SD
    attention); its values are ``v`` repeated along the free axis."""

    @jit
    def k(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        v = nl.ndarray((128, 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        w = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
        v[...] = nl.load(a[0, :, 0:1])
        w[...] = v.broadcast_to((128, 128))
        nl.store(out, w)
        return out

    np.testing.assert_array_equal(k(A), np.repeat(A[0, :, 0:1], 128, axis=1))
    rep = profile(k, A)
    assert rep.sbuf_peak == 4 + 512  # v and w only


# ----------------------------------------------------------------------------- PSUM placement rules
def _placement_error(buf, shape=(128, 512), dtype=nl.float32, address=None):
    @jit
    def k(a):
        nl.ndarray(shape, dtype=dtype, buffer=buf, address=address)
        return a

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "placement"
    return str(e.value)


def test_psum_alloc_tiles_start_at_partition_0_byte_0():
    # nki.compiler.psum.alloc: "In current release, start_partition and byte_addr must both be 0."
    msg = _placement_error(ncc.psum.alloc(lambda idx, p, f: (0, 0, 1024)), shape=(128, 128))
    assert "(0, 0, 1024)" in msg and "must both be 0" in msg
    msg = _placement_error(ncc.psum.alloc(lambda idx, p, f: (3, 32, 0)), shape=(32, 128))
    assert "(3, 32, 0)" in msg and "start_partition" in msg
    # a standalone address= is not this API: a PSUM tile may sit inside a bank, but not across one
    assert "crosses the 2048 B bank" in _placement_error(nl.psum, address=(0, 1024))


def test_psum_mod_alloc_arguments_that_must_be_0_or_1():
    # nki.compiler.psum.mod_alloc: base_addr and base_partition "Must be 0 in the current version";
    # num_par_tiles / num_free_tiles "Currently must be an empty tuple or (1, 1, ...)"
    for kwargs, named in [({"base_addr": 512}, "base_addr=512"), ({"base_partition": 32}, "base_partition=32"),
                          ({"num_free_tiles": (2,)}, "num_free_tiles=(2,)"),
                          ({"num_par_tiles": (1, 2)}, "num_par_tiles=(1, 2)")]:
        with pytest.raises(NKIError) as e:
            ncc.psum.mod_alloc(base_bank=0, **kwargs)
        assert e.value.rule == "placement" and named in str(e.value)


def test_psum_placements_at_the_documented_edges_run():
    @jit
    def k(a):
        out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((128, 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        m = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=512, num_free_tiles=(2,)))
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        p = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,  # the last bank, 2 KiB: a whole bank
                       buffer=ncc.psum.alloc(lambda idx, pdim, fdim: (7 - idx[0], 0, 0)))
        q = nl.ndarray((1, nl.par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.psum.mod_alloc(base_bank=0, num_par_tiles=(1,), num_free_tiles=(1,)))
        s[...] = nl.load(a[0, :, 0:128])
        for i in nl.affine_range(2):
            m[i] = nl.load(a[i + 1])
            p[i] = nisa.nc_matmul(s, m[i])
            q[0] = nisa.nc_matmul(s, m[i])
            r[...] = nl.add(p[i], q[0])
            nl.store(out[i], r)
        return out

    s = A[0, :, :128].astype(np.float64)
    np.testing.assert_allclose(k(A), [2 * s.T @ A[1], 2 * s.T @ A[2]], rtol=1e-5)


def test_modulo_tile_counts_are_zipped_with_the_block_index():
    """The reference modulo function zips the tile counts with the block index: official kernels
    pass counts for a tensor without block dimensions (attention tutorial v9: num_free_tiles=(32,)),
    which then sits at base_addr."""

    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096, num_free_tiles=(32,)))
        t[...] = nl.load(a[0])
        u = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        nl.store(out, u)  # the same bytes
        return out

    with config.override(uninit="off"):  # u itself was never written: its bytes were, through t
        np.testing.assert_array_equal(k(A), A[0])


def test_activation_with_reduce_cmd_assigned_into_a_placed_tensor_is_no_automatic_tile():
    # `t[...] = nisa.activation(..., reduce_res=r, reduce_cmd=...)` in an all-placed kernel (the
    # official attention tutorial v9 / v10): the instruction writes t and the registers' reduce_res;
    # its result is never a tile of its own.
    x64 = A[0].astype(np.float64)

    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t = nl.ndarray((128, 2, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2048))
        r = nl.ndarray((128, 2), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=6144))
        x[...] = nl.load(a[0])
        for i in nl.affine_range(2):
            t[:, i, :] = nisa.activation(op=nl.exp, data=x, scale=float(i + 1), reduce_op=nl.add,
                                         reduce_res=r[:, i], reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nl.store(out, t[:, 1, :])
        nl.store(sums, r)
        return out, sums

    out, sums = k(A)
    np.testing.assert_allclose(out, np.exp(2 * x64), rtol=1e-5)
    np.testing.assert_allclose(sums, np.stack([np.exp(x64).sum(1), np.exp(2 * x64).sum(1)], 1), rtol=1e-5)


class _AdvancingAllocator:
    """An SBUF address allocator kept between launches, as the nki-samples attention tutorial keeps one
    at module level: each trace continues from the previous one's offset."""

    def __init__(self):
        self.offset = 0

    def allocate(self, nbytes):
        addr = self.offset
        self.offset += nbytes
        return ncc.sbuf.mod_alloc(base_addr=addr)


_allocator = _AdvancingAllocator()


def test_sbuf_overflow_from_state_kept_between_launches_says_where_the_launch_started():
    from nki_kernels.simulator.instructions import target

    @jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8192), dtype=nl.float32, buffer=_allocator.allocate(8192 * 4))  # 32 KiB
        u = nl.ndarray((128, 8192), dtype=nl.float32, buffer=_allocator.allocate(8192 * 4))
        t[...] = nl.load(a)
        u[...] = nl.add(t, t)
        nl.store(out, u)
        return out

    a = np.random.default_rng(0).standard_normal((128, 8192)).astype(np.float32)
    _allocator.offset = 0
    with target.use(target.nc_version.gen2):  # 176 KiB placeable: two launches of 64 KiB fit, the third not
        np.testing.assert_array_equal(k(a), a + a)
        np.testing.assert_array_equal(k(a), a + a)
        with pytest.raises(NKIError) as e:
            k(a)
    assert e.value.rule == "placement" and "does not fit below 180224" in str(e.value)
    assert "start at byte 131072, none below it" in str(e.value) and "Python state kept between launches" in str(e.value)


def test_sbuf_overflow_of_a_launch_that_places_from_byte_0_has_no_such_note():
    @jit
    def k(a):
        nl.ndarray((128, 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nl.ndarray((128, 64 * 1024), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        return a

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "placement" and "does not fit below" in str(e.value)
    assert "between launches" not in str(e.value)
