"""scripts/timing_ladder.py: the matmul tutorial's four kernels as event lists for the timing model.

The event counts follow the tutorial's loops; the order of the four kernels at a small shape follows
the published trn1 order (51.80 / 42.96 / 22.07 / 6.97 ms at the full shape, which the script runs).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

# loaded from its path, without putting scripts/ on sys.path for the rest of the suite
_spec = importlib.util.spec_from_file_location(
    "timing_ladder", pathlib.Path(__file__).resolve().parents[1] / "scripts" / "timing_ladder.py")
tl = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("timing_ladder", tl)
_spec.loader.exec_module(tl)

SMALL = {"M": 2048, "K": 1024, "N": 1024}


@pytest.mark.parametrize("style", tl.STYLES)
def test_event_counts_follow_the_tutorial_loops(style):
    M, K, N = SMALL["M"], SMALL["K"], SMALL["N"]
    r, slots, _n, _ = tl.run(style, 2, **SMALL)
    mm = (M // 128) * (N // 512) * (K // 128)
    assert r.count["Tensor"] == mm
    loads = {"tiled": 2 * mm,
             "hoist_load": (M // 128) * (K // 128) + (M // 128) * (N // 512) * (K // 128),
             "block_free": (M // 256) * 2 * (K // 128) + (M // 256) * (N // 1024) * 2 * (K // 128),
             "fully_optimized": (N // 1024) * (K // 1024) * 8 * (1 + M // 2048)}[style]
    stores = (M // 128) * (N // 512) if style != "fully_optimized" else (M // 128) * (N // 1024)
    assert r.count["DMA"] == loads + stores
    assert set(slots.values()) <= {1, 2}


def test_small_shape_keeps_the_published_order():
    times = {s: tl.run(s, 2, **SMALL)[0].total_s for s in tl.STYLES}
    assert tl.pairs_in_order(times, tl.PUBLISHED_TRN1_MS) == (6, 6)


def test_slots_follow_the_sbuf_capacity():
    slots, used = tl.slots_for({"a": 100, "b": 60}, 400)
    assert slots == {"a": 2, "b": 2} and used == 320
    slots, used = tl.slots_for({"a": 100, "b": 60}, 250)
    assert slots == {"a": 1, "b": 2} and used == 220


def test_script_main_prints_the_ladder(capsys):
    assert tl.main(["--quick", "--versions", "2"]) == 0
    out = capsys.readouterr().out
    assert "6 of 6 pairs" in out and "fully_optimized" in out
