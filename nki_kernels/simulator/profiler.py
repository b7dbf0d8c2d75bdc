"""Simulator-side profile of a kernel launch: DMA traffic, instructions per engine, on-chip
memory peaks, and an estimated Trainium (NeuronCore-v2) time from a simple cost model.

``profile(kernel[grid], *arrays)`` runs the launch once with a recorder installed in
:mod:`.profile` and returns a :class:`Report`; ``nki.benchmark`` kernels attach the
same report after each call. This is a *model*, not a measurement.

Cost model (all per NeuronCore-v2; numbers and sources):

* HBM bandwidth 410 GB/s: a Trainium / Inferentia2 device has "2 HBM stacks with ...
  bandwidth of 820 GB/s" shared by its 2 NeuronCores
  (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/arch/trainium_inferentia2_arch.html).
  All DMA transfers share that bandwidth (one "DMA" track whose slices are the time each
  transfer occupies it: ``bytes / 410 GB/s``); each transfer's data is usable
  ``DMA_LATENCY_S`` = 2 us after its slice ends (assumption: descriptor processing and HBM
  latency, overlapped with other transfers; not a documented figure).
* Engine clock 1.4 GHz (assumption; the Neuron docs quote TFLOPS, not the clock).
* Vector / Scalar / GpSimd: one element per partition per cycle, i.e. ``N`` cycles for
  ``N`` free elements per partition, plus ``FIXED_CYCLES`` = 64 cycles of per-instruction
  overhead (assumption).
* Tensor: 95 dense BF16 TFLOPS per core (a Trainium device "delivering ... 190
  FP16/BF16/cFP8/TF32 TFLOPS, and 47.5 FP32 TFLOPS" over 2 cores:
  https://awsdocs-neuron.readthedocs-hosted.com/en/v2.9.1/general/arch/neuron-hardware/trainium.html),
  counting the full 128x128 PE array per moving column: ``2*128*128*N / 95e12`` s for a
  result with ``N`` free elements, plus the fixed overhead. FP32 operands (4x slower per
  the same page) are not distinguished: the hook sees only the fp32 result.

Schedule (the trace's timeline): each engine executes its instructions in program
order; a compute instruction or store starts when its engine is free and the previous
instruction of the same program has finished (a conservative in-order chain); loads
start as soon as a DMA queue is free (prefetch), so the loads of program ``p+1``
overlap the compute of program ``p``. The estimated time is the end of the last slice.
"""

from __future__ import annotations

import json
import math

import numpy as np

from . import recording as _prof_hooks
from .launch import Kernel, Launch, normalize_grid, run_programs, _bind, _unwrap
from .memory import CAPACITY, NAMES
from .core import current_or_none
from .indexing import full_mask

CLOCK_HZ = 1.4e9
FIXED_CYCLES = 64
HBM_BYTES_PER_S = 410e9
DMA_LATENCY_S = 2e-6
PE_FLOPS = 95e12
ENGINES = ("Tensor", "Vector", "Scalar", "GpSimd", "DMA")


def instruction_seconds(engine: str, out_shape) -> float:
    """Modelled duration of one compute instruction producing a result of ``out_shape``."""
    free = math.prod(out_shape[1:]) if len(out_shape) > 1 else 1
    if engine == "Tensor":
        return FIXED_CYCLES / CLOCK_HZ + 2 * 128 * 128 * free / PE_FLOPS
    return (FIXED_CYCLES + free) / CLOCK_HZ


def dma_seconds(nbytes: int) -> float:
    """Modelled time one DMA transfer of ``nbytes`` occupies the HBM bandwidth."""
    return nbytes / HBM_BYTES_PER_S


class Report:
    """Profile of one launch (see the module docstring for the cost model)."""

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
        self.events = []  # (engine, track, name, program, start_s, dur_s)
        # per program, in launch order: (pid, live SBUF/PSUM bytes per partition at each
        # instruction slot [2, slots], [(slot, model start time)] of its recorded events)
        self.occupancy = []
        self.outputs = None

    @property
    def hbm_bytes(self) -> int:
        """Bytes moved between HBM and on-chip memory by DMA (read + written)."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def traffic_ratio(self) -> float:
        """DMA bytes over the minimum (every input byte read once, every output byte written once)."""
        return self.hbm_bytes / self.min_bytes if self.min_bytes else float("nan")

    @property
    def roofline_s(self) -> float:
        """Lower bound: the busiest engine, or all DMA bytes at full HBM bandwidth."""
        return max(self.busy_s.values())

    @property
    def bottleneck(self) -> str:
        """The engine (or ``DMA``) with the most modelled busy time."""
        return max((v, k) for k, v in self.busy_s.items())[1]

    def as_dict(self) -> dict:
        """The report's figures as plain Python values."""
        return {
            "kernel": self.kernel, "grid": list(self.grid), "programs": self.programs,
            "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
            "min_bytes": self.min_bytes, "traffic_ratio": self.traffic_ratio,
            "instructions": dict(self.instructions), "busy_s": dict(self.busy_s),
            "sbuf_peak_bytes_per_partition": self.sbuf_peak, "psum_peak_bytes_per_partition": self.psum_peak,
            "estimated_s": self.estimated_s, "roofline_s": self.roofline_s, "bottleneck": self.bottleneck,
        }

    def rows(self):
        """``(name, value)`` rows for printing."""
        d = self.as_dict()
        yield "kernel", f"{self.kernel} grid={self.grid}"
        yield "programs", str(self.programs)
        yield "HBM read (DMA)", f"{self.hbm_read_bytes:,} B"
        yield "HBM written (DMA)", f"{self.hbm_write_bytes:,} B"
        yield "minimum (inputs + outputs once)", f"{self.min_bytes:,} B"
        yield "HBM traffic ratio", f"{self.traffic_ratio:.2f}"
        for e in ENGINES:
            yield f"{e} instructions", f"{self.instructions[e]:,}  (busy {self.busy_s[e] * 1e6:.1f} us)"
        # live bytes over the capacity: the compiler's allocator spills to HBM (slower, not an error)
        spill = " (over capacity: spills)"
        yield "peak SBUF per partition (live)", f"{self.sbuf_peak:,} B of 196,608" + (spill if self.sbuf_peak > 196608 else "")
        yield "peak PSUM per partition (live)", f"{self.psum_peak:,} B of 16,384" + (spill if self.psum_peak > 16384 else "")
        yield "estimated time (in-order schedule)", f"{d['estimated_s'] * 1e6:.1f} us"
        yield "roofline lower bound", f"{d['roofline_s'] * 1e6:.1f} us ({self.bottleneck}-bound)"

    def __str__(self):
        w = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{w}}  {v}" for k, v in self.rows())

    def table(self):
        """The report as a ``rich.table.Table``."""
        from rich.table import Table

        t = Table(title=f"NKI simulator profile: {self.kernel}")
        t.add_column("metric")
        t.add_column("value", justify="right")
        for k, v in self.rows():
            t.add_row(k, v)
        return t

    def trace(self) -> dict:
        """Chrome / Perfetto trace (JSON object format): one thread per engine, µs timestamps."""
        tracks = sorted({(e, tr) for e, tr, *_ in self.events}, key=lambda x: (ENGINES.index(x[0]), x[1]))
        tid = {k: i + 1 for i, k in enumerate(tracks)}
        ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"NeuronCore model: {self.kernel}"}}]
        for (e, tr), i in tid.items():
            ev.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": i, "args": {"name": tr}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": i, "args": {"sort_index": i}})
        for e, tr, name, prog, start, dur in self.events:
            ev.append({"ph": "X", "name": name, "cat": e, "pid": 1, "tid": tid[(e, tr)], "ts": start * 1e6,
                       "dur": dur * 1e6, "args": {"program": list(prog)}})
        for pid, curve, times in self.occupancy:  # Perfetto counter tracks: live on-chip bytes
            for slot, start in times:
                if slot < curve.shape[1]:
                    ev.append({"ph": "C", "name": "on-chip live B/partition", "pid": 1, "ts": start * 1e6,
                               "args": {"SBUF": int(curve[0, slot]), "PSUM": int(curve[1, slot])}})
        return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": self.as_dict()}

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

    def write_trace(self, path) -> str:
        """Write :meth:`trace` as JSON to ``path`` (open it in https://ui.perfetto.dev); returns the path."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return str(path)


class Recorder:
    """Receives the instruction / DMA hooks of :mod:`.profile` and schedules them on the model timeline."""

    def __init__(self, report: Report):
        self.r = report
        self.free = {e: 0.0 for e in ENGINES if e != "DMA"}
        self.dma_free = 0.0
        self.chain = {}  # program id -> end of its latest instruction
        self.progs = {}
        self.slot_times = {}  # id(program) -> [(memory slot, model start time)]
        self.current = None  # (name, engine, args, kwargs) of the declared instruction running now

    def begin(self, name, engine, args, kwargs) -> None:
        """A declared instruction ``name`` (its registry engine, or ``None``) starts with these
        arguments; the engine hooks it calls belong to it until :meth:`end`."""
        self.current = (name, engine, args, kwargs)

    def end(self) -> None:
        """The instruction begun last has returned."""
        self.current = None

    def _prog(self):

        p = current_or_none()
        if p is not None:
            self.progs[id(p)] = p
        return p.pid if p is not None else ()

    def instruction(self, engine, out) -> None:
        """One compute instruction on ``engine`` producing ``out``."""
        engine = engine if engine in self.free else "GpSimd"
        pid = self._prog()
        dur = instruction_seconds(engine, np.shape(out))
        start = max(self.free[engine], self.chain.get(pid, 0.0))
        self.free[engine] = self.chain[pid] = start + dur
        self.r.instructions[engine] += 1
        self.r.busy_s[engine] += dur
        self.r.events.append((engine, engine, f"{engine.lower()} {tuple(np.shape(out))}", pid, start, dur))
        self._slot(start)

    def dma(self, tensor, data, direction, access, mask) -> None:
        """One DMA of the elements of ``access`` selected by ``mask``."""

        pid = self._prog()
        m = full_mask(mask, access.index.out_shape) if mask is not None else None
        if m is None:
            n = math.prod(access.index.out_shape)
        else:
            n = int(np.count_nonzero(m))
        nbytes = n * tensor.dtype.itemsize
        ready = 0.0 if direction == "read" else self.chain.get(pid, 0.0)
        start = max(self.dma_free, ready)
        dur = dma_seconds(nbytes)
        self.dma_free = start + dur
        self.chain[pid] = max(self.chain.get(pid, 0.0), start + dur + DMA_LATENCY_S)
        if direction == "read":
            self.r.hbm_read_bytes += nbytes
        else:
            self.r.hbm_write_bytes += nbytes
        self.r.instructions["DMA"] += 1
        self.r.busy_s["DMA"] += dur
        self.r.events.append(("DMA", "DMA", f"{'load' if direction == 'read' else 'store'} {tensor.name} "
                              f"{nbytes} B", pid, start, dur))
        self._slot(start)

    def _slot(self, start):

        p = current_or_none()
        if p is not None:  # the hook counted the slot before recording: this event is slot ic - 1
            self.slot_times.setdefault(id(p), []).append((p.mem.ic - 1, start))

    def finish(self):
        """Fill in peaks, the occupancy curves and the estimated time once the launch is done."""
        for p in self.progs.values():
            self.r.sbuf_peak = max(self.r.sbuf_peak, p.sbuf_peak)
            self.r.psum_peak = max(self.r.psum_peak, p.psum_peak)
            if p.mem.curve is not None:
                self.r.occupancy.append((p.pid, p.mem.curve, self.slot_times.get(id(p), [])))
        self.r.estimated_s = max([s + d for *_, s, d in self.r.events] + list(self.chain.values()) or [0.0])


def _nbytes(x):
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


def profile(kernel, *arrays, grid=None, **static) -> Report:
    """Run ``kernel[grid](*arrays, **static)`` on the simulator and return its :class:`Report`.

    ``report.outputs`` holds the kernel's results.
    """

    if isinstance(kernel, Launch):
        kernel, g = kernel.kernel, kernel.grid
        grid = g if grid is None else normalize_grid(grid)
    elif not isinstance(kernel, Kernel):
        kernel = Kernel(getattr(kernel, "func", kernel))
    grid = normalize_grid(grid)
    report = Report(getattr(kernel.func, "__qualname__", str(kernel)), grid)
    rec = Recorder(report)
    args, kw = _bind(kernel, arrays, static)
    prev = _prof_hooks._recorder
    _prof_hooks.set_recorder(rec)
    try:
        result, state = run_programs(kernel, grid, args, kw)
    finally:
        _prof_hooks.set_recorder(prev)
    rec.finish()
    report.programs = state.programs
    report.outputs = _unwrap(result, kernel)
    report.min_bytes = sum(_nbytes(a) for a in arrays) + _nbytes(report.outputs)
    return report


class _Latency:
    """``benchmark_result.nc_latency`` of the official API, from the model's estimate."""

    def __init__(self, seconds):
        self.seconds = seconds

    def get_latency_percentile(self, percentile=50):
        """The estimated latency in microseconds (the model has no spread: every percentile)."""
        return self.seconds * 1e6


class _BenchmarkResult:
    def __init__(self, report):
        self.report = report
        self.nc_latency = _Latency(report.estimated_s)


class BenchmarkKernel:
    """``@nki.benchmark`` on the simulator: calling it profiles the launch.

    After a call, ``.report`` (and ``.benchmark_result.report``) is the :class:`Report`;
    ``.benchmark_result.nc_latency.get_latency_percentile(50)`` gives the estimate in µs.
    """

    def __init__(self, kernel, grid=(), **options):
        self.kernel = kernel
        self.grid = grid
        self.options = options
        self.report = None
        self.benchmark_result = None

    def __getitem__(self, grid):
        b = BenchmarkKernel(self.kernel, grid, **self.options)
        b._parent = self
        return b

    def __call__(self, *arrays, **static):

        rep = profile(Launch(self.kernel, normalize_grid(self.grid)), *arrays, **static)
        for target in (self, getattr(self, "_parent", None)):
            if target is not None:
                target.report = rep
                target.benchmark_result = _BenchmarkResult(rep)
        return rep.outputs
