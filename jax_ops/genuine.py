"""The genuine AWS ``jax_neuronx`` when it imports (a Neuron SDK host), else nothing.

The packages of that name on the public index are placeholders whose import
raises ``ImportError``; the real one comes from the Neuron repository. When it
is present and the kernel is a genuine ``neuronxcc`` kernel (not one of the
simulator's), ``nki_call`` defers to it so the Neuron compiler gets the
official payload rather than ours.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def jax_neuronx():
    """The genuine ``jax_neuronx`` module, or None."""
    try:
        import jax_neuronx as mod  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - placeholders raise ImportError, broken installs anything
        return None
    return mod if hasattr(mod, "nki_call") else None


def defer(kernel):
    """The genuine ``jax_neuronx`` if ``kernel`` should go to it, else None."""
    from nki_kernels.simulator import is_kernel

    if is_kernel(kernel):
        return None  # a simulator kernel means no Neuron compiler to hand it to
    return jax_neuronx()
