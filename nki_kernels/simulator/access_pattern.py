"""``nl.NkiTensor``: every on-chip and HBM tensor is a view of a storage (access patterns).

The current ``nki.language`` reference (``NkiTensor``) and the "NKI Access
Patterns" deep dive describe a tensor as a storage plus an access pattern: an
element ``offset`` and ``[[step, num], ...]`` per dimension, a loop over the
*flattened* storage. That is exactly a NumPy strided view, so a view here is a
NumPy array made with ``as_strided`` over the storage of its root (the tile
allocated by ``nl.ndarray``, or the HBM tensor), with its element strides as the
pattern. Views share storage: what an ISA instruction or a DMA writes through one
is visible through every other.

Rules (an :class:`NKIError` naming the rule where one is broken):

* ``pattern`` entries are ``[step, num]`` with ``num >= 1``; every address the
  pattern reaches lies inside the storage -- checked where an instruction uses
  the view (making one reads nothing).
* SBUF / PSUM: the first entry walks the partitions, and its step must be the
  storage's number of free elements per partition (partition access is
  contiguous on NeuronCore v2-v4); the free pattern stays inside one partition.
* ``ap`` addresses the storage directly (the pattern of the view it is called on
  is replaced), ``offset`` adds to the view's storage offset (``None``: keep it);
  ``dtype`` reinterprets the storage (pattern and offset count elements of it).
* The view methods (``slice``, ``select``, ``permute``, ...) keep the partition
  dimension first on on-chip tensors, as each method's reference states.
* Dynamic views (``select`` with a tensor index, ``vector_select``, ``ap`` with
  ``scalar_offset`` / ``vector_offset``) read their index tensor when an
  instruction uses the view, not when the view is made; an index that leaves
  the storage is an error (``oob_mode.error``). One dynamic index per view.

The layers, from the bottom (each imports only those below it):

* :mod:`.layout`: ``Layout`` (root, dtype, offset, shape, strides), its checks, its NumPy
  strided array and addresses, and the root elements it covers (for the diagnostics);
* :mod:`.dynamic_addressing`: runtime offsets (scalar, vector, Tensor Indirection) read at use;
* :mod:`.tensor_types`: the concrete tensor classes, registered from above;
* :mod:`.views`: a tensor's layout (``layout_of``) and a layout's tensor (``materialize``);
* :mod:`.view_plans`: a loop's repeated ``.ap`` views, resolved once;
* :mod:`.nki_tensor`: ``NkiTensor``, the view methods (the base class of core's tensors);
* :mod:`.dynamic_views` (above :mod:`.core`): the dynamic view classes; importing it registers
  them and core's classes with :mod:`.tensor_types`.

This module gathers their public names (and imports :mod:`.dynamic_views`, so the classes are
registered wherever access patterns are used).
"""

from __future__ import annotations

# (the private names: what the DMA instructions, shadow mode -- it empties the caches -- and tests use)
from .dynamic_addressing import (
    addresses_now,
    indirect_group,
    resolve_now,
    vector_addresses,
)
from .dynamic_views import DynamicHBMTensor, DynamicTile
from .layout import (  # noqa: F401
    _ROOT_INDEX,
    _ROOT_INDEX_ELEMENTWISE,
    Layout,
    _placed_positions,
    _root_index,
    _storage_bytes,
    _storage_elems,
    addresses,
    check_layout,
    position_in_root,
    strided_array,
)
from .nki_tensor import NkiTensor
from .view_plans import _OWNER_ADDRESSES, _PLANS  # noqa: F401
from .views import _share_hbm, layout_of, materialize  # noqa: F401

__all__ = ["DynamicHBMTensor", "DynamicTile", "Layout", "NkiTensor", "addresses", "addresses_now", "check_layout",
           "indirect_group", "layout_of", "materialize", "position_in_root", "resolve_now", "strided_array",
           "vector_addresses"]
