"""``nl.NkiTensor``: the view methods shared by on-chip tiles, HBM tensors and HBM accesses.

Each method takes the layout of the tensor it is called on (:func:`~.views.layout_of`), makes
the new layout and returns the tensor object sharing the storage that it describes
(:func:`~.views.materialize`); see :mod:`.access_pattern` for the rules. ``Tile``,
``HBMTensor`` and ``Access`` (:mod:`.core`) subclass :class:`NkiTensor`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import dtypes as dt
from .errors import NKIError
from .instructions import target as _target
from .layout import Layout, _Dynamic, _free_elems, _label
from .nki_object import NKIObject
from .scalar_values import NkiScalar
from .tensor_types import registered as _cls
from .view_plans import _plan, _planned_view
from .views import layout_of, materialize


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
                if isinstance(scalar_offset, NkiScalar) and scalar_offset.dtype == np.int64 and \
                        getattr(getattr(self, "buffer", None), "name", "") in ("sbuf", "psum"):
                    # "on an SBUF or PSUM operand the offset must be nl.int32" (nisa.scalar_load, NKI 0.7.0)
                    raise NKIError("dynamic offset", f"{what}: an nl.int64 NkiScalar cannot be the scalar_offset of "
                                   "an SBUF or PSUM access pattern (on-chip buffers are megabytes; a 64-bit offset is "
                                   "rejected rather than silently narrowed); use an nl.int32 scalar")
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
        if isinstance(self, _cls.HBMTensor) and not getattr(self, "_storage_root", self).data.flags.c_contiguous:
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
        what = "NkiTensor.indirect"
        lay = layout_of(self)
        if not lay.on_chip:
            raise NKIError("indirect", f"{what}: Tensor Indirection views SBUF / PSUM tensors; {_label(lay.root)} "
                           "is in HBM (use .ap(vector_offset=...) for an indirect DMA)")
        _no_dynamic(lay, what)
        _target.require("NkiTensor.indirect (Tensor Indirection)", _target.nc_version.gen4)
        if not isinstance(index, _cls.Tile) or index.buffer.name != "sbuf" or len(index.shape) != 2:
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
    shape = _infer(tuple(int(s) for s in shape), t.data.size, what)
    try:
        data = np.reshape(t.data, shape, copy=False)
    except ValueError:
        raise NKIError("reshape", f"{what}: {_label(t)} of shape {t.shape} (a strided array) cannot be reshaped "
                       f"into {shape} without a copy") from None
    out = _cls.HBMTensor(data, t.buffer, t.name)
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
