"""``nki.compiler.CompileConfig`` / ``SpecializationConfig`` / ``AddressRotation``: the per-kernel
configuration ``nki.jit(compile_config=..., specialization_config=...)`` takes (NKI 0.7.0, Neuron 2.33).

Pages: https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.compiler.html and
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/generated/nki.jit.html ("Per-kernel config is
passed through two typed objects"). ``CompileConfig``'s options steer the backend (address rotation,
legalization, dead-code elimination, DMA prefetch rings, the allocator's fallback); none changes what a
kernel computes, so the simulator checks and keeps them. What it does act on: the types of the two
arguments, the options' names and types (a misspelt option is an error, as a dataclass field), and
``SpecializationConfig.allow_nested_config_override``, see :func:`check_nested`.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings

from . import config as _config
from .errors import NKIError

_PAGE = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.compiler.html"


class AddressRotation(enum.Enum):
    """Whether the backend may rotate a memloc's address for better layout: ``AUTO`` (default: decided per
    memloc by allocation origin), ``ENABLE`` or ``DISABLE`` (nki.compiler.AddressRotation page)."""

    AUTO = "auto"
    ENABLE = "enable"
    DISABLE = "disable"


def _check_fields(obj) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        want = AddressRotation if f.name == "address_rotation" else bool
        if not isinstance(value, want):
            raise TypeError(f"nki.compiler.{type(obj).__name__}: {f.name} must be "
                            f"{'an nki.compiler.AddressRotation' if want is AddressRotation else 'a bool'}, "
                            f"got {value!r}")


@dataclasses.dataclass(frozen=True)
class CompileConfig:
    """Per-kernel compile configuration passed to ``@nki.jit(compile_config=...)``: options that impact
    downstream compiler behaviour (the v2.33.1 ``nki.compiler`` source's fields). ``None`` leaves an option
    at the compiler's default (the page: ``prefetch_auto`` off, ``nki_alloc_fallback`` on, ``address_rotation``
    AUTO). The simulator computes the same results under every setting."""

    address_rotation: AddressRotation | None = None
    non_ssa_legalization: bool | None = None
    dead_code_elim: bool | None = None
    barrier_check: bool | None = None
    prefetch_auto: bool | None = None
    nki_alloc_fallback: bool | None = None

    def __post_init__(self):
        _check_fields(self)


@dataclasses.dataclass(frozen=True)
class SpecializationConfig:
    """Per-kernel specialization-time config passed to ``@nki.jit(specialization_config=...)``.
    ``allow_nested_config_override``: "When this kernel is the top-level compiled kernel, warn (instead of
    raising) if a nested @nki.jit sub-kernel's config disagrees, and let it inline under this kernel's
    config" (nki.compiler.SpecializationConfig page)."""

    allow_nested_config_override: bool | None = None

    def __post_init__(self):
        _check_fields(self)


def check_jit_arguments(compile_config, specialization_config) -> None:
    """``nki.jit``'s two typed arguments: each None or an object of its class (a TypeError naming it)."""
    for name, value, cls in (("compile_config", compile_config, CompileConfig),
                             ("specialization_config", specialization_config, SpecializationConfig)):
        if value is not None and not isinstance(value, cls):
            raise TypeError(f"nki.jit: {name} must be an nki.compiler.{cls.__name__}, got {type(value).__name__} "
                            f"({_PAGE})")


def check_nested(top, nested) -> None:
    """A ``@nki.jit`` sub-kernel ``nested`` called (inlined) inside the running top-level kernel ``top``:
    where both name a config and they differ, an NKIError, or, with the top-level kernel's
    ``allow_nested_config_override``, a warning (the sub-kernel runs under the top-level's config). A
    sub-kernel that names no config inlines under the top-level's without a word: the page speaks of a
    config that "disagrees", which one that was never given cannot do (the simulator's reading)."""
    for name in ("compile_config", "specialization_config"):
        mine, theirs = nested.options.get(name), top.options.get(name)
        if mine is None or theirs is None or mine == theirs:
            continue
        text = (f"nested @nki.jit kernel {nested.func.__qualname__} has {name}={mine!r}, the top-level kernel "
                f"{top.func.__qualname__} {name}={theirs!r}")
        spec = top.options.get("specialization_config")
        if spec is not None and spec.allow_nested_config_override:
            warnings.warn(f"[nested config] {text}; it inlines under the top-level kernel's config "
                          "(allow_nested_config_override)", _config.NKIWarning, stacklevel=4)
        else:
            raise NKIError("nested config", f"{text}: they disagree. Give the sub-kernel the same config, or set "
                           "SpecializationConfig(allow_nested_config_override=True) on the top-level kernel")
