"""Resolve NKI index expressions (ints, slices, affine ``nl.arange`` expressions) against a shape.

An index expression is what a kernel writes inside ``tensor[...]``: ints,
slices and affine expressions of ``nl.arange`` / ``nl.mgrid`` / ``program_id``
broadcast against each other (``[:, None]``). The resolved :class:`Index` knows
the shape of the tile it selects and reads or writes it

* as a NumPy view: basic slicing (+ transpose) when each tile axis walks one
  tensor axis, or a strided view (``as_strided``) when an axis walks several
  (e.g. ``p * i1 + i2`` in pooling) -- no index values are ever materialised;
* by gathering / scattering explicit index arrays when the expression is not
  affine, when a mask leaves out elements, or when it reaches out of bounds
  (which is an error unless masked).
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dt
from .errors import NKIError, NotBatchable
from .index_expr import AffineExpr, BExpr, Mask, _is_int, batch_hint
# (the masks' own module; Index reads and writes through them, and its importers find them here too)
from .masks import _full_mask, full_mask, mask_box  # noqa: F401 - _full_mask re-exported


class Index:
    """A resolved index into an array of ``shape``; ``out_shape`` is the selected tile's shape."""

    __slots__ = ("shape", "out_shape", "basic", "perm", "strided", "comps", "_arrays_cache", "dropped")

    def __init__(self, shape, out_shape, comps, basic=None, perm=None, strided=None):
        self.dropped = None  # (rank, axes): unowned size-1 axes of the index space left out of the tile
        self.shape = shape
        self.out_shape = tuple(out_shape)
        self.comps = comps  # per tensor axis: int or AffineExpr right-aligned to the tile's rank
        self.basic = basic  # NumPy basic index (view path 1), or None
        self.perm = perm  # axes permutation applied after basic indexing
        self.strided = strided  # (start, coef matrix) for as_strided (view path 2), or None
        self._arrays_cache = None

    def adapt_mask(self, mask):
        """``mask`` (written in the index expressions' space) in this tile's axes."""
        if self.dropped is None or mask is None:
            return mask
        rank, axes, perm = self.dropped
        if isinstance(mask, Mask):
            return mask.without(rank, axes, perm)
        m = np.asarray(mask)
        return _squeeze(m.reshape((1,) * (rank - m.ndim) + m.shape), axes, perm)

    @property
    def is_view(self) -> bool:
        """True when the region can be addressed as a NumPy view."""
        return self.basic is not None or self.strided is not None

    # -- reading / writing -------------------------------------------------
    def view(self, data: np.ndarray, nb: int = 0) -> np.ndarray:
        """The selected region as a view of ``data`` (view paths only). With ``nb``, the first
        ``nb`` axes of ``data`` are a batch of programs' tiles, each indexed alike."""
        basic = self.basic
        if not nb and basic is not None and self.perm is None:  # (one program's basic view: no key to build)
            v = data[basic] if basic else data[...]  # (a 0-d array indexed by () is a scalar, not a view)
            full = self.out_shape
            return v.reshape(full) if v.shape != full else v
        lead, bshape = (slice(None),) * nb, data.shape[:nb]
        full = bshape + self.out_shape
        if self.basic is not None:
            key = lead + tuple(self.basic)
            v = data[key] if key else data[...]  # (a 0-d array indexed by () is a scalar, not a view)
            if self.perm is not None:
                v = v.transpose(tuple(range(nb)) + tuple(nb + p for p in self.perm))
            return v.reshape(full) if v.shape != full else v
        start, coefs = self.strided
        sub = data[lead + tuple(slice(s, s + 1) for s in start)]
        strides = [sum(c[ax] * st for c, st in zip(coefs, data.strides[nb:])) for ax in range(len(self.out_shape))]
        return _dt.as_strided(sub, full, data.strides[:nb] + tuple(strides), writeable=data.flags.writeable)

    def _boxed(self, mask):
        """For a mask that selects a box (ragged edge tiles), the box and the index restricted to it."""
        box = mask_box(mask, self.out_shape) if isinstance(mask, Mask) else None
        if box is None or any(not isinstance(c, (int, AffineExpr)) for c in self.comps):
            return None, None
        lo = [b.start for b in box]
        sub = []
        for c in self.comps:
            if isinstance(c, int):
                sub.append(c)
            else:
                off = c.offset + sum(k * l for k, l in zip(c.coefs, lo))
                sub.append(AffineExpr([b.stop - b.start if n != 1 else 1 for b, n in zip(box, c.shape)], off, c.coefs))
        return box, resolve(self.shape, tuple(sub))

    def read(self, data: np.ndarray, mask=None, what="tensor") -> np.ndarray:
        """Values at the index (masked-off elements are zero); a view when possible."""
        if mask is None and self.perm is None and self.basic is not None:  # (view()'s first path, inlined)
            v = data[self.basic] if self.basic else data[...]
            return v.reshape(self.out_shape) if v.shape != self.out_shape else v
        if mask is not None:
            box, sub = self._boxed(mask)
            if sub is not None:
                out = np.zeros(self.out_shape, data.dtype)
                if all(b.stop > b.start for b in box):
                    out[box] = sub.read(data, None, what)
                return out
        if mask is not None:
            mask = full_mask(mask, self.out_shape)
        if mask is None and (self.basic is not None or self.strided is not None):  # (is_view, inlined)
            return self.view(data)
        arrays = self.arrays()
        if mask is None:
            self._check_bounds(arrays, what)
            return data[arrays]
        out = np.zeros(self.out_shape, data.dtype)
        sel = tuple(np.broadcast_to(a, self.out_shape)[mask] for a in arrays)
        self._check_bounds(sel, what)
        out[mask] = data[sel]
        return out

    def write(self, data: np.ndarray, values, mask=None, what="tensor") -> None:
        """Write ``values`` (already of the destination dtype, broadcastable) at the index."""
        if mask is not None:
            box, sub = self._boxed(mask)
            if sub is not None:
                if all(b.stop > b.start for b in box):
                    sub.write(data, np.broadcast_to(values, self.out_shape)[box], None, what)
                return
        mask = full_mask(mask, self.out_shape)
        if mask is None and self.is_view and (self.basic is not None or not self._overlaps(data)):
            self.view(data)[...] = values
            return
        arrays = self.arrays()
        values = np.broadcast_to(values, self.out_shape)
        if mask is None:
            self._check_bounds(arrays, what)
            data[arrays] = values
            return
        sel = tuple(np.broadcast_to(a, self.out_shape)[mask] for a in arrays)
        self._check_bounds(sel, what)
        data[sel] = values[mask]

    def element_indices(self, mask=None):
        """Flat indices (into ``shape``) of the elements this index touches, honouring the mask."""
        arrays = tuple(np.broadcast_to(a, self.out_shape) for a in self.arrays())
        mask = full_mask(mask, self.out_shape)
        if mask is not None:
            arrays = tuple(a[mask] for a in arrays)
        if len(arrays) == 1 and arrays[0].dtype == np.intp:
            # a flat index (a vector-offset DMA's addresses into its HBM tensor's storage) is its own flat
            # index once in bounds: no copy through ravel_multi_index (which still reports one that is not)
            a = arrays[0].ravel()
            if not a.size or (int(a.min()) >= 0 and int(a.max()) < self.shape[0]):
                return a
        return np.ravel_multi_index(tuple(a.ravel() for a in arrays), self.shape)

    def arrays(self):
        """Explicit index arrays, one per tensor axis, broadcastable to ``out_shape``."""
        if self._arrays_cache is None:
            self._arrays_cache = tuple(np.asarray(c) if isinstance(c, (AffineExpr, np.ndarray)) else
                                       np.asarray(c, dtype=np.int64) for c in self.comps)
        return self._arrays_cache

    # -- helpers -----------------------------------------------------------
    def _overlaps(self, data) -> bool:
        """Whether two tile elements of the strided view alias one tensor element."""
        start, coefs = self.strided
        steps = sorted((abs(sum(c[ax] * st for c, st in zip(coefs, data.strides))), n)
                       for ax, n in enumerate(self.out_shape) if n > 1)
        extent = data.itemsize
        for step, n in steps:
            if step < extent:
                return True
            extent = step * (n - 1) + extent
        return False

    def _check_bounds(self, arrays, what):
        for axis, (a, dim) in enumerate(zip(arrays, self.shape)):
            a = np.asarray(a)
            if a.size and (a.min() < 0 or a.max() >= dim):
                bad = a[(a < 0) | (a >= dim)]
                tile_given = axis < len(self.comps) and isinstance(self.comps[axis], np.ndarray)
                hint = ("an offset read from the index tile; nisa.dma_copy(..., oob_mode=nisa.oob_mode.skip) "
                        "skips such elements, or mask it with mask=") if tile_given else "mask it with mask="
                raise NKIError(
                    "out-of-bounds access",
                    f"index {int(bad.flat[0])} on axis {axis} of {what} with shape "
                    f"{tuple(self.shape)} is outside [0, {dim}); {hint}",
                )


def _as_expr(a: np.ndarray):
    """An integer array as an AffineExpr when it is an arithmetic progression along one axis."""
    axes = [ax for ax, s in enumerate(a.shape) if s != 1]
    if not axes:
        return AffineExpr(a.shape, int(a.reshape(-1)[0]) if a.size else 0, (0,) * a.ndim)
    if len(axes) != 1:
        return None
    v = a.reshape(-1)
    start = int(v[0])
    step = int(v[1] - v[0]) if v.size > 1 else 1
    if v.size > 2 and not np.array_equal(v, start + step * np.arange(v.size)):
        return None
    coefs = [0] * a.ndim
    coefs[axes[0]] = step
    return AffineExpr(a.shape, start, coefs)


def _normalize(shape, key, what):
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = len(shape) - (len(key) - 1)
        key = key[:i] + (slice(None),) * fill + key[i + 1:]
    if len(key) > len(shape):
        raise NKIError("index rank", f"{len(key)} indices given for {what} of rank {len(shape)} {shape}")
    key = key + (slice(None),) * (len(shape) - len(key))
    comps = []
    for axis, (k, dim) in enumerate(zip(key, shape)):
        if _is_int(k) or (isinstance(k, np.ndarray) and k.ndim == 0):
            k = int(k)
            k = k + dim if k < 0 else k
            if not 0 <= k < dim:
                raise NKIError("out-of-bounds access",
                               f"index {k} on axis {axis} of {what} with shape {shape} is outside [0, {dim})")
            comps.append(k)
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            start = 0 if k.start is None else int(k.start) + (dim if int(k.start) < 0 else 0)
            stop = dim if k.stop is None else int(k.stop) + (dim if int(k.stop) < 0 else 0)
            if step <= 0 or start > stop:
                raise NKIError("index type", f"slice {start}:{stop}:{step} on axis {axis} of {what} "
                               "must have a positive step and start <= stop")
            comps.append(slice(start, stop, step))
        elif isinstance(k, AffineExpr):
            comps.append(k)
        elif type(k) is BExpr:
            raise NotBatchable(f"a program_id expression indexes {what}")
        elif isinstance(k, np.ndarray) and np.issubdtype(k.dtype, np.integer):
            comps.append(_as_expr(k) or k)
        elif hasattr(k, "data") and hasattr(k, "buffer"):
            comps.append(_indirect(k, axis, what))
        else:
            raise NKIError("index type", f"cannot index {what} with {type(k).__name__} {k!r}")
    return comps


def _indirect(tile, axis, what):
    """The index array of an indirect (gather / scatter) access: a tile's integer values index
    ``axis``, laid out like the tile (partition axis first), as ``nl.load(t[b, idx_tile, i_f])``
    does on the DMA engines. Values out of bounds are errors unless the access's mask hides them."""
    if getattr(tile, "nb", 0):
        raise NotBatchable(f"an indirect index into {what}")
    if tile.buffer.name != "sbuf":
        raise NKIError("indirect index", f"the index tile for axis {axis} of {what} is in {tile.buffer.name}; "
                       "indirect DMA reads its offsets from SBUF")
    vals = np.asarray(tile.data)
    if not np.issubdtype(vals.dtype, np.integer):
        raise NKIError("indirect index", f"the index tile for axis {axis} of {what} has dtype {vals.dtype}; "
                       "indirect offsets must be integers (int32 / uint32)")
    if vals.ndim == 1:
        # A [P] tile is the [P, 1] column it stands for (one offset per partition): the nl.load page's
        # data_tensor[idx_tile[i_p, 0], i_f] gathers [P, F] rows (example 12).
        vals = vals.reshape(vals.shape + (1,))
    return vals.astype(np.int64)


_RESOLVED = {}  # (shape, plain key) -> Index: an Index is not changed once resolved, so loops share them
_RESOLVED_MAX = 8192


def _plain_key(key):
    """A hashable form of a key made only of ints, int slices and ``...`` (``None`` for any other key)."""
    out = []
    for k in (key if type(key) is tuple else (key,)):
        t = type(k)
        if t is int or k is Ellipsis:
            out.append(k)
        elif t is slice:
            a, b, c = k.start, k.stop, k.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int)):
                return None
            out.append((a, b, c))
        else:
            return None
    return tuple(out)


def resolve(shape, key, what="tensor") -> Index:
    """Resolve ``key`` (what a kernel wrote in ``t[...]``) against an array of ``shape``.

    Keys of ints and int slices (a loop's ``t[k * 128:(k + 1) * 128, :]``) are resolved once per
    shape and key; invalid keys raise every time (errors are never cached)."""
    plain = _plain_key(key)
    if plain is not None and type(shape) is tuple:
        idx = _RESOLVED.get((shape, plain))  # (ints and NumPy ints of one value hash and compare alike)
        if idx is not None:
            return idx
    shape = tuple(int(s) for s in shape)
    if plain is None:
        return _resolve(shape, key, what)
    ck = (shape, plain)
    idx = _RESOLVED.get(ck)
    if idx is None:
        idx = _resolve(shape, key, what)
        if len(_RESOLVED) >= _RESOLVED_MAX:
            _RESOLVED.clear()
        _RESOLVED[ck] = idx
    return idx


# shape -> the resolved Index of ``t[...]``: a dst= instruction's whole-tile write logs it without
# the key parse of resolve() (Index objects are never changed once resolved)
_WHOLE_INDEX = {}


def _whole_index(shape, label):
    """The resolved Index of ``t[...]`` for a tile or tensor of ``shape`` (cached in ``_WHOLE_INDEX``)."""
    if len(_WHOLE_INDEX) >= 4096:
        _WHOLE_INDEX.clear()
    idx = _WHOLE_INDEX[shape] = resolve(shape, ..., label)
    return idx


def _resolve(shape, key, what) -> Index:
    """:func:`resolve` without the cache (``shape`` already a tuple of ints)."""
    if type(key) is tuple and len(key) == len(shape):
        idx = _resolve_simple(shape, key)
        if idx is not None:
            return idx
    comps = _normalize(shape, key, what)

    exprs = [c for c in comps if isinstance(c, (AffineExpr, np.ndarray))]
    if not exprs and all(c.stop <= dim for c, dim in zip(comps, shape) if isinstance(c, slice)):
        out_shape = tuple(len(range(c.start, c.stop, c.step)) for c in comps if isinstance(c, slice))
        basic = tuple(comps)
        if basic and all(isinstance(b, int) for b in basic):
            # All-int NumPy indexing returns a scalar copy, not a view: select a 1-element slice.
            basic = basic[:-1] + (slice(basic[-1], basic[-1] + 1),)
        idx = Index(shape, out_shape, None, basic=basic)
        idx.comps = _slices_as_exprs(comps, out_shape)
        return idx

    # Slices mixed with expressions: each slice takes its own axis among the non-int positions.
    nonint = [i for i, c in enumerate(comps) if not isinstance(c, int)]
    # (a slice takes an axis of its own; without slices the expressions broadcast together, as the
    # nl.load page's gathers do: w[e[0, 0], i_p, i_f] with a one-element index tile is [P, F])
    has_slice = any(isinstance(c, slice) for c in comps)
    rank = max([e.ndim for e in exprs] + ([len(nonint)] if has_slice else []))
    for j, i in enumerate(nonint):
        c = comps[i]
        if isinstance(c, slice):
            shp = [1] * rank
            coefs = [0] * rank
            ax = rank - len(nonint) + j
            shp[ax] = len(range(c.start, c.stop, c.step))
            coefs[ax] = c.step
            comps[i] = AffineExpr(shp, c.start, coefs, own=1 << ax)
    out_shape = _broadcast([c.shape for c in comps if not isinstance(c, int)], rank)
    rank = len(out_shape)
    aligned = []
    for c in comps:
        if isinstance(c, AffineExpr) and c.ndim < rank:
            c = c.aligned(rank)
        elif isinstance(c, np.ndarray) and c.ndim < rank:
            c = c.reshape((1,) * (rank - c.ndim) + c.shape)
        aligned.append(c)
    dropped = _unowned_axes(aligned, out_shape)
    if dropped and dropped[0] == 0 and rank <= len(shape):
        # No surplus axis: an unowned leading size-1 axis is the partition axis an integer subscript
        # took (a[0, src_mgrid.x] of a [1, 128] tile is [1, 128], nc_stream_shuffle's example 2), not
        # an mgrid dummy; dropping it would read the free axis as partitions.
        dropped = dropped[1:]
    if dropped:
        # An index space with axes no index owns (mgrid dummies): the tile keeps the owned
        # axes in the order of the subscripts owning them -- gamma.reshape((1, F))[i_p, i_f]
        # with i_p, i_f from nl.mgrid[0:128, 0:F, 0:1] ([.., .., i_p]) is a [1, F] tile.
        keep = [ax for ax in range(rank) if ax not in dropped]
        order = []
        for c in aligned:
            if isinstance(c, AffineExpr):
                order += [ax for ax in keep if (c.own >> ax) & 1 and ax not in order]
        order += [ax for ax in keep if ax not in order]
        perm = None if order == keep else tuple(keep.index(ax) for ax in order)
        aligned = [c.without(dropped, perm) if isinstance(c, AffineExpr) else
                   (_squeeze(c, dropped, perm) if isinstance(c, np.ndarray) else c) for c in aligned]
        full_rank = rank
        out_shape = tuple(out_shape[ax] for ax in order)
        rank = len(out_shape)
        idx = _resolve_aligned(shape, out_shape, rank, aligned)
        idx.dropped = (full_rank, dropped, perm)
        return idx
    return _resolve_aligned(shape, out_shape, rank, aligned)


def _squeeze(a, axes, perm):
    a = a.reshape([n for ax, n in enumerate(a.shape) if ax not in axes])
    return a if perm is None else a.transpose(perm)


def _unowned_axes(aligned, out_shape):
    """Size-1 axes of the index space that no index expression owns (left out of the tile)."""
    if 1 not in out_shape:
        return ()
    own = 0
    for c in aligned:
        if isinstance(c, AffineExpr):
            own |= c.own
        elif isinstance(c, np.ndarray):
            own |= (1 << len(out_shape)) - 1
    return tuple(ax for ax, n in enumerate(out_shape) if n == 1 and not (own >> ax) & 1)


def _resolve_aligned(shape, out_shape, rank, aligned):
    """The Index of index expressions already aligned to the tile's ``rank``."""
    if any(isinstance(c, np.ndarray) for c in aligned):
        return Index(shape, out_shape, aligned)  # not affine: gather/scatter
    for c, dim in zip(aligned, shape):
        if isinstance(c, AffineExpr):
            lo, hi = c.bounds()
            if lo < 0 or hi >= dim:
                return Index(shape, out_shape, aligned)  # out of bounds: the gather path checks the mask

    # Affine and in bounds: a view. Basic slicing when every tile axis walks one tensor axis.
    basic, used = [], []
    for c in aligned:
        if isinstance(c, int):
            basic.append(c)
            continue
        axes = [ax for ax, k in enumerate(c.coefs) if k]
        if not axes:
            basic.append(c.offset)
        elif len(axes) == 1 and c.coefs[axes[0]] > 0 and axes[0] not in used:
            ax, step = axes[0], c.coefs[axes[0]]
            used.append(ax)
            basic.append(slice(c.offset, c.offset + step * (out_shape[ax] - 1) + 1, step))
        else:
            basic = None
            break
    if basic is not None:
        if all(isinstance(b, int) for b in basic):
            basic = basic[:-1] + [slice(basic[-1], basic[-1] + 1)]
        order = sorted(range(len(used)), key=lambda i: used[i])
        perm = None if order == list(range(len(order))) else tuple(order)
        return Index(shape, out_shape, aligned, basic=tuple(basic), perm=perm)
    start = tuple(c if isinstance(c, int) else c.offset for c in aligned)
    coefs = tuple((0,) * rank if isinstance(c, int) else c.coefs for c in aligned)
    return Index(shape, out_shape, aligned, strided=(start, coefs))


def _resolve_simple(shape, key):
    """Fast path for the common case: ints and same-rank affine expressions that each walk
    their own tile axis, in bounds. Returns ``None`` to defer to the general resolver."""
    rank = -1
    shapes = []
    for k in key:
        if type(k) is AffineExpr:
            if rank == -1:
                rank = len(k.shape)
            elif len(k.shape) != rank:
                return None
            shapes.append(k.shape)
        elif type(k) is not int:
            return None
    if rank == -1:
        return None
    out_shape = _broadcast(shapes, rank)
    if _unowned_axes(key, out_shape):
        return None  # the general resolver drops unowned size-1 axes
    basic, used = [], []
    for k, dim in zip(key, shape):
        if type(k) is int:
            if not 0 <= k < dim:
                return None
            basic.append(k)
            continue
        ax = k.axis
        if ax == -1:
            if not 0 <= k.offset < dim:
                return None
            basic.append(k.offset)
            continue
        if ax < 0 or ax in used:
            return None
        step = k.coefs[ax]
        last = k.offset + step * (out_shape[ax] - 1)
        if k.offset < 0 or last >= dim:
            return None
        used.append(ax)
        basic.append(slice(k.offset, last + 1, step))
    if not used:
        return None
    perm = None
    if used != sorted(used):
        perm = tuple(sorted(range(len(used)), key=used.__getitem__))
    return Index(shape, out_shape, list(key), basic=tuple(basic), perm=perm)


def _broadcast(shapes, rank):
    """Broadcast shape of ``shapes`` (a faster ``np.broadcast_shapes`` for short tuples)."""
    out = [1] * rank
    for shp in shapes:
        off = rank - len(shp)
        for i, n in enumerate(shp):
            cur = out[off + i]
            if n != cur and n != 1:
                if cur != 1:
                    raise NKIError("index shape", f"index expressions of shapes {shapes} do not broadcast")
                out[off + i] = n
    return tuple(out)


def _slices_as_exprs(comps, out_shape):
    rank, j, out = len(out_shape), 0, []
    for c in comps:
        if isinstance(c, int):
            out.append(c)
            continue
        shp, coefs = [1] * rank, [0] * rank
        shp[j], coefs[j] = out_shape[j], c.step
        out.append(AffineExpr(shp, c.start, coefs))
        j += 1
    return out


def compose(parent: Index, child: Index) -> Index:
    """``tensor[parent][child]`` as one index into the tensor (``child`` indexes the region
    ``parent`` selects, e.g. ``q[b, h][rows, cols]``)."""
    rp = len(parent.out_shape)
    out = child.out_shape
    comps = []
    for c in parent.comps:
        if isinstance(c, (int, np.integer)):
            comps.append(int(c))
            continue
        if not isinstance(c, AffineExpr):
            raise NKIError("index type", "indexing the region of a gathered (non-affine) HBM access again "
                           "is not supported; index the tensor once")
        ca = c.aligned(rp)
        off, coefs = ca.offset, [0] * len(out)
        for k, ck in enumerate(ca.coefs):
            if not ck:
                continue
            ch = child.comps[k]
            if isinstance(ch, (int, np.integer)):
                off += ck * int(ch)
            elif isinstance(ch, AffineExpr):
                cha = ch.aligned(len(out))
                off += ck * cha.offset
                coefs = [a + ck * b for a, b in zip(coefs, cha.coefs)]
            else:
                raise NKIError("index type", "indexing an HBM region with non-affine index arrays is not "
                               "supported; index the tensor once")
        comps.append(AffineExpr(out, off, coefs))
    return resolve(parent.shape, tuple(comps))


# ---------------------------------------------------------------------------
# batches of SPMD programs (vectorised launches)
# ---------------------------------------------------------------------------
def _expand_key(key, rank):
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (rank - (len(key) - 1)) + key[i + 1:]
    return key + (slice(None),) * (rank - len(key))


def resolve_batched(shape, key, what, bshape):
    """Resolve ``key`` for a whole batch of programs (``bshape`` = the batch's grid box).

    Returns an :class:`Index` whose ``out_shape`` is ``bshape + tile shape`` (one
    tile per program, addressed as one strided view), or ``None`` when ``key``
    does not depend on ``program_id`` (every program selects the same region).
    Raises :class:`NotBatchable` where one strided view cannot express it.
    """
    shape = tuple(int(s) for s in shape)
    key = _expand_key(key, len(shape))
    if len(key) > len(shape):
        raise NotBatchable("index rank")
    nb = len(bshape)
    key0, bcs = [], []
    for k in key:
        if type(k) is BExpr:
            t = k.tile
            if not t.shape:
                if t.offset < 0:
                    raise NotBatchable("negative program index")
                t = t.offset
            key0.append(t)
            bcs.append(k.bcoefs)
        elif isinstance(k, slice) and (type(k.start) is BExpr or type(k.stop) is BExpr):
            if type(k.start) is not BExpr or type(k.stop) is not BExpr:
                raise NotBatchable("slice length differs per program")
            n = k.stop - k.start
            if any(n.bcoefs) or n.tile.shape or k.start.tile.shape:
                raise NotBatchable("slice length differs per program")
            start = k.start.tile.offset
            if start < 0:
                raise NotBatchable("negative slice start")
            key0.append(slice(start, start + n.tile.offset, k.step))
            bcs.append(k.start.bcoefs)
        else:
            key0.append(k)
            bcs.append(None)
    if all(b is None for b in bcs):
        return None
    idx0 = resolve(shape, tuple(key0), what)
    rank = len(idx0.out_shape)
    comps = []
    for c, bc in zip(idx0.comps, bcs):
        bc = bc or (0,) * nb
        if isinstance(c, np.ndarray):
            raise NotBatchable("gathered index")
        if _is_int(c):
            if not any(bc):
                comps.append(int(c))
                continue
            c = AffineExpr((1,) * rank, int(c), (0,) * rank)
        cs, ck = c.right_aligned(rank)
        comps.append(AffineExpr(tuple(bshape) + cs, c.offset, tuple(bc) + ck))
    for c, dim in zip(comps, shape):
        if isinstance(c, AffineExpr):
            lo, hi = c.bounds()
            if lo < 0 or hi >= dim:
                raise NotBatchable("some program of the batch reaches out of bounds", hint=_bounds_hint(
                    comps, shape, nb))
    out_shape = tuple(bshape) + idx0.out_shape
    start = tuple(c if isinstance(c, int) else c.offset for c in comps)
    coefs = tuple((0,) * len(out_shape) if isinstance(c, int) else c.coefs for c in comps)
    return Index(shape, out_shape, comps, strided=(start, coefs))


def _bounds_hint(comps, shape, nb):
    conds = []
    for c, dim in zip(comps, shape):
        if isinstance(c, AffineExpr):
            tlo, thi = AffineExpr(c.shape[nb:], c.offset, c.coefs[nb:]).bounds()
            conds.append((tlo, thi, c.coefs[:nb], c.shape[:nb],
                          lambda lo, hi, dim=dim: (lo >= 0) & (hi < dim)))
    return batch_hint(conds)


def tile_view(idx: Index, data: np.ndarray, nb: int) -> np.ndarray:
    """``idx`` (resolved on a tile's per-program shape) applied to batched tile ``data`` whose
    first ``nb`` axes are the batch: a view when ``idx`` is one, else a gathered copy."""
    if idx.is_view:
        return idx.view(data, nb)
    arrays = idx.arrays()
    idx._check_bounds(arrays, "tile")
    return data[(slice(None),) * nb + tuple(np.broadcast_to(a, idx.out_shape) for a in arrays)]


def tile_write(idx: Index, data: np.ndarray, values, nb: int) -> None:
    """Write ``values`` (batched, of ``data``'s dtype) at ``idx`` of every program's tile."""
    if idx.is_view and (idx.basic is not None or not idx._overlaps(data[(0,) * nb])):
        tile_view(idx, data, nb)[...] = values
        return
    raise NotBatchable("scattered write into a tile")
