"""jax_ops.nki_call: the primitive, its custom-call lowering, the CPU target and its errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_ops
import nki_kernels as K
from jax_ops import cpu_target
from jax_ops.lowering import host_launch
from nki_kernels.add import add_grid, tensor_add_kernel
from nki_kernels.backend import nki, nl
from nki_kernels.rmsnorm import rms_norm_fwd_kernel, row_grid

from .jax_helpers import (DTYPES, TOL, assert_close, cast_kernel, custom_calls, payloads, random, rms_norm_ref,
                          scale_rows_kernel, sum_diff_kernel, unmasked_rows_kernel)


def _add(a, b):
    return jax_ops.nki_call(tensor_add_kernel, a, b, grid=add_grid(a.shape))


# --- lowering ----------------------------------------------------------------------------------

def test_lowers_to_one_custom_call_with_a_decodable_payload():
    a = random((300, 700), jnp.float32)
    hlo = jax.jit(_add).lower(a, a).compiler_ir("hlo").as_hlo_text()
    calls = custom_calls(hlo)
    assert len(calls) == 1
    assert "f32[300,700]" in calls[0]
    (p,) = payloads(hlo)
    assert p["kernel"]["qualname"] == "tensor_add_kernel"
    assert p["kernel"]["module"] == "nki_kernels.add"
    assert p["grid"] == [3, 2]
    assert p["operands"] == [{"shape": [300, 700], "dtype": "float32"}] * 2
    assert p["results"] == [{"shape": [300, 700], "dtype": "float32"}]


def test_payload_carries_static_arguments_and_several_results():
    x, w = random((130, 64), jnp.bfloat16), random((64,), jnp.bfloat16, 1)
    f = jax.jit(lambda x, w: jax_ops.nki_call(rms_norm_fwd_kernel, x, w, grid=row_grid(130), eps=1e-3,
                                              return_rstd=True))
    (p,) = payloads(f.lower(x, w).compiler_ir("hlo").as_hlo_text())
    assert p["static"] == {"eps": 1e-3, "return_rstd": True}
    assert p["grid"] == [2]
    assert [r["dtype"] for r in p["results"]] == ["bfloat16", "float32"]
    assert p["results"][1]["shape"] == [130, 1]


def test_a_dtype_static_argument_crosses_the_payload_by_name():
    # (nki-samples' MX tutorial passes nl.float8_e5m2_x4 to its kernel): the payload names the
    # dtype, and the custom call runs the kernel with the dtype itself
    a = random((64, 96), jnp.float32)
    f = jax.jit(lambda a: jax_ops.nki_call(cast_kernel, a, dtype=nl.bfloat16))
    (p,) = payloads(f.lower(a).compiler_ir("hlo").as_hlo_text())
    assert p["static"] == {"dtype": {"__nki_dtype__": "bfloat16"}}
    got = f(a)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got), np.asarray(a).astype(jnp.bfloat16))


def test_compiled_cpu_program_runs_the_custom_call_not_a_python_callback():
    a = random((8, 16), jnp.float32)
    text = jax.jit(_add).lower(a, a).compile().as_text()
    assert len(custom_calls(text)) == 1
    assert set(re.findall(r'custom_call_target="([^"]+)"', text)) == {"AwsNeuronCustomNativeKernel"}


# --- execution -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(1, 1), (128, 512), (129, 513), (300, 1000)])
def test_jit_and_eager_match_jnp(shape, dtype):
    a, b = random(shape, DTYPES[dtype], 1), random(shape, DTYPES[dtype], 2)
    want = (a.astype(jnp.float32) + b.astype(jnp.float32)).astype(a.dtype)
    for got in (jax.jit(_add)(a, b), _add(a, b)):
        assert isinstance(got, jax.Array) and got.dtype == a.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_several_results_come_back_as_a_tuple():
    a, b = random((64, 100), jnp.float32, 1), random((64, 100), jnp.float32, 2)
    s, d = jax.jit(lambda a, b: jax_ops.nki_call(sum_diff_kernel, a, b))(a, b)
    np.testing.assert_allclose(s, a + b, rtol=1e-6)
    np.testing.assert_allclose(d, a - b, rtol=1e-6)


def test_rms_norm_kernel_with_rstd_in_bf16():
    x, w = random((257, 96), jnp.bfloat16, 3), random((96,), jnp.bfloat16, 4)
    y, rstd = jax_ops.nki_call(rms_norm_fwd_kernel, x, w, grid=row_grid(257), eps=1e-6, return_rstd=True)
    assert_close(y, rms_norm_ref(x, w), TOL["bfloat16"])
    xf = x.astype(jnp.float32)
    assert_close(rstd, jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-6), 1e-6)


def test_calling_a_kernel_with_jax_arrays_goes_through_nki_call():
    a, b = random((200, 600), jnp.float32, 1), random((200, 600), jnp.float32, 2)
    eager = tensor_add_kernel[add_grid(a.shape)](a, b)
    traced = jax.jit(lambda a, b: tensor_add_kernel[add_grid(a.shape)](a, b))
    assert isinstance(eager, jax.Array)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(a + b))
    assert len(custom_calls(traced.lower(a, b).as_text("hlo"))) == 1
    np.testing.assert_array_equal(np.asarray(traced(a, b)), np.asarray(a + b))
    # the public caller too, inside a plain jax.jit as in the NKI guide
    f = jax.jit(lambda a, b: a * b * K.tensor_add(a, b))
    assert_close(f(a, b), a * b * (a + b), 1e-6)


def test_launch_object_and_grid_keyword_are_equivalent():
    a = random((300, 40), jnp.float32)
    got = jax_ops.nki_call(scale_rows_kernel[(3,)], a, scale=0.5)
    np.testing.assert_allclose(got, a * 0.5, rtol=1e-6)
    got = jax_ops.nki_call(scale_rows_kernel, a, grid=3, scale=0.5)
    np.testing.assert_allclose(got, a * 0.5, rtol=1e-6)


def test_out_shape_that_agrees_is_accepted():
    a = random((10, 20), jnp.float32)
    out = jax_ops.nki_call(scale_rows_kernel, a, grid=(1,), out_shape=jax.ShapeDtypeStruct((10, 20), jnp.float32))
    np.testing.assert_allclose(out, 2 * a, rtol=1e-6)
    s, d = jax_ops.nki_call(sum_diff_kernel, a, a, out_shape=(jax.ShapeDtypeStruct((10, 20), jnp.float32),) * 2)
    np.testing.assert_allclose(s, 2 * a, rtol=1e-6)


def test_kernel_defined_in_a_function_runs():
    @nki.jit
    def negate(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.negative(nl.load(a)))
        return out

    a = random((16, 32), jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: jax_ops.nki_call(negate, a))(a)), -np.asarray(a))


def _scaler(factor):
    @nki.jit
    def scale(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), factor))
        return out

    return scale


def test_kernels_from_one_factory_each_run_their_own_closure():
    # Same module, qualname and source: only the closure tells them apart.
    a = random((8, 16), jnp.float32)
    f2, f3 = (jax.jit(lambda a, k=_scaler(c): jax_ops.nki_call(k, a)) for c in (2.0, 3.0))
    np.testing.assert_allclose(f2(a), 2 * a, rtol=1e-6)
    np.testing.assert_allclose(f3(a), 3 * a, rtol=1e-6)
    np.testing.assert_allclose(f2(a), 2 * a, rtol=1e-6)  # the first executable still runs its kernel


def test_empty_grid_is_one_program():
    a = random((100, 30), jnp.float32)
    np.testing.assert_allclose(jax_ops.nki_call(scale_rows_kernel, a, scale=3.0), 3 * a, rtol=1e-6)


# --- transformations ---------------------------------------------------------------------------------

def test_vmap_of_a_generic_kernel_loops_over_the_batch():
    a = random((5, 300, 40), jnp.float32)
    f = jax.jit(jax.vmap(lambda x: jax_ops.nki_call(scale_rows_kernel, x, grid=(3,), scale=-1.5)))
    np.testing.assert_allclose(f(a), -1.5 * a, rtol=1e-6)
    hlo = f.lower(a).compile().as_text()
    assert len(custom_calls(hlo)) == 1 and "while" in hlo  # one launch per example, in a loop


def test_vmap_with_an_unbatched_operand_and_in_axes():
    a, b = random((64, 3, 100), jnp.float32, 1), random((64, 100), jnp.float32, 2)
    s, d = jax.vmap(lambda a, b: jax_ops.nki_call(sum_diff_kernel, a, b), in_axes=(1, None))(a, b)
    want = jnp.moveaxis(a, 1, 0)
    np.testing.assert_allclose(s, want + b, rtol=1e-6)
    np.testing.assert_allclose(d, want - b, rtol=1e-6)


def test_grad_of_a_raw_nki_call_explains_custom_vjp():
    a = random((8, 8), jnp.float32)
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.grad(lambda a: _add(a, a).sum())(a)


def test_stop_gradient_on_the_inputs_makes_a_raw_call_usable_under_grad():
    a = random((8, 8), jnp.float32)
    g = jax.grad(lambda a: (_add(*[jax.lax.stop_gradient(a)] * 2) * a).sum())(a)
    np.testing.assert_allclose(g, 2 * a, rtol=1e-6)


# --- errors --------------------------------------------------------------------------------------------

def test_non_kernel_is_a_type_error_naming_it():
    def plain(a, b):
        return a + b

    a = jnp.ones((4, 4))
    with pytest.raises(TypeError, match=r"kernel must be an @nki.jit kernel.*'.*plain'"):
        jax_ops.nki_call(plain, a, a)


def test_out_shape_that_disagrees_is_a_value_error():
    a = jnp.ones((10, 20))
    with pytest.raises(ValueError, match=r"out_shape \(float32\[10, 21\]\) disagrees with kernel scale_rows_kernel"):
        jax_ops.nki_call(scale_rows_kernel, a, grid=(1,), out_shape=jax.ShapeDtypeStruct((10, 21), jnp.float32))
    with pytest.raises(ValueError, match="out_shape .*bfloat16"):
        jax_ops.nki_call(scale_rows_kernel, a, grid=(1,), out_shape=jax.ShapeDtypeStruct((10, 20), jnp.bfloat16))
    with pytest.raises(ValueError, match="returns a tuple"):
        jax_ops.nki_call(sum_diff_kernel, a, a, out_shape=jax.ShapeDtypeStruct((10, 20), jnp.float32))
    with pytest.raises(TypeError, match="out_shape must be"):
        jax_ops.nki_call(scale_rows_kernel, a, grid=(1,), out_shape=(10, 20))


def test_scalar_in_a_tensor_position_is_a_type_error_naming_the_parameter():
    with pytest.raises(TypeError, match=r"tensor argument 'b' of sum_diff_kernel is a float"):
        jax_ops.nki_call(sum_diff_kernel, jnp.ones((4, 4)), 1.0)


def test_unserialisable_static_argument_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="static argument 'scale'"):
        jax_ops.nki_call(scale_rows_kernel, jnp.ones((4, 4)), scale=object())


def test_kernel_rule_violation_is_reported_at_trace_time():
    a = jnp.ones((100, 8))
    with pytest.raises(Exception, match="out-of-bounds"):
        jax.jit(lambda a: jax_ops.nki_call(unmasked_rows_kernel, a, grid=(1,))).lower(a)


def test_failure_inside_the_compiled_custom_call_is_an_error_not_a_crash():
    # Program 0 is fine (trace-time shape inference passes); program 1 reads past row 200.
    a = jnp.ones((200, 8))
    f = jax.jit(lambda a: jax_ops.nki_call(unmasked_rows_kernel, a, grid=(2,)))
    with pytest.raises(Exception, match=r"out-of-bounds access.*index 200 on axis 0") as info:
        jax.block_until_ready(f(a))
    assert "NKIError" in str(info.value)
    assert "out-of-bounds" in str(cpu_target.last_error())
    ok = jax.jit(lambda a: jax_ops.nki_call(unmasked_rows_kernel, a, grid=(1,)))(jnp.ones((128, 8)))
    assert float(ok.sum()) == 128 * 8  # the process and the target still work


def test_host_callback_launch_used_on_gpu_runs_the_simulator():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    (out,) = host_launch(scale_rows_kernel, (1,), (("scale", 4.0),))(a)
    np.testing.assert_array_equal(out, 4 * a)
