"""``NEURON_FRAMEWORK_DEBUG=1``: write the step's HLO with the custom-calls as a ``.pbtxt`` into the CWD.

With torch-neuronx, the Neuron compiler writes the HLO of every graph it
compiles into the run directory. Here the graph is written at the step
boundary instead: the first time an XLA kernel launch sees the variable set,
``torch_xla._XLAC._xla_step_marker`` (what ``torch_xla.sync()`` and
``xm.mark_step()`` call) is wrapped; before each step executes, the wrapper
collects the live XLA tensors with pending computations, takes their graph as
Neuron would get it (:func:`torch_ops.xla_graph.neuron_hlo`) and, if it contains an
``AwsNeuronCustomNativeKernel`` custom-call, writes it as
``SyncTensorsGraph.<hash>.pbtxt`` (one file per distinct graph, as a compile
cache would produce). The variable is read at every step, so it can be set or
cleared while the program runs.
"""

from __future__ import annotations

import gc
import hashlib
import os
import re

import torch

from nki_kernels.custom_call import TARGET

from .xla_graph import neuron_hlo, xlac

_installed = False
_written: set = set()


def enabled() -> bool:
    """True when ``NEURON_FRAMEWORK_DEBUG`` is set to something other than 0/false/empty."""
    return os.environ.get("NEURON_FRAMEWORK_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def pending_xla_tensors() -> list:
    """Live Python-visible XLA tensors of the default device with computations still pending."""
    X = xlac()
    device = X._xla_get_default_device()
    # type(o), not isinstance: isinstance consults o.__class__, which proxies and deprecated
    # module attributes among gc's objects override (with warnings or side effects).
    tensors = [o for o in gc.get_objects()
               if issubclass(type(o), torch.Tensor) and o.device.type == "xla" and str(o.device) == device]
    if not tensors:
        return []
    pending = [t for t, p in zip(tensors, X._check_tensor_need_materialization(tensors)) if p]
    # gc order is arbitrary; creation order makes the same step give the same graph text.
    return sorted(pending, key=X._xla_get_tensor_id)


def step_graph_text(tensors) -> str | None:
    """The Neuron-view HLO of ``tensors`` named like a torch-xla step graph, or None without our custom-call."""
    if not tensors:
        return None
    text = neuron_hlo(tensors)
    if f'custom_call_target="{TARGET}"' not in text:
        return None
    return re.sub(r"\bIrToHlo\.(\d+)", r"SyncTensorsGraph.\1", text)


def dump_step(directory: str | None = None) -> str | None:
    """Write the pending step's graph as a ``.pbtxt`` if it has a custom-call; returns the path written."""
    text = step_graph_text(pending_xla_tensors())
    if text is None:
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = os.path.join(directory or os.getcwd(), f"SyncTensorsGraph.{digest}.pbtxt")
    if path not in _written or not os.path.exists(path):
        with open(path, "w") as f:
            f.write(text)
        _written.add(path)
    return path


def install_step_hook() -> None:
    """Wrap ``torch_xla._XLAC._xla_step_marker`` once so each step can be dumped (see module doc)."""
    global _installed
    if _installed:
        return
    X = xlac()
    original = X._xla_step_marker

    def step_marker(*args, **kwargs):
        if enabled():
            dump_step()
        return original(*args, **kwargs)

    step_marker.__wrapped__ = original
    X._xla_step_marker = step_marker
    _installed = True
