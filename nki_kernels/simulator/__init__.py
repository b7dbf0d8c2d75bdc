"""A NumPy simulator of the AWS Neuron NKI language (``neuronxcc.nki``).

``from nki_kernels.simulator import nki`` gives ``nki.jit``, ``nki.language``
(``nl``) and ``nki.isa`` (``nisa``); :func:`install` registers them as
``neuronxcc.nki`` so unmodified official kernels run. Rule violations raise
:class:`NKIError`.
"""

from . import isa, language  # noqa: F401
from . import nki  # noqa: F401
from . import standalone  # noqa: F401 - the standalone `nki` package's API (dst= ISA ops)
from .errors import NKIError
from .install import install
from .launch import ShapeDtype, eval_shape, is_kernel, simulate
from .profiler import profile

__all__ = ["NKIError", "ShapeDtype", "eval_shape", "install", "is_kernel", "isa", "language", "nki", "profile", "simulate", "standalone"]
