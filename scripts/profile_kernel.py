"""Profile kernels on the simulator: a report per launch, a Perfetto trace and an on-chip memory picture.

    python scripts/profile_kernel.py [--out DIR] [--rows N --cols D]
    python scripts/profile_kernel.py --kernel FILE.py:NAME --arg 1024x4096:bfloat16 --arg 1024x2048:bfloat16 \\
        [--grid 4] [--static KEY=VALUE ...] [--out DIR]

Without ``--kernel`` it profiles the repository's add and RMSNorm kernels; with it, any kernel
(``nki-ops profile`` does the same for an installed nki-ops). For each kernel NAME it prints the
report (HBM bytes, traffic ratio vs. the minimum, instructions per engine with their busy time and
utilisation, SBUF/PSUM peaks, DMA efficiency, the critical path, the estimated Trainium time of the
engine-level timing model in ``nki_kernels/simulator/timing`` and its advice) and writes
NAME.report.txt / .report.json / .trace.json (https://ui.perfetto.dev: one track per engine and DMA
queue) / .memory.png / .timeline.png into --out, a folder git ignores (``out/`` is in .gitignore,
and the folder gets its own .gitignore). ``--version 2|3|4`` schedules on that NeuronCore
(default: the simulated target, ``NKI_SIM_NC_VERSION``).
"""

from __future__ import annotations

import argparse

import numpy as np
from rich.console import Console

from nki_kernels.simulator import profile
from nki_ops import profiling
from nki_ops.profiling import load_kernel, random_input


def _default_reports(args):
    from nki_kernels.add import add_grid, tensor_add_kernel
    from nki_kernels.rmsnorm import rms_norm_fwd_kernel, row_grid

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    b = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    w = rng.standard_normal(args.cols, dtype=np.float32)
    reports = {
        "tensor_add": profile(tensor_add_kernel[add_grid(a.shape)], a, b, version=args.version),
        "rms_norm_fwd": profile(rms_norm_fwd_kernel[row_grid(args.rows)], a, w, eps=1e-6, version=args.version),
    }
    notes = {
        "tensor_add": "each input element loaded once, each output element stored once",
        "rms_norm_fwd": "x read once, y written once; the weight row is loaded by every program "
                        "(one extra weight read per 128 rows)",
    }
    return reports, notes


def main(argv=None):
    """Run the profiles and write their files; returns ``{name: Report}``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    ap.add_argument("--out", default="out/profiles", help="folder for the reports, traces and pictures")
    ap.add_argument("--rows", type=int, default=1024, help="rows of the default kernels' inputs")
    ap.add_argument("--cols", type=int, default=2048, help="columns of the default kernels' inputs")
    ap.add_argument("--kernel", help="FILE.py:NAME or MODULE:NAME of any kernel to profile instead")
    ap.add_argument("--arg", action="append", default=[], help="an input SHAPE[:DTYPE], once per argument")
    ap.add_argument("--grid", type=int, nargs="*", default=None, help="launch grid (without it: one program)")
    ap.add_argument("--static", action="append", default=[], help="KEY=VALUE keyword argument of the kernel")
    ap.add_argument("--version", default=None, help="NeuronCore of the timing model: 2 (trn1), 3 (trn2), 4 (trn3)")
    args = ap.parse_args(argv)
    console = Console()
    if args.kernel:
        from nki_kernels.simulator import install

        install()  # kernels written against neuronxcc.nki or nki import the simulator
        kernel = load_kernel(args.kernel)
        rng = np.random.default_rng(0)
        inputs = [random_input(s, rng) for s in args.arg]
        name = args.kernel.rpartition(":")[2]
        reports = {name: profile(kernel, *inputs, grid=tuple(args.grid) if args.grid else None,
                                 version=args.version, **profiling.parse_static(args.static))}
        notes = {name: "inputs " + ", ".join(args.arg)}
    else:
        reports, notes = _default_reports(args)
    for name, rep in reports.items():
        console.print(rep.table())
        written = profiling.write_profile(rep, args.out, name)
        written.append(rep.plot_timeline(f"{args.out}/{name}.timeline.png"))
        console.print(f"[bold]{name}[/bold]: HBM traffic ratio {rep.traffic_ratio:.4f} (target 1.00; {notes[name]})")
        console.print("wrote " + ", ".join(written) + "\n")
    return reports


if __name__ == "__main__":
    main()
