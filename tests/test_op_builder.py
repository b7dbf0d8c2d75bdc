"""nki_kernels.op: one declaration from the tests' own kernels, checked in NumPy, JAX and PyTorch.

References are independent: NumPy float64 formulas, ``jax.nn.softplus`` / plain jnp with
``jax.grad``, ``torch.nn.functional.softplus`` with autograd in float64. Launches are
counted where the simulator runs them (``launch.run_programs``), so "one launch" means one
execution of the kernel's grid, not one line of HLO.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jax_ops  # noqa: F401 - the JAX side of nki_kernels.op
import nki_kernels
import torch_ops  # noqa: F401 - the torch side of nki_kernels.op
from nki_kernels.simulator import launch as sim_launch

from . import op_builder_kernels as T
from .jax_helpers import assert_close, custom_calls, run_python

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


@pytest.fixture
def launches(monkeypatch):
    """Names of the kernels the simulator launched (whole grids; shape inference not counted)."""
    seen = []
    real = sim_launch.run_programs

    def counting(kernel, grid, args, kwargs, pids=None, outputs=(), **rest):
        if pids is None:
            seen.append(kernel.func.__name__)
        return real(kernel, grid, args, kwargs, pids, outputs, **rest)

    monkeypatch.setattr(sim_launch, "run_programs", counting)
    return seen


def softplus64(x, beta=1.0):
    x = np.asarray(x, np.float64)
    return np.logaddexp(0.0, beta * x) / beta


def sigmoid64(x, beta=1.0):
    return 1.0 / (1.0 + np.exp(-beta * np.asarray(x, np.float64)))


def rng_array(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- declaration ---------------------------------------------------------------------------------

def test_declared_op_knows_its_inputs_and_static_arguments():
    assert T.softplus.inputs == ["x"] and list(T.softplus.static) == ["beta"]
    assert T.scale.row_inputs == (True, False)


def test_numpy_arrays_run_on_the_simulator(launches):
    x = rng_array((300, 40), 1)
    y = T.softplus(x, beta=2.0)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_allclose(y, softplus64(x, 2.0), rtol=2e-6, atol=2e-6)
    assert launches == ["softplus_fwd"]


def test_declaration_errors_name_the_problem():
    with pytest.raises(ValueError, match="'namespace::name'"):
        nki_kernels.op("softplus", forward=T.softplus_fwd, grid=lambda x: (1,))
    with pytest.raises(TypeError, match="grid= .* is required"):
        nki_kernels.op("nki_test::nogrid", forward=T.softplus_fwd)
    with pytest.raises(ValueError, match="residuals='outputs'"):
        nki_kernels.op("nki_test::badres", forward=T.softplus_fwd, grid=lambda x: (1,), residuals="outputs")
    with pytest.raises(ValueError, match=r"Rows\(shared=\['y'\]\) names no tensor input"):
        nki_kernels.op("nki_test::badrows", forward=T.softplus_fwd, grid=lambda x: (1,),
                       partition=nki_kernels.Rows(shared=("y",)))
    with pytest.raises(TypeError, match="unexpected keyword argument 'beta_'"):
        T.softplus(rng_array((4, 4)), beta_=2.0)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        T.softplus(rng_array((4, 4)), 1.0, 2.0)


# --- JAX ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 2e-5), (jnp.bfloat16, 2e-2)])
def test_jax_values_and_gradients(dtype, tol):
    x = jnp.asarray(rng_array((300, 64), 2)).astype(dtype)
    cot = jnp.asarray(rng_array((300, 64), 3))
    y = jax.jit(lambda x: T.softplus(x, beta=1.5))(x)
    assert y.dtype == dtype
    assert_close(y, softplus64(np.asarray(x, np.float32), 1.5), tol)
    dx = jax.jit(jax.grad(lambda x: jnp.sum(T.softplus(x, beta=1.5).astype(jnp.float32) * cot)))(x)
    assert dx.dtype == dtype
    want = jax.grad(lambda x: jnp.sum(jax.nn.softplus(1.5 * x.astype(jnp.float32)) / 1.5 * cot))(x)
    assert_close(dx, want, 2 * tol)


def test_jax_vmap_is_one_launch_forward_and_backward(launches):
    x = jnp.asarray(rng_array((6, 70, 32), 4))
    f = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(T.softplus(x) ** 2))))
    got = f(x)
    y = softplus64(x)
    np.testing.assert_allclose(np.asarray(got), 2 * y * sigmoid64(x), rtol=1e-5, atol=1e-6)
    assert launches == ["softplus_fwd", "softplus_bwd"]  # 6 examples, one launch each way
    hlo = f.lower(x).compile().as_text()
    assert len(custom_calls(hlo)) == 2 and "while" not in hlo


def test_jax_vmap_of_a_shared_weight_gradient_launches_per_example(launches):
    # scale's backward has no `segments` parameter: per-example weight gradients need one
    # backward launch per example (the forward still folds into one launch).
    x, w = jnp.asarray(rng_array((3, 20, 16), 5)), jnp.asarray(rng_array((16,), 6))
    g = jax.jit(jax.vmap(jax.grad(lambda x, w: jnp.sum(T.scale(x, w) ** 2), argnums=(0, 1)), in_axes=(0, None)))
    dx, dw = g(x, w)
    want = jax.vmap(jax.grad(lambda x, w: jnp.sum((x * w) ** 2), argnums=(0, 1)), in_axes=(0, None))(x, w)
    assert dw.shape == (3, 16)
    assert_close(dx, want[0], 1e-5)
    assert_close(dw, want[1], 1e-5)
    assert launches == ["scale_fwd"] + ["scale_bwd"] * 3


def test_jax_sum_over_rows_output_under_vmap(launches):
    # colsum's forward has no `segments` parameter: its per-example sums launch once per example.
    x = jnp.asarray(rng_array((4, 130, 24), 19))
    got = jax.jit(jax.vmap(T.colsum))(x)
    assert_close(got, np.asarray(x, np.float64).sum(1), 1e-6)
    assert launches == ["colsum_partials"] * 4


def test_jax_shared_weight_gradient_is_summed_over_rows():
    x, w = jnp.asarray(rng_array((300, 40), 7)), jnp.asarray(rng_array((40,), 8))
    cot = jnp.asarray(rng_array((300, 40), 9))
    dx, dw = jax.jit(jax.grad(lambda x, w: jnp.sum(T.scale(x, w) * cot), argnums=(0, 1)))(x, w)
    assert_close(dx, cot * w, 1e-6)
    assert_close(dw, np.sum(np.asarray(cot, np.float64) * np.asarray(x, np.float64), 0), 1e-5)


def test_jax_checkpoint_and_static_argument():
    x = jnp.asarray(rng_array((130, 24), 10))
    loss = lambda f: (lambda x: jnp.sum(jnp.tanh(f(x))))  # noqa: E731
    ours = jax.jit(jax.value_and_grad(loss(jax.checkpoint(lambda x: T.softplus(x, beta=3.0)))))
    ref = jax.value_and_grad(loss(lambda x: jax.nn.softplus(3.0 * x) / 3.0))
    (v, g), (rv, rg) = ours(x), ref(x)
    assert_close(v, rv, 1e-5)
    assert_close(g, rg, 1e-5)
    assert "AwsNeuronCustomNativeKernel" in ours.lower(x).as_text()


def test_jax_gradient_through_an_aux_output():
    # nki::rms_norm returns (y, rstd), rstd being aux: usually unused (the backward then gets
    # None for it), but a gradient through it must still be the true derivative.
    from nki_kernels.ops import rms_norm_op

    x, w = jnp.asarray(rng_array((40, 24), 17)), jnp.asarray(rng_array((24,), 18))

    def ref(x):
        r = jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        return x * r * w, r

    for pick in (lambda y, r: jnp.sum(y), lambda y, r: jnp.sum(y) + 3 * jnp.sum(r)):
        got = jax.jit(jax.grad(lambda x: pick(*rms_norm_op(x, w, eps=1e-6))))(x)
        assert_close(got, jax.grad(lambda x: pick(*ref(x)))(x), 1e-5)


def test_jax_higher_order_gradient_is_an_error_naming_the_op():
    x = jnp.asarray(rng_array((8, 8), 11))
    with pytest.raises(TypeError, match="nki_test::softplus: higher-order gradients are not supported"):
        jax.grad(lambda x: jnp.sum(jax.grad(lambda x: jnp.sum(T.softplus(x)))(x)))(x)


def test_jax_static_argument_must_be_a_python_value():
    x = jnp.ones((4, 4))
    with pytest.raises(TypeError, match="static argument 'beta' is a JAX array"):
        jax.jit(lambda x, b: T.softplus(x, beta=b))(x, 2.0)


# --- PyTorch ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
def test_torch_values_and_gradients(dtype, tol):
    x = torch.from_numpy(rng_array((300, 64), 12)).to(dtype).requires_grad_()
    y = T.softplus(x, beta=1.5)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype
    x64 = x.detach().double().requires_grad_()
    ref = torch.nn.functional.softplus(x64, beta=1.5)
    torch.testing.assert_close(y.double(), ref.detach(), rtol=tol, atol=tol)
    dy = torch.from_numpy(rng_array((300, 64), 13)).to(dtype)
    (dx,) = torch.autograd.grad(y, x, dy)
    (rdx,) = torch.autograd.grad(ref, x64, dy.double())
    assert dx.dtype == dtype
    torch.testing.assert_close(dx.double(), rdx, rtol=2 * tol, atol=2 * tol)


def test_torch_op_is_registered_and_opcheck_clean():
    x = torch.from_numpy(rng_array((130, 33), 14)).requires_grad_()
    torch.library.opcheck(torch.ops.nki_test.softplus.default, (x, 2.0))
    torch.library.opcheck(torch.ops.nki_test.softplus_backward.default, ([x.detach()], [torch.randn(130, 33)], [True], 2.0))
    w = torch.randn(33, requires_grad=True)
    torch.library.opcheck(torch.ops.nki_test.scale.default, (x, w))
    torch.library.opcheck(torch.ops.nki_test.colsum.default, (x,))


def test_torch_shared_weight_gradient():
    x = torch.from_numpy(rng_array((300, 40), 15)).double().float().requires_grad_()
    w = torch.randn(40, requires_grad=True)
    dy = torch.randn(300, 40)
    torch.autograd.backward(T.scale(x, w), dy)
    torch.testing.assert_close(x.grad, dy * w.detach(), rtol=0, atol=1e-6)
    torch.testing.assert_close(w.grad.double(), (dy.double() * x.detach().double()).sum(0), rtol=1e-5, atol=1e-5)


class _Recorder:
    """A torch.compile backend keeping the forward and backward graphs AOTAutograd makes."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def keep(g, _):
            self.graphs.append(g)
            return make_boxed_func(g.forward)

        return aot_autograd(fw_compiler=keep, bw_compiler=keep)(gm, example_inputs)


def test_torch_compile_fullgraph_one_graph_with_the_ops(launches):
    def model(x, w):
        return torch.tanh(T.softplus(T.scale(x, w), beta=2.0)).sum()

    x = torch.from_numpy(rng_array((130, 48), 16)).requires_grad_()
    w = torch.randn(48, requires_grad=True)
    rec = _Recorder()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=rec)
    loss = compiled(x, w)
    loss.backward()
    fw, bw = rec.graphs
    assert "nki_test.softplus.default" in str(fw.graph) and "nki_test.scale.default" in str(fw.graph)
    assert "softplus_backward" in str(bw.graph) and "scale_backward" in str(bw.graph)
    assert launches == ["scale_fwd", "softplus_fwd", "softplus_bwd", "scale_bwd"]
    explain = torch._dynamo.explain(model)(x, w)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    ref = torch.tanh(torch.nn.functional.softplus(x64 * w64, beta=2.0)).sum()
    ref.backward()
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-4, atol=1e-4)


def test_torch_higher_order_gradient_is_an_error_naming_the_op():
    x = torch.randn(8, 8, requires_grad=True)
    (g,) = torch.autograd.grad(T.softplus(x).sum(), x, create_graph=True)
    with pytest.raises(TypeError, match="nki_test::softplus: higher-order gradients are not supported"):
        g.sum().backward()


def test_torch_meta_tensors_give_shapes_without_launching(launches):
    y = T.softplus(torch.empty(300, 20, device="meta"), beta=2.0)
    assert y.device.type == "meta" and y.shape == (300, 20)
    assert launches == []


# --- framework dispatch by registration ---------------------------------------------------------------

def test_simulator_imports_no_adapter_and_torch_arrays_still_dispatch():
    out = run_python(
        "import sys, numpy as np, torch\n"
        "import nki_kernels as K\n"
        "a = np.ones((5, 7), np.float32)\n"
        "K.tensor_add_kernel[K.add_grid(a.shape)](a, a)\n"
        "assert 'torch_ops' not in sys.modules and 'jax_ops' not in sys.modules, 'adapter imported early'\n"
        "t = torch.arange(35.0).reshape(5, 7)\n"
        "c = K.tensor_add_kernel[K.add_grid(t.shape)](t, t)\n"
        "assert isinstance(c, torch.Tensor) and torch.equal(c, 2 * t)\n"
        "assert 'jax_ops' not in sys.modules\n"
        "print('ok')\n")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
