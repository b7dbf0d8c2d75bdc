"""What the stand-in Neuron packages received, and the simulator that computes their results."""

from __future__ import annotations

import functools
import sys

import numpy as np

CALLS: list = []


def describe(value):
    """A JSON-able description of one argument: its kind, shape and dtype (or the value)."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        mod = type(value).__module__.split(".")[0]
        kind = {"numpy": "numpy", "jax": "jax", "jaxlib": "jax"}.get(mod, mod)
        if "torch" in sys.modules and isinstance(value, sys.modules["torch"].Tensor):
            kind = f"torch:{value.device.type}"  # subclasses too: the tests' XLA-like tensors
        return {"kind": kind, "type": type(value).__name__, "shape": [int(d) for d in value.shape],
                "dtype": str(np.dtype(value.dtype)) if kind in ("numpy", "jax") else str(value.dtype)}
    return value


def record(entry, kernel_name, grid, args, static, **extra):
    """Log one call of a stand-in entry point."""
    CALLS.append({"entry": entry, "kernel": kernel_name, "grid": list(grid), "args": [describe(a) for a in args],
                  "static": {k: describe(v) for k, v in static.items()}, **extra})


@functools.lru_cache(maxsize=None)
def simulator_kernel(func):
    """The simulator kernel of ``func``, findable from a custom-call payload by its module and name."""
    from nki_kernels.custom_call import register_kernel
    from nki_kernels.simulator.launch import Kernel

    kernel = Kernel(func)
    register_kernel(kernel)
    return kernel


def compute(func, grid, args, static):
    """Run ``func`` on the simulator, as the framework of ``args`` would see it run on a device."""
    kernel = simulator_kernel(func)
    if "jax" in sys.modules and args and isinstance(args[0], sys.modules["jax"].Array):
        from jax_ops.primitive import nki_call

        return nki_call(kernel, *args, grid=grid or None, **static)
    if "torch" in sys.modules and args and isinstance(args[0], sys.modules["torch"].Tensor):
        import torch

        from torch_ops.dispatch import simulate_cpu

        cls = type(args[0])
        plain = [a.as_subclass(torch.Tensor) for a in args]  # the tests' device-faking subclasses
        device = plain[0].device  # where the data really is: CPU, or a real torch-xla device
        out = simulate_cpu(kernel, tuple(grid), [p.cpu() for p in plain], static)

        def back(t):
            t = t.to(device)
            return t.as_subclass(cls) if cls is not torch.Tensor else t

        return tuple(back(o) for o in out) if isinstance(out, tuple) else back(out)
    from nki_kernels.simulator.launch import simulate

    return simulate(kernel, tuple(grid), *args, **static)


class StandinKernel:
    """What a stand-in ``nki.jit`` returns: ``kernel[grid](*args, **static)`` is recorded, then simulated."""

    def __init__(self, func, entry, grid_means="spmd"):
        self.func = func
        self.entry = entry
        self.grid_means = grid_means
        functools.update_wrapper(self, func)

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        if self.grid_means == "lnc" and (len(grid) != 1 or grid[0] not in (1, 2)):
            raise ValueError(f"{self.entry}: kernel[{grid}]: the bracket takes one number, the logical cores (1 or 2)")
        return functools.partial(self._launch, tuple(grid))

    def __call__(self, *args, **static):
        return self._launch((), *args, **static)

    def _launch(self, grid, *args, **static):
        record(self.entry, self.func.__qualname__, grid, args, static)
        sim_grid = () if self.grid_means == "lnc" else grid
        return compute(self.func, sim_grid, args, static)


def jit_for(entry, grid_means="spmd"):
    """A stand-in ``nki.jit`` decorator (with or without options) recording under ``entry``."""

    def jit(func=None, **options):
        if func is None:
            return lambda f: StandinKernel(f, entry, grid_means)
        return StandinKernel(func, entry, grid_means)

    return jit


def mirror(module_name, simulator_module):
    """Make module ``module_name`` expose every name of ``simulator_module`` (the stand-in's language / isa)."""
    mod = sys.modules[module_name]
    for name in dir(simulator_module):
        if not name.startswith("__"):
            setattr(mod, name, getattr(simulator_module, name))
    return mod


def placeholder(name):
    """Raise as the public-index placeholder packages do on import."""
    raise ImportError(f"WRONG PACKAGE: {name} on the public index is a placeholder; "
                      "install it from the Neuron repository")


