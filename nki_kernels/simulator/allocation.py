"""Allocating tensors: ``nl.ndarray`` / ``zeros`` / ``ones`` / ``full`` and their ``_like`` forms in
SBUF, PSUM or HBM (shared HBM outputs shared by the programs of a launch), tensors placed at given
bytes, shared constants, and the memory tests ``nl.is_sbuf`` ...

The tensors layer: above the data model and the memory model, below the instructions and the
``nl`` / ``nisa`` front ends.
"""

from __future__ import annotations

import numpy as np

from . import config as _config
from . import diagnostics as _diag
from . import dtypes as dt
from . import memory as _memory
from . import recording as _prof
from .core import Buffer, HBMTensor, Tile, current_or_none, hbm, par_dim, private_hbm, psum, sbuf, shared_hbm
from .core import uninitialised_tile as _uninitialised_tile
from .dtypes import uint8
from .errors import NKIError, NotBatchable


# ---------------------------------------------------------------------------
# Shapes of plain ints seen so far, each mapped to itself: a kernel allocates the same few shapes in
# its loops, and a tuple of NumPy integers (equal, with an equal hash) finds its Python-int form here.
_PLAIN_SHAPES = {}


def _parse_shape(shape):
    if type(shape) is tuple:
        try:
            hit = _PLAIN_SHAPES.get(shape)
        except TypeError:  # (an unhashable entry: the checks below report it)
            hit = None
        if hit is not None:
            return hit, 0
        if all(type(s) is int for s in shape):
            if len(_PLAIN_SHAPES) < 4096:
                _PLAIN_SHAPES[shape] = shape
            return shape, 0  # (plain ints, no par_dim)
    if isinstance(shape, (int, np.integer, par_dim)):
        shape = (shape,)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    if len(pdims) > 1:
        raise NKIError("par_dim", f"shape {shape} marks more than one partition dimension")
    return tuple(int(s) for s in shape), (pdims[0] if pdims else 0)


def _allocate(shape, dtype, buffer, fill=None, name="", address=None):
    shape, pdim = _parse_shape(shape)
    dtype = dt.as_dtype(dtype) if dtype is not None else dt.float32
    buffer = sbuf if buffer is None else buffer
    buffer, placement = _memory.resolve_buffer(buffer, address)
    if not isinstance(buffer, Buffer):
        raise NKIError("buffer", f"buffer={buffer!r} is not an NKI memory (nl.sbuf, nl.psum, nl.hbm, "
                       "nl.shared_hbm, nl.private_hbm, or an nki.compiler allocation)")
    if not buffer.on_chip:
        t = allocate_hbm(shape, dtype, buffer, fill, name)
        if placement is not None:  # (an HbmAddress: see placement.check_hbm_address)
            _memory.check_hbm_address(placement, t.data.nbytes, buffer, name, current_or_none())
        return t
    prog = current_or_none()
    if placement is not None and prog is not None and "force_auto_alloc" in prog.mem.flags:
        placement = None  # "This will ignore any direct allocation inside the kernel"
    if prog is not None and prog.nb:
        if placement is not None:
            raise NotBatchable("placed tensors live in per-program storage")
        # One tile per program, writeable like the per-program path (views of it write through); its
        # NaN fill deferred alike (a DMA from HBM into it then views HBM instead of copying).
        full = prog.bshape + shape
        if fill is None:
            return _uninitialised_tile(full, dtype, buffer, pdim)
        return Tile(np.zeros(full, dtype) if fill == 0 else np.full(full, fill, dtype), buffer, pdim)
    if placement is not None and prog is not None:
        return _placed(shape, pdim, dtype, buffer, placement, fill, name, prog)
    if fill is None:
        tile = _uninitialised_tile(shape, dtype, buffer, pdim)
    else:
        data = np.full(shape, fill, dtype)
        _prof.instruction("GpSimd", data)
        tile = Tile(data, buffer, pdim)
    if tile._mem is not None:
        _memory.declared(tile._mem, name)
    if fill is None:
        _diag.mark_uninitialised(tile)  # reads before a write are the `uninit` diagnostic
    return tile


def allocate_hbm(shape, dtype, buffer, fill, name):
    """Allocate an HBM tensor; inside a launch, shared_hbm tensors are shared by all programs."""
    prog = current_or_none()
    if prog is not None and buffer is shared_hbm:
        launch = prog.launch
        i = prog.shared_index
        prog.shared_index += 1
        if i < len(launch.shared):
            t = launch.shared[i]
            if t.shape != tuple(shape) or t.dtype != dtype:
                raise NKIError("shared_hbm", f"program {prog.pid} allocates shared_hbm tensor #{i} as "
                               f"{tuple(shape)} {dtype}, other programs as {t.shape} {t.dtype}")
            return t
        pre = launch.preallocated[i] if i < len(launch.preallocated) else None
        if pre is not None and pre.shape == tuple(shape) and pre.dtype == dtype and pre.flags.writeable:
            data = pre
            if fill is not None:
                data[...] = fill
        else:
            # Filled with the sentinel (NaN) even while reading a never-stored element is the `uninit`
            # error, though no kernel load can see it: the race check compares a store with what the
            # memory holds (a store of the value already there is benign, hbm_checks / lnc_checks),
            # and np.empty's stale bytes (an earlier array's values) made that verdict vary from run
            # to run (tests/test_lnc.py, a CI failure at 3d4abb1).
            data = _memory.uninitialised(shape, dtype) if fill is None else np.full(shape, fill, dtype)
        t = HBMTensor(data, buffer, name or f"out{i}")
        t.is_output = True
        t.uninit = fill is None  # loads of never-stored elements are the `uninit` diagnostic
        launch.shared.append(t)
        return t
    if prog is not None and prog.nb:
        raise NotBatchable(f"per-program {buffer!r} tensor")
    data = _memory.uninitialised(shape, dtype) if fill is None else np.full(shape, fill, dtype)
    t = HBMTensor(data, buffer, name or "hbm")
    t.is_output = True
    t.uninit = fill is None
    return t


def _placed(shape, pdim, dtype, buffer, placement, fill, name, prog):
    """A tensor on the bytes ``placement`` gives it (direct allocation): it aliases whatever else
    lives there, as on hardware (:mod:`.memory`)."""
    data, blocks = _memory.place(shape, pdim, dtype, placement, prog)
    if blocks is None:
        data, (part, lo) = data
        tile = Tile(data, buffer, pdim)
        rec = tile._mem
        _memory.mark_placed(rec, part, lo, shape[pdim])
    else:
        # Blocks live at unrelated addresses: the tensor is reached one block at a time, and
        # reading it whole raises (the deferred-value slot holds the error).
        tile = Tile(np.broadcast_to(np.zeros((), dtype), shape), buffer, pdim)
        tile._thunk = (_memory.whole_block_tensor, (), shape, dtype)
        rec = tile._mem
        rec.place, rec.tiles = blocks, {}
    _memory.declared(rec, name)  # never taken for the result of the instruction counted just before
    if fill is not None:
        for b in (blocks or ((),)):
            tile[b + (...,)] = fill
    elif blocks is None:
        _diag.mark_uninitialised(tile)
    return tile


def ndarray(shape, dtype, buffer=None, name="", address=None, *, lazy_initialization=False):
    """Allocate an uninitialised tensor in ``buffer`` (default SBUF; HBM for kernel outputs).

    ``buffer`` may be an ``nki.compiler`` allocation (``ncc.sbuf.mod_alloc(...)``), and
    ``address=(partition_offset, free_offset)`` (standalone ``nki``) places an SBUF/PSUM tensor
    at those bytes; placed tensors share storage where their bytes overlap."""
    return _allocate(shape, dtype, buffer, None, name, address)


def zeros(shape, dtype, buffer=None, name="", *, lazy_initialization=False):
    """A tensor of zeros (``nl.zeros``). ``lazy_initialization`` (a scheduling hint of the official
    samples) does not change the values."""
    return _allocate(shape, dtype, buffer, 0, name)


def ones(shape, dtype, buffer=None, name="", *, lazy_initialization=False):
    """A tensor of ones (``nl.ones``)."""
    return _allocate(shape, dtype, buffer, 1, name)


def full(shape, fill_value, dtype, buffer=None, name="", *, lazy_initialization=False):
    """A tensor filled with ``fill_value`` (``nl.full``)."""
    return _allocate(shape, dtype, buffer, fill_value, name)


def _like(a, dtype, buffer, fill):
    buf = buffer if buffer is not None else getattr(a, "buffer", sbuf)
    return _allocate(a.shape, dtype if dtype is not None else a.dtype, buf, fill)


def zeros_like(a, dtype=None, buffer=None, name=""):
    """Zeros with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, 0)


def ones_like(a, dtype=None, buffer=None, name=""):
    """Ones with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, 1)


def full_like(a, fill_value, dtype=None, buffer=None, name=""):
    """``fill_value`` with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, fill_value)


def empty_like(a, dtype=None, buffer=None, name=""):
    """Uninitialised tensor with the shape (and dtype, buffer unless given) of ``a``."""
    return _like(a, dtype, buffer, None)


def shared_constant(constant, dtype=None):
    """An HBM tensor holding ``constant`` (``nl.shared_constant``): a NumPy array or the path of
    a ``.npy`` file, converted to ``dtype`` when given. It is read-only: stores into it raise."""
    if isinstance(constant, (str, bytes)) or hasattr(constant, "__fspath__"):
        constant = np.load(constant)
    data = np.array(constant)
    if dtype is not None:
        data = dt.cast(data, dt.as_dtype(dtype))
    data.flags.writeable = False
    t = HBMTensor(data, shared_hbm, "shared_constant")
    t.constant = True  # (compile-time data: nl.store names the rule instead of NumPy's read-only error)
    return t


def shared_identity_matrix(n, dtype=uint8):
    """An ``n`` x ``n`` identity matrix (``nl.shared_identity_matrix``), dtype "default to be np.uint8".

    The first generation's page gives it "the same behavior to nki.language.shared_constant": a
    read-only shared HBM tensor, which kernels bring on chip with ``nl.load`` (the documentation's
    modulo-allocation tests do). The standalone API's identity lives in SBUF (:func:`identity_tile`)."""
    return shared_constant(np.eye(int(n), dtype=np.float32), dtype)


def identity_tile(n, dtype=uint8):
    """An ``n`` x ``n`` identity matrix in a new SBUF tile (the standalone ``nl.shared_identity_matrix``)."""
    tile = _allocate((int(n), int(n)), dtype, sbuf, 0)
    tile.data[...] = np.eye(int(n), dtype=tile.dtype)
    return tile


def _memory_is(buffer, what, *buffers):
    buf = buffer if isinstance(buffer, Buffer) else getattr(buffer, "buffer", None)
    if buf is None:
        raise TypeError(f"nl.{what}: buffer must be a memory region (nl.sbuf, nl.psum, nl.hbm ...) or an NKI "
                        f"tensor, got {type(buffer).__name__}")
    return buf in buffers


def is_psum(buffer):
    """Whether ``buffer`` (a memory region, or a tensor's) is in PSUM (``nl.is_psum``)."""
    return _memory_is(buffer, "is_psum", psum)


def is_sbuf(buffer):
    """Whether ``buffer`` (a memory region, or a tensor's) is in SBUF (``nl.is_sbuf``)."""
    return _memory_is(buffer, "is_sbuf", sbuf)


def is_hbm(buffer):
    """Whether ``buffer`` (a memory region, or a tensor's) is device memory, any HBM flavour (``nl.is_hbm``)."""
    return _memory_is(buffer, "is_hbm", hbm, shared_hbm, private_hbm)


def is_on_chip(buffer):
    """Whether ``buffer`` (a memory region, or a tensor's) is SBUF or PSUM (``nl.is_on_chip``)."""
    return _memory_is(buffer, "is_on_chip", sbuf, psum)
