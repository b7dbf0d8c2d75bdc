"""JAX integration of nki-ops: NKI kernels as jit-able, differentiable, vmappable, shardable ops.

- :func:`nki_call`: any ``@nki.jit`` kernel as a JAX primitive; it lowers to the
  ``AwsNeuronCustomNativeKernel`` custom-call (run by the simulator on CPU).
- :func:`add`, :func:`rms_norm`: ``jax.custom_vjp`` operators on the NKI kernels,
  with folding vmap rules and ``custom_partitioning`` sharding.
- :func:`neuron_hlo`: the compiled HLO text of a function, without running it;
  ``NEURON_FRAMEWORK_DEBUG=1`` writes it to ``*.pbtxt`` for every compiled
  module that holds an NKI call.
"""

from . import debug as _debug
from . import lowering as _lowering  # noqa: F401 - registers the lowerings and the CPU target
from .debug import neuron_hlo
from .ops import add, rms_norm
from .primitive import nki_call, nki_call_p

_debug.install()

__all__ = ["add", "neuron_hlo", "nki_call", "nki_call_p", "rms_norm"]
