"""``nl.NkiTensor``: every on-chip and HBM tensor is a view of a storage (access patterns).

The current ``nki.language`` reference (``NkiTensor``) and the "NKI Access
Patterns" deep dive describe a tensor as a storage plus an access pattern: an
element ``offset`` and ``[[step, num], ...]`` per dimension, a loop over the
*flattened* storage. That is exactly a NumPy strided view, so a view here is a
NumPy array made with ``as_strided`` over the storage of its root (the tile
allocated by ``nl.ndarray``, or the HBM tensor), with its element strides as the
pattern. Views share storage: what an ISA instruction or a DMA writes through one
is visible through every other.

Rules (an :class:`NKIError` naming the rule where one is broken):

* ``pattern`` entries are ``[step, num]`` with ``num >= 1``; every address the
  pattern reaches lies inside the storage -- checked where an instruction uses
  the view (making one reads nothing).
* SBUF / PSUM: the first entry walks the partitions, and its step must be the
  storage's number of free elements per partition (partition access is
  contiguous on NeuronCore v2-v4); the free pattern stays inside one partition.
* ``ap`` addresses the storage directly (the pattern of the view it is called on
  is replaced), ``offset`` adds to the view's storage offset (``None``: keep it);
  ``dtype`` reinterprets the storage (pattern and offset count elements of it).
* The view methods (``slice``, ``select``, ``permute``, ...) keep the partition
  dimension first on on-chip tensors, as each method's reference states.
* Dynamic views (``select`` with a tensor index, ``vector_select``, ``ap`` with
  ``scalar_offset`` / ``vector_offset``) read their index tensor when an
  instruction uses the view, not when the view is made; an index that leaves
  the storage is an error (``oob_mode.error``). One dynamic index per view.
"""

from __future__ import annotations

import functools
import math
import operator
import weakref

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import dtypes as dt
from .errors import NKIError, NotBatchable
from .nki_object import NKIObject
from . import diagnostics as _diag
from .indexing import Index, _resolve_aligned
from .index_expr import AffineExpr
from .instructions import target as _target


@functools.cache
def _late():
    """``(core, diagnostics, indexing)``, imported on first use: they import this module (a function-level
    import costs about half a microsecond, and a view is made at every instruction of a loop)."""
    from . import core, diagnostics, indexing

    return core, diagnostics, indexing


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


def layout_of(t) -> Layout:
    """The layout of a tile, HBM tensor or HBM access (its position in its root's storage)."""
    core = _late()[0]
    Access, HBMTensor, Tile = core.Access, core.HBMTensor, core.Tile

    if getattr(t, "nb", 0):  # a tile with batch axes: views run one program at a time
        raise NotBatchable("NkiTensor views of a batch of programs' tiles")
    lay = getattr(t, "_layout", None)
    if lay is not None:  # a dynamic view keeps its layout
        _refuse_unusable(lay)
        return lay
    if isinstance(t, Tile):
        root = _root_tile(t)
        if root.pdim:
            raise NKIError("partition dimension", f"NkiTensor views need the partition dimension first; this "
                           f"{root.buffer.name} tile {root.shape} has {root.pdim} leading block dimension(s)")
        root.own()  # views write into the root's memory: it must be private and writeable
        if t is root:
            try:
                _rows(root)
            except NKIError:  # a private array without per-partition storage (no other view sees it yet)
                root.data = np.ascontiguousarray(root.data)
        elif getattr(t, "_review", None) is not None and not np.may_share_memory(t._raw(), root._raw()):
            t.own()  # a view made before its root took its private copy: derived again from the copy
        arr = t.data
    elif isinstance(t, HBMTensor):
        root = getattr(t, "_storage_root", t)
        arr = t.data
    elif isinstance(t, Access):
        if not t.index.is_view or t.within is not None:
            raise NKIError("view of a gather", f"{t._label()} selects its elements by index arrays; an access "
                           "pattern (and every NkiTensor view) needs a strided region (ints and slices)")
        root = getattr(t.tensor, "_storage_root", t.tensor)
        arr = t.index.view(t.tensor.data)
    else:
        raise NKIError("operand type", f"expected an NkiTensor (tile or HBM tensor), got {type(t).__name__}")
    return _geometry(root, arr, t)


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
    addr = np.full(lay.shape, lay.offset, dtype=np.int64)
    for ax, (n, s) in enumerate(zip(lay.shape, lay.strides)):
        shp = [1] * len(lay.shape)
        shp[ax] = n
        addr = addr + (np.arange(n, dtype=np.int64) * s).reshape(shp)
    return addr


def _index_value(index, what) -> np.ndarray:
    """Integer values of a dynamic index: an SBUF tensor, a VirtualRegister (or a Python int), read now."""
    from .core import Tile

    if isinstance(index, (int, np.integer)) or (hasattr(index, "__index__") and not isinstance(index, Tile)):
        return np.asarray(operator.index(index), dtype=np.int64)
    if not isinstance(index, Tile):
        raise NKIError("dynamic offset", f"{what}: the dynamic offset must be an SBUF tensor, got "
                       f"{type(index).__name__}")
    if index.buffer.name != "sbuf":
        raise NKIError("dynamic offset", f"{what}: the dynamic offset tensor is in {index.buffer.name.upper()}; "
                       "offsets are read from SBUF")
    if not np.issubdtype(index.dtype, np.integer):
        raise NKIError("dynamic offset", f"{what}: the dynamic offset tensor has dtype {index.dtype}; offsets "
                       "are integers (int32)")
    return np.asarray(index.data).astype(np.int64)


def _scalar_shift(lay: Layout, what) -> int:
    value = _index_value(lay.dynamic.index, what).reshape(-1)
    if value.size != 1:
        raise NKIError("dynamic offset", f"{what}: a scalar offset is a (1, 1) tensor, got {value.size} values")
    return int(value[0]) * lay.dynamic.stride


# ---------------------------------------------------------------------------
# Tensor Indirection (NkiTensor.indirect, NeuronCore-v4)
# ---------------------------------------------------------------------------
def indirect_group() -> int:
    """Partitions per offset group of a Tensor Indirection view: 32 for the Tensor engine
    (``nc_matmul``), 16 for the Vector / Scalar / GpSimd engines (``NkiTensor.indirect``)."""

    return 32 if _diag.instruction_where.state.op == "nc_matmul" else 16


def _indirect_addresses(lay: Layout, what) -> np.ndarray:
    """Storage addresses (``(P, num_elem)``) of an indirect view: element ``[p, i]`` is the viewed
    tensor's partition ``p`` at free offset ``index[i % G, i // G]``."""
    dyn = lay.dynamic
    free_shape, free_strides, base, pstride = dyn.free
    group = indirect_group()
    idx = _index_value(dyn.index, what)
    n = lay.shape[1]
    i = np.arange(n)
    rows, cols = i % group, i // group
    if rows.max() >= idx.shape[0] or cols.max() >= idx.shape[1]:
        raise NKIError("indirect index", f"{what}: offset {n - 1} of {n} comes from index[{n - 1} % {group}, "
                       f"{n - 1} // {group}] (the engine's groups of {group} partitions), outside the index tensor "
                       f"{tuple(idx.shape)}")
    offs = idx[rows, cols]
    nfree = math.prod(free_shape)
    bad = (offs < 0) | (offs >= nfree)
    if bad.any():
        k = int(np.argmax(bad))
        raise NKIError("out-of-bounds access", f"{what}: free offset {int(offs[k])} (column {k}) is outside the "
                       f"{nfree} free elements of the viewed tensor (oob_mode.error)")
    free_addr = sum(c * st for c, st in zip(np.unravel_index(offs, free_shape), free_strides)) if free_shape \
        else np.zeros(n, np.int64)
    return base + pstride * np.arange(lay.shape[0])[:, None] + np.asarray(free_addr, np.int64)[None, :]


def _root_elements(lay: Layout) -> np.ndarray:
    """The root's elements (in ``lay.dtype``) as a writable ``(partitions, free)`` view of its memory."""
    per_part = _free_elems(lay.root, lay.dtype)
    whole = Layout(lay.root, lay.dtype, 0, (lay.root.shape[0], per_part), (per_part, 1))
    return strided_array(whole)


def _indirect_gather(lay: Layout, what) -> np.ndarray:
    addr = _indirect_addresses(lay, what)
    elems = _root_elements(lay)
    return elems[addr // elems.shape[1], addr % elems.shape[1]]


def _indirect_scatter(lay: Layout, values, what, add=False) -> None:
    addr = _indirect_addresses(lay, what)
    elems = _root_elements(lay)
    rows, cols = addr // elems.shape[1], addr % elems.shape[1]
    vals = np.broadcast_to(np.asarray(values), addr.shape)
    if add:
        vals = elems[rows, cols] + vals
    elems[rows, cols] = vals  # a repeated offset keeps the last column's value


def _refuse_unusable(lay: Layout) -> None:
    """A view that reaches outside its tensor raises where it is used (see :func:`materialize`)."""
    if lay.dynamic is not None and lay.dynamic.kind == "unusable":
        raise NKIError("out-of-bounds access", lay.dynamic.index)


def resolve_now(lay: Layout, what="dynamic view") -> np.ndarray:
    """The values a dynamic view addresses now: a strided view (scalar offset) or a gathered copy
    (vector offsets, Tensor Indirection)."""
    if lay.dynamic is None:
        return strided_array(lay)
    _refuse_unusable(lay)
    if lay.dynamic.kind == "indirect":
        return _indirect_gather(lay, what)
    if lay.dynamic.kind == "scalar":
        shift = _scalar_shift(lay, what)
        check_layout(lay, what, shift)
        return strided_array(lay, shift)
    addr = vector_addresses(lay, what)
    base = _storage_bytes(lay.root)  # vector offsets address HBM (flat) only
    isz = lay.dtype.itemsize
    return base[: base.size - base.size % isz].view(lay.dtype)[addr]


def addresses_now(lay: Layout, what):
    """``(addr, in_bounds)``: the storage address (in ``lay.dtype``) of every element of a view with its
    dynamic offsets read now, and whether each lies inside the storage -- for instructions that
    skip out-of-bounds elements (``oob_mode.skip``)."""
    _refuse_unusable(lay)
    if lay.dynamic is None:
        addr = addresses(lay)
    elif lay.dynamic.kind == "scalar":
        addr = addresses(lay) + _scalar_shift(lay, what)
    else:
        vals = _index_value(lay.dynamic.index, what).reshape(-1)
        if vals.size != lay.shape[0]:
            raise NKIError("dynamic offset", f"{what}: the vector offset has {vals.size} values for "
                           f"{lay.shape[0]} partitions")
        addr = addresses(lay.replace(strides=(0,) + lay.strides[1:]))
        addr = addr + (vals * lay.dynamic.stride).reshape((-1,) + (1,) * (len(lay.shape) - 1))
    n = _storage_elems(lay.root, lay.dtype)
    return addr, (addr >= 0) & (addr < n)


def vector_addresses(lay: Layout, what) -> np.ndarray:
    """Addresses of a vector-offset view: partition ``p`` starts ``index[p] * stride`` into the storage."""
    addr, ok = addresses_now(lay, what)
    if not ok.all():
        p = int(np.argwhere(~ok)[0][0])
        raise NKIError("out-of-bounds access", f"{what}: the vector offset of partition {p} reaches element "
                       f"{int(addr[~ok].flat[0])} of {_label(lay.root)} {lay.root.shape}, which holds "
                       f"{_storage_elems(lay.root, lay.dtype)} {lay.dtype} elements (oob_mode.error)")
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
    index = _late()[2].Index(root.shape, lay.shape, list(np.unravel_index(addr, root.shape)))
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


def materialize(lay: Layout, what: str):
    """The tensor object of a layout: a Tile (on chip) or an HBM tensor view sharing the storage."""
    if lay.dynamic is None:
        try:
            check_layout(lay, what)
        except NKIError as e:
            if e.rule != "out-of-bounds access":
                raise
            # Making a view reads nothing ("calling .ap on a tensor does not do any computation"): one
            # that reaches outside its tensor is an error where an instruction uses it (nki-library
            # builds such views on paths it then skips).
            lay = lay.replace(dynamic=_Dynamic("unusable", f"{e.detail} (the view was made at {e.where})", 0))
            return materialize(lay, what)
        return _static_view(lay, strided_array(lay))
    tile_cls, hbm_cls = _dynamic_classes()
    if lay.dynamic.kind == "unusable":
        cls = tile_cls if lay.on_chip else hbm_cls
        view = cls(np.broadcast_to(np.zeros((), lay.dtype), lay.shape), lay.root.buffer,
                   *((0,) if lay.on_chip else (lay.root.name,)), **({"parent": lay.source} if lay.on_chip else {}))
        view._layout = lay
        if not lay.on_chip:
            _share_hbm(view, lay.root)
        return view
    if lay.dynamic.kind == "scalar":
        # An HBM view's run-time offset is checked where a DMA uses it (oob_mode.error raises there,
        # oob_mode.skip skips); only the static part of the pattern is checked now.
        ready = lay.on_chip and _ready(lay.dynamic.index)
        check_layout(lay, what, _scalar_shift(lay, what) if ready else 0)
    if lay.on_chip:
        if lay.dynamic.kind == "vector":
            raise NKIError("vector offset", f"{what}: per-partition (vector) offsets address HBM tensors (DMA "
                           f"gathers); {_label(lay.root)} is on chip")
        # The tile's own array only gives its shape and dtype: `data` resolves the offset at each use.
        view = tile_cls(np.broadcast_to(np.zeros((), lay.dtype), lay.shape), lay.root.buffer, 0, parent=lay.source)
        view._layout = lay
        return view
    view = hbm_cls(np.broadcast_to(np.zeros((), lay.dtype), lay.shape), lay.root.buffer, lay.root.name)
    view._layout = lay
    _share_hbm(view, lay.root)
    return view


def _static_view(lay: Layout, arr: np.ndarray):
    """The tensor object of a checked static layout whose NumPy view is ``arr``."""
    core, _diag, _ = _late()
    if lay.on_chip:
        view = core.Tile(arr, lay.root.buffer, 0, parent=lay.source)
        view._review = lambda _data, lay=lay: strided_array(lay)  # (after the root's copy-on-write copy)
        if lay.root._diag is not None or _diag.loops:
            _diag.on_view(lay.root, view, _root_index(lay))
        return view
    view = core.HBMTensor(arr, lay.root.buffer, lay.root.name)
    _share_hbm(view, lay.root)
    return view


def _ready(index) -> bool:
    """Whether a dynamic index can be read now (its tile holds values)."""
    return not hasattr(index, "_diag") or index._diag is None or index._diag.written is None


def _share_hbm(view, root) -> None:
    view._borrowers = root._borrowers  # copy-on-write tiles of the storage see writes through the view
    view.is_output = root.is_output
    view._storage_root = root


@functools.cache
def _dynamic_classes():
    """The tile and HBM tensor classes of dynamic views (made on first use: they subclass core's)."""
    from .core import Access, HBMTensor, Tile, flush_pending

    class DynamicTile(Tile):
        """An on-chip view whose offset is read from an SBUF tensor each time it is used."""

        __slots__ = ("_layout",)

        @property
        def data(self):
            """The addressed elements at the current value of the dynamic offset."""
            return resolve_now(self._layout, f"dynamic view of {_label(self._layout.root)}")

        @data.setter
        def data(self, value):
            self._data = value

        def _raw(self):
            return self.data

        def write_whole(self, values, add=False):
            """An instruction's ``dst=`` write, through the offsets read now (a scatter for an
            indirect view)."""
            lay = self._layout
            what = f"dynamic view of {_label(lay.root)}"
            flush_pending()
            _root_tile(self).own()
            if lay.dynamic.kind == "indirect":
                _indirect_scatter(lay, values, what, add)
            else:
                arr = resolve_now(lay, what)
                if add:
                    np.add(arr, values, out=arr)
                else:
                    np.copyto(arr, values)

    class DynamicHBMTensor(HBMTensor):
        """An HBM view whose offset (or per-partition offsets) are read when an instruction uses it."""

        @property
        def data(self):
            """The addressed elements at the current value of the dynamic offset (a copy for a gather)."""
            lay = self.__dict__.get("_layout")
            if lay is None:
                return self.__dict__["_init_data"]
            return resolve_now(lay, f"dynamic view of {_label(lay.root)}")

        @data.setter
        def data(self, value):
            self.__dict__["_init_data"] = value

        # A view's geometry is its pattern's, known without reading memory: nki-library sizes
        # buffers from `.ap(...).shape` of views it never uses (an out-of-bounds one included).
        @property
        def shape(self):
            """Shape of the view (its access pattern's), without resolving the offset."""
            return tuple(self.__dict__["_init_data"].shape)

        @property
        def dtype(self):
            """Element dtype of the view."""
            return self.__dict__["_init_data"].dtype

        @property
        def ndim(self):
            """Number of dimensions of the view."""
            return self.__dict__["_init_data"].ndim

        def __len__(self):
            return self.shape[0]

        def __getitem__(self, key):
            lay = self._layout
            what = f"dynamic view of {_label(lay.root)}"
            if lay.dynamic.kind == "scalar":
                static = HBMTensor(resolve_now(lay, what), lay.root.buffer, lay.root.name)
                _share_hbm(static, lay.root)
                return static[key]
            addr = vector_addresses(lay, what)[key]
            flat = HBMTensor(_storage_bytes(lay.root)[: _storage_elems(lay.root, lay.dtype) * lay.dtype.itemsize]
                             .view(lay.dtype), lay.root.buffer, lay.root.name)
            _share_hbm(flat, lay.root)
            return Access(flat, Index(flat.shape, np.shape(addr), [np.asarray(addr)]))

    return DynamicTile, DynamicHBMTensor


# ---------------------------------------------------------------------------
# the NkiTensor API
# ---------------------------------------------------------------------------
def _dim(d, ndim, what, allow_end=False) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise TypeError(f"{what}: dim must be an int, got {type(d).__name__}")
    d = int(d)
    top = ndim + 1 if allow_end else ndim
    if d < 0:
        d += top
    if not 0 <= d < top:
        raise NKIError("dimension", f"{what}: dim {d} is out of range for a tensor of rank {ndim}")
    return d


def _not_partition(lay, d, what, rule="cannot change the partition dimension (dim 0)"):
    if lay.on_chip and d == 0:
        raise NKIError("partition dimension", f"{what} on {_label(lay.root)}: {rule} of an on-chip tensor")
    if lay.dynamic is not None and lay.dynamic.kind == "vector" and d == 0:
        raise NKIError("indirect dimension", f"{what}: dim 0 of a vector_select view is indirect; it stays "
                       "outermost and cannot be changed")


def _no_dynamic(lay, what):
    if lay.dynamic is not None:
        raise NKIError("indirect view", f"{what}: this view already has a dynamic index (is_indirect()); "
                       "one dynamic select per tensor")


def _dtype(dtype):
    return dt.as_dtype(dtype)


# ---------------------------------------------------------------------------
# `.ap` plans: a loop's repeated views, resolved once
# ---------------------------------------------------------------------------
# What `tensor.ap(pattern, offset, dtype=...)` resolved to, by the numbers that decide it: the
# root's array (shape, strides, dtype), the tensor's (the same, and its address from the root's),
# the root's memory and partition dimension, and the arguments. A layout is a function of these
# alone, and a plan places the view from the root's first element, so a plan is valid for any
# tensor with the same numbers -- nki-library allocates a weight tile per expert and views each
# the same way -- and holds no reference to any array.
_PLANS = {}
_PLANS_MAX = 8192


def _address(arr) -> int:
    return arr.__array_interface__["data"][0]


def _owner(arr):
    """The array that owns ``arr``'s memory (``None`` when it is not a contiguous ndarray)."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr if arr.base is None and arr.flags.c_contiguous else None


def _plan_key(t, pattern, offset, dtype):
    """``(key, root, root's array, its address)`` of ``t.ap(pattern, offset, dtype=dtype)`` (``None``
    for a form not planned: a dynamic or batched view, a tile with a deferred value or viewing HBM
    copy-on-write, or a view made before its root took its copy -- layout_of computes the value,
    takes the copy or derives the view again first -- or arguments that do not hash)."""
    core = _late()[0]
    if type(offset) is bool or getattr(t, "_layout", None) is not None:  # (True == 1: bools reach the check)
        return None
    if isinstance(t, core.Tile):
        if t.nb:
            return None
        root = _root_tile(t)
        data, root_data = t._data, root._data
        if t._thunk is not None or root._thunk is not None or not root_data.flags.writeable \
                or not data.flags.writeable:
            return None
        extra = root.pdim
    elif isinstance(t, core.HBMTensor):
        root = getattr(t, "_storage_root", t)
        data, root_data = t.data, root.data
        extra = root_data.flags.writeable
    else:
        return None
    ra = _address(root_data)
    try:
        key = (tuple([tuple(p) for p in pattern]), offset, dtype, root.buffer, extra,
               root_data.shape, root_data.strides, root_data.dtype,
               0 if data is root_data else _address(data) - ra, data.shape, data.strides, data.dtype)
        hash(key)
    except TypeError:
        return None
    return key, root, root_data, ra


def _plan(t, pattern, offset, dtype, lay: Layout, view) -> None:
    """Remember the static view ``view`` that ``t.ap(pattern, offset, dtype=dtype)`` made (layout ``lay``)."""
    found = _plan_key(t, pattern, offset, dtype)
    if found is None:
        return
    key, root, root_data, ra = found
    arr = view._data if lay.on_chip else view.data
    owner = _owner(root_data)
    if owner is None or root is not lay.root:
        return
    # (the view's place from the root's first element, and the root's from its owner's, at each use:
    # another array of the same numbers may have another owner)
    plan = (lay.dtype, lay.offset, lay.shape, lay.strides, _address(arr) - ra, arr.strides,
            not arr.flags.writeable)
    try:  # the same memory, element for element, or no plan
        again = _planned_array(plan, ra, owner)
    except (TypeError, ValueError):
        return
    if _address(again) != _address(arr) or again.shape != arr.shape or again.strides != arr.strides:
        return
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[key] = plan


def _owner_address(owner) -> int:
    """``_address(owner)``, remembered while the owner lives (placed SBUF memory, an HBM argument)."""
    hit = _OWNER_ADDRESSES.get(id(owner))
    if hit is not None and hit[0]() is owner:
        return hit[1]
    if len(_OWNER_ADDRESSES) >= 1024:
        _OWNER_ADDRESSES.clear()
    _OWNER_ADDRESSES[id(owner)] = (weakref.ref(owner), _address(owner))
    return _OWNER_ADDRESSES[id(owner)][1]


_OWNER_ADDRESSES = {}  # id(array) -> (weak reference, address)


def _planned_array(plan, root_address, owner) -> np.ndarray:
    dtype, _, shape, _, at, byte_strides, readonly = plan
    arr = np.ndarray(shape, dtype, buffer=owner, offset=root_address - _owner_address(owner) + at,
                     strides=byte_strides)
    if readonly:
        arr.flags.writeable = False
    return arr


def _planned_view(t, pattern, offset, dtype):
    """``t.ap(pattern, offset, dtype=dtype)`` from its plan, when there is one (else ``None``: the
    caller resolves it)."""
    found = _plan_key(t, pattern, offset, dtype)
    plan = _PLANS.get(found[0]) if found is not None else None
    if plan is None:
        return None
    _, root, root_data, ra = found
    owner = _owner(root_data)
    if owner is None:
        return None
    core = _late()[0]
    prog = getattr(core._tls, "program", None)
    if prog is not None and prog.pending is not None:
        core.flush_pending()  # (what layout_of's root.own() does first)
    lay = Layout.__new__(Layout)
    lay.root, lay.dtype, lay.offset, lay.shape, lay.strides = root, plan[0], plan[1], plan[2], plan[3]
    lay.dynamic, lay.source = None, t
    return _static_view(lay, _planned_array(plan, ra, owner))


class NkiTensor(NKIObject):
    """The view methods of ``nl.NkiTensor``, shared by on-chip tiles, HBM tensors and HBM accesses.

    Every method returns a new tensor sharing the storage (no copy); see the module docstring for
    the rules and the official ``nki.language.NkiTensor`` reference for each method.
    """

    __slots__ = ()

    # -- geometry ------------------------------------------------------------
    @property
    def strides(self) -> tuple:
        """Element strides of each dimension in the storage (the access pattern's steps)."""
        return layout_of(self).strides

    @property
    def offset(self) -> int:
        """Element offset of the first element in the storage."""
        return layout_of(self).offset

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def get_pattern(self) -> list:
        """The view's access pattern as ``[[stride, count], ...]`` in dimension order."""
        return layout_of(self).pattern()

    def is_contiguous(self) -> bool:
        """True when the view covers its storage row-major without gaps (on chip: per partition)."""
        lay = layout_of(self)
        expect = 1
        dims = list(zip(lay.shape, lay.strides))
        first = 1 if lay.on_chip else 0
        for n, s in reversed(dims[first:]):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    def is_indirect(self) -> bool:
        """True when the view uses a dynamic (runtime) index."""
        return getattr(self, "_layout", None) is not None and self._layout.dynamic is not None

    # -- the access pattern --------------------------------------------------
    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """A view with an explicit access pattern ``[[step, num], ...]`` over the storage.

        ``offset`` is added to this view's storage offset (``None`` keeps it); ``dtype``
        reinterprets the storage (pattern and offset count its elements);
        ``scalar_offset`` / ``vector_offset`` add a runtime index times the stride of
        ``indirect_dim`` of this tensor (``vector_offset``: one index per partition, dim 0).
        """
        if scalar_offset is None and vector_offset is None:
            view = _planned_view(self, pattern, offset, dtype)
            if view is not None:
                return view
        what = "NkiTensor.ap"
        lay = layout_of(self)
        if isinstance(pattern, (list, tuple)) and len(pattern) == 2 and all(
                isinstance(p, (int, np.integer)) for p in pattern):
            pattern = [pattern]
        try:
            steps = [int(p[0]) for p in pattern]
            nums = [int(p[1]) for p in pattern]
            if any(len(p) != 2 for p in pattern):
                raise ValueError
        except (TypeError, ValueError, IndexError):
            raise TypeError(f"{what}: pattern must be a list of [step, num] pairs, got {pattern!r}") from None
        new = _dtype(dtype) if dtype is not None else lay.dtype
        ratio_num, ratio_den = lay.dtype.itemsize, new.itemsize
        if (lay.offset * ratio_num) % ratio_den:
            raise NKIError("reinterpret dtype", f"{what}: the view's byte offset {lay.offset * ratio_num} is not a "
                           f"multiple of {new} ({new.itemsize} B)")
        base = lay.offset * ratio_num // ratio_den
        if offset is not None:
            if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
                raise TypeError(f"{what}: offset must be an int (use scalar_offset= for a runtime offset), "
                                f"got {type(offset).__name__}")
            base += int(offset)
        dyn = None
        if scalar_offset is not None and vector_offset is not None:
            raise NKIError("dynamic offset", f"{what}: give at most one of scalar_offset and vector_offset")
        if scalar_offset is not None or vector_offset is not None:
            d = _dim(indirect_dim, len(lay.shape), what)
            stride = lay.strides[d] * ratio_num
            if stride % ratio_den:
                raise NKIError("reinterpret dtype", f"{what}: the stride of indirect_dim {d} is not a whole number "
                               f"of {new} elements")
            if vector_offset is not None:
                if d != 0:
                    raise NKIError("vector offset", f"{what}: vector_offset supports indirect_dim=0 only, got {d}")
                dyn = _Dynamic("vector", vector_offset, stride // ratio_den)
            else:
                dyn = _Dynamic("scalar", scalar_offset, stride // ratio_den)
        out = Layout(lay.root, new, base, nums, steps, dyn, self)
        if vector_offset is not None and getattr(vector_offset, "shape", None) and \
                vector_offset.shape[0] != nums[0]:
            raise NKIError("vector offset", f"{what}: vector_offset has {vector_offset.shape[0]} partitions, the "
                           f"pattern's first entry {nums[0]}")
        view = materialize(out, what)
        if dyn is None and getattr(view, "_layout", None) is None:  # (a checked static view: worth a plan)
            _plan(self, pattern, offset, dtype, out, view)
        return view

    # -- shape views ---------------------------------------------------------
    def slice(self, dim, start, end, step=1):
        """Elements ``start:end:step`` of dimension ``dim`` (``0 <= start < end <= shape[dim]``, ``step >= 1``)."""
        what = "NkiTensor.slice"
        lay = layout_of(self)
        d = _dim(dim, len(lay.shape), what)
        start, end, step = int(start), int(end), int(step)
        if not (0 <= start < end <= lay.shape[d]) or step < 1:
            raise NKIError("slice", f"{what}(dim={d}, start={start}, end={end}, step={step}) on shape {lay.shape}: "
                           f"needs 0 <= start < end <= {lay.shape[d]} and step >= 1")
        if lay.dynamic is not None and lay.dynamic.kind == "vector" and d == 0:
            _not_partition(lay, d, what)
        if lay.on_chip and d == 0 and step != 1:
            raise NKIError("partition step", f"{what}: step {step} on the partition dimension of "
                           f"{_label(lay.root)}; partitions are accessed contiguously")
        shape, strides = list(lay.shape), list(lay.strides)
        shape[d] = len(range(start, end, step))
        off = lay.offset + start * strides[d]
        strides[d] *= step
        return materialize(lay.replace(offset=off, shape=shape, strides=strides, source=self), what)

    def select(self, dim, index):
        """Dimension ``dim`` at ``index`` (an int, or a (1, 1) SBUF tensor read at run time), removed."""
        what = "NkiTensor.select"
        lay = layout_of(self)
        d = _dim(dim, len(lay.shape), what)
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            i = int(index)
            if not 0 <= i < lay.shape[d]:
                raise NKIError("select", f"{what}(dim={d}, index={i}) on shape {lay.shape}: needs "
                               f"0 <= index < {lay.shape[d]}")
            _not_partition(lay, d, what, "cannot select (remove) the partition dimension (dim 0); use slice")
            off = lay.offset + i * lay.strides[d]
            return materialize(lay.replace(offset=off, shape=lay.shape[:d] + lay.shape[d + 1:],
                                           strides=lay.strides[:d] + lay.strides[d + 1:], source=self), what)
        _no_dynamic(lay, what)
        _not_partition(lay, d, what, "cannot select the partition dimension (dim 0) dynamically")
        if lay.strides[d] == 0:
            raise NKIError("select", f"{what}: dim {d} is a broadcast dimension (stride 0)")
        dyn = _Dynamic("scalar", index, lay.strides[d])
        return materialize(lay.replace(shape=lay.shape[:d] + lay.shape[d + 1:],
                                       strides=lay.strides[:d] + lay.strides[d + 1:], dynamic=dyn, source=self), what)

    def vector_select(self, dim, vector_offset):
        """Per-partition indirect rows: partition ``p`` reads dim-0 row ``vector_offset[p]`` (HBM only)."""
        what = "NkiTensor.vector_select"
        lay = layout_of(self)
        if dim != 0:
            raise NKIError("vector_select", f"{what}: dim must be 0, got {dim}")
        if lay.on_chip:
            raise NKIError("vector_select", f"{what}: only HBM tensors; {_label(lay.root)} is on chip")
        _no_dynamic(lay, what)
        if lay.strides[0] == 0:
            raise NKIError("vector_select", f"{what}: dim 0 is a broadcast dimension (stride 0)")
        if any(lay.strides[0] < abs(s) for s in lay.strides[1:]):
            raise NKIError("vector_select", f"{what}: dim 0 must have the largest stride (strides {lay.strides}); "
                           "permute after vector_select, not before")
        n = vector_offset.shape[0]
        dyn = _Dynamic("vector", vector_offset, lay.strides[0])
        return materialize(lay.replace(shape=(n,) + lay.shape[1:], dynamic=dyn, source=self), what)

    def permute(self, dims):
        """Dimensions reordered: new dimension ``i`` is old dimension ``dims[i]`` (on chip ``dims[0] == 0``)."""
        what = "NkiTensor.permute"
        lay = layout_of(self)
        dims = tuple(int(d) for d in dims)
        if sorted(dims) != list(range(len(lay.shape))):
            raise NKIError("permute", f"{what}: {dims} is not a permutation of range({len(lay.shape)})")
        if dims and dims[0] != 0:
            _not_partition(lay, 0, what, "must keep the partition dimension first (dims[0] == 0)")
        return materialize(lay.replace(shape=[lay.shape[d] for d in dims], strides=[lay.strides[d] for d in dims],
                                       source=self), what)

    def broadcast(self, dim, size):
        """Size-1 dimension ``dim`` repeated ``size`` times (stride 0)."""
        what = "NkiTensor.broadcast"
        lay = layout_of(self)
        d = _dim(dim, len(lay.shape), what)
        if lay.shape[d] != 1:
            raise NKIError("broadcast", f"{what}: dim {d} has size {lay.shape[d]}; only size-1 dims broadcast")
        _not_partition(lay, d, what, "cannot broadcast the partition dimension (dim 0)")
        shape, strides = list(lay.shape), list(lay.strides)
        shape[d], strides[d] = int(size), 0
        return materialize(lay.replace(shape=shape, strides=strides, source=self), what)

    def expand_dim(self, dim):
        """A new size-1 dimension at position ``dim``."""
        what = "NkiTensor.expand_dim"
        lay = layout_of(self)
        d = _dim(dim, len(lay.shape), what, allow_end=True)
        _not_partition(lay, d, what, "cannot insert a dimension before the partition dimension (dim 0)")
        stride = lay.strides[d] * lay.shape[d] if d < len(lay.shape) else 1
        return materialize(lay.replace(shape=lay.shape[:d] + (1,) + lay.shape[d:],
                                       strides=lay.strides[:d] + (stride,) + lay.strides[d:], source=self), what)

    def squeeze_dim(self, dim):
        """Size-1 dimension ``dim`` removed."""
        what = "NkiTensor.squeeze_dim"
        lay = layout_of(self)
        d = _dim(dim, len(lay.shape), what)
        if lay.shape[d] != 1:
            raise NKIError("squeeze_dim", f"{what}: dim {d} has size {lay.shape[d]}, not 1")
        _not_partition(lay, d, what, "cannot remove the partition dimension (dim 0)")
        return materialize(lay.replace(shape=lay.shape[:d] + lay.shape[d + 1:],
                                       strides=lay.strides[:d] + lay.strides[d + 1:], source=self), what)

    def reshape_dim(self, dim, shape):
        """Dimension ``dim`` split into ``shape`` (one entry may be -1)."""
        what = "NkiTensor.reshape_dim"
        lay = layout_of(self)
        d = _dim(dim, len(lay.shape), what)
        sizes = _infer(tuple(int(s) for s in shape), lay.shape[d], what)
        if len(sizes) != 1:
            _not_partition(lay, d, what, "cannot split the partition dimension (dim 0)")
        inner = lay.strides[d]
        strides = []
        for n in reversed(sizes):
            strides.insert(0, inner)
            inner *= n
        return materialize(lay.replace(shape=lay.shape[:d] + sizes + lay.shape[d + 1:],
                                       strides=lay.strides[:d] + tuple(strides) + lay.strides[d + 1:],
                                       source=self), what)

    def flatten_dims(self, start_dim, end_dim):
        """Dimensions ``start_dim..end_dim`` (inclusive) merged; they must be contiguous in storage."""
        what = "NkiTensor.flatten_dims"
        lay = layout_of(self)
        a = _dim(start_dim, len(lay.shape), what)
        b = _dim(end_dim, len(lay.shape), what)
        if a > b:
            raise NKIError("flatten_dims", f"{what}: start_dim {a} > end_dim {b}")
        _not_partition(lay, a, what, "cannot merge the partition dimension (start_dim must be > 0)")
        inner = [i for i in range(a, b + 1) if lay.shape[i] != 1]  # size-1 dims do not move the address
        for i, j in zip(inner, inner[1:]):
            if lay.strides[i] != lay.shape[j] * lay.strides[j]:
                raise NKIError("flatten_dims", f"{what}({a}, {b}): dims {i} and {j} (shape {lay.shape}, strides "
                               f"{lay.strides}) are not contiguous in storage, so they cannot merge into one "
                               "dimension")
        stride = lay.strides[inner[-1]] if inner else lay.strides[b]
        merged = math.prod(lay.shape[a:b + 1])
        return materialize(lay.replace(shape=lay.shape[:a] + (merged,) + lay.shape[b + 1:],
                                       strides=lay.strides[:a] + (stride,) + lay.strides[b + 1:], source=self), what)

    def reshape(self, *shape, **kwargs):
        """The same elements in another shape, without a copy (``shape=`` or positional sizes).

        On chip the partition size stays; a layout that cannot be reshaped without a copy
        (after a permute or a strided slice) is an error."""
        what = "NkiTensor.reshape"
        if kwargs:
            if set(kwargs) != {"shape"} or shape:
                raise TypeError(f"{what}: unexpected arguments {sorted(kwargs)}; takes shape")
            shape = (kwargs["shape"],)
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        from .core import HBMTensor

        if isinstance(self, HBMTensor) and not getattr(self, "_storage_root", self).data.flags.c_contiguous:
            return _reshape_strided_hbm(self, shape, what)  # a strided kernel argument: no flat storage
        lay = layout_of(self)
        shape = _infer(tuple(int(s) for s in shape), math.prod(lay.shape), what)
        if lay.on_chip and (not shape or shape[0] != lay.shape[0]):
            raise NKIError("reshape", f"{what}: {_label(lay.root)} of shape {lay.shape} into {shape}: the "
                           f"partition size ({lay.shape[0]}) must stay")
        if lay.dynamic is not None and lay.dynamic.kind == "vector" and shape[0] != lay.shape[0]:
            raise NKIError("indirect dimension", f"{what}: the indirect partition dimension of a vector_select "
                           f"view must keep its size {lay.shape[0]}")
        probe = as_strided(np.zeros(1, np.int8), lay.shape, lay.strides)
        try:
            moved = np.reshape(probe, shape, copy=False)
        except ValueError:
            raise NKIError("reshape", f"{what}: a view of shape {lay.shape} with strides {lay.strides} cannot be "
                           f"reshaped into {shape} without a copy (its layout is not contiguous across the merged "
                           "dimensions)") from None
        return materialize(lay.replace(shape=shape, strides=moved.strides, source=self), what)

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        """einops-style: split the grouped dims of ``src_pattern``, reorder, merge ``dst_pattern``'s groups."""
        what = "NkiTensor.rearrange"
        sizes = dict(fixed_sizes or {})
        src, dst = tuple(src_pattern), tuple(dst_pattern)
        if len(src) != len(self.shape):
            raise NKIError("rearrange", f"{what}: src_pattern {src} has {len(src)} entries for a tensor of rank "
                           f"{len(self.shape)}")
        t, names = self, []
        pos = 0
        for group, n in zip(src, self.shape):
            if isinstance(group, str):
                names.append(group)
                if group in sizes and sizes[group] != n:
                    raise NKIError("rearrange", f"{what}: {group} is {n}, fixed_sizes says {sizes[group]}")
                sizes[group] = n
                pos += 1
                continue
            unknown = [g for g in group if g not in sizes]
            if len(unknown) > 1:
                raise NKIError("rearrange", f"{what}: sizes of {unknown} in group {group} are unknown; give them "
                               "in fixed_sizes")
            split = tuple(sizes.get(g, -1) for g in group)
            t = t.reshape_dim(pos, split)
            for g, m in zip(group, t.shape[pos:pos + len(group)]):
                sizes[g] = m
            names.extend(group)
            pos += len(group)
        flat_dst = [g for grp in dst for g in ((grp,) if isinstance(grp, str) else grp)]
        if sorted(flat_dst) != sorted(names) or len(set(names)) != len(names):
            raise NKIError("rearrange", f"{what}: dst_pattern {dst} must name the dims of src_pattern {src} once each")
        t = t.permute(tuple(names.index(g) for g in flat_dst))
        pos = 0
        for grp in dst:
            if isinstance(grp, str):
                pos += 1
                continue
            if len(grp) > 1:
                t = t.flatten_dims(pos, pos + len(grp) - 1)
            elif not grp:
                t = t.expand_dim(pos)
            pos += 1
        return t

    def view(self, dtype):
        """The storage reinterpreted as ``dtype``; the last dimension scales by the itemsize ratio."""
        what = "NkiTensor.view"
        lay = layout_of(self)
        new = _dtype(dtype)
        if lay.dynamic is not None:
            raise NKIError("indirect view", f"{what}: not supported on a dynamic (indirect) view")
        old_sz, new_sz = lay.dtype.itemsize, new.itemsize
        if old_sz == new_sz:
            return materialize(lay.replace(dtype=new, source=self), what)
        if not lay.shape:
            raise NKIError("view", f"{what}: a 0-d view cannot change its element size")
        if lay.strides[-1] != 1 and lay.shape[-1] != 1:
            raise NKIError("view", f"{what}: the last dimension (stride {lay.strides[-1]}) must be contiguous in "
                           f"storage to reinterpret {lay.dtype} as {new}")
        if new_sz < old_sz:
            if old_sz % new_sz:
                raise NKIError("view", f"{what}: {lay.dtype} ({old_sz} B) is not a multiple of {new} ({new_sz} B)")
            r = old_sz // new_sz
            shape = lay.shape[:-1] + (lay.shape[-1] * r,)
            strides = tuple(s * r for s in lay.strides[:-1]) + (1,)
            return materialize(lay.replace(dtype=new, offset=lay.offset * r, shape=shape, strides=strides,
                                           source=self), what)
        if new_sz % old_sz:
            raise NKIError("view", f"{what}: {new} ({new_sz} B) is not a multiple of {lay.dtype} ({old_sz} B)")
        r = new_sz // old_sz
        if lay.shape[-1] % r or lay.offset % r or any(s % r for s in lay.strides[:-1]):
            raise NKIError("view", f"{what}: reinterpreting {lay.dtype} as {new} groups {r} elements: the last "
                           f"dimension ({lay.shape[-1]}), the offset ({lay.offset}) and the strides "
                           f"{lay.strides[:-1]} must be multiples of {r}")
        shape = lay.shape[:-1] + (lay.shape[-1] // r,)
        strides = tuple(s // r for s in lay.strides[:-1]) + (1,)
        return materialize(lay.replace(dtype=new, offset=lay.offset // r, shape=shape, strides=strides,
                                       source=self), what)

    reinterpret_cast = view

    def indirect(self, index, num_elem=None):
        """A Tensor Indirection view (NeuronCore-v4 and later) of shape ``(P, num_elem)``: column ``i``
        is this tensor's column at free-dimension offset ``index[i % G, i // G]`` in every partition,
        where ``G`` is the consuming engine's group size (16 on the Vector / Scalar / GpSimd engines,
        32 on the Tensor engine). ``index`` is an SBUF integer tensor ``(P, K)`` with ``P`` this
        tensor's partition count, read when an instruction uses the view; ``num_elem`` defaults to
        ``index.size``. As an instruction's input it gathers, as its output it scatters."""
        from .core import Tile

        what = "NkiTensor.indirect"
        lay = layout_of(self)
        if not lay.on_chip:
            raise NKIError("indirect", f"{what}: Tensor Indirection views SBUF / PSUM tensors; {_label(lay.root)} "
                           "is in HBM (use .ap(vector_offset=...) for an indirect DMA)")
        _no_dynamic(lay, what)
        _target.require("NkiTensor.indirect (Tensor Indirection)", _target.nc_version.gen4)
        if not isinstance(index, Tile) or index.buffer.name != "sbuf" or len(index.shape) != 2:
            raise NKIError("indirect", f"{what}: index must be a 2-D SBUF tensor (P, K) of offsets, got "
                           f"{type(index).__name__} {getattr(index, 'shape', '')}")
        if not np.issubdtype(index.dtype, np.integer):
            raise NKIError("indirect", f"{what}: index has dtype {index.dtype}; offsets are integers")
        if index.shape[0] != lay.shape[0]:
            raise NKIError("indirect", f"{what}: index has {index.shape[0]} partitions, the tensor {lay.shape[0]}")
        size = math.prod(index.shape)
        n = size if num_elem is None else int(num_elem)
        if not 1 <= n <= size:
            raise NKIError("indirect", f"{what}: num_elem {n} must be in 1..{size} (index.size)")
        pstride = lay.strides[0] if lay.shape[0] > 1 else _free_elems(lay.root, lay.dtype)
        dyn = _Dynamic("indirect", index, 0, (lay.shape[1:], lay.strides[1:], lay.offset, pstride))
        view = lay.replace(shape=(lay.shape[0], n), strides=(lay.strides[0], 0), dynamic=dyn, source=self)
        return materialize(view, what)


def _reshape_strided_hbm(t, shape, what):
    """``reshape`` of an HBM tensor over a strided (non-row-major) array, as a NumPy view of it."""
    from .core import HBMTensor

    shape = _infer(tuple(int(s) for s in shape), t.data.size, what)
    try:
        data = np.reshape(t.data, shape, copy=False)
    except ValueError:
        raise NKIError("reshape", f"{what}: {_label(t)} of shape {t.shape} (a strided array) cannot be reshaped "
                       f"into {shape} without a copy") from None
    out = HBMTensor(data, t.buffer, t.name)
    out._borrowers, out.is_output = t._borrowers, t.is_output
    return out


def _infer(sizes, total, what):
    if sizes.count(-1) > 1:
        raise NKIError("reshape", f"{what}: at most one size may be -1, got {sizes}")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known == 0 or total % known:
            raise NKIError("reshape", f"{what}: cannot infer -1 in {sizes} for {total} elements")
        sizes = tuple(total // known if s == -1 else s for s in sizes)
    if any(s < 1 for s in sizes) or math.prod(sizes) != total:
        raise NKIError("reshape", f"{what}: sizes {sizes} hold {math.prod(sizes)} elements, the dimension(s) "
                       f"{total}")
    return sizes
