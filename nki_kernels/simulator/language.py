"""``nki.language`` (``nl``) on NumPy: memory, indexing, element-wise math, reductions.

Semantics follow the neuronxcc.nki.language reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.language.html):
ops take SBUF/PSUM tiles (never HBM tensors), compute in fp32 and write a new
tile whose dtype is ``dtype=`` or the highest-precision input dtype; reductions
run over free axes only; ``mask=`` leaves masked-off elements untouched.

This module is the namespace users see; the functions live in modules of one concept each:
:mod:`.nl_math` (element-wise ops, reductions), :mod:`.allocation` (``ndarray``, ``zeros`` ...),
:mod:`.transfers` (``load``, ``store``), :mod:`.nl_grid` (index expressions, SPMD ids, loop ranges),
:mod:`.nl_tile_operators` (Python operators on tiles, ``matmul``, ``transpose``, ``broadcast_to`` ...),
:mod:`.nl_misc` (``atomic_rmw``, random numbers, casts ...), on the operand helpers of
:mod:`.tile_ops`, :mod:`.values` and :mod:`.op_functions`. Here: the batch-safe set and the guard
that makes every other function run one program at a time, and the exported names.
"""

from __future__ import annotations

import functools as _functools
import types as _types

import numpy as np  # noqa: F401 - (nl.np, as before the split; not exported)

from . import allocation as _allocation
from . import dtypes as dt  # noqa: F401 - used through nl.dt by the standalone front end
from . import nl_grid as _nl_grid
from . import nl_math as _nl_math
from . import nl_misc as _nl_misc
from . import nl_tile_operators as _nl_tile_operators
from . import op_functions as _op_functions
from . import tile_ops as _tile_ops
from . import transfers as _transfers
from .allocation import (_allocate, _parse_shape, empty_like, full, full_like, identity_tile, is_hbm,  # noqa: F401
                         is_on_chip, is_psum, is_sbuf, ndarray, ones, ones_like, shared_constant,
                         shared_identity_matrix, zeros, zeros_like)
from .core import (Access, Buffer, HBMTensor, PMAX, Tile, current, current_or_none, hbm, par_dim,  # noqa: F401
                   private_hbm, psum, sbuf, shared_hbm)
from .dtypes import (bfloat16, bool_, float8_e4m3, float8_e5m2, float16, float32, int8, int16, int32,  # noqa: F401
                     tfloat32, uint8, uint16, uint32)
from .errors import NKIError, NotBatchable  # noqa: F401
from .index_expr import AffineExpr, BExpr, Mask  # noqa: F401 - Mask is part of nl's surface
from .indexing import mask_box  # noqa: F401 - (used through nl.mask_box by the isa front end)
from .instructions.control import fori_loop, while_loop  # noqa: F401 - dynamic control flow (registers)
from .nl_grid import (affine_range, arange, ds, dynamic_range, mgrid, nc, num_programs, program_id,  # noqa: F401
                      program_ndim, sequential_range, spmd_dim, static_range)
from .nl_math import (_make_binary, abs, abs_max, abs_min, add, all, any, arctan, bitwise_and,  # noqa: F401,A004
                      bitwise_or, bitwise_xor, ceil, cos, divide, equal, erf, erf_dx, exp, floor, fmod, gelu,
                      gelu_apprx_sigmoid, gelu_apprx_sigmoid_dx, gelu_apprx_tanh, gelu_dx, greater,
                      greater_equal, identity, invert, left_shift, less, less_equal, log, logical_and,
                      logical_not, logical_or, logical_xor, max, maximum, mean, min, minimum, mish, mod,
                      multiply, negative, not_equal, power, prelu, prod, reciprocal, relu, right_shift,
                      rms_norm, rsqrt, sigmoid, sign, silu, silu_dx, sin, softmax, softplus, sqrt, square,
                      subtract, sum, tan, tanh, trunc, var, where)
from .nl_misc import (atomic_rmw, device_print, dropout, finfo, fp32, gather_flattened, rand,  # noqa: F401
                      random_seed, static_cast)
from .nl_tile_operators import (broadcast_to, copy, expand_dims, loop_reduce, matmul,  # noqa: F401
                                transpose)
from .op_functions import _BINARY, _UNARY, np_function  # noqa: F401
from .spmd_reduce import all_reduce  # noqa: F401 - a reduction over the programs of the SPMD grid
from .tile_ops import (_axes, _compute_into, _loaded_tile, _nb, _need_tile, _out_dtype,  # noqa: F401
                       _result, _values, tile_size)
from .transfers import _as_access, load, load_transpose2d, store  # noqa: F401
from .values import _fit  # noqa: F401


# Ops whose code handles the leading batch axes of a vectorised batch of programs
# (nki_kernels.simulator.vectorize); every other op makes such a batch fall back to
# running its programs one at a time.
BATCH_SAFE = set(_UNARY) | set(_BINARY) | {
    "where", "sum", "mean", "max", "min", "prod", "all", "any", "var", "softmax", "matmul", "transpose",
    "ndarray", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "empty_like", "load", "store",
    "load_transpose2d", "ds",
    "copy", "broadcast_to", "expand_dims", "arange", "program_id", "num_programs", "program_ndim",
    "affine_range", "sequential_range", "static_range", "loop_reduce", "np_function", "dynamic_range"}


def _per_program_only(fn, prefix="nl"):
    """``fn`` raising NotBatchable inside a vectorised batch (it has no batched implementation)."""

    @_functools.wraps(fn)
    def op(*args, **kwargs):
        prog = current_or_none()
        if prog is not None and prog.nb:
            raise NotBatchable(f"{prefix}.{fn.__name__} runs one program at a time")
        return fn(*args, **kwargs)

    return op


def _guard_module(namespace, safe, prefix, modules=None):
    """Wrap the public functions of ``namespace`` not in ``safe`` with :func:`_per_program_only`: those
    defined in one of ``modules`` (names; default the namespace's own module)."""
    modules = {namespace["__name__"]} if modules is None else modules
    for name, fn in list(namespace.items()):
        if not name.startswith("_") and isinstance(fn, _types.FunctionType) and name not in safe \
                and fn.__module__ in modules:
            namespace[name] = _per_program_only(fn, prefix)


# The modules of the functions defined for nl (the guard wrapped what language.py defined before its
# split into these modules; instructions.control's loops and spmd_reduce.all_reduce stay as they are).
_GUARDED = {m.__name__ for m in (_allocation, _nl_grid, _nl_math, _nl_misc, _nl_tile_operators, _op_functions,
                                 _tile_ops, _transfers)}
_guard_module(globals(), BATCH_SAFE, "nl", _GUARDED)

# Implemented here for the standalone nki.language (which exports them) but listed by no
# first-generation neuronxcc.nki.language reference page (v2.20 .. v2.26), so not first-generation names.
_CURRENT_ONLY = ("abs_max", "abs_min", "any", "prelu", "is_psum", "is_sbuf", "is_hbm", "is_on_chip",
                 "gelu_apprx_sigmoid_dx", "dynamic_range", "fori_loop", "while_loop")
# The implementation's own imports and helpers: no page of either generation lists them.
_INTERNAL = ("annotations", "builtins", "math", "np", "dt", "Access", "HBMTensor", "Tile", "current", "Buffer",
             "BATCH_SAFE", "current_or_none", "mask_box", "AffineExpr", "BExpr", "Mask", "NKIError", "NotBatchable",
             "PMAX", "identity", "np_function", "full_like", "ones_like", "identity_tile")
__all__ = sorted(n for n in globals() if not n.startswith("_") and n not in _INTERNAL + _CURRENT_ONLY)
