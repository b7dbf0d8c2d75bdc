"""Which specialization a current-API kernel runs under (NKI 0.7.0, Neuron 2.33.0).

"Starting with Neuron Release 2.33.0 (NKI 0.7.0), NKI specializes kernels by tracing them with
Python ... Kernels that use ``nl.dynamic_range`` or ``while`` loops with a virtual register must
move to ``nki.language.fori_loop()`` and ``nki.language.while_loop()`` ... To keep the previous
specialization while migrating a kernel, set ``NKI_COMPILER_FRONTEND=custom``. This setting is
deprecated in Neuron 2.33.0 and will be removed along with the dedicated lowering passes in the next
Neuron release." (Announcing changes to NKI specialization; the 0.7.0 release notes and the
"Migrating from NKI 0.6.0 to NKI 0.7.0" section say the same: 0.7.0 "removes the dynamic loop
constructs deprecated in NKI 0.6.0".)

So, per launch (the environment is read when a program of a current-API kernel starts, see
:class:`~.program.Program`, or at the call outside a kernel):

* ``tracing`` (the default): ``for i in nl.dynamic_range(...)`` and ``while reg:`` are the ``removed``
  diagnostic, naming the replacement: a warning by default (the loop runs as in NKI 0.6, so kernels
  written for earlier releases, nki-library's among them, keep running), an NKIError, as NKI 0.7.0's
  compiler gives, with ``NKI_SIM_CHECKS=removed=error``; ``nisa.scalar_load`` / ``scalar_store``
  (NkiScalar) work.
* ``custom`` (``NKI_COMPILER_FRONTEND=custom``): the previous (parser) specialization: the two loop
  forms run as in NKI 0.6.0 with its deprecation warning, which also says that the setting itself is
  deprecated; ``scalar_load`` / ``scalar_store`` are refused ("Only the tracer frontend supports this.
  The parser frontend rejects the call", nki.isa.scalar_load page).
* ``gen1``: a ``neuronxcc.nki`` kernel is not NKI 0.7 at all and keeps its behaviour.
"""

from __future__ import annotations

import os
import warnings

from . import config as _config
from .context import running_program
from .errors import NKIError

ENV = "NKI_COMPILER_FRONTEND"
TRACING, CUSTOM, GEN1 = "tracing", "custom", "gen1"

_CUSTOM_NOTE = (f"{ENV}=custom keeps the previous specialization; the setting is deprecated in Neuron 2.33.0 and "
                "will be removed in the next Neuron release")


def custom_requested() -> bool:
    """Whether the environment asks for the previous specialization (``NKI_COMPILER_FRONTEND=custom``), now."""
    return os.environ.get(ENV, "").strip().lower() == CUSTOM


def frontend() -> str:
    """``tracing``, ``custom`` or ``gen1``: the specialization of the running program (outside a kernel, the
    current API's, from the environment now)."""
    prog = running_program()
    if prog is None:
        return CUSTOM if custom_requested() else TRACING
    if not getattr(prog, "current_api", False):
        return GEN1
    return CUSTOM if getattr(prog, "custom_frontend", False) else TRACING


def removed_dynamic_loop(construct: str, replacement: str, stacklevel: int = 2) -> None:
    """``construct`` (``for i in nl.dynamic_range(...)`` / ``while reg:``) reached. Under the tracing
    specialization, the ``removed`` diagnostic (:mod:`.config`): a warning by default, so kernels written for
    NKI 0.6 and earlier (nki-library's) keep running as they did then, told that NKI 0.7.0's compiler refuses
    them; with ``NKI_SIM_CHECKS=removed=error`` an NKIError, as that compiler gives. Otherwise (the previous
    specialization, or a first-generation kernel) the NKI 0.6.0 deprecation warning, at the caller's caller."""
    f = frontend()
    if f == TRACING:
        err = NKIError("removed", f"{construct} loops were removed in NKI 0.7.0 (deprecated in NKI 0.6.0): the "
                       f"kernel is specialized by tracing it with Python, which cannot turn this loop into a loop "
                       f"on the device, so NKI 0.7.0's compiler refuses the kernel; use {replacement}. To keep "
                       f"the previous specialization while migrating, set {ENV}=custom (deprecated in Neuron "
                       f"2.33.0). (The simulator runs the loop as NKI 0.6 did; NKI_SIM_CHECKS=removed=error "
                       f"refuses it as 0.7.0 does)")
        mode = _config.get("removed")
        if mode == "error":
            raise err
        if mode == "warn":
            warnings.warn(str(err), _config.NKIWarning, stacklevel=stacklevel + 1)
        return
    msg = f"{construct} loops are deprecated and will be removed in a future NKI release; use {replacement}"
    if f == CUSTOM:
        msg = f"{construct} loops are deprecated (removed from the default specialization in NKI 0.7.0); use " \
              f"{replacement}. {_CUSTOM_NOTE}"
    warnings.warn(msg, DeprecationWarning, stacklevel=stacklevel + 1)


def require_tracing(api: str) -> None:
    """``api`` exists only under the tracing specialization: refused under ``NKI_COMPILER_FRONTEND=custom``."""
    if frontend() == CUSTOM:
        raise NKIError("frontend", f"{api}: only the tracer frontend supports this; the parser frontend "
                       f"({ENV}=custom) rejects the call. Unset {ENV} to specialize by tracing")
