"""Row tiling shared by the row-wise library kernels (softmax, cross-entropy, norms).

Each program of a 1-D grid owns 128 rows (the partition axis); the last axis is
walked in chunks so fp32 temporaries stay bounded however long the row is. A row
that fits ``RESIDENT_BYTES`` per partition is loaded once and kept in SBUF;
a longer one is streamed from HBM once per pass.
"""

from __future__ import annotations

from ..backend import nl

P = 128  # rows per program (nl.tile_size.pmax)
CHUNK = 2048  # elements of a row per compute step: 8 KiB fp32 temporaries per partition
RESIDENT_BYTES = 48 * 1024  # a row at most this long (per partition) stays in SBUF between passes


def chunks(d: int, size: int = CHUNK):
    """``(lo, hi)`` bounds of the chunks covering ``range(d)``."""
    return [(lo, min(d, lo + size)) for lo in range(0, d, size)]


def resident(d: int, dtype, copies: int = 1) -> bool:
    """Whether ``copies`` rows of ``d`` elements of ``dtype`` fit the resident budget."""
    return copies * d * nl_itemsize(dtype) <= RESIDENT_BYTES


def nl_itemsize(dtype) -> int:
    """Bytes per element of an NKI / NumPy dtype."""
    import numpy as np

    return np.dtype(dtype).itemsize


def row_index(n: int):
    """This program's row index ``[P, 1]`` and the mask of rows inside ``n``."""
    ip = nl.program_id(0) * P + nl.arange(P)[:, None]
    return ip, ip < n


def cols(lo: int, hi: int):
    """The column index ``[1, hi - lo]`` of chunk ``[lo, hi)``."""
    return lo + nl.arange(hi - lo)[None, :]


class RowSource:
    """Chunks of this program's rows of a 2-D HBM tensor: resident in SBUF or reloaded each pass."""

    def __init__(self, tensor, ip, rows, keep: bool):
        self.tensor, self.ip, self.rows = tensor, ip, rows
        d = tensor.shape[1]
        self.tile = nl.load(tensor[ip, nl.arange(d)[None, :]], mask=rows) if keep else None

    def chunk(self, lo: int, hi: int):
        """Columns ``[lo, hi)`` of the rows, ``[P, hi - lo]`` in the tensor's dtype."""
        if self.tile is not None:
            return self.tile[:, lo:hi]
        return nl.load(self.tensor[self.ip, cols(lo, hi)], mask=self.rows)


def row_grid(n_rows: int) -> tuple:
    """The 1-D launch grid covering ``n_rows`` rows, 128 per program."""
    return (max(1, -(-int(n_rows) // P)),)
