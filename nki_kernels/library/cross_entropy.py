"""Cross-entropy over large vocabularies, forward and fused backward, 128 rows per program.

Forward: one streamed pass over the logits' chunks keeps the online logsumexp and
picks the label's logit, giving each row's loss ``logsumexp(x) - x[label]`` and its
``logsumexp`` (saved for the backward). Backward: one more streamed pass writes
``(exp(x - lse) - onehot(label)) * dloss`` chunk by chunk, so probabilities never
reach HBM; only the logits' gradient is written. Rows whose label is
``ignore_index`` have loss 0 and gradient 0 (as ``torch.nn.functional.cross_entropy``).
"""

from __future__ import annotations

from ..backend import nisa, nki, nl
from .rows import CHUNK, P, RowSource, chunks, cols, resident, row_index
from .softmax import online_logsumexp

IGNORE_INDEX = -100  # torch.nn.functional.cross_entropy's default


def _labels(labels, ip, rows, ignore_index):
    """This program's labels ``[P, 1]`` (float32, exact below 2**24) and the rows that count."""
    n = labels.shape[0]
    lab = nl.load(labels.reshape((n, 1))[ip, nl.arange(1)[None, :]], mask=rows, dtype=nl.float32)
    return lab, nl.not_equal(lab, float(ignore_index), dtype=nl.float32)


def _onehot(column_ids, lab, lo, hi):
    """``[P, hi - lo]`` float32: 1 where the chunk's column is the row's label."""
    return nl.equal(column_ids[:, 0:hi - lo], nl.subtract(lab, float(lo)), dtype=nl.float32)


def _column_ids(d):
    """Column numbers ``0 .. min(d, CHUNK)-1`` on every partition (float32, exact)."""
    width = min(d, CHUNK)
    return nisa.iota(nl.arange(width)[None, :], dtype=nl.float32).broadcast_to((P, width))


@nki.jit
def cross_entropy_fwd_kernel(logits, labels, ignore_index=IGNORE_INDEX):
    """Per-row cross-entropy of ``logits`` [N, V] against int ``labels`` [N]; grid ``row_grid(N)``.

    Returns ``loss`` [N, 1] and ``lse`` [N, 1] (float32): ``loss = (lse - logits[label]) * valid``.
    """
    n, v = logits.shape
    loss = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    lse = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, rows = row_index(n)
    lab, valid = _labels(labels, ip, rows, ignore_index)
    column_ids = _column_ids(v)
    picked = nl.zeros((P, 1), dtype=nl.float32)

    def pick(x, lo, hi):
        nonlocal picked
        hit = nl.where(_onehot(column_ids, lab, lo, hi), x, 0.0, dtype=nl.float32)
        picked = nl.add(picked, nl.sum(hit, axis=[1], keepdims=True))

    src = RowSource(logits, ip, rows, keep=False)  # one pass: nothing to keep
    m, s = online_logsumexp(src, v, visit=pick)
    row_lse = nl.add(m, nl.log(s))
    one = nl.arange(1)[None, :]
    nl.store(lse[ip, one], value=row_lse, mask=rows)
    nl.store(loss[ip, one], value=nl.multiply(nl.subtract(row_lse, picked), valid), mask=rows)
    return loss, lse


@nki.jit
def cross_entropy_bwd_kernel(logits, labels, lse, dloss, dlse=None, ignore_index=IGNORE_INDEX):
    """Gradient of the per-row losses: ``dlogits = (softmax(logits) - onehot) * dloss * valid``.

    ``lse`` [N, 1] comes from the forward, ``dloss`` [N, 1] float32 is the upstream
    gradient of each row's loss; ``dlse`` [N, 1], when given, that of the saved
    ``lse`` (adding ``softmax(logits) * dlse``); grid ``row_grid(N)``. Returns
    ``dlogits`` (logits.dtype).
    """
    n, v = logits.shape
    dlogits = nl.ndarray((n, v), dtype=logits.dtype, buffer=nl.shared_hbm)
    ip, rows = row_index(n)
    lab, valid = _labels(labels, ip, rows, ignore_index)
    one = nl.arange(1)[None, :]
    neg_lse = nl.negative(nl.load(lse[ip, one], mask=rows))
    scale = nl.multiply(nl.load(dloss[ip, one], mask=rows, dtype=nl.float32), valid)
    # p * (scale + dlse) - onehot * scale
    scale_p = scale if dlse is None else nl.add(scale, nl.load(dlse[ip, one], mask=rows, dtype=nl.float32))
    column_ids = _column_ids(v)
    for lo, hi in chunks(v):
        x = nl.load(logits[ip, cols(lo, hi)], mask=rows)
        p = nisa.activation(op=nl.exp, data=x, bias=neg_lse, dtype=nl.float32)
        onehot = _onehot(column_ids, lab, lo, hi)
        if dlse is None:
            g = nl.multiply(nl.subtract(p, onehot), scale, dtype=logits.dtype)
        else:
            g = nl.subtract(nl.multiply(p, scale_p), nl.multiply(onehot, scale), dtype=logits.dtype)
        nl.store(dlogits[ip, cols(lo, hi)], value=g, mask=rows)
    return dlogits
