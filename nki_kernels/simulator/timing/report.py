"""What the user sees of a schedule: :class:`Result` (time, busy time and utilisation per engine,
critical path, bounding engine, DMA efficiency, advice), a Chrome/Perfetto trace and a PNG timeline.

It reads the arrays a :class:`.model.Scheduler` filled and imports nothing from the model.
"""

from __future__ import annotations

import json

from .hardware import COMPUTE


def _fmt_s(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.2f} us"
    return f"{s * 1e9:.0f} ns"


def _kib(b: float) -> str:
    return f"{b / 1024:.1f} KiB" if b >= 1024 else f"{b:.0f} B"


class Result:
    """The schedule of one kernel on one NeuronCore version."""

    def __init__(self, sched):
        self.hw = sched.hw
        self.version = sched.hw.version
        self.events = sched.events
        self.start, self.end = list(sched.start), list(sched.end)
        self.track, self.pred, self.cause = list(sched.track), list(sched.pred), list(sched.cause)
        self.count = dict(sched.count)
        self.dma = sched.dma
        self.flags = dict(sched.flags)
        # name -> events costed by their engine's default because no instruction of that name declares a cost
        self.default_costed = dict(getattr(sched, "default_costed", {}))
        # spill stores and reloads of SBUF allocations that did not fit (DMAs to the HBM scratchpad)
        self.spills = dict(getattr(sched, "spills", {"stores": 0, "reloads": 0, "bytes": 0}))
        self.total_s = max(self.end, default=0.0)
        n_dma = int(self.hw.dma_engines.value)
        self.busy_s = dict(sched.busy)
        # DMA: the mean busy time of one DMA engine (all engines' busy time / number of engines)
        self.busy_s["DMA"] = self.dma.busy_s / n_dma

    # -- figures ------------------------------------------------------------------------------------------
    @property
    def utilisation(self) -> dict:
        """Busy time over the total time, per engine (``"DMA"``: the mean over the 16 DMA engines)."""
        t = self.total_s
        return {e: (b / t if t else 0.0) for e, b in self.busy_s.items()}

    @property
    def bounding_engine(self) -> str:
        """The engine with the highest utilisation: what bounds the kernel if the others overlap it."""
        u = self.utilisation
        return max(u, key=u.get) if u else ""

    def critical_path(self) -> list:
        """Instruction indices of the chain that determined the end, first to last. Each link is the
        constraint that set the instruction's start: its engine's previous instruction, a dependency
        (RAW/WAR/WAW, or an explicit scheduling ``edge``), its DMA queue's previous instruction, or the
        DMA engine it waited for."""
        if not self.end:
            return []
        i = max(range(len(self.end)), key=self.end.__getitem__)
        path, seen = [], set()
        while i is not None and i not in seen:
            seen.add(i)
            path.append(i)
            i = self.pred[i]
        return path[::-1]

    def critical_path_summary(self) -> dict:
        """Time on the critical path by track, and its links by kind. Each instruction on the path is
        charged what it added to the end: its end minus its predecessor's end (DMAs overlap, so their own
        durations would count the same time several times); the charges add up to the total."""
        by_track, by_cause = {}, {}
        for i in self.critical_path():
            p = self.pred[i]
            gain = max(0.0, self.end[i] - (self.end[p] if p is not None else 0.0))
            by_track[self.track[i]] = by_track.get(self.track[i], 0.0) + gain
            by_cause[self.cause[i]] = by_cause.get(self.cause[i], 0) + 1
        return {"time_by_track": by_track, "links_by_kind": by_cause}

    def as_dict(self) -> dict:
        """The figures as plain values (JSON-ready)."""
        d = self.dma
        return {
            "neuroncore": self.hw.name, "total_s": self.total_s, "busy_s": dict(self.busy_s),
            "utilisation": self.utilisation, "bounding_engine": self.bounding_engine,
            "instructions": dict(self.count),
            "dma": {"instructions": d.instructions, "transfers": d.transfers, "bytes": d.bytes,
                    "bytes_per_transfer": d.bytes_per_transfer, "transfers_under_efficient_size": d.small_transfers,
                    "instructions_under_2KiB_per_partition": d.small_partition_instrs,
                    "instructions_with_buffers_under_512B": d.tiny_chunk_instrs, "fixed_cost_share": d.fixed_share},
            "critical_path": self.critical_path_summary(), "advice": self.advice(),
            "default_costed": dict(self.default_costed), "spills": dict(self.spills),
        }

    # -- text ---------------------------------------------------------------------------------------------
    def advice(self) -> list:
        """A few lines of advice derived from the figures."""
        hw, d, u, f = self.hw, self.dma, self.utilisation, self.flags
        out = []
        bound = self.bounding_engine
        if not self.total_s:
            return out
        others = ", ".join(f"{e} {u[e]:.0%}" for e in COMPUTE + ("DMA",) if e != bound and u.get(e, 0) >= 0.005)
        out.append(f"{bound}-bound: {bound} busy {u[bound]:.0%} of {_fmt_s(self.total_s)}"
                   + (f" ({others})" if others else ""))
        eff = hw.efficient_transfer_bytes.value
        # (only when small transfers cost: many of them, and the per-transfer cost a large share)
        if d.small_transfers and (d.fixed_share > 0.3 or (bound == "DMA" and d.small_transfers > d.transfers / 2)):
            out.append(f"DMA: {d.transfers:,} transfers of {_kib(d.bytes_per_transfer)} on average, "
                       f"{d.small_transfers:,} under {_kib(eff)}; the ~{hw.dma_fixed.value * 1e9:.0f} ns per-transfer "
                       f"cost is {d.fixed_share:.0%} of DMA-engine time: move >= {_kib(eff)} per transfer "
                       f"(>= {_kib(hw.efficient_partition_bytes.value)} per partition over 128 partitions)")
        if d.tiny_chunk_instrs:
            out.append(f"{d.tiny_chunk_instrs:,} DMAs move contiguous pieces under 512 B (per partition or strided): "
                       "each piece is a DMA buffer with its own overhead (not costed by this model)")
        if f["fp32_matmul"]:
            out.append(f"{f['fp32_matmul']:,} matmuls read fp32: they cost {hw.fp32_matmul_factor.value:.0f}x the "
                       "bf16/fp8 cycles; cast the operands")
        if f["narrow_matmul"]:
            out.append(f"{f['narrow_matmul']:,} matmuls stream fewer than 128 moving columns: the issue interval is "
                       f"at least {hw.mm_init_latency.value:.0f} cycles; widen the moving tile (up to 512)")
        if f["small_free"]:
            out.append(f"{f['small_free']:,} Vector/Scalar/GpSimd instructions stream fewer than 128 elements per "
                       f"partition: the ~{hw.min_ii.value:.0f}-cycle minimum dominates; batch them")
        if f["few_partitions"]:
            out.append(f"{f['few_partitions']:,} instructions use fewer than 64 partitions: "
                       "the idle lanes are paid for anyway")
        if f.get("backward_edges"):
            out.append(f"{f['backward_edges']:,} scheduling edges (depends_on / with_schedule) make an instruction "
                       "wait for one later in program order: the estimate keeps program order and does not honour "
                       "them (the compiler would reorder)")
        if bound != "Tensor" and self.count.get("Tensor") and u.get("Tensor", 0) < 0.5:
            cp = self.critical_path_summary()["links_by_kind"]
            waits = {k: v for k, v in cp.items() if k in ("RAW", "WAR", "WAW", "dma-engine", "queue", "edge")}
            if waits:
                top = max(waits, key=waits.get)
                out.append(f"Tensor busy {u['Tensor']:.0%}: the critical path is mostly {top} waits "
                           f"({waits[top]:,} links)" + ("; deepen buffering (more slots per loop tile)" if top == "WAR"
                                                        else ""))
        return out

    def summary(self) -> str:
        """A human-readable report."""
        lines = [f"{self.hw.name}: estimated {_fmt_s(self.total_s)}, bounded by {self.bounding_engine}"]
        u = self.utilisation
        lines.append(f"  {'engine':<8} {'busy':>12} {'util':>6} {'instrs':>9}")
        for e in COMPUTE + ("DMA",):
            lines.append(f"  {e:<8} {_fmt_s(self.busy_s[e]):>12} {u[e]:>6.0%} {self.count.get(e, 0):>9,}")
        d = self.dma
        if d.instructions:
            lines.append(f"  DMA efficiency: {d.transfers:,} transfers, {_kib(d.bytes_per_transfer)} each on average; "
                         f"{d.small_transfers:,} under {_kib(self.hw.efficient_transfer_bytes.value)}; "
                         f"{d.small_partition_instrs:,} of {d.instructions:,} DMAs under "
                         f"{_kib(self.hw.efficient_partition_bytes.value)}/partition; fixed cost {d.fixed_share:.0%} "
                         "of DMA-engine time")
        sp = self.spills
        if sp.get("stores") or sp.get("reloads"):
            lines.append(f"  spills: {sp['stores']:,} stores and {sp['reloads']:,} reloads of SBUF allocations that did "
                         f"not fit, {_kib(sp['bytes'])} through the HBM scratchpad")
        if self.default_costed:
            lines.append("  costed by their engine's default (no instruction of the name declares a cost): "
                         + ", ".join(f"{k} x{n:,}" for k, n in sorted(self.default_costed.items())))
        cp = self.critical_path_summary()
        tt = sorted(cp["time_by_track"].items(), key=lambda kv: -kv[1])[:4]
        if tt:
            lines.append(f"  critical path: {len(self.critical_path()):,} instructions; time on it: "
                         + ", ".join(f"{k} {_fmt_s(v)}" for k, v in tt))
        for a in self.advice():
            lines.append(f"  - {a}")
        return "\n".join(lines)

    def __str__(self):
        return self.summary()

    # -- trace and picture --------------------------------------------------------------------------------
    def _lanes(self):
        """Track name per instruction with overlapping DMA slices of one queue spread over sub-tracks."""
        names, free = [], {}
        for i, tr in enumerate(self.track):
            if not tr.startswith("DMA"):
                names.append(tr)
                continue
            lanes = free.setdefault(tr, [])
            for j, t in enumerate(lanes):
                if t <= self.start[i]:
                    lanes[j] = self.end[i]
                    break
            else:
                j = len(lanes)
                lanes.append(self.end[i])
            names.append(f"{tr}" + (f" [{j}]" if j else ""))
        return names

    def trace(self, max_events=500_000) -> dict:
        """Chrome / Perfetto trace (JSON object format): one track per engine and per DMA queue, times in us.

        Beyond ``max_events`` instructions only the first ``max_events`` are drawn (the figures in
        ``otherData`` cover all)."""
        names = self._lanes()
        used = set(names)
        order = [e for e in COMPUTE if e in used] + sorted(used - set(COMPUTE))
        tid = {n: i + 1 for i, n in enumerate(order)}
        ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"{self.hw.name} timing model"}}]
        for n, i in tid.items():
            ev.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": i, "args": {"name": n}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": i, "args": {"sort_index": i}})
        for i in range(min(len(names), max_events)):
            ins = self.events[i] if i < len(self.events) else None
            args = {"index": i, "waited_on": self.cause[i], "pred": self.pred[i]}
            name = (ins.label or ins.name) if ins is not None else "instr"
            if ins is not None:
                args["program"] = list(ins.program) if isinstance(ins.program, tuple) else ins.program
                if ins.engine == "DMA":
                    args["bytes"] = ins.nbytes
                else:
                    args["free_elems"] = ins.free_elems
            ev.append({"ph": "X", "name": name, "cat": self.track[i], "pid": 1, "tid": tid[names[i]],
                       "ts": self.start[i] * 1e6, "dur": (self.end[i] - self.start[i]) * 1e6, "args": args})
        return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": self.as_dict()}

    def write_trace(self, path, **kw) -> str:
        """Write :meth:`trace` as JSON to ``path`` (open it in https://ui.perfetto.dev); returns the path."""
        with open(path, "w") as fh:
            json.dump(self.trace(**kw), fh)
        return str(path)

    def plot(self, path, title=None) -> str:
        """Write a PNG timeline (one row per engine and DMA queue; busy intervals) to ``path``; needs
        matplotlib. Returns the path."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [t for t in self.track]
        rows = list(COMPUTE) + sorted({n for n in names if n not in COMPUTE})
        rows = [r for r in rows if r in set(names)]
        total = self.total_s or 1.0
        gap = total / 20000  # merge intervals much closer than a pixel (keeps big traces drawable)
        spans = {r: [] for r in rows}
        for i, r in enumerate(names):
            s, e = self.start[i], self.end[i]
            lst = spans[r]
            if lst and s - (lst[-1][0] + lst[-1][1]) <= gap and s >= lst[-1][0]:
                lst[-1] = (lst[-1][0], max(lst[-1][1], e - lst[-1][0]))
            else:
                lst.append((s, e - s))
        fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
        scale = 1e3 if total >= 1e-3 else 1e6
        for y, r in enumerate(rows):
            ax.broken_barh([(s * scale, max(d * scale, 1e-9)) for s, d in spans[r]], (y - 0.35, 0.7),
                           color=f"C{y % 10}")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.invert_yaxis()
        ax.set_xlabel("time (ms)" if scale == 1e3 else "time (us)")
        ax.set_title(title or f"{self.hw.name}: {_fmt_s(self.total_s)}, bounded by {self.bounding_engine}")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return str(path)
