"""Simulator-side profile of a kernel launch: DMA traffic, instructions per engine, on-chip memory
peaks, and an estimated Trainium time from the engine-level timing model (:mod:`.timing`, issue 31).

``profile(kernel[grid], *arrays)`` runs the launch once with a :class:`Recorder` installed in
:mod:`.recording` and returns a :class:`Report`; ``nki.benchmark`` kernels attach the same report
after each call, and ``benchmark_result.nc_latency.get_latency_percentile(p)`` is the model's time
in microseconds. This is a *model*, not a measurement: see ``docs/timing_model.md`` for its
constants (each cites its page), its schedule and what it ignores.

This module is the profiler's face; the work is in the modules below it:

* :mod:`.profile_recorder`: the :class:`Recorder` that turns the simulator's instruction and DMA
  hooks into timing-model events and schedules them (its docstring says how the running simulator
  feeds the model);
* :mod:`.profile_operands`: how an instruction's tiles and HBM accesses become the model's operands;
* :mod:`.profile_allocator`: the stand-in for the compiler's SBUF/PSUM allocator;
* :mod:`.profile_report`: the :class:`Report` (figures, advice, trace, pictures, retime).
"""

from __future__ import annotations

import contextlib
import gc

import numpy as np

from . import recording as _prof_hooks
from .instructions import target as _target
from .launch import Kernel, Launch, _bind, _unwrap, normalize_grid, run_programs

# Re-exported: callers import these from here (tests, nki/, the package's __init__), as before the
# profiler was split into the modules above.
from .profile_allocator import SBUF_SPARE, _Allocator  # noqa: F401
from .profile_operands import (  # noqa: F401
    _SIM_DIR,
    _gen1_name,
    _hbm_box,
    _hbm_operand,
    _nblocks,
    _partitions,
    _per_partition,
    _rec_operand,
    _root,
    _space,
    _tile_geometry,
    _tile_operand,
    _view_box,
)
from .profile_recorder import (  # noqa: F401
    _COPY,
    _DNAMES,
    _MEMSET,
    _PARAMS,
    _REDUCE,
    _TT_OPS,
    _WRITES,
    COMPUTE,
    Recorder,
    _add_hbm,
    _dname,
    _Event,
    _itemsize,
    _op_name,
    _params,
    _ProgState,
)
from .profile_report import ENGINES, Report  # noqa: F401


def _nbytes(x):
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


def profile(kernel, *arrays, grid=None, version=None, sbuf_spare=SBUF_SPARE, **static) -> Report:
    """Run ``kernel[grid](*arrays, **static)`` on the simulator and return its :class:`Report`.

    ``report.outputs`` holds the kernel's results. ``version`` (2/3/4, ``"trn2"`` ...) picks the
    NeuronCore of the timing model; by default the simulated target's
    (:func:`.instructions.target.get_nc_version`: the kernel's API default when none is selected). ``sbuf_spare``: free SBUF regions of a size the
    allocator stand-in keeps before reusing one (1: double buffering).
    """
    if isinstance(kernel, Launch):
        kernel, g = kernel.kernel, kernel.grid
        grid = g if grid is None else normalize_grid(grid)
    elif not isinstance(kernel, Kernel):
        kernel = Kernel(getattr(kernel, "func", kernel))
    grid = normalize_grid(grid)
    report = Report(getattr(kernel.func, "__qualname__", str(kernel)), grid)
    # (the target a plain call of this kernel simulates: its API's default unless one is selected)
    current = bool(kernel.options.get("lnc_brackets"))
    # The recorder keeps every event alive until the schedule, so the cyclic collector would only scan
    # them again and again (0.02-0.09 s of a 2048^3 matmul's profile): it is paused for the profile, as
    # timeit pauses it, and what the launch left for it is collected afterwards as usual.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with (_target.use(_target.default_version(current)) if _target.selected_version() is None
              else contextlib.nullcontext()):
            rec = Recorder(report, version, sbuf_spare)
            args, kw = _bind(kernel, arrays, static)
            prev = _prof_hooks.recorder()
            _prof_hooks.set_recorder(rec)
            try:
                result, state = run_programs(kernel, grid, args, kw)
            finally:
                _prof_hooks.set_recorder(prev)
            rec.finish()
    finally:
        if collecting:
            gc.enable()
    report.programs = state.programs
    report.outputs = _unwrap(result, kernel)
    report.min_bytes = sum(_nbytes(a) for a in arrays) + _nbytes(report.outputs)
    return report


class _Latency:
    """``benchmark_result.nc_latency`` of the official API, from the model's estimate."""

    def __init__(self, seconds):
        self.seconds = seconds

    def get_latency_percentile(self, percentile=50):
        """The estimated latency in microseconds (the model has no spread: every percentile)."""
        return self.seconds * 1e6


class _BenchmarkResult:
    def __init__(self, report):
        self.report = report
        self.nc_latency = _Latency(report.estimated_s)


class BenchmarkKernel:
    """``@nki.benchmark`` on the simulator: calling it profiles the launch.

    After a call, ``.report`` (and ``.benchmark_result.report``) is the :class:`Report`;
    ``.benchmark_result.nc_latency.get_latency_percentile(50)`` gives the model's estimate in µs.
    """

    def __init__(self, kernel, grid=(), **options):
        self.kernel = kernel
        self.grid = grid
        self.options = options
        self.report = None
        self.benchmark_result = None

    def __getitem__(self, grid):
        b = BenchmarkKernel(self.kernel, grid, **self.options)
        b._parent = self
        return b

    def __call__(self, *arrays, **static):
        rep = profile(Launch(self.kernel, normalize_grid(self.grid)), *arrays, **static)
        for target in (self, getattr(self, "_parent", None)):
            if target is not None:
                target.report = rep
                target.benchmark_result = _BenchmarkResult(rep)
        return rep.outputs
