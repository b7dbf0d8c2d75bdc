"""The wheel carries the NKI_SIMULATOR start-up hook, and the hook costs nothing unless the variable is set."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

from nki_kernels.simulator import startup

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The project's wheel, built by its own backend from a copy of the tracked files (an in-tree
    build would write build/ and egg-info into the checkout)."""
    if shutil.which("git") is None or not os.path.isdir(os.path.join(REPO, ".git")):
        pytest.fail("building the wheel needs the git checkout (git ls-files names what a clone holds)")
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if os.path.isfile(os.path.join(REPO, name)):
            os.makedirs(src / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(REPO, name), src / name)
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(out), str(src)], capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = out.glob("nki_ops-*.whl")
    return path


def test_wheel_holds_the_hook_entry_points_and_packages(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        hook = z.read("nki_ops_simulator.pth")
        record = z.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert hook.decode() == startup.HOOK_LINE
    digest = base64.urlsafe_b64encode(hashlib.sha256(hook).digest()).rstrip(b"=").decode()
    assert f"nki_ops_simulator.pth,sha256={digest},{len(hook)}" in record.splitlines()
    assert "nki-ops = nki_ops.cli:main" in entry_points and "nki_ops = nki_ops.pytest_plugin" in entry_points
    for module in ("nki_ops/cli.py", "nki_ops/pytest_plugin.py", "nki_kernels/simulator/standalone/simulator.py",
                   "jax_ops/__init__.py", "torch_ops/__init__.py"):
        assert module in names, module


SCRIPT = textwrap.dedent("""
    import numpy as np
    import nki, nki.isa as nisa, nki.language as nl
    import neuronxcc.nki.language as nl1
    from nki.simulator import simulate_kernel

    @nki.jit
    def copy(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(256, dtype=np.float32).reshape(128, 2)
    assert np.array_equal(copy(x), x) and np.array_equal(simulate_kernel(copy, (), {"x": x}, lnc=1), x)
    import nki_kernels
    print("RAN FROM", nki_kernels.__file__)
""")


def _python(site_dir, code, **env):
    """A fresh interpreter whose only site directory with nki-ops is ``site_dir`` (the installed wheel),
    with this environment's third-party packages after it on sys.path (no .pth of theirs run)."""
    purelib = sysconfig.get_paths()["purelib"]
    # NumPy's folder first (without running its .pth files, so no editable nki-ops), then the wheel's
    # site directory, whose hook runs as the interpreter's own start-up would run it.
    boot = (f"import sys, site; sys.path.append({purelib!r}); site.addsitedir({str(site_dir)!r}); "
            f"exec(compile({code!r}, 'script', 'exec'))")
    full = {k: v for k, v in os.environ.items() if k not in ("NKI_SIMULATOR", "PYTHONPATH")}
    full.update(env)
    return subprocess.run([sys.executable, "-S", "-c", boot], capture_output=True, text=True, env=full, timeout=600,
                          cwd=str(site_dir), check=False)


def test_installed_wheel_runs_unmodified_scripts_with_the_variable(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (target / "nki_ops_simulator.pth").read_text() == startup.HOOK_LINE
    on = _python(target, SCRIPT, NKI_SIMULATOR="1")
    assert on.returncode == 0 and f"RAN FROM {target}" in on.stdout, on.stderr[-3000:]
    off = _python(target, SCRIPT)
    assert off.returncode != 0 and "No module named 'nki'" in off.stderr
    # Without the variable the hook imports nothing: no NumPy, no nki_kernels at start-up.
    quiet = _python(target, "import sys; print(sorted(m for m in ('numpy', 'nki_kernels', 'nki') if m in sys.modules))")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "[]", quiet.stderr


def test_with_the_variable_nothing_is_imported_until_the_script_imports_nki(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    code = ("import sys; before = sorted(m for m in ('numpy', 'nki_kernels', 'nki') if m in sys.modules)\n"
            "import nki\n"
            "print(before, nki.__nki_ops_simulator__, nki.__spec__.name)")
    r = _python(target, code, NKI_SIMULATOR="1")
    assert r.returncode == 0, r.stderr[-3000:]
    # the registered package keeps its own spec (the import system stamps one on; the hook puts it back)
    assert r.stdout.split() == ["[]", "True", "nki_kernels.simulator.standalone"]


def test_a_genuine_nki_package_wins_over_the_hook(wheel, tmp_path):
    """Where the real standalone nki imports, NKI_SIMULATOR=1 leaves it alone (it has its own switch)."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    fake = target / "nki"
    fake.mkdir()
    (fake / "__init__.py").write_text("GENUINE = True\ndef jit(f):\n    return f\n")
    (fake / "language.py").write_text("")
    (fake / "isa.py").write_text("")
    r = _python(target, "import nki, nki.language; print(nki.GENUINE, nki.__spec__.name, hasattr(nki, "
                        "'__nki_ops_simulator__'))", NKI_SIMULATOR="1")
    assert r.returncode == 0 and r.stdout.split() == ["True", "nki", "False"], r.stderr[-3000:]


def test_pytest_under_the_variable_does_not_warn_about_the_hooks_import(wheel, tmp_path):
    """xdist workers of ``pytest --nki-sim`` start with NKI_SIMULATOR=1: the hook has imported nki_ops
    before pytest marks the plugin's packages for assertion rewriting, which must not warn; and the
    library packages shipped beside the plugin are not rewritten."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_k.py").write_text(
        "import nki\nimport nki_kernels.simulator.language as impl\n\n"
        "def test_k():\n    assert nki.__nki_ops_simulator__\n\n"
        "def test_the_library_is_not_assertion_rewritten():\n"  # its namespaces stay the documented lists
        "    assert not [n for n in vars(impl) if n.startswith('@py')]\n")
    code = ("import sys, pytest; assert 'nki_ops' in sys.modules\n"
            f"sys.exit(pytest.main(['-p', 'no:cacheprovider', '--nki-sim', {str(suite)!r}]))")
    r = _python(target, code, NKI_SIMULATOR="1")
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert "PytestAssertRewriteWarning" not in r.stdout + r.stderr
