"""The pytest plugin nki-ops registers: ``pytest --nki-sim`` / ``--nki-shadow`` on a throwaway
kernel project, in a subprocess, also under pytest-xdist."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

# A user's suite as upstream harnesses write it: the conftest imports nki at the top.
CONFTEST = textwrap.dedent("""
    import nki                      # fails at conftest import unless the simulator is installed first
    import pytest

    @pytest.fixture
    def nl():
        import nki.language
        return nki.language
""")

TESTS = textwrap.dedent("""
    import os, subprocess, sys
    import numpy as np
    import nki, nki.isa as nisa
    import neuronxcc.nki as nki1, neuronxcc.nki.language as nl1

    @nki.jit
    def add_one(x_ptr):
        import nki.language as nl
        t = nl.ndarray(x_ptr.shape, dtype=x_ptr.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x_ptr)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        out = nl.ndarray(x_ptr.shape, dtype=x_ptr.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    @nki1.jit
    def neg(a):
        out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
        nl1.store(out, value=nl1.negative(nl1.load(a)))
        return out

    def test_standalone_kernel(nl):
        x = np.zeros((128, 16), np.float32)
        assert np.array_equal(add_one(x), x + 1)

    def test_first_generation_kernel():
        a = np.ones((128, 8), np.float32)
        assert np.array_equal(neg(a), -a)

    def test_the_simulator_is_what_runs():
        assert getattr(nki, "__nki_ops_simulator__", False)
        assert os.environ["NKI_SIMULATOR"] == "1"       # inherited by workers and subprocesses

    def test_the_library_is_not_assertion_rewritten():
        import nki_kernels.simulator.language as impl
        assert not any(name.startswith("@py") for name in vars(impl)) and not any(
            name.startswith("@py") for name in dir(nki))

    def test_subprocesses_inherit_it():
        r = subprocess.run([sys.executable, "-c", "import nki; print(nki.__nki_ops_simulator__)"],
                           capture_output=True, text=True, check=False)
        assert r.stdout.strip() == "True", r.stderr
""")

SHADOW_TESTS = textwrap.dedent("""
    import os

    def test_shadow_switches():
        from nki_kernels.simulator import config
        assert os.environ["NKI_SIM_SHADOW"] == "1"
        assert config.shadow is True
""")


@pytest.fixture
def project(tmp_path):
    """A throwaway kernel project with its own conftest and tests."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_kernels.py").write_text(TESTS)
    return tmp_path


def _pytest(cwd, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NKI_SIMULATOR", "NKI_SIM_SHADOW", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_plugin_is_registered_by_the_package():
    values = {ep.value for d in importlib.metadata.distributions(name="nki-ops")
              for ep in d.entry_points.select(group="pytest11")}
    assert values == {"nki_ops.pytest_plugin"}


def test_nki_sim_runs_an_unmodified_suite(project):
    r = _pytest(project, "--nki-sim")
    assert r.returncode == 0 and "5 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_without_the_option_the_suite_cannot_import_nki(project):
    r = _pytest(project)
    assert r.returncode != 0 and "No module named 'nki'" in (r.stdout + r.stderr)


def test_nki_sim_under_xdist(project):
    r = _pytest(project, "--nki-sim", "-n", "2")
    assert r.returncode == 0 and "5 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    # workers start with NKI_SIMULATOR=1: the start-up hook imports nothing before pytest looks
    assert "PytestAssertRewriteWarning" not in r.stdout + r.stderr


def test_header_says_what_the_option_did(project):
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nki-sim", "--co"], cwd=project,
                       capture_output=True, text=True, timeout=600,
                       env={k: v for k, v in os.environ.items() if k != "NKI_SIMULATOR"}, check=False)
    assert "nki-ops: --nki-sim" in r.stdout, r.stdout[-2000:]


def test_nki_shadow_sets_both_switches_also_in_workers(tmp_path):
    (tmp_path / "test_shadow.py").write_text(SHADOW_TESTS)
    for extra in ((), ("-n", "2")):
        r = _pytest(tmp_path, "--nki-shadow", *extra)
        assert r.returncode == 0 and "1 passed" in r.stdout, (extra, r.stdout[-3000:] + r.stderr[-3000:])
