"""The deferred values a tile may hold besides an element-wise op's result (see :class:`.core.Tile`).

A tile's ``_thunk`` is ``(fn, args, shape, dtype)``, computed on the first read. Besides the
element-wise ops of the language, two kinds of value wait that way:

* :func:`fill_sentinel`: the NaN (sentinel) fill of never-written on-chip memory, skipped where an
  instruction or an assignment writes the whole tile (or a whole block) first;
* :class:`OutOfBoundsRead`: a view reaching outside its tile, whose bounds error waits for a read
  that ``mask=`` does not guard.

Callables identified by ``thunk[0] is fill_sentinel`` / ``type(thunk[0]) is OutOfBoundsRead`` on
the write paths; :mod:`.core` re-exports them.
"""

from __future__ import annotations

import numpy as np

from .dtypes import sentinel


def fill_sentinel(data, written=(), pdim=0, out=None):
    """The deferred fill of never-written on-chip memory (see :func:`.core.uninitialised_tile`): ``data``
    filled with the sentinel, except the blocks in ``written`` (block indices of a block-dimension
    tile written whole already); copied into ``out`` when the tile is computed straight into a
    destination."""
    fill = sentinel(data.dtype)
    if written:
        for b in np.ndindex(data.shape[:pdim]):
            if b not in written:
                data[b] = fill
    else:
        data[...] = fill
    if out is None:
        return data
    out[...] = data
    return out


class OutOfBoundsRead:
    """The deferred values of a tile view that reaches outside its tile. A mask is written over the
    same index variables as the operands it guards, and Python builds the operand (``t[i_p, j * F +
    i_f]``) before the instruction's ``mask=``, so the bounds error waits for the read: an
    instruction whose mask hides every out-of-bounds element reads ``values`` (zero there), any
    other read raises ``error``."""

    __slots__ = ("error", "values", "inside", "_tile")

    def __init__(self, error, values, inside):
        self.error = error
        self.values = values  # the view's values, zero where outside the tile
        self.inside = inside  # bool, the view's shape: elements inside the tile
        self._tile = None

    def __call__(self, *args, out=None):
        tile = self._tile() if self._tile is not None else None
        if tile is not None and tile._thunk is None:  # (force() cleared it: every later read raises too)
            tile._thunk = (self, (), self.values.shape, self.values.dtype)
        raise self.error
