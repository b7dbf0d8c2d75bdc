"""Benchmark torch_ops.rms_norm and torch_ops.add on CPU against the plain-torch expressions.

    python scripts/bench_torch.py [--repeat N] [--rms 8192x4096] [--add 4096x4096] [--json PATH]

For each op, in eager mode and under ``torch.compile(fullgraph=True)``,
forward and forward+backward: the best of ``--repeat`` runs (after a warm-up)
of the NKI path (simulator behind the torch.library op) and of the plain-torch
expression in the same mode, and their ratio (> 1: the NKI path is slower).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import torch_ops


def best_of(fn, repeat: int) -> float:
    """Best wall time of ``fn()`` in seconds over ``repeat`` runs, after one warm-up run."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def plain_rms_norm(x, w, eps=1e-6):
    """RMSNorm written with plain torch ops (what the kernel replaces)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def plain_add(a, b):
    """The plain-torch add."""
    return a + b


def ours_rms_norm(x, w):
    """torch_ops.rms_norm with the benchmark's eps."""
    return torch_ops.rms_norm(x, w, 1e-6)


def _fwd(fn, args):
    def run():
        with torch.no_grad():
            fn(*args)
    return run


def _fwd_bwd(fn, args):
    grad = None

    def run():
        nonlocal grad
        for a in args:
            a.grad = None
        y = fn(*args)
        if grad is None:
            grad = torch.randn_like(y)
        y.backward(grad)
    return run


def _shape(text: str) -> tuple:
    return tuple(int(d) for d in text.lower().split("x"))


def rows(rms_shape, add_shape, dtype, repeat):
    """Measure every (op, mode, pass) combination; yields one result dict per row."""
    torch.manual_seed(0)
    x = torch.randn(rms_shape, dtype=dtype, requires_grad=True)
    w = torch.randn(rms_shape[-1], dtype=dtype, requires_grad=True)
    a = torch.randn(add_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(add_shape, dtype=dtype, requires_grad=True)
    cases = [("rms_norm", "x".join(map(str, rms_shape)), ours_rms_norm, plain_rms_norm, (x, w)),
             ("add", "x".join(map(str, add_shape)), torch_ops.add, plain_add, (a, b))]
    for op, shape, ours, plain, args in cases:
        for mode in ("eager", "compiled"):
            if mode == "compiled":
                torch._dynamo.reset()
                ours, plain = torch.compile(ours, fullgraph=True), torch.compile(plain, fullgraph=True)
            for pass_, make in (("fwd", _fwd), ("fwd+bwd", _fwd_bwd)):
                t_ours = best_of(make(ours, args), repeat)
                t_plain = best_of(make(plain, args), repeat)
                yield {"op": op, "shape": shape, "dtype": str(dtype).replace("torch.", ""), "mode": mode,
                       "pass": pass_, "ours_ms": t_ours * 1e3, "plain_ms": t_plain * 1e3,
                       "ratio": t_ours / t_plain}


def main() -> None:
    """Parse arguments, run every row, print the table (and write JSON if asked)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (best is kept)")
    p.add_argument("--rms", default="8192x4096", help="rms_norm input shape, e.g. 8192x4096")
    p.add_argument("--add", default="4096x4096", help="add input shape")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args()

    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeat}")
    head = f"{'op':<9}{'shape':<11}{'mode':<10}{'pass':<9}{'nki-ops ms':>12}{'plain ms':>11}{'ratio':>8}"
    print(head)
    print("-" * len(head))
    out = []
    for r in rows(_shape(args.rms), _shape(args.add), dtype, args.repeat):
        out.append(r)
        print(f"{r['op']:<9}{r['shape']:<11}{r['mode']:<10}{r['pass']:<9}{r['ours_ms']:>12.2f}"
              f"{r['plain_ms']:>11.2f}{r['ratio']:>7.2f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
