"""Profile kernels on the simulator: a table per launch, a Perfetto trace and an on-chip occupancy plot.

    python scripts/profile_kernel.py [--out DIR] [--rows N --cols D]
    python scripts/profile_kernel.py --kernel FILE.py:NAME --arg 1024x4096:bfloat16 --arg 1024x2048:bfloat16 \
        [--grid 4] [--static KEY=VALUE ...] [--out DIR]

Without ``--kernel`` it profiles the repository's add and RMSNorm kernels. With ``--kernel`` it
profiles any kernel (``path/to/file.py:name`` or ``package.module:name``; either NKI generation,
the simulator is installed first) on random inputs of the given shapes (uniform in [0, 1), as the
official tutorials' ``torch.rand``).

Prints each report (HBM bytes, traffic ratio vs. the minimum, instructions per engine,
SBUF/PSUM peaks, estimated Trainium time from the model in
``nki_kernels/simulator/profiler.py``) and writes ``<kernel>.trace.json`` for
https://ui.perfetto.dev or chrome://tracing (with a counter track of live SBUF/PSUM bytes)
and ``<kernel>.memory.png``, the on-chip occupancy over the instruction sequence.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os

import numpy as np
from rich.console import Console

from nki_kernels.simulator import profile


def load_kernel(spec: str):
    """The kernel ``spec`` names: ``path/to/file.py:name`` or ``package.module:name``."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"--kernel must be FILE.py:NAME or MODULE:NAME, got {spec!r}")
    if where.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        if mod_spec is None:
            raise ValueError(f"--kernel: cannot load {where!r}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        return getattr(module, name)
    except AttributeError:
        raise ValueError(f"--kernel: {where} defines no {name!r}") from None


def random_input(spec: str, rng) -> np.ndarray:
    """A uniform [0, 1) array for ``SHAPE[:DTYPE]`` (``1024x4096:bfloat16``; default float32)."""
    import ml_dtypes

    shape_s, _, dtype_s = spec.partition(":")
    try:
        shape = tuple(int(s) for s in shape_s.lower().split("x"))
    except ValueError:
        raise ValueError(f"--arg must be SHAPE[:DTYPE] such as 128x512:bfloat16, got {spec!r}") from None
    dtype_s = dtype_s or "float32"
    dtype = np.dtype(getattr(ml_dtypes, dtype_s, None) or dtype_s)
    return rng.random(shape).astype(dtype)


def _static(items):
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--static must be KEY=VALUE, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def _default_reports(args):
    from nki_kernels.add import add_grid, tensor_add_kernel
    from nki_kernels.rmsnorm import rms_norm_fwd_kernel, row_grid

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
    return reports, notes


def main(argv=None):
    """Run the profiles; returns ``{name: Report}``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="directory for the trace JSON and occupancy PNG files")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--kernel", help="FILE.py:NAME or MODULE:NAME of any kernel to profile instead")
    ap.add_argument("--arg", action="append", default=[], help="an input SHAPE[:DTYPE], once per argument")
    ap.add_argument("--grid", type=int, nargs="*", default=None, help="launch grid (default: a single program)")
    ap.add_argument("--static", action="append", default=[], help="KEY=VALUE keyword argument of the kernel")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    console = Console()
    if args.kernel:
        from nki_kernels.simulator import install

        install()  # kernels written against neuronxcc.nki or nki import the simulator
        kernel = load_kernel(args.kernel)
        rng = np.random.default_rng(0)
        inputs = [random_input(s, rng) for s in args.arg]
        name = args.kernel.rpartition(":")[2]
        reports = {name: profile(kernel, *inputs, grid=tuple(args.grid) if args.grid else None,
                                 **_static(args.static))}
        notes = {name: "inputs " + ", ".join(args.arg)}
    else:
        reports, notes = _default_reports(args)
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
