"""One launch of an ``@nki.jit`` kernel on torch tensors, by the route and then the tensors' device.

:func:`launch` is the body of ``torch_ops.nki_call`` (:mod:`torch_ops.dispatch`) and
what the ``nki::call`` op runs (:mod:`torch_ops.library`). The op is what a launch
records while ``torch.compile`` traces, so the recording is handed in by the caller
(``record``) rather than imported here: this module sits below the op.
"""

from __future__ import annotations

import torch

from nki_kernels import backend as kernel_backend
from nki_kernels.simulator.launch import Launch, ShapeDtype, eval_shape, normalize_grid, simulate_into

from . import backend
from .convert import from_numpy, operand_specs, to_numpy, torch_dtype
from .xla import xla_call


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


def launch(kernel, tensors, grid, static: dict, record=None):
    """Launch ``kernel`` over ``grid`` on torch ``tensors`` with ``static`` keywords; a tensor or a tuple.

    ``kernel`` is an ``@nki.jit`` kernel (or ``kernel[grid]``; an empty ``grid`` then
    takes its grid). ``record(kernel, grid, tensors, static)`` puts the launch into
    the graph ``torch.compile`` is tracing; without it the launch runs at once even
    while compiling (the ``nki::call`` op's implementation passes none: it only runs
    on real tensors, never under Dynamo).
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
    if record is not None and torch.compiler.is_compiling():
        return record(kernel, grid, tensors, static)
    if device.type == "cpu":
        return simulate_cpu(kernel, grid, tensors, static)
    if device.type == "xla":
        return xla_call(kernel, grid, tensors, static)
    return _round_trip(kernel, grid, tensors, static, device)


def _round_trip(kernel, grid, tensors, static, device):
    """Run the simulator on CPU copies of ``tensors`` and move the results back to ``device``."""
    out = simulate_cpu(kernel, grid, [t.cpu() for t in tensors], static)
    return _map(out, lambda o: o.to(device))
