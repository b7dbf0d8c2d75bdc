"""``nki.jit``, SPMD grids and the simulator's launch loop; dispatch by argument type.

``kernel[grid](*args)`` runs one Python call of the kernel per program of the
grid. What a call does depends on its arguments, as with the official
``nki.jit``: NumPy arrays run the simulator and return NumPy arrays; arrays of a
framework go to the handler that framework's adapter registered with
:func:`register_array_dispatch` (``jax_ops`` and ``torch_ops`` do on import).
The simulator imports no adapter itself: :func:`register_adapter_module` names,
per array type's top-level module (``"torch"``), the adapter module to import
the first time such an array is seen.
"""

from __future__ import annotations

import functools
import contextlib
import copy
import importlib
import inspect
import itertools
import math
import secrets
import sys
import threading
from collections import namedtuple

import numpy as np

from . import blas as _blas
from . import compile_config as _compile_config
from . import config as _config
from . import cores as _cores
from . import diagnostics as _diag
from . import lnc_degree as _lnc_degree
from . import shadow as _shadow
from . import scheduling as _scheduling
from . import spmd_reduce as _spmd
from . import vectorize as _vec
from . import dtypes as dt
from .core import Access, HBMTensor, Program, Tile, set_current, current_or_none
from .errors import NKIError

ShapeDtype = namedtuple("ShapeDtype", ["shape", "dtype"])


def normalize_grid(grid, lnc_brackets=False) -> tuple:
    """A launch grid as a tuple of ints (ints, tuples and ``nl.spmd_dim`` accepted); a grid on
    several logical cores is a :class:`~.cores.CoreGrid`: one with an ``nl.nc`` part, or, for a
    kernel of the standalone API (``lnc_brackets``), ``kernel[2]`` (LNC=2). In the first
    generation ``kernel[2]`` is an SPMD grid of two programs."""
    if grid is None:
        return ()
    if isinstance(grid, _cores.CoreGrid):
        return grid
    if not isinstance(grid, (tuple, list)):
        grid = (grid,)
    out = []
    for g in grid:
        n = int(g)
        if n < 1:
            # The compiler turns the SPMD grid into nested loops of kernel instances (programming model,
            # "SPMD: Launching multiple instances of a kernel"): a size-0 dimension launches no instance,
            # so nothing would write the kernel's outputs. No page gives such a grid another meaning.
            raise NKIError("grid", f"launch grid {tuple(grid)} has a dimension of size {n} (< 1): an SPMD grid "
                           "launches one kernel instance per grid point, so it would run no instance and leave "
                           "the outputs unwritten; launch kernel[1] (or call the kernel without a grid) for one "
                           "instance")
        out.append(n)
    if not lnc_brackets and all(type(g) is int for g in grid):
        return tuple(out)  # a plain SPMD grid (and nothing for a tracer such as Dynamo to step into)
    return _cores.core_grid(grid, tuple(out), lnc_brackets)


class Kernel:
    """A function decorated with ``@nki.jit``: index it with a grid, then call it."""

    schedule = ()  # with_schedule's checked pairs ((consumer, (producer, ...)), ...)

    def __init__(self, func, **options):
        self.func = func
        self.options = options
        self.signature = inspect.signature(func)
        functools.update_wrapper(self, func)
        self.__test__ = False  # (a kernel named test_* is not a pytest test: the docs' test_nl_broadcast)

    def __getitem__(self, grid):
        return Launch(self, normalize_grid(grid, self.options.get("lnc_brackets", False)))

    def __call__(self, *args, **kwargs):
        prog = current_or_none()
        if prog is not None:
            # A helper (``@nki.jit(mode='trace')``) called from a running kernel is part of that
            # kernel's program: same program ids, grid, memory and diagnostics, no new launch.
            top = getattr(getattr(prog, "launch", None), "kernel", None)
            if isinstance(top, Kernel) and top is not self:
                _compile_config.check_nested(top, self)
            return self.func(*args, **kwargs)
        return Launch(self, ())(*args, **kwargs)

    def with_schedule(self, edges):
        """The current API's ``kernel.with_schedule([(consumer, producer or [producers]), ...])``: the same
        kernel with dependency edges between instructions named by their ``name=`` (each consumer runs
        after its producers; see :mod:`.scheduling`). The pairs' form is checked here, the names when the
        kernel has run."""
        if not self.options.get("lnc_brackets"):
            raise AttributeError("with_schedule belongs to the current nki API's kernels (nki.jit); this kernel "
                                 "was decorated with neuronxcc.nki.jit")
        scheduled = copy.copy(self)  # (the kernel's options and compiler flags stay with it)
        scheduled.schedule = self.schedule + _scheduling.check_schedule(edges)
        return scheduled

    def __repr__(self):
        return f"<nki kernel {self.func.__module__}.{self.func.__qualname__}>"


class Launch:
    """A kernel bound to a grid (``kernel[grid]``); calling it launches every program."""

    def __init__(self, kernel: Kernel, grid: tuple):
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args, **kwargs):
        handler = array_handler(itertools.chain(args, kwargs.values()), _ARRAY_DISPATCH)
        if handler is not None:
            return handler(self, args, kwargs)
        return simulate(self.kernel, self.grid, *args, **kwargs)


# --- framework dispatch by registration ---------------------------------------------------------
# (predicate, handler) pairs: a launch whose arguments include a value the predicate accepts is
# handed to handler(launch, args, kwargs). Adapters (jax_ops, torch_ops) register on import.
_ARRAY_DISPATCH: list = []
# Top-level module of an array type -> the adapter module whose import registers its handler.
_ADAPTER_MODULES: dict = {}


def register_array_dispatch(predicate, handler) -> None:
    """Route launches with an argument ``predicate`` accepts to ``handler(launch, args, kwargs)``.

    A framework adapter calls this on import; later registrations are tried first.
    :func:`split_arguments` turns ``args``/``kwargs`` into tensors and static keywords.
    """
    _ARRAY_DISPATCH.insert(0, (predicate, handler))


def register_adapter_module(array_module: str, adapter_module: str) -> None:
    """Import ``adapter_module`` the first time an argument whose type lives in the top-level
    module ``array_module`` (e.g. ``"torch"``) reaches a dispatch point, so it can register."""
    _ADAPTER_MODULES[array_module] = adapter_module


def import_loaded_adapters() -> None:
    """Import the adapter modules of array modules that are already imported (their frameworks
    are in use, so their registrations are wanted now rather than on first sight of an array)."""
    for array_module, adapter in list(_ADAPTER_MODULES.items()):
        if array_module in sys.modules:
            _ADAPTER_MODULES.pop(array_module, None)
            importlib.import_module(adapter)


def array_handler(values, registry):
    """The handler of the first of ``values`` some predicate of ``registry`` accepts, or None.

    Values of a type whose top-level module has an adapter module registered trigger that
    module's import once (it registers its handlers), then the lookup is repeated.
    """
    values = list(values)
    for v in values:
        for predicate, handler in registry:
            if predicate(v):
                return handler
    for v in values:
        adapter = _ADAPTER_MODULES.pop(type(v).__module__.partition(".")[0], None)
        if adapter is not None:
            importlib.import_module(adapter)
            return array_handler(values, registry)
    return None


def _is_tensor(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (np.generic,))


def split_arguments(launch, args, kwargs) -> tuple:
    """``(tensors, static)`` of a launch's arguments: array arguments positionally, in parameter
    order, and the non-tensor ones as keywords (what the frameworks' ``nki_call`` take)."""
    bound = launch.kernel.signature.bind(*args, **kwargs)
    tensors, static = [], {}
    for name, value in bound.arguments.items():
        if _is_tensor(value):
            if static:
                raise NKIError("kernel arguments", f"tensor argument {name!r} follows a static argument; "
                               "put tensor parameters first in the kernel signature")
            tensors.append(value)
        else:
            static[name] = value
    return tensors, static


def is_kernel(obj) -> bool:
    """True for ``@nki.jit`` kernels (and kernels bound to a grid)."""
    return isinstance(obj, (Kernel, Launch))


def _bind(kernel: Kernel, arrays, static):
    """Map positional arrays to the kernel parameters not given as static keywords.

    Returns ``(args, kwargs)`` where every tensor is wrapped as an HBM tensor named
    after its parameter.
    """
    args, arrays = [], list(arrays)
    for p in kernel.signature.parameters.values():
        if p.name in static or p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD):
            continue
        if p.kind == p.VAR_POSITIONAL:
            args += [_wrap(a, f"{p.name}{i}") for i, a in enumerate(arrays)]
            arrays = []
            break
        if not arrays:
            break
        args.append(_wrap(arrays.pop(0), p.name))
    if arrays:
        raise NKIError("kernel arguments", f"{kernel.func.__qualname__} got {len(args) + len(arrays)} positional "
                       f"arguments besides {sorted(static)}; it takes {len(args)}")
    return args, {k: _wrap(v, k) for k, v in static.items()}


def _wrap(value, name):
    if isinstance(value, np.ndarray):
        d = value.dtype
        if d not in dt.SUPPORTED and d not in (dt.float64, dt.int64):
            raise NKIError("dtype", f"kernel argument {name!r} has dtype {d}, which NKI does not support")
        if not value.flags.c_contiguous:
            # Device memory is row-major: a strided host array (a transpose, a slice) is copied into
            # HBM, as the runtime does, and what the kernel writes there is copied back after the run.
            t = HBMTensor(np.ascontiguousarray(value), name=name)
            t.host = value
            return t
        return HBMTensor(value, name=name)
    return value


def _copy_back(tensors):
    """Copy what a kernel wrote into a strided argument's HBM copy back to the caller's array."""
    for t in tensors:
        host = getattr(t, "host", None)
        if host is not None and host.flags.writeable:
            np.copyto(host, t.data)


class _LaunchState:
    """Per-launch state shared by the programs: the grid and the shared HBM outputs."""

    def __init__(self, kernel, grid, seed=None):
        self.kernel = kernel
        self.grid = grid
        # Entropy of the launch's unseeded random numbers (nl.rand, nl.dropout): each program's
        # generator derives from it and the program id, so a path that runs the programs in
        # another order or batched (and shadow mode's second run, given the same seed) draws the same.
        self.seed = secrets.randbits(64) if seed is None else seed
        self.shared = []  # k-th shared_hbm allocation of every program is the same tensor
        self.programs = 0
        self.batched = 0  # programs that ran inside vectorised batches
        self.preallocated = ()  # arrays the caller offers as the shared_hbm outputs, in allocation order
        self.wrote_inputs = False  # some program stored into a kernel argument (in-place kernel)


def _unwrap(result, kernel=None):
    """The NumPy arrays of a launch's result (HBM tensors, nested in tuples / lists). An on-chip tile
    or an index expression is no kernel result: the error names the rule and the kernel's line."""
    if isinstance(result, HBMTensor):
        return result.data
    if isinstance(result, (tuple, list)):
        return type(result)(_unwrap(r, kernel) for r in result)
    if isinstance(result, (Tile, Access)):
        what = (f"a {result.buffer.name.upper()} tile of shape {result.shape}" if isinstance(result, Tile)
                else f"an index expression of {result.tensor.name} (shape {result.shape})")
        raise NKIError("kernel result", f"the kernel returns {what}: a top-level kernel returns HBM tensors (NKI "
                       "Known Issues: \"Top-level tensors must be on HBM\"); nl.store the values into an "
                       "nl.ndarray(..., buffer=nl.shared_hbm) and return that tensor (or a reshape of it)",
                       where=_diag.definition(kernel))
    return result


def run_programs(kernel: Kernel, grid: tuple, args: list, kwargs: dict, pids=None, outputs=(), seed=None):
    """Run the kernel once per program id of ``grid`` (or of ``pids``); returns the last result.

    ``outputs``: arrays the launch's ``shared_hbm`` allocations may use (k-th allocation, when
    shape and dtype match), so results land in caller-owned buffers without a copy. ``seed``: the
    entropy of the launch's unseeded random numbers (default: fresh)."""
    if _cores.in_worker():  # a kernel on a simulated core launching a helper: inside its launch
        return _run_programs(kernel, grid, args, kwargs, pids, outputs, seed)
    with (_shadowed_launches if _config.shadow else contextlib.nullcontext()), _blas.launch_threads():
        return _run_programs(kernel, grid, args, kwargs, pids, outputs, seed)


# Launches from several threads run at once (XLA runs independent custom-calls concurrently):
# everything a launch keeps is in its thread's context (context.RunContext) or its own objects.
# Shadow mode compares a launch's warnings and prints, which Python collects process-wide
# (warnings.catch_warnings, sys.stdout), so while it is on launches take turns.
_shadowed_launches = threading.RLock()


def _run_programs(kernel, grid, args, kwargs, pids, outputs, seed):
    state = _LaunchState(kernel, grid, seed)
    state.preallocated = tuple(outputs)
    state.some_programs = pids is not None  # (eval_shape traces one program: no peers to meet)
    _diag.launch_begin(state)
    result = None
    outer = current_or_none()
    try:
        # Masked-off lanes hold garbage that may overflow; that is not the user's bug.
        with np.errstate(all="ignore"):
            if _cores.runs_on_cores(grid, _vec.enabled(), kernel):  # cores meet at sendrecv / barriers: run in turns
                result = _cores.run_launch(kernel, grid, args, kwargs, state)
            elif pids is None and math.prod(grid) > 1 and _spmd.names_all_reduce(kernel):  # programs meet there
                result = _spmd.run_programs_together(kernel, grid, args, kwargs, state)
            elif pids is None and math.prod(grid) > 1 and _vec.enabled():
                result = _vec.GridRunner(kernel, grid, args, kwargs, state).run()
            else:
                for pid in (pids if pids is not None else itertools.product(*(range(g) for g in grid))):
                    prog = Program(state, tuple(pid))
                    set_current(prog)
                    result = kernel.func(*args, **kwargs)
                    prog.finish(lambda: kernel.func(*args, **kwargs))  # live ranges, capacity, placement
                    state.programs += 1
    finally:
        set_current(outer)
    if pids is None:
        _diag.launch_end(state, result)  # races / unwritten outputs need every program
    return result, state


def simulate(kernel, grid, *arrays, **static):
    """Run ``kernel`` on the simulator over ``grid`` with NumPy inputs; returns NumPy output(s)."""
    return simulate_into((), kernel, grid, *arrays, **static)


def simulate_into(outputs, kernel, grid, *arrays, **static):
    """:func:`simulate`, letting the launch's outputs live in ``outputs`` (writeable arrays, in
    the order the kernel allocates its ``shared_hbm`` tensors) where shapes and dtypes match.

    Framework custom-call targets pass their result buffers here. The returned arrays are
    those buffers when used, else fresh ones: compare before copying."""
    if isinstance(kernel, Launch):
        kernel, grid = kernel.kernel, kernel.grid if grid in (None, ()) else normalize_grid(grid)
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be an @nki.jit kernel, got {type(kernel).__name__}")
    grid = normalize_grid(grid)
    if grid == () and kernel.options.get("lnc_brackets"):
        # "Configure the LNC degree by setting the NEURON_LOGICAL_NC_CONFIG environment variable to 1 or 2
        # before invoking the kernel. If the LNC degree is not explicitly set, the default is LNC=1" (nki.jit,
        # Neuron 2.33.1): a current-API kernel called without a bracket runs at the environment's degree
        degree = _lnc_degree.kernel_degree(())
        if degree != 1:
            grid = normalize_grid(degree, True)
    _lnc_degree.check(kernel, grid)  # (NKI 0.7.0: the kernel's and the compiler's LNC degrees match)

    def launch(arrays, outputs, seed=None):
        args, kw = _bind(kernel, arrays, static)
        result, _ = run_programs(kernel, grid, args, kw, outputs=outputs, seed=seed)
        _copy_back((*args, *kw.values()))
        return _unwrap(result, kernel)

    if _shadow.wanted():
        with _shadowed_launches:  # (both runs of one shadowed launch, with nothing in between)
            return _shadow.run(kernel, launch, arrays, outputs)
    return launch(arrays, outputs)


def eval_shape(kernel, grid, *specs, **static):
    """Output ``ShapeDtype``(s) of a launch, found by tracing only its first program on zero inputs."""
    if isinstance(kernel, Launch):
        kernel, grid = kernel.kernel, kernel.grid
    grid = normalize_grid(grid)
    arrays = [np.broadcast_to(np.zeros((), dt.as_dtype(s.dtype)), tuple(s.shape)) for s in specs]
    args, kw = _bind(kernel, arrays, static)
    result, _ = run_programs(kernel, grid, args, kw, pids=[(0,) * len(grid)])

    def spec(r):
        if isinstance(r, HBMTensor):
            return ShapeDtype(r.shape, r.dtype)
        if isinstance(r, (tuple, list)):
            return tuple(spec(x) for x in r)
        raise NKIError("kernel result", f"kernel returned {type(r).__name__}; NKI kernels return HBM tensors")

    return spec(result)


def jit(func=None, **options):
    """Decorate an NKI kernel (``@nki.jit`` / ``@nki.jit(mode=...)``)."""
    if func is None:
        return lambda f: Kernel(f, **options)
    if isinstance(func, Kernel):
        return func
    return Kernel(func, **options)


def simulate_kernel(kernel, *args, **kwargs):
    """Run ``kernel[grid]`` (or a kernel) on NumPy arrays in the simulator (official signature)."""
    if isinstance(kernel, Launch):
        return simulate(kernel.kernel, kernel.grid, *args, **kwargs)
    if isinstance(kernel, Kernel):
        return simulate(kernel, (), *args, **kwargs)
    if callable(kernel):
        return simulate(Kernel(kernel), (), *args, **kwargs)
    raise TypeError(f"simulate_kernel needs an NKI kernel, got {type(kernel).__name__}")


def baremetal(func=None, **options):
    """``@nki.baremetal``: on the simulator, a kernel that runs on NumPy arrays."""
    return jit(func, **options)
