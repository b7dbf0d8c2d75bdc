"""The PyTorch demo and benchmark scripts run end to end (short settings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], cwd=cwd or ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_torch_train_cpu():
    r = _run("scripts/torch_train.py", "--steps", "6")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert len(lines) == 6
    losses = [(float(a), float(b)) for _, a, b, _ in lines]
    assert all(abs(a - b) < 1e-4 for a, b in losses) and losses[-1][0] < losses[0][0]
    assert "within" in r.stdout


def test_bench_torch_prints_ratios(tmp_path):
    out = tmp_path / "bench.json"
    r = _run("scripts/bench_torch.py", "--repeat", "1", "--rms", "300x256", "--add", "200x300", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert {(x["op"], x["mode"], x["pass"]) for x in rows} == {
        (op, mode, p) for op in ("rms_norm", "add") for mode in ("eager", "compiled") for p in ("fwd", "fwd+bwd")}
    assert all(x["ratio"] > 0 for x in rows)
    assert r.stdout.count("x\n") >= 8
