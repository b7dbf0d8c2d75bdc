"""The simulator's ``neuronxcc.nki`` module: ``jit``, ``simulate_kernel``, ``baremetal``,
``benchmark``, and the ``language`` / ``isa`` / ``typing`` submodules."""

from .. import compiler, isa, language  # noqa: F401 - re-exported as nki.compiler / .language / .isa
from ..launch import baremetal, jit, simulate_kernel  # noqa: F401
from . import typing  # noqa: F401
from ..access_pattern import NkiTensor as tensor  # noqa: F401 - nki.tensor, the tile type kernels annotate with
from ..launch import Kernel as _Kernel
from ..profiler import BenchmarkKernel as _BenchmarkKernel


def trace(func=None, **options):
    """``@nki.trace``: the decorator neuronxcc kept from before ``nki.jit`` (the documentation's example
    tests write ``nki_jit = nki.trace`` and launch through :func:`simulate_kernel`, outputs passed as
    arguments): a kernel as ``@nki.jit(mode='trace')`` makes it."""
    options.setdefault("mode", "trace")
    return jit(func, **options)


def benchmark(func=None, **options):
    """``@nki.benchmark``: run the kernel on the simulator and attach its profile report.

    The report is the simulator's model (DMA bytes, per-engine instruction
    counts, an estimated Trainium time), not a hardware measurement; see
    :func:`nki_kernels.simulator.profile`.
    """

    if func is None:
        return lambda f: _BenchmarkKernel(_Kernel(getattr(f, "func", f)), **options)
    return _BenchmarkKernel(_Kernel(getattr(func, "func", func)), **options)


def profile(func=None, **options):
    """``@nki.profile``: same as :func:`benchmark` on the simulator."""
    return benchmark(func, **options)
