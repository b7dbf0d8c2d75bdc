"""Tensors in device memory (HBM): kernel arguments and outputs, and the regions ``nl.load`` /
``nl.store`` and DMAs move.

* ``HBMTensor``: a tensor in HBM (its NumPy array); ``t[...]`` gives an :class:`Access`, resolved
  once per program (or once for a whole batch of programs, :func:`.indexing.resolve_batched`);
* ``Access``: an indexed region of one (``q[b, h][rows, cols]`` stays one region of ``q``).

Engines compute on SBUF/PSUM only: arithmetic on either is an NKI error. :mod:`.core` re-exports
these names.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import indexing as _indexing
from .buffers import hbm
from .context import _tls
from .errors import NKIError, NotBatchable
from .indexing import _whole_index, compose, full_mask, resolve, resolve_batched
from .nki_tensor import NkiTensor
from .program import flush_pending

# (bound by assignment, not import: CPython compiles ``name.get(...)`` of an imported name as a module
# attribute lookup, which makes a bound method per call; this keeps the dict's LOAD_METHOD)
_WHOLE_INDEX = _indexing._WHOLE_INDEX


class _InHBM:
    """Arithmetic on something in HBM is an NKI error (engines only read SBUF/PSUM), not NumPy math."""

    __array_ufunc__ = None

    def _no_compute(self, *_):
        raise NKIError("compute on HBM", f"{self._label()} of shape {self.shape} lives in HBM; load it into "
                       "SBUF with nl.load before computing on it")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_compute
    __truediv__ = __rtruediv__ = __pow__ = __neg__ = _no_compute


class Borrowers:
    """The tiles viewing an HBM tensor's memory copy-on-write (``nl.load``'s tiles, a DMA into a fresh
    tile): a set of weak references, as a ``weakref.WeakSet`` holds them, without its Python-level
    removal callback when each tile dies and its add, two calls per load. Dead references are
    dropped when the set is tested or read, and as it grows (an input loaded in a long loop)."""

    __slots__ = ("_refs",)

    def __init__(self):
        self._refs = {}  # id(tile) -> weak reference (a dead tile's id reused by a new one is replaced)

    def add(self, tile) -> None:
        """Add a live tile."""
        refs = self._refs
        n = len(refs)
        if n >= 64 and not n & (n - 1):
            self._drop_dead()
        refs[id(tile)] = weakref.ref(tile)

    def _drop_dead(self) -> None:
        refs = self._refs
        for k in [k for k, r in refs.items() if r() is None]:
            del refs[k]

    def __len__(self) -> int:
        self._drop_dead()
        return len(self._refs)

    def __iter__(self):
        return iter([t for t in (r() for r in self._refs.values()) if t is not None])

    def clear(self) -> None:
        """Forget every tile."""
        self._refs.clear()


class HBMTensor(_InHBM, NkiTensor):
    """A tensor in device memory (kernel inputs and ``nl.ndarray(..., buffer=nl.shared_hbm)``)."""

    is_output = False  # allocated by the launch (shared_hbm outputs), not a kernel argument

    def __init__(self, data: np.ndarray, buffer=hbm, name: str = "tensor"):
        self.data = data
        self.buffer = buffer
        self.name = name
        self._borrowers = Borrowers()
        self.written = None  # optional per-element write tracking (diagnostics)

    @property
    def shape(self):
        """Shape of the tensor."""
        return tuple(self.data.shape)

    @property
    def dtype(self):
        """Element dtype (a NumPy dtype; ml_dtypes for bf16/fp8)."""
        return self.data.dtype

    @property
    def ndim(self):
        """Number of dimensions."""
        return self.data.ndim

    def __len__(self):
        return self.data.shape[0]

    def reshape(self, *shape_args, shape=None):
        """A view of the same HBM memory with another shape (same number of elements);
        ``t.reshape((a, b))``, ``t.reshape(a, b)`` and ``t.reshape(shape=(a, b))`` as documented."""
        if shape is not None and shape_args:
            raise TypeError("reshape: give the shape positionally or as shape=, not both")
        # A view of the same storage (NkiTensor.reshape): never a silent copy that writes would miss.
        return NkiTensor.reshape(self, *(shape_args if shape is None else (shape,)))

    def __getitem__(self, key):
        prog = _tls.program
        if prog is not None and prog.nb:
            idx = resolve_batched(self.shape, key, self.name, prog.bshape)
            if idx is not None:
                return Access(self, idx, prog.nb)
        if key is Ellipsis:  # (a whole-tensor DMA operand: no key to parse)
            # One Access per tensor (an Access is not changed once made; its index is that of the
            # tensor's shape, checked in case the tensor's data was replaced).
            acc = self.__dict__.get("_whole")
            shape = self.data.shape
            if acc is not None and acc.index.shape == shape:
                return acc
            idx = _WHOLE_INDEX.get(shape)
            acc = self._whole = Access(self, idx if idx is not None else _whole_index(shape, self.name))
            return acc
        return Access(self, resolve(self.shape, key, self.name))

    def materialize_borrowers(self):
        """Give every tile still viewing this tensor its own copy before it is written."""
        flush_pending()
        for tile in list(self._borrowers):
            tile.own()
        self._borrowers.clear()

    def __repr__(self):
        return f"HBMTensor({self.name}, shape={self.shape}, dtype={self.dtype}, buffer={self.buffer!r})"

    def _label(self):
        return self.name


class Access(_InHBM, NkiTensor):
    """An indexed region of an HBM tensor, the argument of ``nl.load`` / ``nl.store``."""

    def __init__(self, tensor: HBMTensor, index, nb: int = 0):
        self.tensor = tensor
        self.index = index
        self.nb = nb  # leading batch axes of index.out_shape (a batch of programs' regions)
        self.within = None  # for t[a][b]: the index b when it may leave t[a] (see local_mask)

    @property
    def shape(self):
        """Shape of the selected region (of one program)."""
        return tuple(self.index.out_shape[self.nb:])

    @property
    def dtype(self):
        """Element dtype of the tensor."""
        return self.tensor.dtype

    @property
    def buffer(self):
        """Memory of the underlying tensor."""
        return self.tensor.buffer

    def __getitem__(self, key):
        """A region of this region (``q[b, h][rows, cols]``), still one access of the tensor."""
        if self.nb:
            raise NotBatchable("an access of a batch of programs indexed again")
        child = resolve(self.shape, key, self._label())
        acc = Access(self.tensor, compose(self.index, child))
        if not child.is_view:  # reaches outside this region: checked against the mask on use
            acc.within = child
        return acc

    def local_mask(self, mask):
        """``mask`` as a load/store of this access uses it: in the tile's axes (see
        ``Index.adapt_mask``), checked to keep a region of a region inside the outer region."""
        mask = self.index.adapt_mask(mask)
        child = self.within
        if child is not None:
            m = full_mask(mask, child.out_shape)
            arrays = [np.broadcast_to(a, child.out_shape) for a in child.arrays()]
            child._check_bounds([a if m is None else a[m] for a in arrays], f"the region of {self.tensor.name}")
        return mask

    def _label(self):
        return f"{self.tensor.name}[...]"
