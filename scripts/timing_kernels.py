"""The repository's own kernels, run on the simulator under ``profile()``, timed by the engine-level
timing model on NeuronCore-v2/v3/v4 (issue 31).

The matmul rows are ``scripts/bench_kernels.py``'s first-generation kernels in the four styles of the
NKI matmul tutorial (imported from there, not copied): ``mm1_tiled`` (both tiles loaded per K step),
``mm1_hoisted`` (loads hoisted out of the inner loop), ``mm1_block_free`` (2 x 2 tiles per block) and
``mm1_optimised`` (blocks of 16 x 2 x 8 tiles along M, N and K, the tutorial's fully optimised
blocking, partial sums added in SBUF). They run at the tutorial's benchmark shape, lhsT [8192, 4096]
x rhs [8192, 8192] in bf16 (``--shape M K N`` for another), once each under ``profile()`` with the
simulated target NeuronCore-v2 (trn1); the recorded instructions are then scheduled on v2, v3 and
v4 (``Report.retime``). The script prints the estimated ms per style and version, the ratio to the
tutorial's published trn1 latencies (51.80 / 42.96 / 22.07 / 6.97 ms: aws-neuron-sdk 61e24ff,
nki/tutorials/matrix_multiplication.rst, Trn1.32xlarge) and how many of the 6 pairs come out in the
published order. Nothing in the model is tuned to these numbers.

The attention rows (``--attention``) are an attention ladder in the steps of the NKI fused-attention
tutorial, written here: (1) scores, softmax and PV as separate kernels through HBM, (2) fused in one
kernel, (3) fused with the softmax's exponent and row sum in one ``nisa.activation_reduce`` pass and
the normalisation deferred to the [128, d] output. No published latency exists for these shapes;
the steps should get faster in that order.

``--overhead`` also times a plain call of each kernel (no recorder) and prints profile / call.

Usage::

    python scripts/timing_kernels.py [--shape M K N] [--styles ...] [--overhead] [--attention]
        [--json PATH] [--out DIR] [--plot PNG] [--from-json PATH]

``--plot PNG`` draws the matmul rows as a bar chart: estimated ms per style on each NeuronCore
version beside the published trn1 time. ``--from-json PATH`` reads a previous ``--json`` file instead
of profiling again (for ``--plot``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, _ROOT)

import numpy as np  # noqa: E402

from nki_kernels.simulator import profile  # noqa: E402
from nki_kernels.simulator.instructions.target import use as _use_target  # noqa: E402

VERSIONS = (2, 3, 4)


def _script(name):
    """``scripts/<name>.py`` loaded by path (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench_kernels():
    """``scripts/bench_kernels.py``, whose kernels these are."""
    return _script("bench_kernels")


# The published figures and the pair count are the hand-built ladder's (one copy of each).
_ladder = _script("timing_ladder")
PUBLISHED_TRN1_MS, STYLES, pairs_in_order = _ladder.PUBLISHED_TRN1_MS, _ladder.STYLES, _ladder.pairs_in_order


def matmul_styles(M=4096, K=8192, N=8192):
    """``{style: (kernel, static kwargs)}`` of the four tutorial styles from bench_kernels (the
    tutorial's blocking, 2 x 2 and 16 x 2 x 8 tiles, narrowed where the shape has fewer tiles)."""
    bk = _bench_kernels()
    tm, tn, tk = M // 128, N // 512, K // 128
    return {"tiled": (bk.mm1_tiled, {}), "hoist_load": (bk.mm1_hoisted, {}),
            "block_free": (bk.mm1_block_free, {"bm": min(2, tm), "bn": min(2, tn)}),
            "fully_optimized": (bk.mm1_optimised, {"bm": min(16, tm), "bn": min(2, tn), "bk": min(8, tk)})}


def inputs(M, K, N, seed=0):
    """Random bf16 ``lhsT [K, M]`` and ``rhs [K, N]``."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    return (rng.standard_normal((K, M), dtype=np.float32).astype(ml_dtypes.bfloat16),
            rng.standard_normal((K, N), dtype=np.float32).astype(ml_dtypes.bfloat16))


def run_style(style, M, K, N, overhead=False, versions=VERSIONS, out=None):
    """Profile one style on the simulated trn1 and schedule it on ``versions``; returns a dict of figures."""
    kernel, static = matmul_styles(M, K, N)[style]
    lhsT, rhs = inputs(M, K, N)
    def timed(fn):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        return out, time.perf_counter() - t0, time.process_time() - c0

    with _use_target("gen2"):
        t_call = c_call = None
        calls = []
        if overhead:  # plain calls before and after the profile (the first one also warms up)
            calls.append(timed(lambda: kernel(lhsT, rhs, **static))[1:])
        rep, t_prof, c_prof = timed(lambda: profile(kernel, lhsT, rhs, **static))
        if overhead:
            calls.append(timed(lambda: kernel(lhsT, rhs, **static))[1:])
            # (the faster call of each clock; CPU time as well as wall time: steadier on a shared machine)
            t_call, c_call = min(c[0] for c in calls), min(c[1] for c in calls)
    row = {"style": style, "shape": [M, K, N], "profile_s": t_prof, "call_s": t_call,
           "profile_cpu_s": c_prof, "call_cpu_s": c_call,
           "instructions": dict(rep.instructions), "hbm_bytes": rep.hbm_bytes, "versions": {}}
    for v in versions:
        res = rep.timing if v == rep.version else rep.retime(v)
        u = res.utilisation
        row["versions"][v] = {"ms": res.total_s * 1e3, "bound": res.bounding_engine,
                              "utilisation": {k: round(x, 4) for k, x in u.items()},
                              "dma_transfers": res.dma.transfers, "bytes_per_transfer": res.dma.bytes_per_transfer}
        if out:
            os.makedirs(out, exist_ok=True)
            res.plot(os.path.join(out, f"matmul_{style}_v{v}.png"),
                     title=f"{style} on {res.hw.name}: {res.total_s * 1e3:.2f} ms (simulator profile)")
    return row


# ----------------------------------------------------------------------------------------------------------
# the attention ladder
# ----------------------------------------------------------------------------------------------------------
def attention_kernels():
    """Three steps of the fused-attention tutorial for one head, q/k/v [d=128, S] bf16 (d on the partitions),
    out [S, d]: ``{step name: fn(run, q, k, v)}``, each launching its kernels through ``run(kernel,
    *arrays)``, which returns the kernel's outputs."""
    from nki_kernels.simulator import isa as nisa
    from nki_kernels.simulator import language as nl
    from nki_kernels.simulator import nki

    P, T = 128, 512  # query rows per tile, key columns per PSUM bank

    @nki.jit
    def scores(q, k):
        """Step 1a: scores[S, S] = q.T @ k into HBM (fp32)."""
        d, S = q.shape
        out = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(S // P):
            qt = nl.load(q[:, i * P:(i + 1) * P])
            for j in nl.affine_range(S // T):
                kt = nl.load(k[:, j * T:(j + 1) * T])
                ps = nisa.nc_matmul(qt, kt)
                nl.store(out[i * P:(i + 1) * P, j * T:(j + 1) * T], value=nl.copy(ps))
        return out

    @nki.jit
    def softmax(s):
        """Step 1b: row softmax of scores in HBM, written back as bf16 probabilities."""
        S = s.shape[0]
        out = nl.ndarray((S, S), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        for i in nl.affine_range(S // P):
            row = nl.load(s[i * P:(i + 1) * P, :])
            m = nl.max(row, axis=1, keepdims=True)
            e = nl.exp(nl.subtract(row, m))
            z = nl.sum(e, axis=1, keepdims=True)
            nl.store(out[i * P:(i + 1) * P, :], value=nl.multiply(e, nl.reciprocal(z), dtype=nl.bfloat16))
        return out

    @nki.jit
    def pv(p, v):
        """Step 1c: out[S, d] = p @ v.T, transposing p's tiles on the Tensor engine."""
        S = p.shape[0]
        d = v.shape[0]
        out = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(S // P):
            acc = nl.zeros((P, d), nl.float32, buffer=nl.psum)
            for j in nl.affine_range(S // P):
                pt = nl.load(p[i * P:(i + 1) * P, j * P:(j + 1) * P])
                vt = nl.load_transpose2d(v[:, j * P:(j + 1) * P])
                acc += nisa.nc_matmul(nl.copy(nisa.nc_transpose(pt)), vt)
            nl.store(out[i * P:(i + 1) * P, :], value=nl.copy(acc))
        return out

    def unfused(run, q, k, v):
        """Step 1: three launches, each through ``run(kernel, *arrays)`` (returns the outputs)."""
        return run(pv, run(softmax, run(scores, q, k)), v)

    def _fused(reduce_in_activation):
        @nki.jit
        def fused(q, k, v):
            """Steps 2 / 3: one kernel; scores, softmax and PV per 128 query rows stay on chip."""
            d, S = q.shape
            out = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.shared_hbm)
            vts = nl.ndarray((S // P, nl.par_dim(P), d), dtype=v.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(S // P):
                vts[j] = nl.load_transpose2d(v[:, j * P:(j + 1) * P])
            for i in nl.affine_range(S // P):
                qt = nl.load(q[:, i * P:(i + 1) * P])
                row = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.sbuf)
                for j in nl.affine_range(S // T):
                    kt = nl.load(k[:, j * T:(j + 1) * T])
                    row[:, j * T:(j + 1) * T] = nl.copy(nisa.nc_matmul(qt, kt))
                neg_m = nl.multiply(nl.max(row, axis=1, keepdims=True), -1.0)
                if reduce_in_activation:
                    z = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                    e = nisa.activation_reduce(op=nl.exp, data=row, reduce_op=nl.add, reduce_res=z, bias=neg_m,
                                               dtype=nl.bfloat16)
                    probs = e
                else:
                    e = nl.exp(nl.add(row, neg_m))
                    z = nl.sum(e, axis=1, keepdims=True)
                    probs = nl.multiply(e, nl.reciprocal(z), dtype=nl.bfloat16)
                acc = nl.zeros((P, d), nl.float32, buffer=nl.psum)
                for j in nl.affine_range(S // P):
                    pt = nl.copy(nisa.nc_transpose(probs[:, j * P:(j + 1) * P]))
                    acc += nisa.nc_matmul(pt, vts[j])
                res = nl.multiply(acc, nl.reciprocal(z)) if reduce_in_activation else nl.copy(acc)
                nl.store(out[i * P:(i + 1) * P, :], value=res)
            return out
        return fused

    f2, f3 = _fused(False), _fused(True)
    return {"1 unfused (3 kernels through HBM)": unfused, "2 fused": lambda run, q, k, v: run(f2, q, k, v),
            "3 fused + activation_reduce": lambda run, q, k, v: run(f3, q, k, v)}


def run_attention(S=2048, d=128, versions=VERSIONS):
    """Profile each attention step (every launch of step 1) and schedule on ``versions``; ms per step."""
    import ml_dtypes

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((d, S), dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    ref = None
    rows = {}
    for name, fn in attention_kernels().items():
        reports = []

        def run(kernel, *arrays):
            reports.append(profile(kernel, *arrays))  # every launch of the step, profiled
            return reports[-1].outputs

        with _use_target("gen2"):
            out = fn(run, q, k, v)
        out = np.asarray(out, np.float32)
        if ref is None:
            s = q.astype(np.float32).T @ k.astype(np.float32)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            ref = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float32).T
        err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
        rows[name] = {"rel_err": err, "versions": {}}
        for ver in versions:
            total = sum((r.timing if ver == r.version else r.retime(ver)).total_s for r in reports)
            rows[name]["versions"][ver] = total * 1e3
    return rows


def plot_styles(result, path):
    """Bar chart of ``result["matmul"]`` (as :func:`main` builds or ``--json`` wrote it): estimated ms per
    style and NeuronCore version beside the tutorial's published trn1 ms (log scale), PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = [s for s in STYLES if s in result["matmul"]]
    series = [(f"estimate, NeuronCore-v{v}", [result["matmul"][s]["versions"].get(v, result["matmul"][s]["versions"]
                                                                                   .get(str(v)))["ms"] for s in styles])
              for v in VERSIONS]
    series.append(("published, trn1", [PUBLISHED_TRN1_MS[s] for s in styles]))
    M, K, N = result["shape"]
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    width = 0.8 / len(series)
    colors = ("#4c72b0", "#55a868", "#8172b2", "#444444")
    for i, ((label, ms), color) in enumerate(zip(series, colors)):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(styles))]
        ax.bar(xs, ms, width, label=label, color=color, hatch="//" if label.startswith("published") else None,
                      edgecolor="white" if label.startswith("published") else None)
        for x, y in zip(xs, ms):
            ax.text(x, y * 1.04, f"{y:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(top=max(max(ms) for _, ms in series) * 2)
    ax.set_xticks(range(len(styles)), styles)
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"matmul tutorial styles, lhsT [{K},{M}] x rhs [{K},{N}] bf16: profile() estimate vs published trn1",
                 fontsize=9)
    ax.legend(fontsize=8, ncol=2, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    """Print the matmul ladder per NeuronCore version (and the attention ladder with ``--attention``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), default=(4096, 8192, 8192))
    ap.add_argument("--styles", nargs="+", default=list(STYLES), choices=STYLES)
    ap.add_argument("--overhead", action="store_true", help="also time a plain call: profile / call")
    ap.add_argument("--attention", action="store_true", help="also run the attention ladder")
    ap.add_argument("--attention-seq", type=int, default=2048)
    ap.add_argument("--no-matmul", action="store_true")
    ap.add_argument("--json", help="write the figures as JSON")
    ap.add_argument("--out", help="directory for a PNG timeline per kernel and version")
    ap.add_argument("--plot", help="PNG bar chart of the matmul styles' estimates per version vs published trn1")
    ap.add_argument("--from-json", help="read a previous --json result instead of profiling (for --plot)")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
        if args.plot:
            plot_styles(result, args.plot)
        return 0
    M, K, N = args.shape
    result = {"shape": [M, K, N], "matmul": {}, "attention": None}
    if not args.no_matmul:
        print(f"matmul tutorial styles (scripts/bench_kernels.py), lhsT [{K},{M}] x rhs [{K},{N}] bf16, simulated on "
              f"trn1, scheduled on NeuronCore-v2/v3/v4; published trn1: "
              + " / ".join(f"{v:.2f}" for v in PUBLISHED_TRN1_MS.values()) + " ms")
        for style in args.styles:
            row = run_style(style, M, K, N, args.overhead, out=args.out)
            result["matmul"][style] = row
            ov = (f", plain call {row['call_s']:.1f} s: profile/call {row['profile_s'] / row['call_s']:.2f} wall, "
                  f"{row['profile_cpu_s'] / row['call_cpu_s']:.2f} CPU") if row["call_s"] else ""
            print(f"  {style:<16} " + "  ".join(f"v{v} {row['versions'][v]['ms']:9.3f} ms ({row['versions'][v]['bound']})"
                                                for v in VERSIONS)
                  + f"   [profile {row['profile_s']:.1f} s{ov}]", flush=True)
        done = [s for s in STYLES if s in result["matmul"]]
        if len(done) == len(STYLES):
            full = (M, K, N) == (4096, 8192, 8192)
            print(f"\n  {'kernel':<16}" + "".join(f"{'v' + str(v) + ' ms':>11}" for v in VERSIONS)
                  + f"{'trn1 published':>16}" + (f"{'v2/published':>14}" if full else ""))
            for style in STYLES:
                vs = result["matmul"][style]["versions"]
                ratio = f"{vs[2]['ms'] / PUBLISHED_TRN1_MS[style]:>14.2f}" if full else ""
                print(f"  {style:<16}" + "".join(f"{vs[v]['ms']:>11.3f}" for v in VERSIONS)
                      + f"{PUBLISHED_TRN1_MS[style]:>16.2f}{ratio}")
            for v in VERSIONS:
                ok, total = pairs_in_order({s: result["matmul"][s]["versions"][v]["ms"] for s in STYLES},
                                           PUBLISHED_TRN1_MS)
                result.setdefault("pairs", {})[v] = ok
                print(f"  NeuronCore-v{v}: {ok} of {total} pairs in the published (trn1) order")
    if args.attention:
        rows = run_attention(args.attention_seq)
        result["attention"] = rows
        print(f"\nattention ladder, one head, S={args.attention_seq}, d=128 bf16 (estimated ms; no published figure)")
        for name, row in rows.items():
            print(f"  {name:<36}" + "".join(f"  v{v} {row['versions'][v]:8.3f}" for v in VERSIONS)
                  + f"   (max rel. error {row['rel_err']:.1e})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot and result["matmul"]:
        plot_styles(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
