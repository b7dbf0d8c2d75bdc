"""JAX integration of nki-ops: NKI kernels as jit-able, differentiable, vmappable, shardable ops.

- :func:`nki_call`: any ``@nki.jit`` kernel as a JAX primitive. It lowers to the
  ``AwsNeuronCustomNativeKernel`` custom-call whose ``backend_config`` is the
  payload of :mod:`nki_kernels.custom_call`; on CPU an XLA custom-call target
  runs it on the simulator, on GPU a host callback does. Calling a kernel
  with JAX arrays (``kernel[grid](a, b)``) ends up here too. When the genuine
  ``jax_neuronx`` imports and the kernel is a genuine ``neuronxcc`` one, the
  call is handed to it.
- :func:`add`, :func:`rms_norm`: ``jax.custom_vjp`` operators on the NKI kernels,
  whose vmap folds the batch into kernel rows and whose sharding follows the
  input (``custom_partitioning``; the weight gradient is ``psum``-reduced).
- :func:`neuron_hlo`: the compiled HLO text of a function, without running it.
  With ``NEURON_FRAMEWORK_DEBUG=1`` every compiled module that holds an NKI
  call is also written to ``<module>.<hash>.pbtxt`` in the working directory.

Module map: ``primitive`` (nki_call, abstract eval, generic vmap), ``lowering``
(custom-call / host callback), ``cpu_target`` (the ctypes XLA:CPU target),
``sharding`` (outer-primitive + custom_partitioning plumbing), ``rmsnorm_prims``
and ``add_prims`` (the ops' primitives), ``ops`` (the custom_vjp functions),
``debug`` (HLO text and dumps), ``genuine`` (the real jax_neuronx, if any).
"""

from . import debug as _debug
from . import lowering as _lowering  # noqa: F401 - registers the lowerings and the CPU target
from .debug import neuron_hlo
from .ops import add, rms_norm
from .primitive import nki_call, nki_call_p

_debug.install()

__all__ = ["add", "neuron_hlo", "nki_call", "nki_call_p", "rms_norm"]
