"""The DMA engines of the timing model's schedule: their busy intervals (:class:`Lane`), a DMA's
transfers as the scheduler books them (:func:`plan`) and the DMA efficiency figures (:class:`DmaStats`).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from . import costs as _costs


class Lane:
    """Busy intervals of one DMA engine (sorted, coalesced); ``book`` fills the earliest fitting gap."""

    __slots__ = ("busy", "data", "e", "o", "s")

    def __init__(self):
        self.s, self.e, self.o = [], [], []
        self.busy = 0.0
        self.data = 0.0

    def copy(self):
        """An independent copy (the DMA engines stop being identical)."""
        c = Lane()
        c.s, c.e, c.o, c.busy, c.data = list(self.s), list(self.e), list(self.o), self.busy, self.data
        return c

    def book(self, t, dur, owner):
        """Occupy ``dur`` seconds from the earliest time >= ``t`` the lane is free that long; returns
        ``(start, owner of the booking whose end set the start, or None)``."""
        s, e, o = self.s, self.e, self.o
        self.busy += dur
        if not e or t >= e[-1]:
            if e and t == e[-1]:
                pred, e[-1], o[-1] = o[-1], t + dur, owner
            else:
                pred = None
                s.append(t)
                e.append(t + dur)
                o.append(owner)
            return t, pred
        i = bisect_right(e, t)
        cur, pred = t, None
        while i < len(s) and s[i] - cur < dur:
            cur, pred = e[i], o[i]
            i += 1
        end = cur + dur
        left = i > 0 and e[i - 1] == cur
        right = i < len(s) and s[i] == end
        if left and right:
            e[i - 1], o[i - 1] = e[i], o[i]
            del s[i], e[i], o[i]
        elif left:
            e[i - 1], o[i - 1] = end, owner
        elif right:
            s[i] = cur
        else:
            s.insert(i, cur)
            e.insert(i, end)
            o.insert(i, owner)
        return cur, pred


@dataclass
class DmaStats:
    """DMA efficiency figures of a schedule."""

    instructions: int = 0
    transfers: int = 0
    bytes: int = 0
    small_transfers: int = 0          # under the efficient transfer size (32 KiB)
    small_partition_instrs: int = 0   # under the recommended 2 KiB per partition
    tiny_chunk_instrs: int = 0        # contiguous DMA buffers under 512 B
    fixed_s: float = 0.0              # DMA-engine time not moving data (per-transfer fixed cost)
    busy_s: float = 0.0               # DMA-engine time, all engines summed

    @property
    def bytes_per_transfer(self) -> float:
        """Mean bytes per per-engine transfer."""
        return self.bytes / self.transfers if self.transfers else 0.0

    @property
    def fixed_share(self) -> float:
        """Share of DMA-engine busy time spent on per-transfer fixed cost rather than data."""
        return self.fixed_s / self.busy_s if self.busy_s else 0.0


def plan(ins, transfers, hw, n):
    """What booking DMA ``ins``'s ``transfers`` (``(engine, bytes)``) on the ``n`` DMA engines of ``hw``
    needs besides the time: ``(the one transfer booked for all engines when the transfers are one per
    engine of equal size, else None; each transfer; under the efficient bytes per partition; contiguous
    chunks under 512 B)``. A transfer is ``(engine, bytes, occupancy, latency, data time, its DmaStats
    increments)``: a loop's DMAs repeat a few sizes, so the scheduler keeps each plan (the split and
    these figures are pure in the instruction's size fields)."""
    bw = _costs.dma_bandwidth(ins, hw)
    small = hw.efficient_transfer_bytes.value

    def transfer(e, b, count):
        occ, lat = _costs.dma_transfer_times(b, bw, hw)
        data = b / bw
        return (e, b, occ, lat, data,
                (count, round(count * b), count if b < small else 0, count * (occ - data), count * occ))

    uniform = (len(transfers) == n and len({e for e, _ in transfers}) == n
               and len({b for _, b in transfers}) == 1)
    rows = max(1, ins.partitions)
    chunk = ins.chunk_bytes or ins.nbytes / rows
    return (transfer(None, transfers[0][1], n) if uniform else None,
            tuple(transfer(e, b, 1) for e, b in transfers),
            ins.nbytes / rows < hw.efficient_partition_bytes.value, chunk < 512)
