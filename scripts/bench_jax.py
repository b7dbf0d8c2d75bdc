"""jax_ops against the jitted jnp expression, measured in one process (best of N runs).

    python scripts/bench_jax.py [--repeat N] [--only rms_norm|add]

For rms_norm (8192x4096 fp32) and add (4096x4096 fp32), forward and
forward+backward, both sides under ``jax.jit`` on the default backend (CPU:
the NKI custom-call runs on the simulator). Prints the best wall time of each
side and the ratio jax_ops / jnp.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jax_ops  # noqa: E402

EPS = 1e-6


def best_of(fn, repeat):
    """Best wall time of ``fn()`` over ``repeat`` runs (after one warm-up, which also compiles)."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def rms_ref(x, w):
    """RMSNorm in plain jnp."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS) * w


def workloads():
    """(name, group, jax_ops call, jnp call) for each benchmarked workload."""
    kx, kw, ka, kb = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.normal(kx, (8192, 4096), jnp.float32)
    w = jax.random.normal(kw, (4096,), jnp.float32)
    a = jax.random.normal(ka, (4096, 4096), jnp.float32)
    b = jax.random.normal(kb, (4096, 4096), jnp.float32)

    def fwd_bwd(f):
        # A weighted sum keeps the backward non-trivial (dy is not a constant).
        return jax.jit(jax.value_and_grad(lambda p, q: jnp.vdot(f(p, q), p), argnums=(0, 1)))

    ours_rms = lambda x, w: jax_ops.rms_norm(x, w, EPS)  # noqa: E731
    rows = [
        ("rms_norm fwd 8192x4096 fp32", "rms_norm", jax.jit(ours_rms), jax.jit(rms_ref), (x, w)),
        ("rms_norm fwd+bwd 8192x4096 fp32", "rms_norm", fwd_bwd(ours_rms), fwd_bwd(rms_ref), (x, w)),
        ("add fwd 4096x4096 fp32", "add", jax.jit(jax_ops.add), jax.jit(jnp.add), (a, b)),
        ("add fwd+bwd 4096x4096 fp32", "add", fwd_bwd(jax_ops.add), fwd_bwd(jnp.add), (a, b)),
    ]
    return [(name, group, (lambda f=f, args=args: f(*args)), (lambda g=g, args=args: g(*args)))
            for name, group, f, g, args in rows]


def main():
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=["rms_norm", "add"])
    args = ap.parse_args()
    print(f"backend: {jax.default_backend()}, devices: {len(jax.devices())}")
    print(f"{'workload':<34} {'jax_ops ms':>11} {'jnp ms':>9} {'ratio':>7}")
    for name, group, ours, ref in workloads():
        if args.only and group != args.only:
            continue
        to, tr = best_of(ours, args.repeat), best_of(ref, args.repeat)
        print(f"{name:<34} {to * 1e3:>11.1f} {tr * 1e3:>9.1f} {to / tr:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
