"""The simulator's per-instruction shortcuts (resolved indices shared by loop iterations, reads
checked once while nothing changes, written-tile bookkeeping by boxes) keep every diagnostic:
planted bugs that the shortcuts could hide are still reported, and the valid kernels next to
them still pass, with values checked against NumPy."""

import inspect

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, config, nki
from nki_kernels.simulator.instructions import target
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import standalone as nki2

nl2, nisa2 = nki2.language, nki2.isa
A = np.arange(256 * 512, dtype=np.float32).reshape(256, 512) / 1000.0


def test_same_tile_twice_in_one_instruction_still_loop_carried():
    """``nl.add(s, s)`` reads a value carried from the previous iteration twice: reported once."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.load(a[0:128, 0:128])
        for _ in nl.affine_range(3):
            s = nl.add(s, s)
        nl.store(out, value=s)
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "loop_carried" and "produced by iteration 0" in str(e.value)


def test_dst_instruction_reading_a_previous_iterations_tile_twice_is_loop_carried():
    """A dst= instruction reads its operands in several layers; a tile made by iteration 0 and
    read (as both operands) in iteration 1 is reported."""

    @nki2.jit
    def k(x):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        made = []
        for j in nl2.affine_range(2):
            t = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=x[0:128, j * 64:(j + 1) * 64])
            made.append(t)
            nisa2.tensor_tensor(dst=r, data1=made[0], data2=made[0], op=nl2.add)
        nisa2.dma_copy(dst=out, src=r)
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "loop_carried" and "produced by iteration 0" in str(e.value)


def test_reading_operands_repeatedly_in_a_valid_loop_gives_numpy_values():
    @nki2.jit
    def k(x):
        out = nl2.ndarray((128, 256), dtype=nl2.float32, buffer=nl2.shared_hbm)
        for j in nl2.affine_range(4):
            t = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
            r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=x[0:128, j * 64:(j + 1) * 64])
            nisa2.tensor_tensor(dst=r, data1=t, data2=t, op=nl2.multiply)
            nisa2.tensor_tensor(dst=r, data1=r, data2=t, op=nl2.add)
            nisa2.dma_copy(dst=out[0:128, j * 64:(j + 1) * 64], src=r)
        return out

    x = A[:128, :256].astype(np.float64)
    np.testing.assert_allclose(k(A[:128, :256].copy()), x * x + x, rtol=1e-6)


def test_block_tile_written_twice_in_one_half_is_still_half_undefined():
    """Overlapping writes count their elements twice in the bookkeeping: the tile is not taken for
    fully written, and a read of the never-written half is reported."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), 256), dtype=nl.float32, buffer=nl.sbuf)
        t[0] = nl.load(a[0:128, 0:256])
        t[0] = nl.load(a[128:256, 0:256])
        nl.store(out[0:128, 0:256], value=nl.copy(t[0]))
        nl.store(out[0:128, 256:512], value=nl.copy(t[1]))  # never written
        return out

    with pytest.raises(NKIError) as e:
        k(A)
    assert e.value.rule == "uninit"

    @nki.jit
    def fixed(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), 256), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(2):
            t[j] = nl.load(a[0:128, j * 256:(j + 1) * 256])
        for j in nl.affine_range(2):
            nl.store(out[0:128, j * 256:(j + 1) * 256], value=nl.copy(t[j]))
        return out

    np.testing.assert_array_equal(fixed(A), A[:128])


def test_out_of_bounds_slice_is_an_error_every_time():
    """Resolved indices are shared per shape and key, errors never are: the same bad key fails twice."""

    @nki.jit
    def k(a, hi):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a[0:128, hi - 128:hi]))
        return out

    np.testing.assert_array_equal(k(A, 512), A[:128, 384:512])
    for _ in range(2):
        with pytest.raises(NKIError) as e:
            k(A, 640)
        assert "(256, 512)" in str(e.value)


def test_psum_accumulation_paths_match_numpy():
    """nc_matmul into PSUM: overwrite (accumulate=False), add (True), and the default inference
    with a partly written destination (adds where written, overwrites elsewhere)."""

    @nki2.jit
    def k(lhsT, rhs):
        out = nl2.ndarray((3, 128, 512), dtype=nl2.float32, buffer=nl2.shared_hbm)
        a = nl2.ndarray((128, 128), dtype=nl2.float32, buffer=nl2.sbuf)
        b = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=a, src=lhsT)
        nisa2.dma_copy(dst=b, src=rhs)
        res = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
        for i, mode in enumerate((False, True)):
            acc = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.psum)
            nisa2.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=False)
            nisa2.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=mode)
            nisa2.tensor_copy(dst=res, src=acc)
            nisa2.dma_copy(dst=out[i], src=res)
        part = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.psum)
        nisa2.nc_matmul(dst=part[:, 0:256], stationary=a, moving=b[:, 0:256])
        nisa2.nc_matmul(dst=part, stationary=a, moving=b)  # left half adds, right half overwrites
        nisa2.tensor_copy(dst=res, src=part)
        nisa2.dma_copy(dst=out[2], src=res)
        return out

    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((128, 128)).astype(np.float32)
    rhs = rng.standard_normal((128, 512)).astype(np.float32)
    p = lhsT.astype(np.float64).T @ rhs
    got = k(lhsT, rhs)
    np.testing.assert_allclose(got[0], p, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[1], 2 * p, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[2], np.concatenate([2 * p[:, :256], p[:, 256:]], axis=1), rtol=1e-4, atol=1e-3)


def test_matmul_accumulation_in_place_is_fp32_sequential_sums_bit_for_bit():
    """K-tiled nc_matmul into one fp32 PSUM tile (standalone dst= and first-generation ``+=``) adds
    each product in fp32 in order: exactly NumPy's ``acc = acc + a_k.T @ b_k`` in float32, also
    through a view of a wider PSUM tile (the in-place add keeps the view's neighbours)."""
    rng = np.random.default_rng(5)
    lhsT = rng.standard_normal((512, 128)).astype(np.float32)
    rhs = rng.standard_normal((512, 512)).astype(np.float32)
    want = lhsT[0:128].T @ rhs[0:128]
    for k in range(1, 4):
        want = want + lhsT[k * 128:(k + 1) * 128].T @ rhs[k * 128:(k + 1) * 128]

    @nki2.jit
    def k2(lhsT, rhs, view):
        out = nl2.ndarray((128, 1024), dtype=nl2.float32, buffer=nl2.shared_hbm)
        wide = nl2.ndarray((128, 1024), dtype=nl2.float32, buffer=nl2.psum)
        acc = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.psum)
        for k in nl2.affine_range(4):
            a = nl2.ndarray((128, 128), dtype=nl2.float32, buffer=nl2.sbuf)
            b = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=a, src=lhsT[k * 128:(k + 1) * 128, :])
            nisa2.dma_copy(dst=b, src=rhs[k * 128:(k + 1) * 128, :])
            nisa2.nc_matmul(dst=wide[:, 512:1024] if view else acc, stationary=a, moving=b)
        last = nl2.ndarray((128, 128), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=last, src=lhsT[384:512, :])
        nisa2.dma_copy(dst=b, src=rhs[384:512, :])
        nisa2.nc_matmul(dst=wide[:, 0:512], stationary=last, moving=b, accumulate=False)
        if not view:
            nisa2.tensor_copy(dst=wide[:, 512:1024], src=acc)
        res = nl2.ndarray((128, 1024), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=res, src=wide)
        nisa2.dma_copy(dst=out, src=res)
        return out

    @nki.jit
    def k1(lhsT, rhs):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(4):
            acc += nisa.nc_matmul(nl.load(lhsT[k * 128:(k + 1) * 128, :]), nl.load(rhs[k * 128:(k + 1) * 128, :]))
        nl.store(out, value=nl.copy(acc))
        return out

    np.testing.assert_array_equal(k1(lhsT, rhs), want)
    for view in (False, True):
        got = k2(lhsT, rhs, view)
        np.testing.assert_array_equal(got[:, 512:], want)
        np.testing.assert_array_equal(got[:, :512], lhsT[384:].T @ rhs[384:])


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
def test_tensor_tensor_rounds_fp32_math_once_to_dst_dtype(dtype):
    """Standalone nisa.tensor_tensor: fp32 arithmetic rounded once to dst's dtype, data2 of another
    shape with the same elements per partition read in data1's layout; exactly NumPy's values."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 64)).astype(dtype)
    y = rng.standard_normal((128, 2, 32)).astype(dtype)

    @nki2.jit
    def k(x, y):
        out = nl2.ndarray((128, 64), dtype=x.dtype, buffer=nl2.shared_hbm)
        a = nl2.ndarray((128, 64), dtype=x.dtype, buffer=nl2.sbuf)
        b = nl2.ndarray((128, 2, 32), dtype=y.dtype, buffer=nl2.sbuf)
        r = nl2.ndarray((128, 64), dtype=x.dtype, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=a, src=x)
        nisa2.dma_copy(dst=b, src=y)
        for _ in nl2.affine_range(2):
            nisa2.tensor_tensor(dst=r, data1=a, data2=b, op=nl2.subtract)
        nisa2.dma_copy(dst=out, src=r)
        return out

    want = (x.astype(np.float32) - y.reshape(128, 64).astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(k(x, y).view(np.uint8), want.view(np.uint8))


def test_deferred_nan_fill_shows_where_a_tile_was_never_written():
    """An nl.ndarray tile's NaN fill is deferred until something reads it or writes only part of it:
    with the uninit check off, the never-written half of a tile reads back as NaN (int tiles: 4),
    the written half as the data, and a tile written whole holds exactly the data."""
    from nki_kernels.simulator import config

    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)

    @nki2.jit
    def k(x):
        out = nl2.ndarray((3, 128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        half = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=half[:, 0:32], src=x[:, 0:32])
        whole = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=whole, src=x)
        ints = nl2.ndarray((128, 64), dtype=nl2.int32, buffer=nl2.sbuf)
        r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        for i, t in enumerate((half, whole, ints)):
            nisa2.tensor_copy(dst=r, src=t)
            nisa2.dma_copy(dst=out[i], src=r)
        return out

    with config.override(uninit="off"):
        got = k(x)
    np.testing.assert_array_equal(got[0][:, :32], x[:, :32])
    assert np.isnan(got[0][:, 32:]).all()
    np.testing.assert_array_equal(got[1], x)
    np.testing.assert_array_equal(got[2], np.full((128, 64), 4.0, np.float32))


def test_storing_a_never_written_tile_keeps_a_pending_op_exact():
    """Storing an uninitialised tile (uninit check off) writes its NaN sentinel to HBM and leaves the
    element-wise op still waiting to be computed alone: it sees its operands as they were."""
    from nki_kernels.simulator import config

    a = np.arange(128 * 32, dtype=np.float32).reshape(128, 32)

    @nki.jit
    def k(a):
        out = nl.ndarray((2, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.load(a)
        s = nl.add(t, t)  # deferred until something needs it
        junk = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nl.store(out[0], value=junk)
        t[...] = nl.multiply(t, 0.0)  # the operand changes after the add was issued
        nl.store(out[1], value=s)
        return out

    with config.override(uninit="off"):
        got = k(a)
    assert np.isnan(got[0]).all()
    np.testing.assert_array_equal(got[1], a + a)


def test_reading_a_never_written_tile_is_still_reported():
    """The deferred fill changes nothing for the uninit rule: reading an nl.ndarray tile nothing
    wrote is an error naming the rule."""

    @nki2.jit
    def k(x):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        t = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=r, src=t)
        nisa2.dma_copy(dst=out, src=r)
        return out

    with pytest.raises(NKIError) as e:
        k(A[:128, :64])
    assert e.value.rule == "uninit"


def test_loop_carried_report_names_the_lines_of_the_dst_instructions():
    """The kernel line of an access is looked up once per dst= instruction: a loop-carried read
    through a tile names the line of the instruction that reads and of the one that wrote."""
    import inspect

    @nki2.jit
    def k(x):
        out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        s = nl2.ndarray((128, 32), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.memset(dst=r, value=0.0)
        for j in nl2.affine_range(2):
            nisa2.tensor_copy(dst=s, src=r[:, 0:32])  # READ
            nisa2.tensor_copy(dst=r[:, j * 32:(j + 1) * 32], src=s)  # WRITE
        nisa2.dma_copy(dst=out, src=r)
        return out

    src, first = inspect.getsourcelines(k.func)
    lines = {tag: first + i for i, text in enumerate(src) for tag in ("READ", "WRITE") if f"# {tag}" in text}
    with pytest.raises(NKIError) as e:
        k(A[:128, :64])
    msg = str(e.value)
    assert e.value.rule == "loop_carried"
    assert f":{lines['READ']} in k" in msg and f":{lines['WRITE']} in k" in msg


def test_block_tile_fill_is_skipped_only_for_blocks_written_whole():
    """A block-dimension nl.ndarray tile assigned block by block skips the NaN fill of those blocks:
    blocks written whole hold the data, a block written under a mask keeps NaN where the mask is
    off, and a block never written reads back as NaN (uninit check off)."""
    from nki_kernels.simulator import config

    x = np.arange(4 * 128 * 64, dtype=np.float32).reshape(4, 128, 64)

    @nki.jit
    def k(x):
        out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for b in nl.affine_range(2):
            t[b] = nl.load(x[b])
        i_p, i_f = nl.mgrid[0:128, 0:64]
        t[2] = nl.copy(nl.load(x[2]), mask=(i_f < 32))  # an instruction under mask= writes only part
        for b in nl.affine_range(4):
            nl.store(out[b], value=nl.copy(t[b]))
        return out

    with config.override(uninit="off"):
        got = k(x)
    np.testing.assert_array_equal(got[:2], x[:2])
    np.testing.assert_array_equal(got[2][:, :32], x[2][:, :32])
    assert np.isnan(got[2][:, 32:]).all() and np.isnan(got[3]).all()


def test_tensor_tensor_computed_into_dst_matches_numpy_in_every_form():
    """nisa.tensor_tensor computes an fp32 result straight into an fp32 SBUF dst: in place over an
    operand, into a never-written tile, and (through the general write) into a view, a PSUM tile, a
    bf16 tile, from int32 operands, and as a comparison; each exactly NumPy's value (fp32 math is the
    float64 result rounded once)."""
    import ml_dtypes

    rng = np.random.default_rng(11)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    y = rng.standard_normal((128, 64)).astype(np.float32)
    ix = rng.integers(-1000, 1000, (128, 64)).astype(np.int32)

    @nki2.jit
    def k(x, y, ix):
        out = nl2.ndarray((7, 128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
        half = nl2.ndarray((128, 64), dtype=nl2.bfloat16, buffer=nl2.shared_hbm)
        a = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        b = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        i = nl2.ndarray((128, 64), dtype=nl2.int32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=a, src=x)
        nisa2.dma_copy(dst=b, src=y)
        nisa2.dma_copy(dst=i, src=ix)
        fresh = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_tensor(dst=fresh, data1=a, data2=b, op=nl2.multiply)
        nisa2.dma_copy(dst=out[0], src=fresh)
        wide = nl2.ndarray((128, 128), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_tensor(dst=wide[:, 0:64], data1=a, data2=b, op=nl2.subtract)
        nisa2.dma_copy(dst=out[1], src=wide[:, 0:64])
        p = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.psum)
        nisa2.tensor_tensor(dst=p, data1=a, data2=b, op=nl2.maximum)
        r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=r, src=p)
        nisa2.dma_copy(dst=out[2], src=r)
        hb = nl2.ndarray((128, 64), dtype=nl2.bfloat16, buffer=nl2.sbuf)
        nisa2.tensor_tensor(dst=hb, data1=a, data2=b, op=nl2.add)
        nisa2.dma_copy(dst=half, src=hb)
        fi = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_tensor(dst=fi, data1=i, data2=i, op=nl2.multiply)
        nisa2.dma_copy(dst=out[3], src=fi)
        gt = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_tensor(dst=gt, data1=a, data2=b, op=nl2.greater)
        nisa2.dma_copy(dst=out[4], src=gt)
        for _ in nl2.affine_range(1):
            nisa2.tensor_tensor(dst=a, data1=a, data2=b, op=nl2.add)  # in place over data1
        nisa2.dma_copy(dst=out[5], src=a)
        nisa2.tensor_tensor(dst=b, data1=a, data2=b, op=nl2.divide)  # in place over data2
        nisa2.dma_copy(dst=out[6], src=b)
        return out, half

    got, half = k(x, y, ix)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    s = (x64 + y64).astype(np.float32)
    want = [x64 * y64, x64 - y64, np.maximum(x64, y64), ix.astype(np.float64) ** 2, x64 > y64, s,
            s.astype(np.float64) / y64]
    for j, w in enumerate(want):
        np.testing.assert_array_equal(got[j], np.asarray(w).astype(np.float32), err_msg=f"out[{j}]")
    np.testing.assert_array_equal(half.view(np.uint16), s.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_whole_tensor_dma_stores_from_two_iterations_still_race():
    """``dma_copy(dst=out, src=...)`` addresses the whole HBM tensor through one shared access; two
    affine_range iterations storing all of ``out`` are still reported, and one store is valid."""

    def make(n):
        @nki2.jit
        def k(x):
            out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
            t = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=x)
            for _ in nl2.affine_range(n):
                nisa2.dma_copy(dst=out, src=t)
            return out
        return k

    x = A[0:128, 0:64].copy()
    np.testing.assert_array_equal(make(1)(x), x)
    with pytest.raises(NKIError) as e:
        make(2)(x)
    assert e.value.rule == "loop_carried" and "both store to" in str(e.value)


def test_dma_copy_element_count_mismatch_names_the_source_shape():
    """dma_copy describes its source only when it reports an error: a copy of 128x64 elements into a
    128x32 tile is still rejected, naming both shapes; the matching copy is exact."""

    def make(cols):
        @nki2.jit
        def k(x):
            out = nl2.ndarray((128, cols), dtype=nl2.float32, buffer=nl2.shared_hbm)
            t = nl2.ndarray((128, cols), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=x)
            nisa2.dma_copy(dst=out, src=t)
            return out
        return k

    x = A[0:128, 0:64].copy()
    np.testing.assert_array_equal(make(64)(x), x)
    with pytest.raises(NKIError) as e:
        make(32)(x)
    assert e.value.rule == "dst shape" and "(128, 32)" in str(e.value) and "source (shape (128, 64))" in str(e.value)


def test_loop_whose_first_access_of_a_tile_is_a_write_still_checks_it():
    """Iteration i writes tile i + 1 of a list before reading tile i (a software pipeline): each
    tile's first access in the loop is its one write, and iteration 1 reading what iteration 0 wrote
    is still a loop-carried dependency; reading only the tile written before the loop is valid."""

    def make(carried):
        @nki2.jit
        def k(x):
            out = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.shared_hbm)
            t = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
            bufs = [nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf) for _ in range(3)]
            r = nl2.ndarray((128, 64), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=x)
            nisa2.tensor_copy(dst=bufs[0], src=t)
            for i in nl2.affine_range(2):
                nisa2.tensor_tensor(dst=bufs[i + 1], data1=t, data2=t, op=nl2.add)
                nisa2.tensor_copy(dst=r, src=bufs[i if carried else 0])
            nisa2.dma_copy(dst=out, src=r)
            return out
        return k

    x = A[0:128, 0:64].copy()
    np.testing.assert_array_equal(make(False)(x), x)
    with pytest.raises(NKIError) as e:
        make(True)(x)
    assert e.value.rule == "loop_carried" and "which iteration 0 written" in str(e.value)


def _output_input_tile_and_accumulator(a):
    """(Called inside a kernel.) An HBM output, an SBUF tile holding ``a``'s first block and a zero
    accumulator, all made before the loop under test."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = nl.load(a[0:128, 0:128])
    return out, t, nl.zeros((128, 128), dtype=nl.float32, buffer=nl.sbuf)


def test_loop_log_runs_keep_the_iteration_and_line_of_a_late_conflicting_write():
    """The loop log keeps one entry for a read repeated by many iterations; a write by a late
    iteration (after eight identical reads) still conflicts with the first iteration's read, and
    the report names iteration 0's read, iteration 8's write and their lines."""

    @nki.jit
    def k(a):
        out, t, acc = _output_input_tile_and_accumulator(a)
        for i in nl.affine_range(9):
            acc += nl.add(t, t)  # line of the read
            if i == 8:
                t[...] = nl.load(a[128:256, 0:128])  # line of the write
        nl.store(out, value=acc)
        return out

    src, first = inspect.getsourcelines(k.func)
    read, write = (first + next(n for n, ln in enumerate(src) if tag in ln) for tag in ("# line of the read",
                                                                                       "# line of the write"))
    with pytest.raises(NKIError) as e:
        k(A)
    msg = str(e.value)
    assert e.value.rule == "loop_carried"
    assert "iteration 0 of the nl.affine_range" in msg and "which iteration 8 written" in msg
    assert f":{read} in k, which" in msg and f":{write} in k." in msg


def test_loop_log_runs_of_reads_on_two_lines_are_kept_apart():
    """Reads of one tile from two source lines in alternate iterations are not merged into one run:
    iteration 0 writes the tile before reading it (no conflict there), iteration 1 reads it on the
    other line, and that read, with its own line, is the one reported."""

    @nki.jit
    def k(a):
        out, t, acc = _output_input_tile_and_accumulator(a)
        for i in nl.affine_range(4):
            if i == 0:
                t[...] = nl.load(a[128:256, 0:128])
            if i % 2 == 0:
                acc += nl.multiply(t, 1.0)  # even read
            else:
                acc += nl.add(t, t)  # odd read
        nl.store(out, value=acc)
        return out

    src, first = inspect.getsourcelines(k.func)
    odd = first + next(n for n, ln in enumerate(src) if "# odd read" in ln)
    with pytest.raises(NKIError) as e:
        k(A)
    msg = str(e.value)
    assert e.value.rule == "loop_carried" and "iteration 1 of" in msg and "which iteration 0 written" in msg
    assert f":{odd} in k, which" in msg


def test_loop_of_identical_reads_and_writes_to_private_tiles_is_valid_and_exact():
    """A long affine loop reading the same outside tile in every iteration (one run in the log) and
    writing its own region of an outside tile is valid; values match NumPy bit for bit."""

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a[0:128, 0:128])
        res = nl.ndarray((4, nl.par_dim(128), 128), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(4):
            res[j] = nl.add(t, t)
        for j in nl.affine_range(4):
            nl.store(out[:, j * 128:(j + 1) * 128], value=res[j])
        return out

    np.testing.assert_array_equal(k(A), np.tile(A[0:128, 0:128] + A[0:128, 0:128], (1, 4)))


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16, nl.int32])
def test_binary_op_of_two_tiles_matches_numpy(dtype):
    """``nl.add``/``nl.multiply`` of two same-shape tiles (the op layer's shortcut), of mixed dtypes
    and of a broadcast row (the general path) against NumPy's float32 math rounded once."""
    import ml_dtypes

    npd = {nl.float32: np.float32, nl.bfloat16: ml_dtypes.bfloat16, nl.int32: np.int32}[dtype]
    x = (np.arange(128 * 64).reshape(128, 64) % 97 - 40).astype(npd)
    y = (np.arange(128 * 64).reshape(128, 64) % 13 + 1).astype(npd)

    @nki.jit
    def k(a, b):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        nl.store(o1, value=nl.add(ta, tb))
        nl.store(o2, value=nl.multiply(ta, nl.copy(tb, dtype=nl.float32)))
        nl.store(o3, value=nl.subtract(ta, tb[0:1, :]))
        return o1, o2, o3

    o1, o2, o3 = k(x, y)
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    if dtype == nl.int32:
        np.testing.assert_array_equal(o1, x + y)
        np.testing.assert_array_equal(o3, x - y[0:1, :])
    else:
        np.testing.assert_array_equal(o1, (xf + yf).astype(np.float32).astype(npd))
        np.testing.assert_array_equal(o3, (xf - yf[0:1, :]).astype(np.float32).astype(npd))
    np.testing.assert_array_equal(o2, (xf * yf).astype(np.float32))


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
def test_unary_and_scalar_ops_of_a_tile_match_numpy(dtype):
    """``nl.exp(t)`` and ``nl.multiply(t, 0.5)`` (the op layer's shortcuts for an fp32 tile, the
    general path for bf16) inside an affine loop, against NumPy's float32 math rounded once."""
    import ml_dtypes

    npd = {nl.float32: np.float32, nl.bfloat16: ml_dtypes.bfloat16}[dtype]
    x = (np.arange(4 * 128 * 64).reshape(512, 64) % 61 / 16.0 - 2.0).astype(npd)

    @nki.jit
    def k(a):
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(o1[i * 128:(i + 1) * 128, :], value=nl.exp(t))
            nl.store(o2[i * 128:(i + 1) * 128, :], value=nl.multiply(t, 0.5))
        return o1, o2

    o1, o2 = k(x)
    xf = x.astype(np.float32)
    np.testing.assert_array_equal(o1, np.exp(xf).astype(npd))
    np.testing.assert_array_equal(o2, (x.astype(np.float64) * 0.5).astype(np.float32))


def test_an_affine_loops_tiles_are_freed_when_it_ends_without_the_cyclic_collector():
    """An inner affine loop's log frame refers to itself (the creation tag of its tiles) and keeps
    the outer iteration's tiles it read: it must let them go when it ends, or every such tile waits
    for ``gc`` (a hoisted tiled matmul held hundreds of dead 256 KiB tiles, each new one fresh
    memory). The values stay NumPy's."""
    import gc
    import weakref

    seen = []

    @nki2.jit
    def k(x):
        out = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.shared_hbm)
        acc = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.memset(dst=acc, value=0.0)
        for i in nl2.affine_range(2):
            # (the previous iteration's tile is still named t: at most that one lives)
            assert sum(w() is not None for w in seen) <= 1
            t = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
            seen.append(weakref.ref(t))
            for _ in nl2.affine_range(3):
                nisa2.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl2.add)
        nisa2.dma_copy(dst=out, src=acc)
        return out

    gc.collect()
    gc.disable()
    try:
        got = k(A)
        k(A)
    finally:
        gc.enable()
    assert len(seen) == 4
    want = np.zeros((128, 512), np.float32)
    for i in range(2):
        for _ in range(3):
            want = want + A[i * 128:(i + 1) * 128]
    np.testing.assert_array_equal(got, want)


def _matmul_kernel(view):
    """Three K steps accumulated in one PSUM tile, written whole (the in-place fast path) or, with
    ``view``, through the view ``acc[:, :]`` (the general path)."""

    @nki2.jit
    def k(lhsT, rhs):
        out = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.shared_hbm)
        acc = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.psum)
        dst = acc[:, :] if view else acc
        for i in nl2.affine_range(3):
            a = nl2.ndarray((128, 128), dtype=nl2.float32, buffer=nl2.sbuf)
            b = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=a, src=lhsT[i * 128:(i + 1) * 128, :])
            nisa2.dma_copy(dst=b, src=rhs[i * 128:(i + 1) * 128, :])
            nisa2.nc_matmul(dst=dst, stationary=a, moving=b)
        res = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=res, src=acc)
        nisa2.dma_copy(dst=out, src=res)
        return out

    return k


def test_matmul_accumulating_in_place_equals_the_general_path_and_numpy(monkeypatch):
    """The whole-PSUM-tile in-place add gives the bits of the general path (a view of the same tile)
    and of NumPy's fp32 ``p0 + p1 + p2`` of the K steps' products."""
    from nki_kernels.simulator.instructions import operands

    taken = []
    fast_add = operands._add_in_place
    monkeypatch.setattr(operands, "_add_in_place", lambda d, v: taken.append(fast_add(d, v)) or taken[-1])
    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((384, 128)).astype(np.float32)
    rhs = rng.standard_normal((384, 512)).astype(np.float32)
    fast = _matmul_kernel(False)(lhsT, rhs)
    assert taken == [False, True, True]  # (the first matmul overwrites: the general path)
    taken.clear()
    general = _matmul_kernel(True)(lhsT, rhs)
    assert not any(taken)
    want = lhsT[:128].T @ rhs[:128]
    for i in (1, 2):
        want = want + lhsT[i * 128:(i + 1) * 128].T @ rhs[i * 128:(i + 1) * 128]
    np.testing.assert_array_equal(fast, general)
    np.testing.assert_array_equal(fast, want)


def _psum_kernel(body, sd=nl2.float32, md=nl2.float32, width=512):
    """A kernel that DMAs a [128, 128] stationary (dtype ``sd``) and a [128, 512] moving operand (``md``)
    into SBUF, runs ``body(acc, a, b)`` on a [128, width] fp32 PSUM tile and stores its first 512
    columns."""

    @nki2.jit
    def k(lhsT, rhs):
        out = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.shared_hbm)
        acc = nl2.ndarray((128, width), dtype=nl2.float32, buffer=nl2.psum)
        a = nl2.ndarray((128, 128), dtype=sd, buffer=nl2.sbuf)
        b = nl2.ndarray((128, 512), dtype=md, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=a, src=lhsT)
        nisa2.dma_copy(dst=b, src=rhs)
        body(acc, a, b)
        res = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=res, src=acc[:, 0:512])
        nisa2.dma_copy(dst=out, src=res)
        return out

    return k


def test_matmul_into_a_partly_written_psum_tile_overwrites_the_rest():
    """A matmul into the left half first, then into the whole tile: the left half accumulates, the
    right half (never written) is overwritten -- not added to its NaN fill by the in-place path."""
    rng = np.random.default_rng(4)
    lhsT = rng.standard_normal((128, 128)).astype(np.float32)
    rhs = rng.standard_normal((128, 512)).astype(np.float32)

    def body(acc, a, b):
        nisa2.nc_matmul(dst=acc[:, 0:256], stationary=a, moving=b[:, 0:256])
        for _ in nl2.affine_range(2):
            nisa2.nc_matmul(dst=acc, stationary=a, moving=b)

    got = _psum_kernel(body)(lhsT, rhs)
    p = lhsT.T @ rhs
    want = np.concatenate([p[:, :256] + p[:, :256] + p[:, :256], p[:, 256:] + p[:, 256:]], axis=1)
    np.testing.assert_array_equal(got, want)


def test_matmuls_into_views_of_a_psum_tile_overwrite_then_accumulate_as_numpy():
    """Matmuls into views only (nki-library's ``psum[0:128, 0:512]``): the left half first, then the
    whole-tile view (left adds, right overwrites), then it again and the right half (every element
    written: both add) -- fp32 sums in order, bit for bit."""
    rng = np.random.default_rng(6)
    lhsT = rng.standard_normal((128, 128)).astype(np.float32)
    rhs = rng.standard_normal((128, 512)).astype(np.float32)

    def body(acc, a, b):
        nisa2.nc_matmul(dst=acc[:, 0:256], stationary=a, moving=b[:, 0:256])
        nisa2.nc_matmul(dst=acc[0:128, 0:512], stationary=a, moving=b)
        nisa2.nc_matmul(dst=acc[0:128, 0:512], stationary=a, moving=b)
        nisa2.nc_matmul(dst=acc[:, 256:512], stationary=a, moving=b[:, 256:512])

    got = _psum_kernel(body)(lhsT, rhs)
    # (each product of the shapes the kernel multiplies: BLAS may round a column block of a wider
    # product differently from the block multiplied alone)
    p, left, right = lhsT.T @ rhs, lhsT.T @ rhs[:, 0:256], lhsT.T @ rhs[:, 256:512]
    want = np.concatenate([(left + p[:, :256]) + p[:, :256], (p[:, 256:] + p[:, 256:]) + right], axis=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("placed", [False, True], ids=["allocated", "placed"])
def test_psum_views_found_whole_are_told_apart_by_place_and_tile(placed):
    """A view found wholly written (remembered so a loop's matmuls into ``psum[0:128, 0:T]`` read the
    written-elements mask once) is that region of that tile only: a view of the same shape elsewhere,
    one that is partly written, and the same view of a fresh tile still overwrite what was never
    written, as NumPy's sums say."""
    T = 32

    @nki2.jit
    def k(lhsT, rhs):
        out = nl2.ndarray((2, 128, 4 * T), dtype=nl2.float32, buffer=nl2.shared_hbm)
        a = nl2.ndarray((128, 128), dtype=nl2.float32, buffer=nl2.sbuf)
        b = nl2.ndarray((128, T), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=a, src=lhsT)
        nisa2.dma_copy(dst=b, src=rhs)
        res = nl2.ndarray((128, 4 * T), dtype=nl2.float32, buffer=nl2.sbuf)
        for t in range(2):  # the second tile is fresh where the first one's views were found whole
            acc = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.psum,
                              **({"address": (0, 2048 * t)} if placed else {}))
            nisa2.nc_matmul(dst=acc[0:128, 3 * T:4 * T], stationary=a, moving=b, accumulate=False)
            nisa2.nc_matmul(dst=acc[0:128, 3 * T:4 * T], stationary=a, moving=b)
            for _ in range(3):
                nisa2.nc_matmul(dst=acc[0:128, 0:T], stationary=a, moving=b)  # overwrite, then add twice
            nisa2.nc_matmul(dst=acc[0:128, T:2 * T], stationary=a, moving=b)  # same shape, elsewhere
            nisa2.nc_matmul(dst=acc[0:64, 2 * T:3 * T], stationary=a[:, 0:64], moving=b)
            nisa2.nc_matmul(dst=acc[0:128, 2 * T:3 * T], stationary=a, moving=b)  # top half adds
            nisa2.tensor_copy(dst=res, src=acc[0:128, 0:4 * T])
            nisa2.dma_copy(dst=out[t], src=res)
        return out

    rng = np.random.default_rng(8)
    lhsT = rng.standard_normal((128, 128)).astype(np.float32)
    rhs = rng.standard_normal((128, T)).astype(np.float32)
    p = lhsT.T @ rhs
    third = p.copy()
    third[:64] = (lhsT[:, 0:64].T @ rhs) + p[:64]  # (the 64-row product as the kernel multiplies it)
    want = np.concatenate([(p + p) + p, p, third, p + p], axis=1)
    got = k(lhsT, rhs)
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], want)


def test_accumulate_true_into_a_partly_written_psum_tile_is_still_rejected():
    """Planted bug next to the in-place path: after a matmul into the left half, ``accumulate=True``
    into the whole tile adds onto never-written elements (the right half)."""

    def body(acc, a, b):
        nisa2.nc_matmul(dst=acc[:, 0:256], stationary=a, moving=b[:, 0:256])
        nisa2.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=True)

    with pytest.raises(NKIError) as e:
        _psum_kernel(body)(A[:128, :128].copy(), A[:128].copy())
    assert e.value.rule == "matmul accumulate" and "never written" in str(e.value)


@pytest.mark.parametrize("bug", ["two-bank dst", "int8 operands", "double_row on fp32"])
def test_matmul_rules_behind_the_default_case_shortcuts_still_apply(bug):
    """nc_matmul checks its common case (a one-bank PSUM tile, fp32 operands, no perf_mode) without
    the general layers; each planted bug beside that case is still rejected."""
    dt_ops = nl2.int8 if bug == "int8 operands" else nl2.float32
    perf = nisa2.matmul_perf_mode.double_row if bug == "double_row on fp32" else nisa2.matmul_perf_mode.none

    def body(acc, a, b):
        nisa2.nc_matmul(dst=acc, stationary=a, moving=b, perf_mode=perf)

    k = _psum_kernel(body, dt_ops, dt_ops, 1024 if bug == "two-bank dst" else 512)
    with target.use("gen3"), pytest.raises(NKIError) as e:  # (the rule of NeuronCore-v2/v3: the current API's default target is v4)
        k(A[:128, :128].copy(), A[:128].copy())
    want = {"two-bank dst": ("PSUM bank", "crossing from bank 0 into bank 1"),
            "int8 operands": ("operand", "has dtype int8"),
            "double_row on fp32": ("perf_mode", "perf_mode=double_row")}[bug]
    assert e.value.rule == want[0] and want[1] in str(e.value)


@pytest.mark.parametrize("fp32_side", ["stationary", "moving"])
def test_matmul_of_float32_with_bfloat16_is_rejected_naming_the_float32_operand(fp32_side):
    """The operand dtype pairing rule, checked once per matmul: float32 needs a float32 partner."""
    other = "moving" if fp32_side == "stationary" else "stationary"
    dtypes = {fp32_side: nl2.float32, other: nl2.bfloat16}

    def body(acc, a, b):
        nisa2.nc_matmul(dst=acc, stationary=a, moving=b)

    with pytest.raises(NKIError) as e:
        _psum_kernel(body, dtypes["stationary"], dtypes["moving"])(A[:128, :128].copy(), A[:128].copy())
    assert f"{fp32_side} is float32 but {other} is bfloat16" in str(e.value)


def _block_kernel(general, read_unwritten=False, carried=False):
    """Blocks of a [4, 128, 64] SBUF tensor loaded one by one (``b[k] = nl.load``: the block fast
    path, or with ``general`` ``b[k, :, :]``: the general one), then summed."""

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        b = nl.ndarray((4, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(3 if read_unwritten else 4):
            t = nl.load(x[0:128, i * 64:(i + 1) * 64])
            if general:
                b[i, :, :] = t
            else:
                b[i] = t
        if carried:
            for i in nl.affine_range(4):
                b[i] = nl.add(b[i], b[(i + 1) % 4])  # reads a block another iteration writes
        acc = nl.add(nl.add(b[0], b[1]), nl.add(b[2], b[3]))
        nl.store(out, value=acc)
        return out

    return k


def test_block_assignment_fast_path_equals_the_general_path_and_numpy(monkeypatch):
    from nki_kernels.simulator.core import Tile

    monkeypatch.setattr(config, "vectorize", False)  # (the per-iteration path: batched iterations take neither)
    taken = []
    set_block = Tile._set_block
    monkeypatch.setattr(Tile, "_set_block", lambda self, k, v: taken.append(set_block(self, k, v)) or taken[-1])
    want = (A[:128, 0:64] + A[:128, 64:128]) + (A[:128, 128:192] + A[:128, 192:256])
    fast = _block_kernel(False)(A)
    assert taken == [True] * 4
    general = _block_kernel(True)(A)
    assert len(taken) == 4
    np.testing.assert_array_equal(fast, general)
    np.testing.assert_array_equal(fast, want)


def test_block_assignment_fast_path_keeps_the_uninitialised_and_loop_carried_reports():
    """Planted bugs next to ``b[k] = tile``: a block never assigned is read (reported; with the check
    off it reads the NaN fill), and an iteration reads a block that another one assigns."""
    from nki_kernels.simulator import config

    with pytest.raises(NKIError) as e:
        _block_kernel(False, read_unwritten=True)(A)
    assert e.value.rule == "uninit"
    with config.override(uninit="off"):
        assert np.isnan(_block_kernel(False, read_unwritten=True)(A)).all()
    with pytest.raises(NKIError) as e:
        _block_kernel(False, carried=True)(A)
    assert e.value.rule == "loop_carried"


# --- a standalone DMA from HBM into a fresh SBUF tile views HBM copy-on-write ----------------------
_shared = []


@nki2.jit
def _borrowing_kernel(x, y):
    """x -> scratch HBM -> t (fresh: a view of scratch), scratch overwritten with y (t keeps x), t's
    first row zeroed (t's own copy; scratch keeps y), a tile viewed before its DMA (copied into)."""
    nl2, nisa2 = nki2.language, nki2.isa
    out = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.shared_hbm)
    out_scratch = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.shared_hbm)
    out_viewed = nl2.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl2.shared_hbm)
    out_row = nl2.ndarray((3, x.shape[1]), dtype=x.dtype, buffer=nl2.shared_hbm)
    scratch = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.shared_hbm)
    nisa2.dma_copy(dst=scratch, src=x)
    t = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=t, src=scratch)
    _shared.append(np.shares_memory(t._data, scratch.data))
    u = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=u, src=y)
    nisa2.dma_copy(dst=scratch, src=u)  # the HBM under t changes: t keeps x
    nisa2.memset(dst=t[0:1, :], value=0.0)  # t's own copy from here on: scratch keeps y
    nisa2.dma_copy(dst=out, src=t)
    nisa2.dma_copy(dst=out_scratch, src=scratch)
    v = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=v, src=x)  # (v views x)
    nisa2.memset(dst=v[64:65, :], value=1.0)  # a write through a view of it: v takes its copy
    nisa2.dma_copy(dst=out_row, src=v[63:66, :])
    w = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    top = w[0:64, :]  # a view made before w is written: it must see the DMA's values
    nisa2.dma_copy(dst=w, src=x)
    _shared.append(np.shares_memory(w._data, x.data))
    nisa2.dma_copy(dst=out_viewed, src=top)
    return out, out_scratch, out_viewed, out_row


def test_dma_into_a_fresh_tile_views_hbm_copy_on_write():
    x = A[:128, :64].copy()
    y = A[128:256, :64].copy()
    x0, y0 = x.copy(), y.copy()
    _shared.clear()
    out, out_scratch, out_viewed, out_row = _borrowing_kernel(x, y)
    assert _shared == [True, False]  # (the fresh tile viewed HBM; the viewed one was copied into)
    want = x0.copy()
    want[0] = 0
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out_scratch, y0)
    np.testing.assert_array_equal(out_viewed, x0[:64])
    np.testing.assert_array_equal(out_row, np.stack([x0[63], np.ones(64, np.float32), x0[65]]))
    np.testing.assert_array_equal(x, x0)  # the caller's arrays are untouched
    np.testing.assert_array_equal(y, y0)


@nki.jit
def _view_of_a_loaded_tile(x):
    out = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)  # (t views HBM copy-on-write)
    v = t[0:64, :]
    t[...] = nl.zeros(x.shape, dtype=x.dtype)  # t takes its copy: v, a view of t, sees the zeros
    nl.store(out, value=nl.copy(v))
    return out


@nki2.jit
def _views_of_a_dma_tile(x):
    nl2, nisa2 = nki2.language, nki2.isa
    out = nl2.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl2.shared_hbm)
    out_ap = nl2.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl2.shared_hbm)
    t = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=t, src=x)
    v = t[0:64, :]
    w = t.ap(pattern=[[x.shape[1], 64], [1, x.shape[1]]], offset=64 * x.shape[1])  # rows 64..127
    nisa2.memset(dst=t, value=3.0)  # t takes its copy: both views follow
    nisa2.dma_copy(dst=out, src=v)
    nisa2.dma_copy(dst=out_ap, src=w)
    return out, out_ap


def test_views_of_a_tile_that_takes_its_copy_on_write_copy_see_its_later_writes():
    x = A[:128, :16].copy()
    np.testing.assert_array_equal(_view_of_a_loaded_tile(x), np.zeros((64, 16), np.float32))
    out, out_ap = _views_of_a_dma_tile(x)
    np.testing.assert_array_equal(out, np.full((64, 16), 3, np.float32))
    np.testing.assert_array_equal(out_ap, np.full((64, 16), 3, np.float32))
    np.testing.assert_array_equal(x, A[:128, :16])
