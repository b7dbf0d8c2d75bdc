"""torch.library ops: opcheck, and torch.compile(fullgraph=True) on CPU matching eager."""

from __future__ import annotations

import pytest
import torch

import torch_ops

# Raised inside torch's own compile stack, not by this code.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def _rms_inputs(shape=(3, 50, 100), dtype=torch.float32, grad=True):
    x = torch.randn(shape, dtype=dtype, requires_grad=grad)
    w = torch.randn(shape[-1], dtype=dtype, requires_grad=grad)
    return x, w


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(130, 70), (2, 3, 600)], ids=str)
def test_opcheck_tensor_add(shape, dtype):
    a = torch.randn(shape, dtype=dtype, requires_grad=True)
    b = torch.randn(shape, dtype=dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.nki.tensor_add.default, (a, b))


def test_opcheck_tensor_add_int():
    a = torch.randint(0, 9, (5, 7), dtype=torch.int32)
    torch.library.opcheck(torch.ops.nki.tensor_add.default, (a, a.clone()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(130, 70), (2, 3, 600), (33,)], ids=str)
def test_opcheck_rms_norm(shape, dtype):
    x, w = _rms_inputs(shape, dtype)
    torch.library.opcheck(torch.ops.nki.rms_norm.default, (x, w, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_rms_norm_backward(dtype):
    x, w = _rms_inputs((4, 33, 65), dtype, grad=False)
    _, rstd = torch.ops.nki.rms_norm(x, w, 1e-6)
    dy = torch.randn_like(x)
    # (residuals, output gradients, which outputs got one, static arguments): nki_kernels.op backward ops
    torch.library.opcheck(torch.ops.nki.rms_norm_backward.default, ([x, w, rstd], [dy], [True, False], 1e-6))


class Block(torch.nn.Module):
    """Linear -> torch_ops.RMSNorm, residual through torch_ops.add, then torch_ops.rms_norm."""

    def __init__(self, d=96):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.norm = torch_ops.RMSNorm(d)
        self.w = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        h = torch_ops.add(self.norm(self.lin(x)), x)
        return torch_ops.rms_norm(torch.relu(h), self.w, 1e-5)


def _fwd_bwd(model, x):
    model.zero_grad()
    y = model(x)
    (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
    return y.detach(), [p.grad.clone() for p in model.parameters()]


class GraphRecorder:
    """A torch.compile backend that keeps the FX graphs Dynamo hands it (then runs them as-is)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_matches_eager(backend, dynamic):
    torch.manual_seed(0)
    model = Block()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)
    for shape in [(4, 33, 96), (5, 130, 96)]:
        x = torch.randn(shape)
        y_eager, g_eager = _fwd_bwd(model, x)
        y_comp, g_comp = _fwd_bwd(compiled, x)
        torch.testing.assert_close(y_comp, y_eager, rtol=1e-5, atol=1e-5)
        for ge, gc in zip(g_eager, g_comp):
            torch.testing.assert_close(gc, ge, rtol=1e-4, atol=1e-4)


def test_compiled_graph_has_one_graph_with_the_nki_ops():
    torch.manual_seed(0)
    model = Block()
    rec = GraphRecorder()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=rec)
    compiled(torch.randn(2, 9, 96))
    assert len(rec.graphs) == 1
    targets = [str(n.target) for n in rec.graphs[0].graph.nodes if n.op == "call_function"]
    assert sum("nki.rms_norm" in t for t in targets) == 2
    assert sum("nki.tensor_add" in t for t in targets) == 1
    explain = torch._dynamo.explain(model)(torch.randn(2, 9, 96))
    assert explain.graph_break_count == 0 and explain.graph_count == 1


def test_compiled_backward_uses_the_backward_op():
    torch.manual_seed(0)
    model = Block()
    seen = []

    def backend(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        from functorch.compile import make_boxed_func

        def keep(g, _):
            seen.append(g)
            return make_boxed_func(g.forward)

        return aot_autograd(fw_compiler=keep, bw_compiler=keep)(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    compiled(torch.randn(2, 9, 96)).sum().backward()
    fw, bw = seen
    assert "nki.rms_norm_backward" in str(bw.graph) and "nki.rms_norm_backward" not in str(fw.graph)


def test_compile_bf16_matches_eager():
    torch.manual_seed(0)
    model = Block().to(torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(3, 40, 96, dtype=torch.bfloat16)
    torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


def test_compile_reports_argument_errors():
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: torch_ops.rms_norm(x, w), fullgraph=True)
    with pytest.raises(Exception, match="weight has shape"):
        f(torch.randn(4, 8), torch.randn(7))
