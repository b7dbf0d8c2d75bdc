"""Every performance target of nki-ops, measured in one process, with pass/fail.

    python scripts/bench.py [--repeat N] [--json PATH]

Each row times the nki-ops path and the plain reference (NumPy / jitted jnp /
plain torch) in this process, best of ``--repeat`` runs, and prints their ratio
against the target.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc

import numpy as np
from rich.console import Console
from rich.progress import track
from rich.table import Table

import nki_kernels as K
from bench_simulator import best_of
from nki_kernels.simulator import buffer_pool
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki, standalone


def ratio_row(name, workload, ours, ref, target, repeat):
    """A row comparing ``ours`` against ``ref``: (name, workload, measured ratio, target, unit)."""
    t_ours, t_ref = best_of(ours, repeat), best_of(ref, repeat)
    return {"path": name, "workload": workload, "ours_ms": t_ours * 1e3, "ref_ms": t_ref * 1e3,
            "value": t_ours / t_ref, "target": target, "unit": "x"}


def sim_add(repeat):
    """Simulator tensor_add vs ``a + b``."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((4096, 4096)).astype(np.float32) for _ in range(2))
    return ratio_row("simulator", "tensor_add 4096x4096 fp32 vs a + b", lambda: K.tensor_add(a, b),
                     lambda: a + b, 1.5, repeat)


def sim_rms(repeat):
    """Simulator rms_norm vs the NumPy expression."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 4096)).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)

    def ref():
        return x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)) * w

    return ratio_row("simulator", "rms_norm 8192x4096 fp32 vs NumPy", lambda: K.rms_norm(x, w, 1e-6), ref,
                     1.5, repeat)


@nki.jit
def _tiny_kernel(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 4 + nl.arange(4)[:, None]
    j = nl.arange(8)[None, :]
    nl.store(c[i, j], value=nl.load(a[i, j]) + nl.load(b[i, j]))
    return c


def sim_tiny_grid(repeat):
    """Per-program cost of a 4096-program grid of 4x8 tiles."""
    a = np.ones((4096 * 4, 8), np.float32)
    t = best_of(lambda: _tiny_kernel[4096](a, a), repeat)
    return {"path": "simulator", "workload": "4096-program grid of 4x8 tiles", "ours_ms": t * 1e3,
            "ref_ms": None, "value": t / 4096 * 1e6, "target": 20.0, "unit": "us/program"}


def jax_rms(repeat):
    """Jitted jax_ops.rms_norm fwd+bwd vs jitted jnp."""
    import jax
    import jax.numpy as jnp

    import jax_ops

    x = jax.random.normal(jax.random.PRNGKey(0), (8192, 4096), jnp.float32)
    w = jnp.ones((4096,), jnp.float32)

    def ref(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w

    ours = jax.jit(jax.grad(lambda x, w: jax_ops.rms_norm(x, w, 1e-6).sum(), argnums=(0, 1)))
    plain = jax.jit(jax.grad(lambda x, w: ref(x, w).sum(), argnums=(0, 1)))
    return ratio_row("JAX CPU", "jit rms_norm fwd+bwd 8192x4096 vs jnp",
                     lambda: jax.block_until_ready(ours(x, w)), lambda: jax.block_until_ready(plain(x, w)),
                     1.5, repeat)  # (issue 16: <= 1.5x, so that noise cannot flip the 2.0x target)


def torch_rms(repeat):
    """torch_ops.rms_norm fwd+bwd vs plain torch."""
    import torch

    import torch_ops

    x = torch.randn(8192, 4096, requires_grad=True)
    w = torch.ones(4096, requires_grad=True)

    def run(fn):
        def step():
            y = fn(x, w)
            y.backward(torch.ones_like(y))
        return step

    def ref(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    return ratio_row("torch CPU", "rms_norm fwd+bwd 8192x4096 vs torch", run(lambda a, b: torch_ops.rms_norm(a, b, 1e-6)),
                     run(ref), 1.0, repeat)  # (issue 16: the torch rows stay <= 1.0x)


def peak_extra(fn, inputs) -> float:
    """Traced peak memory of ``fn()`` beyond its outputs, relative to inputs + outputs (after a warm-up;
    the simulator's buffer pool is emptied first, so the buffers the measured launch takes from it count)."""
    fn()
    buffer_pool.release()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    outs = out if isinstance(out, tuple) else (out,)
    out_bytes = sum(o.nbytes for o in outs)
    return (peak - base - out_bytes) / (sum(x.nbytes for x in inputs) + out_bytes)


def sim_memory(_repeat):
    """Peak memory the simulator allocates beyond its output, relative to inputs + outputs."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 4096)).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)
    return {"path": "memory", "workload": "rms_norm 8192x4096: peak extra / (inputs+outputs)", "ours_ms": None,
            "ref_ms": None, "value": peak_extra(lambda: K.rms_norm(x, w), (x, w)), "target": 1.0, "unit": "x"}


@standalone.jit
def _add_by_cores(a, b):
    """``a + b`` in 128 x 2048 tiles; on ``kernel[2]`` (LNC=2) each core adds its half of the row tiles."""
    rows, cols = a.shape
    out = standalone.language.ndarray((rows, cols), dtype=a.dtype, buffer=standalone.language.shared_hbm)
    per = rows // 128 // standalone.language.num_programs(0)
    first = standalone.language.program_id(0) * per
    for i in standalone.language.affine_range(per):
        for j in standalone.language.affine_range(cols // 2048):
            rs, cs = slice((first + i) * 128, (first + i + 1) * 128), slice(j * 2048, (j + 1) * 2048)
            ta, tb, tc = (standalone.language.ndarray((128, 2048), dtype=a.dtype, buffer=standalone.language.sbuf)
                          for _ in range(3))
            standalone.isa.dma_copy(dst=ta, src=a[rs, cs])
            standalone.isa.dma_copy(dst=tb, src=b[rs, cs])
            standalone.isa.tensor_tensor(dst=tc, data1=ta, data2=tb, op=standalone.language.add)
            standalone.isa.dma_copy(dst=out[rs, cs], src=tc)
    return out


def lnc_memory(_repeat):
    """Peak memory of a two-core (LNC=2) launch beyond its output, relative to inputs + outputs."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((8192, 4096)).astype(np.float32) for _ in range(2))
    return {"path": "memory", "workload": "add 8192x4096 on kernel[2] (LNC=2): peak extra / (in+out)",
            "ours_ms": None, "ref_ms": None, "value": peak_extra(lambda: _add_by_cores[2](a, b), (a, b)),
            "target": 1.0, "unit": "x"}


ROWS = [sim_add, sim_rms, sim_tiny_grid, jax_rms, torch_rms, sim_memory, lnc_memory]


def main():
    """Run every row and print the table (and write JSON with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    rows = []
    for row in track(ROWS, description="benchmarking"):
        try:
            rows.append(row(args.repeat))
        except (ImportError, AttributeError) as exc:
            rows.append({"path": row.__name__, "workload": f"not run: {exc}", "ours_ms": None, "ref_ms": None,
                         "value": None, "target": None, "unit": ""})
    table = Table(title="nki-ops performance (best of %d, one process)" % args.repeat)
    for col in ("path", "workload", "ours ms", "reference ms", "measured", "target", "result"):
        table.add_column(col)
    for r in rows:
        ok = r["value"] is not None and r["value"] <= r["target"]
        fmt = (lambda v: "-" if v is None else f"{v:.1f}")
        table.add_row(r["path"], r["workload"], fmt(r["ours_ms"]), fmt(r["ref_ms"]),
                      "-" if r["value"] is None else f"{r['value']:.2f} {r['unit']}",
                      "-" if r["target"] is None else f"<= {r['target']} {r['unit']}",
                      "[green]pass[/green]" if ok else "[red]fail[/red]")
        r["pass"] = ok
    Console(width=160).print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
