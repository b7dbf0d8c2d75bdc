"""Real torch-xla tensors with the SDK 2.23 stand-ins (``neuronxcc.nki`` + ``torch_neuronx``): the XLA
device is then taken for a NeuronCore, so launches go to the genuine ``nki.jit`` and never emit
nki-ops' custom-call. Runs in ``.venv-xla`` (see tests/xla/conftest.py)."""

from __future__ import annotations

import numpy as np

from tests.test_neuron_stack import rms_norm_ref, run_era

BODY = """
import torch, torch_xla, torch_ops, nki_kernels
from nki_kernels.simulator import nki as sim_nki, language as sim_nl

dev = torch_xla.device()
out["route"] = nki_kernels.neuron_environment().route("torch-xla").path
x0 = rng.standard_normal((150, 40)).astype(np.float32)
w0 = (1 + rng.standard_normal(40) / 10).astype(np.float32)
out.update(x=x0, w=w0)
x = torch.tensor(x0, device=dev, requires_grad=True)
w = torch.tensor(w0, device=dev, requires_grad=True)
y = torch_ops.rms_norm(x, w, 1e-5)
(y * y).sum().backward()
out["y"], out["dx"], out["dw"] = y.detach().cpu().numpy(), x.grad.cpu().numpy(), w.grad.cpu().numpy()
out["hlo_has_payload"] = "AwsNeuronCustomNativeKernel" in torch_ops.neuron_hlo([y, x.grad, w.grad])
n = len(CALLS)

@sim_nki.jit
def doubled(a):  # a simulator kernel: on a NeuronDevice it must run on the host
    o = sim_nl.ndarray(a.shape, dtype=a.dtype, buffer=sim_nl.shared_hbm)
    sim_nl.store(o, value=sim_nl.multiply(sim_nl.load(a), 2.0))
    return o

xs = torch.tensor(x0[:100], device=dev)
d = doubled(xs)
out["doubled"] = d.cpu().numpy()
out["doubled_hlo_has_payload"] = "AwsNeuronCustomNativeKernel" in torch_ops.neuron_hlo([d])
out["doubled_calls"] = CALLS[n:]
done()
"""


def test_real_xla_tensors_take_the_genuine_jit_and_never_our_payload():
    import sys

    out = run_era("sdk_2_23", BODY, python=sys.executable, PJRT_DEVICE="CPU")
    x, w = np.asarray(out["x"], np.float64), np.asarray(out["w"], np.float64)
    y_ref = rms_norm_ref(x, w, 1e-5)
    np.testing.assert_allclose(out["y"], y_ref, rtol=2e-5, atol=2e-5)
    rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
    xhat, g = x * rstd, 2 * y_ref * w  # dy = 2 y
    np.testing.assert_allclose(out["dx"], rstd * (g - xhat * (g * xhat).mean(-1, keepdims=True)), rtol=2e-4,
                               atol=2e-4)
    np.testing.assert_allclose(out["dw"], (2 * y_ref * xhat).sum(0), rtol=2e-4, atol=2e-4)
    assert out["route"].startswith("genuine neuronxcc.jit")
    assert not out["hlo_has_payload"] and not out["doubled_hlo_has_payload"]
    kernels = {c["kernel"] for c in out["calls"] if c["entry"] == "neuronxcc.nki.jit"}
    assert {"rms_norm_fwd_kernel", "rms_norm_bwd_kernel"} <= kernels
    assert all(arg["kind"] == "torch:xla" for c in out["calls"] for arg in c["args"] if isinstance(arg, dict))
    np.testing.assert_allclose(out["doubled"], 2 * x[:100], rtol=1e-6)
    assert out["doubled_calls"] == []  # a simulator kernel is not the genuine stack's
