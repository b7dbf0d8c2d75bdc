"""The memory picture counts what the report counts, in KiB, with labelled capacities."""

from __future__ import annotations

import matplotlib
import numpy as np

from nki_kernels.add import add_grid, tensor_add_kernel
from nki_kernels.rmsnorm import rms_norm_fwd_kernel, row_grid
from nki_kernels.simulator import profile
from nki_ops import profiling

matplotlib.use("Agg")


def _figure(monkeypatch, rep, tmp_path):
    """Draw ``rep`` and return the figure plot_memory made (kept open by stubbing close)."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", lambda fig: kept.append(fig))
    profiling.plot_memory(rep, tmp_path / "m.png")
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    return kept[0]


def test_steps_equal_the_reports_instruction_count(monkeypatch, tmp_path):
    x = np.random.default_rng(0).random((1024, 2048), dtype=np.float32)
    w = np.ones(2048, np.float32)
    rep = profile(rms_norm_fwd_kernel[row_grid(1024)], x, w, eps=1e-6)
    columns = [profiling._instruction_columns(c, t) for _, c, t in rep.occupancy]
    assert sum(c.shape[1] for c in columns) == sum(rep.instructions.values())
    fig = _figure(monkeypatch, rep, tmp_path)
    (ax,) = fig.axes  # no PSUM panel: this kernel never uses PSUM
    assert rep.psum_peak == 0
    labels = ax.get_legend_handles_labels()[1]
    cap_kib = profiling._capacities()[0] / 1024
    assert "live SBUF" in labels and "next program starts" in labels
    assert any(f"SBUF capacity {cap_kib:g} KiB" in s for s in labels)
    assert ax.get_ylabel() == "SBUF KiB / partition"
    assert f"peak {rep.sbuf_peak / 1024:.2f} KiB" in ax.get_title()
    assert f"{sum(rep.instructions.values()):,} in all" in ax.get_xlabel()
    # scaled to the data: the peak fills most of the axis, not a wiggle under the capacity line
    assert ax.get_ylim()[1] <= rep.sbuf_peak / 1024 * 1.3


def test_capacity_line_drawn_when_the_kernel_comes_close(monkeypatch, tmp_path):
    a = np.ones((256, 512), np.float32)
    rep = profile(tensor_add_kernel[add_grid(a.shape)], a, a)
    cap = profiling._capacities()[0]
    rep.sbuf_peak = cap // 2  # as a kernel using half of SBUF would report
    fig = _figure(monkeypatch, rep, tmp_path)
    ax = fig.axes[0]
    assert ax.get_ylim()[1] > cap / 1024  # the capacity line is inside the axis
    assert any(s == f"SBUF capacity {cap / 1024:g} KiB" for s in ax.get_legend_handles_labels()[1])
