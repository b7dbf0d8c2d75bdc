"""Profile the add and RMSNorm kernels on the simulator: a table per launch and a Perfetto trace.

    python scripts/profile_kernel.py [--out DIR] [--rows N --cols D]

Prints each report (HBM bytes, traffic ratio vs. the minimum, instructions per engine,
SBUF/PSUM peaks, estimated Trainium time from the model in
``nki_kernels/simulator/profiler.py``) and writes ``<kernel>.trace.json`` for
https://ui.perfetto.dev or chrome://tracing (with a counter track of live SBUF/PSUM bytes)
and ``<kernel>.memory.png``, the on-chip occupancy over the instruction sequence.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from rich.console import Console

from nki_kernels.add import add_grid, tensor_add_kernel
from nki_kernels.rmsnorm import rms_norm_fwd_kernel, row_grid
from nki_kernels.simulator import profile


def main(argv=None):
    """Run both profiles; returns ``{name: Report}``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="directory for the trace JSON files")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=2048)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    console = Console()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    b = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    w = rng.standard_normal(args.cols, dtype=np.float32)
    reports = {
        "tensor_add": profile(tensor_add_kernel[add_grid(a.shape)], a, b),
        "rms_norm_fwd": profile(rms_norm_fwd_kernel[row_grid(args.rows)], a, w, eps=1e-6),
    }
    notes = {
        "tensor_add": "each input element loaded once, each output element stored once",
        "rms_norm_fwd": "x read once, y written once; the weight row is loaded by every program "
                        "(one extra weight read per 128 rows)",
    }
    for name, rep in reports.items():
        console.print(rep.table())
        path = rep.write_trace(os.path.join(args.out, f"{name}.trace.json"))
        png = rep.plot_memory(os.path.join(args.out, f"{name}.memory.png"))
        console.print(f"on-chip occupancy plot: {png}")
        console.print(f"[bold]{name}[/bold]: HBM traffic ratio {rep.traffic_ratio:.4f} "
                      f"(target 1.00; {notes[name]}); trace written to {path}\n")
    return reports


if __name__ == "__main__":
    main()
