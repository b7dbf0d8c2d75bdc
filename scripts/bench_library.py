"""The kernel library against the plain framework ops on CPU: forward and forward+backward ratios.

    python scripts/bench_library.py [--repeat N] [--only OP] [--framework jax|torch|both] [--json PATH]

For each op (softmax, cross_entropy, residual_rms_norm, rms_norm with a row too long
for SBUF, flash_attention), the NKI path (the simulator behind the JAX custom-call /
the torch.library op) and the plain framework code, both jitted in JAX and eager in
torch: best wall time of ``--repeat`` runs after a warm-up, and the ratio
(> 1: the NKI path is slower). The simulator executes the kernels' instructions on
NumPy, so ratios measure the simulator's overhead on CPU, not Trainium speed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The simulator's Tensor-engine matmuls are small (<= 128 x 512): BLAS threads only add spin-waiting,
# which costs 100x on a busy machine with few cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import jax_ops  # noqa: E402
import torch_ops  # noqa: E402
from bench_jax import best_of as jax_best_of  # noqa: E402
from bench_torch import best_of as torch_best_of  # noqa: E402
from train_decoder_jax import PlainOps  # noqa: E402

# (op, workload, shapes of the float inputs, extra: a function of the RNG giving non-float inputs)
B, H, HKV, S, D = 2, 8, 2, 512, 64
WORKLOADS = {
    "softmax": ("2048x4096", [(2048, 4096)]),
    "cross_entropy": ("1024x16384 (vocab streamed)", [(1024, 16384)]),
    "residual_rms_norm": ("4096x2048", [(4096, 2048), (4096, 2048), (2048,)]),
    "rms_norm": ("512x16384 (row streamed)", [(512, 16384), (16384,)]),
    "flash_attention": (f"causal b{B} h{H} kv{HKV} s{S} d{D}", [(B, H, S, D), (B, HKV, S, D), (B, HKV, S, D)]),
}


def _labels(rng, n, classes):
    return rng.integers(0, classes, n).astype(np.int32)


def jax_pair(op):
    """(ours, plain) JAX callables of the float inputs of ``op``."""
    if op == "softmax":
        return jax_ops.softmax, lambda x: jax.nn.softmax(x, -1)
    if op == "cross_entropy":
        labels = jnp.asarray(_labels(np.random.default_rng(1), 1024, 16384))
        return (lambda x: jax_ops.cross_entropy(x, labels)), (lambda x: PlainOps.cross_entropy(x, labels))
    if op == "residual_rms_norm":
        return jax_ops.residual_rms_norm, PlainOps.residual_rms_norm
    if op == "rms_norm":
        return jax_ops.rms_norm, PlainOps.rms_norm
    return ((lambda q, k, v: jax_ops.flash_attention(q, k, v, causal=True)),
            (lambda q, k, v: PlainOps.flash_attention(q, k, v, causal=True)))


def torch_pair(op):
    """(ours, plain) torch callables of the float inputs of ``op``."""
    if op == "softmax":
        return torch_ops.softmax, lambda x: torch.softmax(x, -1)
    if op == "cross_entropy":
        labels = torch.from_numpy(_labels(np.random.default_rng(1), 1024, 16384)).long()
        return (lambda x: torch_ops.cross_entropy(x, labels)), (lambda x: F.cross_entropy(x, labels))
    if op == "residual_rms_norm":
        def plain(x, r, w):
            h = x + r
            return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h
        return torch_ops.residual_rms_norm, plain
    if op == "rms_norm":
        return torch_ops.rms_norm, lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)
    return ((lambda q, k, v: torch_ops.flash_attention(q, k, v, causal=True)),
            (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)))


def jax_runs(fn, arrays):
    """(forward, forward+backward) thunks of ``fn`` under ``jax.jit``."""
    fwd = jax.jit(fn)
    cts = [jnp.asarray(np.random.default_rng(2).standard_normal(o.shape).astype(np.float32))
           for o in jax.tree.leaves(jax.eval_shape(fn, *arrays))]
    loss = lambda *a: sum(jnp.vdot(o, c) for o, c in zip(jax.tree.leaves(fn(*a)), cts))  # noqa: E731
    bwd = jax.jit(jax.grad(loss, argnums=tuple(range(len(arrays)))))
    return (lambda: fwd(*arrays)), (lambda: bwd(*arrays))


def torch_runs(fn, arrays):
    """(forward, forward+backward) thunks of ``fn`` on torch tensors (eager)."""
    tensors = [torch.from_numpy(a).requires_grad_() for a in arrays]
    with torch.no_grad():
        outs = fn(*tensors)
    cts = [torch.randn_like(o) for o in (outs if isinstance(outs, tuple) else (outs,))]

    def fwd():
        with torch.no_grad():
            fn(*tensors)

    def fwd_bwd():
        for t in tensors:
            t.grad = None
        outs = fn(*tensors)
        torch.autograd.backward(list(outs) if isinstance(outs, tuple) else [outs], cts)
    return fwd, fwd_bwd


def rows(ops, frameworks, repeat):
    """Measure each (op, framework, pass); yields one result dict per row."""
    for op in ops:
        workload, shapes = WORKLOADS[op]
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for fw in frameworks:
            if fw == "jax":
                ours, plain = jax_pair(op)
                jarrays = [jnp.asarray(a) for a in arrays]
                pairs, best = zip(jax_runs(ours, jarrays), jax_runs(plain, jarrays)), jax_best_of
            else:
                ours, plain = torch_pair(op)
                pairs, best = zip(torch_runs(ours, arrays), torch_runs(plain, arrays)), torch_best_of
            for pass_, (run_ours, run_plain) in zip(("fwd", "fwd+bwd"), pairs):
                t_ours, t_plain = best(run_ours, repeat), best(run_plain, repeat)
                yield {"op": op, "workload": workload + " fp32", "framework": fw, "pass": pass_,
                       "ours_ms": t_ours * 1e3, "plain_ms": t_plain * 1e3, "ratio": t_ours / t_plain}


def main(argv=None) -> None:
    """Run the benchmark, print the table (and write JSON if asked)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (best is kept)")
    ap.add_argument("--only", choices=list(WORKLOADS), action="append", help="benchmark only this op (repeatable)")
    ap.add_argument("--framework", choices=["jax", "torch", "both"], default="both")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    frameworks = ("jax", "torch") if args.framework == "both" else (args.framework,)
    console = Console(width=max(Console().width, 130))  # keep table rows on one line
    console.print(f"jax {jax.__version__} ({jax.default_backend()}), torch {torch.__version__} "
                  f"({torch.get_num_threads()} threads), best of {args.repeat}")
    table = Table(title="NKI kernel library vs plain framework ops (CPU; > 1: NKI path slower)")
    for col, just in (("op", "left"), ("workload", "left"), ("framework", "left"), ("pass", "left"),
                      ("nki-ops ms", "right"), ("plain ms", "right"), ("ratio", "right")):
        table.add_column(col, justify=just)
    out = []
    for row in rows(args.only or list(WORKLOADS), frameworks, args.repeat):
        out.append(row)
        console.print(f"  {row['op']} {row['framework']} {row['pass']}: {row['ratio']:.2f}x", highlight=False)
        table.add_row(row["op"], row["workload"], row["framework"], row["pass"], f"{row['ours_ms']:.1f}",
                      f"{row['plain_ms']:.1f}", f"{row['ratio']:.2f}x")
    console.print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
