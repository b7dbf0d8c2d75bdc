"""The matmul tutorial's four kernels, timed by the engine-level timing model on NeuronCore-v2/v3/v4.

The event lists are built by hand, loop by loop, from the nki-samples matrix multiplication tutorial
(src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py:
``nki_matmul_tiled_``, ``nki_matmul_hoist_load_``, ``nki_matmul_block_free_dimension_``,
``nki_matmul_fully_optimized_``) at the tutorial's benchmark shape, lhsT [8192, 4096] and rhs
[8192, 8192] in bf16 (M=4096, K=8192, N=8192). The tutorial published 51.80 / 42.96 / 22.07 / 6.97 ms
for them on trn1 (aws-neuron-sdk 61e24ff, nki/tutorials/matrix_multiplication.rst, "Latency (ms)",
Trn1.32xlarge); the script prints the model's times and how many of the 6 pairs come out in the
published order. Nothing in the model is tuned to those numbers.

What stands in for the compiler here (stated in docs/timing_model.md):

* engines: dma_copy on DMA queues named after the HBM tensor; nc_matmul on Tensor; tensor_copy,
  tensor_tensor and memset on Vector;
* the allocator: a tile declared inside a loop body is one allocation per slot, and the slots rotate
  over the loop's iterations. Each group of loop-local tiles gets 2 slots (double buffering) while
  the groups fit in the core's SBUF (192/224/256 KiB per partition on v2/v3/v4); the largest groups
  drop to 1 slot until they do. PSUM tiles rotate over the 8 PSUM banks ("up to eight outstanding
  matmul accumulation groups").

Usage: ``python scripts/timing_ladder.py [--versions 2 3 4] [--quick] [--verbose] [--out DIR]``
(``--out`` writes a Perfetto trace and a PNG timeline per kernel and version).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, _ROOT)

from nki_kernels.simulator.timing import Instr, Scheduler, core

PUBLISHED_TRN1_MS = {"tiled": 51.80, "hoist_load": 42.96, "block_free": 22.07, "fully_optimized": 6.97}
STYLES = tuple(PUBLISHED_TRN1_MS)
TILE_K, TILE_M, TILE_N = 128, 128, 512
BF16, FP32 = 2, 4


class Kernel:
    """Emits the events of one kernel: loads, stores, matmuls and Vector instructions on buffer keys."""

    def __init__(self, sched: Scheduler):
        self.s = sched
        self.n = 0
        self._psum = itertools.cycle(range(int(sched.hw.psum_banks.value)))

    def _add(self, ins):
        self.s.add(ins)
        self.n += 1

    @staticmethod
    def sbuf(ident, nbytes, lo=0):
        """Key of bytes [lo, lo + nbytes) of every partition of SBUF allocation ``ident``."""
        return ("sbuf", ident, ((0, 128), (lo, lo + nbytes)))

    def psum(self):
        """The next PSUM bank (one [128, 512] fp32 accumulation group)."""
        return ("psum", next(self._psum), None)

    def load(self, tensor, rows, cols, dst, itemsize=BF16):
        """dma_copy of HBM ``tensor[rows, cols]`` into SBUF key ``dst`` (rows on the partitions)."""
        p, f = rows[1] - rows[0], cols[1] - cols[0]
        self._add(Instr("dma_copy", "DMA", partitions=p, free_elems=f, nbytes=p * f * itemsize,
                        chunk_bytes=f * itemsize, reads=(("hbm", tensor, (rows, cols)),), writes=(dst,),
                        queue=tensor))

    def store(self, src, tensor, rows, cols, itemsize):
        """dma_copy of SBUF key ``src`` into HBM ``tensor[rows, cols]``; ``itemsize`` of the SBUF side
        (a dtype-casting DMA moves the wider side's bytes)."""
        p, f = rows[1] - rows[0], cols[1] - cols[0]
        self._add(Instr("dma_copy", "DMA", partitions=p, free_elems=f, nbytes=p * f * itemsize,
                        chunk_bytes=f * BF16, reads=(src,), writes=(("hbm", tensor, (rows, cols)),),
                        queue=tensor))

    def matmul(self, stationary, moving, psum):
        """nc_matmul(dst=psum, stationary [128, 128], moving [128, 512]) accumulating into ``psum``."""
        self._add(Instr("nc_matmul", "Tensor", dtype_in="bfloat16", dtype_out="float32", free_elems=TILE_N,
                        moving_free=TILE_N, stationary_free=TILE_M, reads=(stationary, moving), writes=(psum,)))

    def vector(self, name, reads, dst, dtype_in, dtype_out, n=TILE_N, op=""):
        """A Vector instruction over [128, n]."""
        self._add(Instr(name, "Vector", dtype_in=dtype_in, dtype_out=dtype_out, free_elems=n, reads=tuple(reads),
                        writes=(dst,), n_inputs=max(1, len(reads)), op=op))


def slots_for(groups, capacity):
    """Slots per group of loop-local tiles: 2 each (double buffering) while the total bytes per partition
    fit ``capacity``, else the largest groups drop to 1. ``groups``: {name: bytes per partition of one
    slot}. Returns ({name: slots}, bytes used)."""
    slots = dict.fromkeys(groups, 2)
    for name in sorted(groups, key=groups.get, reverse=True):
        if sum(groups[g] * slots[g] for g in groups) <= capacity:
            break
        slots[name] = 1
    return slots, sum(groups[g] * slots[g] for g in groups)


def tiled(kr, M, K, N, cap):
    """nki_matmul_tiled_: both tiles loaded inside the k loop."""
    slots, _ = slots_for({"lhsT": TILE_M * BF16, "rhs": TILE_N * BF16, "res": TILE_N * BF16}, cap)
    it = itertools.count()
    for m in range(M // TILE_M):
        for n in range(N // TILE_N):
            ps = kr.psum()
            for k in range(K // TILE_K):
                i = next(it)
                lt = kr.sbuf(("lhsT", i % slots["lhsT"]), TILE_M * BF16)
                rt = kr.sbuf(("rhs", i % slots["rhs"]), TILE_N * BF16)
                kr.load("lhsT", (k * TILE_K, (k + 1) * TILE_K), (m * TILE_M, (m + 1) * TILE_M), lt)
                kr.load("rhs", (k * TILE_K, (k + 1) * TILE_K), (n * TILE_N, (n + 1) * TILE_N), rt)
                kr.matmul(lt, rt, ps)
            res = kr.sbuf(("res", (m * (N // TILE_N) + n) % slots["res"]), TILE_N * BF16)
            kr.vector("tensor_copy", [ps], res, "float32", "bfloat16")
            kr.store(res, "result", (m * TILE_M, (m + 1) * TILE_M), (n * TILE_N, (n + 1) * TILE_N), BF16)
    return slots


def hoist_load(kr, M, K, N, cap):
    """nki_matmul_hoist_load_: a column of lhsT tiles per m, a column of rhs tiles per (m, n)."""
    KT = K // TILE_K
    slots, _ = slots_for({"lhsT": KT * TILE_M * BF16, "rhs": KT * TILE_N * BF16, "res": TILE_N * FP32}, cap)
    jn = itertools.count()
    for m in range(M // TILE_M):
        ls = m % slots["lhsT"]
        lts = [kr.sbuf(("lhsT", ls, k), TILE_M * BF16) for k in range(KT)]
        for k in range(KT):
            kr.load("lhsT", (k * TILE_K, (k + 1) * TILE_K), (m * TILE_M, (m + 1) * TILE_M), lts[k])
        for n in range(N // TILE_N):
            j = next(jn)
            rts = [kr.sbuf(("rhs", j % slots["rhs"], k), TILE_N * BF16) for k in range(KT)]
            for k in range(KT):
                kr.load("rhs", (k * TILE_K, (k + 1) * TILE_K), (n * TILE_N, (n + 1) * TILE_N), rts[k])
            ps = kr.psum()
            for k in range(KT):
                kr.matmul(lts[k], rts[k], ps)
            res = kr.sbuf(("res", j % slots["res"]), TILE_N * FP32)
            kr.vector("tensor_copy", [ps], res, "float32", "float32")
            kr.store(res, "result", (m * TILE_M, (m + 1) * TILE_M), (n * TILE_N, (n + 1) * TILE_N), FP32)
    return slots


def block_free(kr, M, K, N, cap, BM=2, BN=2):
    """nki_matmul_block_free_dimension_: blocks of 2 x 128 rows of lhsT and 2 x 512 columns of rhs."""
    KT = K // TILE_K
    slots, _ = slots_for({"lhsT": BM * KT * TILE_M * BF16, "rhs": BN * KT * TILE_N * BF16,
                          "res": TILE_N * BF16}, cap)
    jn, rn = itertools.count(), itertools.count()
    for m in range(M // (TILE_M * BM)):
        ls = m % slots["lhsT"]
        lts = [[kr.sbuf(("lhsT", ls, bm, k), TILE_M * BF16) for k in range(KT)] for bm in range(BM)]
        for bm in range(BM):
            r0 = (m * BM + bm) * TILE_M
            for k in range(KT):
                kr.load("lhsT", (k * TILE_K, (k + 1) * TILE_K), (r0, r0 + TILE_M), lts[bm][k])
        for n in range(N // (TILE_N * BN)):
            rs = next(jn) % slots["rhs"]
            rts = [[kr.sbuf(("rhs", rs, bn, k), TILE_N * BF16) for k in range(KT)] for bn in range(BN)]
            for bn in range(BN):
                c0 = (n * BN + bn) * TILE_N
                for k in range(KT):
                    kr.load("rhs", (k * TILE_K, (k + 1) * TILE_K), (c0, c0 + TILE_N), rts[bn][k])
            for bm in range(BM):
                for bn in range(BN):
                    ps = kr.psum()
                    for k in range(KT):
                        kr.matmul(lts[bm][k], rts[bn][k], ps)
                    res = kr.sbuf(("res", next(rn) % slots["res"]), TILE_N * BF16)
                    kr.vector("tensor_copy", [ps], res, "float32", "bfloat16")
                    r0, c0 = (m * BM + bm) * TILE_M, (n * BN + bn) * TILE_N
                    kr.store(res, "result", (r0, r0 + TILE_M), (c0, c0 + TILE_N), BF16)
    return slots


def fully_optimized(kr, M, K, N, cap, BM=16, BN=2, BK=8):
    """nki_matmul_fully_optimized_: blocks of 16 x 128 rows, 2 x 512 columns and 8 x 128 contraction;
    partial sums accumulated in SBUF (tensor_tensor), results coalesced into [128, 1024] stores."""
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * BM, TILE_N * BN, TILE_K * BK
    NBM, NBN, NBK = M // BLOCK_M, N // BLOCK_N, K // BLOCK_K
    slots, _ = slots_for({"tmp": NBM * BM * BN * TILE_N * BF16, "rhs": BK * BLOCK_N * BF16,
                          "lhsT": BK * BLOCK_M * BF16, "packed": BLOCK_N * FP32}, cap)
    ln, rn, pn = itertools.count(), itertools.count(), itertools.count()
    for n in range(NBN):
        ts = n % slots["tmp"]
        tmp = {(m, bm, bn): kr.sbuf(("tmp", ts, m, bm, bn), TILE_N * BF16)
               for m in range(NBM) for bm in range(BM) for bn in range(BN)}
        for key in tmp.values():
            kr.vector("memset", [], key, "bfloat16", "bfloat16", op="zero")
        for k in range(NBK):
            rs = next(rn) % slots["rhs"]
            rts = [("rhs", rs, b) for b in range(BK)]
            for bk in range(BK):
                r0 = (BK * k + bk) * TILE_K
                kr.load("rhs", (r0, r0 + TILE_K), (BLOCK_N * n, BLOCK_N * (n + 1)),
                        kr.sbuf(rts[bk], BLOCK_N * BF16))
            for m in range(NBM):
                ls = next(ln) % slots["lhsT"]
                lts = [("lhsT", ls, b) for b in range(BK)]
                for bk in range(BK):
                    r0 = (BK * k + bk) * TILE_K
                    kr.load("lhsT", (r0, r0 + TILE_K), (BLOCK_M * m, BLOCK_M * (m + 1)),
                            kr.sbuf(lts[bk], BLOCK_M * BF16))
                for bn in range(BN):
                    for bm in range(BM):
                        ps = kr.psum()
                        for bk in range(BK):
                            kr.matmul(kr.sbuf(lts[bk], TILE_M * BF16, bm * TILE_M * BF16),
                                      kr.sbuf(rts[bk], TILE_N * BF16, bn * TILE_N * BF16), ps)
                        t = tmp[(m, bm, bn)]
                        kr.vector("tensor_tensor", [t, ps], t, "float32", "bfloat16", op="add")
        for m in range(NBM):
            for bm in range(BM):
                ps_ = next(pn) % slots["packed"]
                for bn in range(BN):
                    kr.vector("tensor_copy", [tmp[(m, bm, bn)]],
                              kr.sbuf(("packed", ps_), TILE_N * FP32, bn * TILE_N * FP32), "bfloat16", "float32")
                r0 = (BM * m + bm) * TILE_M
                kr.store(kr.sbuf(("packed", ps_), BLOCK_N * FP32), "result", (r0, r0 + TILE_M),
                         (BLOCK_N * n, BLOCK_N * (n + 1)), FP32)
    return slots


BUILDERS = {"tiled": tiled, "hoist_load": hoist_load, "block_free": block_free,
            "fully_optimized": fully_optimized}


def run(style, version, M=4096, K=8192, N=8192):
    """Build ``style``'s events at [K, M] x [K, N] and schedule them on ``version``; returns
    (Result, slots, number of events, wall seconds)."""
    hw = core(version)
    sched = Scheduler(hw, keep_events=False)
    kr = Kernel(sched)
    t0 = time.perf_counter()
    slots = BUILDERS[style](kr, M, K, N, hw.sbuf_partition_bytes.value)
    return sched.result(), slots, kr.n, time.perf_counter() - t0


def pairs_in_order(times: dict, reference: dict) -> tuple:
    """How many of the style pairs the model orders like ``reference`` (and how many pairs)."""
    ok = total = 0
    for a, b in itertools.combinations(reference, 2):
        total += 1
        ok += (times[a] < times[b]) == (reference[a] < reference[b])
    return ok, total


def main(argv=None) -> int:
    """Print the ladder: time per kernel and NeuronCore version, and the order against the published one."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", nargs="+", default=["2", "3", "4"])
    ap.add_argument("--quick", action="store_true", help="a small shape ([1024,2048] x [1024,1024]) to try it out")
    ap.add_argument("--verbose", action="store_true", help="print each schedule's full report")
    ap.add_argument("--out", help="directory for a Perfetto trace and a PNG timeline per kernel and version")
    args = ap.parse_args(argv)
    shape = {"M": 2048, "K": 1024, "N": 1024} if args.quick else {"M": 4096, "K": 8192, "N": 8192}
    print(f"matmul tutorial, lhsT [{shape['K']},{shape['M']}] x rhs [{shape['K']},{shape['N']}] bf16; "
          f"published trn1 latency: {' / '.join(f'{v:.2f}' for v in PUBLISHED_TRN1_MS.values())} ms")
    results = {}
    for v in args.versions:
        hw = core(v)
        for style in STYLES:
            r, slots, n, wall = run(style, v, **shape)
            results[(hw.version, style)] = r
            u = r.utilisation
            print(f"  {hw.name:<28} {style:<16} {r.total_s * 1e3:9.3f} ms  bound {r.bounding_engine:<6} "
                  f"Tensor {u['Tensor']:4.0%} DMA {u['DMA']:4.0%} Vector {u['Vector']:4.0%}  "
                  f"{r.dma.transfers:>9,} DMA transfers of {r.dma.bytes_per_transfer / 1024:5.1f} KiB  "
                  f"slots {slots}  ({n:,} events, {wall:.1f} s)")
            if args.verbose:
                print("\n".join("      " + line for line in r.summary().splitlines()))
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                base = os.path.join(args.out, f"matmul_{style}_v{hw.version}")
                r.plot(base + ".png", title=f"{style} on {hw.name}: {r.total_s * 1e3:.2f} ms")
    print()
    print(f"  {'kernel':<16}" + "".join(f"{'v' + str(core(v).version) + ' ms':>12}" for v in args.versions)
          + f"{'trn1 published':>16}{'v2/published':>14}")
    for style in STYLES:
        row = "".join(f"{results[(core(v).version, style)].total_s * 1e3:>12.2f}" for v in args.versions)
        ratio = ""
        if 2 in {core(v).version for v in args.versions} and not args.quick:
            ratio = f"{results[(2, style)].total_s * 1e3 / PUBLISHED_TRN1_MS[style]:>14.2f}"
        print(f"  {style:<16}{row}{PUBLISHED_TRN1_MS[style]:>16.2f}{ratio}")
    for v in args.versions:
        ver = core(v).version
        ok, total = pairs_in_order({s: results[(ver, s)].total_s for s in STYLES}, PUBLISHED_TRN1_MS)
        print(f"  NeuronCore-v{ver}: {ok} of {total} pairs in the published (trn1) order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
