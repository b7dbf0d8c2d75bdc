"""Values of operands and destinations, below the data model: fitting a value to a destination's
shape (tiles broadcast with their partition axes aligned), reading a value that is not an on-chip
tile, and the zero-stride broadcast view of a tile.

``core`` (tile assignment, ``Tile.broadcast_to``) and every layer above use these; they know tiles
only by their attributes (``data``, ``nb``, ``buffer``, ``_diag``) and are given the class to build.
"""

from __future__ import annotations

import math

import numpy as np

from .context import _tls
from . import diagnostics as _diag
from .nki_tensor import NkiTensor
from .errors import NKIError


def _partition_first(vals, ndim, nb=0):
    """A lower-rank tile's values padded with trailing size-1 axes up to ``ndim``: tiles broadcast
    with their partition axes aligned (a ``[P]`` vector is ``[P, 1]``), never NumPy's right-aligned
    way, which would spread a per-partition vector along the free axis when ``P`` equals it."""
    vshape = np.shape(vals)
    if len(vshape) - nb >= ndim or len(vshape) == nb:
        return vals
    return np.reshape(vals, vshape + (1,) * (ndim - len(vshape) + nb))


def _fit(vals, shape, op, dst):
    """``vals`` shaped for a destination of ``shape``: equal up to size-1 dims, or broadcastable
    with partition axes aligned (see :func:`_partition_first`)."""
    vshape = np.shape(vals)
    if vshape == tuple(shape) or not vshape:
        return vals
    if 0 < len(vshape) < len(shape) and vshape[0] == shape[0]:
        vals = _partition_first(vals, len(shape))
        vshape = np.shape(vals)
    if [d for d in vshape if d != 1] == [d for d in shape if d != 1]:
        return np.reshape(vals, shape)
    try:
        if np.broadcast_shapes(vshape, shape) == tuple(shape):
            return vals
    except ValueError:
        pass
    raise NKIError("shape mismatch", f"{op}: a value of shape {vshape} does not fit the destination {dst} "
                   f"of shape {tuple(shape)}")


def _host_values(x, name: str):
    """The array an engine reads for operand ``x`` that is not an on-chip tile (tiles are read by
    :func:`.tile_ops._values`): a scalar or NumPy array as it is; an HBM tensor or region is an error."""
    if isinstance(x, (bool, int, float, np.generic, np.ndarray)):
        return x
    if isinstance(x, NkiTensor):  # (an HBM tensor or an access of one: core.HBMTensor / core.Access)
        t = getattr(x, "tensor", x)
        raise NKIError("compute on HBM", f"operand {name} ({t.name}, shape {x.shape}) is in HBM; "
                       "load it into SBUF with nl.load first")
    raise NKIError("operand type", f"operand {name} of type {type(x).__name__} is not a tile or scalar")


def _broadcast_view(x, shape, tile_cls):
    """Tile ``x`` broadcast to ``shape`` (size-1 dims repeat; ``nl.broadcast_to``): a ``tile_cls``
    viewing ``x``'s memory with zero strides, not a tile of its own. Reads ``x`` (its read hook)."""
    _diag.read(x)
    shape = tuple(int(s) for s in shape)
    try:
        data = np.broadcast_to(_partition_first(x.data, len(shape), x.nb), x.data.shape[:x.nb] + shape)
    except ValueError:
        raise NKIError("broadcast", f"cannot broadcast a tile of shape {x.shape} to {shape} "
                       "(only size-1 dims broadcast)") from None
    return tile_cls(data, x.buffer, parent=x)


def per_partition(shape) -> int:
    """Elements per partition of a tile shape (partition axis first)."""
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def fit_dst(dst, values, op, what="result"):
    """``values`` in ``dst``'s shape: equal shapes, or the same partition size and elements per partition.
    In a batch of programs, values with the batch's leading axes keep them."""
    vshape = values.shape if type(values) is np.ndarray else tuple(np.shape(values))
    dshape = tuple(dst.shape)
    if vshape == dshape:
        return values
    nb = dst.nb
    if nb and len(vshape) > nb and vshape[:nb] == _tls.program.bshape:
        inner = vshape[nb:]
        if inner == dshape:
            return values
        if inner and dshape and inner[0] == dshape[0] and per_partition(inner) == per_partition(dshape):
            return np.reshape(values, vshape[:nb] + dshape)
        vshape = inner
    if vshape and dshape and vshape[0] == dshape[0] and per_partition(vshape) == per_partition(dshape):
        return np.reshape(values, dshape)
    raise NKIError("dst shape", f"nisa.{op}: dst has shape {dshape} but the {what} has shape {vshape}; dst "
                   "needs the same partition size and the same number of elements per partition")
