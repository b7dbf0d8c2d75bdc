"""Where ``nki``, ``nl`` and ``nisa`` come from: the genuine Neuron SDK's when it imports, else the simulator.

Kernels import them from here so the same source runs on hardware and in the
simulator::

    from nki_kernels.backend import nki, nl, nisa

The stack is chosen once by :func:`nki_kernels.neuron_env.kernel_stack`:
``neuronxcc.nki`` (SDK <= 2.27; our kernels are first-generation SPMD-grid
kernels), then the standalone ``nki`` (SDK 2.27+), else the NumPy simulator.
``NKI_OPS_KERNEL_STACK`` overrides it. On a genuine stack ``nki.jit`` returns a
:class:`GenuineKernel`, so a kernel launched directly (``kernel[grid](*jax_arrays)``)
takes the same per-era path as one given to ``nki_call``. :func:`simulator_twin` gives
the simulator version of a genuine kernel (same source), for shape inference and CPU tensors.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import types

from .neuron_env import kernel_stack

STACK = kernel_stack()
GENUINE = STACK != "simulator"


class GenuineKernel:
    """A genuine ``@nki.jit`` kernel whose launches pass nki-ops' decision point.

    ``kernel[grid](*args, **static)`` with JAX arrays / tracers or torch tensors goes
    to that framework's ``nki_call`` (registered with the simulator's launch
    dispatch), which asks :func:`jax_ops.genuine.launch` / :func:`torch_ops.backend.route`
    for the SDK era's entry point; any other arguments (NumPy arrays, the SDK's own
    tracing tensors inside another kernel) go straight to the genuine kernel.
    """

    def __init__(self, genuine, func):
        self.genuine = genuine
        self.func = func
        self.signature = inspect.signature(func)
        functools.update_wrapper(self, func)

    def __getitem__(self, grid):
        from .simulator.launch import normalize_grid

        return GenuineLaunch(self, normalize_grid(grid))

    def __call__(self, *args, **kwargs):
        return GenuineLaunch(self, ())(*args, **kwargs)

    def __repr__(self):
        return f"<genuine {STACK} kernel {self.func.__module__}.{self.func.__qualname__}>"


class GenuineLaunch:
    """``kernel[grid]`` of a :class:`GenuineKernel`; calling it launches through the framework's ``nki_call``."""

    def __init__(self, kernel: GenuineKernel, grid: tuple):
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args, **kwargs):
        from .simulator import launch

        handler = launch.array_handler(itertools.chain(args, kwargs.values()), launch._ARRAY_DISPATCH)
        if handler is not None:
            return handler(self, args, kwargs)  # it reads .kernel and .grid, as of a simulator Launch
        return genuine_call(self.kernel, self.grid, args, kwargs)


def unwrap(value):
    """The SDK's own object behind our wrappers (a :class:`GenuineKernel`, or a :class:`GenuineLaunch` as
    the SDK's ``kernel[grid]``), what its functions expect (``nki.simulate_kernel(kernel[grid], ...)``)."""
    if isinstance(value, GenuineLaunch):
        kernel = value.kernel.genuine
        return kernel[value.grid] if value.grid else kernel
    return value.genuine if isinstance(value, GenuineKernel) else value


def split_launch(kernel, grid):
    """``(kernel, grid)`` of ``kernel`` or of a :class:`GenuineLaunch` ``kernel[grid]`` (a grid given twice must agree)."""
    if not isinstance(kernel, GenuineLaunch):
        return kernel, grid
    from .simulator.launch import normalize_grid

    if grid not in (None, ()) and normalize_grid(grid) != kernel.grid:
        raise ValueError(f"grid={grid} given for kernel[{kernel.grid}]; give the grid once")
    return kernel.kernel, kernel.grid


class _GenuineNki(types.ModuleType):
    """The genuine ``nki`` module, with ``jit`` returning :class:`GenuineKernel` wrappers."""

    def __init__(self, genuine):
        super().__init__(genuine.__name__, genuine.__doc__)
        self.__genuine = genuine

    def __getattr__(self, name):
        value = getattr(self.__genuine, name)
        if not callable(value) or isinstance(value, type):
            return value

        @functools.wraps(value)
        def unwrapped(*args, **kwargs):  # baremetal, simulate_kernel, benchmark ... take SDK kernels
            return value(*(unwrap(a) for a in args), **{k: unwrap(v) for k, v in kwargs.items()})

        return unwrapped

    def jit(self, func=None, **options):
        """The genuine ``nki.jit`` (same options), returning a :class:`GenuineKernel`."""
        if func is None:
            return lambda f: self.jit(f, **options)
        return GenuineKernel(self.__genuine.jit(func, **options), func)


if STACK == "nki":  # pragma: no cover - needs the Neuron SDK (or the tests' stand-ins)
    import nki as _genuine_nki
    import nki.isa as nisa
    import nki.language as nl

    nki = _GenuineNki(_genuine_nki)
elif STACK == "neuronxcc":  # pragma: no cover - needs the Neuron SDK (or the tests' stand-ins)
    import neuronxcc.nki as _genuine_nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    nki = _GenuineNki(_genuine_nki)
else:
    from .simulator import isa as nisa
    from .simulator import language as nl
    from .simulator import nki


def is_genuine_kernel(obj) -> bool:
    """True for a kernel of the genuine Neuron stack (not a simulator kernel) when that stack is in use."""
    from .simulator import is_kernel

    # A bare function is an undecorated kernel, not something the SDK's nki.jit returned.
    return GENUINE and callable(obj) and not is_kernel(obj) and not isinstance(obj, types.FunctionType)


def genuine_call(kernel, grid: tuple, args, static: dict):
    """Call a genuine kernel as its SDK documents: ``kernel[grid](*args, **static)`` (``kernel(...)`` without a grid).

    On the standalone ``nki`` stack ``kernel[n]`` is the logical-core count, not an
    SPMD grid, so a multi-program grid is refused there instead of launched wrongly.
    """
    kernel = unwrap(kernel)
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
_TWIN_GLOBALS: dict = {}  # id(module globals) -> (those globals, their simulator version)


def _simulator_globals(module_globals: dict) -> dict:
    """A module's globals with the genuine modules swapped for the simulator's and its genuine
    kernels for their twins (one dict per module, so kernels calling each other share it)."""
    hit = _TWIN_GLOBALS.get(id(module_globals))
    if hit is not None and hit[0] is module_globals:
        return hit[1]
    swap = _simulator_modules()
    new = {k: swap.get(v.__name__, v) if isinstance(v, types.ModuleType) else v for k, v in module_globals.items()}
    _TWIN_GLOBALS[id(module_globals)] = (module_globals, new)
    for name, value in list(new.items()):
        if isinstance(value, GenuineKernel):
            new[name] = simulator_twin(value)
    return new


def simulator_twin(kernel):
    """The simulator kernel with ``kernel``'s source: its ``nki`` / ``nl`` / ``nisa`` globals swapped.

    Used where a genuine kernel meets data that never reaches a NeuronDevice (CPU
    tensors) and to derive output shapes (``jax_neuronx.nki_call`` wants ``out_shape``).
    Other kernels of its module are twinned too (so helper kernels stay in the
    simulator); plain helper functions keep their own globals. A simulator kernel is
    its own twin.
    """
    from .custom_call import register_kernel
    from .simulator import is_kernel
    from .simulator.launch import Kernel

    if is_kernel(kernel):
        return kernel
    func = kernel_function(kernel)
    if func is None:
        raise TypeError(f"{kernel!r} is not an @nki.jit kernel (no .func / __wrapped__ function to simulate)")
    module_globals = _simulator_globals(func.__globals__)
    hit = _TWINS.get(id(kernel))  # looked up after the globals: building them twins the module's kernels
    if hit is not None and hit[0] is kernel:
        return hit[1]
    twin = types.FunctionType(func.__code__, module_globals, func.__name__, func.__defaults__, func.__closure__)
    twin.__kwdefaults__ = func.__kwdefaults__
    twin.__qualname__, twin.__module__, twin.__doc__ = func.__qualname__, func.__module__, func.__doc__
    sim = Kernel(twin)
    register_kernel(sim)  # a custom-call payload naming the kernel (torch-xla on CPU) finds the twin
    _TWINS[id(kernel)] = (kernel, sim)
    return sim


__all__ = ["GENUINE", "GenuineKernel", "GenuineLaunch", "STACK", "genuine_call", "is_genuine_kernel", "kernel_function", "nki", "nl", "nisa", "simulator_twin", "split_launch", "unwrap"]
