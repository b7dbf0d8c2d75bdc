"""nki-ops demo: the NKI kernels on the simulator against NumPy, then through JAX and PyTorch.

Run with ``bash scripts/demo.sh`` (sets up the environment first). Each line compares a result
with a float64 reference and states the tolerance it is held to: fp32 results to rtol = atol =
1e-5, bf16 results to 1e-2 (bf16 keeps 8 significant bits: one rounding is up to 2**-9 relative,
and the inputs are rounded too). The exit status is 1 if any line fails.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import ml_dtypes
import numpy as np

import nki_kernels as K
from nki_kernels.simulator import NKIError, nki
from nki_kernels.simulator import language as nl


def rms_ref(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


TOL = {"fp32": 1e-5, "bf16": 1e-2}
FAILED = []


def report(name, got, ref, tol="fp32"):
    """Print the largest error of ``got`` against ``ref`` and whether it is within
    ``|got - ref| <= t + t * |ref|`` for the tolerance ``t`` of ``tol``."""
    t = TOL[tol]
    got = np.asarray(got, np.float64)
    err = np.abs(got - ref)
    ok = bool((err <= t + t * np.abs(ref)).all())
    if not ok:
        FAILED.append(name)
    print(f"  {name:<40} {tuple(np.shape(got))!s:<14} max |err| {err.max():.1e}   "
          f"rtol=atol={t:.0e} ({tol})  {'OK' if ok else 'FAIL'}")


def simulator_demo():
    print("NKI kernels on the NumPy simulator")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 1000)).astype(np.float32)
    b = rng.standard_normal((300, 1000)).astype(np.float32)
    report("tensor_add fp32 (ragged 300x1000)", K.tensor_add(a, b), a.astype(np.float64) + b)
    ab = a.astype(ml_dtypes.bfloat16)
    report("tensor_add bf16", K.tensor_add(ab, ab), (ab.astype(np.float64) * 2), "bf16")

    x = rng.standard_normal((4, 65, 4096)).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)
    report("rms_norm fp32 (4x65x4096)", K.rms_norm(x, w, 1e-6), rms_ref(x, w, 1e-6))
    xb, wb = x.astype(ml_dtypes.bfloat16), w.astype(ml_dtypes.bfloat16)
    report("rms_norm bf16", K.rms_norm(xb, wb, 1e-6), rms_ref(xb.astype(np.float32), wb.astype(np.float32), 1e-6),
           "bf16")

    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx, dw = K.rms_norm_backward(dy, x, w, 1e-6)
    x64 = x.astype(np.float64)
    r = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
    g, xhat = dy * w, x64 * r
    report("rms_norm_backward dx", dx, r * (g - xhat * (g * xhat).mean(-1, keepdims=True)))
    report("rms_norm_backward dweight", dw, (dy * xhat).reshape(-1, 4096).sum(0))

    print("\nWhat the Neuron compiler would reject, caught by the simulator:")

    @nki.jit
    def too_wide(t):
        return nl.exp(nl.load(t[0:256, 0:64]))

    try:
        too_wide(a)
    except NKIError as exc:
        print(f"  NKIError: {exc}")


def jax_demo():
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("jax_ops.ops") is None:
        print("\n(JAX not installed: skipping the JAX part)")
        return
    import jax
    import jax.numpy as jnp

    import jax_ops

    print("\nJAX: jax_ops.rms_norm under jit and grad (custom-call AwsNeuronCustomNativeKernel on CPU)")
    x = jax.random.normal(jax.random.PRNGKey(0), (256, 1024), jnp.float32)
    w = jnp.linspace(0.5, 1.5, 1024, dtype=jnp.float32)

    def loss(x, w):
        return jnp.sum(jax_ops.rms_norm(x, w) ** 2)

    def loss_ref(x, w):
        y = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w
        return jnp.sum(y ** 2)

    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    gr = jax.grad(loss_ref, argnums=(0, 1))(x, w)
    report("grad x (vs jnp)", g[0], np.asarray(gr[0], np.float64))
    report("grad weight (vs jnp)", g[1], np.asarray(gr[1], np.float64))
    # The HLO of the same jit(grad(loss)): one custom-call per kernel launch, forward and backward.
    from nki_kernels.custom_call import decode_payload

    hlo = jax_ops.neuron_hlo(jax.jit(jax.grad(loss, argnums=(0, 1))), x, w)
    calls = [ln for ln in hlo.splitlines() if 'custom_call_target="AwsNeuronCustomNativeKernel"' in ln]
    print(f"  HLO of jit(grad(loss)): {len(calls)} custom-calls AwsNeuronCustomNativeKernel")
    for ln in calls:
        payload = decode_payload(re.search(r'backend_config="([^"]*)"', ln).group(1))
        result = ln.split("=", 1)[1].split("custom-call(")[0].strip()
        print(f"    {payload['kernel']['qualname']:<22} grid={payload['grid']}  -> {result}")


def torch_demo():
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("torch_ops.functions") is None:
        print("\n(torch not installed: skipping the PyTorch part)")
        return
    import torch

    import torch_ops

    print("\nPyTorch: torch_ops.RMSNorm (drop-in for torch.nn.RMSNorm) forward and backward on CPU")
    torch.manual_seed(0)
    x = torch.randn(8, 64, 512, requires_grad=True)
    ours, ref = torch_ops.RMSNorm(512), torch.nn.RMSNorm(512, eps=1e-6)
    ours.load_state_dict(ref.state_dict())
    y, yr = ours(x), ref(x)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    (gxr,) = torch.autograd.grad(yr.square().sum(), x)
    report("RMSNorm forward (vs torch.nn.RMSNorm)", y.detach().numpy(), yr.detach().double().numpy())
    report("RMSNorm grad x", gx.numpy(), gxr.double().numpy())


def main():
    """Run every part of the demo."""
    simulator_demo()
    jax_demo()
    torch_demo()
    if FAILED:
        print(f"\n{len(FAILED)} result(s) outside their tolerance: {', '.join(FAILED)}")
        sys.exit(1)
    print("\nAll results within their stated tolerances.")


if __name__ == "__main__":
    main()
