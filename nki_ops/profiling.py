"""Profile a kernel on the simulator and write what a reader needs into one folder.

:func:`profile_to_folder` runs a kernel once under :func:`nki_kernels.simulator.profile` on
random inputs and writes, for kernel ``NAME``:

- ``NAME.report.txt``: the report table (HBM traffic, instructions per engine, on-chip peaks,
  estimated Trainium time from the documented cost model);
- ``NAME.report.json``: the same figures as JSON;
- ``NAME.trace.json``: the modelled timeline for https://ui.perfetto.dev;
- ``NAME.memory.png``: live SBUF (and PSUM, when the kernel uses it) bytes per partition over
  the kernel's instruction slots, drawn by :func:`plot_memory`.

The folder gets a ``.gitignore`` holding ``*``, so git ignores it in any checkout.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os

KIB = 1024


def load_kernel(spec: str):
    """The kernel ``spec`` names: ``path/to/file.py:name`` or ``package.module:name``."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"kernel must be FILE.py:NAME or MODULE:NAME, got {spec!r}")
    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise ValueError(f"no such file: {where}")
        mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        return getattr(module, name)
    except AttributeError:
        raise ValueError(f"{where} defines no {name!r}") from None


def random_input(spec: str, rng):
    """A uniform [0, 1) array for ``SHAPE[:DTYPE]`` (``1024x4096:bfloat16``; dtype default float32)."""
    import ml_dtypes
    import numpy as np

    shape_s, _, dtype_s = spec.partition(":")
    try:
        shape = tuple(int(s) for s in shape_s.lower().split("x"))
    except ValueError:
        raise ValueError(f"--arg must be SHAPE[:DTYPE] such as 128x512:bfloat16, got {spec!r}") from None
    dtype_s = dtype_s or "float32"
    try:
        dtype = np.dtype(getattr(ml_dtypes, dtype_s, None) or dtype_s)
    except TypeError:
        raise ValueError(f"--arg {spec!r}: unknown dtype {dtype_s!r}") from None
    return rng.random(shape).astype(dtype)


def parse_static(items) -> dict:
    """``["eps=1e-6", "name=x"]`` -> ``{"eps": 1e-06, "name": "x"}`` (Python literals, else strings)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--static must be KEY=VALUE, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def ignored_folder(out) -> str:
    """Create ``out`` (and parents) with a ``.gitignore`` of ``*`` in it; returns the path."""
    os.makedirs(out, exist_ok=True)
    marker = os.path.join(out, ".gitignore")
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("# written by nki-ops: profile output, not source\n*\n")
    return str(out)


def _capacities():
    """SBUF and PSUM bytes per partition of the simulated NeuronCore, and its version number."""
    from nki_kernels.simulator import memory
    from nki_kernels.simulator.instructions.target import get_nc_version

    version = get_nc_version()
    return memory.sbuf_bytes(), memory.PSUM_BYTES, int(getattr(version, "value", version))


def _instruction_columns(curve, times):
    """The columns of a program's occupancy curve that are its recorded instructions.

    The memory model's curve has two more columns than the program has instructions (live
    bytes before the first and after the last one); the profiler records the slot of each
    instruction and DMA, so keeping slots ``0 .. last recorded`` makes the picture count what
    the report's table counts."""
    if not times:
        return curve
    return curve[:, :max(slot for slot, _ in times) + 1]


def plot_memory(report, path) -> str:
    """Write a PNG of live SBUF / PSUM KiB per partition over the launch's instruction slots.

    Every figure is in KiB. One step on the x axis is one instruction or DMA of one program, as
    the report's table counts them (the programs follow each other in launch order; with several,
    dotted lines mark where each starts). Each memory's capacity is a labelled dashed line when it is within 4x of the
    peak; otherwise the axis is scaled to the data and the legend states the capacity, so a
    small kernel is not drawn as a flat line at the bottom. The PSUM panel is left out when
    the kernel never uses PSUM. Returns ``path``.
    """
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the memory picture needs matplotlib: pip install 'nki-ops[profile]' (the report and "
                          "trace are written without it)") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sbuf_cap, psum_cap, version = _capacities()
    curves = [_instruction_columns(curve, times) for _, curve, times in report.occupancy]
    slots = int(sum(c.shape[1] for c in curves))
    panels = [("SBUF", 0, sbuf_cap, report.sbuf_peak, "C0")]
    if report.psum_peak > 0:
        panels.append(("PSUM", 1, psum_cap, report.psum_peak, "C1"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.2 * len(panels) + 0.8), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for ax, (name, row, cap, peak, color) in zip(axes, panels):
        start = 0
        for i, curve in enumerate(curves):
            x = np.arange(start, start + curve.shape[1] + 1)
            y = np.append(curve[row], curve[row][-1:] if curve.shape[1] else 0) / KIB
            ax.step(x, y, where="post", color=color, linewidth=1.0, label=f"live {name}" if i == 0 else None)
            if 0 < start and len(curves) <= 64:
                ax.axvline(start, color="0.6", linestyle=":", linewidth=0.7,
                           label="next program starts" if start == curves[0].shape[1] else None)
            start += curve.shape[1]
        top = max(peak, 1) / KIB
        if cap <= 4 * max(peak, 1):
            ax.axhline(cap / KIB, color="red", linestyle="--", linewidth=1.0,
                       label=f"{name} capacity {cap / KIB:g} KiB")
            ax.set_ylim(0, cap / KIB * 1.1)
        else:
            ax.plot([], [], " ", label=f"{name} capacity {cap / KIB:g} KiB (off scale)")
            ax.set_ylim(0, top * 1.25)
        ax.set_ylabel(f"{name} KiB / partition")
        ax.set_title(f"{name}: peak {peak / KIB:.2f} KiB of {cap / KIB:g} KiB per partition "
                     f"({100 * peak / cap:.1f}%)", fontsize=10)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # beside the data, never on it
    if report.psum_peak == 0:
        axes[-1].text(1.01, 0.0, "PSUM: not used\nby this kernel", transform=axes[-1].transAxes,
                      fontsize=8, va="bottom", color="0.4")
    programs = len(curves)
    axes[-1].set_xlabel(f"instruction ({slots:,} in all, compute and DMA, as the report counts them; "
                        f"{programs} program{'s' if programs != 1 else ''} in launch order)")
    fig.suptitle(f"On-chip memory of {report.kernel}, grid {report.grid} (NeuronCore-v{version})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def write_profile(report, out, name=None) -> list:
    """Write ``report`` as ``NAME.report.txt``, ``.report.json``, ``.trace.json`` (one track per engine
    and DMA queue), ``.timeline.png`` (the estimated schedule) and ``.memory.png`` into the
    git-ignored folder ``out``; returns the paths written."""
    out = ignored_folder(out)
    name = name or report.kernel.rpartition(".")[2]
    base = os.path.join(out, name)
    with open(base + ".report.txt", "w") as f:
        f.write(str(report) + "\n")
    with open(base + ".report.json", "w") as f:
        json.dump(report.as_dict(), f, indent=1, default=str)
    return [base + ".report.txt", base + ".report.json", report.write_trace(base + ".trace.json"),
            report.plot_timeline(base + ".timeline.png"), plot_memory(report, base + ".memory.png")]


def profile_to_folder(kernel_spec: str, arg_specs, out="nki-profile", grid=None, static=(), seed=0) -> list:
    """Profile the kernel ``kernel_spec`` names on random inputs ``arg_specs`` (``SHAPE[:DTYPE]``
    each) and write its files into ``out``; returns the paths written (report text first)."""
    import numpy as np

    from nki_kernels.simulator import install, profile

    install()  # kernels written against neuronxcc.nki or nki import the simulator
    kernel = load_kernel(kernel_spec)
    rng = np.random.default_rng(seed)
    inputs = [random_input(s, rng) for s in arg_specs]
    report = profile(kernel, *inputs, grid=tuple(grid) if grid else None, **parse_static(static))
    return write_profile(report, out, kernel_spec.rpartition(":")[2])
