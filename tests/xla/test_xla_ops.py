"""torch_ops on XLA tensors: values from the simulator behind the custom-call, autograd, training."""

from __future__ import annotations

import pytest
import torch
import torch_xla

import nki_kernels as K
import torch_ops


def rms_ref(x, w, eps):
    x64, w64 = x.detach().double(), w.detach().double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64


TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(256, 1024), (130, 515), (3, 7, 40)], ids=str)
def test_add(xla_device, shape, dtype):
    a, b = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    c = torch_ops.add(a.to(xla_device), b.to(xla_device))
    assert c.device.type == "xla" and c.dtype == dtype and c.shape == a.shape
    torch.testing.assert_close(c.cpu(), a + b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(130, 96), (2, 65, 1100)], ids=str)
def test_rms_norm_forward_backward(xla_device, shape, dtype):
    x = torch.randn(shape).to(dtype)
    w = (1 + 0.1 * torch.randn(shape[-1])).to(dtype)
    dy = torch.randn(shape).to(dtype)
    xd = x.to(xla_device).requires_grad_()
    wd = w.to(xla_device).requires_grad_()
    y = torch_ops.rms_norm(xd, wd)
    y.backward(dy.to(xla_device))
    tol = TOL[dtype]
    torch.testing.assert_close(y.cpu().double(), rms_ref(x, w, 1e-6), rtol=tol, atol=tol)
    # The same kernels on CPU give the same gradients.
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch_ops.rms_norm(xc, wc).backward(dy)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, rtol=tol, atol=tol * 10)


def test_seed_training_example(xla_device):
    """The NKI guide's example: out = a * b * NkiAddFunc(a, b); loss.backward(); sync."""
    a0, b0 = torch.randn(256, 1024), torch.randn(256, 1024)
    a = a0.to(xla_device).detach().requires_grad_()
    b = b0.to(xla_device).detach().requires_grad_()
    out = a * b * torch_ops.NkiAddFunc.apply(a, b)
    out.sum().backward()
    torch_xla.sync()
    torch.testing.assert_close(out.cpu(), a0 * b0 * (a0 + b0))
    torch.testing.assert_close(a.grad.cpu(), b0 * (a0 + b0) + a0 * b0)
    torch.testing.assert_close(b.grad.cpu(), a0 * (a0 + b0) + a0 * b0)


def test_rms_norm_function_on_xla(xla_device):
    x, w = torch.randn(40, 64), torch.randn(64)
    xd = x.to(xla_device).requires_grad_()
    y = torch_ops.NkiRMSNormFunc.apply(xd, w.to(xla_device), 1e-6)
    y.sum().backward()
    torch.testing.assert_close(y.cpu().double(), rms_ref(x, w, 1e-6), rtol=2e-5, atol=2e-5)
    assert xd.grad is not None and xd.grad.device.type == "xla"


def test_kernel_called_with_xla_tensors(xla_device):
    a, b = torch.randn(300, 700), torch.randn(300, 700)
    c = K.tensor_add_kernel[K.add_grid((300, 700))](a.to(xla_device), b.to(xla_device))
    assert c.device.type == "xla"
    torch.testing.assert_close(c.cpu(), a + b, rtol=0, atol=0)


def test_inputs_with_pending_graphs_and_chained_kernels(xla_device):
    x, w = torch.randn(5, 130, 48), torch.randn(48)
    xd = x.to(xla_device) * 3 - 1                        # pending graph as the kernel's input
    h = torch_ops.add(xd, xd)
    y = torch_ops.rms_norm(h, w.to(xla_device)) + h      # kernel result feeding a kernel and an op
    torch_xla.sync()
    h_ref = (x * 3 - 1) * 2
    torch.testing.assert_close(y.cpu().double(), rms_ref(h_ref, w, 1e-6) + h_ref.double(), rtol=1e-5, atol=1e-5)


def test_training_loop_matches_plain_torch(xla_device):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.RMSNorm(64, eps=1e-6), torch.nn.Linear(64, 32))
    ours = torch.nn.Sequential(torch.nn.Linear(32, 64), torch_ops.RMSNorm(64), torch.nn.Linear(64, 32))
    ours.load_state_dict(ref.state_dict())
    ours.to(xla_device)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    x = torch.randn(16, 32)
    xd = x.to(xla_device)
    for _ in range(4):
        for model, optim, inp in ((ref, opt_ref, x), (ours, opt, xd)):
            optim.zero_grad()
            loss = (model(inp) + inp).pow(2).mean() if model is ref else torch_ops.add(model(inp), inp).pow(2).mean()
            loss.backward()
            optim.step()
        torch_xla.sync()
    for (n, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q.cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=n)


def test_errors_before_any_graph(xla_device):
    a = torch.randn(4, 8).to(xla_device)
    with pytest.raises(ValueError, match="a is on xla:0 but b is on cpu"):
        torch_ops.add(a, torch.randn(4, 8))
    with pytest.raises(ValueError, match=r"weight has shape \(7,\)"):
        torch_ops.rms_norm(a, torch.randn(7).to(xla_device))
