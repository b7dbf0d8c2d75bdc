"""Whether the genuine Neuron stack (``torch_neuronx`` + ``neuronxcc``) is importable.

On a Trainium/Inferentia host it is, and kernel launches with torch tensors go
through the official ``nki.jit`` path. The packages of those names on the public
index are placeholders whose import raises, so a failing import of any kind
means "not genuine", never an error.
"""

from __future__ import annotations

import importlib

def _imports(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - placeholders raise ImportError("WRONG PACKAGE ...") or worse
        return False
    return True


def _detect() -> bool:
    from nki_kernels.simulator.install import genuine_neuronxcc

    return _imports("torch_neuronx") and genuine_neuronxcc()


# Decided once, at import: the check imports modules, which torch.compile cannot trace.
_GENUINE = _detect()


def genuine_neuron() -> bool:
    """True when the genuine ``torch_neuronx`` and ``neuronxcc.nki`` both import."""
    return _GENUINE


def official_launch(kernel, tensors, grid, static):  # pragma: no cover - needs the Neuron SDK
    """Launch through the official ``neuronxcc.nki.jit``, which handles torch tensors itself."""
    import neuronxcc.nki as nki

    from nki_kernels.simulator.launch import Kernel

    if isinstance(kernel, Kernel):  # a kernel decorated by the simulator: re-decorate its function
        kernel = nki.jit(kernel.func)
    return kernel[grid](*tensors, **static) if grid else kernel(*tensors, **static)
