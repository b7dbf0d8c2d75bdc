"""Simulator diagnostics: one planted-bug kernel per rule (the error and what it names), the
fixed kernel passing, and the per-rule error / warn / off switches."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nki_kernels.simulator import NKIError, config, nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.diagnostics import _strided_elements, sorted_unique
from nki_kernels.simulator.indexing import resolve

THIS = __file__.rsplit("/", 1)[-1]


def err(kernel, *args, grid=(), **kw):
    with pytest.raises(NKIError) as e:
        kernel[grid](*args, **kw) if grid else kernel(*args, **kw)
    return e.value


A = np.arange(256 * 512, dtype=np.float32).reshape(256, 512)


# --------------------------------------------------------------------------- races
@nki.jit
def race_ww(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.load(a[i * 128 + nl.arange(128)[:, None], nl.arange(512)[None, :]])
    nl.store(out[nl.arange(128)[:, None], nl.arange(512)[None, :]], value=t)  # every program: same rows
    return out


@nki.jit
def race_ww_fixed(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    nl.store(out[ix, nl.arange(512)[None, :]], value=nl.load(a[ix, nl.arange(512)[None, :]]))
    return out


def test_race_two_programs_write_same_elements():
    e = err(race_ww, A, grid=2)
    msg = str(e)
    assert e.rule == "race"
    assert "programs (0,) and (1,)" in msg and "[0:128, 0:512]" in msg and "out0" in msg
    assert THIS in msg and "writes" in msg
    np.testing.assert_array_equal(race_ww_fixed[2](A), A)


@nki.jit
def race_rw(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    ix = i * 128 + nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]
    nl.store(out[ix, iy], value=nl.load(a[ix, iy]))
    if i == 1:
        # reads the rows program 0 wrote: a cross-program dependency
        prev = nl.load(out[nl.arange(128)[:, None], iy])
        nl.store(out[ix, iy], value=nl.add(prev, 1.0))
    return out


def test_race_program_reads_what_another_writes():
    e = err(race_rw, A, grid=2)
    assert e.rule == "race"
    assert "programs (0,) and (1,)" in str(e) and "reads" in str(e) and "[0:128, 0:512]" in str(e)


def test_race_with_overlapping_strided_writes():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(a[0:128, 0:256])
        # program 0 writes even columns 0..510, program 1 columns 255..510 step 1: overlap at evens >= 256
        if i == 0:
            nl.store(out[nl.arange(128)[:, None], 2 * nl.arange(256)[None, :]], value=t)
        else:
            nl.store(out[nl.arange(128)[:, None], 256 + nl.arange(256)[None, :]], value=t)
        return out

    e = err(k, A, grid=2)
    assert e.rule == "race" and "element(s)" in str(e)

    @nki.jit
    def disjoint(a):
        out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(a[0:128, 0:256])
        nl.store(out[nl.arange(128)[:, None], i + 2 * nl.arange(256)[None, :]], value=t)  # interleaved
        return out

    r = disjoint[2](A)
    np.testing.assert_array_equal(r[:, 0::2], A[:128, :256])


# --------------------------------------------------------------------------- affine_range
@nki.jit
def prefix_sum_affine(a):
    """Running column-block sums stored every iteration: a scan, wrongly on affine_range."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 128), dtype=nl.float32)
    for j in nl.affine_range(4):
        acc += nl.load(a[0:128, j * 128 + nl.arange(128)[None, :]])
        nl.store(out[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]], value=acc)
    return out


@nki.jit
def prefix_sum_sequential(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 128), dtype=nl.float32)
    for j in nl.sequential_range(4):
        acc += nl.load(a[0:128, j * 128 + nl.arange(128)[None, :]])
        nl.store(out[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]], value=acc)
    return out


def test_affine_range_scan_is_loop_carried():
    e = err(prefix_sum_affine, A)
    msg = str(e)
    assert e.rule == "loop_carried" and "sequential_range" in msg
    assert "iteration 1" in msg and "iteration 0" in msg and "sbuf tile (128, 128)" in msg
    assert THIS in msg
    ref = np.cumsum(A[:128].reshape(128, 4, 128), axis=1).reshape(128, 512)
    np.testing.assert_allclose(prefix_sum_sequential(A), ref, rtol=1e-6)


def test_affine_range_accumulation_is_allowed():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
        blk = nl.zeros((128, 128), dtype=nl.float32)
        for j in nl.affine_range(4):
            t = nl.load(a[0:128, j * 128 + nl.arange(128)[None, :]])
            acc += nisa.nc_matmul(t, t)
            blk[...] = nisa.tensor_tensor(blk, t, op=nl.add)  # read-modify-write reduction
            blk[:, 0:64] += t[:, 0:64]  # slice accumulation
        nl.store(out, value=nl.add(acc, blk))
        return out

    x = A[:128] / 1000.0
    r = k(x)
    blocks = [x[:, j * 128:(j + 1) * 128] for j in range(4)]
    ref = sum(b.T @ b for b in blocks) + sum(blocks)
    ref[:, :64] += sum(b[:, :64] for b in blocks)
    np.testing.assert_allclose(r, ref, rtol=1e-5)


def test_affine_range_reading_previous_iteration_slot():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        buf = nl.zeros((4, nl.par_dim(128), 128), dtype=nl.float32)
        for j in nl.affine_range(4):
            buf[j] = nl.load(a[0:128, j * 128 + nl.arange(128)[None, :]])
            if j > 0:
                nl.store(out[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]], value=buf[j - 1])
        return out

    e = err(k, A)
    assert e.rule == "loop_carried" and "iteration 1" in str(e)

    @nki.jit
    def fixed(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        buf = nl.zeros((4, nl.par_dim(128), 128), dtype=nl.float32)
        for j in nl.affine_range(4):
            buf[j] = nl.load(a[0:128, j * 128 + nl.arange(128)[None, :]])
            nl.store(out[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]], value=buf[j])
        return out

    np.testing.assert_array_equal(fixed(A), A[:128])


def test_affine_range_value_carried_through_python_variable():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.zeros((128, 128), dtype=nl.float32)
        for j in nl.affine_range(3):
            s = nl.add(s, nl.load(a[0:128, j * 128 + nl.arange(128)[None, :]]))
        nl.store(out, value=s)
        return out

    e = err(k, A)
    assert e.rule == "loop_carried" and "produced by iteration 0" in str(e)


def test_affine_range_hbm_store_then_load_across_iterations():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0:128, 0:128], value=nl.load(a[0:128, 0:128]))
        for j in nl.affine_range(1, 4):
            prev = nl.load(out[nl.arange(128)[:, None], (j - 1) * 128 + nl.arange(128)[None, :]])
            nl.store(out[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]], value=nl.add(prev, 1.0))
        return out

    e = err(k, A)
    assert e.rule == "loop_carried" and "out0 (128, 512) (HBM)" in str(e)
    with config.override(loop_carried="off"):
        r = k(A)
    np.testing.assert_array_equal(r[:, 384:], A[:128, :128] + 3)


# --------------------------------------------------------------------------- uninitialised reads
def test_load_of_output_never_written():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0:128, 0:256], value=nl.load(a[0:128, 0:256]))
        t = nl.load(out[0:128, 0:512])  # right half never written
        nl.store(out[0:128, 0:512], value=t)
        return out

    e = err(k, A)
    assert e.rule == "uninit" and "out0" in str(e) and "32768 element(s)" in str(e)
    assert "(0, 256)" in str(e)

    @nki.jit
    def fixed(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0:128, 0:512], value=nl.load(a[0:128, 0:512]))
        t = nl.load(out[0:128, 0:512])
        nl.store(out[0:128, 0:512], value=nl.multiply(t, 2.0))
        return out

    np.testing.assert_array_equal(fixed(A), 2 * A[:128])


def test_output_partly_never_stored():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i * 128 + nl.arange(128)[:, None], nl.arange(512)[None, :]], value=nl.load(a[0:128, 0:512]))
        return out

    # Grid too small: rows 128..255 never written. It runs on hardware (the caller may never read
    # them), so it is a warning naming the elements, and the rows read NaN, the official
    # simulator's sentinel: no stale value passes for a result.
    with pytest.warns(config.NKIWarning, match=r"\[uninit\].*65536 of its 131072.*\(128, 0\).*hold nan") as w:
        got = k[1](A)
    assert THIS in str(w[0].message)  # (the kernel's line)
    np.testing.assert_array_equal(got[:128], A[:128])
    assert np.isnan(got[128:]).all()
    for mode in ("off", "warn"):
        with config.override(uninit=mode), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = k[1](A)
        np.testing.assert_array_equal(got[:128], A[:128])
        assert np.isnan(got[128:]).all()
    np.testing.assert_array_equal(k[2](np.tile(A[:128], (2, 1))), np.tile(A[:128], (2, 1)))


def test_blocks_of_a_partly_written_tile_read_many_times():
    # each block's check is remembered once it passed: a written block read again stays accepted,
    # an unwritten one is still reported however often its neighbours were read
    @nki.jit
    def k(a, read_cols):
        out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[:, 0:256] = nl.load(a[0:128, 0:256])
        for _ in range(3):
            nl.store(out[:, 0:256], value=nl.exp(t[:, 0:256]))
        lo, hi = read_cols
        nl.store(out[:, 0:128], value=nl.exp(t[:, lo:hi]))
        return out

    got = k(A, (128, 256))
    np.testing.assert_allclose(got, np.exp(A[:128, [*range(128, 256), *range(128, 256)]]), rtol=1e-6)
    e = err(k, A, (192, 320))  # half of it never written
    assert e.rule == "uninit" and "sbuf tile (128, 512)" in str(e)


def test_read_ndarray_tile_before_write():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[:, 0:256] = nl.load(a[0:128, 0:256])
        nl.store(out, value=nl.exp(t))  # t[:, 256:] undefined
        return out

    e = err(k, A)
    assert e.rule == "uninit" and "sbuf tile (128, 512)" in str(e) and "nl.ndarray" in str(e) and THIS in str(e)

    @nki.jit
    def acc_uninit(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        t = nl.load(a[0:128, 0:128])
        acc += t  # SBUF has no accumulation groups: this reads garbage
        nl.store(out, value=acc)
        return out

    e = err(acc_uninit, A)
    assert e.rule == "uninit" and "accumulates" in str(e) and "sbuf" in str(e)

    # In PSUM the first `+=` into never-written elements starts an accumulation group (it
    # overwrites), as the official attention tutorial v8a relies on: no error, the matmul's values.
    @nki.jit
    def psum_group(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        t = nl.load(a[0:128, 0:128])
        acc += nisa.nc_matmul(t, t)
        nl.store(out, value=acc)
        return out

    a64 = A[:128, :128].astype(np.float64)
    np.testing.assert_allclose(psum_group(A), a64.T @ a64, rtol=1e-4, atol=1e-3)

    @nki.jit
    def fixed(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[:, 0:256] = nl.load(a[0:128, 0:256])
        t[:, 256:512] = nl.load(a[0:128, 256:512])
        nl.store(out, value=nl.multiply(t, 0.5))
        return out

    np.testing.assert_array_equal(fixed(A), A[:128] * 0.5)


@pytest.mark.parametrize("second", [None, (0, 64), (32, 64)], ids=["block_only", "wider_block", "next_block"])
def test_block_written_again_and_again_then_a_wider_read(second):
    # A tiled loop accumulates into the same PSUM block (0:32) far more often than the tile has
    # elements; what counts as written is still that block plus what else was written, and only that.
    from nki_kernels.simulator import standalone as sa
    snl, snisa = sa.language, sa.isa
    lhs = np.random.default_rng(5).standard_normal((128, 128)).astype(np.float32)

    @sa.jit
    def k(x):
        out = snl.ndarray((128, 64), dtype=snl.float32, buffer=snl.shared_hbm)
        xt = snl.ndarray((128, 128), dtype=snl.float32, buffer=snl.sbuf)
        snisa.dma_copy(dst=xt, src=x)
        acc = snl.ndarray((128, 512), dtype=snl.float32, buffer=snl.psum)
        for _ in range(20):  # 20 x 128 x 32 marks > the tile's 128 x 512 elements
            snisa.nc_matmul(acc[0:128, 0:32], xt[0:128, 0:128], xt[0:128, 0:32])
        if second is not None:
            lo, hi = second
            snisa.nc_matmul(acc[0:128, lo:hi], xt[0:128, 0:128], xt[0:128, lo:hi])
        res = snl.ndarray((128, 64), dtype=snl.float32, buffer=snl.sbuf)
        snisa.tensor_copy(dst=res, src=acc[0:128, 0:64])
        snisa.dma_copy(dst=out, src=res)
        return out

    if second is None:
        e = err(k, lhs)  # columns 32:64 never written
        assert e.rule == "uninit" and "psum tile (128, 512)" in str(e)
        return
    got = k(lhs)
    prod = lhs.astype(np.float64).T @ lhs.astype(np.float64)[:, :64]
    want = prod.copy()
    want[:, :32] *= 20 + (second == (0, 64))  # the second matmul's first 32 columns accumulate too
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


# --------------------------------------------------------------------------- capacity
def test_psum_capacity_is_about_live_tiles_not_python_references():
    # Nine 2 KiB PSUM tiles held in a Python list but never used are not nine live tiles: a
    # tile is live from allocation to last use (rejections: tests/test_sim_memory.py).
    @nki.jit
    def ok(a):
        tiles = [nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]
        return a

    np.testing.assert_array_equal(ok(A), A)


# --------------------------------------------------------------------------- operand rules
def test_matmul_integer_operands_rejected():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a[0:128, 0:128], dtype=nl.int32)
        nl.store(out, value=nisa.nc_matmul(t, t))
        return out

    e = err(k, A)
    assert e.rule == "operand" and "int32" in str(e) and "nc_matmul" in str(e)


def test_partition_axis_broadcast_is_legal_as_documented():
    # nki.language.add's reference: "broadcast on partition dimension -- [1, 512] is broadcasted
    # to [128, 512]". Implicit and explicit (broadcast_to) forms give the same result.
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        row = nl.load(a[0:1, 0:512])
        nl.store(out, value=nl.add(nl.load(a[0:128, 0:512]), row))
        return out

    @nki.jit
    def explicit(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        row = nl.load(a[0:1, 0:512]).broadcast_to((128, 512))
        nl.store(out, value=nl.add(nl.load(a[0:128, 0:512]), row))
        return out

    np.testing.assert_array_equal(k(A), A[:128] + A[0:1])
    np.testing.assert_array_equal(explicit(A), A[:128] + A[0:1])


# --------------------------------------------------------------------------- modes
def test_modes_error_warn_off_and_env():
    assert config.get("race") == "error"
    with config.override(race="warn"):
        with pytest.warns(config.NKIWarning, match=r"\[race\]"):
            race_ww[2](A)
    with config.override(race="off"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            race_ww[2](A)
    with config.override(all="off"):
        assert all(m == "off" for m in config.modes().values())
        prefix_sum_affine(A)
    assert config.get("race") == "error"
    assert config.parse("race=warn, uninit=off") == {"race": "warn", "uninit": "off"}
    saved = config.modes()
    try:
        config.load_env({"NKI_SIM_CHECKS": "race=warning,loop_carried=off"})
        assert config.get("race") == "warn" and config.get("loop_carried") == "off"
        config.set("all", "error")
    finally:
        for r, m in saved.items():
            config.set(r, m)
    with pytest.raises(ValueError):
        config.set("races", "off")
    with pytest.raises(ValueError):
        config.set("race", "loud")


@nki.jit
def _affine_accumulate(a):
    out = nl.ndarray((a.shape[0], 64), dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    acc = nl.zeros((128, 64), dtype=nl.float32)
    for j in nl.affine_range(4):
        acc += nl.load(a[i, j * 64 + nl.arange(64)[None, :]])  # the allowed += accumulation
    nl.store(out[i, nl.arange(64)[None, :]], value=acc)
    return out


def test_concurrent_launches_from_threads_do_not_mix_diagnostics():
    # XLA may run custom-calls concurrently: launches on other threads must not see this
    # launch's affine_range frames (they used to report false loop_carried errors).
    import threading

    a = np.random.default_rng(3).random((512, 256), dtype=np.float32)
    want = a.reshape(512, 4, 64).sum(1)
    errors = []

    def worker():
        try:
            for _ in range(15):
                np.testing.assert_allclose(_affine_accumulate[4](a), want, rtol=1e-5)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# --------------------------------------------------------------------------- the elements of a strided index
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_strided_elements_are_the_sorted_unique_elements(out_shape, data):
    # (the race check's regions of a strided access, made in order without a sort)
    shape = (40, 30, 20)
    comps = []
    for dim in shape:
        coefs = [data.draw(st.integers(-3, 6)) for _ in out_shape]
        span = sum(abs(c) * (n - 1) for c, n in zip(coefs, out_shape))
        lo = sum(min(0, c) * (n - 1) for c, n in zip(coefs, out_shape))
        if span >= dim:
            coefs, span, lo = [0] * len(out_shape), 0, 0
        off = data.draw(st.integers(-lo, dim - 1 - span + lo)) if dim - 1 - span + lo >= -lo else 0
        comps.append(nl.AffineExpr(tuple(out_shape), off, tuple(coefs)))
    index = resolve(shape, tuple(comps))
    fast = _strided_elements(index)
    if fast is not None:
        np.testing.assert_array_equal(fast, sorted_unique(index.element_indices()))
