"""The allocator that stands in for the compiler's in the profiler's schedule.

The compiler reuses SBUF/PSUM bytes, which the NumPy simulator does not (every tile is a fresh
array): without reuse no load would ever wait for a buffer to be free, and double buffering would
look free. :class:`_Allocator` gives each allocation a region the way a compiled loop body would
(see its docstring), so that the timing model sees the write-after-read waits of reused buffers.
"""

from __future__ import annotations

SBUF_SPARE = 1  # free SBUF regions of one size kept back before one is reused: double buffering


class _Allocator:
    """Gives each SBUF/PSUM allocation of the launch a *region* (an ident of the timing model). Tiles
    are grouped by *role*, what first writes them (the loads of one HBM tensor, the results of one op),
    which stands for the allocation site of a loop body: a region of the same role and size freed
    earlier is reused once ``spare`` others wait (SBUF: 1, double buffering; PSUM: as many as the 8
    banks hold), and when the memory is full the oldest free region of any role is reused. A reused
    region makes the new tile's writer wait for the old one's last reader (WAR). Capacity is counted
    in bytes per partition of the simulated NeuronCore."""

    def __init__(self, hw, sbuf_spare=SBUF_SPARE):
        self.cap = {"sbuf": int(hw.sbuf_partition_bytes.value), "psum": int(hw.psum_partition_bytes.value)}
        self.spare = {"sbuf": sbuf_spare, "psum": 1 << 30}
        self.used = {"sbuf": 0, "psum": 0}  # bytes per partition of every region made
        self.free = {"sbuf": {}, "psum": {}}  # (role, size) -> [region, ...] oldest first
        self.order = {"sbuf": [], "psum": []}  # free regions, oldest first: (region, size)
        self.size = {}
        self.pool = {}  # region -> its (role, size) pool
        self.n = 0
        self.spilled = 0  # allocations made beyond the capacity (the compiler would spill)
        self.spilled_regions = set()  # their regions: the timing model costs their spill stores and reloads

    def take(self, space, nbytes, role=None):
        """A region for a new allocation of ``nbytes`` per partition whose first writer is ``role``."""
        key = (role, nbytes)
        pool = self.free[space].get(key)
        if pool and len(pool) > self.spare[space]:
            return self._reuse(space, pool.pop(0))
        if self.used[space] + nbytes <= self.cap[space]:
            self.n += 1
            self.used[space] += nbytes
            self.size[self.n] = nbytes
            self.pool[self.n] = key
            return self.n
        if pool:
            return self._reuse(space, pool.pop(0))
        order = self.order[space]
        if order:  # the oldest free region of another size takes the new tile
            reg = order[0]
            self.free[space][self.pool[reg]].remove(reg)
            self.used[space] += nbytes - self.size[reg]
            self.size[reg] = nbytes
            self.pool[reg] = key
            return self._reuse(space, reg)
        self.spilled += 1
        self.n += 1
        self.spilled_regions.add(self.n)
        self.size[self.n] = nbytes
        self.pool[self.n] = key
        return self.n

    def _reuse(self, space, reg):
        self.order[space].remove(reg)
        return reg

    def give(self, space, reg):
        """Region ``reg`` is free again (its tile's last instruction has been issued)."""
        self.free[space].setdefault(self.pool[reg], []).append(reg)
        self.order[space].append(reg)
