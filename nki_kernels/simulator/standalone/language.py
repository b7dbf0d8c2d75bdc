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
* ``nl.tile_size`` gains ``psum_fmax_bytes``, ``psum_num_banks``,
  ``sbuf_fmax_bytes``, ``sbuf_size_bytes`` and alignment constants.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import core as _core
from .. import language as _gen1
from ..core import sbuf
from ..language import *  # noqa: F401,F403 - the shared surface (buffers, dtypes, ops, ranges)
from ..language import _allocate, _parse_shape  # noqa: F401 - used by the isa front end

# `from module import *` skips private helpers; these names are public API in both generations.
from ..language import (abs, all, any, copy, exp, identity, max, min, sum)  # noqa: F401,A004
from ..language import _CURRENT_ONLY  # names of the current page only, not first-generation ones
globals().update({_n: getattr(_gen1, _n) for _n in _CURRENT_ONLY})

# The current page's data types (float8_e4m3 and float8_e4m3fn distinct, packed MX types), the tensor
# type and the config base class: see nki_kernels.simulator.standalone.dtype / access_pattern.
from ..access_pattern import NkiTensor  # noqa: E402
from ..nki_object import NKIObject  # noqa: E402
from .dtype import *  # noqa: E402,F401,F403
from . import dtype as _dtypes  # noqa: E402

bool = bool_  # noqa: A001,F405 - nl.bool, as kernels spell it


class tile_size(_gen1.tile_size):
    """Hardware tile limits (``nl.tile_size``), with the standalone package's byte-sized fields."""

    psum_fmax_bytes = 2 * 1024
    psum_num_banks = 8
    sbuf_fmax_bytes = 192 * 1024
    sbuf_fmax = sbuf_fmax_bytes // 4
    sbuf_size_bytes = 128 * 192 * 1024
    psum_min_align = 4
    sbuf_min_align = 4


def bypass(x):
    """The "no operation" ALU / activation identifier (``nl.bypass``): returns its input."""
    return x


bypass._np = lambda x: np.array(x, copy=True)


def _op_function(op):
    """The NumPy function of an operator identifier, accepting the standalone-only ones."""
    if op is copy or op is _gen1.identity:
        return _gen1._UNARY["identity"]
    return _gen1.np_function(op)


def np_function(op):
    """The NumPy function behind an ``nl`` op (``nl.copy`` / ``nl.bypass`` included) or ufunc."""
    return _op_function(op)


_gen1._guard_module(globals(), {"ds", "bypass", "np_function"}, "nl")


def _spanning_psum_banks(allocate):
    """``allocate`` making PSUM tensors that may span every PSUM bank of a partition: the current
    ``nl.tile_size`` page says ``psum_fmax`` "does not represent the free-dim size per partition"
    (it is the bank size); a matmul result still fits one bank (``nisa.nc_matmul``)."""

    @functools.wraps(allocate)
    def alloc(*args, **kwargs):
        with _core.psum_tensors_span_banks():
            return allocate(*args, **kwargs)

    return alloc


globals().update({n: _spanning_psum_banks(getattr(_gen1, n)) for n in ("ndarray", "zeros", "ones", "full",
                                                                        "zeros_like", "empty_like")})

# First-generation names the current nki.language reference no longer lists (index expressions,
# SPMD grids, casts and helpers of the old API): not part of this namespace.
for _name in ("AffineExpr", "BExpr", "Mask", "NKIError", "NotBatchable", "PMAX", "arange", "mgrid", "nc",
              "par_dim", "spmd_dim", "loop_reduce", "static_cast", "finfo", "fp32", "full_like", "ones_like",
              "identity", "annotations"):
    globals().pop(_name, None)
del _name

__all__ = sorted({*_gen1.__all__, *_CURRENT_ONLY, *_dtypes.__all__, "NKIObject", "NkiTensor", "bool", "ds", "bypass",
                  "shared_identity_matrix", "tile_size",
                  "np_function"})
__all__ = [n for n in __all__ if n in globals()]
