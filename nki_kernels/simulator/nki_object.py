"""``nl.NKIObject``: the base class of NKI kernel dataclasses and configuration objects.

The current ``nki.language`` reference documents ``NKIObject(**kwargs)`` as
"Base class for NKI kernel dataclasses and configuration objects"; kernel
libraries derive their ``@dataclass`` configs from it (frozen or not) and
``nl.NkiTensor`` derives from it. On the simulator kernels run as Python, so it
carries no compiler state: keyword arguments become attributes, and
dataclasses generate their own ``__init__`` as usual.
"""

from __future__ import annotations


class NKIObject:
    """Base class for NKI kernel dataclasses and configuration objects (``nl.NKIObject``)."""

    __slots__ = ()  # subclasses with __slots__ (on-chip tiles) stay slotted

    def __init__(self, **kwargs) -> None:
        if kwargs and not hasattr(self, "__dict__"):
            # the bare base (and NkiTensor) are slotted so tiles stay slotted; subclasses have a __dict__
            raise TypeError(f"{type(self).__name__}({', '.join(kwargs)}=...): keyword attributes need a subclass "
                            "(class MyConfig(nl.NKIObject): ...)")
        for key, value in kwargs.items():
            setattr(self, key, value)
