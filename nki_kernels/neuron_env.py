"""Which genuine Neuron stack is importable, and which path each framework takes because of it.

Detection is done once per process (cached) and costs little where nothing is
installed: a package without an import spec is absent without importing
anything. A package whose import raises counts as absent, with the reason: the
packages of these names on the public index are placeholders that raise
``ImportError("WRONG PACKAGE ...")``. Modules that :func:`nki_kernels.simulator.install`
registered in ``sys.modules`` (marked ``__nki_ops_simulator__``) are never genuine.

SDK eras, from the Neuron release notes and announcements:

- <= 2.22: ``jax_neuronx.nki_call`` launches ``neuronxcc.nki`` kernels from JAX;
- 2.23: ``jax_neuronx.nki_call`` removed; ``@nki.jit`` kernels are called directly on
  ``jax.Array``\\ s (and torch-xla tensors);
- 2.27: the standalone ``nki`` package (NKI Beta 2) beside ``neuronxcc.nki``;
  2.28 drops ``neuronxcc.nki``. The standalone ``kernel[n]`` is a logical-core count,
  not an SPMD grid;
- 2.33: TorchNeuron (beta): a native ``neuron`` torch device, kernels registered
  with ``torch_neuronx.nki_op``.

``neuron_environment()`` returns a :class:`NeuronEnvironment`; print it (or run
``python -m nki_kernels.env``) to see the decision before a long compile.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import io
import os
import sys
from dataclasses import dataclass

SIMULATOR_MARK = "__nki_ops_simulator__"
STACK_VARIABLE = "NKI_OPS_KERNEL_STACK"
STACKS = ("neuronxcc", "nki", "simulator")

# import name -> distribution name on the Neuron package index
_DISTRIBUTIONS = {"nki": "nki", "neuronxcc": "neuronx-cc", "jax_neuronx": "jax-neuronx",
                  "torch_neuronx": "torch-neuronx", "torch_xla": "torch-xla"}


@dataclass(frozen=True)
class Package:
    """One probed package: ``found`` only for the genuine one; ``note`` says why not, or what it offers."""

    name: str
    found: bool
    version: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Route:
    """The path one framework's launches take, and why."""

    framework: str
    path: str
    reason: str


def _is_simulator(mod) -> bool:
    return bool(getattr(mod, SIMULATOR_MARK, False)) or getattr(mod, "__name__", "").startswith("nki_kernels.")


def _version(name: str, mod) -> str | None:
    version = getattr(mod, "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version(_DISTRIBUTIONS.get(name, name))
    except importlib.metadata.PackageNotFoundError:
        return None


def probe(name: str, submodules: tuple = ()):
    """``(module, reason)``: the genuine module ``name`` (with ``submodules`` imported), or None and why not."""
    root = name.split(".")[0]
    for key in {root, name}:
        registered = sys.modules.get(key)
        if registered is not None and _is_simulator(registered):
            return None, "the nki-ops simulator is registered under this name (install()), not the Neuron package"
    if name not in sys.modules:
        try:
            spec = importlib.util.find_spec(root) and importlib.util.find_spec(name)
        except Exception as exc:  # noqa: BLE001 - a placeholder parent package raises on import
            return None, _import_failure(exc)
        if spec is None:
            return None, "not installed"
    try:
        mod = importlib.import_module(name)
        for sub in submodules:
            importlib.import_module(f"{name}.{sub}")
    except Exception as exc:  # noqa: BLE001 - placeholders raise ImportError("WRONG PACKAGE ..."), broken installs anything
        return None, _import_failure(exc)
    if _is_simulator(mod):
        return None, "the nki-ops simulator, not the Neuron package"
    return mod, ""


def _import_failure(exc: BaseException) -> str:
    text = str(exc)
    if "WRONG PACKAGE" in text.upper():
        return "placeholder from the public package index (its import raises); install it from the Neuron repository"
    return f"import fails: {type(exc).__name__}: {text[:160]}"


@functools.lru_cache(maxsize=1)
def kernel_packages() -> tuple:
    """``(standalone nki, neuronxcc.nki)`` as :class:`Package` records (probed once)."""
    nki, why = probe("nki", ("language", "isa"))
    if nki is not None and not hasattr(nki, "jit"):
        nki, why = None, "imports but has no nki.jit"
    standalone = Package("nki", nki is not None, _version("nki", nki) if nki else None,
                         "standalone NKI (SDK 2.27+)" if nki else why)
    cc, why = probe("neuronxcc.nki", ("language", "isa"))
    version = _version("neuronxcc", sys.modules.get("neuronxcc")) if cc else None
    gen1 = Package("neuronxcc.nki", cc is not None, version, "first-generation NKI (SDK <= 2.27)" if cc else why)
    return standalone, gen1


@functools.lru_cache(maxsize=1)
def kernel_stack() -> str:
    """Which ``nki``/``nl``/``nisa`` our kernels get: ``"neuronxcc"``, ``"nki"`` or ``"simulator"``.

    nki-ops' kernels are first-generation SPMD-grid kernels (``nl.program_id``,
    ``nl.load``/``nl.store`` with masks), so ``neuronxcc.nki`` comes first where it
    imports (SDK <= 2.27); then the standalone ``nki``; else the simulator.
    ``NKI_OPS_KERNEL_STACK`` (``neuronxcc`` / ``nki`` / ``simulator``) overrides
    the choice; a genuine stack that is asked for but absent is a ValueError.
    """
    standalone, gen1 = kernel_packages()
    wanted = os.environ.get(STACK_VARIABLE, "").strip().lower()
    if wanted in ("", "auto"):
        return "neuronxcc" if gen1.found else "nki" if standalone.found else "simulator"
    if wanted not in STACKS:
        raise ValueError(f"{STACK_VARIABLE}={wanted!r}: expected one of {', '.join(STACKS)} or auto")
    found = {"neuronxcc": gen1, "nki": standalone}.get(wanted)
    if found is not None and not found.found:
        raise ValueError(f"{STACK_VARIABLE}={wanted}, but {found.name} is not usable: {found.note}")
    return wanted


def _framework_package(name: str, submodules: tuple = ()) -> tuple:
    mod, why = probe(name, submodules)
    return mod, Package(name, mod is not None, _version(name, mod) if mod else None, "" if mod else why)


@dataclass(frozen=True)
class NeuronEnvironment:
    """What was found, the kernel stack chosen, the SDK era it implies and each framework's path."""

    packages: tuple
    kernel_stack: str
    sdk: str
    jax_nki_call: bool
    torch_xla_neuron: bool
    torch_neuron_device: bool
    routes: tuple

    @property
    def genuine(self) -> bool:
        """True when our kernels are the Neuron SDK's (not the simulator's)."""
        return self.kernel_stack != "simulator"

    def package(self, name: str) -> Package:
        """The :class:`Package` record of ``name`` (``"nki"``, ``"neuronxcc.nki"``, ``"jax_neuronx"`` ...)."""
        for p in self.packages:
            if p.name == name:
                return p
        raise KeyError(f"{name!r} was not probed; probed: {', '.join(p.name for p in self.packages)}")

    def route(self, framework: str) -> Route:
        """The :class:`Route` of ``framework`` (``"NumPy"``, ``"JAX"``, ``"torch CPU"``, ``"torch-xla"``, ``"TorchNeuron"``)."""
        for r in self.routes:
            if r.framework == framework:
                return r
        raise KeyError(f"no route for {framework!r}; known: {', '.join(r.framework for r in self.routes)}")

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text  # plain text: "kernel[grid]" is not console markup

        found = Table(title="Neuron packages", title_justify="left")
        for col in ("package", "found", "version", "note"):
            found.add_column(col, overflow="fold")
        for p in self.packages:
            found.add_row(*(Text(c) for c in (p.name, "yes" if p.found else "no", p.version or "-", p.note)))
        paths = Table(title=f"Kernel stack: {self.kernel_stack}  (SDK: {self.sdk})", title_justify="left")
        for col in ("framework", "path", "why"):
            paths.add_column(col, overflow="fold")
        for r in self.routes:
            paths.add_row(Text(r.framework), Text(r.path), Text(r.reason))
        return Group(found, paths)

    def __str__(self) -> str:
        from rich.console import Console

        out = io.StringIO()
        Console(file=out, width=120, color_system=None, force_terminal=False).print(self)
        return out.getvalue()


def _sdk_era(standalone, gen1, jax_nki_call, jax_found, neuron_device) -> str:
    if neuron_device:
        return "2.33+ (TorchNeuron)"
    if standalone.found and not gen1.found:
        return "2.28+ (standalone nki only)"
    if standalone.found:
        return "2.27 (nki and neuronxcc.nki)"
    if gen1.found and jax_nki_call:
        return "<= 2.22 (jax_neuronx.nki_call)"
    if gen1.found:
        return "2.23-2.26" if jax_found else "<= 2.26"
    return "none (simulator)"


def _routes(stack, jax_nki_call, jax_found, xla_found, torch_neuronx_found, neuron_device) -> tuple:
    sim = "nki-ops simulator"
    if stack == "simulator":
        numpy = Route("NumPy", sim, "no genuine nki / neuronxcc.nki imports")
        jax = Route("JAX", "nki_call primitive -> custom-call run by the simulator (CPU target; host callback on GPU)",
                    "our kernels are simulator kernels; the payload target is registered for CPU only")
    else:
        numpy = Route("NumPy", f"genuine {stack}.jit: compile and run on the NeuronDevice",
                      "nki.jit runs a kernel standalone when its arguments are NumPy arrays")
        if jax_nki_call:
            jax = Route("JAX", "jax_neuronx.nki_call(kernel, *arrays, grid=, out_shape=, **static)",
                        "jax_neuronx still has nki_call (SDK <= 2.22)")
        else:
            where = "jax_neuronx found without nki_call (SDK 2.23+)" if jax_found else \
                "jax_neuronx not importable: JAX sees no NeuronDevice, the genuine kernel will not lower"
            if stack == "nki":
                where += "; standalone kernel[n] is a core count, so SPMD-grid launches are refused"
            jax = Route("JAX", "kernel[grid](*arrays, **static) on jax.Arrays / tracers, inside our custom_vjp, "
                        "vmap and custom_partitioning rules", where)
    if importlib.util.find_spec("jax") is None:  # (.venv-xla has no JAX: no path to report)
        jax = Route("JAX", "-", "jax not importable")
    cpu = Route("torch CPU", sim, "CPU tensors never reach a NeuronDevice" +
                ("; a genuine kernel runs as its simulator twin (same source, simulator nki)" if stack != "simulator"
                 else ""))
    if not xla_found:
        xla = Route("torch-xla", "-", "torch_xla not importable")
    elif stack != "simulator" and torch_neuronx_found and not neuron_device:
        xla = Route("torch-xla", f"genuine {stack}.jit: kernel[grid](*xla_tensors, **static)",
                    "torch_neuronx + torch_xla: the XLA device is a NeuronCore")
    else:
        xla = Route("torch-xla", "AwsNeuronCustomNativeKernel custom-call with the nki-ops payload, "
                    "simulator on CPU", "no genuine torch_neuronx/nki: the XLA device is not a NeuronCore")
    if neuron_device and stack != "simulator":
        native = Route("TorchNeuron", "torch_neuronx.nki_op registration of each launch, called on 'neuron' tensors",
                       "native 'neuron' device with nki_op (SDK 2.33+)")
    elif neuron_device:
        native = Route("TorchNeuron", "host round trip through the simulator", "no genuine nki for the kernels")
    else:
        native = Route("TorchNeuron", "-", "no native 'neuron' torch device")
    return numpy, jax, cpu, xla, native


@functools.lru_cache(maxsize=1)
def neuron_environment() -> NeuronEnvironment:
    """Probe the Neuron stack once and report it (cached; :func:`refresh` probes again)."""
    standalone, gen1 = kernel_packages()
    stack = kernel_stack()
    jnx, jax_pkg = _framework_package("jax_neuronx")
    jax_nki_call = jnx is not None and hasattr(jnx, "nki_call")
    if jnx is not None:
        jax_pkg = Package("jax_neuronx", True, jax_pkg.version,
                          "has nki_call (SDK <= 2.22)" if jax_nki_call else "no nki_call (SDK 2.23+)")
    tnx, tnx_pkg = _framework_package("torch_neuronx")
    xla, xla_pkg = _framework_package("torch_xla")
    neuron_device = False
    if tnx is not None:
        import torch

        backend_name = getattr(torch._C, "_get_privateuse1_backend_name", lambda: "")()
        neuron_device = backend_name == "neuron" and hasattr(tnx, "nki_op")
        tnx_pkg = Package("torch_neuronx", True, tnx_pkg.version,
                          "native 'neuron' device with nki_op (TorchNeuron)" if neuron_device else "torch-xla based")
    native = Package("neuron device", neuron_device, None,
                     "torch PrivateUse1 backend 'neuron'" if neuron_device else "no native 'neuron' torch device")
    return NeuronEnvironment(
        packages=(standalone, gen1, jax_pkg, tnx_pkg, xla_pkg, native),
        kernel_stack=stack,
        sdk=_sdk_era(standalone, gen1, jax_nki_call, jnx is not None, neuron_device),
        jax_nki_call=jax_nki_call,
        torch_xla_neuron=xla is not None and tnx is not None and not neuron_device,
        torch_neuron_device=neuron_device,
        routes=_routes(stack, jax_nki_call, jnx is not None, xla is not None, tnx is not None, neuron_device),
    )


def refresh() -> NeuronEnvironment:
    """Forget the cached probes and probe again (after installing packages in this process)."""
    kernel_packages.cache_clear()
    kernel_stack.cache_clear()
    neuron_environment.cache_clear()
    return neuron_environment()
