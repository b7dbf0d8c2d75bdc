"""Operands and destinations of the instructions: the checks and the write every instruction shares.

* :func:`instruction` marks a function as one engine instruction (one program at
  a time: a vectorised batch of programs falls back to running them singly;
  defined in :mod:`.declaration`);
* :func:`check_dst` / :func:`tile_operand`: a destination or an operand is a tile
  in an allowed memory (an :class:`NKIError` naming the rule otherwise);
* :func:`write`: the one write into a tile (:func:`.core.write`, re-exported): round
  computed values to ``dst.dtype`` and write them into ``dst`` (a tile or a view of
  one), leaving elements that ``mask`` excludes unmodified, as the reference pages
  state for ``dst=`` instructions;
* :func:`partition_range`: where a tile view starts in its partitions (the
  quadrant rules of cross-partition instructions need it);
* :func:`alu` / :func:`reducer`: the NumPy function behind an operator given as
  ``op=`` (``nl.*`` and ``np.*`` names of the "Supported Math Operators" table,
  ``nl.max`` / ``np.max`` / ``np.min`` / ``np.sum`` as reductions and
  ``nl.copy`` / ``np.copy`` as the identity; defined in :mod:`.operators`).
"""

from __future__ import annotations


import warnings

import numpy as np

from .. import config as _config
from .. import core
from .. import psum_record as _psum_record
from ..context import _tls  # (the running state without a call, on the per-instruction path)
from .. import diagnostics as _diag
from .. import memory as _memory
from .. import dtypes as dt
from ..core import Access, HBMTensor, Tile, psum, sbuf
# The one write into a tile, which every instruction's dst= write takes (its fast branch included).
from ..core import write  # noqa: F401
from ..errors import NKIError, NotBatchable
from ..index_expr import Mask
# The declaration of an instruction and the operator tables live in their own modules; their names
# stay importable from here, where the instructions import them with the operand checks.
from .declaration import first_generation, instruction  # noqa: F401
from .target import get_nc_version, nc_version
# The record of which PSUM elements hold a value lives below the data model (the one write path marks it).
from ..values import fit_dst, per_partition  # noqa: F401 - (the one write path fits with them)
from ..psum_record import (_WHOLE_VIEWS_MAX, _all_written, _index_of, _offset_in_root, _psum_written,  # noqa: F401
                           _region_key, _region_mask, _view_written, _written_mask, psum_state, root_of)
from .operators import (BITVEC, _ALU, _NL_REDUCTIONS, _NUMPY_ALIASES, _REDUCERS, _alu,  # noqa: F401
                        _identity, alu, bitvec_on_integers, identity_of, is_bitvec, reducer)

ON_CHIP = (sbuf, psum)
_F32 = np.dtype(np.float32)


class lazy_text(tuple):
    """``lazy_text((fmt, *args))`` shows as ``fmt.format(*args)``, formatted only when shown: an error
    message's detail that an instruction would otherwise build on every call (a tuple: made without
    a Python-level call)."""

    __slots__ = ()

    def __str__(self):
        return self[0].format(*self[1:])


def names(buffers):
    """``"SBUF or PSUM"`` for a tuple of memories."""
    return " or ".join(b.name.upper() for b in buffers)


# Tell the diagnostics (uninitialised reads, loop-carried dependencies) that an op reads a tile: the
# one read hook itself, under the name the instructions know (an alias: no call of its own).
mark_read = _diag.read


def tile_operand(x, name, op, buffers=ON_CHIP):
    """``x`` as an on-chip operand tile in one of ``buffers`` (read for the diagnostics)."""
    if isinstance(x, (Access, HBMTensor)):
        t = x.tensor if isinstance(x, Access) else x
        raise NKIError("operand memory", f"nisa.{op}: {name} ({t.name}, shape {tuple(x.shape)}) is in HBM; this "
                       f"operand must be in {names(buffers)} (move it with nisa.dma_copy first)")
    if not isinstance(x, Tile):
        raise NKIError("operand type", f"nisa.{op}: {name} must be a tile, got {type(x).__name__}")
    if x.buffer not in buffers:
        raise NKIError("operand memory", f"nisa.{op}: {name} (shape {x.shape}) is in {x.buffer.name.upper()}; "
                       f"this operand must be in {names(buffers)}")
    mark_read(x)
    return x


def check_dst(dst, op, buffers=ON_CHIP):
    """``dst`` must be a tile (or a view of one) in one of ``buffers``."""
    if type(dst) is Tile and dst.buffer in buffers:  # (the common case, without the isinstance tests)
        return dst
    if isinstance(dst, (Access, HBMTensor)):
        raise NKIError("dst memory", f"nisa.{op}: dst ({dst._label()}, shape {tuple(dst.shape)}) is in HBM; "
                       f"this instruction writes {names(buffers)} (use nisa.dma_copy to reach HBM)")
    if not isinstance(dst, Tile):
        raise NKIError("dst type", f"nisa.{op}: dst must be a tile allocated with nl.ndarray (or a view of "
                       f"one), got {type(dst).__name__}")
    if dst.buffer not in buffers:
        raise NKIError("dst memory", f"nisa.{op}: dst (shape {dst.shape}) is in {dst.buffer.name.upper()}; "
                       f"this instruction must write {names(buffers)}")
    return dst


def no_gpsimd_psum(eng, op, *tiles):
    """GpSimd cannot access PSUM (NeuronCore-v2 Compute Engines): a PSUM operand on GpSimd is an error."""
    if eng in ("GpSimd", "gpsimd"):
        for t in tiles:
            if isinstance(t, Tile) and t.buffer is psum:
                raise NKIError("operand memory", f"nisa.{op}: engine=GpSimd cannot access PSUM (a tile of shape "
                               f"{t.shape} is in PSUM); use the Vector or Scalar engine")


def rows(values, parts, nb=0):
    """``values`` as ``[parts, elements per partition]`` (after ``nb`` leading batch axes, kept)."""
    return np.reshape(values, values.shape[:nb] + (parts, -1) if nb else (parts, -1))


def values_of(x, name, op, buffers=ON_CHIP):
    """The fp32 compute view of operand tile ``x`` as ``[partitions, elements]`` (in a batch of
    programs, after the batch axes its tiles carry)."""
    t = tile_operand(x, name, op, buffers)
    return rows(dt.compute_view(t.data), t.shape[0], t.nb).astype(np.float32, copy=False)


def column(v, parts, name, op):
    """A scalar or a [P, 1] tile operand as an fp32 ``[parts, 1]`` column (one value per partition;
    a tile's batch axes kept)."""
    if isinstance(v, Tile):
        t = tile_operand(v, name, op)
        if t.shape[0] != parts or per_partition(t.shape) != 1:
            raise NKIError("operand shapes", f"nisa.{op}: {name} must be a scalar or a [{parts}, 1] tile, got "
                           f"shape {t.shape}")
        return rows(dt.compute_view(t.data), parts, t.nb).astype(np.float32)
    return np.full((parts, 1), np.float32(v))


def one_per_partition(t, parts, name, op):
    """A ``reduce_res``-like output "of shape (data.shape[0], 1)": ``parts`` partitions, one element each."""
    if t is not None and hasattr(t, "shape") and (t.shape[0] != parts or per_partition(t.shape) != 1):
        raise NKIError("operand shapes", f"nisa.{op}: {name} has shape {tuple(t.shape)}; it must be a tile of shape "
                       f"({parts}, 1): one element per partition of the data")


def same_rows(op, a, an, b, bn):
    """``a`` and ``b`` occupy the same partitions and elements per partition."""
    if a.shape[0] != b.shape[0] or per_partition(a.shape) != per_partition(b.shape):
        raise NKIError("operand shapes", f"nisa.{op}: {an} {a.shape} and {bn} {b.shape} must occupy the same "
                       "number of partitions and the same number of elements per partition")


# ---------------------------------------------------------------------------
# writing a destination
# ---------------------------------------------------------------------------
class scratch:
    """``with scratch():`` computes without registering new tiles with the program: intermediates
    that only live until they are copied into ``dst`` have no hardware buffer and must not count
    against the program's SBUF/PSUM capacity. A batch of programs has no capacity model and stays
    current, so the intermediates carry its axes. (A class, not a generator: it runs once per instruction.)"""

    __slots__ = ("prog",)

    def __enter__(self):
        self.prog = prog = core.current_or_none()
        if prog is None or not prog.nb:  # (in a batch, intermediates carry its axes like every tile made there)
            core.set_current(None)

    def __exit__(self, *exc):
        core.set_current(self.prog)
        return False


def max_rank(op, limit, **operands):
    """Refuse an operand (by keyword name) of rank over ``limit``, partition axis included: the Neuron 2.33
    (NKI 0.7.0) ISA pages state a rank limit per instruction ("can have at most three free dimensions
    (maximum rank 4, including the partition dimension)", nki.isa.tensor_scalar_reduce). Current-API kernels
    only: the first generation's pages state none."""
    prog = _tls.program
    if prog is None or not prog.current_api:
        return
    for name, t in operands.items():
        shape = getattr(t, "shape", None)
        if shape is not None and len(shape) > limit:
            raise NKIError("rank", f"nisa.{op}: {name} {tuple(shape)} has rank {len(shape)}; it can have at most "
                           f"{limit - 1} free dimensions (maximum rank {limit}, including the partition dimension)")


def partition_range(tile):
    """``(start, count)``: the partitions of its allocation that a tile (or a view of one) covers."""
    root = root_of(tile)
    count = tile.shape[0] if tile.shape else 1
    if tile is root:
        return 0, count
    off = _offset_in_root(tile, root)
    if off is None:
        return 0, count
    pdim = root.pdim
    coords = np.unravel_index(off, root._raw().shape) if root._raw().size else (0,) * root._raw().ndim
    start = int(coords[pdim]) if len(coords) > pdim else 0
    pstride = root._raw().strides[pdim] if root._raw().ndim > pdim else 0
    if tile._raw().ndim and pstride and tile._raw().strides[0] == 0:
        count = 1
    return start, count


def compute_into(dst, fn, a, b, dtype, engine, op):
    """``write(dst, dt.cast(fn(a, b), dtype), op)`` with the ``engine`` instruction counted once its
    values exist: a NumPy ufunc on fp32 operands of an fp32 SBUF tile's shape computes straight into
    the tile (the one write path's fast branch, :func:`.core.write`)."""
    write(dst, a, op, compute=(fn, b, dtype, engine))


def borrow(dst, tensor, a) -> bool:
    """A DMA of ``a`` (a view of HBM ``tensor``'s memory, of ``dst``'s shape and dtype, batch axes
    included) into all of a fresh plain SBUF tile ``dst`` (its deferred fill pending: nothing has read
    or viewed it yet):
    ``dst`` views HBM copy-on-write instead of copying, as ``nl.load``'s tiles do (the first write to
    either side gives the tile its own copy), with :func:`write`'s bookkeeping. Returns False, having
    done nothing, otherwise."""
    data = dst._data
    m = dst._mem
    thunk = dst._thunk
    if not (type(dst) is Tile and dst._parent is None and dst.buffer is sbuf
            and thunk is not None and thunk[0] is core.fill_sentinel and not thunk[1][1]
            and (m is None or (m.tiles is None and m.place is None))
            and type(a) is np.ndarray and a.base is not None and a.shape == data.shape and a.dtype is data.dtype):
        return False
    prog = _tls.program
    if prog is not None and prog.pending is not None:
        core.flush_pending()
    view = a.view()
    view.flags.writeable = False
    dst._thunk = None
    dst._data = view
    tensor._borrowers.add(dst)
    dst._written = None
    if m is not None:
        _memory.copied(m)
    core.wrote_whole(dst, view, m, prog, view)
    return True


def psum_accumulate(dst, values, accumulate, op):
    """``values`` combined with a PSUM ``dst`` as a matmul writes it: ``accumulate=False`` overwrites,
    ``True`` adds to what dst holds (every element must have been written), ``None`` overwrites the
    elements never written and adds onto the others ("first write overwrites, later writes
    accumulate", as the compiler infers it)."""
    vals = np.asarray(values, np.float32).reshape(dst._raw().shape if dst.nb else dst.shape)
    if accumulate is False:
        return vals
    written = psum_state(dst)
    if accumulate is True:
        if not written.all():
            raise NKIError("matmul accumulate", f"nisa.{op}(accumulate=True) into PSUM dst {dst.shape} whose "
                           "elements were never written; the first matmul into a PSUM location must overwrite "
                           "(accumulate=False or None)")
    elif not written.any():
        return vals
    current = dt.compute_view(dst.data).astype(np.float32, copy=False)
    if accumulate is True or written.all():
        return current + vals
    return np.where(written, current + vals, vals)


def write_accumulating(dst, values, accumulate, op):
    """``write(dst, psum_accumulate(dst, values, accumulate, op), op)``: where every element of an
    fp32 ``dst`` already holds a value and the instruction accumulates, the add runs in place
    (the same fp32 sums, without a temporary the size of ``dst``)."""
    if dst.nb and accumulate is not None and type(accumulate) is not bool:
        # a flag computed from program_id (`accumulate=(pid > 0)`): one value for the whole batch only
        if not (isinstance(accumulate, Mask) and accumulate.all_true()):
            raise NotBatchable(f"nisa.{op}: accumulate={accumulate!r} differs between the programs of a batch")
        accumulate = True
    if accumulate is not False and _psum_record._by_other and _psum_record.initialized_by_other(dst):
        _onto_other_values(dst, op)
    if accumulate is not False and _add_in_place(dst, values):
        return
    if accumulate is not False and dst.dtype == np.float32 and not dst.nb:
        vals = np.asarray(values)
        # (a view of a PSUM tile every element of which holds a value -- nki-library's matmuls into
        # psum[0:128, 0:512] -- needs no region of the mask; finding that also ends write's marking)
        if vals.dtype == np.float32 and vals.shape == dst.shape and _view_written(root_of(dst), dst):
            dst.data  # noqa: B018 - the instruction reads its accumulator (the memory model's live range)
            write(dst, vals, op, add=True)
            return
    write(dst, psum_accumulate(dst, values, accumulate, op), op)


def _onto_other_values(dst, op) -> None:
    """A matmul accumulates onto PSUM elements a non-matmul instruction wrote (memset, tensor_copy ...):
    "On NeuronCore-v2 and NeuronCore-v3, matmul accumulating into a PSUM location that was
    value-initialized by a non-matmul instruction ... is not supported and is undefined behavior on
    hardware" (nki.isa.nc_matmul page); NKI 0.6.0's simulator "warns on PSUM accumulation patterns that
    produce incorrect results on hardware". A warning, as there: the sum computed here is what v4 gives."""
    v = get_nc_version()
    if v.value >= nc_version.gen4.value:
        return
    warnings.warn(str(NKIError("psum accumulate", f"nisa.{op} accumulates into PSUM dst {dst.shape} that a "
                               "non-matmul instruction (memset, tensor_copy ...) wrote: undefined behavior on "
                               f"NeuronCore-v2 / v3 hardware (simulated: {v.name}); start the accumulation "
                               "with a matmul that overwrites (accumulate=False), or target NeuronCore-v4")),
                  _config.NKIWarning, stacklevel=2)


def _add_in_place(dst, vals) -> bool:
    """:func:`write_accumulating`'s in-place add with :func:`write`'s bookkeeping, without its general
    layers, when ``dst`` is a whole fp32 PSUM tile (not a view, a placed block tensor, a deferred value
    or a batch) whose every element holds a value and ``vals`` an fp32 array of its shape (a matmul's
    product accumulating). Returns False, having done nothing, otherwise."""
    data = dst._data
    m = dst._mem
    if not (type(dst) is Tile and dst._parent is None and dst.buffer is psum and dst._thunk is None and not dst.nb
            and type(vals) is np.ndarray and vals.dtype is _F32 and data.dtype is _F32 and vals.shape == data.shape
            and (m is None or m.tiles is None) and data.flags.writeable):
        return False
    ent = _psum_written.get(id(dst))
    if ent is None or ent[0]() is not dst or not (ent[2] or _all_written(dst)):
        return False
    if m is not None and m.last != m.mem.ic:
        _memory.touch(m)  # the instruction reads its accumulator (Tile.data's live-range step)
    prog = _tls.program
    if prog is not None and prog.pending is not None:
        core.flush_pending()  # a deferred op may still read the memory about to be written
    if m is not None:
        _memory.copied(m)
    dst._written = None
    np.add(data, vals, out=data)
    core.wrote_whole(dst, data, m, prog, vals)
    return True


def new_tile(shape, dtype, buffer=sbuf):
    """A zero-filled result tile of a first-generation functional instruction (masked-off
    elements of a result stay zero, as the first generation's ops leave them)."""
    return Tile(np.zeros(tuple(int(s) for s in shape), dt.as_dtype(dtype)), buffer)


def engine_name(eng):
    """The canonical engine name of an ``engine=`` value (``nisa.vector_engine``, "Vector", ...)."""
    if eng is None:
        return "unknown"
    v = getattr(eng, "value", eng)
    return {"vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd", "tensor": "Tensor", "sync": "Sync",
            "activation": "Scalar", "pool": "GpSimd", "act": "Scalar", "pe": "Tensor"}.get(str(v).lower(), str(v))
