"""HLO inspection: :func:`neuron_hlo`, and the ``NEURON_FRAMEWORK_DEBUG=1`` ``.pbtxt`` dump.

The dump hooks the one place where every JAX compilation ends up, whether
it comes from ``jax.jit(f)(...)``, ``.lower().compile()``, an eager op or a
sharded program: ``jax._src.compiler.compile_or_get_cached``. After XLA
compiles a module, if ``NEURON_FRAMEWORK_DEBUG`` is set (read at every
compilation, so it may be set after import) and the module holds an
``AwsNeuronCustomNativeKernel`` custom-call, its compiled HLO text is written
to ``<module name>.<hash>.pbtxt`` in the current directory: the text
``jax.jit(f).lower(...).compile().as_text()`` gives, which for a sharded
program is the per-device module with the shard shapes. Cached executables
are not recompiled, so a module is written once per process.

The hook is a private JAX entry point; ``XLA_FLAGS=--xla_dump_to=DIR
--xla_dump_hlo_as_text`` is the public alternative, but it must be set before
JAX initialises its backend and dumps every module and pass.
"""

from __future__ import annotations

import hashlib
import logging
import os

import jax

from nki_kernels.custom_call import TARGET

# Private JAX modules: a release without them prints plain HLO text / has no dump hook.
try:
    from jaxlib import _hlo
except ImportError:
    _hlo = None
try:
    from jax._src import compiler
except ImportError:
    compiler = None

log = logging.getLogger(__name__)
_installed = False


def enabled() -> bool:
    """True when ``NEURON_FRAMEWORK_DEBUG`` is set to something other than 0/false/empty."""
    return os.environ.get("NEURON_FRAMEWORK_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def neuron_hlo(fn, *args, **kwargs) -> str:
    """The compiled HLO text of ``fn(*args, **kwargs)`` under ``jax.jit``, without running it.

    ``fn`` may already be jitted (its shardings are kept); ``args`` may be
    arrays or ``jax.ShapeDtypeStruct``s. NKI calls appear as
    ``custom-call(...), custom_call_target="AwsNeuronCustomNativeKernel"``
    with their operand shapes and the ``backend_config`` payload.
    """
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    compiled = jitted.lower(*args, **kwargs).compile()
    return "\n".join(text for _, text in module_texts(compiled.runtime_executable()))


def _print_options():
    """HLO print options that show operand shapes, as the Neuron/torch-xla dumps do."""
    try:
        opts = _hlo.HloPrintOptions()
        opts.print_operand_shape = True
        return opts
    except AttributeError:  # no _hlo, or one without print options
        return None


def module_texts(executable) -> list:
    """``(name, hlo_text)`` of each HLO module of a compiled XLA executable."""
    opts = _print_options()
    return [(m.name, m.to_string(opts) if opts is not None else m.to_string()) for m in executable.hlo_modules()]


def dump(executable, directory: str | None = None) -> list:
    """Write each module of ``executable`` holding an NKI custom-call as ``.pbtxt``; returns the paths."""
    paths = []
    for name, text in module_texts(executable):
        if f'custom_call_target="{TARGET}"' not in text:
            continue
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        path = os.path.join(directory or os.getcwd(), f"{name}.{digest}.pbtxt")
        with open(path, "w") as f:
            f.write(text)
        paths.append(path)
    return paths


def install() -> bool:
    """Wrap JAX's compile entry point once (see module doc); False if this JAX lacks it."""
    global _installed
    if _installed:
        return True
    try:
        original = compiler.compile_or_get_cached
    except AttributeError:  # no compiler module, or one without this entry point
        log.warning("NEURON_FRAMEWORK_DEBUG: this JAX has no compiler.compile_or_get_cached; use "
                    "jax_ops.neuron_hlo or XLA_FLAGS=--xla_dump_to instead")
        return False

    def compile_or_get_cached(*args, **kwargs):
        executable = original(*args, **kwargs)
        if enabled():
            try:
                dump(executable)
            except Exception as exc:  # noqa: BLE001 - a failed debug dump must not fail the program
                log.warning("NEURON_FRAMEWORK_DEBUG: could not write the HLO: %s", exc)
        return executable

    compile_or_get_cached.__wrapped__ = original
    compiler.compile_or_get_cached = compile_or_get_cached
    _installed = True
    return True
