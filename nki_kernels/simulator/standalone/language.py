"""``nki.language`` (``nl``) of the standalone ``nki`` package, on the simulator core.

The standalone package keeps the first generation's data model (buffers,
dtypes, ``nl.ndarray``, SPMD ids, loop ranges), so those are the very same
objects as :mod:`nki_kernels.simulator.language`: a tile made here is a
:class:`~nki_kernels.simulator.core.Tile` that first-generation code accepts
and vice versa. The element-wise and reduction functions (``nl.exp``,
``nl.add``, ``nl.sum`` ...) remain, documented as experimental high-level ops,
and double as the operator identifiers that ``nki.isa`` takes as ``op=``.

Differences from the first generation, per the current reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.language.html):

* ``nl.ds(start, size)`` builds a slice;
* ``nl.affine_range`` / ``sequential_range`` / ``static_range`` are deprecated
  aliases of ``range`` (the simulator keeps its checked ranges);
* ``nl.copy`` and ``nl.bypass`` are also activation identifiers
  (``nisa.activation(op=nl.copy)``);
* ``nl.tile_size`` gains ``psum_bank_fmax`` (``psum_fmax`` is its deprecated alias),
  ``psum_bank_fmax_bytes``, ``psum_num_banks``, ``sbuf_fmax_bytes``, ``sbuf_size_bytes``
  and alignment constants;
* the functions below whose current page differs from the first generation's in
  defaults or semantics (``softmax``, ``var``, ``zeros_like``, ``rand``,
  ``shared_identity_matrix``, ``device_print``, ``broadcast_to``, ``random_seed`` ...)
  wrap the shared implementation with the current behaviour.
"""

from __future__ import annotations

import builtins as _builtins

import numpy as np

from .. import core as _core
from .. import language as _gen1
from ..core import sbuf
from .. import buffers as _buffers
from ..errors import NKIError as _NKIError
from ..language import *  # noqa: F401,F403 - the shared surface (buffers, dtypes, ops, ranges)
from ..language import _allocate, _parse_shape  # noqa: F401 - used by the isa front end

# `from module import *` skips private helpers; these names are public API in both generations.
from ..language import (abs, all, any, copy, exp, identity, max, min, sum)  # noqa: F401,A004
from ..language import _CURRENT_ONLY  # names of the current page only, not first-generation ones
globals().update({_n: getattr(_gen1, _n) for _n in _CURRENT_ONLY})

# The current page's data types (float8_e4m3 and float8_e4m3fn distinct, packed MX types), the tensor
# type and the config base class: see nki_kernels.simulator.standalone.dtype / nki_tensor.
from ..nki_object import NKIObject  # noqa: E402,F401
from ..nki_tensor import NkiTensor  # noqa: E402,F401
from .dtype import *  # noqa: E402,F401,F403
from . import dtype as _dtypes  # noqa: E402

bool = bool_  # noqa: A001,F405 - nl.bool, as kernels spell it
# The page's type names: ``nl.MemoryRegion`` (sbuf, psum, private_hbm, shared_hbm; ``nl.sbuf`` ... are
# its members) and ``nl.DType``, the type of ``nl.float32`` ... (the page's stubs type them as
# strings; here each is the NumPy dtype the simulator stores it in, see .dtype).
MemoryRegion = _core.Buffer
DType = np.dtype
from ..scheduling import no_reorder  # noqa: E402,F401 - a block whose instructions keep program order
from .grid import tiles, blocks, alloc_tiles, alloc_blocks, NkiGrid, NkiTileGrid, NkiBlockGrid  # noqa: E402,F401


class _SbufOfTarget(type):
    """The SBUF fields of ``nl.tile_size``, read on the simulated target: SBUF is 24 MiB on NeuronCore-v2,
    28 MiB on v3 (Trn2) and 32 MiB on v4 (Trn3) over 128 partitions (the architecture guides), the
    capacity the memory model places tiles in (``buffers.sbuf_bytes``)."""

    @property
    def sbuf_fmax_bytes(cls):
        """SBUF bytes per partition ("maximum free dimension of a tile on SBUF buffer, in bytes")."""
        return _buffers.sbuf_bytes()

    @property
    def sbuf_fmax(cls):
        """The same in fp32 elements."""
        return _buffers.sbuf_bytes() // 4

    @property
    def sbuf_size_bytes(cls):
        """SBUF bytes over the 128 partitions ("total SBUF capacity in bytes (all partitions combined)")."""
        return _gen1.tile_size.pmax * _buffers.sbuf_bytes()

    @property
    def total_available_sbuf_size(cls):
        """Deprecated (NKI 0.4.0): "returns the usable SBUF free dimension per partition", sbuf_fmax_bytes."""
        return _buffers.sbuf_bytes()


class tile_size(_gen1.tile_size, metaclass=_SbufOfTarget):
    """Hardware tile limits (``nl.tile_size``), with the standalone package's byte-sized fields.
    ``psum_fmax`` is the deprecated name of ``psum_bank_fmax`` (fp32 elements of one PSUM bank); the
    SBUF fields follow the simulated target (:class:`_SbufOfTarget`)."""

    psum_bank_fmax = _gen1.tile_size.psum_fmax
    psum_bank_fmax_bytes = psum_bank_fmax * 4
    psum_fmax_bytes = psum_bank_fmax_bytes
    psum_num_banks = 8
    psum_min_align = 4
    sbuf_min_align = 4


def bypass(x):
    """The "no operation" ALU / activation identifier (``nl.bypass``): returns its input."""
    return x


bypass._np = lambda x: np.array(x, copy=True)


def average(x, axis, keepdims=False):
    """The "average" reduction operator identifier (``nl.average``), an ``op=`` of
    ``nisa.tensor_partition_reduce`` ("add, average, max, bitwise_or, bitwise_and"): the mean."""
    return np.mean(x, axis=axis, keepdims=keepdims)


average._np = average


def _op_function(op):
    """The NumPy function of an operator identifier, accepting the standalone-only ones."""
    if op is copy or op is _gen1.identity:
        return _gen1._UNARY["identity"]
    return _gen1.np_function(op)


def np_function(op):
    """The NumPy function behind an ``nl`` op (``nl.copy`` / ``nl.bypass`` included) or ufunc."""
    return _op_function(op)


# ---------------------------------------------------------------------------
# functions whose current page differs from the first generation's
# ---------------------------------------------------------------------------
def softmax(x, axis=-1, dtype=None, *, compute_dtype=None, mask=None):
    """Softmax over free ``axis`` of a tile (``nl.softmax``; the last axis unless given)."""
    return _gen1.softmax(x, axis, dtype=dtype, compute_dtype=compute_dtype, mask=mask)


def var(x, axis, dtype=None, keepdims=False, *, mask=None):
    """Variance over free ``axis`` of a tile (``nl.var``), fp32 statistics. The current page:
    "keepdims: currently ignored; result always has keepdims=True shape"."""
    return _gen1.var(x, axis, dtype, True, mask=mask)


def broadcast_to(x, shape, dtype=None):
    """``x`` broadcast to ``shape`` of the same rank (``nl.broadcast_to``): a view of ``x``, or a
    copy cast to ``dtype`` when that differs from ``x``'s."""
    shape = tuple(int(s) for s in shape)
    if isinstance(x, _core.Tile) and len(shape) != x.ndim:
        raise _NKIError("broadcast_to rank", f"nl.broadcast_to: shape {shape} has rank {len(shape)}, x has shape "
                        f"{x.shape} (rank {x.ndim}); the target shape must have the same rank as x")
    out = _gen1.broadcast_to(x, shape)
    d = _gen1.dt.as_dtype(dtype)
    if d is None or d == out.dtype:
        return out
    return _gen1._result(_gen1._values(out, "x"), d, engine="Vector")


def gather_flattened(data, indices, axis=0, dtype=None, *, mask=None):
    """Per-partition gather over the flattened free dims (``nl.gather_flattened``):
    ``out[p, j...] = data[p].flatten()[indices[p, j...]]``.

    The page describes one gather, whose indices "select from the free dimension of data" with one
    gather per partition; ``axis`` (default 0) names the partition axis those gathers run along,
    and no other value is described, so any other ``axis`` is an error rather than a guess."""
    if isinstance(axis, _builtins.bool) or not isinstance(axis, (int, np.integer)) or axis != 0:
        raise _NKIError("gather_flattened axis", f"nl.gather_flattened: axis={axis!r} is not supported; the gather "
                        "runs per partition (axis 0) over each partition's flattened free dims, so axis must be 0")
    return _gen1.gather_flattened(data, indices, dtype=dtype, mask=mask)


def zeros_like(x, dtype=None, buffer=None, name=""):
    """Zeros with the shape (and dtype unless given) of ``x`` (``nl.zeros_like``). The current page:
    buffer "defaults to sbuf", whatever memory ``x`` is in (``empty_like`` follows ``x``)."""
    return _gen1.zeros_like(x, dtype, sbuf if buffer is None else buffer, name)


def empty_like(x, dtype=None, buffer=None, name=""):
    """Uninitialised tensor with the shape, dtype and buffer of ``x`` unless given (``nl.empty_like``)."""
    return _gen1.empty_like(x, dtype, buffer, name)


def rand(shape, dtype, buffer=sbuf, name="", *, mask=None):
    """A new tensor of uniform random values in ``[0, 1)`` (``nl.rand``), from the program's generator."""
    return _gen1.rand(shape, dtype, buffer=buffer, name=name, mask=mask)


def shared_identity_matrix(n, dtype=_dtypes.uint8, dst=None):
    """An ``n`` x ``n`` identity matrix in SBUF (``nl.shared_identity_matrix``), ``nl.uint8`` unless
    ``dtype`` is given. With ``dst`` (an SBUF tensor of shape ``[n, n]``, as nki-library passes a
    preallocated one) the identity is written into ``dst``, which is returned."""
    ident = _gen1.identity_tile(n, dtype)
    if dst is None:
        return ident
    if not isinstance(dst, _core.Tile) or not _gen1.is_sbuf(dst):
        where = dst.buffer.name if hasattr(dst, "buffer") else type(dst).__name__
        raise _NKIError("shared_identity_matrix dst", f"nl.shared_identity_matrix: dst ({where}) must be an SBUF "
                        "tensor (the identity matrix is created in SBUF)")
    if tuple(dst.shape) != ident.shape:
        raise _NKIError("shared_identity_matrix dst", f"nl.shared_identity_matrix: dst of shape {tuple(dst.shape)} "
                        f"must have the identity's shape [n, n] = {list(ident.shape)}")
    dst[...] = ident
    return dst


def device_print(print_prefix, tensor):
    """Print ``print_prefix`` and the values of ``tensor`` (``nl.device_print``), in SBUF, PSUM or HBM
    (a whole HBM tensor or a region of one): "In CPU simulation, this prints immediately to stdout"."""
    if not isinstance(print_prefix, str):
        raise _NKIError("device_print prefix", f"nl.device_print: print_prefix must be a constant string, "
                        f"got {type(print_prefix).__name__}")
    if isinstance(tensor, _core.Access):
        tensor = tensor.index.read(tensor.tensor.data, None, what=tensor.tensor.name)
    elif isinstance(tensor, _core.HBMTensor):
        tensor = tensor.data
    _gen1.device_print(print_prefix, tensor)


def random_seed(seed, *, mask=None):
    """Seed the random generator of ``nl.rand`` / ``nl.dropout`` for this program (``nl.random_seed``):
    ``seed`` is "a [1,1] tensor on SBUF or PSUM with a 32-bit seed value"."""
    if not isinstance(seed, _core.Tile):
        where = f"a {seed.buffer.name} tensor" if isinstance(seed, (_core.HBMTensor, _core.Access)) else \
            type(seed).__name__
        raise _NKIError("random_seed seed", "nl.random_seed: seed must be a [1, 1] tensor on SBUF or PSUM, "
                        f"got {where}")
    if tuple(seed.shape) != (1, 1) or seed.dtype.itemsize != 4:
        raise _NKIError("random_seed seed", f"nl.random_seed: seed of shape {tuple(seed.shape)} and dtype "
                        f"{seed.dtype} must be a [1, 1] tensor holding one 32-bit seed value")
    return _gen1.random_seed(seed, mask=mask)


# Element types the nl.shared_constant page lists (tfloat32 is stored as float32).
_CONSTANT_DTYPES = tuple(getattr(_dtypes, n) for n in (
    "float32", "float16", "bfloat16", "int32", "int16", "int8", "uint32", "uint16", "uint8", "float8_e4m3fn",
    "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"))


def shared_constant(constant, dtype=None):
    """A read-only shared-HBM tensor holding ``constant`` (``nl.shared_constant``): a NumPy array or a
    ``.npy`` path, converted to ``dtype`` when given, of an element type the page lists."""
    t = _gen1.shared_constant(constant, dtype)
    if t.dtype not in _CONSTANT_DTYPES:
        raise _NKIError("shared_constant dtype", f"nl.shared_constant: a constant of shape {t.shape} and dtype "
                        f"{t.dtype} is not supported; element types: float32, float16, bfloat16, int32, int16, int8, "
                        "uint32, uint16, uint8, float8_e4m3fn, float8_e5m2, float8_e8m0fnu (and the packed x4 types)")
    return t


# Wrappers of batch-capable functions stay batch-capable (the rest run one program at a time).
_gen1._guard_module(globals(), {"ds", "bypass", "average", "np_function", "softmax", "var", "broadcast_to", "zeros_like",
                                "empty_like"}, "nl")


# PSUM tensors of the current API may span every PSUM bank of a partition: the current ``nl.tile_size``
# page says ``psum_fmax`` "does not represent the free-dim size per partition" (it is the bank size); a
# matmul result still fits one bank (``nisa.nc_matmul``).
globals().update({n: _core.psum_tensors_span_banks()(globals()[n]) for n in ("ndarray", "zeros", "ones", "full",
                                                                             "zeros_like", "empty_like")})

# First-generation names the current nki.language reference no longer lists (index expressions,
# SPMD grids, casts and helpers of the old API): not part of this namespace.
for _name in ("AffineExpr", "BExpr", "Mask", "NKIError", "NotBatchable", "PMAX", "arange", "mgrid", "nc",
              "par_dim", "spmd_dim", "loop_reduce", "static_cast", "finfo", "fp32", "full_like", "ones_like",
              "identity", "annotations"):
    globals().pop(_name, None)
del _name

__all__ = sorted({*_gen1.__all__, *_CURRENT_ONLY, *_dtypes.__all__, "NKIObject", "NkiTensor", "MemoryRegion", "DType", "no_reorder", "bool", "ds", "bypass", "average",
                  "shared_identity_matrix", "tile_size", "tiles", "blocks", "alloc_tiles",
                  "alloc_blocks", "NkiGrid", "NkiTileGrid", "NkiBlockGrid",
                  "np_function"})
__all__ = [n for n in __all__ if n in globals()]
