"""DMA between HBM and on-chip memory, as the first generation's ``nl`` writes it: ``nl.load``,
``nl.store`` (computing a deferred tile straight into HBM when nothing else needs it) and
``nl.load_transpose2d``; inside a vectorised batch of programs they hand over to the batched forms
(:mod:`.vectorize`).

Below the instructions (DMA, registers), the LNC collectives and the ``nl`` front end, which store
into HBM through :func:`store`.
"""

from __future__ import annotations

import numpy as np

from . import diagnostics as _diag
from . import dtypes as dt
from . import recording as _prof
from . import vectorize as _vec
from .core import Access, HBMTensor, Tile, current_or_none, sbuf
from .core import fill_sentinel as _fill_sentinel
from .errors import NKIError
from .instructions.target import oob_mode as _oob
from .indexing import _full_mask
from .tile_ops import _compute_into, _dma_values, _loaded_tile
from .values import _fit


def _as_access(x, name, op):
    if isinstance(x, HBMTensor):
        return x[...]
    if isinstance(x, Access):
        return x
    if isinstance(x, Tile):
        raise NKIError("memory", f"{op}: {name} is a {x.buffer.name} tile; {op} moves data between HBM "
                       "and SBUF, so it needs an HBM tensor here")
    raise NKIError("operand type", f"{op}: {name} must be an HBM tensor, got {type(x).__name__}")


def _oob_mode(mode, op):
    """``mode=`` of ``nl.load`` / ``nl.store``: not on their pages (``**kwargs``), but the Neuron team's
    contributed kernels pass ``mode=oob_mode.error`` (nki-samples' blockwise_mm), what a DMA here does
    anyway: an out-of-bounds index is an error. Any other mode is refused, naming the instruction that
    documents skipping."""
    if mode is None or mode is _oob.error:
        return
    raise NKIError("mode", f"{op}: mode={mode!r}; only oob_mode.error (the default: an out-of-bounds index is an "
                   "error) is known for nl.load / nl.store; nisa.dma_copy(..., oob_mode=oob_mode.skip) skips "
                   "out-of-bounds rows of an indirect DMA")


def load(src, dtype=None, *, mask=None, mode=None):
    """DMA an HBM region into a new SBUF tile (``nl.load``); masked-off elements are not read.
    ``mode``: ``oob_mode.error`` only (:func:`_oob_mode`)."""
    _oob_mode(mode, "nl.load")
    acc = _as_access(src, "src", "nl.load")
    mask = acc.local_mask(mask)
    prog = current_or_none()
    if prog is not None and prog.nb:
        return _vec.load_batched(prog, acc, mask, dtype)
    tile = _loaded_tile(acc.tensor, acc.index.read(acc.tensor.data, mask, what=acc.tensor.name), dtype)
    if mask is not None:
        # the DMA moves only the selected elements: assigned into a tile, the rest keep their values
        tile._written = _full_mask(mask, tile.shape)
    _prof.dma(acc.tensor, tile.data, "read", acc, mask)
    return tile


def store(dst, value, *, mask=None, mode=None):
    """DMA an SBUF/PSUM tile (or scalar) into an HBM region, rounding to its dtype (``nl.store``).
    ``mode``: ``oob_mode.error`` only (:func:`_oob_mode`)."""
    _oob_mode(mode, "nl.store")
    if isinstance(dst, Tile):
        raise NKIError("store destination", f"nl.store destination is a {dst.buffer.name} tile of shape "
                       f"{dst.shape}; stores write HBM tensors only (assign tiles with t[...] = value)")
    acc = _as_access(dst, "dst", "nl.store")
    if getattr(acc.tensor, "constant", False):
        raise NKIError("store destination", f"nl.store into {acc.tensor.name} {list(acc.tensor.shape)}: a shared "
                       "constant (nl.shared_constant, nl.shared_identity_matrix) holds compile-time data and is "
                       "read-only; store into an nl.ndarray output")
    mask = acc.local_mask(mask)
    if isinstance(value, (Access, HBMTensor)):
        raise NKIError("store value", "nl.store value is an HBM tensor; load it into SBUF first")
    prog = current_or_none()
    if prog is not None and prog.nb:
        return _vec.store_batched(prog, acc, value, mask)
    if isinstance(value, Tile) and value._thunk is not None and _store_deferred(acc, value, mask):
        return
    t = acc.tensor
    vals = _fit(_dma_values(value, t.dtype, "value"), acc.shape, "nl.store", f"{acc.tensor.name}{list(acc.shape)}")
    if t._borrowers:
        t.materialize_borrowers()
    _prof.dma(t, np.broadcast_to(vals, acc.shape), "write", acc, mask)
    acc.index.write(t.data, dt.cast(vals, t.dtype), mask, what=t.name)


def _store_deferred(acc, value: Tile, mask) -> bool:
    """Compute a deferred tile straight into its HBM destination when nothing else is needed."""
    t = acc.tensor
    idx = acc.index
    if (value._thunk[0] is _fill_sentinel or value.dtype != t.dtype or value.shape != acc.shape or not idx.is_view
            or _full_mask(mask, acc.shape) is not None or not t.data.flags.writeable):
        return False
    view = idx.view(t.data)
    if (idx.basic is None and idx._overlaps(t.data)) or _diag.wants_old_values(t, acc, mask):
        return False
    _compute_into(t, value, view)
    _prof.dma(t, view, "write", acc, mask, written=True)
    return True


def load_transpose2d(src, dtype=None, *, mask=None):
    """Load a 2-D HBM region transposed: its free axis becomes the partition axis."""
    acc = _as_access(src, "src", "nl.load_transpose2d")
    mask = acc.local_mask(mask)
    if len(acc.shape) != 2:
        raise NKIError("load_transpose2d", f"needs a 2-D region, got shape {acc.shape}")
    prog = current_or_none()
    if prog is not None and prog.nb:
        data = np.swapaxes(_vec.load_batched(prog, acc, mask, None).data, -1, -2)
        return Tile(np.ascontiguousarray(dt.cast(data, dt.as_dtype(dtype) or data.dtype)), sbuf)
    data = acc.index.read(acc.tensor.data, mask, what=acc.tensor.name).T
    d = dt.as_dtype(dtype) or data.dtype
    _prof.dma(acc.tensor, data, "read", acc, mask)
    return Tile(np.ascontiguousarray(dt.cast(data, d)), sbuf)
