"""``nki.meta``: where ``nki.tensor`` moved in NKI 0.2.0 ("``nki.tensor`` has moved to
``nki.meta.tensor``. Users should update their imports accordingly", Neuron 2.28 release notes).
``nki.meta.tensor`` is the same module as ``nki.tensor``, which stays for kernels not yet updated."""

from . import tensor  # noqa: F401

__all__ = ["tensor"]
