"""``nki.compiler`` of the standalone package: the allocation API and kernel decorators it shares with the
first generation's ``neuronxcc.nki.compiler`` (:mod:`nki_kernels.simulator.compiler`), and NKI 0.7.0's
per-kernel configuration, ``CompileConfig`` / ``SpecializationConfig`` / ``AddressRotation``
(https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.compiler.html;
:mod:`nki_kernels.simulator.compile_config`), which the first generation's namespace does not list.
"""

from ..compile_config import AddressRotation, CompileConfig, SpecializationConfig
from ..compiler import *  # noqa: F403 - the shared names
from ..compiler import __all__ as _shared

__all__ = [*_shared, "AddressRotation", "CompileConfig", "SpecializationConfig"]
