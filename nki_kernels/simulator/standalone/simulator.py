"""``nki.simulator``: the module clients import the CPU simulator's entry point from.

vllm-neuron's CPU mode (``VLLM_NEURON_CPU_MODE=1 NKI_SIMULATOR=1``) and nki-library's simulation
harness call ``from nki.simulator import simulate_kernel`` and then
``simulate_kernel(func, args, kwargs, lnc=lnc)`` (nki-library spells the core count ``_lnc=``).
"""

from __future__ import annotations

from ..launch import Launch
from .simulate import _as_launch, simulate

__all__ = ["simulate_kernel"]


def simulate_kernel(kernel, args=(), kwargs=None, lnc=None, *, _lnc=None):
    """Run ``kernel`` (an ``@nki.jit`` kernel or a plain kernel function) once on the simulator as
    ``kernel[lnc](*args, **kwargs)`` and return its result: NumPy arrays in, NumPy arrays out
    (torch CPU tensors in, torch tensors out, as :func:`nki.simulate`).

    ``lnc`` (or ``_lnc``) is the number of logical cores, default 1; a kernel already indexed
    (``kernel[2]``) keeps its own. The simulated NeuronCore follows
    ``NEURON_PLATFORM_TARGET_OVERRIDE`` as in :func:`nki.simulate`.
    """
    if lnc is not None and _lnc is not None and lnc != _lnc:
        raise TypeError(f"simulate_kernel: lnc={lnc} and _lnc={_lnc} disagree; give one")
    cores = lnc if lnc is not None else _lnc
    launch = _as_launch(kernel)
    if cores is not None and int(cores) != 1:
        if isinstance(launch, Launch):
            raise TypeError(f"simulate_kernel: the kernel is already indexed ({launch.grid}); lnc={cores} too")
        launch = launch[int(cores)]
    return simulate(launch)(*tuple(args), **dict(kwargs or {}))
