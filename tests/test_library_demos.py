"""Smoke runs of the kernel-library demos: decoder training (JAX, sharded JAX, torch), plot, benchmark."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from .jax_helpers import ROOT, run_python


def _script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _losses(out):
    return [float(line.split()[1]) for line in out.splitlines() if line.strip()[:1].isdigit()]


def test_jax_decoder_tracks_jnp_and_learns(capsys, tmp_path):
    curves = tmp_path / "jax.json"
    assert _script("train_decoder_jax").main(["--steps", "6", "--batch", "4", "--seq", "40",
                                              "--json", str(curves)]) == 0
    out = capsys.readouterr().out
    losses = _losses(out)
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert "OK: the NKI-library model tracks the jnp model" in out
    data = json.loads(curves.read_text())
    assert len(data["library"]) == len(data["plain"]) == 6 and data["max_rel_loss_diff"] < 1e-4


def test_jax_decoder_sharded_over_eight_devices_without_all_gather():
    script = os.path.join(ROOT, "scripts", "train_decoder_jax.py")
    proc = run_python("import runpy, sys; sys.argv = ['train_decoder_jax.py', '--steps', '2', '--batch', '8', "
                      f"'--seq', '24', '--devices', '8']; runpy.run_path({script!r}, run_name='__main__')")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "batch sharded over 8 devices" in proc.stdout and "OK:" in proc.stdout
    assert " 0 all-gathers" in proc.stdout and " 0 NKI custom-calls" not in proc.stdout


def test_torch_decoder_tracks_torch_and_learns(capsys):
    assert _script("train_decoder_torch").main(["--steps", "6", "--batch", "4", "--seq", "40"]) == 0
    out = capsys.readouterr().out
    losses = _losses(out)
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert "OK: the NKI-library model tracks the torch model" in out


def test_loss_plot(tmp_path):
    runs = []
    for fw in ("jax", "torch"):
        path = tmp_path / f"{fw}.json"
        path.write_text(json.dumps({"framework": fw, "library": [3.0, 2.0, 1.5], "plain": [3.0, 2.0, 1.4],
                                    "max_rel_loss_diff": 0.07}))
        runs.append(str(path))
    png = tmp_path / "curves.png"
    _script("plot_decoder_losses").main(runs + ["-o", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_library_writes_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_library.py"), "--only", "softmax",
                           "--repeat", "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())
    assert {(r["framework"], r["pass"]) for r in rows} == {("jax", "fwd"), ("jax", "fwd+bwd"), ("torch", "fwd"),
                                                           ("torch", "fwd+bwd")}
    assert all(r["ratio"] > 0 and r["ratio"] == pytest.approx(r["ours_ms"] / r["plain_ms"]) for r in rows)
