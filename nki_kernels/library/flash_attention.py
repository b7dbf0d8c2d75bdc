"""Flash attention forward and backward: tiled, online softmax, causal, grouped-query heads.

Layout as ``torch.nn.functional.scaled_dot_product_attention``: ``q`` [B, H, Sq, D],
``k`` / ``v`` [B, Hkv, Sk, D] with ``H`` a multiple of ``Hkv`` (query head ``h``
reads key/value head ``h // (H // Hkv)``), ``D <= 128``. Causal masking keeps key
``j`` for query ``i`` when ``j <= i`` (torch's top-left alignment).

Forward (grid ``(B, Hkv, H // Hkv, ceil(Sq / 128))``): each program owns 128 query
rows of one head. ``q`` / ``k`` tiles are loaded row-major and put head_dim on the
partition axis with ``nc_transpose`` on the Tensor engine (rows past the sequence are
zeroed first). Scores ``S = q k^T`` of a 512-key tile come from one
``nc_matmul`` into PSUM (head_dim contracted on the partition axis), the running
max / sum rescale the accumulated ``P v`` (online softmax, fp32 statistics), and
``P v`` contracts keys 128 at a time after transposing ``P`` on the Tensor
engine. It saves each row's ``logsumexp`` for the backward.

Backward, recomputing ``P = exp(S - lse)`` from the saved ``lse`` with
``Di = rowsum(dO * O)`` and ``dS = P * (dO v^T - Di)``:
``flash_attention_bwd_dq_kernel`` (grid as the forward) accumulates
``dq = scale * dS k`` over the key tiles; ``flash_attention_bwd_dkdv_kernel``
(grid ``(B, Hkv, ceil(Sk / 128))``) owns 128 keys and accumulates
``dv = P^T dO`` and ``dk = scale * dS^T q`` over every query tile of the heads
sharing them, so no two programs write the same gradient.
"""

from __future__ import annotations

from ..backend import nisa, nki, nl

Q_TILE = 128  # query rows per program (partition axis)
K_TILE = 512  # keys per score tile (nl.tile_size.gemm_moving_fmax)
K_SUB = 128  # keys per P v contraction (partition axis)
MASKED = -30000.0  # score of a masked key: exp(MASKED - max) is 0 in fp32, and no inf - inf


def _tiles(n, size):
    return [(lo, min(n, lo + size)) for lo in range(0, n, size)]


def _causal(scores, q0, k0, width):
    """``scores`` [128, width] with keys after their query (``k0 + j > q0 + i``) set to MASKED."""
    i_q, i_k = nl.mgrid[0:Q_TILE, 0:width]
    return nisa.affine_select(pred=(q0 + i_q - k0 - i_k >= 0), on_true_tile=scores, on_false_value=MASKED,
                              dtype=nl.float32)


def _scores(q_t, k_t, scale, causal, q0, k0, width):
    """Scaled (and causally masked) scores [128, width] float32 of a query tile against a key tile."""
    s = nl.multiply(nisa.nc_matmul(q_t, k_t), scale, dtype=nl.float32)
    return _causal(s, q0, k0, width) if causal else s


def _transposed(t, lo, hi, dtype):
    """Columns ``[lo, hi)`` of ``t`` transposed onto the partition axis, as an SBUF tile of ``dtype``."""
    return nl.copy(nisa.nc_transpose(t[:, lo:hi]), dtype=dtype)


def _rows(src, n, row0=0, n_valid=None):
    """Rows ``row0 + [0, n)`` of an HBM [rows, d] view as SBUF tiles of at most 128 rows.

    ``src(rows)`` indexes the view with a row index expression. With ``n_valid``, rows
    past it are masked off and zeroed: a transpose on the Tensor engine is a matmul
    against the identity, so an undefined (NaN) lane would spread to every column.
    """
    out = []
    for c0, c1 in _tiles(n, K_SUB):
        ids = row0 + c0 + nl.arange(c1 - c0)[:, None]
        if n_valid is None:
            out.append(nl.load(src(ids)))
        else:
            chunk = nl.load(src(ids), mask=ids < n_valid)
            out.append(nl.where(nl.less(nisa.iota(ids, dtype=nl.int32), n_valid), chunk, 0.0))
    return out


def _transpose_rows(chunks, dtype):
    """Row tiles ([<=128, d] each) side by side and transposed: one SBUF tile [d, total rows]."""
    d, n = chunks[0].shape[1], sum(c.shape[0] for c in chunks)
    t = nl.ndarray((d, n), dtype=dtype, buffer=nl.sbuf)
    lo = 0
    for c in chunks:
        t[:, lo:lo + c.shape[0]] = nl.copy(nisa.nc_transpose(c), dtype=dtype)
        lo += c.shape[0]
    return t


def _load_t(src, n, dtype, row0=0, n_valid=None):
    """Rows ``row0 + [0, n)`` of an HBM view transposed: SBUF [d, n] (see :func:`_rows`)."""
    return _transpose_rows(_rows(src, n, row0, n_valid), dtype)


def _query_rows(sq):
    """This program's query row index [128, 1] (grid axis 3) and the rows inside ``sq``."""
    iq = nl.program_id(3) * Q_TILE + nl.arange(Q_TILE)[:, None]
    return iq, iq < sq


@nki.jit
def flash_attention_fwd_kernel(q, k, v, causal=False, scale=1.0):
    """Attention output ``o`` [B, H, Sq, D] (q.dtype) and ``lse`` [B, H, Sq, 1] float32.

    Grid ``attention_grid(q.shape, k.shape)``.
    """
    b_n, h_n, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = h_n // hkv
    o = nl.ndarray((b_n, h_n, sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((b_n, h_n, sq, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.program_id(0)
    h = nl.program_id(1) * group + nl.program_id(2)
    q0 = nl.program_id(3) * Q_TILE
    iq, rows = _query_rows(sq)
    i_d = nl.arange(d)[None, :]
    q_t = _load_t(lambda r: q[b, h, r, i_d], Q_TILE, q.dtype, q0, sq)  # [D, 128]: head_dim on partitions
    hk = nl.program_id(1)

    m = l = acc = None
    for k0, k1 in _tiles(sk, K_TILE):
        w = k1 - k0
        k_t = _load_t(lambda r: k[b, hk, r, i_d], w, k.dtype, k0)  # [D, w]
        s = _scores(q_t, k_t, scale, causal, q0, k0, w)
        m_tile = nl.max(s, axis=[1], keepdims=True)
        m_new = m_tile if m is None else nl.maximum(m, m_tile)
        p = nisa.activation(op=nl.exp, data=s, bias=nl.negative(m_new), dtype=nl.float32)
        p_sum = nl.sum(p, axis=[1], keepdims=True)

        pv = nl.zeros((Q_TILE, d), dtype=nl.float32, buffer=nl.psum)
        for c0, c1 in _tiles(w, K_SUB):
            v_c = nl.load(v[b, hk, k0 + c0 + nl.arange(c1 - c0)[:, None], i_d])
            pv += nisa.nc_matmul(_transposed(p, c0, c1, v.dtype), v_c)

        if m is None:
            l, acc = p_sum, nl.copy(pv, dtype=nl.float32)
        else:
            alpha = nl.exp(nl.subtract(m, m_new))  # rescales what was accumulated against the old max
            l = nl.add(nl.multiply(l, alpha), p_sum)
            acc = nl.add(nl.multiply(acc, alpha), pv)
        m = m_new

    nl.store(o[b, h, iq, i_d], value=nl.multiply(acc, nl.reciprocal(l), dtype=q.dtype), mask=rows)
    nl.store(lse[b, h, iq, nl.arange(1)[None, :]], value=nl.add(m, nl.log(l)), mask=rows)
    return o, lse


def _row_delta(o_rows, do_rows, dlse_rows=None):
    """``Di = rowsum(dO * O) - dlse`` [rows, 1] float32 (``dlse``: gradient of the saved lse, if any)."""
    delta = nl.sum(nl.multiply(do_rows, o_rows, dtype=nl.float32), axis=[1], keepdims=True)
    return delta if dlse_rows is None else nl.subtract(delta, dlse_rows)


@nki.jit
def flash_attention_bwd_dq_kernel(q, k, v, o, lse, do, dlse=None, causal=False, scale=1.0):
    """``dq`` [B, H, Sq, D] (q.dtype); grid ``attention_grid(q.shape, k.shape)``.

    ``dlse`` [B, H, Sq, 1], when given, is the gradient of the saved ``lse`` (``dS += P * dlse``).
    """
    b_n, h_n, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = h_n // hkv
    dq = nl.ndarray((b_n, h_n, sq, d), dtype=q.dtype, buffer=nl.shared_hbm)
    b = nl.program_id(0)
    h = nl.program_id(1) * group + nl.program_id(2)
    q0 = nl.program_id(3) * Q_TILE
    iq, rows = _query_rows(sq)
    i_d = nl.arange(d)[None, :]
    q_t = _load_t(lambda r: q[b, h, r, i_d], Q_TILE, q.dtype, q0, sq)
    # Rows past Sq are zeroed in every per-row operand, so dS is 0 there: it is transposed
    # (a matmul on the Tensor engine) and an undefined lane would spread to every column.
    [do_rows] = _rows(lambda r: do[b, h, r, i_d], Q_TILE, q0, sq)
    do_t = _transpose_rows([do_rows], do.dtype)
    one = nl.arange(1)[None, :]
    per_row = lambda t, cols: _rows(lambda r: t[b, h, r, cols], Q_TILE, q0, sq)[0]  # noqa: E731
    delta = _row_delta(per_row(o, i_d), do_rows, None if dlse is None else per_row(dlse, one))
    neg_lse = nl.negative(per_row(lse, one))
    hk = nl.program_id(1)

    dq_acc = nl.zeros((Q_TILE, d), dtype=nl.float32, buffer=nl.psum)
    for k0, k1 in _tiles(sk, K_TILE):
        w = k1 - k0
        k_chunks = _rows(lambda r: k[b, hk, r, i_d], w, k0)  # used as rows (dq) and transposed (scores)
        s = _scores(q_t, _transpose_rows(k_chunks, k.dtype), scale, causal, q0, k0, w)
        p = nisa.activation(op=nl.exp, data=s, bias=neg_lse, dtype=nl.float32)
        dp = nisa.nc_matmul(do_t, _load_t(lambda r: v[b, hk, r, i_d], w, v.dtype, k0))
        ds = nl.multiply(p, nl.subtract(dp, delta), dtype=nl.float32)
        for (c0, c1), k_c in zip(_tiles(w, K_SUB), k_chunks):
            dq_acc += nisa.nc_matmul(_transposed(ds, c0, c1, k.dtype), k_c)
    nl.store(dq[b, h, iq, i_d], value=nl.multiply(dq_acc, scale, dtype=q.dtype), mask=rows)
    return dq


@nki.jit
def flash_attention_bwd_dkdv_kernel(q, k, v, o, lse, do, dlse=None, causal=False, scale=1.0):
    """``(dk, dv)`` [B, Hkv, Sk, D] (k.dtype); grid ``kv_grid(k.shape)``; ``dlse`` as for dq."""
    b_n, h_n, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = h_n // hkv
    dk = nl.ndarray(k.shape, dtype=k.dtype, buffer=nl.shared_hbm)
    dv = nl.ndarray(v.shape, dtype=v.dtype, buffer=nl.shared_hbm)
    b, hk = nl.program_id(0), nl.program_id(1)
    k0 = nl.program_id(2) * K_SUB
    ik = k0 + nl.arange(K_SUB)[:, None]
    keys = ik < sk
    i_d = nl.arange(d)[None, :]
    k_t = _load_t(lambda r: k[b, hk, r, i_d], K_SUB, k.dtype, k0, sk)  # [D, 128]
    v_t = _load_t(lambda r: v[b, hk, r, i_d], K_SUB, v.dtype, k0, sk)

    dk_acc = nl.zeros((K_SUB, d), dtype=nl.float32, buffer=nl.psum)
    dv_acc = nl.zeros((K_SUB, d), dtype=nl.float32, buffer=nl.psum)
    for g in range(group):
        h = hk * group + g
        for q0, q1 in _tiles(sq, Q_TILE):
            w = q1 - q0
            iq = q0 + nl.arange(w)[:, None]
            q_rows = nl.load(q[b, h, iq, i_d])
            do_rows = nl.load(do[b, h, iq, i_d])
            one = nl.arange(1)[None, :]
            delta = _row_delta(nl.load(o[b, h, iq, i_d]), do_rows,
                               None if dlse is None else nl.load(dlse[b, h, iq, one]))
            neg_lse = nl.negative(nl.load(lse[b, h, iq, one]))
            s = nl.multiply(nisa.nc_matmul(_transpose_rows([q_rows], q.dtype), k_t), scale, dtype=nl.float32)
            if causal:
                i_q, i_k = nl.mgrid[0:w, 0:K_SUB]
                s = nisa.affine_select(pred=(q0 + i_q - k0 - i_k >= 0), on_true_tile=s, on_false_value=MASKED,
                                       dtype=nl.float32)
            p = nisa.activation(op=nl.exp, data=s, bias=neg_lse, dtype=nl.float32)  # [w, 128]
            dv_acc += nisa.nc_matmul(nl.copy(p, dtype=do.dtype), do_rows)
            dp = nisa.nc_matmul(_transpose_rows([do_rows], do.dtype), v_t)
            ds = nl.multiply(p, nl.subtract(dp, delta), dtype=q.dtype)
            dk_acc += nisa.nc_matmul(ds, q_rows)
    nl.store(dk[b, hk, ik, i_d], value=nl.multiply(dk_acc, scale, dtype=k.dtype), mask=keys)
    nl.store(dv[b, hk, ik, i_d], value=nl.copy(dv_acc, dtype=v.dtype), mask=keys)
    return dk, dv


def attention_grid(q_shape, k_shape) -> tuple:
    """Grid of the forward and dq kernels: ``(B, Hkv, H // Hkv, ceil(Sq / 128))``."""
    b, h, sq, _ = q_shape
    hkv = k_shape[1]
    return (b, hkv, h // hkv, max(1, -(-sq // Q_TILE)))


def kv_grid(k_shape) -> tuple:
    """Grid of the dk/dv kernel: ``(B, Hkv, ceil(Sk / 128))``."""
    b, hkv, sk, _ = k_shape
    return (b, hkv, max(1, -(-sk // K_SUB)))
