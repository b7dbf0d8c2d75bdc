"""scripts/bench_kernels.py --quick: every benchmarked kernel runs and matches its NumPy computation."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_kernels_quick_matches_numpy(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_kernels.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert len(data["load_average"]) == 2
    names = {r["name"] for r in data["kernels"]}
    for style in ("tiled", "hoisted", "block_free", "optimised"):
        assert {f"matmul {style} gen1", f"matmul {style} standalone"} <= names
    assert {"flash attention fwd", "flash attention bwd"} <= names
    assert "numpy tile loop (floor)" in names  # (its result is checked against lhsT.T @ rhs like the kernels')
    assert all(r["ratio_to_tile_loop_wall"] > 0 for r in data["kernels"] if r["group"] == "matmul")
    for row in data["kernels"]:
        # the script compares each kernel's result with NumPy's float32 computation
        assert row["max_rel_err"] < 1e-3, row
        assert row["sim_ms"] > 0 and row["numpy_ms"] > 0
        assert row["ratio_wall"] > 0 and row["ratio_cpu"] > 0  # (both clocks, each the best of its runs)
    assert [r["name"].split()[0] for r in data["per_instruction"]] == ["nl.add", "nisa.tensor_tensor", "nisa.dma_copy",
                                                                        "nisa.nc_matmul", "nisa.nc_matmul,"]
    for r in data["per_instruction"]:  # (the script checks each loop's result against its NumPy loop)
        for clock in ("wall", "cpu"):
            assert r[f"us_per_instruction_{clock}"] == r[f"us_per_instruction_{clock}"]  # not NaN
            assert r[f"numpy_us_{clock}"] == r[f"numpy_us_{clock}"]


def test_bench_kernels_only_selects_rows_of_both_tables(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_kernels.py"), "--quick",
                           "--only", "dma_copy", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["kernels"] == []
    assert [r["name"] for r in data["per_instruction"]] == ["nisa.dma_copy SBUF <- HBM (standalone)"]


def test_bench_kernels_tutorial_directory_must_hold_the_tutorial(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_kernels.py"), "--quick",
                           "--tutorial", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert "matrix_multiplication_nki_kernels.py" in proc.stderr
