"""Register the simulator as ``neuronxcc.nki`` when the genuine package does not import."""

from __future__ import annotations

import importlib
import sys
import types


def genuine_neuronxcc() -> bool:
    """True when a real ``neuronxcc.nki`` imports (the public-index placeholder raises ImportError)."""
    mod = sys.modules.get("neuronxcc")
    if mod is not None and getattr(mod, "__nki_ops_simulator__", False):
        return False
    try:
        importlib.import_module("neuronxcc.nki")
    except Exception:  # noqa: BLE001 - placeholder packages raise ImportError or worse
        return False
    return True


def install() -> bool:
    """Make ``import neuronxcc.nki`` (and ``.language``, ``.isa``, ``.typing``) load the simulator.

    Does nothing when the genuine package imports. Returns True when the
    simulator is (now) installed. Calling it twice is harmless.
    """
    if genuine_neuronxcc():
        return False
    from . import nki as sim_nki
    from . import isa, language

    root = types.ModuleType("neuronxcc")
    root.__nki_ops_simulator__ = True
    root.__path__ = []  # a package, so submodule imports resolve through sys.modules
    root.nki = sim_nki
    mods = {
        "neuronxcc": root,
        "neuronxcc.nki": sim_nki,
        "neuronxcc.nki.language": language,
        "neuronxcc.nki.isa": isa,
        "neuronxcc.nki.typing": sim_nki.typing,
    }
    for name in list(sys.modules):
        if name == "neuronxcc" or name.startswith("neuronxcc."):
            del sys.modules[name]
    sys.modules.update(mods)
    return True
