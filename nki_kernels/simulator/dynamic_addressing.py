"""Dynamic views: their runtime offsets read when an instruction uses them.

A :class:`~.layout.Layout` with a ``dynamic`` index addresses its storage through values read
at use, not when the view is made: a scalar offset (``select`` with a tensor index,
``ap(scalar_offset=...)``), one offset per partition (``vector_select``,
``ap(vector_offset=...)``; HBM only), or Tensor Indirection (``NkiTensor.indirect``,
NeuronCore-v4: a gather as an input, a scatter as an output). :func:`resolve_now` gives the
values a dynamic view addresses now, :func:`addresses_now` their storage addresses.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from .context import _tls
from .errors import NKIError
from .layout import (
    Layout,
    _free_elems,
    _label,
    _storage_bytes,
    _storage_elems,
    addresses,
    check_layout,
    strided_array,
)
from .scalar_values import NkiScalar
from .tensor_types import registered as _cls


def _index_value(index, what) -> np.ndarray:
    """Integer values of a dynamic index: an SBUF tensor, a VirtualRegister (or a Python int), read now."""
    Tile = _cls.Tile
    if isinstance(index, NkiScalar):  # (NKI 0.7.0)
        return np.asarray(index.value(what), dtype=np.int64)
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

    return 32 if _tls.site.op == "nc_matmul" else 16


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
        addr = addresses(lay.replace(strides=(0,) + lay.strides[1:]))  # (a fresh array: added to in place)
        np.add(addr, (vals * lay.dynamic.stride).reshape((-1,) + (1,) * (len(lay.shape) - 1)), out=addr)
    n = _storage_elems(lay.root, lay.dtype)
    return addr, (addr >= 0) & (addr < n)


def _vector_in_bounds(lay: Layout, what):
    """The partition offsets of a vector-offset view when every address lies inside its storage, told
    from each partition's lowest and highest address (its offset plus the extent of the static pattern)
    instead of a test of every element; ``None`` otherwise or where this cannot tell (the caller then
    tests every element, and reports)."""
    if lay.dynamic is None or lay.dynamic.kind != "vector" or not lay.shape or any(m < 1 for m in lay.shape):
        return None
    vals = _index_value(lay.dynamic.index, what).reshape(-1)
    if vals.size != lay.shape[0]:
        return None
    lo = lay.offset + sum(min(0, (m - 1) * s) for m, s in zip(lay.shape[1:], lay.strides[1:]))
    hi = lay.offset + sum(max(0, (m - 1) * s) for m, s in zip(lay.shape[1:], lay.strides[1:]))
    starts = vals * lay.dynamic.stride
    n = _storage_elems(lay.root, lay.dtype)
    return vals if int(starts.min()) + lo >= 0 and int(starts.max()) + hi < n else None


def vector_addresses(lay: Layout, what) -> np.ndarray:
    """Addresses of a vector-offset view: partition ``p`` starts ``index[p] * stride`` into the storage."""
    vals = _vector_in_bounds(lay, what)
    if vals is not None:
        addr = addresses(lay.replace(strides=(0,) + lay.strides[1:]))
        np.add(addr, (vals * lay.dynamic.stride).reshape((-1,) + (1,) * (len(lay.shape) - 1)), out=addr)
        return addr
    addr, ok = addresses_now(lay, what)
    if not ok.all():
        p = int(np.argwhere(~ok)[0][0])
        raise NKIError("out-of-bounds access", f"{what}: the vector offset of partition {p} reaches element "
                       f"{int(addr[~ok].flat[0])} of {_label(lay.root)} {lay.root.shape}, which holds "
                       f"{_storage_elems(lay.root, lay.dtype)} {lay.dtype} elements (oob_mode.error)")
    return addr



def _ready(index) -> bool:
    """Whether a dynamic index can be read now (its tile holds values)."""
    return not hasattr(index, "_diag") or index._diag is None or index._diag.written is None
