"""``nki_call``: launch an ``@nki.jit`` kernel on torch tensors, wherever they live.

This is what ``kernel[grid](*tensors)`` does when called with torch tensors. The
device of the tensors picks the executor (:func:`torch_ops.launcher.launch`):

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

from nki_kernels.simulator.launch import register_array_dispatch, split_arguments

from . import launcher
from .convert import operand_specs  # noqa: F401 - public here too
from .launcher import meta_results, simulate_cpu  # noqa: F401 - public here too
from .traced import traced_launch


def nki_call(kernel, *tensors, grid=(), **static):
    """Launch ``kernel`` over ``grid`` on torch ``tensors``; returns a tensor or a tuple of them.

    ``kernel`` is an ``@nki.jit`` kernel (or ``kernel[grid]``). Tensors are passed
    positionally in the order of the kernel's parameters, static arguments as
    keywords. Results are on the inputs' device. Not differentiable.
    """
    return launcher.launch(kernel, tensors, grid, static, record=traced_launch)


def _take_launch(launch, args, kwargs):
    """``kernel[grid](*tensors)``: the launch as :func:`nki_call` (registered with the simulator)."""
    tensors, static = split_arguments(launch, args, kwargs)
    return nki_call(launch.kernel, *tensors, grid=launch.grid, **static)


register_array_dispatch(lambda v: isinstance(v, torch.Tensor), _take_launch)
