"""The standalone ``nki.language`` against its current reference pages (SDK 2.29+ stub): signatures,
defaults and rules that differ from the first generation, checked against NumPy or the page's rule
(rejections name the argument and the rule; a valid call at the edge of the rule is accepted)."""

import inspect

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import language as shared_nl
from nki_kernels.simulator import nki as gen1_nki
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.instructions import target

from .isa_helpers import to_hbm as _store
from .isa_helpers import to_sbuf as _load
from .test_gen1_language import run1 as run_gen1

nl = nki.language
nisa = nki.isa
rng = np.random.default_rng(11)


def run(fn, *arrays):
    """Run ``fn`` (SBUF tiles -> tile) as a standalone kernel and return its result as an array."""

    @nki.jit
    def kernel(*tensors):
        return _store(fn(*[_load(t) for t in tensors]))

    return kernel(*arrays)


X = rng.standard_normal((128, 32)).astype(np.float32)


# ---------------------------------------------------------------------------
# shared_identity_matrix(n, dtype=uint8, dst=None)
# ---------------------------------------------------------------------------
def test_shared_identity_matrix_defaults_to_uint8():
    got = run(lambda: nl.shared_identity_matrix(16))
    assert got.dtype == np.uint8  # "default to be nl.uint8"
    np.testing.assert_array_equal(got, np.eye(16, dtype=np.uint8))


def test_shared_identity_matrix_writes_into_dst_and_returns_it():
    def body():
        buf = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
        res = nl.shared_identity_matrix(16, nl.bfloat16, dst=buf)
        assert res is buf
        return buf

    got = run(body)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.eye(16, dtype=np.float32))


@pytest.mark.parametrize("shape,buffer,rule", [((16, 8), "sbuf", r"\[n, n\] = \[16, 16\]"),
                                               ((16, 16), "psum", "SBUF")])
def test_shared_identity_matrix_rejects_a_dst_of_another_shape_or_memory(shape, buffer, rule):
    def body():
        buf = nl.ndarray(shape, dtype=nl.float32, buffer=getattr(nl, buffer))
        return nl.shared_identity_matrix(16, nl.float32, dst=buf)

    with pytest.raises(NKIError, match=f"dst.*{rule}"):
        run(body)


# ---------------------------------------------------------------------------
# var: "keepdims: currently ignored; result always has keepdims=True shape"
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("keepdims", [False, True])
def test_var_result_always_has_the_keepdims_shape(keepdims):
    got = run(lambda t: nl.var(t, 1, keepdims=keepdims), X)
    want = np.var(X.astype(np.float64), axis=1, keepdims=True)
    assert got.shape == (128, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_first_generation_var_still_drops_the_axis():
    got = run_gen1(lambda t: shared_nl.var(t, axis=1), X)
    np.testing.assert_allclose(got, np.var(X.astype(np.float64), axis=1), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# device_print(print_prefix, tensor): SBUF or HBM, values printed right away
# ---------------------------------------------------------------------------
def test_device_print_prints_the_values_of_hbm_tensors_regions_and_tiles(capsys):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    @nki.jit
    def kernel(x):
        nl.device_print(print_prefix="whole:", tensor=x)
        nl.device_print("rows:", x[1:3, 0:2])
        t = _load(x)
        nl.device_print("tile:", t)
        return _store(t)

    kernel(x)
    assert capsys.readouterr().out == f"whole: {x}\nrows: {x[1:3, 0:2]}\ntile: {x}\n"


def test_device_print_prefix_must_be_a_string():
    with pytest.raises(NKIError, match="print_prefix must be a constant string"):
        run(lambda t: nl.device_print(3, t) or t, X)


# ---------------------------------------------------------------------------
# softmax(x, axis=-1, dtype=None)
# ---------------------------------------------------------------------------
def _softmax(v, axis):
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax_defaults_to_the_last_axis_and_takes_dtype_by_position():
    np.testing.assert_allclose(run(nl.softmax, X), _softmax(X.astype(np.float64), 1), rtol=1e-5, atol=1e-7)
    got = run(lambda t: nl.softmax(t, 1, nl.bfloat16), X)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float64), _softmax(X.astype(np.float64), 1), rtol=1e-2, atol=1e-3)


# ---------------------------------------------------------------------------
# trailing parameters by position, in the stub's order
# ---------------------------------------------------------------------------
I32 = rng.integers(0, 1000, (128, 16)).astype(np.int32)
POS = (np.abs(X) + 0.5).astype(np.float32)
B = rng.standard_normal((128, 64)).astype(np.float32)
W = rng.standard_normal((128, 1)).astype(np.float32)
f64 = X.astype(np.float64)


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


CASES = {  # name: (call with positional trailing arguments, inputs, NumPy reference, result dtype)
    "mean": (lambda t: nl.mean(t, 1, nl.float32, True), (X,), lambda: f64.mean(1, keepdims=True), np.float32),
    "prod": (lambda t: nl.prod(t, 1, nl.float32, True), (POS[:, :4],),
             lambda: POS[:, :4].astype(np.float64).prod(1, keepdims=True), np.float32),
    "sum": (lambda t: nl.sum(t, 1, nl.float32, True), (X,), lambda: f64.sum(1, keepdims=True), np.float32),
    "all": (lambda t: nl.all(t, 1, nl.uint8), (I32,), lambda: np.all(I32 != 0, 1), np.uint8),
    "fmod": (lambda t: nl.fmod(t, 2.0, nl.float32), (X,), lambda: np.fmod(f64, 2.0), np.float32),
    "mod": (lambda t: nl.mod(t, 3, nl.int32), (I32,), lambda: np.mod(I32, 3), np.int32),
    "power": (lambda t: nl.power(t, 2.0, nl.bfloat16), (POS,), lambda: POS.astype(np.float64) ** 2,
              ml_dtypes.bfloat16),
    "sign": (lambda t: nl.sign(t, nl.float32), (X,), lambda: np.sign(f64), np.float32),
    "trunc": (lambda t: nl.trunc(3 * t, nl.float32), (X,), lambda: np.trunc(3 * f64), np.float32),
    "mish": (lambda t: nl.mish(t, nl.float32), (X,), lambda: f64 * np.tanh(np.log1p(np.exp(f64))), np.float32),
    "softplus": (lambda t: nl.softplus(t, nl.float32), (X,), lambda: np.log1p(np.exp(f64)), np.float32),
    "gelu_apprx_tanh": (lambda t: nl.gelu_apprx_tanh(t, nl.float32), (X,),
                        lambda: 0.5 * f64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (f64 + 0.044715 * f64 ** 3))),
                        np.float32),
    "erf_dx": (lambda t: nl.erf_dx(t, nl.float32), (X,), lambda: 2 / np.sqrt(np.pi) * np.exp(-f64 ** 2), np.float32),
    "invert": (lambda t: nl.invert(t, nl.int32), (I32,), lambda: np.invert(I32), np.int32),
    "left_shift": (lambda t: nl.left_shift(t, 2, nl.int32), (I32,), lambda: I32 << 2, np.int32),
    "right_shift": (lambda t: nl.right_shift(t, 3, nl.int32), (I32,), lambda: I32 >> 3, np.int32),
    "logical_xor": (lambda t: nl.logical_xor(t, 0, nl.uint8), (I32,), lambda: I32 != 0, np.uint8),
    "where": (lambda t: nl.where(nl.greater(t, 0.0), t, 0.0, nl.float32), (X,), lambda: np.where(X > 0, X, 0),
              np.float32),
    "transpose": (lambda t: nl.transpose(t, nl.float32), (X,), lambda: X.T, np.float32),
    "matmul": (lambda a, b: nl.matmul(a, b, True), (X, B), lambda: f64.T @ B.astype(np.float64), np.float32),
    "rms_norm": (lambda t, w: nl.rms_norm(t, w, 1, 32, 1e-6, nl.bfloat16), (X, W),
                 lambda: f64 / np.sqrt((f64 ** 2).mean(1, keepdims=True) + 1e-6) * W, ml_dtypes.bfloat16),
    "dropout": (lambda t: nl.dropout(t, 0.0, nl.bfloat16), (X,), lambda: X, ml_dtypes.bfloat16),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_trailing_parameters_are_taken_by_position(name):
    call, inputs, ref, dtype = CASES[name]
    got = run(lambda *tiles: nl.copy(call(*tiles)), *inputs)
    assert got.dtype == np.dtype(dtype), name  # the positional dtype took effect
    want = np.asarray(ref(), np.float64)
    tol = 1e-2 if dtype == ml_dtypes.bfloat16 else 1e-4
    np.testing.assert_allclose(got.astype(np.float64), want.reshape(got.shape), rtol=tol, atol=tol)


def test_load_and_load_transpose2d_take_dtype_by_position():
    @nki.jit
    def kernel(x):
        return _store(nl.load(x, nl.bfloat16)), _store(nl.load_transpose2d(x[0:32, 0:16], nl.bfloat16))

    a, b = kernel(X)
    assert a.dtype == b.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(a, X.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(b, X[0:32, 0:16].T.astype(ml_dtypes.bfloat16))


def test_signatures_list_the_stub_parameters_in_order():
    stub = {  # nki.language stub (SDK 2.29+): leading parameters, in order
        "softmax": ["x", "axis", "dtype"], "var": ["x", "axis", "dtype", "keepdims"],
        "mean": ["x", "axis", "dtype", "keepdims"], "all": ["x", "axis", "dtype"],
        "rms_norm": ["x", "w", "axis", "n", "epsilon", "dtype", "compute_dtype"],
        "matmul": ["x", "y", "transpose_x"], "where": ["condition", "x", "y", "dtype"],
        "broadcast_to": ["x", "shape", "dtype"], "gather_flattened": ["data", "indices", "axis", "dtype"],
        "shared_identity_matrix": ["n", "dtype", "dst"], "zeros_like": ["x", "dtype", "buffer", "name"],
        "empty_like": ["x", "dtype", "buffer", "name"], "rand": ["shape", "dtype", "buffer", "name"],
        "device_print": ["print_prefix", "tensor"], "load_transpose2d": ["src", "dtype"],
        "dropout": ["x", "rate", "dtype"], "abs_max": ["x", "y", "dtype"], "invert": ["x", "dtype"],
    }
    for name, params in stub.items():
        sig = inspect.signature(getattr(nl, name)).parameters.values()
        positional = [p.name for p in sig if p.kind == p.POSITIONAL_OR_KEYWORD]
        assert positional[:len(params)] == params, name
    assert inspect.signature(nl.softmax).parameters["axis"].default == -1
    assert inspect.signature(nl.rand).parameters["dtype"].default is inspect.Parameter.empty
    with pytest.raises(TypeError, match="dtyp"):
        nl.exp(None, dtyp=nl.float32)  # planted: a misspelt keyword is still an error


# ---------------------------------------------------------------------------
# broadcast_to(x, shape, dtype=None): same rank
# ---------------------------------------------------------------------------
def test_broadcast_to_casts_to_dtype():
    col = X[:, 0:1]
    got = run(lambda t: nl.broadcast_to(t, (128, 8), dtype=nl.bfloat16), col)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, np.broadcast_to(col, (128, 8)).astype(ml_dtypes.bfloat16))
    same = run(lambda t: nl.broadcast_to(t, (128, 1), nl.float32), col)  # edge: the same shape and dtype
    np.testing.assert_array_equal(same, col)


def test_broadcast_to_rejects_another_rank():
    with pytest.raises(NKIError, match=r"\(128, 4, 8\).*\(128, 1\).*same rank as x"):
        run(lambda t: nl.broadcast_to(t, (128, 4, 8)), X[:, 0:1])


# ---------------------------------------------------------------------------
# gather_flattened(data, indices, axis=0, dtype=None)
# ---------------------------------------------------------------------------
def test_gather_flattened_axis_0_gathers_per_partition_over_the_flattened_free_dims():
    data = rng.standard_normal((128, 4, 8)).astype(np.float32)
    idx = rng.integers(0, 32, (128, 2, 5)).astype(np.uint32)
    got = run(lambda d, i: nl.gather_flattened(d, i, 0, nl.bfloat16), data, idx)
    want = np.take_along_axis(data.reshape(128, -1), idx.reshape(128, -1).astype(np.int64), 1).reshape(idx.shape)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, want.astype(ml_dtypes.bfloat16))


def test_gather_flattened_rejects_an_undocumented_axis():
    idx = rng.integers(0, 32, (128, 4)).astype(np.uint32)
    with pytest.raises(NKIError, match="axis=1 .*axis must be 0"):
        run(lambda d, i: nl.gather_flattened(d, i, axis=1), X, idx)


# ---------------------------------------------------------------------------
# zeros_like / empty_like (x, dtype=None, buffer=None, name='')
# ---------------------------------------------------------------------------
def test_zeros_like_defaults_to_sbuf_and_empty_like_to_the_memory_of_x():
    seen = {}

    @nki.jit
    def kernel(x):
        z = nl.zeros_like(x=x)
        e = nl.empty_like(x=x)
        p = nl.zeros_like(x, nl.float32, nl.psum)
        seen.update(z=z.buffer, e=e.buffer, p=p.buffer)
        return _store(z)

    got = kernel(X[:, :8].copy())
    assert (seen["z"], seen["e"], seen["p"]) == (nl.sbuf, nl.hbm, nl.psum)
    np.testing.assert_array_equal(got, np.zeros((128, 8), np.float32))


# ---------------------------------------------------------------------------
# rand(shape, dtype, buffer=sbuf, name='')
# ---------------------------------------------------------------------------
def test_rand_takes_buffer_and_name_by_position():
    seen = {}

    def body():
        r = nl.rand((128, 64), nl.bfloat16, nl.sbuf, "r")
        seen["buffer"] = r.buffer
        return r

    got = run(body)
    assert got.dtype == ml_dtypes.bfloat16 and seen["buffer"] == nl.sbuf
    assert got.min() >= 0 and got.max() <= 1 and 0.4 < got.astype(np.float64).mean() < 0.6


# ---------------------------------------------------------------------------
# tile_size.psum_bank_fmax / psum_bank_fmax_bytes
# ---------------------------------------------------------------------------
def test_tile_size_psum_bank_fields():
    ts = nl.tile_size
    assert ts.psum_bank_fmax == ts.psum_fmax == 2 * 1024 // 4  # a 2 KiB bank of fp32 per partition
    assert ts.psum_bank_fmax_bytes == 2 * 1024
    assert ts.psum_num_banks * ts.psum_bank_fmax_bytes == 16 * 1024  # the 16 KiB PSUM partition


# ---------------------------------------------------------------------------
# abs_max / abs_min: "Available only on NeuronCore-v4 (trn3) and newer"
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["abs_max", "abs_min"])
def test_abs_max_abs_min_need_neuroncore_v4(name):
    a = np.array([[-5.0, 1.0, 2.0, -3.0]], np.float32).repeat(8, 0)
    b = np.array([[3.0, -1.0, -7.0, 3.0]], np.float32).repeat(8, 0)
    with target.use("gen3"), pytest.raises(NKIError, match=f"nl.{name} is available only on NeuronCore-v4"):
        run(getattr(nl, name), a, b)
    with target.use("gen4"):
        got = run(lambda x, y: getattr(nl, name)(x, y, nl.bfloat16), a, b)
    pick = np.abs(a) > np.abs(b) if name == "abs_max" else np.abs(a) < np.abs(b)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), np.where(pick, a, b))  # ties give y


# ---------------------------------------------------------------------------
# random_seed(seed): "a [1,1] tensor on SBUF or PSUM with a 32-bit seed value"
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("buffer,dtype", [("sbuf", "int32"), ("psum", "int32"), ("sbuf", "uint32")])
def test_random_seed_accepts_a_1x1_32_bit_on_chip_tensor_and_repeats_the_stream(buffer, dtype):
    def body():
        seed = nl.full((1, 1), 42, dtype=getattr(nl, dtype), buffer=getattr(nl, buffer))
        nl.random_seed(seed)
        a = nl.rand((8, 8), nl.float32)
        nl.random_seed(seed)
        return nl.subtract(a, nl.rand((8, 8), nl.float32))

    np.testing.assert_array_equal(run(body), np.zeros((8, 8), np.float32))


@pytest.mark.parametrize("make,rule", [
    (lambda: nl.full((2, 2), 42, dtype=nl.int32, buffer=nl.sbuf), r"shape \(2, 2\).*\[1, 1\]"),
    (lambda: nl.full((1, 1), 42, dtype=nl.int16, buffer=nl.sbuf), "dtype int16.*32-bit"),
    (lambda: 42, "seed must be a \\[1, 1\\] tensor on SBUF or PSUM, got int"),
])
def test_random_seed_rejects_other_seeds(make, rule):
    with pytest.raises(NKIError, match=rule):
        run(lambda: nl.random_seed(make()) or nl.rand((2, 2), nl.float32))


def test_random_seed_of_an_hbm_tensor_says_so_not_out_of_bounds():
    @nki.jit
    def kernel(sd):
        nl.random_seed(sd)
        return _store(nl.rand((2, 2), nl.float32))

    with pytest.raises(NKIError, match="SBUF or PSUM, got a hbm tensor"):
        kernel(np.array([[42]], np.int32))

    @gen1_nki.jit
    def gen1_kernel(sd):
        shared_nl.random_seed(sd)
        return sd

    with pytest.raises(NKIError, match="compute on HBM.*seed"):
        gen1_kernel(np.array([[42]], np.int32))


# ---------------------------------------------------------------------------
# dynamic_range: step "must be a compile-time positive integer"
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("step", [-1, 0, 1.0])
def test_dynamic_range_step_must_be_a_positive_int(step, monkeypatch):
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")  # NKI 0.7.0 keeps nl.dynamic_range only there
    with pytest.raises(NKIError, match=f"step must be a compile-time positive integer.*got {step!r}"):
        nl.dynamic_range(5, 0 if step == -1 else 10, step)


def test_dynamic_range_positive_step_runs_its_trips(monkeypatch):
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")  # NKI 0.7.0 keeps nl.dynamic_range only there
    assert list(nl.dynamic_range(0, 5, 2)) == list(range(0, 5, 2))
    assert list(nl.dynamic_range(3)) == [0, 1, 2]


# ---------------------------------------------------------------------------
# shared_constant: the listed element types
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_])
def test_shared_constant_rejects_unlisted_element_types(dtype):
    with pytest.raises(NKIError, match=f"dtype {np.dtype(dtype)} is not supported"):
        nl.shared_constant(np.ones((2, 3), dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2])
def test_shared_constant_keeps_listed_element_types(dtype):
    v = np.arange(6).reshape(2, 3).astype(dtype)
    c = nl.shared_constant(v)
    assert c.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(c.data, v)
    conv = nl.shared_constant(np.arange(6.0).reshape(2, 3), dtype=nl.float32)  # float64 data, listed dtype=
    np.testing.assert_array_equal(conv.data, np.arange(6, dtype=np.float32).reshape(2, 3))


# ---------------------------------------------------------------------------
# bitwise ops: "Inputs must be integer typed"
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("call,arg", [
    (lambda f, i: nl.invert(f), "x"),
    (lambda f, i: nl.left_shift(f, 1), "x"),
    (lambda f, i: nl.right_shift(i, 1.5), "y"),
    (lambda f, i: nl.bitwise_and(i, f), "y"),
    (lambda f, i: ~f, "x"),
])
def test_bitwise_ops_reject_float_inputs(call, arg):
    with pytest.raises(NKIError, match=f"operand {arg} has dtype float32.*integer inputs only"):
        run(lambda f, i: call(f, i), X[:, :16].copy(), I32)


def test_bitwise_ops_on_integers_match_numpy():
    u8 = rng.integers(0, 256, (128, 16)).astype(np.uint8)
    np.testing.assert_array_equal(run(nl.invert, u8), np.invert(u8))
    np.testing.assert_array_equal(run(lambda t: nl.right_shift(t, 2), I32), I32 >> 2)


# ---------------------------------------------------------------------------
# the first generation keeps its own page's behaviour
# ---------------------------------------------------------------------------
def test_first_generation_keeps_its_defaults():
    def body(t):
        assert shared_nl.zeros_like(t, buffer=None).buffer == shared_nl.sbuf
        return shared_nl.softmax(t, axis=1)

    np.testing.assert_allclose(run_gen1(body, X), _softmax(X.astype(np.float64), 1), rtol=1e-5, atol=1e-7)
    with pytest.raises(TypeError, match="axis"):
        run_gen1(lambda t: shared_nl.softmax(t), X)  # the first generation's axis has no default
    assert list(inspect.signature(shared_nl.device_print).parameters) == ["prefix", "x"]
