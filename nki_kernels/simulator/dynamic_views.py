"""Dynamic views: the tile and HBM tensor classes of a view whose offsets are read at use.

A view made with a runtime index (``select`` with a tensor index, ``vector_select``, ``ap``
with ``scalar_offset`` / ``vector_offset``, ``indirect``) is one of these: its ``data`` reads
the index now (:func:`~.dynamic_addressing.resolve_now`), and an instruction's ``dst=`` write
goes through the offsets read now (a scatter for Tensor Indirection). They subclass core's
``Tile`` and ``HBMTensor``, so this module sits above :mod:`.core`; importing it registers them
and core's classes with the layer below (:mod:`.tensor_types`), which makes views.
"""

from __future__ import annotations

import numpy as np

from .core import Access, HBMTensor, Tile, flush_pending
from .dynamic_addressing import _indirect_scatter, resolve_now, vector_addresses
from .indexing import Index
from .layout import _label, _root_tile, _storage_bytes, _storage_elems
from .tensor_types import register
from .views import _share_hbm


class DynamicTile(Tile):
    """An on-chip view whose offset is read from an SBUF tensor each time it is used."""

    __slots__ = ("_layout",)

    @property
    def data(self):
        """The addressed elements at the current value of the dynamic offset."""
        return resolve_now(self._layout, f"dynamic view of {_label(self._layout.root)}")

    @data.setter
    def data(self, value):
        self._data = value

    def _raw(self):
        return self.data

    def write_whole(self, values, add=False):
        """An instruction's ``dst=`` write, through the offsets read now (a scatter for an
        indirect view)."""
        lay = self._layout
        what = f"dynamic view of {_label(lay.root)}"
        flush_pending()
        _root_tile(self).own()
        if lay.dynamic.kind == "indirect":
            _indirect_scatter(lay, values, what, add)
        else:
            arr = resolve_now(lay, what)
            if add:
                np.add(arr, values, out=arr)
            else:
                np.copyto(arr, values)


class DynamicHBMTensor(HBMTensor):
    """An HBM view whose offset (or per-partition offsets) are read when an instruction uses it."""

    @property
    def data(self):
        """The addressed elements at the current value of the dynamic offset (a copy for a gather)."""
        lay = self.__dict__.get("_layout")
        if lay is None:
            return self.__dict__["_init_data"]
        return resolve_now(lay, f"dynamic view of {_label(lay.root)}")

    @data.setter
    def data(self, value):
        self.__dict__["_init_data"] = value

    # A view's geometry is its pattern's, known without reading memory: nki-library sizes
    # buffers from `.ap(...).shape` of views it never uses (an out-of-bounds one included).
    @property
    def shape(self):
        """Shape of the view (its access pattern's), without resolving the offset."""
        return tuple(self.__dict__["_init_data"].shape)

    @property
    def dtype(self):
        """Element dtype of the view."""
        return self.__dict__["_init_data"].dtype

    @property
    def ndim(self):
        """Number of dimensions of the view."""
        return self.__dict__["_init_data"].ndim

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        lay = self._layout
        what = f"dynamic view of {_label(lay.root)}"
        if lay.dynamic.kind == "scalar":
            static = HBMTensor(resolve_now(lay, what), lay.root.buffer, lay.root.name)
            _share_hbm(static, lay.root)
            return static[key]
        addr = vector_addresses(lay, what)[key]
        flat = HBMTensor(_storage_bytes(lay.root)[: _storage_elems(lay.root, lay.dtype) * lay.dtype.itemsize]
                         .view(lay.dtype), lay.root.buffer, lay.root.name)
        _share_hbm(flat, lay.root)
        return Access(flat, Index(flat.shape, np.shape(addr), [np.asarray(addr)]))


register(Tile=Tile, HBMTensor=HBMTensor, Access=Access, DynamicTile=DynamicTile, DynamicHBMTensor=DynamicHBMTensor,
         flush_pending=flush_pending)
