"""Kernels of the op-builder tests (not shipped) and the ops declared from them.

- ``nki_test::softplus``: ``softplus(beta * x) / beta`` (``beta`` static), from a forward
  and a backward kernel of its own, rows independent: the issue's example.
- ``nki_test::colsum``: ``x.sum(0)`` in float32, an output that is a sum over rows (``psum``).
- ``nki_test::scale``: ``x * w`` with a weight ``w`` shared by all rows; the backward kernel
  writes per-program partial weight gradients, which a backward function sums (no
  ``segments`` parameter, so under vmap each example's backward is launched on its own).

Imported once per process (a torch op name can be defined only once).
"""

from __future__ import annotations

import nki_kernels
from nki_kernels.backend import nisa, nki, nl

P = 128


def _rows(n):
    ip = nl.program_id(0) * P + nl.arange(P)[:, None]
    return ip, ip < n


def _row_vector(v, d):
    """A [D] tensor loaded once and broadcast over the program's 128 rows."""
    return nl.load(v.reshape((1, d))[nl.arange(1)[:, None], nl.arange(d)[None, :]]).broadcast_to((P, d))


@nki.jit
def softplus_fwd(x, beta=1.0):
    """``log(1 + exp(beta * x)) / beta`` of a 2-D ``x`` (columns <= 512); grid ``row_grid(N)``."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    t = nl.load(x[ip, iw], mask=rows)
    sp = nl.softplus(nl.multiply(t, beta, dtype=nl.float32), mask=rows)
    nl.store(y[ip, iw], value=nl.multiply(sp, 1.0 / beta, dtype=x.dtype), mask=rows)
    return y


@nki.jit
def softplus_bwd(x, dy, beta=1.0):
    """``dy * sigmoid(beta * x)``: the gradient of :func:`softplus_fwd` for ``x``."""
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    t = nl.load(x[ip, iw], mask=rows)
    g = nl.load(dy[ip, iw], mask=rows)
    s = nl.sigmoid(nl.multiply(t, beta, dtype=nl.float32), mask=rows)
    nl.store(dx[ip, iw], value=nl.multiply(g, s, dtype=x.dtype), mask=rows)
    return dx


softplus = nki_kernels.op(
    "nki_test::softplus",
    forward=softplus_fwd,
    backward=softplus_bwd,
    residuals="inputs",
    grid=lambda x: nki_kernels.row_grid(x.shape[0]),
    batch="rows",
    partition="rows",
)


@nki.jit
def scale_fwd(x, w):
    """``x * w`` for 2-D ``x`` [N, D] and ``w`` [D] (D <= 512); grid ``row_grid(N)``."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    wt = _row_vector(w, d)
    nl.store(y[ip, iw], value=nl.multiply(nl.load(x[ip, iw], mask=rows), wt, dtype=x.dtype), mask=rows)
    return y


@nki.jit
def scale_bwd(x, w, dy):
    """``(dx, dw_partial)``: ``dx = dy * w`` and one float32 row of ``sum_rows(dy * x)`` per program."""
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    part = nl.ndarray((nl.num_programs(0), d), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    wt = _row_vector(w, d)
    g = nl.load(dy[ip, iw], mask=rows)
    nl.store(dx[ip, iw], value=nl.multiply(g, wt, dtype=x.dtype), mask=rows)
    # Rows past N are zeroed: masked-off lanes are undefined on hardware.
    contrib = nl.where(nl.less(nisa.iota(ip, dtype=nl.int32), n, dtype=nl.float32),
                       nl.multiply(g, nl.load(x[ip, iw], mask=rows), dtype=nl.float32), 0.0)
    ones = nl.full((P, 1), 1.0, dtype=nl.float32)
    nl.store(part[nl.program_id(0) + nl.arange(1)[:, None], iw], value=nisa.nc_matmul(ones, contrib))
    return dx, part


def scale_backward(x, w, dy):
    """``(dx, dw)``: the backward kernel, then the sum of its partials (float32)."""
    dx, part = scale_bwd[nki_kernels.row_grid(x.shape[0])](x, w, dy)
    return dx, part.sum(0)


scale = nki_kernels.op(
    "nki_test::scale",
    forward=scale_fwd,
    backward=scale_backward,
    residuals="inputs",
    grid=lambda x, w: nki_kernels.row_grid(x.shape[0]),
    partition=nki_kernels.Rows(shared=("w",)),
)


@nki.jit
def colsum_partials(x):
    """One float32 row per program: the sum of its 128 rows of ``x`` [N, D] (D <= 512)."""
    n, d = x.shape
    part = nl.ndarray((nl.num_programs(0), d), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    t = nl.where(nl.less(nisa.iota(ip, dtype=nl.int32), n, dtype=nl.float32),
                 nl.load(x[ip, iw], mask=rows), 0.0, dtype=nl.float32)
    ones = nl.full((P, 1), 1.0, dtype=nl.float32)
    nl.store(part[nl.program_id(0) + nl.arange(1)[:, None], iw], value=nisa.nc_matmul(ones, t))
    return part


@nki.jit
def colsum_bwd(x, dy):
    """``dx[i, :] = dy`` for every row ``i`` of ``x``: the gradient of a column sum."""
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    g = _row_vector(dy, d)
    nl.store(dx[ip, iw], value=nl.copy(g, dtype=x.dtype), mask=rows)
    return dx


def colsum_forward(x):
    """``x.sum(0)`` in float32: the kernel's per-program partials, summed."""
    return colsum_partials[nki_kernels.row_grid(x.shape[0])](x).sum(0)


colsum = nki_kernels.op(
    "nki_test::colsum",
    forward=colsum_forward,
    backward=colsum_bwd,
    residuals="inputs",
    grid=lambda x: nki_kernels.row_grid(x.shape[0]),
    partition=nki_kernels.Rows(psum=(0,)),  # the output is a sum over rows
)
