"""The simulator's standalone ``nki`` package (``import nki``), listing the current API only:
``jit``, ``simulate`` and the submodules ``language``, ``isa`` (with ``isa.constants``),
``dtype``, ``tensor`` (also ``meta.tensor``), ``typing``, ``compiler`` (and ``collectives`` where the simulator has it).

Kernels of this API generation declare their tensors (``nl.ndarray(shape, dtype,
buffer=nl.sbuf)``), address them through views and access patterns
(:mod:`~nki_kernels.simulator.access_pattern`), and ISA ops write into them
(``nisa.nc_matmul(dst=psum_tile, stationary=x, moving=y)``). ``jit`` is the
simulator's :class:`~nki_kernels.simulator.launch.Kernel`: called on NumPy arrays
it runs the simulator, on JAX / torch tensors it goes through ``jax_ops`` /
``torch_ops``; ``nki.simulate(kernel)`` always simulates. The first
generation's ``baremetal`` / ``benchmark`` / ``profile`` / ``simulate_kernel``
are not part of this package (they stay in ``neuronxcc.nki``).
:func:`nki_kernels.simulator.install` registers this package as ``nki`` when the
genuine one does not import.
"""

import importlib as _importlib

from .. import compile_config as _compile_config
from .. import launch as _launch
from ..nki import typing
from . import constants as _constants
from . import compiler, dtype, isa, language, meta, tensor
from .simulate import simulate

__nki_ops_simulator__ = True


def jit(fn=None, *, compile_config=None, specialization_config=None, **options):
    """Decorate a kernel of the standalone API (``@nki.jit`` / ``@nki.jit(mode=...)``, the page's
    ``jit(fn=None, *, compile_config=None, specialization_config=None, **kwargs)``, Neuron 2.33): here
    ``kernel[n]`` names the number of logical cores (``kernel[2]`` is LNC=2), not an SPMD grid.
    ``compile_config`` / ``specialization_config``: an ``nki.compiler.CompileConfig`` /
    ``SpecializationConfig`` (see :mod:`nki_kernels.simulator.compile_config`)."""
    _compile_config.check_jit_arguments(compile_config, specialization_config)
    return _launch.jit(fn, lnc_brackets=True, compile_config=compile_config,
                       specialization_config=specialization_config, **options)

# nki.isa.constants and nki.language.dtypes are modules of the official layout; the objects
# are shared with nki.isa / nki.language.
isa.constants = _constants
language.dtypes = dtype
# nki.language holds exactly its documented names (the implementation module keeps its imports).
language = _importlib.import_module("..install", __package__).namespace(language, "nki.language", ("dtypes",))
del constants  # noqa: F821 - bound by the submodule import; the public name is nki.isa.constants

__all__ = ["compiler", "dtype", "isa", "jit", "language", "meta", "simulate", "tensor", "typing"]

# Modules other parts of the simulator provide as they land (nki.collectives).
for _name, _module in (("collectives", "..collectives"),):
    try:
        globals()[_name] = _importlib.import_module(_module, __name__)
        __all__.append(_name)
    except ModuleNotFoundError as _err:
        if _err.name != __name__.rpartition(".")[0] + _module[1:]:
            raise
