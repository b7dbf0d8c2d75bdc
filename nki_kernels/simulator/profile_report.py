"""The profile of one launch (:class:`Report`): its figures, advice, text, Perfetto trace and PNG
pictures, and :meth:`Report.retime` onto another NeuronCore version.

The report holds figures only; the recorder (:mod:`.profile_recorder`) fills them in after the
launch and stays attached to it so that :meth:`Report.retime` can schedule the same events again.
"""

from __future__ import annotations

import json

import numpy as np

from .memory import CAPACITY, NAMES
from .timing import core
from .timing.report import _fmt_s, _kib

ENGINES = ("Tensor", "Vector", "Scalar", "GpSimd", "DMA")


class Report:
    """Profile of one launch: traffic, instructions, memory peaks and the timing model's schedule.

    Figures: ``estimated_s`` (the model's time), ``busy_s`` / :attr:`utilisation` per engine (``DMA``:
    the mean over the 16 DMA engines), :attr:`bounding_engine` (``bottleneck``), :meth:`critical_path`,
    :attr:`dma` (transfers, bytes per transfer, transfers under the efficient size), :meth:`advice`;
    ``timing`` is the model's :class:`.timing.Result`. Pictures: :meth:`perfetto` (a trace with one
    track per engine and DMA queue), :meth:`plot_timeline` (PNG), :meth:`plot_memory` (PNG)."""

    def __init__(self, name, grid):
        self.kernel = name
        self.grid = tuple(grid)
        self.programs = 0
        self.hbm_read_bytes = 0
        self.hbm_write_bytes = 0
        self.min_bytes = 0
        self.instructions = {e: 0 for e in ENGINES}
        self.busy_s = {e: 0.0 for e in ENGINES}
        self.sbuf_peak = 0
        self.psum_peak = 0
        self.estimated_s = 0.0
        self._events = []
        self._occupancy = []
        # (recorder, schedule, start times) whose rows events and occupancy are built from on first use
        self._pending = None
        self.outputs = None
        self.timing = None
        self.version = None
        self.neuroncore = ""
        self.spilled_allocations = 0
        self.merged_accumulations = 0
        self._recorder = None

    # -- figures --------------------------------------------------------------------------------------
    @property
    def events(self) -> list:
        """The scheduled instructions: ``(engine, track, name, program, start_s, dur_s)`` each."""
        if self._pending is not None:
            self._build_rows()
        return self._events

    @events.setter
    def events(self, rows):
        self._build_rows()
        self._events = rows

    @property
    def occupancy(self) -> list:
        """Per program, in launch order: ``(pid, live SBUF/PSUM bytes per partition at each instruction
        slot [2, slots], [(slot, model start time)] of its recorded events)``."""
        if self._pending is not None:
            self._build_rows()
        return self._occupancy

    @occupancy.setter
    def occupancy(self, rows):
        self._build_rows()
        self._occupancy = rows

    def _build_rows(self):
        # (most profiles are read for their figures only: the per-instruction rows cost as much as a
        # tenth of the schedule, so they wait until asked for)
        pending, self._pending = self._pending, None
        if pending is not None:
            rec, res, starts = pending
            self._events, self._occupancy = rec.report_rows(res, starts)

    @property
    def hbm_bytes(self) -> int:
        """Bytes moved between HBM and on-chip memory by DMA (read + written)."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def traffic_ratio(self) -> float:
        """DMA bytes over the minimum (every input byte read once, every output byte written once)."""
        return self.hbm_bytes / self.min_bytes if self.min_bytes else float("nan")

    @property
    def estimated_us(self) -> float:
        """The model's time in microseconds (what ``nc_latency.get_latency_percentile`` returns)."""
        return self.estimated_s * 1e6

    @property
    def utilisation(self) -> dict:
        """Busy time over the estimated time, per engine (``DMA``: mean over the 16 DMA engines)."""
        return self.timing.utilisation if self.timing is not None else {e: 0.0 for e in ENGINES}

    @property
    def roofline_s(self) -> float:
        """Lower bound: the busiest engine's busy time (DMA: one DMA engine's mean)."""
        return max(self.busy_s.values())

    @property
    def bounding_engine(self) -> str:
        """The engine with the highest utilisation: what bounds the kernel while the others overlap it."""
        return self.timing.bounding_engine if self.timing is not None and self.timing.total_s else \
            max((v, k) for k, v in self.busy_s.items())[1]

    @property
    def bottleneck(self) -> str:
        """Same as :attr:`bounding_engine` (the older name)."""
        return self.bounding_engine

    @property
    def dma(self):
        """DMA efficiency (:class:`.timing.DmaStats`): transfers, bytes, ``bytes_per_transfer``,
        ``small_transfers`` (under 32 KiB), ``fixed_share`` ..."""
        return self.timing.dma if self.timing is not None else None

    def critical_path(self) -> list:
        """Indices (into :attr:`events`) of the chain of instructions that set the estimated time."""
        return self.timing.critical_path() if self.timing is not None else []

    def critical_path_summary(self) -> dict:
        """Time on the critical path by track and its links by kind (see :class:`.timing.Result`)."""
        return self.timing.critical_path_summary() if self.timing is not None else {}

    def advice(self) -> list:
        """A few lines of advice from the figures (bounding engine, DMA sizes, narrow matmuls ...)."""
        out = list(self.timing.advice()) if self.timing is not None else []
        if self.spilled_allocations:
            out.append(f"{self.spilled_allocations:,} tiles did not fit the SBUF/PSUM capacity with the others live: "
                       "the compiler would spill them to HBM (costed: a store after each write, a reload before "
                       "its next read)")
        return out

    def as_dict(self) -> dict:
        """The report's figures as plain Python values."""
        d = {
            "kernel": self.kernel, "grid": list(self.grid), "programs": self.programs,
            "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
            "min_bytes": self.min_bytes, "traffic_ratio": self.traffic_ratio,
            "instructions": dict(self.instructions), "busy_s": dict(self.busy_s),
            "sbuf_peak_bytes_per_partition": self.sbuf_peak, "psum_peak_bytes_per_partition": self.psum_peak,
            "estimated_s": self.estimated_s, "roofline_s": self.roofline_s, "bottleneck": self.bottleneck,
            "neuroncore": self.neuroncore, "utilisation": dict(self.utilisation),
            "bounding_engine": self.bounding_engine, "advice": self.advice(),
        }
        if self.timing is not None:
            t = self.timing.as_dict()
            d["dma"] = t["dma"]
            d["critical_path"] = t["critical_path"]
        return d

    def retime(self, version):
        """The same launch's instructions scheduled on another NeuronCore version (2/3/4, ``"trn1"``
        ...): the timing model's :class:`.timing.Result` (the simulation is not run again)."""
        if self._recorder is None:
            raise ValueError("this report holds no recorded instructions")
        return self._recorder.schedule(core(version))[0]

    # -- text -----------------------------------------------------------------------------------------
    def rows(self):
        """``(name, value)`` rows for printing."""
        yield "kernel", f"{self.kernel} grid={self.grid}"
        yield "NeuronCore (timing model)", self.neuroncore
        yield "programs", str(self.programs)
        yield "HBM read (DMA)", f"{self.hbm_read_bytes:,} B"
        yield "HBM written (DMA)", f"{self.hbm_write_bytes:,} B"
        yield "minimum (inputs + outputs once)", f"{self.min_bytes:,} B"
        yield "HBM traffic ratio", f"{self.traffic_ratio:.2f}"
        u = self.utilisation
        for e in ENGINES:
            busy = f"busy {_fmt_s(self.busy_s[e])}" + (" per DMA engine" if e == "DMA" else "")
            yield f"{e} instructions", f"{self.instructions[e]:,}  ({busy}, {u.get(e, 0.0):.0%})"
        # live bytes over the capacity: the compiler's allocator spills to HBM (slower, not an error)
        spill = " (over capacity: spills)"
        hw = self.timing.hw if self.timing is not None else None
        cap = (int(hw.sbuf_partition_bytes.value), int(hw.psum_partition_bytes.value)) if hw else CAPACITY
        yield "peak SBUF per partition (live)", f"{self.sbuf_peak:,} B of {cap[0]:,}" + (
            spill if self.sbuf_peak > cap[0] else "")
        yield "peak PSUM per partition (live)", f"{self.psum_peak:,} B of {cap[1]:,}" + (
            spill if self.psum_peak > cap[1] else "")
        d = self.dma
        if d is not None and d.instructions:
            yield "DMA transfers", (f"{d.transfers:,} of {_kib(d.bytes_per_transfer)} on average; "
                                    f"{d.small_transfers:,} under 32 KiB; fixed cost {d.fixed_share:.0%} of DMA time")
        cp = self.critical_path_summary().get("time_by_track", {})
        if cp:
            top = sorted(cp.items(), key=lambda kv: -kv[1])[:3]
            yield "critical path", ", ".join(f"{k} {_fmt_s(v)}" for k, v in top)
        yield "estimated time (timing model)", f"{_fmt_s(self.estimated_s)} ({self.bounding_engine}-bound)"
        yield "roofline lower bound", f"{_fmt_s(self.roofline_s)}"
        for i, a in enumerate(self.advice()):
            yield ("advice" if i == 0 else ""), a

    def __str__(self):
        rows = list(self.rows())
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)

    def summary(self) -> str:
        """The timing model's own summary (per-engine table, DMA efficiency, critical path, advice)."""
        return self.timing.summary() if self.timing is not None else str(self)

    def table(self):
        """The report as a ``rich.table.Table``."""
        from rich.table import Table

        t = Table(title=f"NKI simulator profile: {self.kernel}")
        t.add_column("metric")
        t.add_column("value", justify="right")
        for k, v in self.rows():
            t.add_row(k, v)
        return t

    # -- trace and pictures ---------------------------------------------------------------------------
    def trace(self, max_events=500_000) -> dict:
        """Chrome / Perfetto trace (JSON object format): one track per engine and per DMA queue (as
        neuron-profile shows them), times in us, and counter tracks of the live on-chip bytes."""
        if self.timing is None:
            return {"traceEvents": [], "displayTimeUnit": "ns", "otherData": self.as_dict()}
        tr = self.timing.trace(max_events=max_events)
        ev = tr["traceEvents"]
        ev[0]["args"]["name"] = f"{self.neuroncore} timing model: {self.kernel}"
        for pid, curve, times in self.occupancy:  # Perfetto counter tracks: live on-chip bytes
            for slot, start in times:
                if slot < curve.shape[1]:
                    ev.append({"ph": "C", "name": "on-chip live B/partition", "pid": 1, "ts": start * 1e6,
                               "args": {"SBUF": int(curve[0, slot]), "PSUM": int(curve[1, slot])}})
        tr["otherData"] = self.as_dict()
        return tr

    def write_trace(self, path) -> str:
        """Write :meth:`trace` as JSON to ``path`` (open it in https://ui.perfetto.dev); returns the path."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return str(path)

    perfetto = write_trace

    def plot_timeline(self, path, title=None) -> str:
        """Write a PNG timeline of the schedule (one row per engine and DMA queue); returns the path."""
        if self.timing is None:
            raise ValueError("no schedule to draw")
        return self.timing.plot(path, title=title or (f"{self.kernel} on {self.neuroncore}: "
                                                      f"{_fmt_s(self.estimated_s)}, {self.bounding_engine}-bound"))

    def plot_memory(self, path) -> str:
        """Write a PNG of live SBUF and PSUM bytes per partition over the instruction slots of the
        launch's programs (in launch order), with the capacities; returns the path."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
        start = 0
        for pid, curve, _ in self.occupancy:
            x = np.arange(start, start + curve.shape[1])
            for b, ax in enumerate(axes):
                ax.step(x, curve[b] / 1024, where="post", color="C0" if b == 0 else "C1", linewidth=0.8)
            start += curve.shape[1]
            if len(self.occupancy) <= 64:
                for ax in axes:
                    ax.axvline(start, color="0.85", linewidth=0.5)
        for b, ax in enumerate(axes):
            ax.axhline(CAPACITY[b] / 1024, color="red", linestyle="--", linewidth=0.8, label="capacity")
            ax.set_ylabel(f"{NAMES[b]} live KiB / partition")
            ax.legend(loc="upper right")
        axes[0].set_title(f"On-chip memory: {self.kernel} (grid {self.grid}); peaks SBUF {self.sbuf_peak:,} B, "
                          f"PSUM {self.psum_peak:,} B")
        axes[1].set_xlabel("instruction slot (programs in launch order)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return str(path)
