"""Vectorised SPMD launches: many programs of a grid run as one batched NumPy program.

A launch ``kernel[grid](...)`` means one Python call of the kernel per program.
Most kernels index HBM with expressions affine in ``nl.program_id`` and never
let programs interact, so every program does the same work on a different
region. This module runs such programs together: ``nl.program_id`` returns a
symbolic :class:`~.index_expr.BExpr` over a *box* of the grid, HBM accesses
become one strided view over all the box's regions, and every tile carries the
box's shape as leading axes (``Tile.nb``). One kernel call then does the work of
the whole box with whole-array NumPy operations.

The per-program path stays the reference:

* The grid's first program always runs alone, with every diagnostic (tile-level
  checks -- loop-carried dependencies, uninitialised tiles, capacity -- see the
  same code and shapes in every program, so one program covers them).
* A box runs batched only while everything it does has a batched meaning; the
  first thing that does not (Python control flow on ``program_id``, a mask that
  is not all-true in every program, an op without a batched implementation, a
  load of what the launch writes, a store to a kernel input, programs of the box
  writing overlapping elements) raises :class:`NotBatchable` and the box's
  programs run one at a time instead. A mask that fails only for the last
  programs along one grid axis (ragged edge tiles) shrinks the box instead.
* HBM writes of a box are logged for the race / uninitialised-output analysis
  as one region per store; programs of one box never overlap (checked).
* How a launch was split is remembered per (kernel, argument shapes and dtypes,
  static arguments, grid), so repeated launches skip the failed attempts.

Off when a profile is recorded, in thorough diagnostics mode, or with
``NKI_SIM_VECTORIZE=0`` (``nki_kernels.simulator.config.vectorize = False``).
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict

import numpy as np

from . import config
from . import dtypes as dt
from . import recording as _prof
from .core import Program, Tile, set_current
from .errors import NotBatchable
from .index_expr import Mask
from .tile_ops import _compute_into, _dma_values, _loaded_tile
from .values import _fit

# Accounted SBUF+PSUM of the programs of one batch (per-program peak x programs): bounds the
# memory a batch's tiles take, since each program's tiles exist at once.
BATCH_BYTES = 256 * 1024 * 1024
_PARTITIONS = 128

_plans = OrderedDict()  # (kernel, shapes, static, grid) -> [(box, batched)]
_PLAN_CACHE = 64


class BatchId(tuple):
    """The ``pid`` of a batched program: the grid box it stands for, printed as ranges."""

    def __repr__(self):
        return "programs (" + ", ".join(f"{a}:{b}" for a, b in self) + ")"

    __str__ = __repr__


class BatchProgram(Program):
    """A box of the grid run as one program with ``len(grid)`` leading batch axes."""

    def __init__(self, launch, box):
        super().__init__(launch, BatchId(box))
        self.box = box
        self.bshape = tuple(b - a for a, b in box)
        self.nb = len(box)
        self.staged = []  # HBM writes, logged for diagnostics when the batch completes


def enabled() -> bool:
    """Whether launches may run batched now."""
    return config.vectorize and not config.thorough and _prof.recorder() is None


# ---------------------------------------------------------------------------
# batched load / store (called by nl.load / nl.store inside a batch)
# ---------------------------------------------------------------------------
def _unmasked(mask, what):
    """Accept masks that select everything in every program of the batch."""
    if mask is None:
        return
    if isinstance(mask, Mask):
        if mask.all_true():  # raises NotBatchable (with a shrink hint) for program-dependent masks
            return
    elif np.asarray(mask).all():
        return
    raise NotBatchable(f"masked {what}")


def load_batched(prog, acc, mask, dtype):
    """``nl.load`` for a batch: one strided view of every program's region (no copy)."""
    t = acc.tensor
    _unmasked(mask, "load")
    if t.is_output:
        raise NotBatchable("a program loads what the launch writes")

    if acc.nb:
        data = acc.index.view(t.data)
    else:  # the same region for every program (weights, constants)
        data = acc.index.read(t.data, None, what=t.name)
        data = np.broadcast_to(data, prog.bshape + data.shape)
    return _loaded_tile(t, data, dtype)


def store_batched(prog, acc, value, mask):
    """``nl.store`` for a batch: every program's tile into its region of an output at once."""

    t = acc.tensor
    _unmasked(mask, "store")
    if not t.is_output:
        raise NotBatchable("a store into a kernel argument")
    if not acc.nb:
        raise NotBatchable("every program of the batch stores to the same region")
    idx = acc.index
    if idx._overlaps(t.data):
        raise NotBatchable("programs of the batch store to overlapping elements")
    view = idx.view(t.data)
    full = idx.out_shape
    if isinstance(value, Tile) and value._thunk is not None and value.dtype == t.dtype \
            and tuple(value._thunk[2]) == full:
        _compute_into(t, value, view)
    else:
        vals = _fit(_dma_values(value, t.dtype, "value"), full, "nl.store", f"{t.name}{list(acc.shape)}")
        if t._borrowers:
            t.materialize_borrowers()
        view[...] = dt.cast(vals, t.dtype)
    _prof.dma(t, view, "write", acc, mask, written=True)


# ---------------------------------------------------------------------------
# running a grid
# ---------------------------------------------------------------------------
def _size(box):
    return math.prod(b - a for a, b in box)


def _pids(box):
    return itertools.product(*(range(a, b) for a, b in box))


def _rest_boxes(grid):
    """The grid minus its first program, as boxes in row-major order: ..., {pid0 = 0, pid1 >= 1},
    {pid0 >= 1} (so programs still run in the reference order box by box)."""
    out = []
    for ax in range(len(grid)):
        if grid[ax] > 1:
            out.append(tuple((0, 1) if k < ax else ((1, grid[ax]) if k == ax else (0, grid[k]))
                             for k in range(len(grid))))
    return out[::-1]


def _split(box, cap):
    """Boxes of at most ``cap`` programs covering ``box`` (cut along the outermost axes)."""
    if _size(box) <= cap:
        return [box]
    ax = next(k for k, (a, b) in enumerate(box) if b - a > 1)
    a, b = box[ax]
    inner = _size(box) // (b - a)
    if inner > cap:
        return [sub for i in range(a, b) for sub in
                _split(box[:ax] + ((i, i + 1),) + box[ax + 1:], cap)]
    step = max(1, cap // inner)
    return [box[:ax] + ((i, min(b, i + step)),) + box[ax + 1:] for i in range(a, b, step)]


def _plan_key(kernel, args, kwargs, grid):
    def sig(v):
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return ("T", tuple(v.shape), str(v.dtype))
        return ("S", repr(v))

    return (id(kernel), tuple(sig(a) for a in args), tuple(sorted((k, sig(v)) for k, v in kwargs.items())), grid)


class GridRunner:
    """Runs the programs of one launch: the first alone, the rest in batches where possible."""

    def __init__(self, kernel, grid, args, kwargs, state):
        self.kernel, self.grid, self.args, self.kwargs, self.state = kernel, grid, args, kwargs, state
        self.result = None
        self.plan = []

    def one(self, pid):
        prog = Program(self.state, tuple(pid))
        set_current(prog)
        self.result = self.kernel.func(*self.args, **self.kwargs)
        prog.finish(lambda: self.kernel.func(*self.args, **self.kwargs))
        self.state.programs += 1
        return prog

    def each(self, box):
        for pid in _pids(box):
            self.one(pid)
        self.plan.append((box, False))

    def batch(self, box) -> None:
        """Run ``box`` as one batched program, or raise NotBatchable having changed nothing that
        the per-program path would not overwrite (outputs only; logs are committed on success)."""
        prog = BatchProgram(self.state, box)
        set_current(prog)
        try:
            result = self.kernel.func(*self.args, **self.kwargs)
        finally:
            set_current(None)
        log = getattr(self.state, "diag", None)
        if log is not None:
            for tensor, access, mask, wh in prog.staged:
                log.add(tensor, access, mask, True, prog, wh)
        self.result = result
        self.state.programs += _size(box)
        self.state.batched += _size(box)
        self.plan.append((box, True))

    def attempt(self, box) -> None:
        """Batch ``box`` if possible: shrink it along a ragged edge, else run it per program."""
        if _size(box) == 1:
            self.each(box)
            return
        try:
            self.batch(box)
        except NotBatchable as e:
            sub = tuple((a + e.hint[k][0], a + e.hint[k][1]) if e.hint and k in e.hint else (a, b)
                        for k, (a, b) in enumerate(box))
            if not e.hint or sub == box or _size(sub) == 0:
                self.each(box)
                return
            self.attempt(sub)
            inside = set(_pids(sub))
            for pid in _pids(box):
                if pid not in inside:
                    self.each(tuple((p, p + 1) for p in pid))
        except Exception:  # noqa: BLE001 - the per-program path is the reference; it re-raises real errors
            self.each(box)

    def run(self):
        """Run every program of the grid; returns the kernel's result."""
        first = self.one((0,) * len(self.grid))
        if self.state.wrote_inputs:  # in-place kernels: programs may read what others wrote
            for box in _rest_boxes(self.grid):
                self.each(box)
            return self.result
        per_program = max(1, (first.sbuf_peak + first.psum_peak) * _PARTITIONS)
        cap = max(2, BATCH_BYTES // per_program)
        key = _plan_key(self.kernel, self.args, self.kwargs, self.grid)
        plan = _plans.get(key)
        if plan is not None:
            for box, batched in plan:
                if batched:
                    try:
                        self.batch(box)
                        continue
                    except Exception:  # noqa: BLE001 - fall back to the reference path
                        pass
                self.each(box)
            return self.result
        for box in _rest_boxes(self.grid):
            for sub in _split(box, cap):
                self.attempt(sub)
        _plans[key] = self.plan
        if len(_plans) > _PLAN_CACHE:
            _plans.popitem(last=False)
        return self.result
