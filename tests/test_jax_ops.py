"""jax_ops.add and jax_ops.rms_norm: values, gradients and transformations against pure-jnp references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_ops

from .jax_helpers import (DTYPES, GRAD_TOL, TOL, assert_close, custom_calls, payloads, random, rms_norm_grads_ref,
                          rms_norm_ref)

RMS_SHAPES = [(1, 8), (128, 256), (130, 300), (2, 3, 257), (5,), (4, 1100)]


def _loss(f, cot):
    return lambda x, w: jnp.sum(f(x, w).astype(jnp.float32) * cot)


# --- rms_norm: values and gradients -------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", RMS_SHAPES)
def test_rms_norm_forward(shape, dtype):
    x, w = random(shape, DTYPES[dtype], 1), random(shape[-1:], DTYPES[dtype], 2)
    y = jax.jit(jax_ops.rms_norm)(x, w)
    assert y.dtype == x.dtype
    assert_close(y, rms_norm_ref(x, w), TOL[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", RMS_SHAPES)
def test_rms_norm_gradients(shape, dtype):
    x, w = random(shape, DTYPES[dtype], 3), random(shape[-1:], DTYPES[dtype], 4)
    cot = random(shape, jnp.float32, 5)
    dx, dw = jax.jit(jax.grad(_loss(jax_ops.rms_norm, cot), argnums=(0, 1)))(x, w)
    rdx, rdw = rms_norm_grads_ref(x, w, cot)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    assert_close(dx, rdx, GRAD_TOL[dtype])
    assert_close(dw, rdw, GRAD_TOL[dtype])


def test_rms_norm_eps_is_used():
    x, w = random((20, 64), jnp.float32, 1) * 0.01, random((64,), jnp.float32, 2)
    assert_close(jax_ops.rms_norm(x, w, eps=0.5), rms_norm_ref(x, w, 0.5), TOL["float32"])
    cot = random((20, 64), jnp.float32, 3)
    got = jax.grad(_loss(lambda x, w: jax_ops.rms_norm(x, w, 0.5), cot), argnums=(0, 1))(x, w)
    for g, r in zip(got, rms_norm_grads_ref(x, w, cot, 0.5)):
        assert_close(g, r, GRAD_TOL["float32"])


def test_rms_norm_check_grads_finite_differences():
    x, w = random((6, 40), jnp.float32, 1), random((40,), jnp.float32, 2)
    check_grads(lambda x, w: jax_ops.rms_norm(x, w), (x, w), order=1, modes=["rev"], atol=2e-2, rtol=2e-2, eps=1e-2)


def test_value_and_grad_and_checkpoint():
    x, w = random((3, 50, 96), jnp.float32, 1), random((96,), jnp.float32, 2)
    cot = random(x.shape, jnp.float32, 3)
    ref_val = jnp.sum(rms_norm_ref(x, w) * cot)
    rdx, rdw = rms_norm_grads_ref(x, w, cot)
    for f in (jax_ops.rms_norm, jax.checkpoint(jax_ops.rms_norm)):
        val, (dx, dw) = jax.jit(jax.value_and_grad(_loss(f, cot), argnums=(0, 1)))(x, w)
        assert_close(val, ref_val, 1e-5)
        assert_close(dx, rdx, GRAD_TOL["float32"])
        assert_close(dw, rdw, GRAD_TOL["float32"])


def test_rms_norm_inside_a_larger_differentiated_model():
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    x, w, m = jax.random.normal(k[0], (16, 64)), jax.random.normal(k[1], (64,)), jax.random.normal(k[2], (64, 64))

    def model(norm):
        def loss(w, m):
            h = jax_ops.add(norm(x, w) @ m, x) if norm is jax_ops.rms_norm else norm(x, w) @ m + x
            return jnp.mean(jnp.tanh(h) ** 2)
        return loss

    got = jax.jit(jax.grad(model(jax_ops.rms_norm), argnums=(0, 1)))(w, m)
    want = jax.grad(model(rms_norm_ref), argnums=(0, 1))(w, m)
    for g, r in zip(got, want):
        assert_close(g, r, 1e-5)


def test_empty_rows_give_empty_results_and_zero_weight_grad():
    x, w = jnp.ones((0, 16)), jnp.ones((16,))
    assert jax_ops.rms_norm(x, w).shape == (0, 16)
    dw = jax.grad(lambda w: jax_ops.rms_norm(x, w).sum())(w)
    np.testing.assert_array_equal(dw, np.zeros(16))


# --- vmap -------------------------------------------------------------------------------------------

def test_vmap_folds_the_batch_into_one_launch():
    x, w = random((6, 70, 64), jnp.float32, 1), random((64,), jnp.float32, 2)
    f = jax.jit(jax.vmap(jax_ops.rms_norm, in_axes=(0, None)))
    assert_close(f(x, w), rms_norm_ref(x, w), TOL["float32"])
    hlo = f.lower(x, w).compile().as_text()
    (p,) = payloads(hlo)
    assert p["operands"][0]["shape"] == [6 * 70, 64] and "while" not in hlo


def test_vmap_over_a_middle_axis_and_nested_vmap():
    x, w = random((10, 4, 3, 32), jnp.bfloat16, 1), random((32,), jnp.bfloat16, 2)
    f = jax.vmap(jax.vmap(jax_ops.rms_norm, in_axes=(1, None), out_axes=1), in_axes=(2, None), out_axes=2)
    assert_close(jax.jit(f)(x, w), rms_norm_ref(x, w), TOL["bfloat16"])


@pytest.mark.parametrize("rows", [100, 128, 300, 1])
def test_per_example_gradients_under_vmap(rows):
    x, w = random((4, rows, 48), jnp.float32, 1), random((48,), jnp.float32, 2)
    cot = random(x.shape, jnp.float32, 3)
    per_example = jax.jit(jax.vmap(jax.grad(lambda x, w, c: jnp.sum(jax_ops.rms_norm(x, w) * c), argnums=(0, 1)),
                                   in_axes=(0, None, 0)))
    dx, dw = per_example(x, w, cot)
    assert dw.shape == (4, 48)
    for i in range(4):
        rdx, rdw = rms_norm_grads_ref(x[i], w, cot[i])
        assert_close(dx[i], rdx, GRAD_TOL["float32"])
        assert_close(dw[i], rdw, GRAD_TOL["float32"])
    hlo = per_example.lower(x, w, cot).compile().as_text()
    # one forward and one backward launch (each example's rows padded to whole 128-row programs)
    assert len(custom_calls(hlo)) == 2 and "while" not in hlo


def test_vmap_of_per_example_grads_nested_twice():
    x, w = random((2, 3, 20, 16), jnp.float32, 1), random((16,), jnp.float32, 2)
    g = jax.grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w) ** 2), argnums=1)
    got = jax.jit(jax.vmap(jax.vmap(g, in_axes=(0, None)), in_axes=(0, None)))(x, w)
    want = jax.vmap(jax.vmap(jax.grad(lambda x, w: jnp.sum(rms_norm_ref(x, w) ** 2), argnums=1),
                             in_axes=(0, None)), in_axes=(0, None))(x, w)
    assert_close(got, want, GRAD_TOL["float32"])


def test_vmap_with_per_example_weights():
    x, w = random((3, 20, 16), jnp.float32, 1), random((3, 16), jnp.float32, 2)
    assert_close(jax.jit(jax.vmap(jax_ops.rms_norm))(x, w), rms_norm_ref(x, w[:, None, :]), TOL["float32"])
    g = jax.vmap(jax.grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w) ** 3), argnums=(0, 1)))(x, w)
    r = jax.vmap(jax.grad(lambda x, w: jnp.sum(rms_norm_ref(x, w) ** 3), argnums=(0, 1)))(x, w)
    for a, b in zip(g, r):
        assert_close(a, b, GRAD_TOL["float32"])


def test_grad_of_vmap_and_vmap_of_checkpoint():
    x, w = random((5, 9, 24), jnp.float32, 1), random((24,), jnp.float32, 2)
    ours = jax.grad(lambda w: jnp.sum(jax.vmap(jax.checkpoint(jax_ops.rms_norm), in_axes=(0, None))(x, w) ** 2))
    ref = jax.grad(lambda w: jnp.sum(rms_norm_ref(x, w) ** 2))
    assert_close(jax.jit(ours)(w), ref(w), GRAD_TOL["float32"])


# --- add ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32", "int8"])
@pytest.mark.parametrize("shape", [(1,), (129, 513), (2, 3, 700), ()])
def test_add_matches_jnp_exactly(shape, dtype):
    rng = np.random.default_rng(0)
    a = jnp.asarray((rng.standard_normal(shape) * 20).astype(np.float32)).astype(dtype)
    b = jnp.asarray((rng.standard_normal(shape) * 20).astype(np.float32)).astype(dtype)
    got = jax.jit(jax_ops.add)(a, b)
    assert got.shape == a.shape and got.dtype == a.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(a + b))


def test_add_broadcasts_and_reduces_gradients():
    a, b = random((4, 1, 30), jnp.float32, 1), random((5, 1), jnp.float32, 2)
    np.testing.assert_array_equal(np.asarray(jax_ops.add(a, b)), np.asarray(a + b))
    cot = random((4, 5, 30), jnp.float32, 3)
    got = jax.jit(jax.grad(lambda a, b: jnp.sum(jax_ops.add(a, b) * cot), argnums=(0, 1)))(a, b)
    want = jax.grad(lambda a, b: jnp.sum((a + b) * cot), argnums=(0, 1))(a, b)
    for g, r in zip(got, want):
        assert g.shape == r.shape
        assert_close(g, r, 1e-6)


def test_add_under_vmap_is_one_launch():
    a, b = random((7, 30, 40), jnp.float32, 1), random((30, 40), jnp.float32, 2)
    f = jax.jit(jax.vmap(jax_ops.add, in_axes=(0, None)))
    np.testing.assert_array_equal(np.asarray(f(a, b)), np.asarray(a + b))
    hlo = f.lower(a, b).compile().as_text()
    assert len(custom_calls(hlo)) == 1 and "while" not in hlo


def test_add_value_and_grad_with_checkpoint():
    a, b = random((16, 16), jnp.float32, 1), random((16, 16), jnp.float32, 2)
    val, g = jax.value_and_grad(jax.checkpoint(lambda a, b: jnp.sum(jax_ops.add(a, b) ** 2)), argnums=(0, 1))(a, b)
    assert_close(val, jnp.sum((a + b) ** 2), 1e-6)
    for gi in g:
        assert_close(gi, 2 * (a + b), 1e-6)


# --- errors ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("weight_shape", [(63,), (64, 1), ()])
def test_rms_norm_weight_of_the_wrong_shape(weight_shape):
    with pytest.raises(ValueError, match=r"weight has shape .* x.shape\[-1\] = 64"):
        jax.jit(jax_ops.rms_norm)(jnp.ones((4, 64)), jnp.ones(weight_shape))


def test_rms_norm_dtype_errors_name_the_argument():
    with pytest.raises(TypeError, match="weight has dtype bfloat16 but x has dtype float32"):
        jax_ops.rms_norm(jnp.ones((4, 8)), jnp.ones(8, jnp.bfloat16))
    with pytest.raises(TypeError, match="x has dtype int32"):
        jax_ops.rms_norm(jnp.ones((4, 8), jnp.int32), jnp.ones(8, jnp.int32))


def test_rms_norm_eps_must_be_a_static_float():
    x, w = jnp.ones((4, 8)), jnp.ones(8)
    with pytest.raises(ValueError, match="eps must be a finite non-negative"):
        jax_ops.rms_norm(x, w, eps=-1.0)
    with pytest.raises(ValueError, match="eps must be"):
        jax.jit(lambda x, w, e: jax_ops.rms_norm(x, w, e))(x, w, 1e-6)


def test_rms_norm_non_array_and_scalar_inputs():
    with pytest.raises(TypeError, match="x must be an array"):
        jax_ops.rms_norm([[1.0, 2.0]], jnp.ones(2))
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        jax_ops.rms_norm(jnp.float32(1.0), jnp.ones(1))


def test_add_errors_name_the_arguments():
    with pytest.raises(TypeError, match="a has dtype float32 but b has dtype bfloat16"):
        jax_ops.add(jnp.ones(3), jnp.ones(3, jnp.bfloat16))
    with pytest.raises(ValueError, match=r"a has shape \(3, 4\) and b has shape \(5,\), which do not broadcast"):
        jax_ops.add(jnp.ones((3, 4)), jnp.ones(5))
    with pytest.raises(TypeError, match="b must be an array"):
        jax_ops.add(jnp.ones(3), 2.0)
    with pytest.raises(TypeError, match="a has dtype bool"):
        jax_ops.add(jnp.ones(3, bool), jnp.ones(3, bool))
