"""The kernel / compiler LNC degree check of NKI 0.7.0 (Neuron 2.33.0).

"the compiler now validates that the kernel and compiler LNC degrees match, rejecting a previously
unchecked invalid configuration" (Migrating from NKI 0.6.0 to NKI 0.7.0). The error it gives is the
graph compiler's NCC_EVRF066: "NKI kernel '<kernel-name>' is configured with LNC=<kernel-lnc>, but
neuronx-cc is using LNC=<compiler-lnc>" -- "LNC degree is a global compilation property of a model
compute-graph, so all NKI kernels embedded in a model must use the same LNC degree as neuronx-cc". Its
causes: a kernel left at its implicit LNC=1, ``kernel[1](...)`` (bracket syntax "being deprecated"), or
an ``--lnc`` in ``NEURON_CC_FLAGS`` that differs from the kernel's degree; the kernel's degree is its
bracket, else ``NEURON_LOGICAL_NC_CONFIG`` ("Set kernel LNC=2"), else 1 (LNC page / EVRF066).

The simulator compiles no graph, so it knows the compiler's degree only when the environment names it:
``--lnc`` in ``NEURON_CC_FLAGS`` (which overrides), else ``NEURON_LOGICAL_NC_CONFIG``. With neither set
the compiler's own default (LNC=2 on Trn2 and later) is not assumed and nothing is checked. Read per
launch; current-API kernels only (a first-generation ``kernel[2]`` is an SPMD grid).
"""

from __future__ import annotations

import os
import re

from .errors import NKIError

_LNC_FLAG = re.compile(r"(?:^|\s)--lnc(?:=|\s+)(\S+)")


def _int_or_none(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def compiler_degree():
    """neuronx-cc's LNC degree as the environment names it now, or ``None``."""
    m = _LNC_FLAG.findall(os.environ.get("NEURON_CC_FLAGS", ""))
    if m:
        return _int_or_none(m[-1])  # (the last --lnc wins, as on a command line)
    return _int_or_none(os.environ.get("NEURON_LOGICAL_NC_CONFIG")) if "NEURON_LOGICAL_NC_CONFIG" in os.environ \
        else None


def kernel_degree(grid):
    """The kernel's LNC degree: its bracket (``kernel[2]`` -> 2, ``kernel[1]`` -> 1), else
    ``NEURON_LOGICAL_NC_CONFIG``, else 1."""
    if grid not in (None, ()):
        return getattr(grid, "cores", 1)
    env = _int_or_none(os.environ.get("NEURON_LOGICAL_NC_CONFIG"))
    return env if env is not None else 1


def check(kernel, grid) -> None:
    """Refuse a current-API launch whose LNC degree differs from the compiler's (NCC_EVRF066)."""
    if not getattr(kernel, "options", {}).get("lnc_brackets"):
        return
    want = compiler_degree()
    if want is None:
        return
    have = kernel_degree(grid)
    if have != want:
        name = getattr(getattr(kernel, "func", None), "__name__", repr(kernel))
        raise NKIError("LNC degree", f"NKI kernel '{name}' is configured with LNC={have}, but neuronx-cc is using "
                       f"LNC={want} (NCC_EVRF066; checked since NKI 0.7.0): the LNC degree is a global compilation "
                       "property of the model, so every NKI kernel must use the compiler's. Set "
                       "NEURON_LOGICAL_NC_CONFIG to the desired degree (the kernel's and the compiler's) rather "
                       "than a kernel[n] bracket or a different --lnc in NEURON_CC_FLAGS")
