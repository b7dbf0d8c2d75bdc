"""First-generation ``nl`` names added from the reference pages, against float64 NumPy math,
and the rules they bring (planted bugs rejected, valid edges accepted)."""

import math

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki
from nki_kernels.simulator.instructions import target

RNG = np.random.default_rng(7)


def run1(fn, *arrays, grid=()):
    """Run ``fn`` (tiles -> tile) as a kernel storing its result into a fresh output."""

    @nki.jit
    def kernel(*tensors):
        res = fn(*[nl.load(t) for t in tensors])
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out

    return kernel[grid](*arrays)


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _gelu(v):
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


def _num_dx(f, v, h=1e-4):
    return (f(v + h) - f(v - h)) / (2 * h)


X = np.linspace(-5, 5, 128 * 16).reshape(128, 16).astype(np.float32)


@pytest.mark.parametrize("name,f", [
    ("gelu_apprx_sigmoid", lambda v: v * _sig(1.702 * v)),
    ("gelu_dx", lambda v: _num_dx(_gelu, v)),
    ("silu_dx", lambda v: _num_dx(lambda u: u * _sig(u), v)),
    ("gelu_apprx_sigmoid_dx", lambda v: _num_dx(lambda u: u * _sig(1.702 * u), v)),
])
def test_activation_functions_and_derivatives(name, f):
    np.testing.assert_allclose(run1(getattr(nl, name), X), f(X.astype(np.float64)), atol=2e-5, rtol=1e-5)


def test_abs_max_abs_min_keep_the_signed_value_and_ties_return_y():
    a = np.array([[-5.0, 1.0, 2.0, -3.0]], np.float32).repeat(4, 0)
    b = np.array([[3.0, -1.0, -7.0, 3.0]], np.float32).repeat(4, 0)
    with target.use("gen4"):  # (NeuronCore-v4 and newer only, as the page says)
        np.testing.assert_array_equal(run1(nl.abs_max, a, b), np.where(np.abs(a) > np.abs(b), a, b))
        np.testing.assert_array_equal(run1(nl.abs_min, a, b), np.where(np.abs(a) < np.abs(b), a, b))
        assert run1(nl.abs_max, a, b)[0, 1] == -1.0  # |1| == |-1|: y


def test_shared_identity_matrix_is_uint8_unless_told():
    # the page: dtype "default to be np.uint8"; "the same behavior to nki.language.shared_constant",
    # an HBM tensor the kernel loads (as the documentation's modulo-allocation tests do)
    ident = run1(lambda: nl.load(nl.shared_identity_matrix(16)))
    assert ident.dtype == np.uint8
    np.testing.assert_array_equal(ident, np.eye(16, dtype=np.uint8))
    assert run1(lambda: nl.load(nl.shared_identity_matrix(8, dtype=nl.float32))).dtype == np.float32


def test_shared_identity_matrix_is_a_read_only_hbm_constant():
    # a shared constant: compute on it directly is compute on HBM, and it cannot be stored into
    with pytest.raises(NKIError, match="HBM"):
        run1(lambda: nl.multiply(nl.shared_identity_matrix(8, dtype=nl.float32), 2.0))

    @nki.jit
    def store_into_identity(x):
        ident = nl.shared_identity_matrix(8, dtype=nl.float32)
        nl.store(ident, value=nl.load(x))
        return ident

    with pytest.raises(NKIError, match="shared constant"):
        store_into_identity(np.zeros((8, 8), np.float32))


def test_static_cast_outside_and_inside_a_kernel():
    v = RNG.standard_normal((8, 8)).astype(np.float32)
    got = nl.static_cast(v, nl.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, v.astype(ml_dtypes.bfloat16))
    ints = nl.static_cast(np.array([1.5, 2.5, -1e10, 3.4]), nl.int8)
    np.testing.assert_array_equal(ints, [1, 2, -128, 3])  # truncate toward zero, saturate (dtypes.cast)
    out = run1(lambda t: nl.static_cast(t, nl.float16), v)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, v.astype(np.float16))


def test_finfo_and_fp32_min():
    assert nl.fp32.min == float(np.finfo(np.float32).min)
    assert nl.finfo(nl.bfloat16).max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    with pytest.raises(TypeError, match="not a floating"):
        nl.finfo(nl.int32)


def test_ds_selects_start_and_size():
    v = RNG.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out[:, nl.ds(0, 16)], nl.load(a[:, nl.ds(20, 16)]))
        return out

    np.testing.assert_array_equal(k(v), v[:, 20:36])


def test_shared_constant_is_read_only_hbm_data_of_the_given_dtype(tmp_path):
    ident = np.identity(128, dtype=np.int8)
    path = tmp_path / "c.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(3, 4))

    @nki.jit
    def k():
        c = nl.shared_constant(ident, dtype=nl.bfloat16)
        f = nl.shared_constant(str(path))
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.load(c, dtype=nl.float32))
        out2 = nl.ndarray((3, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out2, nl.load(f))
        return out, out2

    a, b = k()
    np.testing.assert_array_equal(a, np.identity(128))
    np.testing.assert_array_equal(b, np.arange(12).reshape(3, 4))


def test_random_seed_makes_dropout_and_rand_deterministic():
    v = np.ones((128, 256), np.float32)

    def body(t):
        nl.random_seed(seed=1234)
        return nl.dropout(t, rate=0.25)

    a, b = run1(body, v), run1(body, v)
    np.testing.assert_array_equal(a, b)
    frac = 1.0 - a.mean()
    assert 0.2 < frac < 0.3  # ~rate of the elements dropped, no rescaling
    assert set(np.unique(a)) <= {0.0, 1.0}

    @nki.jit
    def r():
        nl.random_seed(seed=5)
        t = nl.rand((128, 64), dtype=nl.float32)
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    x, y = r(), r()
    np.testing.assert_array_equal(x, y)
    assert 0.0 <= x.min() and x.max() < 1.0 and 0.4 < x.mean() < 0.6


def test_dropout_rate_per_partition():
    v = np.ones((128, 512), np.float32)
    rates = np.where(np.arange(128) < 64, 0.0, 1.0).astype(np.float32)[:, None]
    got = run1(lambda t, r: nl.dropout(t, rate=r), v, rates)
    assert got[:64].min() == 1.0 and got[64:].max() == 0.0


def test_gather_flattened_per_partition_and_out_of_range_rejected():
    data = RNG.standard_normal((64, 4, 8)).astype(np.float32)
    idx = RNG.integers(0, 32, (64, 10)).astype(np.uint32)
    want = np.take_along_axis(data.reshape(64, 32), idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(run1(nl.gather_flattened, data, idx), want)
    bad = idx.copy()
    bad[3, 2] = 32
    with pytest.raises(NKIError, match="gather index range"):
        run1(nl.gather_flattened, data, bad)


def test_rms_norm_and_prelu():
    x = RNG.standard_normal((128, 96)).astype(np.float32)
    w = RNG.standard_normal((128, 96)).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).sum(1, keepdims=True) / 96 + 1e-6) * w
    got = run1(lambda a, b: nl.rms_norm(a, b, axis=1, n=96), x, w)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    got = run1(lambda a: nl.prelu(a, 0.1), x)
    np.testing.assert_allclose(got, np.where(x64 >= 0, x64, 0.1 * x64), rtol=1e-6)


def test_memory_predicates():
    @nki.jit
    def k(a):
        t = nl.load(a)
        p = nl.zeros((8, 8), dtype=nl.float32, buffer=nl.psum)
        assert nl.is_sbuf(t) and nl.is_on_chip(t) and not nl.is_hbm(t)
        assert nl.is_psum(p) and nl.is_on_chip(p)
        assert nl.is_hbm(a) and not nl.is_on_chip(a)
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    k(np.zeros((8, 8), np.float32))


def test_mgrid_four_axes():
    v = RNG.standard_normal((2, 16, 3, 5)).astype(np.float32)

    @nki.jit
    def k(a):
        g = nl.mgrid[0:16, 0:3, 0:5, 0:1]
        out = nl.ndarray((16, 3, 5), a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a[1, g.p, g.x, g.y])
        nl.store(out[g.p, g.x, g.y], t)
        assert g.z.shape[-1] == 1
        with pytest.raises(AttributeError):
            nl.mgrid[0:4, 0:2].y
        return out

    np.testing.assert_array_equal(k(v), v[1])


def test_hbm_reshape_keyword_and_store_through_view_counts_as_output_write():
    v = RNG.standard_normal((4, 6, 32)).astype(np.float32)

    @nki.jit
    def k(a):
        out = nl.ndarray((4, 6, 32), a.dtype, buffer=nl.shared_hbm)
        flat = out.reshape(shape=(24, 32))
        nl.store(flat, nl.load(a.reshape((24, 32))))
        return out

    np.testing.assert_array_equal(k(v), v)  # no [uninit] for a fully written output

    @nki.jit
    def half(a):
        out = nl.ndarray((4, 6, 32), a.dtype, buffer=nl.shared_hbm)
        flat = out.reshape(shape=(24, 32))
        nl.store(flat[0:12, :], nl.load(a.reshape((24, 32))[0:12, :]))
        return out

    with pytest.warns(UserWarning, match=r"\[uninit\].*384 of its 768"):
        got = half(v)  # planted bug: half the output never stored, found through the view's writes
    np.testing.assert_array_equal(got.reshape(24, 32)[:12], v.reshape(24, 32)[:12])
    assert np.isnan(got.reshape(24, 32)[12:]).all()


def test_indirect_load_gathers_rows_and_masks_out_of_range():
    data = RNG.standard_normal((3, 50, 16)).astype(np.float32)
    rows = np.array([(7 * i) % 50 for i in range(128)], np.int32)[:, None]
    rows[100:] = 9999  # only valid under the mask

    @nki.jit
    def k(a, r, n_valid):
        out = nl.zeros((128, 16), a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(16)[None, :]
        idx = nl.load(r)
        t = nl.load(a[2, idx, i_f], mask=(i_p < n_valid))
        nl.store(out[i_p, i_f], t, mask=(i_p < n_valid))
        return out

    got = k(data, rows, 100)
    np.testing.assert_array_equal(got[:100], data[2, rows[:100, 0]])
    with pytest.raises(NKIError, match="out-of-bounds"):
        k(data, rows, 128)  # planted bug: out-of-range offsets not masked


def test_indirect_index_must_be_an_integer_tile():
    data = np.zeros((4, 8), np.float32)

    @nki.jit
    def k(a, r):
        out = nl.ndarray((4, 8), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a[nl.load(r), nl.arange(8)[None, :]]))
        return out

    with pytest.raises(NKIError, match="indirect index"):
        k(data, np.zeros((4, 1), np.float32))


def _overlapping_writers(values_differ):
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        if values_differ:
            t = nl.add(t, nl.program_id(0))
        nl.store(out, t)  # every program stores the whole output
        return out

    return k


def test_programs_storing_identical_values_is_not_a_race():
    v = RNG.standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_array_equal(_overlapping_writers(False)[4](v), v)


def test_programs_storing_different_values_is_a_race():
    with pytest.raises(NKIError, match="race"):
        _overlapping_writers(True)[4](np.ones((64, 32), np.float32))


def test_partition_vectors_broadcast_along_the_free_axes_when_p_equals_f():
    # A [P] tile (a reduction without keepdims) is per partition; with P == F NumPy's
    # right-aligned broadcasting would silently spread it along the free axis instead.
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    s = x.sum(axis=1, dtype=np.float64)

    @nki.jit
    def k(a):
        t = nl.load(a)
        v = nl.sum(t, axis=1)  # [128]
        assert v.shape == (128,)
        outs = [nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm) for _ in range(4)]
        nl.store(outs[0], v.broadcast_to((128, 128)))
        nl.store(outs[1], nl.multiply(t, v))
        nl.store(outs[2], nl.where(nl.greater(t, 0.0), v, 0.0))
        nl.store(outs[3], v)  # stored into a [P, F] region: repeated along F
        return tuple(outs)

    bcast, prod, sel, stored = k(x)
    col = s[:, None]
    # (an fp32 sum of 128 values is exact to ~1e-6 of their magnitudes, not of the sum: a row whose
    # values cancel has a small sum with a larger relative error)
    tol = dict(rtol=1e-5, atol=2e-6 * float(np.abs(x).sum(axis=1).max()))
    np.testing.assert_allclose(bcast, np.broadcast_to(col, x.shape), **tol)
    np.testing.assert_allclose(prod, x * col, rtol=1e-5, atol=tol["atol"] * float(np.abs(x).max()))
    np.testing.assert_allclose(sel, np.where(x > 0, col, 0.0), **tol)
    np.testing.assert_allclose(stored, np.broadcast_to(col, x.shape), **tol)


def test_a_partition_vector_indexes_as_its_column():
    x = RNG.standard_normal((128, 6)).astype(np.float32)

    @nki.jit
    def k(a):
        t = nl.load(a)
        col = t[:, 2]  # a [P] vector
        col[:, 0] = nl.multiply(col[:, 0], 2.0)  # written as the [P, 1] column: reaches t
        out = nl.ndarray((128, 6), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    want = x.copy()
    want[:, 2] *= 2
    np.testing.assert_array_equal(k(x), want)


def test_writes_through_a_view_of_a_loaded_tile_reach_the_tile():
    # Loaded tiles view HBM copy-on-write; a view of one must write into the tile's own copy.
    x = np.ones((128, 6), np.float32)

    @nki.jit
    def k(a):
        t = nl.load(a)
        v = t[:, 2:4]
        v[:, 0:1] = nl.multiply(v[:, 0:1], 3.0)
        r = t.reshape((128, 2, 3))
        r[:, 1, 2] = 5.0
        out = nl.ndarray((128, 6), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    want = x.copy()
    want[:, 2] = 3.0
    want[:, 5] = 5.0
    np.testing.assert_array_equal(k(x), want)
    np.testing.assert_array_equal(x, 1.0)  # the input is untouched


def test_trace_mode_helper_runs_inside_the_callers_program():
    @nki.jit(mode="trace")
    def helper(a, out, rows):
        pid = nl.program_id(1)  # the caller's 2-D grid
        t = nl.load(a[rows, :])
        nl.store(out[rows, :], nl.add(t, pid))

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0) * 2 + nl.program_id(1)
        helper(a, out, slice(i * 16, i * 16 + 16))
        return out

    x = RNG.standard_normal((64, 8)).astype(np.float32)
    want = x + np.repeat(np.array([0, 1, 0, 1], np.float32), 16)[:, None]
    np.testing.assert_allclose(k[2, 2](x), want)


def test_psum_accumulation_into_a_fresh_ndarray_starts_the_group():
    # `psum_tile += nc_matmul(...)` into never-written PSUM (an nl.ndarray): the first matmul of the
    # accumulation group overwrites, as the official attention tutorial v8a relies on.
    from nki_kernels.simulator import isa as nisa

    a = RNG.standard_normal((128, 3 * 128)).astype(np.float32)
    b = RNG.standard_normal((128, 3 * 64)).astype(np.float32)

    @nki.jit
    def k(x, y):
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        for i in nl.affine_range(3):
            acc[...] += nisa.nc_matmul(nl.load(x[:, i * 128:(i + 1) * 128]), nl.load(y[:, i * 64:(i + 1) * 64]))
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(acc))
        return out

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = sum(a64[:, i * 128:(i + 1) * 128].T @ b64[:, i * 64:(i + 1) * 64] for i in range(3))
    np.testing.assert_allclose(k(a, b), want, rtol=1e-4, atol=1e-4)


def test_sbuf_accumulation_into_a_fresh_ndarray_is_still_an_uninit_read():
    @nki.jit
    def k(x):
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        acc[...] += nl.load(x)  # planted bug: SBUF has no accumulation groups
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out

    with pytest.raises(NKIError, match="uninit"):
        k(np.ones((128, 64), np.float32))


def test_first_generation_names_stay_out_of_the_standalone_namespace():
    from nki_kernels.simulator.standalone import language as nl2

    gen1_only = ["mgrid", "arange", "par_dim", "spmd_dim", "nc", "loop_reduce", "static_cast", "fp32", "finfo"]
    for name in gen1_only:
        assert hasattr(nl, name), name  # documented in neuronxcc.nki.language
        assert not hasattr(nl2, name), name  # not in the current nki.language reference
        assert name not in nl2.__all__
    for name in ["ds", "shared_constant", "shared_identity_matrix", "rand", "random_seed", "gelu_apprx_sigmoid",
                 "silu_dx", "gelu_dx", "abs_max", "abs_min", "rms_norm", "gather_flattened", "is_psum", "is_sbuf",
                 "is_hbm", "is_on_chip", "prelu", "NkiTensor", "NKIObject"]:
        assert hasattr(nl2, name), name  # the current reference's names
    for name in ["Tile", "Access", "HBMTensor", "np", "current"]:
        assert name not in nl.__all__ and name not in nl2.__all__, name


def test_psum_accumulation_groups_per_block_of_an_aliased_mod_alloc_tensor():
    # All blocks of this PSUM tensor live in one bank (num_bank_tiles=(1,)): each block's first
    # `+=` starts its own accumulation group, it does not add to the previous block's sums (the
    # official attention tutorial v9 accumulates every q tile this way).
    from nki_kernels.simulator import isa as nisa
    from nki_kernels.simulator.nki import compiler as ncc

    a = RNG.standard_normal((128, 4 * 2 * 128)).astype(np.float32)
    b = RNG.standard_normal((128, 2 * 64)).astype(np.float32)

    @nki.jit
    def k(x, y):
        acc = nl.ndarray((4, nl.par_dim(128), 64), nl.float32, buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
        out = nl.ndarray((4, 128, 64), nl.float32, buffer=nl.shared_hbm)
        for t in nl.sequential_range(4):
            for j in nl.affine_range(2):
                acc[t, :, :] += nisa.nc_matmul(nl.load(x[:, (t * 2 + j) * 128:(t * 2 + j + 1) * 128]),
                                               nl.load(y[:, j * 64:(j + 1) * 64]))
            nl.store(out[t], nl.copy(acc[t, :, :]))
        return out

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.stack([sum(a64[:, (t * 2 + j) * 128:(t * 2 + j + 1) * 128].T @ b64[:, j * 64:(j + 1) * 64]
                         for j in range(2)) for t in range(4)])
    np.testing.assert_allclose(k(a, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,ref", [(np.add, np.add), (nl.maximum, np.maximum), (np.max, np.maximum)])
def test_loop_reduce_accumulates_into_the_assigned_tile_across_iterations(op, ref):
    x = RNG.standard_normal((5, 128, 32)).astype(np.float32)

    @nki.jit
    def k(a):
        acc = nl.full((128, 32), 0.0 if ref is np.add else -np.inf, nl.float32)
        for i in nl.affine_range(5):
            acc[...] = nl.loop_reduce(nl.load(a[i]), op=op, loop_indices=(i,), name="acc")
        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out

    want = ref.reduce(x.astype(np.float64), axis=0)
    np.testing.assert_allclose(k(x), want, rtol=1e-5, atol=1e-5)


def test_standalone_tensor_copy_casts_through_the_tutorials_dtype_keyword():
    # The official matmul tutorial (hoist_load) copies PSUM into an fp32 SBUF tile with
    # dtype=<bf16 output dtype>, then DMAs that tile into a bf16 output: dtype= is a cast on the
    # way, dst keeps its own dtype.
    from nki_kernels.simulator.standalone import isa as nisa2
    from nki_kernels.simulator.standalone import language as nl2

    x = RNG.standard_normal((128, 64)).astype(np.float32)

    def kernel(dst_dtype, dtype_kw):
        @nki.jit
        def k(a):
            t = nl2.ndarray((128, 64), nl2.float32, buffer=nl2.sbuf)
            nisa2.dma_copy(dst=t, src=a)
            d = nl2.ndarray((128, 64), dst_dtype, buffer=nl2.sbuf)
            nisa2.tensor_copy(dst=d, src=t, dtype=dtype_kw)
            out = nl2.ndarray((128, 64), dst_dtype, buffer=nl2.shared_hbm)
            nisa2.dma_copy(dst=out, src=d)
            return out
        return k

    bf16 = x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(kernel(nl2.bfloat16, nl2.bfloat16)(x), bf16)
    got = kernel(nl2.float32, nl2.bfloat16)(x)  # the tutorial's call: fp32 dst, bf16 dtype=
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, bf16.astype(np.float32))
    np.testing.assert_array_equal(kernel(nl2.float32, None)(x), x)  # without dtype=: bit-exact


def test_a_masked_instruction_leaves_the_destinations_masked_off_elements_alone():
    # `dst[...] = op(..., mask=m)`: only the elements m selects are written (the official flash
    # attention applies its sliding-window select under a mask into an existing score tile).
    from nki_kernels.simulator import isa as nisa

    x = RNG.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def k(a):
        t = nl.load(a)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        t[i_p, i_f] = nl.exp(t, mask=(i_f < 16))
        t[i_p, i_f] = nisa.affine_select(pred=(i_p >= i_f), on_true_tile=t, on_false_value=-1.0, mask=(i_p < 64))
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    want = x.astype(np.float64).copy()
    want[:, :16] = np.exp(want[:, :16])
    rows, cols = np.indices(want.shape)
    sel = rows < 64
    want[sel] = np.where(rows >= cols, want, -1.0)[sel]
    np.testing.assert_allclose(k(x), want, rtol=1e-6)


def test_num_programs_without_a_grid_is_one_program_and_a_bad_axis_is_named():
    @nki.jit
    def k(a):
        out = nl.ndarray((1, 3), nl.float32, buffer=nl.shared_hbm)
        t = nl.zeros((1, 3), nl.float32)
        t[0, 0] = nl.num_programs(0) + nl.program_id(0)
        t[0, 1] = nl.num_programs()
        t[0, 2] = nl.num_programs((0,))
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(k(np.zeros(1, np.float32)), [[1, 1, 1]])

    @nki.jit
    def bad(a):
        return nl.num_programs(1)

    with pytest.raises(NKIError, match=r"num_programs.*axis 1 is outside the launch grid \(2,\)"):
        bad[2](np.zeros(1, np.float32))


@pytest.mark.parametrize("mask", [True, False, "rows"])
def test_a_python_bool_or_column_mask_selects_whole_rows_or_everything(mask):
    # the official flash attention backward masks with `i_q * 128 >= i_k * 512` of loop integers:
    # a Python bool; a [P, 1] array selects whole partitions
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    rows = RNG.random((128, 1)) < 0.5
    m = rows if mask == "rows" else mask

    @nki.jit
    def k(a):
        t = nl.load(a)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        t[i_p, i_f] = nl.exp(t, mask=m)
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    sel = np.broadcast_to(rows if mask == "rows" else np.bool_(mask), x.shape)
    want = np.where(sel, np.exp(x.astype(np.float64)), x)
    np.testing.assert_allclose(k(x), want, rtol=1e-6)


def test_allocation_functions_are_called_with_the_documented_keywords():
    # ncc.psum.alloc(func): func(idx=, pdim_size=, fdim_size=), so a functools.partial binding a leading
    # parameter by keyword works (the official allocated SD-attention kernel does this).
    import functools

    from nki_kernels.simulator.nki import compiler as ncc

    def addr(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    @nki.jit
    def k(a):
        p = nl.ndarray((2, nl.par_dim(128), 64), nl.float32,
                       buffer=ncc.psum.alloc(functools.partial(addr, bank_map={(0,): 1, (1,): 5})))
        out = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            p[i, :, :] = nl.load(a[i])
            nl.store(out[i], nl.copy(p[i, :, :]))
        return out

    x = RNG.standard_normal((2, 128, 64)).astype(np.float32)
    np.testing.assert_array_equal(k(x), x)


def test_accumulating_into_a_placed_psum_block_in_an_affine_loop_is_not_loop_carried():
    from nki_kernels.simulator import isa as nisa
    from nki_kernels.simulator.nki import compiler as ncc

    x = RNG.standard_normal((3, 128, 128)).astype(np.float32)
    y = RNG.standard_normal((3, 128, 256)).astype(np.float32)

    @nki.jit
    def k(a, b):
        acc = nl.ndarray((1, nl.par_dim(128), 256), nl.float32, buffer=ncc.psum.mod_alloc(base_bank=6, num_bank_tiles=(1,)))
        for i in nl.affine_range(3):
            acc[0] += nisa.nc_matmul(nl.load(a[i]), nl.load(b[i]))
        out = nl.ndarray((128, 256), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(acc[0]))
        return out

    want = sum(x[i].T.astype(np.float64) @ y[i] for i in range(3))
    np.testing.assert_allclose(k(x, y), want, rtol=1e-4, atol=1e-4)


def test_scheduling_hints_on_ranges_and_the_nki_tensor_annotation():
    from nki_kernels.simulator import nki as nki1

    def body(a: nki1.tensor) -> nki1.tensor:  # annotations evaluated at def time, as kernels write them
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2, precise_schedule=True):
            nl.store(out[i * 64:(i + 1) * 64, :], nl.load(a[i * 64:(i + 1) * 64, :]))
        return out

    x = RNG.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(body)(x), x)
    with pytest.raises(TypeError, match="unroll_factor"):
        nl.affine_range(2, unroll_factor=2)  # a misspelt or unknown keyword is an error


def test_sbuf_placement_follows_the_neuroncore_versions_sbuf_size():
    # Trn2 (NeuronCore-v3) has 28 MiB SBUF: 224 KiB per partition, so a placement at 176 KiB + 8 KiB
    # (the official allocated SD-attention kernel's) fits there but not on a 192 KiB NeuronCore-v2.
    from nki_kernels.simulator.instructions import target
    from nki_kernels.simulator.nki import compiler as ncc

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 2048), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=176 * 1024))
        t[...] = nl.load(a)
        out = nl.ndarray((128, 2048), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    x = RNG.standard_normal((128, 2048)).astype(np.float32)
    with target.use(target.nc_version.gen3):
        np.testing.assert_array_equal(k(x), x)
    with target.use(target.nc_version.gen2), pytest.raises(NKIError, match="does not fit"):
        k(x)


def test_an_all_integer_index_of_an_sbuf_tensor_is_a_writable_element():
    from nki_kernels.simulator.standalone import isa as nisa2
    from nki_kernels.simulator.standalone import language as nl2

    src = np.arange(6, dtype=np.float32).reshape(3, 2)

    @nki.jit
    def k(s):
        t = nl2.ndarray((128, 1), nl2.float32, buffer=nl2.sbuf)
        nisa2.memset(dst=t, value=0.0)
        nisa2.dma_copy(dst=t[0, 0], src=s[1, 0])  # a DMA into one element of an SBUF tensor
        out = nl2.ndarray((128, 1), nl2.float32, buffer=nl2.shared_hbm)
        nisa2.dma_copy(dst=out, src=t)
        return out

    want = np.zeros((128, 1), np.float32)
    want[0, 0] = src[1, 0]
    np.testing.assert_array_equal(k(src), want)


def test_a_masked_load_assigned_into_a_tile_leaves_the_masked_off_elements_alone():
    # nl.load(..., mask=m) is a DMA of the elements m selects: assigned into an existing tile (or a
    # block of one) the other elements keep their values, as they would on hardware.
    x = RNG.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def k(a):
        t = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for b in nl.affine_range(2):
            t[b] = nl.full((128, 64), 7.0, dtype=nl.float32)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        t[1, i_p, i_f] = nl.load(a[i_p, i_f], mask=(i_f < 16) & (i_p >= 8))
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, t[1])
        return out

    want = np.full((128, 64), 7.0, np.float32)
    want[8:, :16] = x[8:, :16]
    np.testing.assert_array_equal(k(x), want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_narrow_integer_arithmetic_does_not_wrap_at_its_own_width(dtype):
    # "(np.int8, 2) -> np.int32", and the engines compute in fp32: twice a value above half the
    # type's maximum is exact, not wrapped at 8 or 16 bits
    v = np.iinfo(dtype).max // 2 + 10
    a = np.full((128, 8), v, dtype)
    got = run1(lambda t: nl.multiply(t, 2), a)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.full((128, 8), 2 * v, np.int32))
    got = run1(lambda t: nl.add(t, t, dtype=nl.int32), a)
    np.testing.assert_array_equal(got, np.full((128, 8), 2 * v, np.int32))


@nki.jit
def loop_reduced_as_documented(a):
    """``b = nl.loop_reduce(t, op=np.add, loop_indices=[k])`` over the slices of ``a`` [K, 128, F], as
    the page writes it (b made before the loop)."""
    out = nl.ndarray(a.shape[1:], dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.zeros(a.shape[1:], dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(a.shape[0]):
        t = nl.load(a[k])
        b = nl.loop_reduce(t, op=np.add, loop_indices=[k], dtype=nl.float32)
    nl.store(out, b)
    return out


def test_loop_reduce_rebinding_its_destination_accumulates_every_iteration():
    # "The destination tile is also the rhs input to op": the same as b = tensor_tensor(b, a, add)
    a = RNG.standard_normal((5, 128, 16)).astype(np.float32)
    got = loop_reduced_as_documented(a)
    np.testing.assert_allclose(got, a.sum(axis=0, dtype=np.float64), rtol=1e-5, atol=1e-6)


def test_integer_divide_is_computed_in_float_and_truncated_to_the_integer_dtype():
    # The output dtype defaults to the inputs' (int32); the engine divides in fp32 and the float->int
    # conversion truncates toward zero (as the official simulator's NumPy cast; nki-samples' resize
    # kernel floors an int32 quotient): 7 / 2 = 3.5 -> 3, 9 / 2 = 4.5 -> 4, -7 / 2 -> -3
    a = np.tile(np.array([[7, 9, -7, 6]], np.int32), (128, 1))
    b = np.full((128, 4), 2, np.int32)
    got = run1(lambda x, y: nl.divide(x, y), a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.trunc(a / b).astype(np.int32))
    assert (got[0] == [3, 4, -3, 3]).all()


def test_a_block_of_a_two_block_axis_tensor_keeps_its_partition_axis():
    # nki-samples' flash-attention backward passes dy_o_sum[i_q_head] (a [heads, tiles, par_dim(128),
    # 1] tensor) to a helper that reads dy_o_sum_head[j, :, 0] as a [128, 1] scalar operand.
    from nki_kernels.simulator import isa as nisa

    x = RNG.standard_normal((2, 3, 128, 1)).astype(np.float32)
    d = RNG.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def k(xs, data):
        out = nl.ndarray((2, 3, 128, 64), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((2, 3, nl.par_dim(128), 1), nl.float32, buffer=nl.sbuf)
        dd = nl.load(data)
        for h in nl.affine_range(2):
            for j in nl.affine_range(3):
                t[h, j, :, :] = nl.load(xs[h, j])
        for h in nl.affine_range(2):
            head = t[h]  # (a [3, par_dim(128), 1] view: its partition axis is still axis 1)
            for j in nl.affine_range(3):
                nl.store(out[h, j], nisa.tensor_scalar(data=dd, op0=np.multiply, operand0=head[j, :, 0]))
        return out

    np.testing.assert_allclose(k(x, d), x * d[None, None], rtol=1e-6)
