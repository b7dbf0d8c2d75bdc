"""scripts/torch_train.py --device xla trains on torch-xla and matches the plain-torch twin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_torch_train_xla(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PJRT_DEVICE="CPU", NEURON_FRAMEWORK_DEBUG="1")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/torch_train.py"), "--device", "xla", "--steps", "4",
                        "--show-hlo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rms_norm_bwd_kernel" in r.stdout and "tensor_add_kernel" in r.stdout and "within" in r.stdout
    assert list(tmp_path.glob("SyncTensorsGraph.*.pbtxt"))
