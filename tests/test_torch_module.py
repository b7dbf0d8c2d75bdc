"""torch_ops.RMSNorm: a drop-in for torch.nn.RMSNorm."""

from __future__ import annotations

import pytest
import torch

import torch_ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_torch_rmsnorm_and_state_dicts_interchange(dtype):
    ref = torch.nn.RMSNorm(96, eps=1e-6, dtype=dtype)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(96))
    ours = torch_ops.RMSNorm(96, dtype=dtype)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 33, 96).to(dtype)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(ours(x), ref(x), rtol=tol, atol=tol)
    back = torch.nn.RMSNorm(96, eps=1e-6, dtype=dtype)
    back.load_state_dict(ours.state_dict())
    assert torch.equal(back.weight, ref.weight)


def test_same_attributes_and_defaults():
    ours, ref = torch_ops.RMSNorm([64]), torch.nn.RMSNorm([64])
    assert ours.normalized_shape == ref.normalized_shape == (64,)
    assert ours.elementwise_affine and ours.weight.shape == ref.weight.shape
    assert torch.equal(ours.weight, torch.ones(64)) and ours.eps == 1e-6
    assert "64" in repr(ours) and "eps=1e-06" in repr(ours)


def test_no_affine_and_eps_none():
    ours = torch_ops.RMSNorm(40, eps=None, elementwise_affine=False)
    ref = torch.nn.RMSNorm(40, eps=None, elementwise_affine=False)
    assert ours.weight is None and list(ours.state_dict()) == list(ref.state_dict()) == []
    x = torch.randn(7, 40) * 1e-4  # small values: eps (finfo.eps) visible
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-6)
    x.requires_grad_()
    ours(x).sum().backward()
    assert x.grad is not None


def test_training_gradients_match_torch():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.RMSNorm(48, eps=1e-6), torch.nn.Linear(48, 8))
    ours = torch.nn.Sequential(torch.nn.Linear(32, 48), torch_ops.RMSNorm(48), torch.nn.Linear(48, 8))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(130, 32)
    for m in (ref, ours):
        m(x).pow(2).mean().backward()
    for (n, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_from_torch_and_factory_kwargs():
    ref = torch.nn.RMSNorm(16, eps=1e-5, dtype=torch.bfloat16)
    ours = torch_ops.RMSNorm.from_torch(ref)
    assert ours.eps == 1e-5 and ours.weight.dtype == torch.bfloat16
    meta = torch_ops.RMSNorm(16, device="meta")
    assert meta.weight.device.type == "meta"
    y = meta(torch.empty(3, 16, device="meta"))
    assert y.shape == (3, 16) and y.device.type == "meta"
