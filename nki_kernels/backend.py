"""Where ``nki``, ``nl`` and ``nisa`` come from: the genuine ``neuronxcc.nki`` when it
imports (on a Trainium/Inferentia host with the Neuron SDK), else the NumPy simulator.

Kernels import them from here so the same source runs on hardware and in the
simulator::

    from nki_kernels.backend import nki, nl, nisa
"""

from __future__ import annotations

from .simulator.install import genuine_neuronxcc

GENUINE = genuine_neuronxcc()

if GENUINE:  # pragma: no cover - needs the Neuron SDK
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
else:
    from .simulator import isa as nisa
    from .simulator import language as nl
    from .simulator import nki

__all__ = ["GENUINE", "nki", "nl", "nisa"]
