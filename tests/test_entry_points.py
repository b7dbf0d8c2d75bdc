"""Entry points of the current docs: ``nki.simulate``, the ``NKI_SIMULATOR=1`` switch for unmodified
scripts, nki-library's ``nki_cpu_simulator.nki`` layout, and the standalone namespace's contents."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator import startup

nl = nki.language
nisa = nki.isa
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@nki.jit
def add_kernel(a_ptr, b_ptr):
    a = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.sbuf)
    b = nl.ndarray(b_ptr.shape, dtype=b_ptr.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=a_ptr)
    nisa.dma_copy(dst=b, src=b_ptr)
    c = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.add)
    out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def test_simulate_numpy_in_numpy_out():
    rng = np.random.default_rng(0)
    a, b = rng.random((128, 512), np.float32), rng.random((128, 512), np.float32)
    result = nki.simulate(add_kernel)(a, b)
    assert isinstance(result, np.ndarray)
    np.testing.assert_allclose(result, a + b, rtol=1e-6)


def test_simulate_wraps_a_plain_function():
    rng = np.random.default_rng(1)
    a, b = rng.random((8, 16), np.float32), rng.random((8, 16), np.float32)
    np.testing.assert_allclose(nki.simulate(add_kernel.func)(a, b), a + b, rtol=1e-6)


def test_simulate_torch_in_torch_out_and_inputs_updated_in_place():
    torch = pytest.importorskip("torch")

    @nki.jit
    def double_in_place(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x, src=t)
        return x

    x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    ref = x.clone() * 2
    out = nki.simulate(double_in_place)(x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x, ref)


def test_target_override_selects_the_simulated_neuroncore(monkeypatch):
    @nki.jit
    def version(a):
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=nisa.get_nc_version().value)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.zeros((1, 1), np.float32)
    for name, want in (("trn1", 2), ("gen3", 3), ("trn3", 4)):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", name)
        assert int(nki.simulate(version)(a)[0, 0]) == want
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(ValueError, match="NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.simulate(version)(a)


def test_standalone_namespace_lists_the_current_api_only():
    public = {n for n in dir(nki) if not n.startswith("_")}
    assert {"jit", "simulate", "language", "isa", "dtype", "tensor"} <= public
    for gone in ("baremetal", "benchmark", "profile", "simulate_kernel", "mgrid", "arange", "par_dim", "Tile",
                 "np", "constants", "launch", "core"):
        assert gone not in public, gone
    from nki_kernels.simulator import nki as gen1

    for kept in ("baremetal", "benchmark", "profile", "simulate_kernel"):
        assert hasattr(gen1, kept), kept  # the first generation keeps its names


def _run(code, env=None, cwd=None):
    full = dict(os.environ, PYTHONPATH=REPO, **(env or {}))
    full.pop("NKI_SIMULATOR", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=cwd,
                          timeout=600)


def test_cpu_simulator_layout_of_nki_library_harness():
    code = textwrap.dedent("""
        from nki_kernels.simulator import install; install()
        import numpy as np
        import nki_cpu_simulator.nki.builtin, nki_cpu_simulator.nki.compiler
        import nki_cpu_simulator.nki.isa as nisa, nki_cpu_simulator.nki.isa.constants as c
        import nki_cpu_simulator.nki.language as nl, nki_cpu_simulator.nki.language.dtypes as d
        import nki_cpu_simulator.nki.tensor as t, nki_cpu_simulator.nki.typing
        from nki_cpu_simulator import nki
        from nki.isa.constants import oob_mode, dge_mode, matmul_perf_mode
        assert c.oob_mode is nisa.oob_mode is oob_mode and d.float8_e4m3fn is nl.float8_e4m3fn
        assert isinstance(nl.ndarray, object) and t.NkiTensor is nl.NkiTensor
        @nki.jit
        def scale(x, factor):
            s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=x)
            nisa.tensor_scalar(dst=s, data=s, op0=nl.multiply, operand0=factor)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=s)
            return out
        x = np.arange(32, dtype=np.float32).reshape(4, 8)
        out = nki.cpu_simulate(scale)[1](x=x, factor=3.0)
        assert np.array_equal(out, x * 3), out
        import importlib.metadata as md
        try:
            md.distribution("nki_cpu_simulator"); raise SystemExit("a distribution of that name exists")
        except md.PackageNotFoundError:
            pass
        print("OK")
    """)
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-3000:]


UNMODIFIED_SCRIPT = textwrap.dedent("""
    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def add_kernel(a_ptr, b_ptr):
        a = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.sbuf)
        b = nl.ndarray(b_ptr.shape, dtype=b_ptr.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=a_ptr)
        nisa.dma_copy(dst=b, src=b_ptr)
        nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
        out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    a = np.random.rand(128, 512).astype(np.float32)
    b = np.random.rand(128, 512).astype(np.float32)
    {call}
    np.testing.assert_allclose(result, {expect}, rtol=1e-5)
    print("SCRIPT OK")
""")


@pytest.mark.parametrize("call, expect", [("result = add_kernel(a, b)", "a + b"),
                                          ("import torch\nresult = add_kernel(torch.from_numpy(a), "
                                           "torch.from_numpy(b)).numpy()", "a + b")], ids=["numpy", "torch"])
def test_nki_simulator_switch_runs_an_unmodified_script(tmp_path, call, expect):
    if "torch" in call:
        pytest.importorskip("torch")
    script = tmp_path / "my_script.py"
    script.write_text(UNMODIFIED_SCRIPT.format(call=call, expect=expect))
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    startup.write_hook(site_dir)
    # What the interpreter does at start-up with a site-packages holding the hook, then `python my_script.py`.
    launcher = (f"import site, runpy, sys; site.addsitedir({str(site_dir)!r}); sys.argv = [{str(script)!r}]; "
                f"runpy.run_path({str(script)!r}, run_name='__main__')")
    on = _run(launcher, {"NKI_SIMULATOR": "1"})
    assert on.returncode == 0 and "SCRIPT OK" in on.stdout, on.stderr[-3000:]
    off = _run(launcher, {"NKI_SIMULATOR": "0"})
    assert off.returncode != 0 and "nki" in off.stderr  # without the switch nothing registers `nki`


def test_switch_values():
    assert startup.enabled({"NKI_SIMULATOR": "1"}) and startup.enabled({"NKI_SIMULATOR": "true"})
    for v in ("", "0", "false", "off", "no"):
        assert not startup.enabled({"NKI_SIMULATOR": v})
    assert not startup.activate({})
