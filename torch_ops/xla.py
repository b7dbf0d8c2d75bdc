"""The torch-xla path: an ``AwsNeuronCustomNativeKernel`` custom-call per kernel launch.

Emission. ``xla_call`` builds the same ``backend_config`` payload as the JAX
side (:mod:`nki_kernels.custom_call`), with result shapes from
``eval_shape``, and puts the custom-call into the lazy graph with
``torch_xla._XLAC._xla_custom_call`` (``api_version=0``, i.e.
``API_VERSION_UNSPECIFIED``, as torch-neuronx emits it). On a Neuron device the
custom-call *is* the result: the Neuron compiler replaces it with the kernel.

Fallback on other XLA devices (``PJRT_DEVICE=CPU`` here). XLA:CPU cannot run
the custom-call, and torch-xla cannot register a CPU target for it, so the
values come from the simulator, and the graph is arranged so that the
custom-call stays where Neuron would see it but is never executed:

1. The operands are read to the host with ``_xla_get_cpu_tensors``, which
   runs their pending graph *without* replacing their lazy IR by device data,
   so the user's graph is left as it was.
2. The custom-call is emitted on the operands' lazy IR (upstream producers
   included) and the simulator runs the launch from the decoded payload
   (``run_payload``: the payload alone is enough, exactly as on the JAX side).
3. Each result is the *shim* ``narrow_copy(cat([sim, cc], 0), 0, 0, n)`` where ``sim`` is the
   simulator's result uploaded as device data (for bf16/fp8 the concatenate
   is done in float32, see :func:`_shim`). Every later op the user
   records consumes the shim, so the graph keeps its real shape. When torch-xla
   compiles it, XLA's simplifier folds ``slice(concatenate(sim, cc))`` to
   ``sim`` and dead-code elimination drops the custom-call before code
   generation: XLA:CPU executes with the simulator's values.
4. :func:`neuron_hlo` (:mod:`torch_ops.xla_graph`) prints the lazy graph's HLO and removes the
   shims (:func:`torch_ops.hlo_view.neuron_view`), giving the graph as the Neuron
   compiler would receive it: parameters, upstream ops, the custom-call with
   its payload, and the downstream ops consuming its result.

The cost of the fallback: each launch executes its operands' pending graph
once more on XLA:CPU (the step executes it again), plus one host round trip.
"""

from __future__ import annotations

import os

import torch

from nki_kernels.custom_call import TARGET, decode_payload, encode_payload, register_kernel, run_payload
from nki_kernels.simulator.launch import ShapeDtype, eval_shape

from . import debug
from .convert import from_numpy, operand_specs, to_numpy, torch_dtype
from .xla_graph import neuron_hlo, remember_simulated, xlac  # noqa: F401 - neuron_hlo: torch_ops.xla.neuron_hlo too

API_VERSION_UNSPECIFIED = 0  # what torch-neuronx emits for NKI kernels


def is_neuron_device(t: torch.Tensor) -> bool:
    """True when ``t`` lives on a Neuron XLA device (where the custom-call can run)."""
    return xlac()._xla_get_device_hw_type(t) == "NEURON"


def launch_payload(kernel, grid, tensors, static):
    """``(payload, results, is_tuple)`` of one launch: the backend_config string, the result
    ``(shape, dtype)`` list, and whether the kernel returns a tuple."""
    operands = operand_specs(tensors)
    out = eval_shape(kernel, grid, *operands, **static)
    single = isinstance(out, ShapeDtype)  # a namedtuple: test it before "is a tuple of results"
    results = [(tuple(r.shape), r.dtype) for r in ((out,) if single else out)]
    return encode_payload(kernel, grid, static, operands, results), results, not single


def emit_custom_call(tensors, payload: str, results) -> list:
    """The ``AwsNeuronCustomNativeKernel`` custom-call on XLA ``tensors``; one lazy tensor per result."""
    return xlac()._xla_custom_call(list(tensors), TARGET, [list(s) for s, _ in results],
                                   [torch_dtype(d) for _, d in results], False, payload,
                                   API_VERSION_UNSPECIFIED, {})


# XLA:CPU computes these in float32 and wraps a concatenate/slice of them in
# converts, which hides the slice-of-concatenate from the simplifier; their shim
# is built in float32 instead (every value of theirs is exact in float32).
_WIDEN = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def _shim(sim: torch.Tensor, cc: torch.Tensor) -> torch.Tensor:
    """A tensor valued ``sim`` whose graph still contains ``cc`` (folded away by XLA, see module doc).

    ``sim`` is the simulator's result on the host. The shim is
    ``narrow_copy(cat([sim, cc], 0), 0, 0, n)``, or for bf16/fp8
    ``narrow_copy(cat([sim.float(), cc.float()], 0), 0, 0, n).to(dtype)``.
    ``narrow_copy``, not a view: a view would keep the whole concatenate alive
    as its base, and torch-xla would then sync that base, custom-call
    included, at the next step.
    """
    device = cc.device
    if sim.dim() == 0:  # NKI results are at least 1-D; nothing to splice for a scalar
        return sim.to(device)
    if sim.dtype in _WIDEN:
        sim_d = sim.float().to(device)
        remember_simulated(sim_d)
        return torch.narrow_copy(torch.cat([sim_d, cc.float()], 0), 0, 0, sim.shape[0]).to(sim.dtype)
    sim_d = sim.to(device)
    remember_simulated(sim_d)
    return torch.narrow_copy(torch.cat([sim_d, cc], 0), 0, 0, sim.shape[0])


def xla_call(kernel, grid, tensors, static):
    """Launch ``kernel`` on XLA ``tensors``: the custom-call, valued by the simulator off Neuron."""
    payload, results, is_tuple = launch_payload(kernel, grid, tensors, static)
    if is_neuron_device(tensors[0]):  # pragma: no cover - needs a Neuron device
        outs = emit_custom_call(tensors, payload, results)
    else:
        host = xlac()._xla_get_cpu_tensors(list(tensors))
        ccs = emit_custom_call(tensors, payload, results)
        register_kernel(kernel)  # so kernels defined in a local scope resolve from the payload
        sims = run_payload(decode_payload(payload), [to_numpy(h) for h in host])
        outs = [_shim(from_numpy(s), cc) for s, cc in zip(sims, ccs)]
    if os.environ.get("NEURON_FRAMEWORK_DEBUG"):
        debug.install_step_hook()
    return tuple(outs) if is_tuple else outs[0]
