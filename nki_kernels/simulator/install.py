"""Register the simulator as ``neuronxcc.nki`` and as the standalone ``nki`` when the genuine packages do not import."""

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


def genuine_standalone_nki() -> bool:
    """True when a real standalone ``nki`` package imports (not the placeholder, not our facade)."""
    mod = sys.modules.get("nki")
    if mod is not None and getattr(mod, "__nki_ops_simulator__", False):
        return False
    try:
        real = importlib.import_module("nki")
        importlib.import_module("nki.language")
        importlib.import_module("nki.isa")
    except Exception:  # noqa: BLE001 - the public-index placeholder raises ImportError("WRONG PACKAGE ...")
        return False
    return not getattr(real, "__nki_ops_simulator__", False) and hasattr(real, "jit")


def _register(prefix: str, mods: dict) -> None:
    for name in list(sys.modules):
        if name == prefix or name.startswith(prefix + "."):
            del sys.modules[name]
    sys.modules.update(mods)


def install() -> bool:
    """Make ``import neuronxcc.nki`` and ``import nki`` (with ``.language``, ``.isa``, ``.typing``) load the simulator.

    Each generation is registered only when its genuine package does not
    import: ``neuronxcc.nki`` (first generation, functional ops) and the
    standalone ``nki`` package (ISA ops writing into ``dst=``). Returns True
    when the simulator is (now) installed for either. Calling it twice is harmless.
    """
    installed = False
    if not genuine_neuronxcc():
        from . import nki as sim_nki
        from . import isa, language

        root = types.ModuleType("neuronxcc")
        root.__nki_ops_simulator__ = True
        root.__path__ = []  # a package, so submodule imports resolve through sys.modules
        root.nki = sim_nki
        _register("neuronxcc", {
            "neuronxcc": root,
            "neuronxcc.nki": sim_nki,
            "neuronxcc.nki.language": language,
            "neuronxcc.nki.isa": isa,
            "neuronxcc.nki.typing": sim_nki.typing,
        })
        installed = True
    if not genuine_standalone_nki():
        from . import standalone

        _register("nki", {
            "nki": standalone,
            "nki.language": standalone.language,
            "nki.isa": standalone.isa,
            "nki.typing": standalone.typing,
        })
        installed = True
    return installed
