"""The memories a tensor lives in, and their sizes per partition.

* ``Buffer``: a memory (``nl.sbuf``, ``nl.psum``, the HBM flavours), the ``buffer=`` of a tensor;
* the on-chip sizes: SBUF and PSUM bytes per partition (SBUF by NeuronCore version), PSUM banks,
  the bytes direct allocation may place, and ``SBUF`` / ``PSUM`` as the memory model's indices.

Two sets of names for the same sizes: the data model's (``PMAX``, ``*_PER_PARTITION``,
``PSUM_BANK_BYTES``, re-exported by :mod:`.core`) and the memory model's (``SBUF_BYTES``,
``PSUM_BANK`` ..., re-exported by :mod:`.memory`); both are read from here.
"""

from __future__ import annotations

from .errors import NKIError
from .instructions.target import get_nc_version, version_for


class Buffer:
    """A memory a tensor lives in (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm`` ...); the
    current API's ``nl.MemoryRegion``, whose members ``MemoryRegion.sbuf`` ... are these objects."""

    def __init__(self, name: str, on_chip: bool):
        self.name = name
        self.on_chip = on_chip
        self.tile_label = f"{name} tile"  # what error messages call a tile of this memory
        self.region_label = f"{name} tile[...]"

    def __repr__(self):
        return f"nl.{self.name}"

    @property
    def value(self) -> str:
        """The ``nl.MemoryRegion`` member's value: its name (``nl.hbm``, "Alias of private_hbm" on the
        current ``nki.language`` page, gives ``'private_hbm'``)."""
        return "private_hbm" if self.name == "hbm" else self.name

    def __call__(self, *args, **kwargs):
        # `nl.sbuf.view(...)`-style allocators are not modelled; calling a buffer is an error.
        raise NKIError("buffer", f"{self!r} is a memory location, not a callable allocator")


sbuf = Buffer("sbuf", True)
psum = Buffer("psum", True)
hbm = Buffer("hbm", False)
shared_hbm = Buffer("shared_hbm", False)
private_hbm = Buffer("private_hbm", False)
# nl.MemoryRegion's members (an Enum on the current page: sbuf, psum, private_hbm, shared_hbm)
Buffer.sbuf, Buffer.psum, Buffer.private_hbm, Buffer.shared_hbm = sbuf, psum, private_hbm, shared_hbm


def buffer_index(buffer) -> int:
    """``SBUF`` or ``PSUM`` for an on-chip buffer."""
    return PSUM if buffer.name == "psum" else SBUF


# ---------------------------------------------------------------------------
# sizes per partition
# ---------------------------------------------------------------------------
SBUF, PSUM = 0, 1
NAMES = ("SBUF", "PSUM")
PMAX = 128  # partitions of SBUF / PSUM (nl.tile_size.pmax)
SBUF_BYTES = 192 * 1024
PSUM_BYTES = 16 * 1024
PSUM_BANK = 2 * 1024
PSUM_BANKS = 8
CAPACITY = (SBUF_BYTES, PSUM_BYTES)
# "a valid byte_addr can be any integer values from 0 (inclusive) to 192KiB-16KiB (exclusive) ...
# 16KiB is allocated for compiler internal usage" (nki.compiler.sbuf.alloc)
SBUF_RESERVED = 16 * 1024
SBUF_PLACEABLE = SBUF_BYTES - SBUF_RESERVED  # NeuronCore-v2 (the page's figure)
# SBUF per partition by NeuronCore version: 24 MiB (v2), 28 MiB (v3, Trn2), 32 MiB (v4, Trn3) over
# 128 partitions (architecture guides); the official allocated kernels place beyond 176 KiB on Trn2.
_SBUF_BY_VERSION = {2: 192 * 1024, 3: 224 * 1024, 4: 256 * 1024}

# (the data model's names for them)
SBUF_BYTES_PER_PARTITION = 192 * 1024  # Trn1/Trn2 state buffer: 24 MiB over 128 partitions
PSUM_BYTES_PER_PARTITION = 16 * 1024  # 8 banks x 2 KiB
PSUM_BANK_BYTES = 2 * 1024


def sbuf_bytes(prog=None) -> int:
    """SBUF bytes per partition of the simulated NeuronCore version (of program ``prog``'s target when
    given: the running one's otherwise)."""

    v = get_nc_version() if prog is None else version_for(prog)
    return _SBUF_BY_VERSION.get(int(getattr(v, "value", v)), SBUF_BYTES)
