"""NumPy's BLAS threads while a launch runs.

The simulator multiplies tile-sized matrices (an ``nc_matmul`` is at most 128 x 128 by
128 x 512), many of them. Whether BLAS threads pay for such products depends on whether a core is
free for them. On the 2-core development host, 128x128 by 128x512 fp32 took 0.15 ms on two threads
and 0.25 ms on one with one core free, but 2.25 ms threaded against 0.43 ms on one thread at load
average 4 (a test suite under pytest-xdist, other jobs): OpenBLAS's spinning workers then fight for
the cores, and one nki-samples flash-attention backward test took 207 s against 50 s.

So a launch runs NumPy's BLAS on ``config.blas_threads`` threads (env ``NKI_SIM_BLAS_THREADS``) and
restores the previous count when it returns. ``auto`` (the default) shares the process's CPUs among
the pytest-xdist workers of the machine (``PYTEST_XDIST_WORKER_COUNT``; all of them outside
xdist), at least one; a number is a fixed count; 0 leaves BLAS as it is. A launch never raises the
count above what BLAS had. The count is per process: NumPy matrix products of other threads during
a launch use it too.

The count is fixed for the process and never follows the machine's load (it did: the one-minute
load average chose it) because results depend on it: NumPy's OpenBLAS rounds a 128x128 by 128x512
fp32 product differently on one thread and on two (15 % of the elements differ in the last bit on
the development host), so a load-dependent count made a launch's bits depend on what else the
machine was doing, and shadow mode's second run disagree with the first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

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
    """``auto``'s thread count: this process's share of its CPUs among the machine's pytest-xdist
    workers (all of them outside xdist), at least 1; the same for every launch of the process."""
    try:
        workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        workers = 1
    return max(1, usable_cpus() // workers)


_active = 0  # launches inside launch_threads() now, in all threads
_restore = []  # (library, its thread count before the first of them)
_active_lock = threading.Lock()


@contextlib.contextmanager
def launch_threads():
    """Run the body with NumPy's BLAS on at most ``config.blas_threads`` threads (0: unchanged).

    The BLAS thread count is process-wide: the first of concurrent launches sets it, the last one
    to finish restores it."""
    global _active
    limit = config.blas_threads
    if limit == "auto":
        limit = auto_threads()
    with _active_lock:
        if _active == 0 and limit:
            for lib in _blas_libraries():
                before = lib.get_num_threads()
                if before is not None and before > limit:
                    lib.set_num_threads(limit)
                    _restore.append((lib, before))
        _active += 1
    try:
        yield
    finally:
        with _active_lock:
            _active -= 1
            if _active == 0:
                for lib, before in _restore:
                    lib.set_num_threads(before)
                _restore.clear()
