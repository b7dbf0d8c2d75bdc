"""Loop-heavy kernels on the simulator against the same computation in NumPy, in one process.

    python scripts/bench_kernels.py [--quick] [--repeat N] [--only TEXT] [--json PATH] [--tutorial DIR]

Rows:

* tiled matmul ``lhsT.T @ rhs`` (fp32) in the four styles of the NKI matmul tutorial,
  written here for both API generations (``neuronxcc.nki`` tiles returned by
  ``nl.load`` / ``nisa.nc_matmul``; the standalone ``nki`` with ``dst=`` instructions):
  *tiled* (one load per matmul), *hoisted* (loads hoisted out of the inner loop),
  *block free* (several M / N tiles per block, loads shared by the block),
  *optimised* (blocks along M, N and K, K blocks accumulated in SBUF);
* with ``--tutorial DIR``, the official matmul tutorial's four kernels too (standalone ``nki``,
  nki-samples' ``matrix_multiplication_nki_kernels.py`` in DIR, imported unmodified with the
  simulator installed), at 2048^3;
* per matmul shape, the floor: the same tile-by-tile products in NumPy alone
  (:func:`numpy_tile_loop`), and each matmul row's time over it;
* the kernel library's flash attention forward and backward (causal, fp32) against a
  NumPy float32 attention and its hand-written backward;
* the cost of one instruction (``nl.add`` / ``nisa.tensor_tensor`` on 128x64 tiles,
  ``nisa.dma_copy`` of a 128x64 HBM tile into SBUF, each inside an affine loop; ``nisa.nc_matmul``
  of fp16 tiles into a view of a PSUM bank, placed tiles, in a Python ``range`` loop as
  nki-library's token-generation MLP issues it): microseconds per instruction, against the same
  operation in NumPy called once per instruction (ratio > 1: the simulator is slower).

Each time is the best of ``--repeat`` runs after a warm-up, the simulator's and NumPy's runs
alternating (so both see the same machine load); the ratio is simulator / NumPy (> 1: the
simulator is slower). Every run is timed on both clocks: wall time, as a user sees it, with NumPy at
its default threads (the simulator's launches use as many BLAS threads as the machine leaves idle),
and this process's CPU time (steadier on a shared, loaded machine); the tables give both ratios,
each the best of its own runs, and the title the load average.
``--quick`` runs small shapes once (a smoke test). ``--only TEXT`` keeps the rows (both tables) whose
name or workload contains TEXT: ``--only 128x64`` times the small element-wise instructions alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# (NumPy keeps its default BLAS threads, as a user's process has them: the issue-28 protocol. An
# OPENBLAS_NUM_THREADS set before running this script still applies to both sides.)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from nki_kernels.simulator import isa as nisa1  # noqa: E402
from nki_kernels.simulator import language as nl1  # noqa: E402
from nki_kernels.simulator import nki as nki1  # noqa: E402
from nki_kernels.simulator import standalone as nki2  # noqa: E402

nl2, nisa2 = nki2.language, nki2.isa

TK, TM, TN = 128, 128, 512  # contraction / stationary free / moving free tile sizes of nc_matmul


# ---------------------------------------------------------------------------
# First generation (neuronxcc.nki): tiles are values
# ---------------------------------------------------------------------------
@nki1.jit
def mm1_tiled(lhsT, rhs):
    """One (M, N) output tile per iteration; both operands loaded for every K step."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl1.ndarray((M, N), dtype=lhsT.dtype, buffer=nl1.shared_hbm)
    for m in nl1.affine_range(M // TM):
        for n in nl1.affine_range(N // TN):
            acc = nl1.zeros((TM, TN), nl1.float32, buffer=nl1.psum)
            for k in nl1.affine_range(K // TK):
                a = nl1.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl1.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                acc += nisa1.nc_matmul(a, b)
            nl1.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=nl1.copy(acc, dtype=out.dtype))
    return out


@nki1.jit
def mm1_hoisted(lhsT, rhs):
    """The stationary strip of an M tile is loaded once for every N tile; the moving strip once per N tile."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT = K // TK
    out = nl1.ndarray((M, N), dtype=lhsT.dtype, buffer=nl1.shared_hbm)
    for m in nl1.affine_range(M // TM):
        a = nl1.ndarray((KT, nl1.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl1.sbuf)
        for k in nl1.affine_range(KT):
            a[k] = nl1.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for n in nl1.affine_range(N // TN):
            b = nl1.ndarray((KT, nl1.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl1.sbuf)
            for k in nl1.affine_range(KT):
                b[k] = nl1.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
            acc = nl1.zeros((TM, TN), nl1.float32, buffer=nl1.psum)
            for k in nl1.affine_range(KT):
                acc += nisa1.nc_matmul(a[k], b[k])
            nl1.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=nl1.copy(acc, dtype=out.dtype))
    return out


@nki1.jit
def mm1_block_free(lhsT, rhs, bm=2, bn=2):
    """``bm`` M tiles and ``bn`` N tiles per block: one wide load per K step serves a block row / column."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT, BM, BN = K // TK, bm * TM, bn * TN
    out = nl1.ndarray((M, N), dtype=lhsT.dtype, buffer=nl1.shared_hbm)
    for m2 in nl1.affine_range(M // BM):
        a = nl1.ndarray((KT, nl1.par_dim(TK), BM), dtype=lhsT.dtype, buffer=nl1.sbuf)
        for k in nl1.affine_range(KT):
            a[k] = nl1.load(lhsT[k * TK:(k + 1) * TK, m2 * BM:(m2 + 1) * BM])
        for n2 in nl1.affine_range(N // BN):
            b = nl1.ndarray((KT, nl1.par_dim(TK), BN), dtype=rhs.dtype, buffer=nl1.sbuf)
            for k in nl1.affine_range(KT):
                b[k] = nl1.load(rhs[k * TK:(k + 1) * TK, n2 * BN:(n2 + 1) * BN])
            for i in nl1.affine_range(bm):
                for j in nl1.affine_range(bn):
                    acc = nl1.zeros((TM, TN), nl1.float32, buffer=nl1.psum)
                    for k in nl1.affine_range(KT):
                        acc += nisa1.nc_matmul(a[k, :, i * TM:(i + 1) * TM], b[k, :, j * TN:(j + 1) * TN])
                    r0, c0 = m2 * BM + i * TM, n2 * BN + j * TN
                    nl1.store(out[r0:r0 + TM, c0:c0 + TN], value=nl1.copy(acc, dtype=out.dtype))
    return out


@nki1.jit
def mm1_optimised(lhsT, rhs, bm=2, bn=2, bk=8):
    """Blocks along M, N and K; each K block's PSUM products are added into an SBUF result block."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    BM, BN, BK = bm * TM, bn * TN, bk * TK
    out = nl1.ndarray((M, N), dtype=lhsT.dtype, buffer=nl1.shared_hbm)
    for n2 in nl1.affine_range(N // BN):
        for m2 in nl1.affine_range(M // BM):
            res = nl1.zeros((bm * bn, nl1.par_dim(TM), TN), dtype=nl1.float32, buffer=nl1.sbuf)
            for k2 in nl1.sequential_range(K // BK):
                a = nl1.ndarray((bk, nl1.par_dim(TK), BM), dtype=lhsT.dtype, buffer=nl1.sbuf)
                b = nl1.ndarray((bk, nl1.par_dim(TK), BN), dtype=rhs.dtype, buffer=nl1.sbuf)
                for k in nl1.affine_range(bk):
                    kk = k2 * BK + k * TK
                    a[k] = nl1.load(lhsT[kk:kk + TK, m2 * BM:(m2 + 1) * BM])
                    b[k] = nl1.load(rhs[kk:kk + TK, n2 * BN:(n2 + 1) * BN])
                for i in nl1.affine_range(bm):
                    for j in nl1.affine_range(bn):
                        acc = nl1.zeros((TM, TN), nl1.float32, buffer=nl1.psum)
                        for k in nl1.affine_range(bk):
                            acc += nisa1.nc_matmul(a[k, :, i * TM:(i + 1) * TM], b[k, :, j * TN:(j + 1) * TN])
                        res[i * bn + j] = nl1.add(res[i * bn + j], acc)
            for i in nl1.affine_range(bm):
                for j in nl1.affine_range(bn):
                    r0, c0 = m2 * BM + i * TM, n2 * BN + j * TN
                    nl1.store(out[r0:r0 + TM, c0:c0 + TN], value=nl1.copy(res[i * bn + j], dtype=out.dtype))
    return out


# ---------------------------------------------------------------------------
# Standalone nki: tiles declared with nl.ndarray, instructions write dst=
# ---------------------------------------------------------------------------
def _product_tile2(acc, out, r0, c0):
    """PSUM ``acc`` copied to SBUF and stored at ``out[r0:, c0:]`` (standalone API)."""
    res = nl2.ndarray((TM, TN), dtype=out.dtype, buffer=nl2.sbuf)
    nisa2.tensor_copy(dst=res, src=acc)
    nisa2.dma_copy(dst=out[r0:r0 + TM, c0:c0 + TN], src=res)


@nki2.jit
def mm2_tiled(lhsT, rhs):
    """Standalone form of :func:`mm1_tiled`."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl2.ndarray((M, N), dtype=lhsT.dtype, buffer=nl2.shared_hbm)
    for m in nl2.affine_range(M // TM):
        for n in nl2.affine_range(N // TN):
            acc = nl2.ndarray((TM, TN), dtype=nl2.float32, buffer=nl2.psum)
            for k in nl2.affine_range(K // TK):
                a = nl2.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl2.sbuf)
                b = nl2.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl2.sbuf)
                nisa2.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa2.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa2.nc_matmul(dst=acc, stationary=a, moving=b)
            _product_tile2(acc, out, m * TM, n * TN)
    return out


@nki2.jit
def mm2_hoisted(lhsT, rhs):
    """Standalone form of :func:`mm1_hoisted` (one SBUF tile per K step, kept in a list)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT = K // TK
    out = nl2.ndarray((M, N), dtype=lhsT.dtype, buffer=nl2.shared_hbm)
    for m in nl2.affine_range(M // TM):
        a = [nl2.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl2.sbuf) for _ in range(KT)]
        for k in nl2.affine_range(KT):
            nisa2.dma_copy(dst=a[k], src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for n in nl2.affine_range(N // TN):
            b = [nl2.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl2.sbuf) for _ in range(KT)]
            for k in nl2.affine_range(KT):
                nisa2.dma_copy(dst=b[k], src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
            acc = nl2.ndarray((TM, TN), dtype=nl2.float32, buffer=nl2.psum)
            for k in nl2.affine_range(KT):
                nisa2.nc_matmul(dst=acc, stationary=a[k], moving=b[k])
            _product_tile2(acc, out, m * TM, n * TN)
    return out


@nki2.jit
def mm2_block_free(lhsT, rhs, bm=2, bn=2):
    """Standalone form of :func:`mm1_block_free`."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    KT, BM, BN = K // TK, bm * TM, bn * TN
    out = nl2.ndarray((M, N), dtype=lhsT.dtype, buffer=nl2.shared_hbm)
    for m2 in nl2.affine_range(M // BM):
        a = [nl2.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl2.sbuf) for _ in range(KT)]
        for k in nl2.affine_range(KT):
            nisa2.dma_copy(dst=a[k], src=lhsT[k * TK:(k + 1) * TK, m2 * BM:(m2 + 1) * BM])
        for n2 in nl2.affine_range(N // BN):
            b = [nl2.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl2.sbuf) for _ in range(KT)]
            for k in nl2.affine_range(KT):
                nisa2.dma_copy(dst=b[k], src=rhs[k * TK:(k + 1) * TK, n2 * BN:(n2 + 1) * BN])
            for i in nl2.affine_range(bm):
                for j in nl2.affine_range(bn):
                    acc = nl2.ndarray((TM, TN), dtype=nl2.float32, buffer=nl2.psum)
                    for k in nl2.affine_range(KT):
                        nisa2.nc_matmul(dst=acc, stationary=a[k][:, i * TM:(i + 1) * TM],
                                        moving=b[k][:, j * TN:(j + 1) * TN])
                    _product_tile2(acc, out, m2 * BM + i * TM, n2 * BN + j * TN)
    return out


@nki2.jit
def mm2_optimised(lhsT, rhs, bm=2, bn=2, bk=8):
    """Standalone form of :func:`mm1_optimised`."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    BM, BN, BK = bm * TM, bn * TN, bk * TK
    out = nl2.ndarray((M, N), dtype=lhsT.dtype, buffer=nl2.shared_hbm)
    for n2 in nl2.affine_range(N // BN):
        for m2 in nl2.affine_range(M // BM):
            res = [nl2.ndarray((TM, TN), dtype=nl2.float32, buffer=nl2.sbuf) for _ in range(bm * bn)]
            for r in res:
                nisa2.memset(dst=r, value=0.0)
            for k2 in nl2.sequential_range(K // BK):
                a = [nl2.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl2.sbuf) for _ in range(bk)]
                b = [nl2.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl2.sbuf) for _ in range(bk)]
                for k in nl2.affine_range(bk):
                    kk = k2 * BK + k * TK
                    nisa2.dma_copy(dst=a[k], src=lhsT[kk:kk + TK, m2 * BM:(m2 + 1) * BM])
                    nisa2.dma_copy(dst=b[k], src=rhs[kk:kk + TK, n2 * BN:(n2 + 1) * BN])
                for i in nl2.affine_range(bm):
                    for j in nl2.affine_range(bn):
                        acc = nl2.ndarray((TM, TN), dtype=nl2.float32, buffer=nl2.psum)
                        for k in nl2.affine_range(bk):
                            nisa2.nc_matmul(dst=acc, stationary=a[k][:, i * TM:(i + 1) * TM],
                                            moving=b[k][:, j * TN:(j + 1) * TN])
                        nisa2.tensor_tensor(dst=res[i * bn + j], data1=res[i * bn + j], data2=acc, op=nl2.add)
            for i in nl2.affine_range(bm):
                for j in nl2.affine_range(bn):
                    _product_tile2(res[i * bn + j], out, m2 * BM + i * TM, n2 * BN + j * TN)
    return out


MATMULS = {
    "tiled": (mm1_tiled, mm2_tiled),
    "hoisted": (mm1_hoisted, mm2_hoisted),
    "block_free": (mm1_block_free, mm2_block_free),
    "optimised": (mm1_optimised, mm2_optimised),
}


# ---------------------------------------------------------------------------
# Per-instruction cost
# ---------------------------------------------------------------------------
@nki1.jit
def add_loop1(x, n):
    """``n`` nl.add instructions on one [128, 64] tile (an affine loop)."""
    out = nl1.ndarray(x.shape, dtype=x.dtype, buffer=nl1.shared_hbm)
    t = nl1.load(x)
    r = t
    for _ in nl1.affine_range(n):
        r = nl1.add(t, t)
    nl1.store(out, value=r)
    return out


@nki2.jit
def add_loop2(x, n):
    """``n`` nisa.tensor_tensor instructions on [128, 64] tiles (standalone, dst=)."""
    out = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.shared_hbm)
    t = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    r = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=t, src=x)
    for _ in nl2.affine_range(n):
        nisa2.tensor_tensor(dst=r, data1=t, data2=t, op=nl2.add)
    nisa2.dma_copy(dst=out, src=r)
    return out


@nki2.jit
def load_loop2(x, n):
    """``n`` nisa.dma_copy instructions SBUF <- HBM of a [128, 64] tile (standalone, dst=)."""
    out = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.shared_hbm)
    t = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf)
    for _ in nl2.affine_range(n):
        nisa2.dma_copy(dst=t, src=x)
    nisa2.dma_copy(dst=out, src=t)
    return out


MV_H, MV_T = 8, 32  # hidden tiles and tokens of the matmul-into-a-PSUM-view row


@nki2.jit
def matmul_view_loop2(w, x, n, by_ap=False):
    """``n`` nisa.nc_matmul instructions as nki-library's token-generation MLP issues them: Python
    ``range`` loops (not affine: one instruction at a time), tiles placed at fixed addresses, fp16
    weights ``w [128, MV_H, 128]`` and tokens ``x [128, MV_T, MV_H]``, each product accumulated into
    the view ``psum[0:128, 0:MV_T]`` of a whole PSUM bank. The stationary operand is ``w[:, h, :]``,
    or with ``by_ap`` (the down projection, ``w [128, MV_H * 128]``) an ``.ap`` view taking every
    ``MV_H``-th column from ``h``."""
    out = nl2.ndarray((128, MV_T), dtype=nl2.float32, buffer=nl2.shared_hbm)
    wt = nl2.ndarray(w.shape, dtype=w.dtype, buffer=nl2.sbuf, address=(0, 0))
    xt = nl2.ndarray(x.shape, dtype=x.dtype, buffer=nl2.sbuf, address=(0, MV_H * 128 * 2))
    ps = nl2.ndarray((128, 512), dtype=nl2.float32, buffer=nl2.psum, address=(0, 0))
    nisa2.dma_copy(dst=wt, src=w)
    nisa2.dma_copy(dst=xt, src=x)
    for i in range(n):
        h = i % MV_H
        stationary = wt.ap([[MV_H * 128, 128], [MV_H, 128]], offset=h) if by_ap else wt[0:128, h, 0:128]
        nisa2.nc_matmul(ps[0:128, 0:MV_T], stationary, xt[0:128, 0:MV_T, h])
    res = nl2.ndarray((128, MV_T), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_copy(dst=res, src=ps[0:128, 0:MV_T])
    nisa2.dma_copy(dst=out, src=res)
    return out


def matmul_view_numpy(w, x, n, by_ap=False):
    """The same ``n`` products in NumPy, one call each: both fp16 operands widened to fp32, the
    product, the fp32 add."""
    acc = np.zeros((128, MV_T), np.float32)
    flat = w.reshape(128, -1)
    for i in range(n):
        h = i % MV_H
        stationary = flat[:, h::MV_H] if by_ap else w[:, h, :]
        np.add(acc, stationary.astype(np.float32).T @ x[:, :, h].astype(np.float32), out=acc)
    return acc


# ---------------------------------------------------------------------------
# Flash attention (nki_kernels.library) and its NumPy reference
# ---------------------------------------------------------------------------
def attention_numpy(q, k, v, scale):
    """Causal attention in float32 NumPy: ``(o, p)`` for q/k/v [B, H, S, D] (one key head per query head)."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    n = s.shape[-1]
    s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, np.float32(-np.inf))
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.matmul(p, v), p


def attention_numpy_bwd(q, k, v, do, scale):
    """``(dq, dk, dv)`` of causal attention in float32 NumPy (forward recomputed, as flash attention does)."""
    o, p = attention_numpy(q, k, v, scale)
    dv = np.matmul(np.swapaxes(p, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    dq = np.matmul(ds, k) * np.float32(scale)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * np.float32(scale)
    return dq, dk, dv


def attention_pair(seqlen, d, backward):
    """(simulator thunk, NumPy thunk, check) of one-head causal flash attention."""
    from nki_kernels.library import flash_attention as fa

    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 1, seqlen, d)).astype(np.float32) for _ in range(4))
    scale = 1.0 / np.sqrt(d)
    grid, kvg = fa.attention_grid(q.shape, k.shape), fa.kv_grid(k.shape)
    if not backward:
        def sim():
            return fa.flash_attention_fwd_kernel[grid](q, k, v, causal=True, scale=scale)[0]
        return sim, (lambda: attention_numpy(q, k, v, scale)[0]), (lambda got, ref: (got, ref))
    o, lse = fa.flash_attention_fwd_kernel[grid](q, k, v, causal=True, scale=scale)

    def sim_bwd():
        dq = fa.flash_attention_bwd_dq_kernel[grid](q, k, v, o, lse, do, causal=True, scale=scale)
        dk, dv = fa.flash_attention_bwd_dkdv_kernel[kvg](q, k, v, o, lse, do, causal=True, scale=scale)
        return np.concatenate([dq, dk, dv])
    return sim_bwd, (lambda: np.concatenate(attention_numpy_bwd(q, k, v, do, scale))), None


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------
def _timed(fn):
    """(wall seconds, CPU seconds of this process) of one call of ``fn``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def best_of_pair(fns, repeat):
    """Best (wall, CPU) times of each of ``fns`` over ``repeat`` rounds that run them in turn (after a
    warm-up of each, so both see the same machine load), and the warm-ups' results."""
    results = [fn() for fn in fns]
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts in zip(fns, times):
            ts.append(_timed(fn))
    return [(min(w for w, _ in ts), min(c for _, c in ts)) for ts in times], results


def numpy_tile_loop(lhsT, rhs):
    """``lhsT.T @ rhs`` the way every kernel here computes it, in NumPy alone: one fp32 product of a
    [TK, TM] by a [TK, TN] tile per step, accumulated over K per output tile. No simulator can beat
    this loop while it executes the kernel's products one by one, so its time over one ``lhsT.T @ rhs``
    is the floor under the matmul rows' ratios on the machine at hand (small products use BLAS
    threads less well than one large one)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = np.empty((M, N), np.float32)
    for m in range(0, M, TM):
        for n in range(0, N, TN):
            acc = np.zeros((TM, TN), np.float32)
            for k in range(0, K, TK):
                acc += lhsT[k:k + TK, m:m + TM].T @ rhs[k:k + TK, n:n + TN]
            out[m:m + TM, n:n + TN] = acc
    return out


def tutorial_kernels(directory):
    """The official matmul tutorial's four kernels (nki-samples
    ``src/nki_samples/tutorials/matrix_multiplication``: ``directory`` holds its
    ``matrix_multiplication_nki_kernels.py``), imported unmodified with the simulator installed as
    ``nki``: ``{style: kernel}``."""
    import importlib.util

    from nki_kernels.simulator import install

    install()
    path = os.path.join(directory, "matrix_multiplication_nki_kernels.py")
    spec = importlib.util.spec_from_file_location("matrix_multiplication_nki_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"tiled": mod.nki_matmul_tiled_, "hoisted": mod.nki_matmul_hoist_load_,
            "block_free": mod.nki_matmul_block_free_dimension_, "optimised": mod.nki_matmul_fully_optimized_}


def workloads(quick, wanted=lambda name, workload: True, tutorial=None):
    """(name, group, workload, simulator thunk, NumPy thunk) of every row that ``wanted(name, workload)``;
    with ``tutorial`` (a directory, see :func:`tutorial_kernels`) the official kernels' rows too."""
    shapes = ((256, 256, 1024),) if quick else ((1024,) * 3, (2048,) * 3)  # (K, M, N)
    official = tutorial_kernels(tutorial) if tutorial else {}
    rng = np.random.default_rng(0)
    rows = []
    for K, M, N in shapes:
        lhsT = rng.standard_normal((K, M)).astype(np.float32)
        rhs = rng.standard_normal((K, N)).astype(np.float32)
        size = f"{K}^3" if K == M == N else f"{K}x{M}x{N}"
        ref = (lambda a=lhsT, b=rhs: a.T @ b)
        kw = {"bk": 2} if quick else {}
        rows.append(("numpy tile loop (floor)", "floor", f"{size} fp32",
                     (lambda a=lhsT, b=rhs: numpy_tile_loop(a, b)), ref))
        for style, (k1, k2) in MATMULS.items():
            extra = kw if style == "optimised" else {}
            kernels = [("gen1", k1), ("standalone", k2)]
            if style in official and all(d % 2048 == 0 for d in (K, M, N)):  # (its fully optimised blocks)
                kernels.append(("tutorial", official[style]))
            for gen, kern in kernels:
                rows.append((f"matmul {style} {gen}", "matmul", f"{size} fp32",
                             (lambda kern=kern, a=lhsT, b=rhs, e=({} if gen == "tutorial" else extra):
                              kern(a, b, **e)), ref))
    seqlen, d = (256, 64) if quick else (4096, 128)
    for backward in (False, True):
        name, workload = f"flash attention {'bwd' if backward else 'fwd'}", f"causal s{seqlen} d{d} fp32"
        if wanted(name, workload):  # (the backward's setup runs the forward: not for a row left out)
            sim, ref, _ = attention_pair(seqlen, d, backward)
            rows.append((name, "attention", workload, sim, ref))
    return [r for r in rows if wanted(r[0], r[2])]


def per_instruction(quick, wanted=lambda name, workload: True, repeat=None):
    """Microseconds per instruction in each generation (difference of two loop lengths, each the best
    of ``repeat`` runs), and of the same operation in NumPy (one call per instruction), for the
    instructions that ``wanted(name, workload)``."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((128, 64)).astype(np.float32)
    w16 = rng.standard_normal((128, MV_H, 128)).astype(np.float16)
    x16 = rng.standard_normal((128, MV_T, MV_H)).astype(np.float16)
    n0, n1 = (10, 60) if quick else (100, 2100)

    def loop_numpy(op):
        def run(n):
            r = np.empty_like(x)
            for _ in range(n):
                op(r)
            return r
        return run

    out = []
    for name, workload, kern, ref in (
            ("nl.add (gen1)", "128x64 fp32", lambda n: add_loop1(x, n), loop_numpy(lambda r: np.add(x, x, out=r))),
            ("nisa.tensor_tensor (standalone)", "128x64 fp32", lambda n: add_loop2(x, n),
             loop_numpy(lambda r: np.add(x, x, out=r))),
            ("nisa.dma_copy SBUF <- HBM (standalone)", "128x64 fp32", lambda n: load_loop2(x, n),
             loop_numpy(lambda r: np.copyto(r, x))),
            ("nisa.nc_matmul into a PSUM view, placed tiles, range loop (standalone)", f"128x128 @ 128x{MV_T} fp16",
             lambda n: matmul_view_loop2(w16, x16, n), lambda n: matmul_view_numpy(w16, x16, n)),
            ("nisa.nc_matmul, stationary an .ap view (every n-th column), range loop (standalone)",
             f"128x128 @ 128x{MV_T} fp16", lambda n: matmul_view_loop2(w16.reshape(128, -1), x16, n, by_ap=True),
             lambda n: matmul_view_numpy(w16.reshape(128, -1), x16, n, by_ap=True))):
        if not wanted(name, workload):
            continue
        reps = repeat or (1 if quick else 3)
        (sim0, ref0), (got, want) = best_of_pair((lambda: kern(n0), lambda: ref(n0)), reps)
        (sim1, ref1), _ = best_of_pair((lambda: kern(n1), lambda: ref(n1)), reps)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)  # (the matmul row: fp32 sums, same order)
        row = {"name": name, "workload": workload}
        for k, clock in ((0, "wall"), (1, "cpu")):
            sim_us, ref_us = (sim1[k] - sim0[k]) / (n1 - n0) * 1e6, (ref1[k] - ref0[k]) / (n1 - n0) * 1e6
            row.update({f"us_per_instruction_{clock}": sim_us, f"numpy_us_{clock}": ref_us,
                        f"ratio_{clock}": sim_us / ref_us if ref_us > 0 else float("nan")})
        out.append(row)
    return out


def main(argv=None) -> int:
    """Run the benchmark, print the table (and write JSON if asked)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small shapes, one run each (smoke test)")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per measurement (default 3; 1 with --quick)")
    ap.add_argument("--only", action="append", metavar="TEXT", help="only rows whose name or workload contains TEXT")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    ap.add_argument("--tutorial", metavar="DIR", help="also run the official matmul tutorial's kernels from DIR "
                    "(nki-samples' src/nki_samples/tutorials/matrix_multiplication), unmodified, at 2048^3")
    args = ap.parse_args(argv)
    if args.tutorial and not os.path.isfile(os.path.join(args.tutorial, "matrix_multiplication_nki_kernels.py")):
        ap.error(f"--tutorial {args.tutorial!r}: no matrix_multiplication_nki_kernels.py in that directory")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    repeat = args.repeat or (1 if args.quick else 3)
    console = Console(width=max(120, Console().width))
    def wanted(name, workload):
        return not args.only or any(s in name or s in workload for s in args.only)

    rows = workloads(args.quick, wanted, args.tutorial)
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking", total=len(rows) + 1)
        for name, group, workload, sim, ref in rows:
            progress.update(task, description=f"{name} {workload}")
            (t_sim, t_ref), (got, want) = best_of_pair((sim, ref), repeat)
            err = float(np.max(np.abs(np.asarray(got, np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
            results.append({"name": name, "group": group, "workload": workload, "sim_ms": t_sim[0] * 1e3,
                            "numpy_ms": t_ref[0] * 1e3, "ratio_wall": t_sim[0] / t_ref[0],
                            "ratio_cpu": t_sim[1] / t_ref[1], "max_rel_err": err})
            progress.advance(task)
        progress.update(task, description="per-instruction cost")
        instr = per_instruction(args.quick, wanted, repeat)
        progress.advance(task)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    floor = {r["workload"]: r["sim_ms"] for r in results if r["group"] == "floor"}
    for r in results:  # (the simulator against the NumPy tile loop of the same run: its own overhead)
        if r["group"] == "matmul" and r["workload"] in floor:
            r["ratio_to_tile_loop_wall"] = r["sim_ms"] / floor[r["workload"]]
    table = Table(title=f"Simulator vs NumPy (its default BLAS threads), best of {repeat}, load average {load:.1f} -> "
                        f"{load_end:.1f} on {os.cpu_count()} CPUs (> 1: simulator slower)")
    for col, just in (("kernel", "left"), ("workload", "left"), ("simulator ms (wall)", "right"),
                      ("numpy ms (wall)", "right"), ("ratio wall", "right"), ("ratio cpu", "right"),
                      ("vs tile loop (wall)", "right"), ("max rel err", "right")):
        table.add_column(col, justify=just, no_wrap=True)
    for r in results:
        vs = r.get("ratio_to_tile_loop_wall")
        table.add_row(r["name"], r["workload"], f"{r['sim_ms']:.1f}", f"{r['numpy_ms']:.1f}",
                      f"{r['ratio_wall']:.2f}x", f"{r['ratio_cpu']:.2f}x", "" if vs is None else f"{vs:.2f}x",
                      f"{r['max_rel_err']:.1e}")
    console.print(table)
    console.print("The 'numpy tile loop (floor)' rows compute lhsT.T @ rhs in NumPy alone, one [128, 128] x "
                  "[128, 512] product at a time as the kernels do: their ratio is the floor under the matmul "
                  "rows' on this machine; 'vs tile loop' is each kernel's time over that loop's.")
    itable = Table(title="Cost of one instruction (in a loop) vs the same operation in NumPy, one call each")
    itable.add_column("instruction")
    itable.add_column("tile")
    itable.add_column("us / instruction (wall)", justify="right")
    itable.add_column("numpy us (wall)", justify="right")
    itable.add_column("ratio wall", justify="right")
    itable.add_column("ratio cpu", justify="right")
    for r in instr:
        itable.add_row(r["name"], r["workload"], f"{r['us_per_instruction_wall']:.1f}", f"{r['numpy_us_wall']:.1f}",
                       f"{r['ratio_wall']:.1f}x", f"{r['ratio_cpu']:.1f}x")
    console.print(itable)
    bad = [r["name"] for r in results if not r["max_rel_err"] < 1e-3]
    if bad:
        console.print(f"[red]wrong results: {', '.join(bad)}[/red]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": [load, load_end], "kernels": results,
                   "per_instruction": instr}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
