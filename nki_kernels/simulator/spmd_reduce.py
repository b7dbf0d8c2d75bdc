"""``nl.all_reduce``: a reduction over the programs of a first-generation SPMD grid.

The reference page (neuronxcc.nki.language.all_reduce, v2.20 .. v2.26): "Apply reduce operation
over multiple SPMD programs" along ``program_axes`` of the launch grid; every program of a group
(the programs whose ids agree on the other axes) gets the reduction of all their ``x`` tiles.

Programs of a grid otherwise run one after another, so a launch whose kernel names
``all_reduce`` runs its programs as cooperating workers (:class:`~.cores.Group`, one per
program, taking turns at synchronisation points): each program posts its tile and waits for
the rest of its group. A program that never reaches the call leaves its group waiting, which is
reported as a deadlock naming where every program waits.
"""

from __future__ import annotations

import functools
import itertools
import types

import numpy as np

from . import cores as _cores
from . import diagnostics as _diag
from . import dtypes as dt
from .core import current_or_none
from .errors import NKIError, NotBatchable
from .instructions.operands import alu
from .tile_ops import _need_tile, _out_dtype, _result


def names_all_reduce(kernel) -> bool:
    """Whether ``kernel``'s code, or a module-level function it calls (transitively), names ``all_reduce``."""
    func = getattr(kernel, "func", None)
    code = getattr(func, "__code__", None)
    if code not in _NAMES_ALL_REDUCE:
        _NAMES_ALL_REDUCE[code] = _calls_all_reduce(func)
    return _NAMES_ALL_REDUCE[code]


_NAMES_ALL_REDUCE = {}  # kernel code -> whether it reaches all_reduce (once per kernel, not per launch)


def _calls_all_reduce(func) -> bool:
    seen = set()
    todo = [func] if func is not None else []
    while todo:
        f = todo.pop()
        code = getattr(f, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        names = _cores._names_used(code)
        if "all_reduce" in names:
            return True
        glob = getattr(f, "__globals__", {})
        todo += [getattr(glob[n], "func", glob[n]) for n in names if callable(glob.get(n))]
        # functions of the kernel's own modules called as module.attr (the Neuron team's blockwise_mm
        # kernel is called as M.blockwise_mm(...)); the library's modules are not searched
        for mod in {id(v): v for n in names if isinstance(v := glob.get(n), types.ModuleType)}.values():
            if mod.__name__.split(".")[0] not in _LIBRARIES:
                todo += [getattr(a, "func", a) for n in names if callable(a := getattr(mod, n, None))]
    return False


_LIBRARIES = frozenset({"nki_kernels", "neuronxcc", "nki", "numpy", "ml_dtypes", "math", "torch", "jax"})


def run_programs_together(kernel, grid, args, kwargs, state):
    """Run every program of ``grid`` as a cooperating worker; the last program's result."""
    group = _cores.Group(kernel)
    pids = list(itertools.product(*(range(g) for g in grid)))
    workers = [group.add(0, i, [p], state, args, kwargs) for i, p in enumerate(pids)]
    group.run()
    return workers[-1].result


class _Post:
    __slots__ = ("values", "shape", "where", "done")

    def __init__(self, values, where):
        self.values, self.shape, self.where, self.done = values, np.shape(values), where, False


def _axes(program_axes, ndim):
    axes = (program_axes,) if isinstance(program_axes, (int, np.integer)) else tuple(program_axes)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise NKIError("all_reduce", f"nl.all_reduce: program axis {a} is outside the {ndim}-D launch grid")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise NKIError("all_reduce", f"nl.all_reduce: program_axes {tuple(axes)} repeats an axis")
    return tuple(sorted(out))


def reduce_over_programs(values, op_fn, program_axes):
    """The reduction with ``op_fn`` of ``values`` (this program's fp32 operand) over the programs of
    its group along ``program_axes``, in program-id order."""
    prog = current_or_none()
    if prog is None:
        raise NKIError("kernel context", "nl.all_reduce is only valid inside a running kernel")
    if prog.nb:
        raise NotBatchable("nl.all_reduce synchronises the programs of a grid")
    grid = tuple(prog.launch.grid)
    axes = _axes(program_axes, len(grid))
    pid = tuple(prog.pid)
    members = [tuple(pid[d] if d not in axes else c[axes.index(d)] for d in range(len(grid)))
               for c in itertools.product(*(range(grid[a]) for a in axes))]
    if len(members) == 1:
        return values
    w = getattr(prog, "worker", None)
    if w is None and getattr(prog.launch, "some_programs", False):
        return values  # shape inference runs one program alone: the values are not used
    if w is None:
        raise NKIError("all_reduce", "nl.all_reduce runs in a launch whose programs meet; the launcher starts one "
                       "when the kernel's code or a function it calls by name names all_reduce (call it from the "
                       "kernel body or a helper function the kernel calls)")
    g = w.group
    gkey = ("nl.all_reduce", axes, tuple(pid[d] for d in range(len(grid)) if d not in axes))
    seq = w.collectives[gkey]
    w.collectives[gkey] += 1
    posts = g.meetings.setdefault(gkey + (seq,), {})
    mine = _Post(values, _diag.where())
    with g.cv:
        posts[pid] = mine

    def missing():
        return [m for m in members if m not in posts]

    g.block(w, lambda: not missing(),
            lambda: f"nl.all_reduce #{seq + 1} over program axes {list(axes)} waits for program(s) {missing()}")
    for m in members:
        if posts[m].shape != mine.shape:
            raise NKIError("all_reduce", f"nl.all_reduce #{seq + 1}: program {pid} reduces a tile of shape "
                           f"{mine.shape} at {_diag.fmt_where(mine.where)} but program {m} one of shape "
                           f"{posts[m].shape} at {_diag.fmt_where(posts[m].where)}")
    with g.cv:
        mine.done = True
        if all(p.done for p in posts.values()):
            g.meetings.pop(gkey + (seq,), None)
    return functools.reduce(lambda a, b: op_fn(a, b).astype(np.float32), (posts[m].values for m in members))


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False):
    """Reduce tile ``x`` with ``op`` (``nl.add``, ``nl.maximum``, ``np.add`` ...) over the SPMD programs
    along ``program_axes`` (an axis or a tuple of axes of the launch grid) (``nl.all_reduce``): each
    program of a group gets the reduction, in ``dtype`` (default ``x``'s). fp32 arithmetic.
    ``parallel_reduce`` and ``asynchronous`` choose how hardware schedules the reduction, not its
    result (an asynchronous result is the same once synchronised)."""
    x = _need_tile(x, "x", "nl.all_reduce")
    fn = alu(op)
    if not isinstance(fn, np.ufunc) or fn.nin != 2:
        raise NKIError("all_reduce", f"nl.all_reduce: op {getattr(op, '__name__', op)!r} is not a binary "
                       "operator (nl.add, nl.maximum, nl.minimum, nl.multiply ...)")
    vals = np.asarray(dt.compute_view(x.data), dtype=np.float32)
    res = reduce_over_programs(vals, fn, program_axes)
    return _result(res, _out_dtype(dtype, x), mask, engine="GpSimd")
