"""Resolve NKI index expressions (ints, slices, affine ``nl.arange`` arrays) against a shape.

An index expression is what a kernel writes inside ``tensor[...]``: ints,
slices, and integer arrays built from ``nl.arange`` / ``nl.mgrid`` /
``program_id`` arithmetic, broadcast against each other (``[:, None]``). The
resolved :class:`Index` knows the shape of the tile it selects and reads or
writes it either as a NumPy *view* (when every array is an arithmetic
progression along its own axis, which is what affine index expressions are) or
by gathering/scattering (anything else, and masked edges).
"""

from __future__ import annotations

import numpy as np

from .errors import NKIError


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class Index:
    """A resolved index into an array of ``shape``; ``out_shape`` is the selected tile's shape."""

    __slots__ = ("shape", "out_shape", "basic", "perm", "arrays")

    def __init__(self, shape, out_shape, basic=None, perm=None, arrays=None):
        if basic is not None and basic and all(isinstance(b, int) for b in basic):
            # All-int NumPy indexing returns a scalar copy, not a view: select a 1-element slice.
            basic = basic[:-1] + (slice(basic[-1], basic[-1] + 1),)
        self.shape = shape
        self.out_shape = out_shape
        self.basic = basic  # tuple usable as a NumPy basic index, or None
        self.perm = perm  # axes permutation applied to the basic view, or None
        self.arrays = arrays  # broadcast integer arrays (gather path)

    # -- reading / writing -------------------------------------------------
    def view(self, data: np.ndarray) -> np.ndarray:
        """The selected region as a view of ``data`` (basic path only)."""
        v = data[self.basic]
        if self.perm is not None:
            v = v.transpose(self.perm)
        return v.reshape(self.out_shape)

    def read(self, data: np.ndarray, mask=None, what="tensor") -> np.ndarray:
        """Values at the index (masked-off elements are zero); a view when possible."""
        mask = _full_mask(mask, self.out_shape)
        if mask is None and self.basic is not None:
            return self.view(data)
        arrays = self._arrays()
        out = np.zeros(self.out_shape, data.dtype)
        if mask is None:
            self._check_bounds(arrays, None, what)
            return data[arrays]
        sel = tuple(np.broadcast_to(a, self.out_shape)[mask] for a in arrays)
        self._check_bounds(sel, None, what)
        out[mask] = data[sel]
        return out

    def write(self, data: np.ndarray, values: np.ndarray, mask=None, what="tensor") -> None:
        """Write ``values`` (already of the destination dtype, broadcastable) at the index."""
        mask = _full_mask(mask, self.out_shape)
        if mask is None and self.basic is not None:
            self.view(data)[...] = values
            return
        arrays = self._arrays()
        values = np.broadcast_to(values, self.out_shape)
        if mask is None:
            self._check_bounds(arrays, None, what)
            data[arrays] = values
            return
        sel = tuple(np.broadcast_to(a, self.out_shape)[mask] for a in arrays)
        self._check_bounds(sel, None, what)
        data[sel] = values[mask]

    def element_indices(self, mask=None):
        """Flat indices (into ``shape``) of the elements this index touches, honouring the mask."""
        arrays = tuple(np.broadcast_to(a, self.out_shape) for a in self._arrays())
        mask = _full_mask(mask, self.out_shape)
        if mask is not None:
            arrays = tuple(a[mask] for a in arrays)
        return np.ravel_multi_index(tuple(a.ravel() for a in arrays), self.shape)

    # -- helpers -----------------------------------------------------------
    def _arrays(self):
        if self.arrays is None:
            # Materialise the basic index as explicit arrays (used only on the slow path).
            grids = np.indices(self.shape, sparse=True)
            self.arrays = tuple(self.view(g) for g in np.broadcast_arrays(*grids))
        return self.arrays

    def _check_bounds(self, arrays, _mask, what):
        for axis, (a, dim) in enumerate(zip(arrays, self.shape)):
            if a.size and (a.min() < 0 or a.max() >= dim):
                bad = a[(a < 0) | (a >= dim)]
                raise NKIError(
                    "out-of-bounds access",
                    f"index {int(bad.flat[0])} on axis {axis} of {what} with shape "
                    f"{tuple(self.shape)} is outside [0, {dim}); mask it with mask=",
                )


def _full_mask(mask, out_shape):
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        m = m.astype(bool)
    try:
        m = np.broadcast_to(m, out_shape)
    except ValueError:
        raise NKIError(
            "mask shape", f"mask of shape {m.shape} does not broadcast to the tile shape {tuple(out_shape)}"
        ) from None
    if m.all():
        return None
    return m


def _progression(a: np.ndarray):
    """(start, step) if ``a`` varies along exactly one axis as an arithmetic progression."""
    axes = [ax for ax, s in enumerate(a.shape) if s != 1]
    if len(axes) != 1:
        return None
    v = a.reshape(-1)
    start = int(v[0])
    step = int(v[1] - v[0]) if v.size > 1 else 1
    if step == 0:
        return None
    if v.size > 2 and not np.array_equal(v, start + step * np.arange(v.size)):
        return None
    return axes[0], start, step


def resolve(shape, key, what="tensor") -> Index:
    """Resolve ``key`` (what a kernel wrote in ``t[...]``) against an array of ``shape``."""
    shape = tuple(int(s) for s in shape)
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
            if k < 0:
                k += dim
            if not 0 <= k < dim:
                raise NKIError("out-of-bounds access",
                               f"index {k} on axis {axis} of {what} with shape {shape} is outside [0, {dim})")
            comps.append(k)
        elif isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step
            step = 1 if step is None else int(step)
            start = 0 if start is None else int(start) + (dim if int(start) < 0 else 0)
            stop = dim if stop is None else int(stop) + (dim if int(stop) < 0 else 0)
            if step <= 0 or start > stop:
                raise NKIError("index type", f"slice {start}:{stop}:{step} on axis {axis} of {what} "
                               "must have a positive step and start <= stop")
            comps.append(slice(start, stop, step))
        elif isinstance(k, np.ndarray) and np.issubdtype(k.dtype, np.integer):
            comps.append(k)
        elif hasattr(k, "data") and hasattr(k, "buffer"):
            raise NKIError("dynamic index",
                           f"indexing {what} with a tile's values (dynamic/indirect access) is not supported "
                           "by the simulator")
        else:
            raise NKIError("index type", f"cannot index {what} with {type(k).__name__} {k!r}")

    arrays = [c for c in comps if isinstance(c, np.ndarray)]
    in_bounds = all(c.stop <= dim for c, dim in zip(comps, shape) if isinstance(c, slice))
    if not arrays and in_bounds:
        out_shape = tuple(len(range(c.start, c.stop, c.step)) for c in comps if isinstance(c, slice))
        return Index(shape, out_shape, basic=tuple(comps))

    # Mixed slices and arrays: a slice takes its own axis among the non-int positions.
    nonint = [i for i, c in enumerate(comps) if not isinstance(c, int)]
    rank = max([a.ndim for a in arrays] + [len(nonint)])
    for j, i in enumerate(nonint):
        c = comps[i]
        if isinstance(c, slice):
            shp = [1] * rank
            ax = rank - len(nonint) + j
            shp[ax] = len(range(c.start, c.stop, c.step))
            comps[i] = np.arange(c.start, c.stop, c.step).reshape(shp)
    try:
        out_shape = np.broadcast_shapes(*(c.shape for c in comps if isinstance(c, np.ndarray)))
    except ValueError:
        raise NKIError("index shape", f"index arrays of shapes "
                       f"{[c.shape for c in comps if isinstance(c, np.ndarray)]} do not broadcast") from None
    rank = len(out_shape)

    basic, used_axes, ok = [], [], True
    for axis, c in enumerate(comps):
        if isinstance(c, int):
            basic.append(c)
            continue
        if c.size == 1:
            basic.append(int(c.reshape(-1)[0]))
            continue
        prog = _progression(c)
        if prog is None:
            ok = False
            break
        ax, start, step = prog
        ax += rank - c.ndim
        n = c.shape[ax - (rank - c.ndim)]
        last = start + step * (n - 1)
        if ax in used_axes or min(start, last) < 0 or max(start, last) >= shape[axis]:
            ok = False  # out of bounds or two arrays on one axis: the gather path checks/handles it
            break
        used_axes.append(ax)
        stop = start + step * n
        basic.append(slice(start, stop if stop >= 0 else None, step))
    fancy = tuple(c if isinstance(c, np.ndarray) else np.asarray(c) for c in comps)
    if not ok:
        return Index(shape, out_shape, arrays=fancy)
    order = sorted(range(len(used_axes)), key=lambda i: used_axes[i])
    perm = None if order == list(range(len(order))) else tuple(order)
    idx = Index(shape, out_shape, basic=tuple(basic), perm=perm)
    idx.arrays = None
    return idx
