"""``nki_call``: launch an ``@nki.jit`` kernel on torch tensors, wherever they live.

This is what ``kernel[grid](*tensors)`` does when called with torch tensors. The
device of the tensors picks the executor:

- first, :func:`torch_ops.backend.route`: a genuine Neuron kernel goes to its SDK's entry
  point (``nki.jit`` on XLA tensors, ``nki_op`` on TorchNeuron's ``neuron`` device), a
  simulator kernel on a NeuronDevice round-trips through the host;
- ``cpu``: the simulator, reading and writing the tensors' memory directly
  (zero-copy NumPy views, bf16 included);
- ``xla``: an ``AwsNeuronCustomNativeKernel`` custom-call in the lazy graph
  (see :mod:`torch_ops.xla`);
- ``meta``: only the result shapes/dtypes (for shape propagation);
- any other device (e.g. ``cuda``): a host round trip through the simulator;
- inside ``torch.compile``: a ``torch.ops.nki.call`` node (see :mod:`torch_ops.traced`).

The launch itself is not differentiable: the operators in
:mod:`torch_ops.functions` and :mod:`torch_ops.library` add the backward.
"""

from __future__ import annotations

import torch

from nki_kernels import backend as kernel_backend
from nki_kernels.simulator.launch import (Launch, ShapeDtype, eval_shape, normalize_grid, register_array_dispatch,
                                          simulate_into, split_arguments)

from . import backend
from .convert import from_numpy, numpy_dtype, to_numpy, torch_dtype


def _map(out, fn):
    """Apply ``fn`` to a kernel result (one array or a tuple of them), keeping the structure."""
    if isinstance(out, (tuple, list)) and not isinstance(out, ShapeDtype):
        return tuple(fn(o) for o in out)
    return fn(out)


def _check_tensors(kernel, tensors) -> torch.device:
    if not tensors:
        raise ValueError(f"nki_call({kernel!r}) needs at least one tensor argument")
    name = getattr(getattr(kernel, "func", kernel), "__qualname__", repr(kernel))
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: tensor argument {i} is a {type(t).__name__}; pass tensors "
                            "positionally and static (non-tensor) arguments as keywords")
    device = tensors[0].device
    for i, t in enumerate(tensors[1:], 1):
        if t.device != device:
            raise ValueError(f"{name}: tensor argument 0 is on {device} but argument {i} is on {t.device}; "
                             "all tensor arguments must be on the same device")
    return device


def simulate_cpu(kernel, grid, tensors, static):
    """Run the simulator on CPU tensors in place of their memory; returns CPU tensors (the
    simulator allocates their outputs without the NaN fill while the ``uninit`` check is an error)."""
    out = simulate_into((), kernel, grid, *(to_numpy(t) for t in tensors), **static)
    return _map(out, from_numpy)


def meta_results(kernel, grid, tensors, static, device):
    """Empty tensors with the kernel's result shapes and dtypes on ``device``."""
    specs = eval_shape(kernel, grid, *operand_specs(tensors), **static)
    return _map(specs, lambda s: torch.empty(tuple(s.shape), dtype=torch_dtype(s.dtype), device=device))


def operand_specs(tensors) -> list:
    """``ShapeDtype`` (shape, NumPy dtype) of each tensor, as ``eval_shape`` and the payload want them."""
    return [ShapeDtype(tuple(t.shape), numpy_dtype(t.dtype)) for t in tensors]


def nki_call(kernel, *tensors, grid=(), **static):
    """Launch ``kernel`` over ``grid`` on torch ``tensors``; returns a tensor or a tuple of them.

    ``kernel`` is an ``@nki.jit`` kernel (or ``kernel[grid]``). Tensors are passed
    positionally in the order of the kernel's parameters, static arguments as
    keywords. Results are on the inputs' device. Not differentiable.
    """
    if isinstance(kernel, (Launch, kernel_backend.GenuineLaunch)):
        grid = grid or kernel.grid
        kernel = kernel.kernel
    grid = normalize_grid(grid)
    device = _check_tensors(kernel, tensors)
    path = backend.route(kernel, device)  # the one decision: simulator or the Neuron SDK's entry point
    if path in backend.OFFICIAL:
        return backend.official_launch(path, kernel, grid, tensors, static)
    if path == "twin":  # a genuine kernel on tensors that never reach a NeuronDevice
        kernel = kernel_backend.simulator_twin(kernel)
    if path == "host":  # our payload never reaches the Neuron compiler
        return _round_trip(kernel, grid, tensors, static, device)
    if device.type == "meta":  # shapes only (fake kernels run launches on meta tensors, also while compiling)
        return meta_results(kernel, grid, tensors, static, device)
    if torch.compiler.is_compiling():
        from .traced import traced_launch

        return traced_launch(kernel, grid, tensors, static)
    if device.type == "cpu":
        return simulate_cpu(kernel, grid, tensors, static)
    if device.type == "xla":
        from .xla import xla_call

        return xla_call(kernel, grid, tensors, static)
    return _round_trip(kernel, grid, tensors, static, device)


def _round_trip(kernel, grid, tensors, static, device):
    """Run the simulator on CPU copies of ``tensors`` and move the results back to ``device``."""
    out = simulate_cpu(kernel, grid, [t.cpu() for t in tensors], static)
    return _map(out, lambda o: o.to(device))


def _take_launch(launch, args, kwargs):
    """``kernel[grid](*tensors)``: the launch as :func:`nki_call` (registered with the simulator)."""
    tensors, static = split_arguments(launch, args, kwargs)
    return nki_call(launch.kernel, *tensors, grid=launch.grid, **static)


register_array_dispatch(lambda v: isinstance(v, torch.Tensor), _take_launch)
