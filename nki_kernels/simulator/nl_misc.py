"""The rest of the first generation's ``nl``: ``nl.atomic_rmw`` (read-modify-write of HBM),
``nl.gather_flattened``, random numbers (``nl.random_seed``, ``nl.rand``, ``nl.dropout``),
``nl.static_cast``, ``nl.finfo`` / ``nl.fp32`` and ``nl.device_print``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import dtypes as dt
from .allocation import _allocate
from .core import Access, HBMTensor, Tile, current, current_or_none
from .dtypes import float32
from .errors import NKIError
from .instructions.dma import accumulate_into_hbm as _accumulate_into_hbm
from .instructions.operands import alu as _alu
from .tile_ops import _need_tile, _out_dtype, _result, _values
from .transfers import _as_access
from .values import _fit


def atomic_rmw(dst, value, op, *, mask=None):
    """Atomic read-modify-write of HBM, ``dst = op(dst, value)`` (``nl.atomic_rmw``).

    As the reference page documents, ``dst`` is an HBM tensor indexed with an indirect (dynamic)
    index (an SBUF tile of integer offsets) and ``op`` is ``np.add`` (or ``nl.add``). Each element
    update is atomic: offsets that repeat add every contribution, and programs of a grid may
    accumulate into the same rows without racing."""

    acc = _as_access(dst, "dst", "nl.atomic_rmw")
    if _alu(op) is not np.add:
        raise NKIError("atomic_rmw op", f"nl.atomic_rmw: op {getattr(op, '__name__', op)!r} is not supported; "
                       "the only atomic operation is np.add (nl.add)")
    if not any(isinstance(c, np.ndarray) and c.ndim for c in acc.index.comps):
        raise NKIError("atomic_rmw index", f"nl.atomic_rmw: dst {acc.tensor.name}{list(acc.shape)} is indexed "
                       "directly; atomic_rmw supports only indirect dynamic indexing (index an axis with an "
                       "SBUF tile of offsets, e.g. t[idx_tile, nl.arange(M)[None, :]])")
    if isinstance(value, (Access, HBMTensor)):
        raise NKIError("atomic_rmw value", "nl.atomic_rmw value is an HBM tensor; load it into SBUF first")
    mask = acc.local_mask(mask)
    vals = _fit(_values(value, "value"), acc.shape, "nl.atomic_rmw", f"{acc.tensor.name}{list(acc.shape)}")
    _accumulate_into_hbm(acc, vals, mask, "nl.atomic_rmw")


def gather_flattened(data, indices, *, dtype=None, mask=None):
    """Per-partition gather (``nl.gather_flattened``): ``out[p, j...] = data[p].flatten()[indices[p, j...]]``.

    Indices are unsigned integers addressing each partition's flattened free axes; an index
    outside ``[0, free size)`` is an error, as the hardware reads another partition's data."""
    d = _need_tile(data, "data", "nl.gather_flattened")
    i = _need_tile(indices, "indices", "nl.gather_flattened")
    if not np.issubdtype(i.dtype, np.integer):
        raise NKIError("gather indices", f"nl.gather_flattened: indices of dtype {i.dtype} must be integers")
    if d.shape[0] != i.shape[0]:
        raise NKIError("gather partitions", f"nl.gather_flattened: data {d.shape} and indices {i.shape} must "
                       "have the same partition size")
    flat = np.reshape(_values(d, "data"), (d.shape[0], -1))
    idx = np.reshape(np.asarray(_values(i, "indices")).astype(np.int64), (i.shape[0], -1))
    if idx.size and (idx.min() < 0 or idx.max() >= flat.shape[1]):
        raise NKIError("gather index range", f"nl.gather_flattened: an index ({int(idx.min())}..{int(idx.max())}) "
                       f"is outside the {flat.shape[1]} elements of a partition of data {d.shape}")
    out = np.take_along_axis(flat, idx, axis=1).reshape(i.shape)
    return _result(out, _out_dtype(dtype, d), mask, engine="GpSimd")


def _rng():
    """The running program's random generator (``nl.random_seed`` resets it), else NumPy's global one."""
    prog = current_or_none()
    if prog is None:
        return np.random
    if getattr(prog, "rng", None) is None:
        launch = getattr(prog, "launch", None)
        seed = getattr(launch, "seed", None)
        pid = tuple(int(i) for i in prog.pid) if seed is not None and not getattr(prog, "nb", 0) else None
        prog.rng = np.random.default_rng(None if pid is None else [seed, len(pid), *pid])
    return prog.rng


def random_seed(seed, *, mask=None):
    """Seed the random generator of ``nl.dropout`` / ``nl.rand`` for this program (``nl.random_seed``).

    ``seed`` is an int or a tile whose first element is the seed (the official samples pass a
    ``[1, 1]`` tile loaded from HBM). Same seed, same random stream."""
    if isinstance(seed, (Access, HBMTensor)):
        _values(seed, "seed")  # the HBM error (reading it as an array would index past its end)
    value = seed
    if isinstance(seed, Tile):
        value = np.asarray(_values(seed, "seed")).reshape(-1)
        if value.size == 0:
            raise NKIError("random_seed", f"nl.random_seed: the seed tile of shape {seed.shape} is empty")
        value = value[0]
    current().rng = np.random.default_rng(int(np.asarray(value).astype(np.int64)) & 0xFFFFFFFF)


def dropout(x, rate, dtype=None, *, mask=None):
    """Zero elements of ``x`` with probability ``rate`` (``nl.dropout``), no rescaling.

    ``rate`` is a scalar or a tile broadcasting against ``x`` (per-partition rates as a
    ``[P, 1]`` tile); draws come from the program's generator (see :func:`random_seed`)."""
    v = _values(x, "x")
    r = _values(rate, "rate")
    if isinstance(rate, Tile) and rate.ndim == 1 and isinstance(x, Tile) and x.ndim > 1:
        r = np.reshape(r, np.shape(r) + (1,) * (x.ndim - 1))
    keep = _rng().random(np.shape(v)) >= np.asarray(r, dtype=np.float64)
    return _result(np.where(keep, v, 0), _out_dtype(dtype, x), mask)


def rand(shape, dtype=None, *, buffer=None, name="", mask=None):
    """A new tile of uniform random values in ``[0, 1)`` (``nl.rand``), from the program's generator."""
    tile = _allocate(shape, dtype if dtype is not None else float32, buffer, 0, name)
    tile.data[...] = dt.cast(_rng().random(tile.data.shape, dtype=np.float32), tile.dtype)
    return tile


def static_cast(x, dtype):
    """``x`` converted to ``dtype`` (``nl.static_cast``): a tile in a kernel, or a NumPy array
    outside one (as the official tests prepare inputs: ``nl.static_cast(q, nl.bfloat16)``).
    Floats round to nearest even; float to int rounds and saturates like the engines do."""
    d = dt.as_dtype(dtype)
    if isinstance(x, Tile):
        return _result(_values(x, "x"), d, engine="Scalar")
    if isinstance(x, (Access, HBMTensor)):
        _values(x, "x")  # the HBM error
    return dt.cast(np.asarray(x), d)


class finfo:
    """Machine limits of a floating dtype (``nl.finfo``), ml_dtypes' bf16/fp8 included:
    ``min``, ``max``, ``eps``, ``tiny``, ``bits``, ``dtype``."""

    def __init__(self, dtype):
        d = dt.as_dtype(dtype)
        if not dt.is_float(d):
            raise TypeError(f"nl.finfo: dtype {d} is not a floating type (use numpy.iinfo for integers)")
        info = ml_dtypes.finfo(d)
        self.dtype = d
        self.bits = int(info.bits)
        self.min = float(info.min)
        self.max = float(info.max)
        self.eps = float(info.eps)
        self.tiny = float(info.tiny)

    def __repr__(self):
        return f"finfo(dtype={self.dtype}, min={self.min}, max={self.max}, eps={self.eps})"


fp32 = finfo(float32)  # nl.fp32.min is the most negative fp32, the samples' -inf stand-in


def device_print(prefix, x):
    """Print a tile's values (``nl.device_print``; the simulator prints them right away)."""
    print(prefix, x.data if isinstance(x, Tile) else x)
