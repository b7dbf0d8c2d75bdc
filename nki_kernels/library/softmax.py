"""Softmax over the last axis, forward and backward: 128 rows per program, rows of any length.

Forward: an online max / sum-of-exponentials pass over the row's chunks (fp32
statistics), then ``exp(x - max) / sum`` written chunk by chunk. Backward from the
saved output ``y``: ``dx = y * (dy - sum(dy * y))``. Rows that fit the resident
budget are loaded once; longer rows are streamed from HBM once per pass.
"""

from __future__ import annotations

from ..backend import nisa, nki, nl
from .rows import P, RowSource, chunks, cols, resident, row_index


def online_logsumexp(src: RowSource, d: int, visit=None):
    """Running ``(max, sum(exp(x - max)))`` of the rows of ``src``, both ``[P, 1]`` float32.

    ``visit(x, lo, hi)``, when given, sees each loaded chunk too (one pass for other statistics).
    """
    m = s = None
    for lo, hi in chunks(d):
        x = src.chunk(lo, hi)
        if visit is not None:
            visit(x, lo, hi)
        m_c = nl.max(x, axis=[1], keepdims=True, dtype=nl.float32)
        m_new = m_c if m is None else nl.maximum(m, m_c)
        e = nisa.activation(op=nl.exp, data=x, bias=nl.negative(m_new), dtype=nl.float32)
        s_c = nl.sum(e, axis=[1], keepdims=True)
        # Rescale what was summed against the old max to the new one.
        s = s_c if s is None else nl.add(nl.multiply(s, nl.exp(nl.subtract(m, m_new))), s_c)
        m = m_new
    return m, s


@nki.jit
def softmax_fwd_kernel(x):
    """Softmax over the last axis of 2-D ``x`` [N, D]; grid ``row_grid(N)``. Returns ``y`` (x.dtype)."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = row_index(n)
    src = RowSource(x, ip, rows, keep=resident(d, x.dtype))
    m, s = online_logsumexp(src, d)
    neg_m, inv_s = nl.negative(m), nl.reciprocal(s)
    for lo, hi in chunks(d):
        e = nisa.activation(op=nl.exp, data=src.chunk(lo, hi), bias=neg_m, dtype=nl.float32)
        nl.store(y[ip, cols(lo, hi)], value=nl.multiply(e, inv_s, dtype=x.dtype), mask=rows)
    return y


@nki.jit
def softmax_bwd_kernel(y, dy):
    """Gradient of softmax from its output ``y`` [N, D] and ``dy``; grid ``row_grid(N)``. Returns ``dx``."""
    n, d = y.shape
    dx = nl.ndarray((n, d), dtype=y.dtype, buffer=nl.shared_hbm)
    ip, rows = row_index(n)
    keep = resident(d, y.dtype, copies=2)
    ys, dys = RowSource(y, ip, rows, keep), RowSource(dy, ip, rows, keep)
    dot = nl.zeros((P, 1), dtype=nl.float32)
    for lo, hi in chunks(d):
        dot += nl.sum(nl.multiply(ys.chunk(lo, hi), dys.chunk(lo, hi), dtype=nl.float32), axis=[1], keepdims=True)
    for lo, hi in chunks(d):
        g = nl.multiply(nl.subtract(dys.chunk(lo, hi), dot, dtype=nl.float32), ys.chunk(lo, hi), dtype=y.dtype)
        nl.store(dx[ip, cols(lo, hi)], value=g, mask=rows)
    return dx
