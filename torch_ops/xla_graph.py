"""The lazy torch-xla graph as the Neuron compiler would receive it: :func:`neuron_hlo`.

Off Neuron each kernel result is a shim around the simulator's values
(:mod:`torch_ops.xla`); the launch records here which uploaded tensors hold
simulator results (:func:`remember_simulated`), so that :func:`neuron_hlo`
removes only true shims (:func:`torch_ops.hlo_view.neuron_view`). Both the launch
(:mod:`torch_ops.xla`) and the step dump (:mod:`torch_ops.debug`) read the graph
through this module, which imports neither.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from .hlo_view import neuron_view

# XLA tensor ids of the uploaded simulator results.
# Bounded: a graph between two steps never holds anywhere near this many launches.
_SIM_IDS: OrderedDict = OrderedDict()
_SIM_IDS_MAX = 1 << 16


def xlac():
    """``torch_xla._XLAC``, the bindings every XLA-side function here uses (torch-xla is optional)."""
    import torch_xla

    return torch_xla._XLAC


def remember_simulated(sim: torch.Tensor) -> None:
    """Record the XLA tensor ``sim`` as an uploaded simulator result (see :func:`neuron_hlo`)."""
    _SIM_IDS[xlac()._xla_get_tensor_id(sim)] = None
    if len(_SIM_IDS) > _SIM_IDS_MAX:
        _SIM_IDS.popitem(last=False)


def neuron_hlo(tensors) -> str:
    """HLO text of the lazy graph computing ``tensors`` as the Neuron compiler would receive it; needs torch-xla.

    Every NKI launch appears as ``custom-call(...), custom_call_target="AwsNeuronCustomNativeKernel",
    backend_config="<payload>"`` consuming its operands' producers and consumed
    by the later ops; the simulator shims used off Neuron are removed.
    """
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    X = xlac()
    tensors = list(tensors)
    text = X._get_xla_tensors_hlo(tensors)
    # The graph's device data in parameter order, each with the id of the tensor it came from.
    ids, _ = X._get_tensors_xla_device_data_node(tensors)
    return neuron_view(text, {n for n, i in enumerate(ids) if i in _SIM_IDS})
