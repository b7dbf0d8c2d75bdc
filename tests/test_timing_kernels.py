"""scripts/timing_kernels.py at a small shape: the repository's matmul styles and the attention ladder
run under profile() and are scheduled on NeuronCore-v2/v3/v4 (behaviour, not the published figures)."""

from __future__ import annotations

import importlib.util
import json
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "timing_kernels.py"


def _script():
    spec = importlib.util.spec_from_file_location("timing_kernels", SCRIPT)  # (scripts/ stays off sys.path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_matmul_styles_and_attention_ladder(tmp_path, capsys):
    tk = _script()
    out = tmp_path / "t.json"
    assert tk.main(["--shape", "256", "1024", "1024", "--overhead", "--attention", "--attention-seq", "512",
                    "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())
    assert set(res["matmul"]) == set(tk.STYLES)
    for style, row in res["matmul"].items():
        # one Tensor instruction per 128 x 128 x 512 matmul: (256 / 128) x (1024 / 512) x (1024 / 128)
        assert row["instructions"]["Tensor"] == 2 * 2 * 8, style
        assert set(row["versions"]) == {"2", "3", "4"} and all(v["ms"] > 0 for v in row["versions"].values())
        assert row["call_s"] > 0 and row["profile_s"] > 0
    t = {s: res["matmul"][s]["versions"]["2"]["ms"] for s in tk.STYLES}
    assert t["tiled"] > t["hoist_load"] > t["fully_optimized"]  # fewer, larger DMAs: faster
    assert "pairs in the published (trn1) order" in printed and "profile/call" in printed
    steps = list(res["attention"])
    assert len(steps) == 3 and all(r["rel_err"] < 1e-2 for r in res["attention"].values())
    v2 = [res["attention"][s]["versions"]["2"] for s in steps]
    assert v2[0] > v2[1] > v2[2]  # each step of the tutorial faster than the one before


def test_pairs_in_order_counts_agreeing_pairs():
    tk = _script()
    ref = {"a": 3.0, "b": 2.0, "c": 1.0}
    assert tk.pairs_in_order({"a": 30, "b": 20, "c": 10}, ref) == (3, 3)
    assert tk.pairs_in_order({"a": 10, "b": 20, "c": 30}, ref) == (0, 3)
