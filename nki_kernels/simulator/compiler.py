"""``nki.compiler`` (``neuronxcc.nki.compiler``, imported as ``ncc``): direct allocation and kernel decorators.

Allocation control, as the reference pages define it (nki.compiler.sbuf.alloc / mod_alloc /
auto_alloc and the psum variants, NKI Direct Allocation Developer Guide):

* ``ncc.sbuf.alloc(func)``: ``func(idx, pdim_size, fdim_size) -> (start_partition, byte_addr)``
  for each logical block ``idx`` of the tensor; ``ncc.psum.alloc(func)`` returns
  ``(bank_id, start_partition, byte_addr)``.
* ``mod_alloc``: the documented modulo scheme; block ``idx`` goes to
  ``base + linearize(num_tiles, idx % num_tiles) * tile_size`` along each of partition,
  free (and for PSUM, bank) dimensions.
* ``auto_alloc()``: the compiler places the tensor (same as ``buffer=nl.sbuf`` / ``nl.psum``).

The simulator keeps placed tensors in one byte storage per program and memory, so tensors whose
bytes overlap alias (:mod:`.memory`). The kernel decorators change nothing the simulator models
except ``force_auto_alloc``, which makes every placement automatic, as documented ("This will
ignore any direct allocation inside the kernel").
"""

from __future__ import annotations

import math
import types

from . import core as _core
from .errors import NKIError
from .memory import AutoAlloc, Placement


def _num_elems(shape):
    return math.prod(shape)


def _linearize(shape, indices):
    return sum(i * _num_elems(shape[dim + 1:]) for dim, i in enumerate(indices))


def _modulo(base, allocate_shape, scale):
    """The reference pages' ``modulo_allocate_func``: ``idx -> base + linearize(idx % shape) * scale``."""
    def func(indices):
        # The pages say the tuple is empty or one entry per block dimension, but their reference
        # function zips the two and official kernels rely on it (the attention tutorial v9 passes
        # num_free_tiles=(32,) for a tensor without block dimensions): zipped here too.
        shape = tuple(allocate_shape) if allocate_shape else (1,) * len(indices)
        mod_idx = tuple(i % s for i, s in zip(indices, shape))
        return _linearize(shape, mod_idx) * scale + base

    return func


def _tiles(value, name, api):
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and v > 0 for v in value):
        raise TypeError(f"{api}: {name} must be a tuple of positive ints (one per block dimension), got {value!r}")
    return tuple(value)


def _ints(api, **values):
    for name, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TypeError(f"{api}: {name} must be a non-negative int, got {v!r}")


def _check_func(func, api):
    if not callable(func):
        raise TypeError(f"{api}: func must be callable as func(idx, pdim_size, fdim_size), got {func!r}")


# ---------------------------------------------------------------------------
# ncc.sbuf
# ---------------------------------------------------------------------------
def _sbuf_alloc(func):
    """Place each logical block of an SBUF tensor where ``func(idx, pdim_size, fdim_size)`` says:
    it returns ``(start_partition, byte_addr)`` (``nki.compiler.sbuf.alloc``)."""
    _check_func(func, "ncc.sbuf.alloc")
    return Placement(_core.sbuf, func, f"ncc.sbuf.alloc({getattr(func, '__name__', 'func')})")


def _sbuf_mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
    """Modulo allocation in SBUF (``nki.compiler.sbuf.mod_alloc``): block ``idx`` starts at
    partition ``base_partition + linearize(num_par_tiles, idx % num_par_tiles) * pdim_size`` and
    byte ``base_addr + linearize(num_free_tiles, idx % num_free_tiles) * fdim_size``."""
    api = "ncc.sbuf.mod_alloc"
    _ints(api, base_addr=base_addr, base_partition=base_partition)
    num_par_tiles = _tiles(num_par_tiles, "num_par_tiles", api)
    num_free_tiles = _tiles(num_free_tiles, "num_free_tiles", api)

    def sbuf_modulo_alloc_func(idx, pdim_size, fdim_size):
        return (_modulo(base_partition, num_par_tiles, pdim_size)(idx),
                _modulo(base_addr, num_free_tiles, fdim_size)(idx))

    return Placement(_core.sbuf, sbuf_modulo_alloc_func,
                     f"ncc.sbuf.mod_alloc(base_addr={base_addr}, base_partition={base_partition}, "
                     f"num_par_tiles={num_par_tiles}, num_free_tiles={num_free_tiles})")


def _sbuf_auto_alloc():
    """The compiler places the tensor (``nki.compiler.sbuf.auto_alloc``; ``buffer=nl.sbuf`` is the same)."""
    return AutoAlloc(_core.sbuf)


# ---------------------------------------------------------------------------
# ncc.psum
# ---------------------------------------------------------------------------
def _psum_alloc(func):
    """Place each logical block of a PSUM tensor where ``func(idx, pdim_size, fdim_size)`` says:
    it returns ``(bank_id, start_partition, byte_addr)`` (``nki.compiler.psum.alloc``)."""
    _check_func(func, "ncc.psum.alloc")
    return Placement(_core.psum, func, f"ncc.psum.alloc({getattr(func, '__name__', 'func')})",
                     psum_origin_only=True)


def _psum_mod_alloc(*, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(), num_par_tiles=(),
                    num_free_tiles=()):
    """Modulo allocation in PSUM (``nki.compiler.psum.mod_alloc``): block ``idx`` goes to bank
    ``base_bank + linearize(num_bank_tiles, idx % num_bank_tiles)``, partition and byte as in
    :func:`_sbuf_mod_alloc` within the bank."""
    api = "ncc.psum.mod_alloc"
    _ints(api, base_bank=base_bank, base_addr=base_addr, base_partition=base_partition)
    num_bank_tiles = _tiles(num_bank_tiles, "num_bank_tiles", api)
    num_par_tiles = _tiles(num_par_tiles, "num_par_tiles", api)
    num_free_tiles = _tiles(num_free_tiles, "num_free_tiles", api)
    # "base_addr ... Must be 0 in the current version", likewise base_partition; num_par_tiles and
    # num_free_tiles "Currently must be an empty tuple or (1, 1, ...)" (one tile per bank, partition 0)
    bad = [f"{n}={v!r}" for n, v, ok in (("base_addr", base_addr, base_addr == 0),
                                          ("base_partition", base_partition, base_partition == 0),
                                          ("num_par_tiles", num_par_tiles, set(num_par_tiles) <= {1}),
                                          ("num_free_tiles", num_free_tiles, set(num_free_tiles) <= {1})) if not ok]
    if bad:
        raise NKIError("placement", f"{api}: {', '.join(bad)}: base_addr and base_partition must be 0 and "
                       "num_par_tiles / num_free_tiles empty or all 1 (nki.compiler.psum.mod_alloc: a PSUM bank "
                       "holds one physical tile, from partition 0; multiple buffers use num_bank_tiles)")

    def psum_modulo_alloc_func(idx, pdim_size, fdim_size):
        return (_modulo(base_bank, num_bank_tiles, 1)(idx),
                _modulo(base_partition, num_par_tiles, pdim_size)(idx),
                _modulo(base_addr, num_free_tiles, fdim_size)(idx))

    return Placement(_core.psum, psum_modulo_alloc_func,
                     f"ncc.psum.mod_alloc(base_bank={base_bank}, num_bank_tiles={num_bank_tiles})",
                     psum_origin_only=True)


def _psum_auto_alloc():
    """The compiler places the tensor (``nki.compiler.psum.auto_alloc``; ``buffer=nl.psum`` is the same)."""
    return AutoAlloc(_core.psum)


def _memory_module(name, buffer, alloc, mod_alloc, auto_alloc):
    mod = types.ModuleType(f"{__name__}.{name}", f"``nki.compiler.{name}``: allocation in {name.upper()}.")
    alloc.__name__, mod_alloc.__name__, auto_alloc.__name__ = "alloc", "mod_alloc", "auto_alloc"
    mod.alloc, mod.mod_alloc, mod.auto_alloc = alloc, mod_alloc, auto_alloc
    mod._nki_buffer = buffer  # `buffer=ncc.sbuf` is the automatic allocation, like nl.sbuf
    return mod


sbuf = _memory_module("sbuf", _core.sbuf, _sbuf_alloc, _sbuf_mod_alloc, _sbuf_auto_alloc)
psum = _memory_module("psum", _core.psum, _psum_alloc, _psum_mod_alloc, _psum_auto_alloc)


# ---------------------------------------------------------------------------
# kernel decorators and directives
# ---------------------------------------------------------------------------
def _flag(func, flag):
    """Mark ``func`` (a kernel or the plain function under ``@nki.jit``) with a compiler flag."""
    flags = set(getattr(func, "_nki_compiler_flags", ()))
    flags.add(flag)
    try:
        func._nki_compiler_flags = frozenset(flags)
    except AttributeError:
        raise TypeError(f"nki.compiler.{flag}: cannot decorate {func!r}") from None
    return func


def skip_middle_end_transformations(func=None):
    """Skip all middle end transformations on the kernel (no effect on simulated results)."""
    if func is None:
        return lambda f: _flag(f, "skip_middle_end_transformations")
    return _flag(func, "skip_middle_end_transformations")


def enable_stack_allocator(func=None, log_level=50):
    """Use the stack allocator for the kernel's PSUM and SBUF tensors (no effect on simulated results;
    documented to go with :func:`skip_middle_end_transformations`)."""
    if not isinstance(log_level, int):
        raise TypeError(f"nki.compiler.enable_stack_allocator: log_level must be an int, got {log_level!r}")
    if func is None:
        return lambda f: _flag(f, "enable_stack_allocator")
    return _flag(func, "enable_stack_allocator")


def force_auto_alloc(func=None):
    """Force automatic allocation in the kernel: every direct allocation in it is ignored."""
    if func is None:
        return lambda f: _flag(f, "force_auto_alloc")
    return _flag(func, "force_auto_alloc")


class MultiBufferDirective:
    """``nki.compiler.multi_buffer(factor)``: a hint to allocate ``factor`` buffers (a loop directive)."""

    def __init__(self, factor=2):
        if not isinstance(factor, int) or factor < 1:
            raise TypeError(f"nki.compiler.multi_buffer: factor must be a positive int, got {factor!r}")
        self.factor = factor

    def __repr__(self):
        return f"multi_buffer(factor={self.factor})"


class OperationOrderGuard:
    """``nki.compiler.no_reorder()``: keep the operations of a loop in program order (a loop directive;
    the simulator runs them in order anyway)."""

    def __repr__(self):
        return "no_reorder()"


def multi_buffer(factor=2):
    """Create a MultiBufferDirective to enable multi-buffered allocation (``factor`` buffers)."""
    return MultiBufferDirective(factor)


def no_reorder():
    """Create an OperationOrderGuard to prevent operation reordering."""
    return OperationOrderGuard()


__all__ = ["sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator", "force_auto_alloc",
           "multi_buffer", "no_reorder"]
