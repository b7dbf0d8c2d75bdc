"""Every script in examples/ runs and meets its stated tolerances (each prints OK only if it does)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
# Scripts written against `import nki` / `neuronxcc.nki` run as a user runs them: through nki-ops run.
UNMODIFIED = {"first_kernel.py", "first_generation_kernel.py"}


def test_there_are_examples():
    assert {"first_kernel.py", "first_generation_kernel.py", "op_builder_softplus.py"} <= {p.name for p in EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path):
    cmd = [sys.executable, "-m", "nki_ops.cli", "run", str(path)] if path.name in UNMODIFIED else [sys.executable,
                                                                                                  str(path)]
    env = {k: v for k, v in os.environ.items() if k != "NKI_SIMULATOR"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=path.parent.parent, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "OK" in r.stdout and "FAIL" not in r.stdout
