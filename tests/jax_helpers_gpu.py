"""GPU cases: NKI calls run through a host callback into the simulator. Needs a CUDA/ROCm JAX.

Not collected by the normal suite (no GPU here); run on a GPU machine with
``python -m pytest tests/jax_helpers_gpu.py``. Each case fails loudly if JAX
has no GPU backend rather than silently testing the CPU path.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_ops
import nki_kernels as K
from nki_kernels.add import add_grid, tensor_add_kernel

from .jax_helpers import (GRAD_TOL, TOL, assert_close, random, rms_norm_grads_ref, rms_norm_ref, sum_diff_kernel,
                          unmasked_rows_kernel)


@pytest.fixture(autouse=True)
def on_gpu():
    """Every case needs JAX's GPU backend."""
    assert jax.default_backend() == "gpu", f"JAX backend is {jax.default_backend()}, not gpu"


def targets(hlo):
    """The custom-call targets named in an HLO text."""
    return set(re.findall(r'custom_call_target="([^"]+)"', hlo))


def test_lowering_is_a_host_callback_not_the_neuron_custom_call():
    a = random((300, 700), jnp.float32)
    hlo = jax.jit(lambda a, b: K.tensor_add(a, b)).lower(a, a).compile().as_text()
    assert "AwsNeuronCustomNativeKernel" not in targets(hlo)
    assert any("callback" in t for t in targets(hlo)), targets(hlo)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_rms_norm_forward_and_gradients(dtype):
    x, w = random((3, 130, 300), dtype, 1), random((300,), dtype, 2)
    cot = random(x.shape, jnp.float32, 3)
    name = jnp.dtype(dtype).name
    assert_close(jax.jit(jax_ops.rms_norm)(x, w), rms_norm_ref(x, w), TOL[name])
    dx, dw = jax.jit(jax.grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w).astype(jnp.float32) * cot),
                              argnums=(0, 1)))(x, w)
    rdx, rdw = rms_norm_grads_ref(x, w, cot)
    assert_close(dx, rdx, GRAD_TOL[name])
    assert_close(dw, rdw, GRAD_TOL[name])


def test_per_example_gradients_under_vmap():
    x, w = random((4, 100, 48), jnp.float32, 1), random((48,), jnp.float32, 2)
    dw = jax.jit(jax.vmap(jax.grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w) ** 2), argnums=1),
                          in_axes=(0, None)))(x, w)
    want = jax.vmap(jax.grad(lambda x, w: jnp.sum(rms_norm_ref(x, w) ** 2), argnums=1), in_axes=(0, None))(x, w)
    assert_close(dw, want, GRAD_TOL["float32"])


def test_add_and_generic_nki_call():
    a, b = random((129, 513), jnp.float32, 1), random((129, 513), jnp.float32, 2)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax_ops.add)(a, b)), np.asarray(a + b))
    np.testing.assert_array_equal(np.asarray(tensor_add_kernel[add_grid(a.shape)](a, b)), np.asarray(a + b))
    s, d = jax.jit(lambda a, b: jax_ops.nki_call(sum_diff_kernel, a, b))(a[:64, :100], b[:64, :100])
    np.testing.assert_allclose(s, a[:64, :100] + b[:64, :100], rtol=1e-6)
    g = jax.grad(lambda a, b: jnp.sum(jax_ops.add(a, b) ** 2), argnums=(0, 1))(a, b)
    assert_close(g[0], 2 * (a + b), 1e-6)


def test_vmap_of_a_generic_kernel():
    a = random((3, 64, 100), jnp.float32, 1)
    s, _ = jax.jit(jax.vmap(lambda x: jax_ops.nki_call(sum_diff_kernel, x, x)))(a)
    np.testing.assert_allclose(s, 2 * a, rtol=1e-6)


def test_kernel_failure_is_an_error():
    f = jax.jit(lambda a: jax_ops.nki_call(unmasked_rows_kernel, a, grid=(2,)))
    with pytest.raises(Exception, match="out-of-bounds"):
        jax.block_until_ready(f(jnp.ones((200, 8))))
