"""Stand-in ``neuronxcc.nki``: ``jit`` records each launch (``kernel[grid]`` is the SPMD grid)."""
from standin_log import jit_for


jit = jit_for("neuronxcc.nki.jit")

# after jit: nki_kernels, imported by the leaf modules, probes this package for nki.jit
from . import isa, language  # noqa: F401
