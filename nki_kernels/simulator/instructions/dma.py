"""DMA instructions that compute: ``dma_compute`` (scaled sum of several sources) and
``dma_transpose``. DMA engines reach HBM and SBUF, never PSUM; they compute in fp32 and
round to the destination's dtype on the way out.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import profile as _prof
from ..core import Access, HBMTensor, Tile, psum, sbuf
from ..errors import NKIError
from .operands import alu, check_dst, instruction, mark_read, write


def read(src, op, name="src"):
    """The values of a DMA source: an HBM tensor/region or an SBUF tile (PSUM is not reachable)."""
    if isinstance(src, (Access, HBMTensor)):
        from .. import language as _nl

        acc = _nl._as_access(src, name, f"nisa.{op}")
        vals = acc.index.read(acc.tensor.data, None, what=acc.tensor.name)
        _prof.dma(acc.tensor, vals, "read", acc, None)
        from .. import diagnostics as _diag

        hook = getattr(_diag, "hbm_access", None)
        if hook is not None:
            hook(acc.tensor, acc, None, False)
        return vals
    if isinstance(src, Tile):
        if src.buffer is psum:
            raise NKIError("operand memory", f"nisa.{op}: {name} (shape {src.shape}) is in PSUM; DMA moves data "
                           "between HBM and SBUF (copy PSUM to SBUF with nisa.tensor_copy first)")
        mark_read(src)
        return src.data
    raise NKIError("operand type", f"nisa.{op}: {name} must be an HBM tensor or an SBUF tile, got "
                   f"{type(src).__name__}")


def store(dst, vals, op, what="source"):
    """Write ``vals`` (same element count) into a DMA destination in HBM or SBUF, rounding to its dtype."""
    if isinstance(dst, (Access, HBMTensor)):
        from .. import language as _nl

        acc = _nl._as_access(dst, "dst", f"nisa.{op}")
        if int(np.prod(acc.shape)) != int(np.size(vals)):
            raise NKIError("dst shape", f"nisa.{op}: dst {acc.tensor.name}{list(acc.shape)} has "
                           f"{int(np.prod(acc.shape))} elements, the {what} has {int(np.size(vals))}; a DMA "
                           "copies equal element counts")
        _nl.store(acc, np.reshape(vals, acc.shape))
        return
    if isinstance(dst, Tile) and dst.buffer is psum:
        raise NKIError("dst memory", f"nisa.{op}: dst (shape {dst.shape}) is in PSUM; DMA moves data between HBM "
                       "and SBUF")
    d = check_dst(dst, op, (sbuf,))
    if int(np.prod(d.shape)) != int(np.size(vals)):
        raise NKIError("dst shape", f"nisa.{op}: dst has shape {d.shape}, the {what} has {int(np.size(vals))} "
                       "elements; a DMA copies equal element counts")
    write(d, np.reshape(vals, d.shape), op, what)


@instruction
def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=None, name=None):
    """``dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...)`` inside the DMA engines (fp32,
    rounded to dst's dtype). Sources and dst are in HBM or SBUF with the same element count;
    ``reduce_op`` must be ``nl.add`` and every scale 1.0 (or ``scales=None``).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.dma_compute.html)
    """
    op = "dma_compute"
    srcs = list(srcs)
    if not srcs:
        raise NKIError(op, "nisa.dma_compute needs at least one source in srcs")
    if alu(reduce_op) is not np.add:
        raise NKIError("reduce_op", f"nisa.{op}: reduce_op {reduce_op!r}; only nl.add is supported")
    scales = [1.0] * len(srcs) if scales is None else list(scales)
    if len(scales) != len(srcs) or any(float(s) != 1.0 for s in scales):
        raise NKIError("scales", f"nisa.{op}: scales {scales} must be one 1.0 per source (the only supported "
                       "scale)")
    vals = [dt.compute_view(np.asarray(read(s, op, f"srcs[{i}]"))).astype(np.float32) for i, s in enumerate(srcs)]
    n = {int(v.size) for v in vals}
    if len(n) != 1:
        raise NKIError("operand shapes", f"nisa.{op}: sources have different element counts "
                       f"{[tuple(v.shape) for v in vals]}")
    acc = vals[0].reshape(-1).copy()
    for v, s in zip(vals[1:], scales[1:]):
        acc += v.reshape(-1) * np.float32(s)
    store(dst, acc * np.float32(scales[0]) if scales[0] != 1.0 else acc, op, "reduction")


@instruction
def dma_transpose(dst, src, axes=None, dge_mode=None, name=None):
    """Transpose ``src`` (HBM or SBUF) into ``dst`` (SBUF or HBM) through DMA: 2-D swaps the axes,
    3-D reverses them, 4-D permutes ``[3, 1, 2, 0]``, or ``axes`` when given."""
    vals = np.asarray(read(src, "dma_transpose"))
    perm = tuple(axes) if axes is not None else {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(vals.ndim)
    if perm is None:
        raise NKIError("dma_transpose", f"nisa.dma_transpose takes a 2-D to 4-D source, got shape {vals.shape}")
    out = np.ascontiguousarray(np.transpose(vals, perm))
    if isinstance(dst, Tile) and tuple(dst.shape) != out.shape and dst.shape[0] != out.shape[0]:
        raise NKIError("dst shape", f"nisa.dma_transpose: dst has shape {dst.shape}, the transposed source has "
                       f"shape {out.shape}")
    store(dst, out, "dma_transpose", "transposed source")
