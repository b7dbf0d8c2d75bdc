"""Plain ``pytest`` where torch-xla is missing leaves tests/xla out visibly; test.sh's switch makes it an error."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# An interpreter in which torch_xla does not import, whatever this environment holds.
NO_XLA = "import sys; sys.modules['torch_xla'] = None; import pytest; sys.exit(pytest.main(sys.argv[1:]))"


def _pytest(*args, **env):
    full = {k: v for k, v in os.environ.items() if k != "NKI_OPS_REQUIRE_XLA"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", NO_XLA, "-p", "no:cacheprovider", *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=600, check=False)


def test_plain_pytest_leaves_the_xla_folder_out_with_a_reason():
    r = _pytest("--co", "-q")  # plain `pytest`: the testpaths, tests/
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "deselected tests/xla" in r.stdout and "scripts/test.sh runs them in .venv-xla" in r.stdout  # the summary
    assert "tests/test_readme.py::test_size" in r.stdout and "tests/xla/" not in r.stdout.split("deselected")[0]
    assert " error" not in r.stdout
    header = _pytest("--co", "tests/test_readme.py").stdout  # -q hides the session header
    assert "tests/xla: left out, torch-xla is not installed" in header


def test_asking_for_them_where_torch_xla_is_missing_is_an_error():
    r = _pytest("--co", "-q", NKI_OPS_REQUIRE_XLA="1")  # what scripts/test.sh sets for the .venv-xla run
    assert r.returncode != 0 and "NKI_OPS_REQUIRE_XLA=1 but torch_xla does not import" in r.stdout + r.stderr
    r = _pytest("--co", "-q", "tests/xla")  # named on the command line
    assert r.returncode != 0 and "tests/xla need torch-xla" in r.stdout + r.stderr
