"""Tiled element-wise tensor add on a 2-D SPMD grid of 128 x 512 tiles.

The NKI guide's ``nki_tensor_add_kernel_`` generalised with masks, so any 2-D
shape works: the programs on the last row/column of the grid load, add and
store only the elements inside the tensor.
"""

from __future__ import annotations

from .backend import nki, nl

TILE_P = 128  # partition tile (nl.tile_size.pmax)
TILE_F = 512  # free tile


@nki.jit
def tensor_add_kernel(a_input, b_input):
    """c = a + b for 2-D ``a_input``/``b_input`` of equal shape; grid ``add_grid(shape)``."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)

    ix = nl.program_id(0) * TILE_P + nl.arange(TILE_P)[:, None]
    iy = nl.program_id(1) * TILE_F + nl.arange(TILE_F)[None, :]
    inside = (ix < a_input.shape[0]) & (iy < a_input.shape[1])

    a_tile = nl.load(a_input[ix, iy], mask=inside)
    b_tile = nl.load(b_input[ix, iy], mask=inside)
    c_tile = nl.add(a_tile, b_tile, mask=inside)
    nl.store(c_output[ix, iy], value=c_tile, mask=inside)
    return c_output


def add_grid(shape) -> tuple:
    """The launch grid covering a 2-D ``shape`` with 128 x 512 tiles."""
    rows, cols = shape
    return (-(-rows // TILE_P), -(-cols // TILE_F))
