"""Layouts: where a view's elements live in its root's storage, checked and addressed.

A :class:`Layout` is a storage owner (``root``: the tile allocated by ``nl.ndarray``, or the
HBM tensor), an element dtype, an element ``offset`` and per-dimension ``strides`` -- the
access pattern of the NKI "Access Patterns" deep dive (see :mod:`.access_pattern` for the
rules). This module computes layouts from NumPy views of a root's memory and back
(:func:`strided_array`), checks them against their storage (:func:`check_layout`), lists
their addresses, and names the root elements a static layout covers as an
:class:`~.indexing.Index` for the diagnostics (:func:`_root_index`). It knows nothing of
the tensor classes: a root is anything with ``data``, ``shape``, ``dtype`` and ``buffer``.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as dt
from .errors import NKIError
from .index_expr import AffineExpr
from .indexing import Index, _resolve_aligned


# ---------------------------------------------------------------------------
# layouts: storage + dtype + offset + shape + strides (+ a dynamic index)
# ---------------------------------------------------------------------------
class _Dynamic:
    """A runtime index of a view: ``kind`` "scalar" adds ``value * stride`` to every address;
    "vector" adds ``value[p] * stride`` to the addresses of partition ``p`` (dimension 0);
    "indirect" (``NkiTensor.indirect``) reads column ``i`` at free offset
    ``index[i % G, i // G]`` of the viewed tensor, whose free geometry ``free`` keeps."""

    __slots__ = ("kind", "index", "stride", "free")

    def __init__(self, kind, index, stride, free=None):
        self.kind, self.index, self.stride, self.free = kind, index, int(stride), free


class Layout:
    """Where a view's elements live: ``root`` (the storage owner), element ``dtype``,
    ``offset`` and ``strides`` in elements of ``dtype``, ``shape``, optional ``dynamic`` index."""

    __slots__ = ("root", "dtype", "offset", "shape", "strides", "dynamic", "source")

    def __init__(self, root, dtype, offset, shape, strides, dynamic=None, source=None):
        self.root = root
        self.dtype = np.dtype(dtype)
        self.offset = int(offset)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dynamic = dynamic
        self.source = source if source is not None else root

    def replace(self, **kw):
        """A copy with some fields changed."""
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(kw)
        return Layout(**fields)

    @property
    def on_chip(self) -> bool:
        """SBUF / PSUM storage (partition dimension first)."""
        return bool(self.root.buffer.on_chip)

    def pattern(self):
        """``[[step, num], ...]`` in dimension order."""
        return [[s, n] for s, n in zip(self.strides, self.shape)]


def _rows(root, data=None) -> np.ndarray:
    """The root's memory (``data``: its array, default ``root.data``) as a 2-D byte array: one row per
    partition on chip (the row stride is the storage's partition stride, which for a tensor placed in
    SBUF / PSUM is the whole partition, not the tensor's free size), a single row for HBM (device
    memory is flat)."""
    data = root.data if data is None else data
    if root.buffer.on_chip and data.ndim:
        try:
            rows = data.reshape((data.shape[0], -1), copy=False)
        except ValueError:
            rows = None
        if rows is not None and (rows.shape[1] <= 1 or rows.strides[1] == data.itemsize):
            return rows.view(np.uint8)
        raise NKIError("storage layout", f"{_label(root)} of shape {tuple(data.shape)} (byte strides "
                       f"{data.strides}) does not hold each partition's free elements contiguously, so it has no "
                       "partition storage to address with an access pattern")
    if not data.flags.c_contiguous:
        raise NKIError("storage layout", f"{_label(root)} of shape {tuple(data.shape)} is not a row-major "
                       "(C-contiguous) array, so it has no flat storage to address with an access pattern; pass "
                       "np.ascontiguousarray(...) as the kernel argument")
    return data.reshape(1, -1).view(np.uint8)


def _storage_bytes(root) -> np.ndarray:
    """An HBM root's memory as a flat byte array (the storage every view of it addresses)."""
    return _rows(root)[0]


def _label(t) -> str:
    name = getattr(t, "name", None)
    if name:
        return f"{t.buffer.name} tensor {name}"
    return f"{t.buffer.name} tensor"


def _free_elems(root, dtype) -> int:
    """Free elements per partition of an on-chip root, counted in ``dtype``."""
    shape = root.shape
    nbytes = math.prod(shape[1:]) * root.dtype.itemsize
    if nbytes % dtype.itemsize:
        raise NKIError("reinterpret dtype", f"a partition of {_label(root)} {shape} {root.dtype} holds {nbytes} "
                       f"bytes, not a whole number of {dtype} elements ({dtype.itemsize} B)")
    return nbytes // dtype.itemsize


def _storage_elems(root, dtype) -> int:
    return root.data.nbytes // dtype.itemsize


def _root_tile(t):
    while t._parent is not None:
        t = t._parent
    return t


def _geometry(root, arr, source, data=None) -> Layout:
    """The logical layout of ``arr``, a NumPy view of ``root``'s memory: element offset and strides in
    the root's row-major element order (on chip, partition ``p`` starts at ``p * free size``)."""
    data = root.data if data is None else data
    rows = _rows(root, data)
    isz = arr.dtype.itemsize
    row_bytes = rows.shape[1]
    pstride = rows.strides[0] if rows.shape[0] > 1 else 0
    if arr is data:  # the root's own array (`.ap` on a tile): no address arithmetic
        part = byte = 0
    else:
        ptr = arr.__array_interface__["data"][0] - rows.__array_interface__["data"][0]
        part, byte = divmod(ptr, pstride) if pstride else (0, ptr)

    def logical(s):  # a byte stride of arr -> an element stride of the layout
        if pstride and s and s % pstride == 0:
            return s // pstride * row_bytes // isz
        return s // isz

    if (not np.may_share_memory(arr, rows) and arr.size > 0 or byte % isz or row_bytes % isz
            or any(s % isz for s in arr.strides) or not 0 <= byte < max(row_bytes, 1)):
        raise NKIError("view of a copy", f"this {root.buffer.name} tensor of shape {tuple(arr.shape)} is a copy, "
                       "not a view of its storage (it was made by a gather); NkiTensor views need a strided view")
    return Layout(root, arr.dtype, (part * row_bytes + byte) // isz, arr.shape,
                  tuple(logical(s) for s in arr.strides), None, source)


def position_in_root(arr, root):
    """``(offset, strides)`` of ``arr``, a NumPy view of an on-chip ``root`` tile's memory of the root's
    dtype, in elements of the root's row-major order (what a root-shaped mask indexes); ``None`` when
    ``arr`` is not a strided view of it. A placed root's partitions lie a whole SBUF / PSUM partition
    apart in memory, but count ``free size`` elements apart here."""
    data = root._raw()
    if arr.dtype != data.dtype or root.pdim or not np.may_share_memory(data, arr):
        return None
    isz = data.itemsize
    base = data.__array_interface__["data"][0]
    ptr = arr.__array_interface__["data"][0]
    if data.flags.c_contiguous:
        off = ptr - base
        if off % isz or any(s % isz for s in arr.strides):
            return None
        return off // isz, tuple(s // isz for s in arr.strides)
    # A placed root: the answer depends on nothing but these numbers (both arrays' addresses and
    # geometries), and a tiled loop asks for the same view of the same storage on every instruction.
    key = (base, data.shape, data.strides, isz, ptr, arr.shape, arr.strides)
    pos = _placed_positions.get(key, _UNKNOWN)
    if pos is _UNKNOWN:
        try:
            lay = _geometry(root, arr, None, data)
            pos = lay.offset, lay.strides
        except NKIError:
            pos = None
        if len(_placed_positions) >= 8192:
            _placed_positions.clear()
        _placed_positions[key] = pos
    return pos


_placed_positions = {}  # position_in_root's answers for placed roots, by the numbers that decide them
_UNKNOWN = object()


# ---------------------------------------------------------------------------
# checking and materialising layouts
# ---------------------------------------------------------------------------
def _extent(offset, shape, strides):
    lo = offset + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = offset + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    return lo, hi


def check_layout(lay: Layout, what: str, extra_offset: int = 0) -> None:
    """Every address of ``lay`` (shifted by ``extra_offset``) inside its storage, partitions contiguous."""
    offset = lay.offset + extra_offset
    if any(n < 1 for n in lay.shape):
        raise NKIError("access pattern", f"{what}: pattern {lay.pattern()} has a dimension with num < 1")
    if lay.on_chip:
        if not lay.shape:
            raise NKIError("access pattern", f"{what}: an on-chip access pattern needs a partition entry")
        free = _free_elems(lay.root, lay.dtype)
        parts = lay.root.shape[0]
        if lay.shape[0] > 1 and lay.strides[0] != free:
            raise NKIError("partition step", f"{what}: the partition entry of pattern {lay.pattern()} steps "
                           f"{lay.strides[0]} elements; on {lay.root.buffer.name.upper()} it must be the free size "
                           f"of the tensor ({free} {lay.dtype} elements per partition): partitions are accessed "
                           "contiguously, one after another")
        p0, f0 = divmod(offset, free) if offset >= 0 else (-1, 0)
        flo, fhi = _extent(f0, lay.shape[1:], lay.strides[1:])
        if p0 < 0 or p0 + lay.shape[0] > parts:
            raise NKIError("out-of-bounds access", f"{what}: offset {offset} and pattern {lay.pattern()} reach "
                           f"partitions {p0}..{p0 + lay.shape[0] - 1} of a tensor with {parts} partitions")
        if flo < 0 or fhi >= free:
            raise NKIError("out-of-bounds access", f"{what}: pattern {lay.pattern()} at offset {offset} reaches "
                           f"free elements {flo}..{fhi} of a partition, outside [0, {free}) of "
                           f"{_label(lay.root)} {lay.root.shape} ({lay.dtype}); a free pattern stays in its partition")
        return
    n = _storage_elems(lay.root, lay.dtype)
    lo, hi = _extent(offset, lay.shape, lay.strides)
    if lo < 0 or hi >= n:
        raise NKIError("out-of-bounds access", f"{what}: offset {offset} and pattern {lay.pattern()} reach "
                       f"elements {lo}..{hi} of {_label(lay.root)} {lay.root.shape}, which holds {n} {lay.dtype} "
                       "elements")


def strided_array(lay: Layout, extra_offset: int = 0) -> np.ndarray:
    """The NumPy view of ``lay`` (checked first): logical element addresses mapped onto the root's
    memory, partition steps becoming the storage's partition stride."""
    rows = _rows(lay.root)
    isz = lay.dtype.itemsize
    per_row = rows.shape[1] // isz
    start = lay.offset + extra_offset
    part, elem = divmod(start, per_row) if lay.on_chip else (0, start)
    head = rows[part, elem * isz:(elem + 1) * isz].view(lay.dtype)
    strides = [s * isz for s in lay.strides]
    if lay.on_chip and lay.shape:
        strides[0] = lay.strides[0] // per_row * rows.strides[0] if lay.strides[0] % per_row == 0 else \
            lay.strides[0] * isz
    return dt.as_strided(head, lay.shape, tuple(strides), writeable=bool(lay.root.data.flags.writeable))


def addresses(lay: Layout) -> np.ndarray:
    """Element addresses (into the storage, in ``lay.dtype``) of every element of ``lay``."""
    shape = tuple(lay.shape)
    if len(shape) < 2:
        return np.arange(shape[0], dtype=np.int64) * lay.strides[0] + lay.offset if shape else \
            np.full((), lay.offset, dtype=np.int64)
    # One array of the result's size, made by broadcasting per-axis steps into it in place: a fresh
    # full-size temporary per axis (the former way) cost ~4 ms for a [128, 3584] token-row gather of
    # nki-library's H-sharded MoE, most of it faulting in new pages.
    steps = []
    for ax, (n, s) in enumerate(zip(shape, lay.strides)):
        shp = [1] * len(shape)
        shp[ax] = n
        steps.append((np.arange(n, dtype=np.int64) * s).reshape(shp))
    steps[-1] += lay.offset
    addr = np.empty(shape, dtype=np.int64)
    np.add(steps[0], steps[1], out=addr)
    for st in steps[2:]:
        np.add(addr, st, out=addr)
    return addr


def _root_index(lay: Layout):
    """The root elements a static layout covers, as an :class:`~.indexing.Index` (for diagnostics)."""
    root = lay.root
    key = (root.shape, root.dtype.itemsize, lay.dtype.itemsize, lay.offset, lay.shape, lay.strides)
    hit = _ROOT_INDEX.get(key)
    if hit is None:
        hit = _ROOT_INDEX_ELEMENTWISE.get(key)
    if hit is not None:  # (loops make the same views again and again; an Index is never modified)
        return hit
    affine = _root_affine(lay)
    if affine is not None:
        index = _affine_root_index(root, lay, affine)
        if len(_ROOT_INDEX) >= 4096:
            _ROOT_INDEX.clear()
        _ROOT_INDEX[key] = index
        return index
    addr = addresses(lay) * lay.dtype.itemsize // root.dtype.itemsize
    index = Index(root.shape, lay.shape, list(np.unravel_index(addr, root.shape)))
    # (per-element index arrays: kept for a loop's repeated views -- nki-library's down projection
    # views every n-th column of a [P, h, f] weight tile at each matmul -- within a bound on their size)
    size = addr.size * len(root.shape)
    if size <= _ELEMENTWISE_MAX // 4:
        global _elementwise_size
        if _elementwise_size + size > _ELEMENTWISE_MAX:
            _ROOT_INDEX_ELEMENTWISE.clear()
            _elementwise_size = 0
        _ROOT_INDEX_ELEMENTWISE[key] = index
        _elementwise_size += size
    return index


_ROOT_INDEX = {}  # (root shape, itemsizes, layout) -> the affine root Index of _root_index
_ROOT_INDEX_ELEMENTWISE = {}  # the same key -> a per-element Index of _root_index
_ELEMENTWISE_MAX = 1 << 22  # index elements kept in _ROOT_INDEX_ELEMENTWISE (8 B each)
_elementwise_size = 0


def _affine_root_index(root, lay, affine):
    """The Index of per-root-axis affine coordinates: a view or strided Index (no per-element index
    arrays, an exact region for the diagnostics; per-element arrays of every view of a large tile
    made nki-library CTE kernels slow, and their cached regions held gigabytes)."""

    if any(n > 1 and not any(c.coefs[i] for c in affine) for i, n in enumerate(lay.shape)):
        # a broadcast axis (step 0): only the strided form repeats an element
        return Index(root.shape, lay.shape, affine, strided=(tuple(c.offset for c in affine),
                                                              tuple(c.coefs for c in affine)))
    return _resolve_aligned(root.shape, lay.shape, len(lay.shape), affine)


def _root_affine(lay: Layout):
    """Per root axis, the root coordinate of a static layout's elements as an affine expression of the
    layout's axes, or ``None`` when some coordinate is not affine (a step carries from one root axis
    into the next, or elements of a narrower dtype share a root element)."""

    root = lay.root
    shape, rshape = tuple(lay.shape), tuple(root.shape)
    if not shape or not rshape or any(n < 1 for n in rshape):
        return None
    l, r = lay.dtype.itemsize, root.dtype.itemsize
    steps = [s for n, s in zip(shape, lay.strides) if n > 1]
    if (lay.offset * l) % r or any((s * l) % r for s in steps):
        return None
    rstrides = [math.prod(rshape[j + 1:]) for j in range(len(rshape))]
    offset = lay.offset * l // r
    if not 0 <= offset < math.prod(rshape):
        return None
    start = [offset // rs % n for rs, n in zip(rstrides, rshape)]
    coefs = [[0] * len(shape) for _ in rshape]
    for i, (n, s) in enumerate(zip(shape, lay.strides)):
        if n == 1 or s == 0:
            continue
        rest = abs(s * l // r)
        for j, rs in enumerate(rstrides):
            coefs[j][i], rest = divmod(rest, rs)
            if s < 0:
                coefs[j][i] = -coefs[j][i]
    for j, n in enumerate(rshape):
        lo = start[j] + sum(min(0, c * (m - 1)) for c, m in zip(coefs[j], shape))
        hi = start[j] + sum(max(0, c * (m - 1)) for c, m in zip(coefs[j], shape))
        if lo < 0 or hi >= n:
            return None  # (a carry between root axes: the coordinates are not affine here)
    return [AffineExpr(shape, start[j], coefs[j]) for j in range(len(rshape))]
