"""NEURON_FRAMEWORK_DEBUG=1: a torch-xla step writes its HLO with the custom-call into the CWD."""

from __future__ import annotations

import torch
import torch_xla

import torch_ops
from nki_kernels.custom_call import TARGET, decode_payload
from torch_ops.hlo_view import custom_calls


def _train_step(xla_device, model, x):
    model.zero_grad()
    loss = torch_ops.add(model(x), x).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    torch_xla.sync()
    return loss


def test_step_writes_pbtxt_with_custom_calls(xla_device, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NEURON_FRAMEWORK_DEBUG", "1")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch_ops.RMSNorm(32)).to(xla_device)
    x = torch.randn(8, 32).to(xla_device)
    for _ in range(3):
        _train_step(xla_device, model, x)
    files = sorted(tmp_path.glob("*.pbtxt"))
    assert len(files) == 1, files  # the same step graph every time: written once
    text = files[0].read_text()
    assert text.startswith("HloModule SyncTensorsGraph.") and "ENTRY %SyncTensorsGraph." in text
    assert f'custom_call_target="{TARGET}"' in text
    kernels = sorted(decode_payload(c["backend_config"])["kernel"]["qualname"] for c in custom_calls(text))
    assert kernels == ["rms_norm_bwd_kernel", "rms_norm_fwd_kernel", "tensor_add_kernel"]
    assert "concatenate" not in text  # the Neuron view, not the simulator's shims


def test_no_file_without_the_variable(xla_device, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEURON_FRAMEWORK_DEBUG", raising=False)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch_ops.RMSNorm(16)).to(xla_device)
    _train_step(xla_device, model, torch.randn(4, 16).to(xla_device))
    monkeypatch.setenv("NEURON_FRAMEWORK_DEBUG", "0")
    _train_step(xla_device, model, torch.randn(4, 16).to(xla_device))
    assert list(tmp_path.glob("*.pbtxt")) == []


def test_graph_without_custom_call_writes_nothing(xla_device, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NEURON_FRAMEWORK_DEBUG", "1")
    torch_ops.add(torch.ones(2, 2).to(xla_device), torch.ones(2, 2).to(xla_device))  # installs the hook
    torch_xla.sync()
    for f in tmp_path.glob("*.pbtxt"):
        f.unlink()
    y = torch.ones(3, 3).to(xla_device) * 2
    torch_xla.sync()
    assert list(tmp_path.glob("*.pbtxt")) == []
    assert y.cpu().sum().item() == 18
