"""Engine-level timing model of a NeuronCore (issue 31): documented hardware facts
(:mod:`.hardware`), per-instruction costs (:mod:`.costs`), a compiler-like schedule
(:mod:`.model`) and its report (:mod:`.report`).

A pure layer: it imports only the standard library (and matplotlib for the optional PNG), nothing
from the rest of the simulator, so the instruction registry can feed it from below. See
``docs/timing_model.md``.
"""

from .hardware import COMPUTE, VERSIONS, Fact, NeuronCore, core
from .model import DmaStats, Instr, Operand, Result, Scheduler, engine_name, simulate

__all__ = [
           "COMPUTE",
           "VERSIONS",
           "DmaStats",
           "Fact",
           "Instr",
           "NeuronCore",
           "Operand",
           "Result",
           "Scheduler",
           "core",
           "engine_name",
           "simulate",
]
