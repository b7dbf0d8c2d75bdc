"""The ``nki-ops`` command: run (a throwaway project's unmodified scripts), env, profile, --help."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap

import pytest

from nki_ops import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STANDALONE_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import nki, nki.isa as nisa, nki.language as nl
    from helper import expected          # a sibling module: the script's folder leads sys.path

    @nki.jit
    def double(x_ptr):
        t = nl.ndarray(x_ptr.shape, dtype=x_ptr.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x_ptr)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray(x_ptr.shape, dtype=x_ptr.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    assert np.array_equal(double(x), expected(x))
    print("argv", sys.argv[1:], "ran", __name__)
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0)
""")

GEN1_SCRIPT = textwrap.dedent("""
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def neg(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.negative(nl.load(a)))
        return out

    a = np.ones((128, 32), np.float32)
    assert np.array_equal(neg(a), -a)
    print("gen1 OK")
""")


def _nki_ops(*args, cwd):
    """``nki-ops ARGS`` in a fresh interpreter, without NKI_SIMULATOR in its environment."""
    env = {k: v for k, v in os.environ.items() if k != "NKI_SIMULATOR"}
    return subprocess.run([sys.executable, "-m", "nki_ops.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.fixture
def project(tmp_path):
    """A throwaway project: two unmodified scripts (one per API generation) and a helper module."""
    (tmp_path / "standalone_script.py").write_text(STANDALONE_SCRIPT)
    (tmp_path / "helper.py").write_text("def expected(x):\n    return x * 2\n")
    (tmp_path / "gen1_script.py").write_text(GEN1_SCRIPT)
    return tmp_path


def registered(group, name):
    """The values of entry point ``name`` in ``group`` over every nki-ops metadata on sys.path (a
    stale ``nki_ops.egg-info`` in the checkout may come first; pytest and pip read them all too)."""
    return {ep.value for d in importlib.metadata.distributions(name="nki-ops")
            for ep in d.entry_points.select(group=group, name=name)}


def test_console_script_is_registered():
    assert registered("console_scripts", "nki-ops") == {"nki_ops.cli:main"}


def test_run_runs_unmodified_scripts_of_both_generations(project):
    r = _nki_ops("run", "standalone_script.py", "--their-flag", "x", cwd=project)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "argv ['--their-flag', 'x'] ran __main__" in r.stdout  # options after the script are the script's
    r = _nki_ops("run", "gen1_script.py", cwd=project)
    assert r.returncode == 0 and "gen1 OK" in r.stdout, r.stderr[-3000:]


def test_run_passes_the_scripts_exit_status_and_errors(project):
    assert _nki_ops("run", "standalone_script.py", "3", cwd=project).returncode == 3
    (project / "broken.py").write_text("import nki\nraise RuntimeError('kernel bug')\n")
    r = _nki_ops("run", "broken.py", cwd=project)
    assert r.returncode == 1 and "RuntimeError: kernel bug" in r.stderr
    r = _nki_ops("run", "missing.py", cwd=project)
    assert r.returncode == 2 and "no such script" in r.stderr


def test_the_same_scripts_fail_without_the_simulator(project):
    """What ``nki-ops run`` changes: plain python cannot import nki here."""
    env = {k: v for k, v in os.environ.items() if k != "NKI_SIMULATOR"}
    r = subprocess.run([sys.executable, "standalone_script.py"], cwd=project, env=env, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode != 0 and "No module named 'nki'" in r.stderr


def test_unknown_options_are_errors(capsys):
    for argv in (["run", "--bogus", "x.py"], ["profile", "k.py:k", "--outdir", "x"], ["profile", "k.py:k", "--ou", "x"],
                 ["frobnicate"], []):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2, argv
    assert "unrecognized arguments" in capsys.readouterr().err


def test_help_shows_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # argparse wraps at the terminal width, also inside a default
    with pytest.raises(SystemExit):
        cli.main(["profile", "--help"])
    out = capsys.readouterr().out
    assert "(default: nki-profile)" in out and "(default: 0)" in out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "nki-ops run SCRIPT" in capsys.readouterr().out


def test_env_prints_the_environment_report(tmp_path):
    r = _nki_ops("env", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Neuron packages" in r.stdout and "Kernel stack: simulator" in r.stdout


def test_profile_writes_report_trace_and_picture_into_an_ignored_folder(project):
    (project / "kern.py").write_text(textwrap.dedent("""
        import nki, nki.isa as nisa, nki.language as nl

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
    """))
    r = _nki_ops("profile", "kern.py:add_kernel", "--arg", "128x512", "--arg", "128x512:float32", "--out", "prof",
                 cwd=project)
    assert r.returncode == 0, r.stderr[-3000:]
    out = project / "prof"
    assert {p.name for p in out.iterdir()} == {".gitignore", "add_kernel.report.txt", "add_kernel.report.json",
                                               "add_kernel.trace.json", "add_kernel.timeline.png",
                                               "add_kernel.memory.png"}
    assert (out / ".gitignore").read_text().strip().endswith("*")
    report = json.loads((out / "add_kernel.report.json").read_text())
    assert report["hbm_read_bytes"] == 2 * 128 * 512 * 4 and report["instructions"]["DMA"] == 3
    assert "HBM traffic ratio" in (out / "add_kernel.report.txt").read_text()
    assert "traceEvents" in json.loads((out / "add_kernel.trace.json").read_text())
    assert (out / "add_kernel.memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "add_kernel.timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # git itself ignores the folder inside a repository
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=project,
                            capture_output=True, text=True, check=True).stdout
    assert "kern.py" in status and "prof" not in status


def test_profile_reports_bad_input_without_a_traceback(project):
    r = _nki_ops("profile", "kern_missing.py:k", "--arg", "8x8", cwd=project)
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = _nki_ops("profile", "nki_kernels.add:tensor_add_kernel", "--arg", "8 by 8", cwd=project)
    assert r.returncode == 2 and "SHAPE[:DTYPE]" in r.stderr


def test_env_reports_no_jax_path_without_jax(tmp_path):
    """In an environment without JAX (.venv-xla), the report shows no JAX path."""
    code = ("import sys; sys.modules['jax'] = None\n"  # an import of jax now fails, as where it is not installed
            "import importlib.util; real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda n, *a: None if n == 'jax' else real(n, *a)\n"
            "from nki_kernels.neuron_env import neuron_environment\n"
            "print(neuron_environment().route('JAX'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "jax not importable" in r.stdout and "custom-call" not in r.stdout
