"""Where ``nki``, ``nl`` and ``nisa`` come from: the genuine Neuron SDK's when it imports, else the simulator.

Kernels import them from here so the same source runs on hardware and in the
simulator::

    from nki_kernels.backend import nki, nl, nisa

The stack is chosen once by :func:`nki_kernels.neuron_env.kernel_stack`:
``neuronxcc.nki`` (SDK <= 2.27; our kernels are first-generation SPMD-grid
kernels), then the standalone ``nki`` (SDK 2.27+), else the NumPy simulator.
``NKI_OPS_KERNEL_STACK`` overrides it. :func:`simulator_twin` gives the simulator
version of a genuine kernel (same source), for shape inference and CPU tensors.
"""

from __future__ import annotations

import types

from .neuron_env import kernel_stack

STACK = kernel_stack()
GENUINE = STACK != "simulator"

if STACK == "nki":  # pragma: no cover - needs the Neuron SDK (or the tests' stand-ins)
    import nki
    import nki.isa as nisa
    import nki.language as nl
elif STACK == "neuronxcc":  # pragma: no cover - needs the Neuron SDK (or the tests' stand-ins)
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
else:
    from .simulator import isa as nisa
    from .simulator import language as nl
    from .simulator import nki


def is_genuine_kernel(obj) -> bool:
    """True for a kernel of the genuine Neuron stack (not a simulator kernel) when that stack is in use."""
    from .simulator import is_kernel

    return GENUINE and callable(obj) and not is_kernel(obj)


def genuine_call(kernel, grid: tuple, args, static: dict):
    """Call a genuine kernel as its SDK documents: ``kernel[grid](*args, **static)`` (``kernel(...)`` without a grid).

    On the standalone ``nki`` stack ``kernel[n]`` is the logical-core count, not an
    SPMD grid, so a multi-program grid is refused there instead of launched wrongly.
    """
    if STACK == "nki":
        if tuple(grid) not in ((), (1,)):
            func = kernel_function(kernel)
            raise NotImplementedError(
                f"{getattr(func, '__qualname__', kernel)!r}: launch grid {tuple(grid)} on the standalone nki stack, "
                "where kernel[n] is the number of logical cores, not an SPMD grid; this is a first-generation "
                "SPMD kernel: run it with neuronxcc.nki (Neuron SDK <= 2.27, NKI_OPS_KERNEL_STACK=neuronxcc) or "
                "port it to loop over its tiles (the core count comes from NEURON_LOGICAL_NC_CONFIG)")
        return kernel(*args, **static)
    return (kernel[tuple(grid)] if grid else kernel)(*args, **static)


def kernel_function(kernel):
    """The Python function behind an ``@nki.jit`` kernel (genuine or simulator), or None."""
    for attr in ("func", "__wrapped__", "fn"):
        func = getattr(kernel, attr, None)
        if isinstance(func, types.FunctionType):
            return func
    return kernel if isinstance(kernel, types.FunctionType) else None


def _simulator_modules() -> dict:
    """Genuine module names -> the simulator module implementing the same API generation."""
    from .simulator import isa, language, nki as sim_nki, standalone

    return {"neuronxcc.nki": sim_nki, "neuronxcc.nki.language": language, "neuronxcc.nki.isa": isa,
            "nki": standalone, "nki.language": standalone.language, "nki.isa": standalone.isa}


_TWINS: dict = {}  # id(kernel) -> (kernel, twin): genuine kernel objects need not be hashable


def simulator_twin(kernel):
    """The simulator kernel with ``kernel``'s source: its ``nki`` / ``nl`` / ``nisa`` globals swapped.

    Used where a genuine kernel meets data that never reaches a NeuronDevice (CPU
    tensors) and to derive output shapes (``jax_neuronx.nki_call`` wants ``out_shape``).
    Helpers the kernel calls keep their own globals. A simulator kernel is its own twin.
    """
    from .simulator import is_kernel
    from .simulator.launch import Kernel

    if is_kernel(kernel):
        return kernel
    hit = _TWINS.get(id(kernel))
    if hit is not None and hit[0] is kernel:
        return hit[1]
    func = kernel_function(kernel)
    if func is None:
        raise TypeError(f"{kernel!r} is not an @nki.jit kernel (no .func / __wrapped__ function to simulate)")
    swap = _simulator_modules()
    module_globals = {k: swap.get(getattr(v, "__name__", None), v) if isinstance(v, types.ModuleType) else v
                      for k, v in func.__globals__.items()}
    twin = types.FunctionType(func.__code__, module_globals, func.__name__, func.__defaults__, func.__closure__)
    twin.__kwdefaults__ = func.__kwdefaults__
    twin.__qualname__, twin.__module__, twin.__doc__ = func.__qualname__, func.__module__, func.__doc__
    _TWINS[id(kernel)] = (kernel, Kernel(twin))
    return _TWINS[id(kernel)][1]


__all__ = ["GENUINE", "STACK", "genuine_call", "is_genuine_kernel", "kernel_function", "nki", "nl", "nisa", "simulator_twin"]
