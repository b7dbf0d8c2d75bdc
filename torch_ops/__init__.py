"""nki-ops for PyTorch: NKI kernels as autograd Functions, ``torch.library`` ops and modules.

- ``NkiAddFunc``, ``NkiRMSNormFunc``: ``torch.autograd.Function``s (eager).
- ``add(a, b)``, ``rms_norm(x, weight, eps=1e-6)``: differentiable and
  ``torch.compile``-able (``torch.ops.nki.tensor_add``, ``torch.ops.nki.rms_norm``
  and their ``_backward`` ops), declared once with ``nki_kernels.op``; any op
  declared that way is a ``torch.library`` op too (:mod:`torch_ops.op_builder`).
- ``RMSNorm``: drop-in for ``torch.nn.RMSNorm``.
- the kernel library (:mod:`torch_ops.library_modules`): ``softmax``, ``cross_entropy``,
  ``residual_rms_norm``, ``flash_attention`` with torch's conventions, and the
  ``Softmax`` / ``CrossEntropyLoss`` modules.
- ``nki_call(kernel, *tensors, grid=..., **static)``: launch any ``@nki.jit``
  kernel on torch tensors (what ``kernel[grid](tensor, ...)`` does); inside
  ``torch.compile`` each launch is one ``torch.ops.nki.call`` node.
- ``neuron_hlo(tensors)``: the HLO text of an XLA graph as the Neuron compiler
  would receive it, with the ``AwsNeuronCustomNativeKernel`` custom-calls.

CPU tensors run on the NKI simulator; XLA tensors become custom-calls (see
:mod:`torch_ops.xla`); with the genuine ``torch_neuronx``/``neuronxcc`` the
official ``nki.jit`` path is used.

A launch goes down one way: ``dispatch`` (``nki_call``) > ``traced`` (the
``torch.compile`` recording) > ``library`` (the ``nki::call`` op) > ``launcher``
(route and device) > ``backend`` / ``xla`` > ``debug`` > ``xla_graph``
(``neuron_hlo``) > ``hlo_view``; ``convert`` is below all of them. The
recording is handed to the launcher by ``dispatch``, since the op it records
launches through the launcher again.
"""

from __future__ import annotations

from .backend import genuine_neuron
from . import op_builder as _op_builder  # noqa: F401 - registers nki_kernels.op's torch side
from .dispatch import nki_call
from .functional import add, rms_norm
from .functions import NkiAddFunc, NkiRMSNormFunc
from .modules import RMSNorm
from .library_modules import (CrossEntropyLoss, Softmax, cross_entropy, flash_attention, residual_rms_norm,
                              softmax)
from .xla_graph import neuron_hlo

__all__ = ["softmax", "cross_entropy", "residual_rms_norm", "flash_attention", "Softmax", "CrossEntropyLoss",
           "NkiAddFunc", "NkiRMSNormFunc", "RMSNorm", "add", "rms_norm", "nki_call", "neuron_hlo",
           "genuine_neuron"]
