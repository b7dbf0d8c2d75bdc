"""``nki.isa.constants``: the ISA's configuration enums, importable as a module
(``from nki.isa.constants import oob_mode, dge_mode``), as kernel libraries do.

They are the very objects ``nki.isa`` exposes (``nisa.oob_mode is
nki.isa.constants.oob_mode``), defined with the simulated target in
:mod:`nki_kernels.simulator.instructions.target`.
"""

from ..instructions.target import (dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode,  # noqa: F401
                                   reduce_cmd)

__all__ = ["dge_mode", "dma_engine", "engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd"]
