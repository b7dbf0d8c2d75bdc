"""JAX integration of nki-ops: NKI kernels as jit-able, differentiable, vmappable, shardable ops.

- :func:`nki_call`: any ``@nki.jit`` kernel as a JAX primitive. It lowers to the
  ``AwsNeuronCustomNativeKernel`` custom-call whose ``backend_config`` is the
  payload of :mod:`nki_kernels.custom_call`; on CPU an XLA custom-call target
  runs it on the simulator, on GPU a host callback does. Calling a kernel
  with JAX arrays (``kernel[grid](a, b)``) ends up here too. A genuine Neuron
  kernel goes to its SDK's entry point instead (:func:`jax_ops.genuine.launch`).
- :func:`add`, :func:`rms_norm`: the ops declared with :func:`nki_kernels.op`
  (``custom_vjp``; vmap folds the batch into kernel rows; sharding follows the
  input's rows through ``custom_partitioning``; the weight gradient is ``psum``-reduced).
  Any op declared with ``nki_kernels.op`` gets the same on JAX arrays.
- :func:`neuron_hlo`: the compiled HLO text of a function, without running it.
  With ``NEURON_FRAMEWORK_DEBUG=1`` every compiled module that holds an NKI
  call is also written to ``<module>.<hash>.pbtxt`` in the working directory.

Module map: ``primitive`` (nki_call, abstract eval, generic vmap), ``lowering``
(custom-call / host callback), ``cpu_target`` (the ctypes XLA:CPU target),
``sharding`` (outer-primitive + custom_partitioning plumbing), ``op_builder``
(the JAX side of ``nki_kernels.op``), ``ops`` (checked ``add`` / ``rms_norm``),
``debug`` (HLO text and dumps), ``neuron_sdk`` (the Neuron SDK's entry point of
each era, and the route a kernel takes), ``genuine`` (the one decision point:
simulator or the Neuron SDK's entry point). Imports go one way, top to bottom:
``genuine`` > ``primitive`` > ``neuron_sdk``.
"""

from . import debug as _debug
from . import genuine  # noqa: F401 - jax_ops.genuine.launch, the documented launch of any kernel
from . import lowering as _lowering  # noqa: F401 - registers the lowerings and the CPU target
from . import op_builder as _op_builder  # noqa: F401 - registers nki_kernels.op's JAX side
from .debug import neuron_hlo
from .ops import add, rms_norm
from nki_kernels.library.ops import cross_entropy, flash_attention, residual_rms_norm, softmax  # noqa: E402
from .primitive import nki_call, nki_call_p

_debug.install()

__all__ = ["softmax", "cross_entropy", "residual_rms_norm", "flash_attention", "add", "neuron_hlo", "nki_call", "nki_call_p", "rms_norm"]
