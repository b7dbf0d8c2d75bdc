"""Direct kernel launches inside torch.compile become torch.ops.nki.call nodes (no graph break)."""

from __future__ import annotations

import pytest
import torch

import nki_kernels as K
import torch_ops
from nki_kernels.custom_call import decode_payload
from nki_kernels.simulator import nki
from nki_kernels.simulator import language as nl
from torch_ops.traced import launch_payload

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


@nki.jit
def affine_kernel(x, scale=2.0, shift=1.0):
    """x * scale + shift and x * scale - shift for a (<=128, <=512) x (module level: findable by name)."""
    plus = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    minus = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.multiply(nl.load(x), scale)
    nl.store(plus, value=nl.add(t, shift))
    nl.store(minus, value=nl.subtract(t, shift))
    return plus, minus


class Recorder:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def _compile(fn, **kw):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, **kw)


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_direct_kernel_call_compiles(backend):
    def f(a, b):
        return K.tensor_add_kernel[K.add_grid(a.shape)](a, b) * 2

    a, b = torch.randn(130, 600), torch.randn(130, 600)
    torch.testing.assert_close(_compile(f, backend=backend)(a, b), (a + b) * 2, rtol=0, atol=0)


def test_one_node_per_launch_with_the_payload():
    def f(x):
        p, m = affine_kernel[1](x, scale=3.0, shift=0.5)
        return p * m

    rec = Recorder()
    x = torch.randn(64, 100, dtype=torch.bfloat16)
    out = _compile(f, backend=rec)(x)
    (gm,) = rec.graphs
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and "nki.call" in str(n.target)]
    assert len(calls) == 1
    payload = decode_payload(calls[0].args[0])
    assert payload["kernel"]["qualname"] == "affine_kernel" and payload["static"] == {"scale": 3.0, "shift": 0.5}
    assert payload["results"] == [{"shape": [64, 100], "dtype": "bfloat16"}] * 2
    p, m = affine_kernel[1](x, scale=3.0, shift=0.5)
    torch.testing.assert_close(out, p * m, rtol=0, atol=0)


def test_nki_call_and_numpy_level_caller_compile():
    def f(x, w):
        y, rstd = torch_ops.nki_call(K.rms_norm_fwd_kernel, x, w, grid=(2,), eps=1e-6, return_rstd=True)
        return y + rstd + K.rms_norm(x, w, 1e-6)

    x, w = torch.randn(200, 64), torch.randn(64)
    torch.testing.assert_close(_compile(f)(x, w), f(x, w), rtol=0, atol=0)


def test_new_shapes_recompile_with_their_own_payload():
    f = _compile(lambda a: K.tensor_add_kernel[K.add_grid(a.shape)](a, a), dynamic=True)
    for shape in [(10, 20), (300, 700), (129, 513)]:
        a = torch.randn(shape)
        torch.testing.assert_close(f(a), 2 * a, rtol=0, atol=0)


def test_opcheck_generic_call():
    payload, _ = launch_payload("nki_kernels.add", "tensor_add_kernel", (2, 2), (), (((200, 600), "float32"),) * 2)
    a, b = torch.randn(200, 600), torch.randn(200, 600)
    torch.library.opcheck(torch.ops.nki.call.default, (payload, [a, b]))
    payload, _ = launch_payload(__name__, "affine_kernel", (1,), (("scale", 0.5),), (((8, 16), "float16"),))
    torch.library.opcheck(torch.ops.nki.call.default, (payload, [torch.randn(8, 16, dtype=torch.float16)]))


def test_local_kernels_are_refused_with_a_reason():
    @nki.jit
    def local(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    with pytest.raises(Exception, match="defined inside a function.*define them at module level"):
        _compile(lambda x: local(x))(torch.randn(4, 4))
    assert torch.equal(local(torch.ones(4, 4)), torch.ones(4, 4))  # eager is fine
