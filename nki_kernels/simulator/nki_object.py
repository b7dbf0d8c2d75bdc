"""``nl.NKIObject``: the base class of NKI kernel dataclasses and configuration objects.

The current ``nki.language`` reference documents ``NKIObject(**kwargs)`` as
"Base class for NKI kernel dataclasses and configuration objects"; kernel
libraries derive their ``@dataclass`` configs from it (frozen or not) and
``nl.NkiTensor`` derives from it. On the simulator kernels run as Python, so it
carries no compiler state: keyword arguments become attributes, and
dataclasses generate their own ``__init__`` as usual.

NKI's front end reads a class body's plain assignments as fields too:
nki-library's ``@dataclass class SectionParams(nl.NKIObject): section_idx = None ...``
(attention_cte) has no annotations and is built with keyword arguments. CPython's
``dataclass`` only sees annotated names, so a subclass's unannotated public
assignments of immutable values are annotated (``typing.Any``) when it is
created, before any decorator runs; they become fields with those defaults,
after the annotated ones.
"""

from __future__ import annotations

import typing

# Values a class body may assign that become field defaults (mutable ones would be shared).
_FIELD_DEFAULTS = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset)


class NKIObject:
    """Base class for NKI kernel dataclasses and configuration objects (``nl.NKIObject``)."""

    __slots__ = ()  # subclasses with __slots__ (on-chip tiles) stay slotted

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        ann = own.get("__annotations__")
        plain = [name for name, value in own.items()
                 if not name.startswith("_") and type(value) in _FIELD_DEFAULTS and (ann is None or name not in ann)]
        if plain:
            if ann is None:
                ann = {}
                cls.__annotations__ = ann
            for name in plain:
                ann[name] = typing.Any

    def __init__(self, **kwargs) -> None:
        if kwargs and not hasattr(self, "__dict__"):
            # the bare base (and NkiTensor) are slotted so tiles stay slotted; subclasses have a __dict__
            raise TypeError(f"{type(self).__name__}({', '.join(kwargs)}=...): keyword attributes need a subclass "
                            "(class MyConfig(nl.NKIObject): ...)")
        for key, value in kwargs.items():
            setattr(self, key, value)
