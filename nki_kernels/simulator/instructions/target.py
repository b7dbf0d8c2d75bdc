"""The simulated target (``nki.isa.nc_version`` / ``get_nc_version``) and the ISA config enums.

The target defaults to NeuronCore-v4 (Trn3) for a kernel of the current ``nki`` API, as the official
simulator does ("*(unset)*: Auto-detect (uses the Neuron chip detected on the running machine,
otherwise defaults to ``trn3``)", NKI CPU Simulator page; no Neuron chip is found here), and to
NeuronCore-v3 (Trn2) for the first generation's kernels and outside a kernel. Select another with
the environment variable ``NKI_SIM_NC_VERSION`` (``gen2`` / ``gen3`` / ``gen4``), or the official
``NEURON_PLATFORM_TARGET_OVERRIDE`` (``trn1`` / ``trn2`` / ``trn3``) when that is unset, or, in
code, ``with target.use(nc_version.gen4): ...``; rules that depend on the version (matmul dtypes,
NeuronCore-v4-only instructions) read :func:`get_nc_version` when an instruction runs.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import threading

from ..context import running_program
from ..errors import NKIError


@functools.total_ordering
class nc_version(enum.Enum):
    """NeuronCore version (``nki.isa.nc_version``): ``gen2`` Trn1/Inf2, ``gen3`` Trn2, ``gen4`` Trn3.

    Versions are ordered (``get_nc_version() >= nc_version.gen3``) and compare with their
    numbers (``>= 3``), as kernel libraries test them."""

    gen2 = 2
    gen3 = 3
    gen4 = 4

    def __eq__(self, other):
        return self.value == getattr(other, "value", other)

    def __lt__(self, other):
        return self.value < getattr(other, "value", other)

    __hash__ = enum.Enum.__hash__


_local = threading.local()


def _from_env():
    # NKI_SIM_NC_VERSION, else the official simulator's NEURON_PLATFORM_TARGET_OVERRIDE (the target
    # `NKI_SIMULATOR=1 python script.py` runs unmodified scripts' kernels for), else None
    var = next((v for v in ("NKI_SIM_NC_VERSION", "NEURON_PLATFORM_TARGET_OVERRIDE") if os.environ.get(v, "").strip()),
               None)
    if var is None:
        return None
    name = os.environ[var].strip().lower()
    aliases = {"trn1": "gen2", "inf2": "gen2", "trn2": "gen3", "trn3": "gen4", "v2": "gen2", "v3": "gen3",
               "v4": "gen4"}
    name = aliases.get(name, name)
    if name not in nc_version.__members__:
        raise ValueError(f"{var}={name!r}: expected gen2, gen3 or gen4 (or trn1, trn2, trn3)")
    return nc_version[name]


def get_nc_version():
    """The ``nc_version`` of the current target context: a :func:`use` block, else the environment
    (see the module docstring), else the running kernel's default: ``gen4`` (Trn3) for the current
    ``nki`` API, ``gen3`` (Trn2) for the first generation and outside a kernel."""
    v = getattr(_local, "version", None)
    if v is not None:
        return v
    v = _from_env()
    if v is not None:
        return v
    prog = running_program()
    return default_version(prog is not None and prog.current_api)


def default_version(current_api):
    """The target when nothing selects one: ``gen4`` for a kernel of the current ``nki`` API
    (``current_api``), as the official simulator defaults to trn3; ``gen3`` otherwise."""
    return nc_version.gen4 if current_api else nc_version.gen3


def version_for(prog):
    """The target program ``prog`` runs on: a :func:`use` block or the environment, else its API's default."""
    v = selected_version()
    return v if v is not None else default_version(prog.current_api)


def selected_version():
    """The target a :func:`use` block or the environment selects, or ``None`` (the kernel's default)."""
    v = getattr(_local, "version", None)
    return v if v is not None else _from_env()


def get_nc_sub_version():
    """The silicon revision within the target's ``nc_version`` (0: first revision, the simulated one)."""
    return 0


@contextlib.contextmanager
def use(version):
    """Simulate ``version`` (an ``nc_version`` or its name) inside the ``with`` block."""
    v = version if isinstance(version, nc_version) else nc_version[str(version)]
    prev = getattr(_local, "version", None)
    _local.version = v
    try:
        yield v
    finally:
        _local.version = prev


def require(op, version):
    """An instruction available from ``version`` on: an error on an older target."""
    cur = get_nc_version()
    if cur.value < version.value:
        raise NKIError("target", f"nisa.{op} is available only on NeuronCore-v{version.value} and newer; the "
                       f"simulated target is {cur.name} (NeuronCore-v{cur.value}); select it with "
                       f"NKI_SIM_NC_VERSION={version.name}")


class engine(enum.Enum):
    """Compute engines (``nki.isa.engine``); ``engine=`` arguments take them."""

    unknown = "unknown"
    tensor = "Tensor"
    vector = "Vector"
    scalar = "Scalar"
    gpsimd = "GpSimd"
    dma = "DMA"  # the DMA engines (engine.dma of the current reference)
    sync = "Sync"

    def __eq__(self, other):
        # The first generation compared engine= values with plain names ("Vector").
        return self.value == getattr(other, "value", other)

    __hash__ = enum.Enum.__hash__


class reduce_cmd(enum.Enum):
    """Commands for an engine's accumulation registers (``nki.isa.reduce_cmd``)."""

    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


class dge_mode(enum.Enum):
    """DMA descriptor generation modes (``nki.isa.dge_mode``); no effect on simulated results."""

    unknown = "unknown"
    none = "none"
    swdge = "swdge"
    hwdge = "hwdge"


class oob_mode(enum.Enum):
    """Out-of-bounds handling of indirect DMA (``nki.isa.oob_mode``): ``error`` raises, ``skip``
    leaves the out-of-bounds rows untouched."""

    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):
    """Tensor Engine performance modes (``nki.isa.matmul_perf_mode``); results are the same."""

    none = "none"
    double_row = "double_row"
    double_row_gen3 = "double_row_gen3"


class dma_engine(enum.Enum):
    """DMA queues an instruction may be issued on (``nki.isa.dma_engine``); no effect on results."""

    unknown = "unknown"
    dma = "dma"  # the shared DMA queues (the current reference's default)
    gpsimd_dma = "gpsimd_dma"  # GpSimd's internal DMA (SBUF-to-SBUF swaps under LNC=2)
    sync = "sync"
    act = "act"
    pool = "pool"
    gpsimd = "gpsimd"


def command(cmd):
    """The name of a ``reduce_cmd`` value (an enum member or its name)."""
    name = getattr(cmd, "value", cmd)
    if name not in reduce_cmd.__members__:
        raise NKIError("reduce_cmd", f"reduce_cmd={cmd!r} is not one of {sorted(reduce_cmd.__members__)}")
    return name
