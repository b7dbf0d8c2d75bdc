"""Which elements of each PSUM tile hold a value: the record behind ``nc_matmul``'s ``accumulate=None``
("first write overwrites, later writes accumulate", as the compiler infers it).

Every instruction's write into a PSUM tile marks what it wrote (:func:`mark`, called by the one
write path, :func:`.core.write`); :func:`psum_state` and :func:`_view_written` answer which
elements of a tile or of a view of it were written. Below :mod:`.core`: it knows tiles by their
attributes (``_parent``, ``_raw()``, ``shape``) only.
"""

from __future__ import annotations

import weakref

import numpy as np

from .indexing import Index
from .layout import position_in_root

# Per PSUM tile (by id: Tile overloads ==): [weakref, which elements hold a value, all of them do:
# True, False (not known), or None (not all, and nothing marked since that was found), the views
# found whole (see _region_key)], for nc_matmul's accumulate=None inference. Elements are only ever
# marked (a write never unwrites), so "all" -- of the tile or of a view -- stays true once found.
# Entries go when the tile does.
_psum_written = {}
_WHOLE_VIEWS_MAX = 256  # views remembered per tile (a loop's views of one PSUM tile are a few)


def _written_mask(root, create=False):
    ent = _psum_written.get(id(root))
    if ent is not None and ent[0]() is root:
        return ent[1]
    if not create:
        return None
    key = id(root)
    mask = np.zeros(root.shape, dtype=bool)
    _psum_written[key] = [weakref.ref(root, lambda _, k=key: _psum_written.pop(k, None)), mask, False, set()]
    return mask


def _all_written(root) -> bool:
    """Whether every element of PSUM tile ``root`` holds a value (the mask's all() pass runs once per
    change of the mask until it does, then never again)."""
    ent = _psum_written.get(id(root))
    if ent is None or ent[0]() is not root:
        return False
    if ent[2] is False:
        ent[2] = True if ent[1].all() else None
    return bool(ent[2])


def _region_key(root, dst):
    """A view ``dst`` of PSUM tile ``root`` by its place in the root: ``(offset, shape, strides)`` in
    the root's elements (``None`` when it is not a strided view of it)."""
    raw = dst._raw()
    pos = position_in_root(raw, root)
    return None if pos is None else (pos[0], raw.shape, pos[1])


def _index_of(root, dst):
    """The Index that made ``dst`` as ``root[...]`` (``None`` for any other view): the same Index
    object selects the same elements of the root every time (resolved Indexes are shared by the
    loop iterations that slice alike, and never changed)."""
    if dst._parent is not root:
        return None
    idx = getattr(dst._review, "__self__", None)
    return idx if type(idx) is Index else None


def _view_written(root, dst) -> bool:
    """Whether every element of ``dst``, a view of PSUM tile ``root``, holds a value. A view found
    whole is remembered by its place, so a loop accumulating into ``psum[0:128, 0:T]`` reads the
    mask once, not at every matmul."""
    ent = _psum_written.get(id(root))
    if ent is None or ent[0]() is not root:
        return False
    if ent[2]:
        return True
    idx = _index_of(root, dst)
    if idx is not None and idx in ent[3]:
        return True
    key = _region_key(root, dst)
    if key is None:
        return bool(psum_state(dst).all())
    if key in ent[3]:
        return True
    if not np.ndarray(key[1], dtype=bool, buffer=ent[1], offset=key[0], strides=key[2]).all():
        return False
    if len(ent[3]) >= _WHOLE_VIEWS_MAX:
        ent[3].clear()
    ent[3].add(key)
    if idx is not None:
        ent[3].add(idx)
    return True


def root_of(tile):
    """The allocated tile a view belongs to."""
    while tile._parent is not None:
        tile = tile._parent
    return tile


def _offset_in_root(view, root):
    """Element offset of ``view``'s first element in ``root`` (``None`` if not a view of it)."""
    pos = position_in_root(view._raw(), root)
    return None if pos is None else pos[0]


def _region_mask(mask, root, dst):
    """The part of a root-shaped bool ``mask`` that the view ``dst`` covers (``None`` if unknown)."""
    if dst is root:
        return mask
    raw = dst._raw()
    pos = position_in_root(raw, root)  # (a placed root's partitions are not adjacent in memory)
    if pos is None:
        return None
    # (a bool mask: element strides are byte strides; ndarray() checks the view stays inside the mask)
    return np.ndarray(raw.shape, dtype=bool, buffer=mask, offset=pos[0], strides=pos[1])


def psum_state(dst):
    """Bool array in ``dst``'s shape: which of its PSUM elements already hold a value."""
    root = root_of(dst)
    written = _written_mask(root)
    if written is None:
        return np.zeros(dst.shape, dtype=bool)
    region = _region_mask(written, root, dst)
    return np.broadcast_to(bool(written.any()), dst.shape) if region is None else region


def mark(root, dst, keep) -> None:
    """An instruction wrote ``dst`` (PSUM tile ``root`` or a view of it), where ``keep`` (a bool array
    in ``dst``'s shape, or None: everywhere): those elements hold a value from now on."""
    ent = _psum_written.get(id(root))
    if ent is not None and ent[0]() is root and (ent[2] or (keep is None and dst is not root and ent[3] and (
            _index_of(root, dst) in ent[3] or _region_key(root, dst) in ent[3]))):
        return  # (every element written holds a value already)
    written = _written_mask(root, create=True)
    region = _region_mask(written, root, dst)
    if region is None or (region is written and keep is None):
        written[...] = True
        _psum_written[id(root)][2] = True
    else:
        region[...] = True if keep is None else (region | np.broadcast_to(keep, region.shape))
        _psum_written[id(root)][2] = False  # (not all before: perhaps now)


def mark_all(root) -> None:
    """Every element of PSUM tile ``root`` holds a value (a batch of programs wrote it whole)."""
    _written_mask(root, create=True)[...] = True
    _psum_written[id(root)][2] = True


# Per PSUM tile (by id), the elements whose value a non-matmul instruction wrote last (memset,
# tensor_copy ...): [weakref, bool mask]. Kept only for tiles such an instruction wrote; a matmul's
# overwrite clears its region. On NeuronCore-v2/v3 a matmul accumulating onto those elements "is not
# supported and is undefined behavior on hardware" (nki.isa.nc_matmul page): see initialized_by_other.
_by_other = {}
MATMUL_OPS = frozenset({"nc_matmul", "nc_matmul_mx", "nc_transpose"})


def mark_writer(root, dst, keep, op) -> None:
    """Instruction ``op`` wrote ``dst`` (of PSUM tile ``root``) where ``keep`` says (None: everywhere):
    a matmul's write clears those elements from the non-matmul record, any other write adds them."""
    ent = _by_other.get(id(root))
    if ent is not None and ent[0]() is not root:
        ent = None
    matmul = op in MATMUL_OPS
    if ent is None:
        if matmul:
            return  # (no non-matmul value in this tile: nothing to clear)
        key = id(root)
        ent = _by_other[key] = [weakref.ref(root, lambda _, k=key: _by_other.pop(k, None)),
                                np.zeros(root.shape, dtype=bool)]
    region = _region_mask(ent[1], root, dst)
    if region is None:
        region = ent[1]  # (a view not placed in its root: the whole tile, conservatively)
    sel = np.True_ if keep is None else np.broadcast_to(keep, region.shape)
    if matmul:
        region[...] = region & ~sel
    else:
        region[...] = region | sel


def initialized_by_other(dst) -> bool:
    """Whether some element of ``dst`` (a PSUM tile or view) holds a value a non-matmul instruction wrote."""
    root = root_of(dst)
    ent = _by_other.get(id(root))
    if ent is None or ent[0]() is not root:
        return False
    region = _region_mask(ent[1], root, dst)
    return bool((ent[1] if region is None else region).any())
