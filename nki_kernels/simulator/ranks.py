"""Simulated collective ranks: one launch run once per rank of a world (``nki.collectives``).

Above the launcher (:mod:`.launch`) and the cores' runtime (:mod:`.cores`): every rank's cores are
workers of one :class:`~.cores.Group`, so collectives meet across the ranks of their replica group.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import diagnostics as _diag
from . import launch as _launch
from .cores import Group, cores_of


def simulate_ranks(kernel, ranks: int, *arrays, **static):
    """Run ``kernel`` (or ``kernel[grid]``) on a simulated world of ``ranks`` ranks; returns the
    list of each rank's outputs (NumPy arrays, as ``kernel(...)`` returns them).

    Every rank runs the whole launch (all programs and logical cores of its grid) on its own
    HBM; ``nki.collectives.rank_id()`` says which rank a program belongs to, and collectives
    meet across the ranks of their replica group. A positional argument is either one
    array, which every rank gets its own copy of, or a list/tuple of ``ranks`` arrays, the
    r-th for rank r. Keyword arguments are static and the same for all ranks.
    """
    if isinstance(kernel, _launch.Launch):
        kernel, grid = kernel.kernel, kernel.grid
    else:
        grid = ()
    if not isinstance(kernel, _launch.Kernel):
        raise TypeError(f"simulate_ranks: kernel must be an @nki.jit kernel, got {type(kernel).__name__}")
    if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
        raise ValueError(f"simulate_ranks: ranks must be a positive integer, got {ranks!r}")
    ranks = int(ranks)
    per_rank = []
    for k, a in enumerate(arrays):
        if isinstance(a, (list, tuple)):
            if len(a) != ranks:
                raise ValueError(f"simulate_ranks: positional argument {k} lists {len(a)} arrays; give one "
                                 f"array (every rank gets a copy) or one per rank ({ranks})")
            per_rank.append([np.asarray(x) for x in a])
        else:
            per_rank.append([np.array(a, copy=True) for _ in range(ranks)])
    grid = _launch.normalize_grid(grid)
    pids = list(itertools.product(*(range(g) for g in grid)))
    ncores = cores_of(grid)
    group = Group(kernel, world=ranks)
    states, last = [], []
    for r in range(ranks):
        args, kw = _launch._bind(kernel, [p[r] for p in per_rank], static)
        state = _launch._LaunchState(kernel, grid)
        _diag.launch_begin(state)
        states.append(state)
        ws = [group.add(r, c, [p for p in pids if ncores == 1 or grid.core_of(p) == c], state, args, kw)
              for c in range(ncores)]
        last.append(ws[grid.core_of(pids[-1]) if ncores > 1 else 0])
    group.run()
    for state, w in zip(states, last):
        _diag.launch_end(state, w.result)
    return [_launch._unwrap(w.result) for w in last]
