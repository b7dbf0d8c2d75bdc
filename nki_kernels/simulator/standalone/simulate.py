"""The simulator entry points of the standalone ``nki`` package: ``nki.simulate(kernel)`` and the
``nki.cpu_simulate(kernel)[lnc]`` of the ``nki_cpu_simulator.nki`` layout.

``nki.simulate(kernel)(*args, **kwargs)`` runs ``kernel`` (an ``@nki.jit``
kernel, ``kernel[lnc]``, or a plain function) on the simulator whatever the
machine: NumPy arrays in, NumPy arrays out; torch CPU tensors in, torch tensors
out (shared memory, so inputs the kernel writes are updated in place, as the
official simulator guide states). ``NEURON_PLATFORM_TARGET_OVERRIDE``
(``trn1``/``gen2``, ``trn2``/``gen3``, ``trn3``/``gen4``) selects the simulated
NeuronCore, as on the official simulator.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from .. import config as _config
from ..instructions import target as _target
from ..launch import Kernel, Launch, simulate_kernel

_TARGETS = {"trn1": "gen2", "inf2": "gen2", "gen2": "gen2", "trn2": "gen3", "gen3": "gen3", "trn3": "gen4",
            "gen4": "gen4"}


def _target_from(var):
    """``with``-context simulating the NeuronCore named by environment variable ``var`` (if set)."""
    name = os.environ.get(var, "").strip().lower()
    if not name:
        return contextlib.nullcontext()
    if name not in _TARGETS:
        raise ValueError(f"{var}={name!r}: expected one of {sorted(_TARGETS)}")
    return _target.use(_TARGETS[name])


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _run(launch, args, kwargs, env_var):
    torch_in = any(_is_torch(a) for a in (*args, *kwargs.values()))
    if torch_in:  # framework adapter, imported only when torch tensors are given
        from torch_ops import convert

        args = tuple(convert.to_numpy(a) if _is_torch(a) else a for a in args)
        kwargs = {k: convert.to_numpy(v) if _is_torch(v) else v for k, v in kwargs.items()}
    with _target_from(env_var):
        out = simulate_kernel(launch, *args, **kwargs)
    if not torch_in:
        return out

    def back(r):
        if isinstance(r, np.ndarray):
            return convert.from_numpy(r)
        if isinstance(r, (tuple, list)):
            return type(r)(back(x) for x in r)
        return r

    return back(out)


def _as_launch(kernel):
    if isinstance(kernel, (Kernel, Launch)):
        return kernel
    if callable(kernel):  # a plain function is a kernel of this API: kernel[2] is LNC=2
        return Kernel(getattr(kernel, "func", kernel), lnc_brackets=True)
    raise TypeError(f"expected an NKI kernel (an @nki.jit function), got {type(kernel).__name__}")


def simulate(kernel):
    """``nki.simulate(kernel)``: a callable running ``kernel`` on the CPU simulator.

    ``kernel`` is an ``@nki.jit`` kernel, ``kernel[lnc]`` or a plain function (wrapped).
    The callable takes the kernel's arguments (NumPy arrays or torch CPU tensors) and
    returns its results in the same form."""
    launch = _as_launch(kernel)

    def run(*args, **kwargs):
        return _run(launch, args, kwargs, "NEURON_PLATFORM_TARGET_OVERRIDE")

    run.__wrapped__ = getattr(launch, "func", launch)
    return run


def _sentinel_uninit():
    """``with``-context of the ``nki_cpu_simulator`` entry point: a read of never-written memory is a
    warning, not an error. The official CPU simulator fills new tensors with sentinel values (the
    simulator's NaN fill does the same), so garbage that reaches a result still shows there, while
    kernels that move unwritten lanes they later discard (nki-library's) run as on hardware."""
    if _config.get("uninit") == "error":
        return _config.override(uninit="warn")
    return contextlib.nullcontext()


class _CpuSimulation:
    """``cpu_simulate(kernel)``: index it with the logical core count, then call with keyword inputs."""

    def __init__(self, kernel):
        self.kernel = _as_launch(kernel)

    def __getitem__(self, lnc):
        base = self.kernel.kernel if isinstance(self.kernel, Launch) else self.kernel
        launch = base[lnc]

        def run(*args, **kwargs):
            with _sentinel_uninit():
                return _run(launch, args, kwargs, "NKI_NC_VERSION")

        return run

    def __call__(self, *args, **kwargs):
        with _sentinel_uninit():
            return _run(self.kernel, args, kwargs, "NKI_NC_VERSION")


def cpu_simulate(kernel):
    """``nki.cpu_simulate(kernel)[lnc](**inputs)`` of the ``nki_cpu_simulator.nki`` layout (nki-library's
    simulation harness): runs ``kernel`` with ``lnc`` logical cores on the simulator; the target
    NeuronCore comes from ``NKI_NC_VERSION`` (``gen2``/``gen3``/``gen4``) when set. Reads of unwritten
    memory are warnings here (sentinel-filled, as on the official CPU simulator), not errors."""
    return _CpuSimulation(kernel)
