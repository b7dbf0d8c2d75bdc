"""NumPy's BLAS threads while a launch runs.

The simulator multiplies tile-sized matrices (an ``nc_matmul`` is at most 128 x 128 by
128 x 512), many of them. Whether BLAS threads pay for such products depends on whether a core is
free for them. On the 2-core development host, 128x128 by 128x512 fp32 took 0.15 ms on two threads
and 0.25 ms on one with one core free, but 2.25 ms threaded against 0.43 ms on one thread at load
average 4 (a test suite under pytest-xdist, other jobs): OpenBLAS's spinning workers then fight for
the cores, and one nki-samples flash-attention backward test took 207 s against 50 s.

So a launch runs NumPy's BLAS on ``config.blas_threads`` threads (env ``NKI_SIM_BLAS_THREADS``) and
restores the previous count when it returns. ``auto`` (the default) takes the cores the machine's
one-minute load average leaves idle, plus the one this process runs on, and at least one; a number
is a fixed count; 0 leaves BLAS as it is. A launch never raises the count above what BLAS had. The
count is per process: NumPy matrix products of other threads during a launch use it too. Results
do not depend on it (BLAS splits a product's rows and columns among its threads, never the
contraction).
"""

from __future__ import annotations

import contextlib
import functools
import os

from . import config


@functools.cache
def _blas_libraries():
    # (threadpoolctl finds the BLAS libraries NumPy loaded; looked up once, on the first launch)
    from threadpoolctl import ThreadpoolController

    return [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (no affinity call on this platform)
        return os.cpu_count() or 1


def auto_threads() -> int:
    """``auto``'s thread count: the CPUs the one-minute load average leaves idle, plus this process's
    own (its running launch is part of the load), between 1 and :func:`usable_cpus`."""
    cpus = usable_cpus()
    try:
        load = os.getloadavg()[0]
    except OSError:  # (no load average on this platform: the cautious count)
        return 1
    return max(1, min(cpus, int(cpus - load) + 1))


@contextlib.contextmanager
def launch_threads():
    """Run the body with NumPy's BLAS on at most ``config.blas_threads`` threads (0: unchanged)."""
    limit = config.blas_threads
    if limit == "auto":
        limit = auto_threads()
    changed = []
    if limit:
        for lib in _blas_libraries():
            before = lib.get_num_threads()
            if before is not None and before > limit:
                lib.set_num_threads(limit)
                changed.append((lib, before))
    try:
        yield
    finally:
        for lib, before in changed:
            lib.set_num_threads(before)
