"""Views: a tensor's layout (:func:`layout_of`), and the tensor object of a layout (:func:`materialize`).

Every NkiTensor view method goes through both: the layout of the tensor it is called on, a new
layout, and the tile or HBM tensor sharing the storage that it describes (a dynamic view class
when its offset is read at use, see :mod:`.dynamic_views`). The concrete classes come from
:mod:`.tensor_types` (this module sits below them).
"""

from __future__ import annotations

import numpy as np

from .context import _tls
from . import diagnostics as _diag
from .dynamic_addressing import _ready, _refuse_unusable, _scalar_shift
from .errors import NKIError, NotBatchable
from .layout import (
    Layout,
    _Dynamic,
    _geometry,
    _label,
    _root_index,
    _root_tile,
    _rows,
    check_layout,
    strided_array,
)
from .tensor_types import registered as _cls


def layout_of(t) -> Layout:
    """The layout of a tile, HBM tensor or HBM access (its position in its root's storage)."""
    if getattr(t, "nb", 0):  # a tile with batch axes: views run one program at a time
        raise NotBatchable("NkiTensor views of a batch of programs' tiles")
    lay = getattr(t, "_layout", None)
    if lay is not None:  # a dynamic view keeps its layout
        _refuse_unusable(lay)
        return lay
    if isinstance(t, _cls.Tile):
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
    elif isinstance(t, _cls.HBMTensor):
        root = getattr(t, "_storage_root", t)
        arr = t.data
    elif isinstance(t, _cls.Access):
        if not t.index.is_view or t.within is not None:
            raise NKIError("view of a gather", f"{t._label()} selects its elements by index arrays; an access "
                           "pattern (and every NkiTensor view) needs a strided region (ints and slices)")
        root = getattr(t.tensor, "_storage_root", t.tensor)
        arr = t.index.view(t.tensor.data)
    else:
        raise NKIError("operand type", f"expected an NkiTensor (tile or HBM tensor), got {type(t).__name__}")
    return _geometry(root, arr, t)


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
    tile_cls, hbm_cls = _cls.DynamicTile, _cls.DynamicHBMTensor
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
    if lay.on_chip:
        view = _cls.Tile(arr, lay.root.buffer, 0, parent=lay.source)
        view._review = lambda _data, lay=lay: strided_array(lay)  # (after the root's copy-on-write copy)
        if lay.root._diag is not None or _tls.loops:
            _diag.on_view(lay.root, view, _root_index(lay))
        return view
    view = _cls.HBMTensor(arr, lay.root.buffer, lay.root.name)
    _share_hbm(view, lay.root)
    return view


def _share_hbm(view, root) -> None:
    view._borrowers = root._borrowers  # copy-on-write tiles of the storage see writes through the view
    view.is_output = root.is_output
    view._storage_root = root
