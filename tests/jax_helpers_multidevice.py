"""Sharding cases that need 8 host devices; run in a subprocess by test_jax_sharding.py.

Not collected on its own (the name does not start with ``test_``): the host
device count must be set before JAX initialises, so test_jax_sharding.py runs
``pytest`` on this file in a fresh interpreter with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``.
"""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax import shard_map  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_ops  # noqa: E402
from nki_kernels.add import add_grid, tensor_add_kernel  # noqa: E402

from .jax_helpers import (GRAD_TOL, TOL, assert_close, custom_calls, payloads, random,  # noqa: E402
                          rms_norm_grads_ref, rms_norm_ref)


@pytest.fixture(params=["shardy", "gspmd"], autouse=True)
def partitioner(request):
    """Every case runs under both SPMD partitioners."""
    old = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", request.param == "shardy")
    yield request.param
    jax.config.update("jax_use_shardy_partitioner", old)


def mesh1d():
    """All 8 devices on one mesh axis ``x``."""
    return Mesh(np.array(jax.devices()), ("x",))


def put(a, mesh, *spec):
    """``a`` placed on ``mesh`` with partition spec ``spec``."""
    return jax.device_put(a, NamedSharding(mesh, P(*spec)))


def test_eight_devices():
    assert len(jax.devices()) == 8


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_batch_sharded_rms_norm_trains_without_all_gather(dtype):
    mesh = mesh1d()
    x, w = random((16, 200, 256), dtype, 1), random((256,), dtype, 2)
    cot = random(x.shape, jnp.float32, 3)
    xs, ws = put(x, mesh, "x", None, None), put(w, mesh)
    loss = jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w).astype(jnp.float32) * cot),
                                      argnums=(0, 1)))
    hlo = loss.lower(xs, ws).compile().as_text()
    assert "all-gather" not in hlo
    assert "all-reduce" in hlo  # the weight-gradient partials
    fwd, bwd = payloads(hlo)
    assert fwd["operands"][0]["shape"] == [2 * 200, 256]  # each device's custom-call sees its shard
    assert bwd["operands"][0]["shape"] == [2 * 200, 256]

    val, (dx, dw) = loss(xs, ws)
    rdx, rdw = rms_norm_grads_ref(x, w, cot)
    assert_close(dx, rdx, GRAD_TOL[jnp.dtype(dtype).name])
    assert_close(dw, rdw, GRAD_TOL[jnp.dtype(dtype).name])
    assert dx.sharding.is_equivalent_to(xs.sharding, 3)
    # the psum-reduced weight gradient equals the unsharded one
    _, (_, dw1) = jax.jit(jax.value_and_grad(
        lambda x, w: jnp.sum(jax_ops.rms_norm(x, w).astype(jnp.float32) * cot), argnums=(0, 1)))(x, w)
    assert_close(dw, dw1, 1e-6 if dtype == jnp.float32 else 1e-2)


def test_output_is_sharded_like_the_input():
    mesh = mesh1d()
    x, w = random((32, 128), jnp.float32, 1), random((128,), jnp.float32, 2)
    xs = put(x, mesh, "x", None)
    f = jax.jit(jax_ops.rms_norm)
    y = f(xs, put(w, mesh))
    assert y.sharding.is_equivalent_to(xs.sharding, 2)
    assert_close(y, rms_norm_ref(x, w), TOL["float32"])
    assert "all-gather" not in f.lower(xs, w).compile().as_text()


def test_two_axis_mesh_rows_sharded_on_both():
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "sp"))
    x, w = random((8, 64, 96), jnp.float32, 1), random((96,), jnp.float32, 2)
    cot = random(x.shape, jnp.float32, 3)
    xs = put(x, mesh, "dp", "sp", None)
    g = jax.jit(jax.grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w) * cot), argnums=(0, 1)))
    hlo = g.lower(xs, put(w, mesh)).compile().as_text()
    assert "all-gather" not in hlo
    assert payloads(hlo)[0]["operands"][0]["shape"] == [2 * 32, 96]
    dx, dw = g(xs, put(w, mesh))
    rdx, rdw = rms_norm_grads_ref(x, w, cot)
    assert_close(dx, rdx, GRAD_TOL["float32"])
    assert_close(dw, rdw, GRAD_TOL["float32"])


def test_hidden_axis_sharding_is_regathered_and_correct():
    mesh = mesh1d()
    x, w = random((16, 256), jnp.float32, 1), random((256,), jnp.float32, 2)
    xs, wsh = put(x, mesh, None, "x"), put(w, mesh, "x")  # the kernel needs whole rows
    assert_close(jax.jit(jax_ops.rms_norm)(xs, wsh), rms_norm_ref(x, w), TOL["float32"])


def test_per_example_gradients_with_a_sharded_batch():
    mesh = mesh1d()
    x, w = random((8, 100, 32), jnp.float32, 1), random((32,), jnp.float32, 2)
    g = jax.jit(jax.vmap(jax.grad(lambda x, w: jnp.sum(jax_ops.rms_norm(x, w) ** 2), argnums=1), in_axes=(0, None)))
    xs = put(x, mesh, "x", None, None)
    hlo = g.lower(xs, w).compile().as_text()
    assert "all-gather" not in hlo and "all-reduce" not in hlo  # per-example dw stays on its shard
    dw = g(xs, w)
    want = jax.vmap(jax.grad(lambda x, w: jnp.sum(rms_norm_ref(x, w) ** 2), argnums=1), in_axes=(0, None))(x, w)
    assert_close(dw, want, GRAD_TOL["float32"])


def test_sharded_add_keeps_the_sharding():
    mesh = mesh1d()
    a, b = random((64, 600), jnp.float32, 1), random((64, 600), jnp.float32, 2)
    as_, bs = put(a, mesh, "x", None), put(b, mesh, "x", None)
    f = jax.jit(jax_ops.add)
    hlo = f.lower(as_, bs).compile().as_text()
    assert "all-gather" not in hlo
    assert payloads(hlo)[0]["operands"][0]["shape"] == [8, 600]
    c = f(as_, bs)
    assert c.sharding.is_equivalent_to(as_.sharding, 2)
    np.testing.assert_array_equal(np.asarray(c), np.asarray(a + b))
    # differently sharded operands are resharded, still exact
    np.testing.assert_array_equal(np.asarray(f(as_, put(b, mesh, None, "x"))), np.asarray(a + b))


def test_shard_map_forward_and_gradients():
    mesh = mesh1d()
    x, w = random((16, 40, 64), jnp.float32, 1), random((64,), jnp.float32, 2)
    cot = random(x.shape, jnp.float32, 3)
    norm = shard_map(jax_ops.rms_norm, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    f = jax.jit(norm)
    hlo = f.lower(x, w).compile().as_text()
    assert payloads(hlo)[0]["operands"][0]["shape"] == [2 * 40, 64]
    assert_close(f(x, w), rms_norm_ref(x, w), TOL["float32"])
    dx, dw = jax.jit(jax.grad(lambda x, w: jnp.sum(norm(x, w) * cot), argnums=(0, 1)))(x, w)
    rdx, rdw = rms_norm_grads_ref(x, w, cot)
    assert_close(dx, rdx, GRAD_TOL["float32"])
    assert_close(dw, rdw, GRAD_TOL["float32"])  # the replicated weight's gradient is psum-reduced


def test_shard_map_add_with_replicated_operand():
    mesh = mesh1d()
    a, b = random((16, 30), jnp.float32, 1), random((30,), jnp.float32, 2)
    f = shard_map(jax_ops.add, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(a, b)), np.asarray(a + b))
    ga, gb = jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2), argnums=(0, 1))(a, b)
    assert_close(gb, jnp.sum(2 * (a + b), 0), 1e-5)


def test_generic_nki_call_under_sharding_is_correct():
    mesh = mesh1d()
    a = random((256, 512), jnp.float32, 1)
    as_ = put(a, mesh, "x", None)
    out = jax.jit(lambda a: jax_ops.nki_call(tensor_add_kernel, a, a, grid=add_grid(a.shape)))(as_)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(2 * a))


def test_neuron_hlo_of_a_sharded_function_shows_shard_shapes():
    mesh = mesh1d()
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("x", None)))
    w = jax.ShapeDtypeStruct((128,), jnp.float32, sharding=NamedSharding(mesh, P()))
    text = jax_ops.neuron_hlo(jax_ops.rms_norm, x, w)
    (line,) = custom_calls(text)
    assert "f32[8,128]" in line


# --- nki_kernels.op: an op declared from the tests' own kernels (tests/op_builder_kernels.py) ------

def test_declared_op_sharded_grad_without_all_gather():
    from .op_builder_kernels import scale, softplus

    mesh = mesh1d()
    x, w = random((16, 100, 64), jnp.float32, 1), random((64,), jnp.float32, 2)
    cot = random(x.shape, jnp.float32, 3)
    xs, ws = put(x, mesh, "x", None, None), put(w, mesh)

    def loss(x, w):
        rows = x.reshape(-1, 64)  # rows stay sharded: the merged axis is the sharded one
        return jnp.sum(softplus(scale(rows, w), beta=2.0).reshape(x.shape) * cot)

    g = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    hlo = g.lower(xs, ws).compile().as_text()
    assert "all-gather" not in hlo
    assert "all-reduce" in hlo  # the shared weight's gradient: per-shard sums, psum-reduced
    shapes = [p["operands"][0]["shape"] for p in payloads(hlo)]
    assert shapes == [[2 * 100, 64]] * 4  # scale fwd, softplus fwd, softplus bwd, scale bwd: one shard each
    val, (dx, dw) = g(xs, ws)
    ref = jax.value_and_grad(lambda x, w: jnp.sum(jax.nn.softplus(2.0 * x * w) / 2.0 * cot), argnums=(0, 1))
    rval, (rdx, rdw) = ref(x, w)
    assert_close(val, rval, 1e-5)
    assert_close(dx, rdx, 1e-5)
    assert_close(dw, rdw, 1e-5)
    assert dx.sharding.is_equivalent_to(xs.sharding, 3)


def test_declared_op_under_shard_map():
    from .op_builder_kernels import scale

    mesh = mesh1d()
    x, w = random((64, 48), jnp.float32, 1), random((48,), jnp.float32, 2)
    f = shard_map(scale, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    assert_close(jax.jit(f)(x, w), x * w, 1e-6)
    dx, dw = jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), argnums=(0, 1)))(x, w)
    rdx, rdw = jax.grad(lambda x, w: jnp.sum((x * w) ** 2), argnums=(0, 1))(x, w)
    assert_close(dx, rdx, 1e-5)
    assert_close(dw, rdw, 1e-5)  # the replicated weight's gradient is psum-reduced


def test_declared_op_psum_output_over_sharded_rows():
    from .op_builder_kernels import colsum

    mesh = mesh1d()
    x = random((256, 40), jnp.float32, 1)
    xs = put(x, mesh, "x", None)
    f = jax.jit(colsum)
    hlo = f.lower(xs).compile().as_text()
    assert "all-gather" not in hlo and "all-reduce" in hlo  # each shard sums its rows, then psum
    assert payloads(hlo)[0]["operands"][0]["shape"] == [32, 40]
    assert_close(f(xs), np.asarray(x, np.float64).sum(0), 1e-6)
    cot = random((40,), jnp.float32, 2)
    dx = jax.jit(jax.grad(lambda x: jnp.sum(colsum(x) * cot)))(xs)
    assert_close(dx, jnp.broadcast_to(cot, x.shape), 0)
