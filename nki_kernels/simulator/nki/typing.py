"""``nki.typing``: the types kernel signatures are annotated with.

``nt.tensor`` is a type: ``isinstance(x, nt.tensor)`` holds for every NKI tensor (an HBM tensor or
region, an SBUF/PSUM tile), as kernels test their arguments, and ``nt.tensor[shape, dtype]`` is an
annotation (shapes and dtypes are not checked at run time).
"""

from typing import Any

from ..access_pattern import NkiTensor as _NkiTensor


class _TensorType(type):
    """Metaclass of the annotation types: an instance check asks whether a value is an NKI tensor."""

    def __instancecheck__(cls, obj):

        return isinstance(obj, _NkiTensor)

    def __subclasscheck__(cls, sub):

        return isinstance(sub, type) and (issubclass(sub, _NkiTensor) or type.__subclasscheck__(cls, sub))


class tensor(metaclass=_TensorType):
    """An NKI tensor argument (``nt.tensor``, ``nt.tensor[shape, dtype]``)."""

    def __class_getitem__(cls, item):
        return cls


class mutable_tensor(tensor):
    """An NKI tensor argument the kernel writes (``nt.mutable_tensor[shape, dtype]``)."""


scalar = Any
