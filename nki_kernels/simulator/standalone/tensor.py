"""``nki.tensor``: the tensor type of the standalone package (``NkiTensor``).

Every tensor a kernel sees -- an on-chip tile, an HBM tensor, a region of one --
is an :class:`~nki_kernels.simulator.access_pattern.NkiTensor`: a view of a storage
with an access pattern (see :mod:`nki_kernels.simulator.access_pattern`).
"""

from ..access_pattern import NkiTensor  # noqa: F401
from ..nki_object import NKIObject  # noqa: F401

__all__ = ["NKIObject", "NkiTensor"]
