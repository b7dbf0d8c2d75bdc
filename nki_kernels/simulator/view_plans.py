"""``.ap`` plans: a loop's repeated views of the same numbers, resolved once.

A kernel's loop asks for the same ``tensor.ap(pattern, offset, dtype=...)`` at every
iteration. A plan remembers where the first such view landed relative to its root's memory,
keyed by every number that decides it, and makes the next one straight from the root's
memory (:func:`_planned_view`), without computing the layout again.
"""

from __future__ import annotations

import weakref

import numpy as np

from .layout import Layout, _root_tile
from .tensor_types import registered as _cls
from .views import _static_view

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
    if type(offset) is bool or getattr(t, "_layout", None) is not None:  # (True == 1: bools reach the check)
        return None
    if isinstance(t, _cls.Tile):
        if t.nb:
            return None
        root = _root_tile(t)
        data, root_data = t._data, root._data
        if t._thunk is not None or root._thunk is not None or not root_data.flags.writeable \
                or not data.flags.writeable:
            return None
        extra = root.pdim
    elif isinstance(t, _cls.HBMTensor):
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
    _cls.flush_pending()  # (the running program's deferred op, if any: what layout_of's root.own() does first)
    lay = Layout.__new__(Layout)
    lay.root, lay.dtype, lay.offset, lay.shape, lay.strides = root, plan[0], plan[1], plan[2], plan[3]
    lay.dynamic, lay.source = None, t
    return _static_view(lay, _planned_array(plan, ra, owner))
