"""Simulator speed against the NumPy expression, measured in one process (best of N runs).

    python scripts/bench_simulator.py [--repeat N]

Prints, for tensor_add on 4096x4096 fp32 and rms_norm on 8192x4096 fp32, the
best wall time of the simulator and of NumPy and their ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import nki_kernels as K


def best_of(fn, repeat):
    """Best wall time of ``fn()`` over ``repeat`` runs (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def workloads():
    """(name, simulator call, NumPy call) for each benchmarked workload."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096, 4096)).astype(np.float32)
    b = rng.standard_normal((4096, 4096)).astype(np.float32)
    x = rng.standard_normal((8192, 4096)).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)
    eps = 1e-6

    def rms_numpy():
        return x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * w

    return [
        ("tensor_add 4096x4096 fp32", lambda: K.tensor_add(a, b), lambda: a + b),
        ("rms_norm 8192x4096 fp32", lambda: K.rms_norm(x, w, eps), rms_numpy),
    ]


def main():
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'workload':<28} {'simulator ms':>13} {'numpy ms':>10} {'ratio':>7}")
    for name, sim, ref in workloads():
        ts, tr = best_of(sim, args.repeat), best_of(ref, args.repeat)
        print(f"{name:<28} {ts * 1e3:>13.1f} {tr * 1e3:>10.1f} {ts / tr:>7.2f}x")


if __name__ == "__main__":
    main()
