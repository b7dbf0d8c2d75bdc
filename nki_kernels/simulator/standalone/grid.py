"""NKI 0.7.0's tiled / blocked layout APIs (Neuron SDK 2.33.0): ``nl.tiles``, ``nl.blocks``,
``nl.alloc_tiles``, ``nl.alloc_blocks`` and the grid classes ``nl.NkiGrid``, ``nl.NkiTileGrid``,
``nl.NkiBlockGrid``.

Pages followed (latest docs, "relevant for Trn2, Trn3"):

* https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.tiles.html
* https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.blocks.html
* https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.alloc_tiles.html
* https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.alloc_blocks.html
* https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.NkiGrid.html
  (and its NkiTileGrid / NkiBlockGrid pages)

A grid is only a description of a region of one existing tensor (its *base*): nothing here copies or
moves data. What an instruction gets is ``grid.data``, an ordinary view of the base made by the tensor
machinery every kernel already uses (basic slicing of the base, or ``NkiTensor.ap`` over an on-chip
allocation), so bounds, uninitialised-read, capacity and dependency checks apply to it unchanged.

Model. Every source dimension kept by the selection carries the array of its selected element
coordinates in the base (``_coords``); the dimensions are separable, so a selection is one strided
view exactly when each dimension's coordinates (mapped to storage offsets) form an arithmetic
progression. Along a tiled dimension the cells of the grid are consecutive chunks of ``tile`` (or
``tile * block``) selected elements, the last one possibly short: that is the page's "partial final
blocks and tiles are retained and clamped to the exact source extent", and it stays true after a
slice with a step, because only the last cell of a dimension can be partial.

Two kinds of base:

* *logical* -- the base is indexed by the element coordinates themselves: every grid made by
  ``nl.tiles`` / ``nl.blocks`` over a tensor, and ``alloc_*`` in HBM ("HBM uses the compact logical
  extent as backing storage"). ``data`` is ``base[slices]``.
* *slotted* -- ``alloc_*`` in SBUF / PSUM ("the same dense rank-two capacity layout"): one
  ``(tile_shape[0], n_tiles * prod(tile_shape[1:]))`` tensor, tile ``k`` (row-major over the untiled
  prefix and the tile coordinates: "block grouping does not change physical tile order") owning
  partitions ``0 .. tile_shape[0]`` and free elements ``k * F .. (k + 1) * F``; a remainder tile keeps
  its full slot and selects its clamped part. ``data`` is ``base.ap(pattern, offset)``.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ..buffers import Buffer
from ..errors import NKIError
from ..nki_object import NKIObject
from ..nki_tensor import NkiTensor
from .. import core as _core
from .. import language as _gen1

# the current API's nl.ndarray (standalone.language wraps the shared one the same way; importing it here
# would close an import cycle, as language exports this module's names)
_ndarray = _core.psum_tensors_span_banks()(_gen1.ndarray)

_PAGES = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language."


class _GridTypeError(NKIError, TypeError):
    """A grid rule whose page names TypeError: an NKIError (with its rule and kernel line) that
    ``except TypeError`` also catches."""


class _GridAllocationError(NKIError, AssertionError):
    """The alloc_* pages' "AssertionError -- if the native allocation ..." (the backing ``nl.ndarray``
    refused: partitions, capacity, address), still an NKIError naming the rule."""


_CREATING = object()  # the factories' key to the grid constructors (users never construct grids)


# --------------------------------------------------------------------------------------------------
# argument checks (the alloc_tiles / alloc_blocks pages' Raises; tiles / blocks follow the same rules)
# --------------------------------------------------------------------------------------------------
def _shape(value, what, fn):
    """``value`` as a tuple of positive exact ints (TypeError for the type, ValueError for a value)."""
    if not isinstance(value, tuple) or any(type(v) is not int for v in value):
        raise _GridTypeError(f"{fn} {what}", f"nl.{fn}: {what} must be a tuple of exact Python integers, got "
                             f"{value!r}")
    if not value or any(v <= 0 for v in value):
        raise NKIError(f"{fn} {what}", f"nl.{fn}: every entry of {what} must be positive, got {value!r}")
    return value


def _tile_shape(value, rank, fn):
    t = _shape(value, "tile_shape", fn)
    if len(t) < 2:
        raise NKIError(f"{fn} tile_shape", f"nl.{fn}: tile_shape {t!r} must have at least two dimensions")
    if len(t) > rank:
        raise NKIError(f"{fn} tile_shape", f"nl.{fn}: tile_shape {t!r} has rank {len(t)}, greater than the "
                       f"rank {rank} of the element extent it tiles (it applies to the trailing dimensions)")
    return t


def _block_shape(value, tile_shape, fn):
    b = _shape(value, "block_shape", fn)
    if len(b) != len(tile_shape):
        raise NKIError(f"{fn} block_shape", f"nl.{fn}: block_shape {b!r} has rank {len(b)}; its rank must equal "
                       f"tile_shape's ({tile_shape!r}, rank {len(tile_shape)})")
    return b


def _buffer(buffer, fn):
    if not isinstance(buffer, Buffer):
        raise _GridTypeError(f"{fn} buffer", f"nl.{fn}: buffer must be an NKI MemoryRegion (nl.sbuf, nl.psum, "
                             f"nl.shared_hbm, nl.private_hbm), got {buffer!r}")
    return buffer


# --------------------------------------------------------------------------------------------------
# the grid classes
# --------------------------------------------------------------------------------------------------
class NkiGrid(NKIObject):
    """Base class of tensor views organised into tiles or blocks (``nl.NkiGrid``).

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.NkiGrid.html

    "Users do not construct NkiGrid directly": calling a grid class raises TypeError; grids come from
    :func:`tiles`, :func:`blocks`, :func:`alloc_tiles` and :func:`alloc_blocks`. Indexing follows
    NumPy's basic indexing over the grid coordinates (:meth:`__getitem__`); ``data`` is the one
    tensor operand of the selection.
    """

    def __init__(self, **kwargs):
        if kwargs.pop("_key", None) is not _CREATING:
            raise _GridTypeError("grid construction", f"nl.{type(self).__name__} is not constructed directly; "
                                 "use nl.tiles, nl.blocks, nl.alloc_tiles or nl.alloc_blocks")
        self._base = kwargs["base"]            # the tensor the coordinates index (or the slotted backing)
        self._slots = kwargs["slots"]          # None (logical base) or per-dim (partition, free) offset arrays
        self._coords = kwargs["coords"]        # per source dim: int (dropped) or int array of base coordinates
        self._ntiled = kwargs["ntiled"]        # number of trailing kept dims that are tiled
        self._tile = kwargs["tile_shape"]
        self._block = kwargs.get("block_shape")
        self._consumed = kwargs.get("consumed", frozenset())  # source dims whose grid coordinate an int took

    # -- geometry ------------------------------------------------------------------------------------
    def _kept(self):
        """Indices (into ``_coords``) of the source dimensions the selection keeps."""
        return [d for d, c in enumerate(self._coords) if not isinstance(c, int)]

    def _cell(self, k):
        """Nominal cell extent (elements) of kept dim ``k`` (position among the kept dims)."""
        first_tiled = len(self._kept()) - self._ntiled
        if k < first_tiled:
            return 1
        j = k - first_tiled
        return self._tile[j] * (self._block[j] if self._block is not None else 1)

    @property
    def shape(self) -> tuple:
        """Grid extent: cells (tiles of an NkiTileGrid, blocks of an NkiBlockGrid; one slab per
        coordinate of an untiled leading dimension) along each dimension not yet consumed by an
        integer index."""
        out = []
        for k, d in enumerate(self._kept()):
            if d not in self._consumed:
                out.append(-(-len(self._coords[d]) // self._cell(k)))
        return tuple(out)

    @property
    def tile_shape(self) -> tuple:
        """The nominal source-element shape of one tile (a boundary tile may select fewer)."""
        return self._tile

    @property
    def element_shape(self) -> tuple:
        """Number of selected elements along each kept source dimension: the exact (clamped) extent.
        An untiled leading dimension selected by an integer is dropped, as NumPy's ``x[i]`` drops it
        (the page says "along each source dimension"; dropping it keeps ``data`` usable as a tile, the
        page's example allocating ``nl.ndarray(src_tile.element_shape, buffer=nl.sbuf)``)."""
        return tuple(len(self._coords[d]) for d in self._kept())

    @property
    def dtype(self):
        """The element dtype of the backing tensor."""
        return self._base.dtype

    @property
    def buffer(self):
        """The memory region containing the backing tensor."""
        return self._base.buffer

    @property
    def index_step_elements(self) -> tuple:
        """Each grid-coordinate step in source-element units: the distance between the first elements of
        consecutive cells (``tile * block`` for a whole grid, times the step of a sliced one); with one
        cell, its nominal extent."""
        out = []
        for k, d in enumerate(self._kept()):
            if d in self._consumed:
                continue
            c, n = self._coords[d], self._cell(k)
            out.append(int(c[n] - c[0]) if len(c) > n else n)
        return tuple(out)

    @property
    def is_remainder(self) -> bool:
        """Whether the selection holds a boundary cell clamped to the source extent: a tile or block
        (along a tiled dimension) with fewer elements than its nominal extent. (The page's sentence is
        cut in the stored copy; this is the reading its "remainder" / "clamped" wording gives.)"""
        kept = self._kept()
        for k in range(len(kept) - self._ntiled, len(kept)):
            n, size = self._cell(k), len(self._coords[kept[k]])
            if size % n:  # (only the last cell of a dimension can be short)
                return True
        return False

    # -- the operand ---------------------------------------------------------------------------------
    def _pattern(self):
        """``(kind, spec)`` of the single view equal to the selection, or ``(None, why)``."""
        kept = self._kept()
        if self._slots is None:
            key = []
            for d, c in enumerate(self._coords):
                if isinstance(c, int):
                    key.append(c)
                    continue
                step = _progression(c)
                if step is None or (len(c) > 1 and step <= 0):
                    return None, f"the selected elements of dimension {d} are not evenly spaced"
                key.append(slice(int(c[0]), int(c[-1]) + 1, step or 1))
            return "slice", tuple(key)
        pstride = self._base.strides[0]
        offset, pattern = 0, []
        for d, c in enumerate(self._coords):
            part, free = self._slots[d]
            if isinstance(c, int):
                offset += int(part[c]) * pstride + int(free[c])
                continue
            k = kept.index(d)
            p, f = part[c], free[c]
            offset += int(p[0]) * pstride + int(f[0])
            if k == 0:
                ps = _progression(p)
                if _progression(f) != 0 or ps is None or (len(c) > 1 and ps <= 0):
                    return None, (f"dimension {d} (the first one selected) does not lie along the partitions of "
                                  "one tile")
                pattern.append([(ps or 1) * pstride, len(c)])
            else:
                fs = _progression(f)
                if _progression(p) != 0 or fs is None:
                    return None, f"the selected elements of dimension {d} are not evenly spaced in the free dimension"
                pattern.append([fs or 1, len(c)])
        return "ap", (pattern, offset)

    @property
    def is_data_representable(self) -> bool:
        """Whether :attr:`data` can represent this selection exactly (one strided view of the base)."""
        return self._pattern()[0] is not None

    @property
    def data(self):
        """The complete selection as one native tensor operand (a view of the backing tensor, shape
        :attr:`element_shape`), for any ``nki.isa`` instruction. Raises ValueError (an NKIError) when
        no single access pattern holds it (:attr:`is_data_representable` is False), e.g. a column of
        tiles of an SBUF allocation, whose tiles sit side by side in the free dimension."""
        kind, spec = self._pattern()
        if kind is None:
            raise NKIError("grid data", f"{self!r}.data: the selection is not representable as one tensor "
                           f"operand: {spec}; select a single tile (or use nl.tiles on this selection)")
        if kind == "slice":
            return self._base[spec]
        pattern, offset = spec
        return self._base.ap(pattern=pattern, offset=offset)

    # -- indexing ------------------------------------------------------------------------------------
    def __getitem__(self, key):
        """Select cells by grid coordinate, as NumPy's basic indexing does: ints (negative from the end)
        and slices with a positive step, ``...``; missing trailing coordinates select everything. An int
        consumes its coordinate; the result is a grid of the same class ("Integer indexing consumes
        coordinates but retains NkiTileGrid"; "Indexing preserves NkiBlockGrid")."""
        key = key if isinstance(key, tuple) else (key,)
        kept = self._kept()
        free = [k for k, d in enumerate(kept) if d not in self._consumed]  # grid dims, as kept positions
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (len(free) - len(key) + 1) + key[i + 1:]
        if len(key) > len(free):
            raise IndexError(f"too many indices for a grid of shape {self.shape}: {len(key)} were indexed")
        coords, consumed = list(self._coords), set(self._consumed)
        first_tiled = len(kept) - self._ntiled
        for axis, (k, sub) in enumerate(zip(free, key)):
            d, n = kept[k], self._cell(k)
            c = coords[d]
            cells = -(-len(c) // n)
            if isinstance(sub, slice):
                start, stop, step = sub.indices(cells)
                if step <= 0:
                    raise NKIError("grid index", f"grid slice {sub!r}: the step must be positive")
                picked = range(start, stop, step)
                if not len(picked):
                    raise NKIError("grid index", f"grid slice {sub!r} selects none of the {cells} cells of grid "
                                   f"dimension {axis}")
                coords[d] = np.concatenate([c[i * n:(i + 1) * n] for i in picked])
                continue
            if isinstance(sub, bool):
                raise _GridTypeError("grid index", "grid index True/False: a grid is indexed by ints and slices")
            try:
                i = operator.index(sub)
            except TypeError:
                raise _GridTypeError("grid index", f"grid index {sub!r}: a grid is indexed by ints and slices "
                                     "(known when the kernel is traced)") from None
            if not -cells <= i < cells:
                raise IndexError(f"grid index {i} is out of bounds for grid dimension {axis} with size {cells}")
            i %= cells
            if k < first_tiled:  # an untiled slab: the dimension goes, as with NumPy's x[i]
                coords[d] = int(c[i])
            else:  # a tile / block: its elements stay, its grid coordinate is consumed
                coords[d] = c[i * n:(i + 1) * n]
                consumed.add(d)
        return self._derive(coords=coords, consumed=frozenset(consumed))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a grid with no coordinates left (a single cell)")
        return self.shape[0]

    def _derive(self, **changes):
        state = {"base": self._base, "slots": self._slots, "coords": self._coords, "ntiled": self._ntiled,
                     "tile_shape": self._tile, "block_shape": self._block, "consumed": self._consumed}
        state.update(changes)
        return type(self)(_key=_CREATING, **state)

    def __repr__(self):
        extra = f", block_shape={self._block}" if self._block is not None else ""
        return (f"nl.{type(self).__name__}(shape={self.shape}, tile_shape={self._tile}{extra}, "
                f"element_shape={self.element_shape}, buffer={self.buffer!r})")


class NkiTileGrid(NkiGrid):
    """A tensor view navigated in tile coordinates (``nl.NkiTileGrid``).

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.NkiTileGrid.html

    Each tiled entry of ``shape`` counts tiles, ``tile_shape`` gives the nominal source-element shape of
    one tile, untiled HBM dimensions form a leading prefix indexed one slab at a time. Integer indexing
    consumes coordinates but retains NkiTileGrid; ``data`` is the exact tensor operand. Made by
    :func:`tiles` (also from a block: the "block-to-tile transition") and :func:`alloc_tiles`.
    """


class NkiBlockGrid(NkiGrid):
    """A tensor view navigated in block coordinates (``nl.NkiBlockGrid``).

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.NkiBlockGrid.html

    ``shape`` counts blocks, ``block_shape`` gives tiles per block, ``tile_shape`` source elements per
    tile; partial final blocks and tiles are retained and clamped to the exact source extent. Call
    :func:`tiles` on a selected block for its interior tile coordinates.
    """

    @property
    def block_shape(self) -> tuple:
        """Tiles per block along each tiled dimension (nominal; a final block may hold fewer)."""
        return self._block

    @property
    def is_remainder(self) -> bool:
        """Whether a selected block (or a tile in it) is clamped: fewer tiles than ``block_shape`` or a
        partial tile, along some tiled dimension."""
        return NkiGrid.is_remainder.fget(self)


def _progression(values):
    """The common difference of ``values`` (0 for fewer than two), or None when not evenly spaced."""
    if len(values) < 2:
        return 0
    diff = np.diff(values)
    return int(diff[0]) if (diff == diff[0]).all() else None


# --------------------------------------------------------------------------------------------------
# the factories
# --------------------------------------------------------------------------------------------------
def _from_source(source, tile_shape, block_shape, fn):
    """The NkiTileGrid (``block_shape`` None) or NkiBlockGrid of a tensor or grid ``source``."""
    if isinstance(source, NkiGrid):
        if tile_shape is None:
            tile_shape = source.tile_shape
        kept = source._kept()
        t = _tile_shape(tile_shape, len(kept), fn)
        if source._slots is None and source.buffer.on_chip and len(t) != len(kept):
            raise NKIError(f"{fn} tile_shape", f"nl.{fn}: tile_shape {t!r} leaves leading dimensions of the "
                           f"{source.buffer.name} selection {source.element_shape} untiled; only HBM tensors have "
                           "an untiled leading prefix (on chip the first dimension is the partition dimension)")
        state = {"base": source._base, "slots": source._slots, "coords": list(source._coords), "ntiled": len(t)}
    elif isinstance(source, NkiTensor):
        if tile_shape is None:
            raise _GridTypeError(f"{fn} tile_shape", f"nl.{fn}: tile_shape is required when source is a tensor "
                                 "(it defaults to the tile shape of a grid source only)")
        shape = tuple(int(s) for s in source.shape)
        t = _tile_shape(tile_shape, len(shape), fn)
        if source.buffer.on_chip and len(t) != len(shape):
            raise NKIError(f"{fn} tile_shape", f"nl.{fn}: tile_shape {t!r} leaves leading dimensions of the "
                           f"{source.buffer.name} tensor {shape} untiled; only HBM tensors have an untiled "
                           "leading prefix (on chip the first dimension is the partition dimension)")
        state = {"base": source, "slots": None, "coords": [np.arange(s) for s in shape], "ntiled": len(t)}
    else:
        raise _GridTypeError(f"{fn} source", f"nl.{fn}: source must be an NkiTensor, NkiTileGrid or NkiBlockGrid, "
                             f"got {type(source).__name__}")
    b = None if block_shape is None else _block_shape(block_shape, t, fn)
    cls = NkiTileGrid if b is None else NkiBlockGrid
    return cls(_key=_CREATING, tile_shape=t, block_shape=b, **state)


def tiles(source, *, tile_shape=None):
    """Decompose a tensor into a logical grid of fixed-size tiles (``nl.tiles``) -> :class:`NkiTileGrid`.

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.tiles.html

    ``source`` is an NkiTensor or a grid (a selected block exposes its interior tiles: ``tile_shape``
    then defaults to the grid's). ``tile_shape`` (a tuple of at least two exact Python ints) applies to
    the trailing dimensions; leading HBM dimensions stay untiled, one slab per coordinate. The grid
    counts ``ceil(extent / tile)`` tiles per dimension, the last clamped to the source extent; grid
    indexing returns a grid, and ``.data`` the tensor operand. Creating and indexing the view allocates
    nothing and moves no data.

    Raises TypeError for a source that is not a tensor or grid, a missing ``tile_shape`` for a tensor
    source, or a ``tile_shape`` that is not a tuple of exact ints; ValueError (an NKIError) for a
    nonpositive entry, fewer than two dimensions, more dimensions than the source, or untiled leading
    dimensions of an SBUF / PSUM tensor (the page: "Untiled HBM dimensions form a leading prefix").
    (The stored copy of the page is cut before its Raises section; these follow alloc_tiles' rules.)
    """
    return _from_source(source, tile_shape, None, "tiles")


def blocks(source, *, tile_shape=None, block_shape):
    """Group tiles into block coordinates (``nl.blocks``) -> :class:`NkiBlockGrid`.

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.blocks.html

    ``block_shape`` counts tiles per block along each tiled dimension (rank equal to ``tile_shape``'s);
    ``tile_shape`` defaults to a grid source's. A block is one cell of the grid; the final block along a
    dimension may hold fewer tiles, and its last tile fewer elements. ``block.data`` is one operand when
    one access pattern holds the whole block; ``nl.tiles(block)`` gives its tiles. Creating,
    regrouping, slicing or indexing a block grid allocates nothing, copies nothing, emits no
    instruction. Raises as :func:`tiles`, plus ValueError for a ``block_shape`` of another rank.
    """
    return _from_source(source, tile_shape, block_shape, "blocks")


def _allocate(tile_shape, block_shape, element_shape, buffer, dtype, address, name, fn):
    e = _shape(element_shape, "element_shape", fn)
    t = _tile_shape(tile_shape, len(e), fn)
    b = None if block_shape is None else _block_shape(block_shape, t, fn)
    buf = _buffer(buffer, fn)
    try:
        if not buf.on_chip:
            base = _ndarray(e, dtype=dtype, buffer=buf, name=name, address=address)
            grid = _from_source(base, t, b, fn)
            return grid
        u = len(e) - len(t)
        counts = list(e[:u]) + [-(-e[u + j] // t[j]) for j in range(len(t))]
        free = math.prod(t[1:])
        base = _ndarray((t[0], math.prod(counts) * free), dtype=dtype, buffer=buf, name=name, address=address)
    except NKIError as err:
        if isinstance(err, (_GridTypeError, TypeError)):
            raise
        raise _GridAllocationError(f"{fn} allocation", f"nl.{fn}: the backing allocation failed: {err.detail}") \
            from err
    slot_stride = [math.prod(counts[d + 1:]) * free for d in range(len(e))]
    slots = []
    for d, n in enumerate(e):
        x = np.arange(n)
        if d < u:
            slots.append((np.zeros(n, np.int64), x * slot_stride[d]))
            continue
        j = d - u
        inner = math.prod(t[j + 1:])
        if j == 0:
            slots.append((x % t[0], (x // t[0]) * slot_stride[d]))
        else:
            slots.append((np.zeros(n, np.int64), (x // t[j]) * slot_stride[d] + (x % t[j]) * inner))
    cls = NkiTileGrid if b is None else NkiBlockGrid
    return cls(_key=_CREATING, base=base, slots=slots, coords=[np.arange(n) for n in e], ntiled=len(t),
               tile_shape=t, block_shape=b)


def alloc_tiles(*, tile_shape, element_shape, buffer, dtype, address=None, name=""):
    """Allocate independent, uninitialised storage organised as a grid of tiles (``nl.alloc_tiles``).

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.alloc_tiles.html

    One backing ``nl.ndarray``: in HBM the compact logical extent ``element_shape``; in SBUF / PSUM the
    dense rank-two layout ``(tile_shape[0], n_tiles * prod(tile_shape[1:]))``, one full-size slot per tile
    in row-major tile order (a boundary tile keeps its slot and selects its clamped extent). ``address``
    and ``name`` go to that ``nl.ndarray`` ("the same contract as nki.language.ndarray()").

    Raises TypeError when a shape is not a tuple of exact Python ints or ``buffer`` is not an NKI
    MemoryRegion; ValueError (an NKIError) for a nonpositive shape entry or a ``tile_shape`` of fewer
    than two dimensions or more than ``element_shape``; AssertionError (an NKIError too) when the backing
    allocation fails (more than 128 partitions, no room, a bad ``address``). Every MemoryRegion is
    supported here, so the page's "buffer is unsupported" ValueError has no case in the simulator.
    """
    return _allocate(tile_shape, None, element_shape, buffer, dtype, address, name, "alloc_tiles")


def alloc_blocks(*, tile_shape, block_shape, element_shape, buffer, dtype, address=None, name=""):
    """Allocate new storage organised as a grid of tile blocks (``nl.alloc_blocks``).

    Page: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.language.alloc_blocks.html

    The tile geometry and backing of :func:`alloc_tiles` with a block level above it: "block grouping
    does not change physical tile order or add per-block allocations". ``block_shape`` must have
    ``tile_shape``'s rank. Raises as :func:`alloc_tiles`, plus ValueError for a ``block_shape`` of
    another rank or with a nonpositive entry.
    """
    return _allocate(tile_shape, block_shape, element_shape, buffer, dtype, address, name, "alloc_blocks")


__all__ = ["NkiBlockGrid", "NkiGrid", "NkiTileGrid", "alloc_blocks", "alloc_tiles", "blocks", "tiles"]
