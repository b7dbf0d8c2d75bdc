"""Register the simulator as ``neuronxcc.nki`` and as the standalone ``nki`` when the genuine packages do not import."""

from __future__ import annotations

import importlib
import sys
import types

from . import isa, language, standalone
from . import nki as sim_nki
from .standalone import constants as standalone_constants
from .standalone import simulator
from .standalone.simulate import cpu_simulate


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


def namespace(impl, name: str, extra=()) -> types.ModuleType:
    """The module kernels import as ``name``: exactly ``impl.__all__`` (plus ``extra`` submodule
    attributes), so the implementation's helpers and imports (``Tile``, ``np`` ...) stay out of it."""
    mod = _NAMESPACES.get(name)
    if mod is None:  # one per name, so installing twice registers the same module
        mod = _NAMESPACES[name] = types.ModuleType(name, impl.__doc__)
        mod.__dict__.update({n: getattr(impl, n) for n in (*impl.__all__, *extra) if hasattr(impl, n)})
        mod.__all__ = list(impl.__all__)
        mod.__nki_ops_simulator__ = True
    return mod


_NAMESPACES: dict = {}


def install() -> bool:
    """Make ``import neuronxcc.nki`` and ``import nki`` (with ``.language``, ``.isa``, ``.typing``) load the simulator,
    and register nki-library's simulation layout ``nki_cpu_simulator.nki`` (see :func:`cpu_simulator_layout`).

    Each generation is registered only when its genuine package does not
    import: ``neuronxcc.nki`` (first generation, functional ops) and the
    standalone ``nki`` package (ISA ops writing into ``dst=``). Returns True
    when the simulator is (now) installed for either. Calling it twice is harmless.
    """
    installed = False
    if not genuine_neuronxcc():
        root = types.ModuleType("neuronxcc")
        root.__nki_ops_simulator__ = True
        root.__path__ = []  # a package, so submodule imports resolve through sys.modules
        root.nki = sim_nki
        sim_nki.language = nl = namespace(language, "neuronxcc.nki.language")
        _register("neuronxcc", {
            "neuronxcc": root,
            "neuronxcc.nki": sim_nki,
            "neuronxcc.nki.language": nl,
            "neuronxcc.nki.isa": isa,
            # (the same enum objects as nisa.dge_mode ...; the documentation's dma_transpose test does
            # ``from neuronxcc.nki.isa.constants import dge_mode``)
            "neuronxcc.nki.isa.constants": standalone_constants,
            "neuronxcc.nki.typing": sim_nki.typing,
            "neuronxcc.nki.compiler": sim_nki.compiler,
            "neuronxcc.nki.compiler.sbuf": sim_nki.compiler.sbuf,
            "neuronxcc.nki.compiler.psum": sim_nki.compiler.psum,
        })
        installed = True
    if not genuine_standalone_nki():
        _register("nki", standalone_layout("nki", standalone))
        installed = True
    _register("nki_cpu_simulator", cpu_simulator_layout())
    return installed


def standalone_layout(prefix: str, root) -> dict:
    """``sys.modules`` entries of the standalone package under ``prefix``: the package, its
    ``language`` (``.language.dtypes``), ``isa`` (``.isa.constants``), ``dtype``, ``tensor`` (also
    ``meta.tensor``),
    ``typing``, ``simulator`` (``simulate_kernel``, as vllm-neuron's CPU mode imports it) and,
    where the simulator has them, ``collectives`` and ``compiler``."""

    root.simulator = simulator
    mods = {prefix: root, f"{prefix}.language": standalone.language,
            f"{prefix}.language.dtypes": standalone.dtype, f"{prefix}.isa": standalone.isa,
            f"{prefix}.isa.constants": standalone.isa.constants, f"{prefix}.dtype": standalone.dtype,
            f"{prefix}.tensor": standalone.tensor, f"{prefix}.meta": standalone.meta,
            f"{prefix}.meta.tensor": standalone.tensor, f"{prefix}.typing": standalone.typing,
            f"{prefix}.simulator": simulator}
    for name in ("collectives", "compiler"):
        if hasattr(standalone, name):
            mods[f"{prefix}.{name}"] = getattr(standalone, name)
    return mods


def cpu_simulator_layout() -> dict:
    """The module layout nki-library's simulation harness imports: ``nki_cpu_simulator.nki`` (the
    standalone package plus ``cpu_simulate(kernel)[lnc](**inputs)``) with ``.builtin``,
    ``.compiler``, ``.isa``, ``.isa.constants``, ``.language``, ``.language.dtypes``, ``.tensor``,
    ``.typing``. Registered in ``sys.modules`` only: no distribution of that name is installed."""

    pkg = types.ModuleType("nki_cpu_simulator", "The simulator under the nki_cpu_simulator name (nki-library's "
                           "simulation harness); registered by nki_kernels.simulator.install().")
    pkg.__path__ = []
    nki = types.ModuleType("nki_cpu_simulator.nki", standalone.__doc__)
    nki.__path__ = []
    nki.__dict__.update({name: getattr(standalone, name) for name in standalone.__all__})
    nki.__nki_ops_simulator__ = True
    nki.cpu_simulate = cpu_simulate
    builtin = types.ModuleType("nki_cpu_simulator.nki.builtin", "The simulator's builtins: the language and "
                               "ISA namespaces kernels reach through the harness's builtins.builtin.")
    builtin.language, builtin.isa = standalone.language, standalone.isa
    nki.builtin = builtin
    compiler = nki.compiler = standalone.compiler
    pkg.nki = nki
    mods = standalone_layout("nki_cpu_simulator.nki", nki)
    mods.update({"nki_cpu_simulator": pkg, "nki_cpu_simulator.nki.builtin": builtin,
                 "nki_cpu_simulator.nki.compiler": compiler})
    return mods
