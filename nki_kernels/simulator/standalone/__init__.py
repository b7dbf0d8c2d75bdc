"""The simulator's standalone ``nki`` package (``import nki``): ``jit``, ``simulate_kernel``,
``simulate``, ``baremetal``, ``benchmark``, ``profile`` and the ``language`` / ``isa`` / ``typing``
submodules.

Kernels of this API generation declare their tiles (``nl.ndarray(shape, dtype,
buffer=nl.sbuf)``) and ISA ops write into them (``nisa.nc_matmul(dst=psum_tile,
stationary=x, moving=y)``). ``jit`` is the first generation's: the same
:class:`~nki_kernels.simulator.launch.Kernel`, SPMD launch and dispatch by
argument type (NumPy -> simulator, JAX -> ``jax_ops``, torch -> ``torch_ops``).
:func:`nki_kernels.simulator.install` registers this package as ``nki`` when the
genuine one does not import.
"""

from ..launch import baremetal, jit, simulate_kernel  # noqa: F401
from ..nki import benchmark, profile  # noqa: F401
from ..nki import typing  # noqa: F401 - nki.typing: the same annotations in both generations
from . import isa, language  # noqa: F401

__nki_ops_simulator__ = True


def simulate(kernel):
    """``nki.simulate(kernel)(*arrays)``: a callable running ``kernel`` (or ``kernel[grid]``) on the simulator."""

    def run(*args, **kwargs):
        return simulate_kernel(kernel, *args, **kwargs)

    return run


__all__ = ["baremetal", "benchmark", "isa", "jit", "language", "profile", "simulate", "simulate_kernel", "typing"]
