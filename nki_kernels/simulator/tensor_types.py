"""The concrete tensor classes, as the access-pattern layer below them sees them.

:class:`~.nki_tensor.NkiTensor` (the view methods) and the modules under it (layouts, views,
plans) sit below :mod:`.core`, whose ``Tile``, ``HBMTensor`` and ``Access`` subclass
``NkiTensor``, and below :mod:`.dynamic_views`, whose classes subclass those. That layer
makes and recognises such objects through :data:`registered`, filled once by
:mod:`.dynamic_views` when it is imported (:mod:`.access_pattern` imports it, and the package
imports that): no import of a higher module, and a class attribute read per use.
"""

from __future__ import annotations


class _Unregistered:
    """Stands for a class until :mod:`.dynamic_views` registers it (no object is ever one)."""

    def __new__(cls, *args, **kwargs):
        raise RuntimeError("the simulator's tensor classes are not registered: import "
                           "nki_kernels.simulator (or nki_kernels.simulator.dynamic_views) first")


def _unregistered_flush() -> None:
    _Unregistered()


class registered:
    """The classes (and core's ``flush_pending``) that :func:`register` installed."""

    Tile = HBMTensor = Access = DynamicTile = DynamicHBMTensor = _Unregistered
    flush_pending = staticmethod(_unregistered_flush)


def register(*, Tile, HBMTensor, Access, DynamicTile, DynamicHBMTensor, flush_pending) -> None:
    """Install the concrete classes: core's tile, HBM tensor and HBM access, the dynamic view classes,
    and ``core.flush_pending`` (computes the running program's deferred op)."""
    registered.Tile, registered.HBMTensor, registered.Access = Tile, HBMTensor, Access
    registered.DynamicTile, registered.DynamicHBMTensor = DynamicTile, DynamicHBMTensor
    registered.flush_pending = staticmethod(flush_pending)
