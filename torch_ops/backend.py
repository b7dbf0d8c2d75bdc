"""Which path a torch launch takes: the simulator, or the Neuron SDK's own entry point for the tensors' device.

:func:`route` is the one decision (``torch_ops.nki_call`` asks it before anything else):

- ``"simulator"``: a simulator kernel on CPU / meta / a non-Neuron XLA device;
- ``"host"``: a simulator kernel on a NeuronDevice (Neuron XLA device or TorchNeuron's
  ``neuron`` device): run by the simulator through a host round trip, so our payload
  never reaches the Neuron compiler;
- ``"twin"``: a genuine kernel on CPU / meta tensors, which never reach a NeuronDevice:
  its simulator twin (same source, simulator ``nki``) runs;
- ``"xla"``: a genuine kernel on torch-xla tensors: the genuine ``nki.jit``
  (``kernel[grid](*tensors, **static)``, what ``torch_neuronx`` documents);
- ``"nki_op"``: a genuine kernel on TorchNeuron's native ``neuron`` device: the launch
  registered once per (kernel, grid, static values) with ``torch_neuronx.nki_op``
  (SDK 2.33+) and called as that custom op;
- ``"direct"``: a genuine kernel on any other device: the genuine ``nki.jit`` decides.

Detection is :func:`nki_kernels.neuron_environment` (once, at import: the probes
import modules, which ``torch.compile`` cannot trace).
"""

from __future__ import annotations

import functools
import hashlib
import inspect

import torch

from nki_kernels import backend as kernels
from nki_kernels.neuron_env import neuron_environment
from nki_kernels.simulator.launch import eval_shape

from .convert import operand_specs

_ENV = neuron_environment()
OFFICIAL = ("xla", "nki_op", "direct")


def genuine_neuron() -> bool:
    """True when our kernels are the Neuron SDK's and a torch Neuron device (XLA or native) is present."""
    return _ENV.genuine and (_ENV.torch_xla_neuron or _ENV.torch_neuron_device)


def route(kernel, device) -> str:
    """The path (see the module docstring) of a launch of ``kernel`` on tensors on ``device``."""
    neuron_device = (device.type == "xla" and _ENV.torch_xla_neuron) or \
        (device.type == "neuron" and _ENV.torch_neuron_device)
    if not kernels.is_genuine_kernel(kernel):
        return "host" if neuron_device else "simulator"
    if device.type in ("cpu", "meta"):
        return "twin"
    if device.type == "xla":
        return "xla" if neuron_device else "twin"
    if device.type == "neuron" and _ENV.torch_neuron_device:
        return "nki_op"
    return "direct"


def official_launch(path: str, kernel, grid: tuple, tensors, static: dict):
    """Launch a genuine kernel by ``path`` (one of :data:`OFFICIAL`); returns its tensor(s)."""
    if path == "nki_op":
        return registered_op(kernel, grid, tensors, static)(*tensors)
    return kernels.genuine_call(kernel, grid, tensors, static)


def _frozen(value):
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def registered_op(kernel, grid: tuple, tensors, static: dict):
    """The ``torch_neuronx.nki_op`` custom op launching ``kernel[grid]`` with ``static`` on len(tensors) tensors."""
    out = eval_shape(kernels.simulator_twin(kernel), grid, *operand_specs(tensors), **static)
    n_out = len(out) if isinstance(out, tuple) and not hasattr(out, "_fields") else 0
    return _registered(kernel, tuple(grid), tuple(sorted((k, _frozen(v)) for k, v in static.items())),
                       len(tensors), n_out)


@functools.lru_cache(maxsize=None)
def _registered(kernel, grid, static_items, n_in, n_out):
    """One ``@nki_op`` registration per launch configuration (``n_out`` 0 = a single tensor result)."""
    from torch_neuronx import nki_op

    static = dict(static_items)
    func = kernels.kernel_function(kernel)
    label = f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', kernel)}|{grid}|{static_items}"
    name = f"nki_ops::{getattr(func, '__name__', 'kernel')}_{hashlib.sha1(label.encode()).hexdigest()[:12]}"

    def launch(*tensors):
        out = kernels.genuine_call(kernel, grid, tensors, static)
        return tuple(out) if n_out else out

    # nki_op, like torch.library.custom_op, reads the schema from the annotated signature.
    params = [inspect.Parameter(f"t{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor)
              for i in range(n_in)]
    result = tuple.__class_getitem__((torch.Tensor,) * n_out) if n_out else torch.Tensor
    launch.__signature__ = inspect.Signature(params, return_annotation=result)
    launch.__annotations__ = {**{p.name: torch.Tensor for p in params}, "return": result}
    launch.__name__ = launch.__qualname__ = name.split("::")[1]
    return nki_op(name, mutates_args=())(launch)
