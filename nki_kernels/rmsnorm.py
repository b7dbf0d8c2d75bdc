"""RMSNorm forward and backward kernels: rows tiled by 128 on a 1-D SPMD grid.

``y = x * rsqrt(mean(x**2, -1) + eps) * w`` over the last axis of a 2-D ``x``.
Each program owns 128 rows and keeps them resident in SBUF; the hidden axis is
processed in chunks of ``CHUNK`` so the fp32 temporaries stay bounded. Rows too
long to stay resident in the 192 KiB per partition (more than ``FWD_RESIDENT_BYTES``
/ ``BWD_RESIDENT_BYTES`` per row) take the streaming row bodies of
``nki_kernels.library.residual_rms_norm``, which reload the row from HBM per pass,
so any hidden size works. Statistics are accumulated in fp32 whatever
the input dtype; outputs are written in the input dtype.

The backward kernel produces ``dx`` and one fp32 partial ``dw`` per program
(a partition-axis sum done on the Tensor engine as ``ones.T @ (dy * xhat)``);
the caller sums the partials.
"""

from __future__ import annotations

import numpy as np

from .backend import nisa, nki, nl
from .library.residual_rms_norm import rms_backward_rows, rms_forward_rows

P = 128  # rows per program (nl.tile_size.pmax)
CHUNK = 4096  # hidden elements per compute step: 16 KiB fp32 temporaries per partition
MM_F = 512  # moving free size of one matmul (nl.tile_size.gemm_moving_fmax)
FWD_RESIDENT_BYTES = 32 * 1024  # longest row (per partition) the forward keeps resident: x and w
BWD_RESIDENT_BYTES = 16 * 1024  # the backward keeps x, dy and w resident


def _row_bytes(t):
    return t.shape[1] * np.dtype(t.dtype).itemsize


def _chunks(d):
    return [(lo, min(d, lo + CHUNK)) for lo in range(0, d, CHUNK)]


@nki.jit
def rms_norm_fwd_kernel(x, w, eps=1e-6, return_rstd=False):
    """RMSNorm of 2-D ``x`` [N, D] with weight ``w`` [D]; grid ``row_grid(N)``.

    Returns ``y`` [N, D] (x.dtype), or ``(y, rstd)`` with the per-row reciprocal
    RMS ``rstd`` [N, 1] float32 when ``return_rstd``.
    """
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm) if return_rstd else None
    if _row_bytes(x) > FWD_RESIDENT_BYTES:
        rms_forward_rows(x, None, w, eps, y, rstd_out=rstd_out)
        return (y, rstd_out) if return_rstd else y

    ip = nl.program_id(0) * P + nl.arange(P)[:, None]
    iw = nl.arange(d)[None, :]
    rows = ip < n

    x_tile = nl.load(x[ip, iw], mask=rows)
    w_tile = nl.load(w.reshape((1, d))[nl.arange(1)[:, None], iw])
    w_bcast = w_tile.broadcast_to((P, d))

    sum_sq = nl.zeros((P, 1), dtype=nl.float32)
    for lo, hi in _chunks(d):
        # (one expression: a square still held by a name would be formed whole when sum_sq is
        # updated, although the sum alone reads it)
        sum_sq += nl.sum(nl.square(x_tile[:, lo:hi], dtype=nl.float32), axis=[1], keepdims=True)
    rstd = nl.rsqrt(nl.add(nl.multiply(sum_sq, 1.0 / d), eps))

    for lo, hi in _chunks(d):
        normed = nl.multiply(x_tile[:, lo:hi], rstd, dtype=nl.float32)
        out = nl.multiply(normed, w_bcast[:, lo:hi], dtype=x.dtype)
        nl.store(y[ip, lo + nl.arange(hi - lo)[None, :]], value=out, mask=rows)

    if return_rstd:
        nl.store(rstd_out[ip, nl.arange(1)[None, :]], value=rstd, mask=rows)
        return y, rstd_out
    return y


@nki.jit
def rms_norm_bwd_kernel(dy, x, w, rstd):
    """Gradients of RMSNorm for 2-D ``x`` [N, D]; grid ``row_grid(N)``.

    ``rstd`` [N, 1] float32 comes from the forward. Returns ``dx`` [N, D]
    (x.dtype) and ``dw_partial`` [G, D] float32, one row per program, whose sum
    over axis 0 is ``dw``. With ``xhat = x * rstd`` and ``g = dy * w``:
    ``dx = rstd * (g - xhat * mean(g * xhat, -1))`` and ``dw = sum_rows(dy * xhat)``.
    """
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    dw_partial = nl.ndarray((nl.num_programs(0), d), dtype=nl.float32, buffer=nl.shared_hbm)
    if _row_bytes(x) > BWD_RESIDENT_BYTES:
        rms_backward_rows(dy, x, w, rstd, dx, dw_partial)
        return dx, dw_partial

    ip = nl.program_id(0) * P + nl.arange(P)[:, None]
    iw = nl.arange(d)[None, :]
    rows = ip < n

    x_tile = nl.load(x[ip, iw], mask=rows)
    dy_tile = nl.load(dy[ip, iw], mask=rows)
    r = nl.load(rstd[ip, nl.arange(1)[None, :]], mask=rows)
    w_bcast = nl.load(w.reshape((1, d))[nl.arange(1)[:, None], iw]).broadcast_to((P, d))
    ragged = n % P != 0  # shapes are static: only then can a program hold rows past N
    if ragged:
        # Rows past N hold no data; zero their contribution to dw explicitly
        # (masked-off SBUF lanes are undefined on hardware, possibly NaN).
        row_ok = nl.less(nisa.iota(ip, dtype=nl.int32), n, dtype=nl.float32)

    # dw = sum_rows(rstd * dy * x): the Tensor engine contracts the rows of dy * x against
    # rstd (xhat is never formed). Done first, so that product is dropped before the rest.
    for lo, hi in _chunks(d):
        _store_dw_partials(dy_tile, x_tile, r, dw_partial, lo, hi, row_ok if ragged else None)

    # mean(g * xhat) = rstd * mean(g * x), so dx = rstd * (g - x * (rstd * mean(g * x))):
    # g is formed once and updated in place (one full-size temporary besides x * c).
    chunks = _chunks(d)
    kept_g = [] if len(chunks) == 1 else None
    dot = nl.zeros((P, 1), dtype=nl.float32)
    for lo, hi in chunks:
        g = nl.multiply(dy_tile[:, lo:hi], w_bcast[:, lo:hi], dtype=nl.float32)
        if kept_g is not None:
            kept_g.append(g)
        dot += nl.sum(nl.multiply(g, x_tile[:, lo:hi]), axis=[1], keepdims=True)
    c = nl.multiply(nl.multiply(dot, r), r * (1.0 / d))

    for lo, hi in chunks:
        g = kept_g.pop() if kept_g else nl.multiply(dy_tile[:, lo:hi], w_bcast[:, lo:hi], dtype=nl.float32)
        g -= nl.multiply(x_tile[:, lo:hi], c, dtype=nl.float32)
        nl.store(dx[ip, lo + nl.arange(hi - lo)[None, :]], value=nl.multiply(g, r, dtype=x.dtype), mask=rows)
    return dx, dw_partial


def _store_dw_partials(dy_tile, x_tile, r, dw_partial, lo, hi, row_ok):
    """Store this program's ``sum_rows(rstd * dy * x)`` of hidden columns ``lo:hi`` into its row of
    ``dw_partial``, in matmuls of ``MM_F`` columns against ``rstd`` as the stationary operand."""
    contrib = nl.multiply(dy_tile[:, lo:hi], x_tile[:, lo:hi], dtype=nl.float32)
    if row_ok is not None:  # rows past N: both operands zeroed (0 * NaN would still be NaN)
        contrib = nl.where(row_ok, contrib, 0.0)
        r = nl.where(row_ok, r, 0.0)
    for mlo in range(lo, hi, MM_F):
        mhi = min(hi, mlo + MM_F)
        part = nisa.nc_matmul(r, contrib[:, mlo - lo:mhi - lo])
        nl.store(dw_partial[nl.program_id(0) + nl.arange(1)[:, None], mlo + nl.arange(mhi - mlo)[None, :]],
                 value=part)


def row_grid(n_rows: int) -> tuple:
    """The 1-D launch grid covering ``n_rows`` rows, 128 per program."""
    return (max(1, -(-int(n_rows) // P)),)
