"""NumPy's BLAS threads while a launch runs.

The simulator multiplies tile-sized matrices (an ``nc_matmul`` is at most 128 x 128 by
128 x 512), many of them: products too small for a threaded BLAS to gain from its threads. On a
machine whose cores are busy (a test suite under pytest-xdist, an LNC=2 launch whose two cores
each multiply, other jobs) OpenBLAS's spinning workers make each product several times slower:
128x128 by 128x512 fp32 took 2.25 ms threaded and 0.43 ms on one thread on the 2-core development
host at load average 4, and one nki-samples flash-attention backward test 207 s against 50 s.
So a launch runs NumPy's BLAS on ``config.blas_threads`` threads (env ``NKI_SIM_BLAS_THREADS``,
default 1; 0 leaves BLAS as it is) and restores the previous count when it returns. The count is
per process: NumPy matrix products of other threads during a launch use it too.
"""

from __future__ import annotations

import contextlib
import functools

from . import config


@functools.cache
def _blas_libraries():
    # (threadpoolctl finds the BLAS libraries NumPy loaded; looked up once, on the first launch)
    from threadpoolctl import ThreadpoolController

    return [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]


@contextlib.contextmanager
def launch_threads():
    """Run the body with NumPy's BLAS on at most ``config.blas_threads`` threads (0: unchanged)."""
    limit = config.blas_threads
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
