"""Residual RMSNorm (the pre-norm transformer step), forward and backward, rows of any length.

``h = x + residual``, ``y = h * rsqrt(mean(h**2, -1) + eps) * w``, returning
``(y, h)``. 128 rows per program; the row is walked in chunks and kept in SBUF
when it fits the resident budget, else streamed from HBM once per pass, so any
hidden size works. The same row bodies (``residual=None``) are the streaming path
of ``nki_kernels.rmsnorm`` for hidden sizes its resident kernels cannot hold.

The backward takes the gradients of both outputs: with ``hhat = h * rstd`` and
``g = dy * w``, ``dh = rstd * (g - hhat * mean(g * hhat, -1)) + dh_out`` (the
gradient of ``x`` and of ``residual`` alike) and ``dw = sum_rows(dy * hhat)``,
returned as one fp32 partial row per program (the caller sums them).
"""

from __future__ import annotations

from ..backend import nisa, nki, nl
from .rows import P, chunks, cols, resident, row_index

MM_F = 512  # moving free size of one matmul (nl.tile_size.gemm_moving_fmax)


class _Rows:
    """Chunks of one or more row tensors of this program, kept resident when ``keep``."""

    def __init__(self, tensors, ip, rows, keep):
        self.tensors, self.ip, self.rows = tensors, ip, rows
        d = tensors[0].shape[1]
        self.tiles = [nl.load(t[ip, nl.arange(d)[None, :]], mask=rows) for t in tensors] if keep else None

    def chunk(self, i, lo, hi):
        if self.tiles is not None:
            return self.tiles[i][:, lo:hi]
        return nl.load(self.tensors[i][self.ip, cols(lo, hi)], mask=self.rows)


def _weight(w, d, keep):
    """A function giving the weight's chunk broadcast to ``[P, hi - lo]``."""
    row = w.reshape((1, d))
    one = nl.arange(1)[:, None]
    whole = nl.load(row[one, nl.arange(d)[None, :]]) if keep else None

    def chunk(lo, hi):
        part = whole[:, lo:hi] if whole is not None else nl.load(row[one, cols(lo, hi)])
        return part.broadcast_to((P, hi - lo))
    return chunk


def rms_forward_rows(x, residual, w, eps, y, h_out=None, rstd_out=None):
    """Kernel body: this program's rows of ``y`` (and ``h_out = x + residual``, ``rstd_out``)."""
    n, d = x.shape
    ip, rows = row_index(n)
    sources = [x] if residual is None else [x, residual]
    keep = resident(d, x.dtype, copies=len(sources) + 2)
    src = _Rows(sources, ip, rows, keep)
    w_chunk = _weight(w, d, keep)

    def h_chunk(lo, hi):
        if residual is None:
            return src.chunk(0, lo, hi)
        # Rounded to the input dtype, as the framework's own x + residual is.
        return nl.add(src.chunk(0, lo, hi), src.chunk(1, lo, hi), dtype=x.dtype)

    kept = {}
    sum_sq = nl.zeros((P, 1), dtype=nl.float32)
    for lo, hi in chunks(d):
        h = h_chunk(lo, hi)
        if h_out is not None:
            nl.store(h_out[ip, cols(lo, hi)], value=h, mask=rows)
        if keep:
            kept[lo] = h
        sum_sq += nl.sum(nl.square(h, dtype=nl.float32), axis=[1], keepdims=True)
    rstd = nl.rsqrt(nl.add(nl.multiply(sum_sq, 1.0 / d), eps))

    for lo, hi in chunks(d):
        h = kept.pop(lo) if keep else h_chunk(lo, hi)
        normed = nl.multiply(h, rstd, dtype=nl.float32)
        nl.store(y[ip, cols(lo, hi)], value=nl.multiply(normed, w_chunk(lo, hi), dtype=x.dtype), mask=rows)
    if rstd_out is not None:
        nl.store(rstd_out[ip, nl.arange(1)[None, :]], value=rstd, mask=rows)


def rms_backward_rows(dy, h, w, rstd, dx, dw_partial, dh_out=None, drstd=None):
    """Kernel body: this program's rows of ``dx`` and its ``dw`` partial.

    ``dh_out`` (gradient of ``h`` as an output) is added to ``dx``; ``drstd`` [N, 1]
    (gradient of the saved ``rstd``) adds ``-drstd * rstd**3 * h / D``.
    """
    n, d = h.shape
    ip, rows = row_index(n)
    sources = [dy, h] if dh_out is None else [dy, h, dh_out]
    keep = resident(d, h.dtype, copies=len(sources) + 1)
    src = _Rows(sources, ip, rows, keep)
    w_chunk = _weight(w, d, keep)
    r = nl.load(rstd[ip, nl.arange(1)[None, :]], mask=rows)
    ragged = n % P != 0
    if ragged:
        # Rows past N hold no data (masked-off SBUF lanes are undefined on hardware, possibly NaN):
        # keep them out of dw, zeroing both the products and the rstd they are contracted against.
        row_ok = nl.less(nisa.iota(ip, dtype=nl.int32), n, dtype=nl.float32)
        r_dw = nl.where(row_ok, r, 0.0)

    dot = nl.zeros((P, 1), dtype=nl.float32)
    for lo, hi in chunks(d):
        g = nl.multiply(src.chunk(0, lo, hi), w_chunk(lo, hi), dtype=nl.float32)
        dot += nl.sum(nl.multiply(g, src.chunk(1, lo, hi)), axis=[1], keepdims=True)
    # mean(g * hhat) = rstd * mean(g * h)
    mean_dot = nl.multiply(nl.multiply(dot, r), 1.0 / d)
    if drstd is not None:
        # d rstd / d h = -rstd**3 * h / D = -(hhat * rstd) * (rstd / D): folded into mean_dot
        dr = nl.load(drstd[ip, nl.arange(1)[None, :]], mask=rows, dtype=nl.float32)
        mean_dot = nl.add(mean_dot, nl.multiply(nl.multiply(dr, r), 1.0 / d))
    c = nl.multiply(mean_dot, r)  # dx = rstd * (g - h * c): hhat is never formed

    for lo, hi in chunks(d):
        dy_c, h_c = src.chunk(0, lo, hi), src.chunk(1, lo, hi)
        # dw = sum_rows(rstd * dy * h): rows of dy * h contracted against rstd on the Tensor engine
        contrib = nl.multiply(dy_c, h_c, dtype=nl.float32)
        if ragged:
            contrib = nl.where(row_ok, contrib, 0.0)
        for mlo in range(lo, hi, MM_F):
            mhi = min(hi, mlo + MM_F)
            part = nisa.nc_matmul(r_dw if ragged else r, contrib[:, mlo - lo:mhi - lo])
            nl.store(dw_partial[nl.program_id(0) + nl.arange(1)[:, None], cols(mlo, mhi)], value=part)
        g = nl.multiply(dy_c, w_chunk(lo, hi), dtype=nl.float32)
        g -= nl.multiply(h_c, c, dtype=nl.float32)  # in place: no third full-size temporary
        if dh_out is None:
            grad = nl.multiply(g, r, dtype=h.dtype)
        else:
            grad = nl.add(nl.multiply(g, r), src.chunk(2, lo, hi), dtype=h.dtype)
        nl.store(dx[ip, cols(lo, hi)], value=grad, mask=rows)


@nki.jit
def residual_rms_norm_fwd_kernel(x, residual, w, eps=1e-6):
    """``(y, h, rstd)`` for 2-D ``x``, ``residual`` [N, D] and weight ``w`` [D]; grid ``row_grid(N)``.

    ``h = x + residual`` and ``y`` are in x's dtype; ``rstd`` [N, 1] float32 is saved for the backward.
    """
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    h = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    rstd = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    rms_forward_rows(x, residual, w, eps, y, h_out=h, rstd_out=rstd)
    return y, h, rstd


@nki.jit
def residual_rms_norm_bwd_kernel(h, w, rstd, dy, dh, drstd=None):
    """Gradients for :func:`residual_rms_norm_fwd_kernel`: ``(dx, dw_partial)``; grid ``row_grid(N)``.

    ``dy``, ``dh`` and (optional) ``drstd`` are the gradients of ``y``, ``h`` and ``rstd``;
    ``dx`` is the gradient of ``x`` and of ``residual``; ``dw_partial`` [G, D] float32
    sums over axis 0 to ``dw``.
    """
    n, d = h.shape
    dx = nl.ndarray((n, d), dtype=h.dtype, buffer=nl.shared_hbm)
    dw_partial = nl.ndarray((nl.num_programs(0), d), dtype=nl.float32, buffer=nl.shared_hbm)
    rms_backward_rows(dy, h, w, rstd, dx, dw_partial, dh_out=dh, drstd=drstd)
    return dx, dw_partial
