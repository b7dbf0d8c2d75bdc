"""A mask's selection in a tile: the boolean array it stands for, or the box of a ragged edge tile.

A mask (``mask=`` of an access or an instruction) is a symbolic :class:`~.index_expr.Mask` over the
index expressions, or a boolean array. :func:`full_mask` lays it onto a tile's shape (``None`` when
it selects every element, so the unmasked fast paths stay unmasked); :func:`mask_box` recognises the
masks of ragged edge tiles (``i < n``) as a box of slices, read and written as a view. Below
:mod:`.indexing`, which applies them (and re-exports them: its importers find them there).
"""

from __future__ import annotations

import numpy as np

from .errors import NKIError
from .index_expr import Mask


def full_mask(mask, out_shape):
    """``None`` when ``mask`` selects everything, else a boolean array of ``out_shape``."""
    if mask is None:
        return None
    if isinstance(mask, Mask):
        if mask.all_true():
            return None
        m = np.asarray(mask)
    else:
        m = np.asarray(mask)
        if m.dtype != np.bool_:
            m = m.astype(bool)
    try:
        full = np.broadcast_to(m, out_shape)
    except ValueError:
        fitted = mask.fit(out_shape) if isinstance(mask, Mask) else None
        if fitted is not None:
            return full_mask(fitted, out_shape)
        raise NKIError(
            "mask shape", f"mask of shape {m.shape} does not broadcast to the tile shape {tuple(out_shape)}"
        ) from None
    # (a non-empty broadcast holds every element of what it repeats: a scalar or a column mask is
    # tested once, not once per element of the tile)
    if full.size == 0 or m.all():
        return None
    return full


_full_mask = full_mask  # used by language/isa


def mask_box(mask: Mask, out_shape):
    """The box of tile positions a symbolic mask selects, as slices per axis, or ``None``.

    Works when every term compares an expression walking a single axis forward
    (``ix < n``, ``iy >= k``) with a number -- the masks of ragged edge tiles.
    """
    if mask.array is not None or mask.all_true():
        return None
    rank = len(out_shape)
    try:
        if np.broadcast_shapes(mask.shape, tuple(out_shape)) != tuple(out_shape):
            return None
    except ValueError:
        return None  # laid onto the tile by full_mask
    lo, hi = [0] * rank, list(out_shape)
    for expr, op, bound in mask.terms:
        if expr.axis == -2 or len(expr.shape) > rank:
            return None
        if expr.axis == -1:  # constant: all or nothing
            if not op(expr.offset, bound):
                return [slice(0, 0)] * rank
            continue
        ax = expr.axis + rank - len(expr.shape)
        c, off = expr.coefs[expr.axis], expr.offset
        name = op.__name__
        # offset + c*i  (op)  bound, with c > 0
        if name in ("lt", "le"):
            limit = (bound - off) / c
            top = int(np.ceil(limit)) if name == "lt" else int(np.floor(limit)) + 1
            hi[ax] = min(hi[ax], max(top, 0))
        elif name in ("gt", "ge"):
            limit = (bound - off) / c
            bottom = int(np.floor(limit)) + 1 if name == "gt" else int(np.ceil(limit))
            lo[ax] = max(lo[ax], min(bottom, out_shape[ax]))
        else:
            return None
    return tuple(slice(a, max(a, b)) for a, b in zip(lo, hi))
