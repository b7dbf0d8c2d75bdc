"""Operands and results of the functions on tiles: the values an engine reads, the dtype and tile
of a result, the operand checks, and the tile a DMA from HBM makes.

Above the data model (:mod:`.core`), below the instructions, the batched grid and the ``nl``
front end, which all build on these.
"""

from __future__ import annotations

import numpy as np

from . import diagnostics as _diag
from . import dtypes as dt
from . import recording as _prof
from .core import PMAX, Tile, current, current_or_none, sbuf
from .errors import NKIError
from .index_expr import Mask
from .indexing import _full_mask, mask_box
from .values import _host_values


class tile_size:
    """Hardware tile limits (``nl.tile_size``)."""

    pmax = PMAX
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_max_size = 16 * 1024 // 4 // 1  # fp32 elements per partition over all 8 banks
    total_available_sbuf_size = 192 * 1024


def _values(x, name: str):
    """The array an engine reads for operand ``x`` (fp32 for low-precision tiles)."""
    if isinstance(x, Tile):
        _diag.read(x)
        return dt.compute_view(x.data)
    return _host_values(x, name)


def _dma_values(x, dtype, name: str):
    """The values a DMA moves from operand ``x`` into memory of ``dtype``: a tile of that dtype as it is
    (a DMA between equal dtypes copies bytes; through fp32 an fp8 NaN encoding, or the bytes of an fp32
    scale packed into fp8 elements with ``.view``, as nki-samples' contributed rmsnorm_quant stores it,
    would come back canonicalised), else :func:`_values`."""
    if isinstance(x, Tile) and x.dtype == dtype:
        _diag.read(x)
        return x.data
    return _values(x, name)


def _dtype_of(x):
    return x.dtype if isinstance(x, Tile) else dt.scalar_dtype(x)


def _nb() -> int:
    """Batch axes of the running program (0 unless a vectorised batch of programs runs)."""
    prog = current_or_none()
    return prog.nb if prog is not None else 0


def _result(values, dtype, mask=None, buffer=sbuf, engine="Vector") -> Tile:
    """Write computed ``values`` into a new tile of ``dtype``. Under ``mask=`` the masked-off elements
    are zero in the new tile and are left untouched when it is assigned into a destination."""
    if mask is None and type(values) is np.ndarray and values.dtype == dtype:
        # (the common case, a product or a copy of the result's dtype: what the general path below does
        # for it, without the mask and cast layers)
        out = values if values.base is None and values.flags.writeable else values.copy()
        _prof.instruction(engine, out)
        return Tile(out, buffer)
    values = np.asarray(values)
    shape = values.shape[_nb():] if mask is not None else values.shape
    box = mask_box(mask, shape) if isinstance(mask, Mask) else None
    m = _full_mask(mask, shape) if mask is not None and box is None else None
    out = dt.cast(values, dtype)
    wrote = None
    if box is not None:
        kept = np.zeros(out.shape, out.dtype)
        box = (Ellipsis,) + tuple(box)
        kept[box] = out[box]
        out = kept
        wrote = np.zeros(out.shape, bool)
        wrote[box] = True
    elif m is not None:
        out = np.where(m, out, np.zeros((), out.dtype))
        wrote = np.broadcast_to(m, out.shape)
    elif out.base is not None or not out.flags.writeable:
        out = out.copy()  # a result must own its memory, never alias an operand
    _prof.instruction(engine, out)
    tile = Tile(out, buffer)
    tile._written = wrote  # assigning the result writes only these elements (see Tile.__setitem__)
    return tile


def _out_dtype(dtype, *operands):
    if dtype is None and len(operands) == 2 and type(operands[0]) is Tile and type(operands[1]) is Tile:
        a, b = operands[0].dtype, operands[1].dtype
        if a == b:
            return a  # (dt.promote of one dtype)
    d = dt.as_dtype(dtype)
    return d if d is not None else dt.promote(*(_dtype_of(o) for o in operands))


def _broadcast_check(name, *operands):
    # Size-1 dims broadcast on free *and* partition axes: the nki.language.add reference shows
    # "[1, 512] is broadcasted to [128, 512]" (partition broadcast, slower on hardware but legal).
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.add.html
    shapes = [np.shape(o.data) if isinstance(o, Tile) else np.shape(o) for o in operands]
    if shapes.count(shapes[0]) == len(shapes):  # (all equal: the common case)
        return shapes[0]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise NKIError("operand shapes", f"nl.{name}: operand shapes {shapes} do not broadcast "
                       "(free dims must match or be 1; partition dims must match)") from None


def _need_tile(x, name, op):
    if not isinstance(x, Tile):
        _values(x, name)  # raises the HBM / type error
        raise NKIError("operand type", f"{op}: operand {name} must be a tile, got {type(x).__name__}")
    _diag.read(x)
    return x


def _axes(x, axis, name):
    nd = x.ndim if isinstance(x, Tile) else np.ndim(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) + nd if int(a) < 0 else int(a) for a in axes)
    pdim = x.pdim if isinstance(x, Tile) else 0
    for a in axes:
        if a == pdim:
            raise NKIError("partition reduction", f"nl.{name}: axis {a} is the partition dimension of a tile "
                           f"of shape {getattr(x, 'shape', np.shape(x))}; reductions run over free axes only "
                           "(use a matmul against ones, a transpose, or nisa.tensor_partition_reduce)")
        if not 0 <= a < nd:
            raise NKIError("axis", f"nl.{name}: axis {a} out of range for a tile of rank {nd}")
    return axes


def _loaded_tile(tensor, data, dtype) -> Tile:
    """A new SBUF tile holding ``data`` read from HBM ``tensor``, cast to ``dtype`` when given.

    A view of HBM stays zero-copy: the tile views HBM until either side is written
    (copy-on-write through ``tensor``'s borrowers)."""
    d = dt.as_dtype(dtype) if dtype is not None else None
    if d is not None and d != data.dtype:
        data = dt.cast(data, d)
    elif data.base is not None:
        data = data.view()
        data.flags.writeable = False
    tile = Tile(data, sbuf)
    if not data.flags.writeable:
        tensor._borrowers.add(tile)
    return tile


def _compute_into(t, value: Tile, view) -> None:
    """Compute deferred tile ``value`` straight into ``view`` of HBM tensor ``t``. The tile then
    keeps viewing what it wrote (copy-on-write if ``t`` is written again)."""
    current().pending = None  # computed right here; other borrowers of t get copies first
    if t._borrowers:
        t.materialize_borrowers()
    value.force(out=view)
    ro = view.view()
    ro.flags.writeable = False
    value._data = ro
    t._borrowers.add(value)
