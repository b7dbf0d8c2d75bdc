"""A per-location index of the scheduler's access tables (see :class:`BoxIndex`, used by
:class:`.model.Scheduler` once a location holds many boxes)."""


class BoxIndex:
    """Buckets the boxes of one location's table (``{box: (end, index)}``) by their range on one axis, so
    that a kernel writing one tensor in thousands of pieces does not scan every earlier piece per access.
    It only narrows the candidates: the callers still apply the exact tests to them, and they are visited
    in the table's own insertion order (``seq``), so the dependencies found and their order (which picks
    the cause among equal times) are those of the full scan."""

    __slots__ = ("ndim", "ax", "width", "seq", "n", "buckets", "always")

    def __init__(self, table):
        boxes = [b for b in table if b is not None]
        lens = {}
        for b in boxes:
            lens[len(b)] = lens.get(len(b), 0) + 1
        self.ndim = max(lens, key=lens.get) if lens else 2
        boxes = [b for b in boxes if len(b) == self.ndim]
        # the axis the pieces are spread along, bucketed at their typical extent there
        self.ax = max(range(self.ndim), key=lambda a: len({b[a][0] for b in boxes})) if self.ndim else 0
        ext = sorted(b[self.ax][1] - b[self.ax][0] for b in boxes) if self.ndim else []
        w = ext[len(ext) // 2] if ext else 1
        self.width = w if type(w) is int and w > 0 else 1
        self.seq, self.n, self.buckets, self.always = {}, 0, {}, set()
        for b in table:
            self.add(b)

    def _span(self, b):
        """The bucket numbers of ``b``, or None where it is kept among those always tested (no box, another
        rank, an empty or non-integer range on the axis, or one spread over many buckets)."""
        if b is None or len(b) != self.ndim or not self.ndim:
            return None
        lo, hi = b[self.ax]
        if type(lo) is not int or type(hi) is not int or lo >= hi:
            return None
        k0, k1 = lo // self.width, (hi - 1) // self.width
        return range(k0, k1 + 1) if k1 - k0 < 16 else None

    def add(self, b):
        """Record ``b`` as newly inserted at the end of the table."""
        self.seq[b] = self.n
        self.n += 1
        span = self._span(b)
        if span is None:
            self.always.add(b)
            return
        buckets = self.buckets
        for k in span:
            s = buckets.get(k)
            if s is None:
                buckets[k] = {b}
            else:
                s.add(b)

    def remove(self, b):
        del self.seq[b]
        span = self._span(b)
        if span is None:
            self.always.discard(b)
            return
        buckets = self.buckets
        for k in span:
            s = buckets[k]
            s.discard(b)
            if not s:
                del buckets[k]

    def clear(self):
        self.seq.clear()
        self.buckets.clear()
        self.always.clear()

    def near(self, box):
        """The boxes that may overlap ``box`` or lie inside it, in the table's order; None where ``box``
        cannot be narrowed (the caller scans the whole table)."""
        if box is None or len(box) != self.ndim or not self.ndim:
            return None
        lo, hi = box[self.ax]
        if type(lo) is not int or type(hi) is not int or lo >= hi:
            return None
        k0, k1 = lo // self.width, (hi - 1) // self.width
        buckets = self.buckets
        if k1 - k0 >= len(self.seq):
            return None
        found = set(self.always)
        for k in range(k0, k1 + 1):
            s = buckets.get(k)
            if s:
                found |= s
        return sorted(found, key=self.seq.__getitem__)
