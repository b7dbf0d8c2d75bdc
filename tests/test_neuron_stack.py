"""Dispatch to the genuine Neuron stack, per SDK era, against the stand-ins of tests/neuron_standins.

Each era runs in a subprocess with its stand-in packages first on ``sys.path``
(import state matters: the kernel stack is chosen when ``nki_kernels`` is
imported). The stand-ins record every call and compute with the simulator, so
values are checked against NumPy float64 references here, and the recorded
entry point, grid, argument shapes and static values against what each SDK's
documentation prescribes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "neuron_standins"

PRELUDE = """
import json, os, sys
import numpy as np
import standin_log
from standin_log import CALLS
rng = np.random.default_rng(0)
out = {}
def done():
    out["calls"] = CALLS
    print("RESULT " + json.dumps(out, default=lambda v: np.asarray(v, dtype=np.float64).tolist()))
"""

JAX_OPS = """
import jax, jax.numpy as jnp
import jax_ops, nki_kernels
a = rng.standard_normal((130, 600)).astype(np.float32)
b = rng.standard_normal((130, 600)).astype(np.float32)
x = rng.standard_normal((3, 100, 64)).astype(np.float32)
w = (1 + rng.standard_normal(64) / 10).astype(np.float32)
out.update(a=a, b=b, x=x, w=w)
out["env"] = str(nki_kernels.neuron_environment())
out["stack"] = nki_kernels.backend.STACK
out["add"] = jax.jit(jax_ops.add)(a, b)
n = len(CALLS)
out["grad_w"] = jax.jit(jax.grad(lambda x, w: (jax_ops.rms_norm(x[0], w, 1e-5) ** 2).sum(), argnums=1))(x, w)
out["grad_calls"] = CALLS[n:]
n = len(CALLS)
out["vmap"] = jax.vmap(lambda xi: jax_ops.rms_norm(xi, w, 1e-5))(x)
out["vmap_calls"] = CALLS[n:]
n = len(CALLS)  # a kernel launched directly, as op code does: the same per-era path
out["direct"] = jax.jit(lambda a, b: nki_kernels.tensor_add_kernel[2, 2](a, b))(a, b)
out["numpy"] = nki_kernels.tensor_add(a, b)
out["direct_calls"] = CALLS[n:]
done()
"""


def run_era(era: str, body: str, extra=(), python=sys.executable, **env) -> dict:
    """Run ``body`` with the stand-ins of ``era`` (and the ``extra`` stand-in folders) installed;
    returns its ``out`` dict (with ``calls``)."""
    path = [str(STANDINS / d) for d in (era, *extra)] + [str(STANDINS), str(ROOT)]
    environ = {k: v for k, v in os.environ.items() if k != "NKI_OPS_KERNEL_STACK"}
    environ.update(PYTHONPATH=os.pathsep.join(path), JAX_PLATFORMS="cpu", **env)
    proc = subprocess.run([python, "-c", PRELUDE + textwrap.dedent(body)], env=environ, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def rms_norm_ref(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * np.asarray(w, np.float64)


def rms_norm_grad_w_ref(x, w, eps):
    """d/dw sum(rms_norm(x, w)**2) = sum over rows of 2 * y * xhat."""
    x = np.asarray(x, np.float64)
    xhat = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return (2 * xhat * np.asarray(w, np.float64) * xhat).sum(0)


def check_jax_values(out):
    a, b, x, w = (np.asarray(out[k]) for k in ("a", "b", "x", "w"))
    for key in ("add", "direct", "numpy"):
        np.testing.assert_allclose(out[key], a.astype(np.float64) + b, rtol=1e-6)
    np.testing.assert_allclose(out["grad_w"], rms_norm_grad_w_ref(x[0], w, 1e-5), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(out["vmap"], rms_norm_ref(x, w, 1e-5), rtol=2e-5, atol=2e-5)


def by_kernel(calls, name):
    return [c for c in calls if c.get("kernel") == name]


def one_launch(calls):
    """The launch a group of records describes: ops may trace their implementation more than once
    (shape inference, then lowering), each trace calling the kernel with the same arguments."""
    assert calls and all(c == calls[0] for c in calls), calls
    return calls[0]


def folded(calls):
    """The launch of all 3 x 100 rows of the vmapped rms_norm (grid of 3 programs of 128 rows)."""
    rows = [c for c in calls if c["args"][0]["shape"] == [300, 64]]
    assert rows and all(c["grid"] == [3] and c["kernel"] == "rms_norm_fwd_kernel" for c in rows), calls
    return rows[0]


def op_calls(out):
    """The calls made by the ops (before the direct launches at the end of JAX_OPS)."""
    return out["calls"][:len(out["calls"]) - len(out["direct_calls"])]


def test_sdk_2_22_jax_goes_through_jax_neuronx_nki_call():
    out = run_era("sdk_2_22", JAX_OPS)
    check_jax_values(out)
    assert out["stack"] == "neuronxcc"
    assert "<= 2.22" in out["env"] and "jax_neuronx.nki_call" in out["env"]
    assert {c["entry"] for c in op_calls(out)} == {"jax_neuronx.nki_call"}  # never the kernel directly
    add = one_launch(by_kernel(op_calls(out), "tensor_add_kernel"))
    assert add["grid"] == [2, 2] and add["static"] == {}  # 130 rows / 128, 600 cols / 512
    assert [arg["shape"] for arg in add["args"]] == [[130, 600], [130, 600]]
    assert add["out_shape"] == [[[130, 600], "float32"]]  # derived from the kernel's simulator twin
    fwd = one_launch(by_kernel(out["grad_calls"], "rms_norm_fwd_kernel"))
    assert fwd["static"] == {"eps": 1e-5, "return_rstd": True} and fwd["grid"] == [1]
    assert fwd["out_shape"] == [[[100, 64], "float32"], [[100, 1], "float32"]]
    bwd = one_launch(by_kernel(out["grad_calls"], "rms_norm_bwd_kernel"))
    assert [arg["shape"] for arg in bwd["args"]] == [[100, 64], [100, 64], [64], [100, 1]]
    # vmap folds the batch into rows: a launch of all 300 rows (the op may also trace one example
    # for shapes), with the same entry point
    vm = folded(out["vmap_calls"])
    assert vm["entry"] == "jax_neuronx.nki_call" and vm["static"]["eps"] == 1e-5
    assert vm["out_shape"][0] == [[300, 64], "float32"]
    traced, numpy = out["direct_calls"]  # jit traces a direct launch once
    assert traced["entry"] == "jax_neuronx.nki_call" and traced["grid"] == [2, 2]
    assert numpy["entry"] == "neuronxcc.nki.jit" and [arg["kind"] for arg in numpy["args"]] == ["numpy", "numpy"]


def test_sdk_2_23_jax_calls_the_neuronxcc_kernel_directly_on_tracers():
    out = run_era("sdk_2_23", JAX_OPS)
    check_jax_values(out)
    assert out["stack"] == "neuronxcc" and "2.23-2.26" in out["env"]
    assert "kernel[grid](*arrays, **static)" in out["env"]  # printed as text, not read as console markup
    assert {c["entry"] for c in op_calls(out)} == {"neuronxcc.nki.jit"}
    add = one_launch(by_kernel(op_calls(out), "tensor_add_kernel"))
    assert add["grid"] == [2, 2] and all(arg["type"].endswith("Tracer") for arg in add["args"])
    assert {c["kernel"] for c in out["grad_calls"]} == {"rms_norm_fwd_kernel", "rms_norm_bwd_kernel"}
    fwd = one_launch(by_kernel(out["grad_calls"], "rms_norm_fwd_kernel"))
    assert fwd["static"] == {"eps": 1e-5, "return_rstd": True}
    assert folded(out["vmap_calls"])["entry"] == "neuronxcc.nki.jit"
    traced, numpy = out["direct_calls"]  # jit traces a direct launch once
    assert traced["entry"] == numpy["entry"] == "neuronxcc.nki.jit" and traced["args"][0]["type"].endswith("Tracer")
    assert numpy["args"][0]["kind"] == "numpy" and numpy["grid"] == [2, 2]


def test_sdk_2_27_keeps_first_generation_kernels_on_neuronxcc():
    out = run_era("sdk_2_27", JAX_OPS)
    check_jax_values(out)
    assert out["stack"] == "neuronxcc" and "2.27" in out["env"]
    assert {c["entry"] for c in out["calls"]} == {"neuronxcc.nki.jit"}  # never the standalone nki.jit


STANDALONE_KERNEL = """
import nki, nki.isa as nisa, nki.language as nl

@nki.jit
def copy_add(a, b):
    sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sa, src=a)
    sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=sb, src=b)
    sc = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=sc, data1=sa, data2=sb, op=nl.add)
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=c, src=sc)
    return c

a = rng.standard_normal((64, 96)).astype(np.float32)
b = rng.standard_normal((64, 96)).astype(np.float32)
out.update(a=a, b=b)
"""


def test_sdk_2_28_standalone_only_refuses_spmd_grids_and_calls_gridless_kernels_directly():
    out = run_era("sdk_2_28", STANDALONE_KERNEL + """
import jax, jax_ops, nki_kernels
out["stack"] = nki_kernels.backend.STACK
out["sdk"] = nki_kernels.neuron_environment().sdk
out["jit"] = jax.jit(lambda a, b: jax_ops.nki_call(copy_add, a, b))(a, b)
n = len(CALLS)
stacked = np.stack([a, b, a])
out["vmap"] = jax.jit(jax.vmap(lambda s: jax_ops.nki_call(copy_add, s, b)))(stacked)
out["vmap_calls"] = CALLS[n:]
try:
    jax_ops.add(a, b)
except NotImplementedError as exc:
    out["refused"] = str(exc)
done()
""")
    assert out["stack"] == "nki" and out["sdk"].startswith("2.28+")
    np.testing.assert_allclose(out["jit"], np.add(out["a"], out["b"], dtype=np.float64), rtol=1e-6)
    assert "logical cores" in out["refused"] and "tensor_add_kernel" in out["refused"]
    np.testing.assert_allclose(out["vmap"], np.stack([out["a"], out["b"], out["a"]]) + np.asarray(out["b"]),
                               rtol=1e-6)
    # under vmap the genuine kernel gets one example at a time (lax.map), never a batch tracer
    assert out["vmap_calls"]
    for per_example in out["vmap_calls"]:  # custom_vmap traces the call for its shapes, lax.map for its body
        assert [arg["shape"] for arg in per_example["args"]] == [[64, 96], [64, 96]]
        assert not any("Batch" in arg["type"] for arg in per_example["args"])
    direct = [c for c in out["calls"] if c["kernel"] == "copy_add"][:1]
    assert [c["entry"] for c in direct] == ["nki.jit"] and direct[0]["grid"] == []
    assert direct[0]["args"][0]["type"].endswith("Tracer")
    assert not [c for c in out["calls"] if c["kernel"] == "tensor_add_kernel"]  # refused before any launch


def test_kernel_stack_override_asks_for_the_standalone_package():
    out = run_era("sdk_2_27", """
import nki_kernels, jax_ops
out["stack"] = nki_kernels.backend.STACK
try:
    jax_ops.add(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
except NotImplementedError as exc:
    out["refused"] = str(exc)
done()
""", NKI_OPS_KERNEL_STACK="nki")
    assert out["stack"] == "nki" and "NKI_OPS_KERNEL_STACK=neuronxcc" in out["refused"]


TORCH_XLA = """
import torch, nki_kernels, torch_ops

class XlaLike(torch.Tensor):
    # A CPU tensor that reports the XLA device: what torch-xla tensors look like to the dispatch.
    @property
    def device(self):
        return torch.device("xla", 0)

x = torch.tensor(rng.standard_normal((200, 48)), dtype=torch.float32)
w = torch.tensor(1 + rng.standard_normal(48) / 10, dtype=torch.float32)
out.update(x=x.numpy(), w=w.numpy(), xla_route=nki_kernels.neuron_environment().route("torch-xla").path)
dy = torch.tensor(rng.standard_normal((200, 48)), dtype=torch.float32)
out["dy"] = dy.numpy()
xx, ww, dyx = (t.as_subclass(XlaLike) for t in (x, w, dy))
# The launches behind the torch ops (their autograd wrappers are the op layer's; tests/xla runs them
# on real torch-xla tensors): through nki_call, and directly as op code launches them.
from nki_kernels import add_grid, rms_norm_bwd_kernel, rms_norm_fwd_kernel, row_grid, tensor_add_kernel
y, rstd = torch_ops.nki_call(rms_norm_fwd_kernel, xx, ww, grid=row_grid(200), eps=1e-5, return_rstd=True)
dx, dw_partial = rms_norm_bwd_kernel[row_grid(200)](dyx, xx, ww, rstd)
out.update(y=y.as_subclass(torch.Tensor).numpy(), dx=dx.as_subclass(torch.Tensor).numpy(),
           dw=dw_partial.as_subclass(torch.Tensor).sum(0).numpy(), y_device=str(y.device))
s = torch_ops.nki_call(tensor_add_kernel[add_grid((200, 48))], xx, xx)  # kernel[grid] given to nki_call
out["sum"] = s.as_subclass(torch.Tensor).numpy()
n = len(CALLS)  # the SDK's own functions get the SDK's kernel[grid], not our wrapper
out["simulated"] = nki_kernels.backend.nki.simulate_kernel(tensor_add_kernel[2, 1], x.numpy(), x.numpy())
out["sdk_calls"] = CALLS[n:]
n = len(CALLS)
out["cpu"] = torch_ops.rms_norm(x, w, 1e-5).numpy()  # CPU tensors: the simulator twin, nothing recorded
out["cpu_calls"] = CALLS[n:]
done()
"""


def test_sdk_2_23_torch_xla_tensors_go_to_the_genuine_jit():
    out = run_era("sdk_2_23", TORCH_XLA, extra=("fake_torch_xla",))
    x, w, dy = (np.asarray(out[k], np.float64) for k in ("x", "w", "dy"))
    np.testing.assert_allclose(out["y"], rms_norm_ref(x, w, 1e-5), rtol=2e-5, atol=2e-5)
    rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
    xhat, g = x * rstd, dy * w
    np.testing.assert_allclose(out["dx"], rstd * (g - xhat * (g * xhat).mean(-1, keepdims=True)), rtol=2e-4,
                               atol=2e-5)
    np.testing.assert_allclose(out["dw"], (dy * xhat).sum(0), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(out["sum"], 2 * x, rtol=1e-6)
    np.testing.assert_allclose(out["cpu"], rms_norm_ref(x, w, 1e-5), rtol=2e-5, atol=2e-5)
    assert out["cpu_calls"] == [] and out["y_device"].startswith("xla")
    assert out["xla_route"] == "genuine neuronxcc.jit: kernel[grid](*xla_tensors, **static)"
    np.testing.assert_allclose(out["simulated"], 2 * x, rtol=1e-6)
    received, launched = out["sdk_calls"]
    assert received == {"entry": "neuronxcc.nki.simulate_kernel", "kernel": "partial"}  # the stand-in's kernel[grid]
    assert launched["grid"] == [2, 1] and launched["args"][0]["kind"] == "numpy"
    fwd, bwd, add = out["calls"][:3]
    assert fwd["entry"] == bwd["entry"] == add["entry"] == "neuronxcc.nki.jit"
    assert add["kernel"] == "tensor_add_kernel" and add["grid"] == [2, 1]
    assert fwd["kernel"] == "rms_norm_fwd_kernel" and fwd["grid"] == [2]
    assert fwd["static"] == {"eps": 1e-5, "return_rstd": True}
    assert [arg["kind"] for arg in fwd["args"]] == ["torch:xla", "torch:xla"]
    assert bwd["kernel"] == "rms_norm_bwd_kernel" and [arg["shape"] for arg in bwd["args"]] == \
        [[200, 48], [200, 48], [48], [200, 1]]


def test_sdk_2_33_torchneuron_registers_each_launch_with_nki_op():
    out = run_era("sdk_2_33", STANDALONE_KERNEL + """
import torch, nki_kernels, torch_ops

class NeuronLike(torch.Tensor):
    # A CPU tensor that reports TorchNeuron's native device.
    @property
    def device(self):
        return torch.device("neuron", 0)

ta, tb = (torch.from_numpy(v).as_subclass(NeuronLike) for v in (a, b))
out["route"] = nki_kernels.neuron_environment().route("TorchNeuron").path
out["first"] = torch_ops.nki_call(copy_add, ta, tb).as_subclass(torch.Tensor).numpy()
out["second"] = torch_ops.nki_call(copy_add, tb, ta).as_subclass(torch.Tensor).numpy()
done()
""")
    ref = np.add(out["a"], out["b"], dtype=np.float64)
    np.testing.assert_allclose(out["first"], ref, rtol=1e-6)
    np.testing.assert_allclose(out["second"], ref, rtol=1e-6)
    assert "nki_op" in out["route"]
    entries = [c["entry"] for c in out["calls"]]
    assert entries == ["torch_neuronx.nki_op", "torch_neuronx.nki_op call", "nki.jit",
                       "torch_neuronx.nki_op call", "nki.jit"]  # registered once, called twice
    reg = out["calls"][0]
    assert reg["kernel"].startswith("nki_ops::copy_add_") and reg["signature"] == "(t0: torch.Tensor, t1: torch.Tensor) -> torch.Tensor"
    assert [arg["kind"] for arg in out["calls"][2]["args"]] == ["torch:neuron", "torch:neuron"]


def test_placeholders_and_simulator_modules_count_as_absent():
    out = run_era("placeholders", """
import nki_kernels, jax_ops
from nki_kernels import neuron_env
env = nki_kernels.neuron_environment()
out["stack"] = env.kernel_stack
out["notes"] = {p.name: [p.found, p.note] for p in env.packages}
out["add"] = jax_ops.add(np.ones((3, 5), np.float32), np.full((3, 5), 2, np.float32))
nki_kernels.simulator.install()   # our modules now sit in sys.modules as nki and neuronxcc.nki
env = neuron_env.refresh()
out["after_install"] = {p.name: [p.found, p.note] for p in env.packages}
done()
""")
    assert out["stack"] == "simulator"
    for name in ("nki", "neuronxcc.nki", "jax_neuronx", "torch_neuronx"):
        found, note = out["notes"][name]
        assert not found and "placeholder" in note, (name, note)
    np.testing.assert_allclose(out["add"], np.full((3, 5), 3.0))
    for name in ("nki", "neuronxcc.nki"):
        found, note = out["after_install"][name]
        assert not found and "simulator" in note, (name, note)


def test_nothing_installed_reports_the_simulator_paths():
    from nki_kernels import backend, neuron_environment
    from nki_kernels.simulator import language

    env = neuron_environment()
    assert env.kernel_stack == "simulator" and not env.genuine and backend.nl is language
    assert not env.package("nki").found and not env.package("neuron device").found
    assert "simulator" in env.route("JAX").path and "simulator" in env.route("torch CPU").path
    text = str(env)
    assert "Neuron packages" in text and "Kernel stack: simulator" in text and "TorchNeuron" in text
    with pytest.raises(KeyError, match="probed"):
        env.package("tensorflow_neuron")


def test_detection_is_cached_and_imports_no_framework_where_nothing_is_installed():
    code = ("import sys; from nki_kernels.neuron_env import neuron_environment; env = neuron_environment(); "
            "print(env is neuron_environment(), sorted(m for m in ('jax', 'torch', 'torch_xla') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "NKI_OPS_KERNEL_STACK"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "[]"]


def test_env_cli_prints_the_report():
    proc = subprocess.run([sys.executable, "-m", "nki_kernels.env"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "140"})
    assert proc.returncode == 0, proc.stderr
    assert "Neuron packages" in proc.stdout and "jax_neuronx" in proc.stdout and "torch-xla" in proc.stdout


def test_unknown_kernel_stack_override_is_a_value_error(monkeypatch):
    from nki_kernels import neuron_env

    monkeypatch.setenv("NKI_OPS_KERNEL_STACK", "tpu")
    neuron_env.kernel_stack.cache_clear()
    try:
        with pytest.raises(ValueError, match="NKI_OPS_KERNEL_STACK='tpu'"):
            neuron_env.kernel_stack()
        monkeypatch.setenv("NKI_OPS_KERNEL_STACK", "nki")
        neuron_env.kernel_stack.cache_clear()
        with pytest.raises(ValueError, match="not usable"):
            neuron_env.kernel_stack()
    finally:
        monkeypatch.delenv("NKI_OPS_KERNEL_STACK")
        neuron_env.kernel_stack.cache_clear()


def test_simulator_payload_is_refused_for_platforms_other_than_cpu():
    import jax
    import jax.numpy as jnp

    import jax_ops

    a = jnp.ones((4, 8), jnp.float32)
    ours = [jax.export.DisabledSafetyCheck.custom_call("AwsNeuronCustomNativeKernel")]
    cpu = jax.export.export(jax.jit(jax_ops.add), platforms=["cpu"], disabled_checks=ours)(a, a)
    assert "AwsNeuronCustomNativeKernel" in cpu.mlir_module()
    with pytest.raises(NotImplementedError, match="cannot be lowered for platform tpu"):
        jax.export.export(jax.jit(jax_ops.add), platforms=["tpu"], disabled_checks=ours)(a, a)


def _genuine_looking(name):
    """A module object named like a Neuron SDK module (not in sys.modules)."""
    return types.ModuleType(name)


def test_simulator_twin_swaps_the_genuine_modules_of_a_kernel():
    from nki_kernels import backend
    from nki_kernels.simulator import language, launch

    source = textwrap.dedent("""
        def scale_rows(x, factor=2.0):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.multiply(nl.load(x), factor))
            return out
    """)
    namespace = {"nl": _genuine_looking("neuronxcc.nki.language")}
    exec(source, namespace)  # noqa: S102 - a kernel whose globals hold a "genuine" nl
    genuine = types.SimpleNamespace(func=namespace["scale_rows"])
    twin = backend.simulator_twin(genuine)
    assert isinstance(twin, launch.Kernel) and twin.func.__globals__["nl"] is language
    assert namespace["nl"] is not language  # the kernel's own globals are untouched
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(launch.simulate(twin, (), x, factor=3.0), x.astype(np.float64) * 3)
    with pytest.raises(TypeError, match="not an @nki.jit kernel"):
        backend.simulator_twin(object())
