"""An op declared with nki_kernels.op on XLA tensors: the custom-call in the lazy graph, autograd."""

from __future__ import annotations

import torch

import torch_ops

from .. import op_builder_kernels as T


def test_declared_op_emits_the_custom_call_and_trains(xla_device):
    x, w = torch.randn(130, 40), torch.randn(40)
    xd, wd = x.to(xla_device).requires_grad_(), w.to(xla_device).requires_grad_()
    y = T.softplus(T.scale(xd, wd), beta=2.0)
    assert y.device.type == "xla"
    assert torch_ops.neuron_hlo(y).count('custom_call_target="AwsNeuronCustomNativeKernel"') == 2
    y.sum().backward()
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ref = torch.nn.functional.softplus(x64 * w64, beta=2.0)
    ref.sum().backward()
    torch.testing.assert_close(y.cpu().double(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xd.grad.cpu().double(), x64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wd.grad.cpu().double(), w64.grad, rtol=1e-4, atol=1e-4)
