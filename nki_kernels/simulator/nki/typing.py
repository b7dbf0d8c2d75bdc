"""``nki.typing``: type annotations used in kernel signatures (no runtime checks)."""

from typing import Any

tensor = Any
"""Annotation for an HBM tensor argument (``nt.tensor``)."""


class _Subscriptable:
    def __getitem__(self, item):
        return Any


tensor = _Subscriptable()  # noqa: F811 - `nt.tensor[shape, dtype]` is also used
mutable_tensor = _Subscriptable()
scalar = Any
