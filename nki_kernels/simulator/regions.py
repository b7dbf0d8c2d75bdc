"""Regions: what an index (and mask) selects in an array, as a box plus exact elements on demand.

The race, uninitialised-read and loop-carried checks compare regions: boxes where the selection
is one (basic slices, strided walks of a box), flat element indices otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from .indexing import full_mask


def _strided_elements(index):
    """The flat indices a strided (affine) index selects, made in increasing order without a sort:
    its tile axes walked from the largest flat step to the smallest. ``None`` when that order is
    not increasing (a negative step, steps whose ranges interleave or repeat elements), or for
    another kind of index. (A batch of grid programs' tiles strided through an output: sorting the
    million indices of each such store took most of a launch's race check.)"""
    if index.strided is None:
        return None
    start, coefs = index.strided
    row = [math.prod(index.shape[t + 1:]) for t in range(len(index.shape))]
    out = index.out_shape
    steps = [sum(c[ax] * r for c, r in zip(coefs, row)) for ax in range(len(out))]
    axes = sorted((ax for ax, n in enumerate(out) if n > 1), key=lambda ax: -steps[ax])
    if any(steps[ax] <= 0 for ax in axes):
        return None
    e = np.array([sum(s * r for s, r in zip(start, row))], np.int64)
    for ax in axes:
        e = np.add.outer(e, np.arange(out[ax], dtype=np.int64) * steps[ax]).ravel()
    if e.size > 1 and not (e[1:] > e[:-1]).all():
        return None
    return e


def _sorted_rows(a, row):
    """``sorted_unique(a)`` for ``a`` made of rows of ``row`` elements, each increasing, whose ranges are
    disjoint or which are equal (a vector-offset DMA's HBM rows, repeated for a padding token): the rows
    in the order of their first elements, each once, without a sort or a map of the span (which for
    nki-library's H-sharded MoE, 128 token rows of 3584 in a 7 M-element output, cost ~5 ms a region).
    ``None`` where ``a`` is not such."""
    if row < 2 or a.size % row or a.size // row < 2:
        return None
    r = a.reshape(-1, row)
    if not (r[:, 1:] > r[:, :-1]).all():
        return None
    order = np.argsort(r[:, 0], kind="stable")
    first = r[order, 0]
    same = first[1:] == first[:-1]
    if same.any():  # rows starting alike must be alike; each is kept once
        if not np.array_equal(r[order[1:][same]], r[order[:-1][same]]):
            return None
        order = order[np.concatenate(([True], ~same))]
        first = r[order, 0]
    if not (r[order[:-1], -1] < first[1:]).all():
        return None
    return r[order].ravel()


def sorted_unique(a, row=None) -> np.ndarray:
    """The sorted distinct values of ``a``, by sorting: NumPy 2.4's hash-based ``np.unique`` takes
    about 2 s for the million element indices of one large tile view, sorting about 0.05 s (the
    uninit checks of nki-library's LNC=2 RMSNorm spent 22 of 27 s there). Many integers within a
    span at most 64 times their count are marked in a map of the span instead: nki-library moe_cte's
    token-row gathers and scatters (393k elements) took 20 ms each to sort, ~5 ms this way."""
    a = np.asarray(a).ravel()
    if row is not None and a.size > 1024:
        rows = _sorted_rows(a, row)
        if rows is not None:
            return rows
    if a.size > 1024 and a.dtype == np.intp:  # (flat element indices; no overflow in a - lo below)
        lo, hi = int(a.min()), int(a.max())
        span = hi - lo + 1
        if span <= 64 * a.size and span <= 1 << 28:
            seen = np.zeros(span, bool)
            seen[a - lo] = True
            return np.flatnonzero(seen) + lo
    a = np.sort(a)
    if a.size > 1:
        keep = np.empty(a.size, bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    return a


class Region:
    """The elements an :class:`~.indexing.Index` (with ``mask``) selects in an array of ``shape``.

    ``lo``/``hi`` bound a box (half-open per axis); ``exact`` says the box is
    exactly the selection. :meth:`elements` gives flat element indices.
    """

    __slots__ = ("shape", "lo", "hi", "exact", "index", "mask", "_elems", "_box", "_size")

    def __init__(self, shape, lo, hi, exact, index=None, mask=None):
        self.shape = tuple(shape)
        self.lo, self.hi, self.exact = tuple(lo), tuple(hi), exact
        self.index, self.mask = index, mask
        self._elems = None
        # (a region is never changed once made, and the caches share one among a loop's iterations:
        # its box and size are made once, for the per-write marking of the uninitialised-read check)
        self._box = self._size = None

    @classmethod
    def whole(cls, shape):
        """All of an array of ``shape`` (one shared object per shape: regions are not changed once made)."""
        shape = tuple(shape)
        r = _WHOLE.get(shape)
        if r is None:
            if len(_WHOLE) >= 4096:
                _WHOLE.clear()
            r = _WHOLE[shape] = cls(shape, (0,) * len(shape), tuple(shape), True)
        return r

    @classmethod
    def of(cls, index, mask=None):
        """The region of a resolved index, honouring ``mask`` (unmasked: one shared object per
        index, as resolved indices are shared by the iterations of a loop)."""
        if mask is None:
            hit = _REGION_OF.get(id(index))
            if hit is not None and hit[0] is index:
                return hit[1]
            region = cls._of(index, None)
            if len(_REGION_OF) >= 8192:
                _REGION_OF.clear()
            _REGION_OF[id(index)] = (index, region)
            return region
        return cls._of(index, mask)

    @classmethod
    def _of(cls, index, mask):

        if mask is not None:
            box, sub = index._boxed(mask)
            if sub is not None:
                if not all(b.stop > b.start for b in box):
                    return cls(index.shape, (0,) * len(index.shape), (0,) * len(index.shape), True)
                index, mask = sub, None
            elif full_mask(mask, index.out_shape) is None:
                mask = None
        shape = index.shape
        if index.basic is not None and mask is None:
            lo, hi, exact = [], [], True
            for b, dim in zip(index.basic, shape):
                if type(b) is int or isinstance(b, (np.integer,)):
                    lo.append(int(b))
                    hi.append(int(b) + 1)
                    continue
                if b.start is None or b.stop is None or b.step is None:
                    b = slice(*b.indices(dim))
                n = len(range(b.start, b.stop, b.step))
                if n == 0:
                    return cls(shape, (0,) * len(shape), (0,) * len(shape), True)
                lo.append(b.start)
                hi.append(b.start + b.step * (n - 1) + 1)
                exact = exact and (b.step == 1 or n == 1)
            return cls(shape, lo, hi, exact, None if exact else index)
        if index.strided is not None and mask is None:
            box = _strided_box(index)
            if box is not None:
                return cls(shape, box[0], box[1], True)
        # Strided views, gathers and general masks: a bounding box, elements when needed.
        lo, hi = [], []
        for c, dim in zip(index.comps, shape):
            if isinstance(c, (int, np.integer)):
                lo.append(int(c))
                hi.append(int(c) + 1)
            elif hasattr(c, "bounds"):
                a, b = c.bounds()
                lo.append(max(0, a))
                hi.append(min(dim, b + 1))
            else:
                a = np.asarray(c)
                lo.append(max(0, int(a.min())) if a.size else 0)
                hi.append(min(dim, int(a.max()) + 1) if a.size else 0)
        return cls(shape, lo, hi, False, index, mask)

    def empty(self) -> bool:
        """Whether the region selects nothing."""
        return any(h <= l for l, h in zip(self.lo, self.hi))

    def elements(self) -> np.ndarray:
        """Sorted unique flat indices of the selected elements."""
        if self._elems is None:
            if self.exact:
                grids = np.ix_(*(np.arange(l, h) for l, h in zip(self.lo, self.hi)))
                self._elems = np.ravel_multi_index(grids, self.shape).ravel()
            else:
                m = self.mask
                e = _strided_elements(self.index) if m is None else None
                if e is None:
                    e = self.index.element_indices(m if full_mask(m, self.index.out_shape) is not None else None) \
                        if m is not None else self.index.element_indices()
                    # (without a mask the indices come in rows of the view's last axis)
                    e = sorted_unique(e, self.index.out_shape[-1] if m is None and self.index.out_shape else None)
                self._elems = e
        return self._elems

    def box(self) -> tuple:
        """The bounding box as a tuple of slices (the selection itself when ``exact``)."""
        box = self._box
        if box is None:
            box = self._box = tuple(slice(l, max(l, h)) for l, h in zip(self.lo, self.hi))
        return box

    def box_size(self) -> int:
        """The number of elements of the bounding box."""
        n = self._size
        if n is None:
            n = self._size = math.prod(max(0, h - l) for l, h in zip(self.lo, self.hi))
        return n

    def box_overlaps(self, other) -> bool:
        """Whether the bounding boxes intersect."""
        return all(a < d and c < b for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi))

    def overlap(self, other):
        """A description of the common elements (``None`` if none), e.g. ``[0:128, 0:512]``."""
        if self.shape != other.shape:
            common = np.intersect1d(self.elements(), other.elements(), assume_unique=True)
            return None if common.size == 0 else _describe_elems(common, self.shape)
        if not self.box_overlaps(other):
            return None
        if self.exact and other.exact:
            return "[" + ", ".join(f"{max(a, c)}:{min(b, d)}" for a, b, c, d in
                                   zip(self.lo, self.hi, other.lo, other.hi)) + "]"
        common = _common_elements(self, other)
        return None if common.size == 0 else _describe_elems(common, self.shape)

    def contains(self, other) -> bool:
        """Whether every element of ``other`` is in this region."""
        if self.shape == other.shape and self.exact and other.exact:
            return all(a <= c and d <= b for a, b, c, d in zip(self.lo, self.hi, other.lo, other.hi))
        if self.shape == other.shape and not self.box_overlaps(other):
            return other.empty()
        return bool(np.isin(other.elements(), self.elements(), assume_unique=True).all())

    def describe(self) -> str:
        """``[lo:hi, ...]`` (the bounding box; ``~`` marks a non-box selection)."""
        box = "[" + ", ".join(f"{a}:{b}" for a, b in zip(self.lo, self.hi)) + "]"
        return box if self.exact else f"~{box} (strided/masked)"


_bitmap_of = [None, None]  # (region, bool map of its elements): the race check meets one region many times in a row


def _common_elements(a, b) -> np.ndarray:
    """The sorted flat indices two regions of one shape both select (``np.intersect1d``'s result).

    nki-library's MoE CTE scatters token rows by indirect DMA: every such region's bounding box is
    the whole output, and intersecting two lists of ~400k elements took ~120 ms per pair of them
    (most of a 15-minute test); a map of ``a``'s elements answers it in a few ms."""
    size = math.prod(a.shape)
    if size > 1 << 26:
        return np.intersect1d(a.elements(), b.elements(), assume_unique=True)
    if _bitmap_of[0] is not a:
        bits = np.zeros(size, bool)
        bits[a.elements()] = True
        _bitmap_of[:] = [a, bits]
    eb = b.elements()  # (sorted: so is what it keeps)
    return eb[_bitmap_of[1][eb]]


_WHOLE = {}  # shape -> Region.whole(shape)
_REGION_OF = {}  # id(index) -> (index, Region.of(index)) (the index is kept, so its id stays its own)


def _strided_box(index):
    """``(lo, hi)`` when a strided index selects exactly a box: each tensor axis is walked by its
    own tile axes as one contiguous mixed-radix range (e.g. a batch of programs' row blocks
    ``pid * 128 + p``), else ``None``."""
    lo, hi, used = [], [], set()
    for c in index.comps:
        if isinstance(c, (int, np.integer)):
            lo.append(int(c))
            hi.append(int(c) + 1)
            continue
        walk = sorted((k, n, ax) for ax, (k, n) in enumerate(zip(c.coefs, c.shape)) if k and n > 1)
        span = 1
        for k, n, ax in walk:
            if k != span or ax in used:
                return None
            used.add(ax)
            span *= n
        lo.append(c.offset)
        hi.append(c.offset + span)
    return lo, hi


def _describe_elems(flat, shape):
    idx = np.unravel_index(flat, shape)
    box = "[" + ", ".join(f"{int(a.min())}:{int(a.max()) + 1}" for a in idx) + "]"
    first = tuple(int(a[0]) for a in idx)
    return f"{flat.size} element(s) within {box}, first {first}"


def _union_covers(regions, target) -> bool:
    """Whether the union of ``regions`` covers ``target``."""
    for r in regions:
        if r.contains(target):
            return True
    if not regions:
        return target.empty()
    same = [r for r in regions if r.shape == target.shape]
    if target.exact and all(r.exact for r in same):
        # Boxes: mark each region's intersection with the target's box (no element lists, no sort).
        if target.empty():
            return True
        cover = np.zeros([h - l for l, h in zip(target.lo, target.hi)], dtype=bool)
        for r in same:
            sl = tuple(slice(max(a, c) - c, min(b, d) - c) for a, b, c, d in zip(r.lo, r.hi, target.lo, target.hi))
            if all(x.stop > x.start for x in sl):
                cover[sl] = True
        return bool(cover.all())
    elems = sorted_unique(np.concatenate([r.elements() for r in regions if r.shape == target.shape] or [np.empty(0, int)]))
    return bool(np.isin(target.elements(), elems, assume_unique=True).all())
