"""Index expressions, the SPMD grid and loops of the first generation's ``nl``: ``nl.arange``,
``nl.mgrid``, ``nl.ds``, ``nl.program_id`` / ``num_programs`` / ``program_ndim``, ``nl.nc`` and
``nl.spmd_dim``, and the loop ranges (``affine_range``, ``sequential_range``, ``static_range``,
``dynamic_range``).
"""

from __future__ import annotations


import numpy as np

from . import diagnostics as _diag
from . import memory as _memory
from . import specialization as _specialization
from .core import current
from .errors import NKIError, NotBatchable
from .index_expr import AffineExpr, BExpr
from .index_expr import runtime_offset as _runtime_offset
from .instructions.control import dynamic_range as _dynamic_range
from .tile_ops import _nb


def arange(*args):
    """Index values ``start, start+step, ...`` as a 1-D affine index expression (``nl.arange``)."""
    r = range(*(int(a) for a in args))
    return AffineExpr((len(r),), r.start, (r.step,))


class _Grid(tuple):
    """Open index grid returned by ``nl.mgrid[...]``: the tuple of its axes' index arrays (so it
    indexes a tensor whole, ``in_tensor[nl.mgrid[0:128, 0:512]]``, as the pages' examples do), with
    ``.p`` / ``.x`` / ``.y`` / ``.z`` naming its axes in order (up to 4)."""

    __slots__ = ()

    def __new__(cls, arrays):
        return tuple.__new__(cls, arrays)

    def _axis(self, i, name):
        if i >= len(self):
            raise AttributeError(f"nl.mgrid of {len(self)} axes has no .{name} (axis {i})")
        return self[i]

    @property
    def p(self):
        """The partition index (first axis)."""
        return self._axis(0, "p")

    @property
    def x(self):
        """The first free index (second axis)."""
        return self._axis(1, "x")

    @property
    def y(self):
        """The second free index (third axis)."""
        return self._axis(2, "y")

    @property
    def z(self):
        """The third free index (fourth axis)."""
        return self._axis(3, "z")


class _MGrid:
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for ax, k in enumerate(key):
            r = range(0 if k.start is None else k.start, k.stop, 1 if k.step is None else k.step)
            shape, coefs = [1] * len(key), [0] * len(key)
            shape[ax], coefs[ax] = len(r), r.step
            out.append(AffineExpr(shape, r.start, coefs, own=1 << ax))
        return _Grid(tuple(out))


mgrid = _MGrid()


class nc:
    """A NeuronCore count inside ``nl.spmd_dim`` (``nl.nc(2)``)."""

    def __init__(self, n: int):
        self.n = int(n)

    def __int__(self):
        return self.n

    # The grid shorthand of the SPMD page: `nl.nc(2) * 2` is nl.spmd_dim(nl.nc(2), 2) and
    # `2 * nl.nc(2)` is nl.spmd_dim(2, nl.nc(2)) (the order decides which programs share a core).
    def __mul__(self, other):
        return spmd_dim(self, other)

    def __rmul__(self, other):
        return spmd_dim(other, self)


class spmd_dim:
    """A grid axis split across NeuronCores: its size is the product of its parts."""

    def __init__(self, *parts):
        self.parts = parts
        self.size = int(np.prod([int(p) for p in parts]))
        self.cores = int(np.prod([p.n for p in parts if isinstance(p, nc)])) if parts else 1

    def __int__(self):
        return self.size

    def __index__(self):
        return self.size


def program_id(axis: int = 0):
    """This program's index along grid ``axis`` (``nl.program_id``)."""
    prog = current()
    if prog.box is not None:
        if not 0 <= axis < prog.nb:
            raise NotBatchable("program_id axis outside the grid")
        return BExpr.program_id(axis, prog.box[axis][0], prog.bshape)
    if not prog.pid and axis == 0:
        return 0  # a kernel launched without a grid is a single program
    if not 0 <= axis < len(prog.pid):
        raise NKIError("program_id", f"axis {axis} is outside the launch grid {prog.launch.grid}")
    return prog.pid[axis]


def num_programs(axes=None):
    """Number of programs along ``axes`` (all axes when ``None``) (``nl.num_programs``)."""
    grid = current().launch.grid
    if axes is None:
        return int(np.prod(grid)) if grid else 1
    many = isinstance(axes, (tuple, list))
    sizes = []
    for a in (axes if many else (axes,)):
        if not grid and a == 0:
            sizes.append(1)  # a kernel launched without a grid is one program (program_id(0) is 0)
        elif isinstance(a, (int, np.integer)) and -len(grid) <= a < len(grid):
            sizes.append(grid[a])
        else:
            raise NKIError("num_programs", f"axis {a!r} is outside the launch grid {grid}")
    return int(np.prod(sizes)) if many else sizes[0]


def program_ndim():
    """Number of dimensions of the launch grid (``nl.program_ndim``)."""
    return len(current().launch.grid)


def _loop(kind):
    def make(start, stop=None, step=1, *, directives=None, precise_schedule=False):
        # directives= (nki.compiler.no_reorder() ...) steer scheduling only: same iterations.
        # precise_schedule=True (undocumented; the official contributed pipelined attention passes it to a
        # software-pipelined affine_range whose iteration i+1 reads what iteration i wrote) keeps the
        # iterations in program order, so they run as a sequential_range would.
        r = range(start) if stop is None else range(start, stop, step)
        return _KINDS["sequential" if kind == "affine" and precise_schedule else kind](r.start, r.stop, r.step)

    make.__name__ = f"{kind}_range"
    make.__doc__ = {
        "affine": "Loop with independent iterations (``nl.affine_range``); accumulations allowed.",
        "sequential": "Loop whose iterations run in order (``nl.sequential_range``).",
        "static": "Loop unrolled at trace time (``nl.static_range``).",
    }[kind]
    return make


class _Range:
    def __init__(self, start, stop, step, kind):
        self._r = range(start, stop, step)
        self.kind = kind

    def __iter__(self):
        if _nb():
            return iter(self._r)  # a batch's tile-level checks were made by its reference program
        # one iteration at a time, with the loop's diagnostics
        it = _diag.loop_iter(self._r, self.kind)
        # affine / sequential bodies are traced once: their placements are made once (memory.traced_loop)
        return it if self.kind == "static" else _memory.traced_loop(it)

    def __len__(self):
        return len(self._r)


_KINDS = {k: (lambda k: (lambda a, b, c: _Range(a, b, c, k)))(k) for k in ("affine", "sequential", "static")}
affine_range = _loop("affine")
sequential_range = _loop("sequential")
static_range = _loop("static")


def ds(start, size):
    """The index range ``start, start+1, ..., start+size-1`` (``nl.ds``, a dynamic slice); ``start``
    may be a one-element integer tile, a run-time offset (see index_expr.runtime_offset)."""
    start = _runtime_offset(start, start)
    return slice(start, start + size)


def dynamic_range(start, stop=None, step=1):
    """A loop whose bounds may be registers (``nl.dynamic_range``), read at run time; ``step`` "must be
    a compile-time positive integer (not VirtualRegister)". Deprecated by NKI 0.6.0 ("NKI emits a
    deprecation warning when it encounters ``for i in nl.dynamic_range(...)``") and removed by NKI 0.7.0
    from the default (tracing) specialization: there the ``removed`` diagnostic naming nl.fori_loop (a
    warning by default), the 0.6.0 warning under ``NKI_COMPILER_FRONTEND=custom`` (see
    :mod:`.specialization`)."""
    _specialization.removed_dynamic_loop("for i in nl.dynamic_range(...)", "nl.fori_loop(lower, upper, body_fun)")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step <= 0:
        raise NKIError("dynamic_range step", "nl.dynamic_range: step must be a compile-time positive integer "
                       f"(not a VirtualRegister), got {step!r}")
    return _dynamic_range(start, stop, int(step))
