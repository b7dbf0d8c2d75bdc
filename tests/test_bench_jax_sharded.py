"""scripts/bench_jax_sharded.py runs: the 8-device sharded step matches the unsharded one and prints its JSON line.

Behaviour only: the script's timings are not checked (benchmarks print ratios; tests do not time).
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "bench_jax_sharded.py")


def _run(*args):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the script sets the host device count itself
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=900)


def test_tiny_run_exits_zero_and_prints_one_json_line():
    proc = _run("--steps", "2", "--repeat", "1", "--size", "8", "--batch", "8", "--single")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert result["bench"] == "jax_sharded" and result["devices"] == 8 and result["ok"] is True
    assert (result["steps"], result["repeat"], result["size"], result["batch"]) == (2, 1, 8, 8)
    assert len(result["runs"]) == 1 and result["single_sec_per_step"] is not None
    assert result["cores_busy"] > 0 and result["single_cores_busy"] > 0
    assert result["max_rel_diff_vs_unsharded"] <= result["tol"] and result["max_rel_diff_vs_jnp"] <= result["tol"]
    assert "0 all-gathers" in result["compiled"]  # every NKI custom-call stays on its shard
    assert os.path.isfile(os.path.join(result["nki_kernels"], "__init__.py"))  # where the code under test came from
    assert "ms/step" in proc.stdout.splitlines()[0]  # the human line comes first


def test_bad_options_are_refused_before_jax_starts():
    proc = _run("--batch", "12")
    assert proc.returncode == 2 and "multiple of 8" in proc.stderr
