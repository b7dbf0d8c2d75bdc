"""DMA instructions that compute: ``dma_compute`` (scaled sum of several sources) and
``dma_transpose``. DMA engines reach HBM and SBUF, never PSUM; they compute in fp32 and
round to the destination's dtype on the way out.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as dt
from .. import cores as _cores
from .. import recording as _prof
from .. import transfers as _transfers
from ..context import _tls  # (the running state without a call, on the per-instruction path)
from ..core import Access, HBMTensor, Tile, current_or_none, psum, sbuf
from ..errors import NKIError, NotBatchable
from ..indexing import full_mask as _full_mask
from .operands import alu, borrow, check_dst, instruction, lazy_text, mark_read, write
from .target import dge_mode as _dge_mode
from .target import engine as _engine
from .target import oob_mode as _oob_mode
from .. import diagnostics as _diag
from .. import access_pattern as ap
from ..indexing import Index
from ..timing import costs as _costs  # (each instruction's cost, declared with it)


def read(src, op, name="src"):
    """The values of a DMA source: an HBM tensor/region or an SBUF tile (PSUM is not reachable)."""
    if isinstance(src, (Access, HBMTensor)):
        acc = src if isinstance(src, Access) else src[...]  # (language._as_access, without the calls)
        vals = acc.index.read(acc.tensor.data, None, what=acc.tensor.name)
        _prof.dma(acc.tensor, vals, "read", acc, None)  # (also the diagnostics' HBM access log)
        return vals
    if isinstance(src, Tile):
        if src.buffer is psum:
            raise NKIError("operand memory", f"nisa.{op}: {name} (shape {src.shape}) is in PSUM; DMA moves data "
                           "between HBM and SBUF (copy PSUM to SBUF with nisa.tensor_copy first)")
        mark_read(src)
        return src.data
    raise NKIError("operand type", f"nisa.{op}: {name} must be an HBM tensor or an SBUF tile, got "
                   f"{type(src).__name__}")


def _per_program(src, vals):
    """A DMA source's values with the running batch's leading axes (a source without them is the
    same region for every program of the batch); as they are outside a batch."""
    prog = current_or_none()
    if prog is None or not prog.nb or getattr(src, "nb", 0):
        return vals
    return np.broadcast_to(vals, prog.bshape + vals.shape)


def store(dst, vals, op, what="source"):
    """Write ``vals`` (same element count) into a DMA destination in HBM or SBUF, rounding to its dtype
    (conversions between dtypes go through fp32). In a batch of programs ``vals`` carry the batch's
    leading axes."""
    vals = np.asarray(vals)
    ddtype = getattr(dst, "dtype", vals.dtype)
    if vals.dtype != ddtype and vals.dtype not in dt.PACKED_X4:
        vals = dt.through_fp32(vals, ddtype)
    prog = current_or_none()
    bshape = prog.bshape if prog is not None and prog.nb else ()
    if isinstance(dst, (Access, HBMTensor)):
        acc = _transfers._as_access(dst, "dst", f"nisa.{op}")
        if bshape:
            if vals.shape[:len(bshape)] != bshape or math.prod(acc.shape) != math.prod(vals.shape[len(bshape):]):
                raise NotBatchable(f"nisa.{op}: source and destination element counts in a batch of programs")
            _transfers.store(acc, np.reshape(vals, bshape + tuple(acc.shape)))
            return
        if math.prod(acc.shape) != vals.size:
            raise NKIError("dst shape", f"nisa.{op}: dst {acc.tensor.name}{list(acc.shape)} has "
                           f"{int(np.prod(acc.shape))} elements, the {what} has {int(np.size(vals))}; a DMA "
                           "copies equal element counts")
        _transfers.store(acc, np.reshape(vals, acc.shape))
        return
    if isinstance(dst, Tile) and dst.buffer is psum:
        raise NKIError("dst memory", f"nisa.{op}: dst (shape {dst.shape}) is in PSUM; DMA moves data between HBM "
                       "and SBUF")
    d = check_dst(dst, op, (sbuf,))
    if bshape:
        write(d, vals, op, what)  # (fit_dst checks the element counts per program)
        return
    dshape = d.shape
    if vals.shape != dshape:
        if math.prod(dshape) != vals.size:
            raise NKIError("dst shape", f"nisa.{op}: dst has shape {dshape}, the {what} has {int(np.size(vals))} "
                           "elements; a DMA copies equal element counts")
        vals = vals.reshape(dshape)
    write(d, vals, op, what)


def accumulate_into_hbm(acc, vals, mask, what):
    """``acc = acc + vals`` on an HBM region, elementwise and atomically: where an indirect index
    names one element several times (duplicate offsets), every contribution is added, as the DMA
    engines' read-modify-write does; a plain scatter would keep only the last. Computed in fp32 (the
    DMA engines' arithmetic), rounded to the tensor's dtype once per element."""
    t = acc.tensor
    idx = acc.index
    arrays = [np.broadcast_to(a, idx.out_shape) for a in idx.arrays()]
    vals = np.broadcast_to(dt.compute_view(np.asarray(vals)).astype(np.float32), idx.out_shape)
    m = _full_mask(mask, idx.out_shape)
    if m is not None:
        arrays, vals = [a[m] for a in arrays], vals[m]
    idx._check_bounds(arrays, t.name)
    if t._borrowers:
        t.materialize_borrowers()
    flat = np.ravel_multi_index(tuple(np.ravel(a) for a in arrays), t.shape) if arrays else np.zeros(1, np.int64)
    elems, slot = np.unique(flat, return_inverse=True)
    where = np.unravel_index(elems, t.shape)
    sums = dt.compute_view(t.data[where]).astype(np.float32)
    np.add.at(sums, slot.reshape(-1), np.ravel(vals))
    t.data[where] = dt.cast(sums, t.dtype)
    _log_atomic_write(t, acc, mask, vals, what)


def _log_atomic_write(t, acc, mask, vals, what):
    """Log an atomic accumulation for the profiler and the diagnostics. Programs accumulating into
    the same elements do not race (addition commutes), so a later atomic write overlapping earlier
    writes is marked benign; reads or plain writes after it by other programs still race."""

    _prof.dma(t, vals, "write", acc, mask, written=True)
    prog = current_or_none()
    log = getattr(prog.launch, "diag", None) if prog is not None and not prog.nb else None
    if log is not None:
        key = _diag._tensor_key(t)
        ent = log.tensors.get(key)
        if ent is not None and ent[2]:
            log.repeats.setdefault(key, set()).add(len(ent[2]) - 1)


@instruction(engine="DMA", cost=_costs.dma_transfers, batched=True)
def dma_copy(dst, src, priority=None, oob_mode=_oob_mode.error, dge_mode=_dge_mode.unknown, engine=_engine.unknown,
             name=None, *, dst_rmw_op=None, unique_indices=True):
    """Copy ``src`` to ``dst`` with a DMA engine: each is an HBM tensor/region or an SBUF tile (PSUM is
    not reachable). Element counts must match (shapes may differ); different dtypes convert
    through fp32. ``oob_mode=skip`` skips the out-of-bounds part of an access with run-time offsets
    (whole partitions for ``vector_offset``, elements for ``scalar_offset``); on a direct access it is the
    ordinary bounds-checked copy. ``priority``, ``dge_mode`` and ``engine`` do not change results. Keyword-only, from
    earlier releases' page: ``dst_rmw_op=nl.add`` adds src to what dst holds (only with
    oob_mode=error) and ``unique_indices``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.dma_copy.html)
    """
    op = "dma_copy"
    # (the default mode is tested by identity first: an enum's .value is two Python calls per DMA)
    if dge_mode is not _dge_mode.unknown and getattr(dge_mode, "value", None) == "hwdge":
        sdt, ddt = getattr(src, "dtype", None), getattr(dst, "dtype", None)
        if sdt is not None and ddt is not None and np.dtype(sdt) != np.dtype(ddt):
            # NKI 0.3.0: "Enforces matching source and destination element types when using
            # dge_mode=dge_mode.hwdge. Use .view() to reinterpret types."
            raise NKIError("dtype", f"nisa.{op}(dge_mode=hwdge): src dtype {sdt} and dst dtype {ddt} differ; a "
                           "Hardware DGE copy moves elements of one type (use .view() to reinterpret)")
    _cores.before_load()  # (which tile takes an HBM read's values: the LNC race check asks if they are used)
    if oob_mode is not _oob_mode.error and getattr(oob_mode, "value", oob_mode) == "skip":
        if getattr(current_or_none(), "nb", 0):
            raise NotBatchable(f"nisa.{op}: oob_mode=skip in a batch of programs")
        if dst_rmw_op is not None:
            raise NKIError("oob_mode", f"nisa.{op}: dst_rmw_op allows only oob_mode=oob_mode.error")
        if copy_skipping_oob(dst, src, op):
            _cores.after_load(dst)
            return
    if dst_rmw_op is not None and getattr(current_or_none(), "nb", 0):
        raise NotBatchable(f"nisa.{op}: dst_rmw_op in a batch of programs")
    vals = np.asarray(read(src, op))
    prog = _tls.program
    batch = prog is not None and prog.nb
    if batch:
        vals = _per_program(src, vals)
    # (borrow wants a fresh tile: its deferred fill pending, tested first as the cheap part)
    if dst_rmw_op is None and isinstance(dst, Tile) and dst._thunk is not None and isinstance(src, (Access, HBMTensor)) \
            and borrow(dst, src.tensor if isinstance(src, Access) else src, vals):
        _cores.after_load(dst)  # (HBM into a fresh tile: it views HBM copy-on-write, as nl.load's tiles)
        return
    if (not batch and dst_rmw_op is None and type(dst) is Tile and dst.buffer is sbuf and type(vals) is np.ndarray
            and vals.dtype == dst.dtype and vals.shape == dst.shape):
        # (into an SBUF tile of its dtype and shape outside a batch: store()'s steps for it, without its
        # tests for the other destinations)
        write(dst, vals, op, lazy_text(("source (shape {})", vals.shape)))
        _cores.after_load(dst)
        return
    what = lazy_text(("source (shape {})", vals.shape))
    if dst_rmw_op is not None:
        if alu(dst_rmw_op) is not np.add:
            raise NKIError("dst_rmw_op", f"nisa.{op}: dst_rmw_op {dst_rmw_op!r}; only nl.add is supported")
        if isinstance(dst, (Access, HBMTensor)):  # duplicate indirect offsets add up, as atomics do
            acc = _transfers._as_access(dst, "dst", f"nisa.{op}")
            if math.prod(acc.shape) != vals.size:
                raise NKIError("dst shape", f"nisa.{op}: dst has {math.prod(acc.shape)} elements, src {vals.size}")
            accumulate_into_hbm(acc, np.reshape(vals, acc.shape), None, f"nisa.{op}")
            return
        cur = np.asarray(read(dst, op, "dst"))
        if cur.size != vals.size:
            raise NKIError("dst shape", f"nisa.{op}: dst has {cur.size} elements, src {vals.size}")
        vals = dt.compute_view(cur).astype(np.float32).reshape(-1) + \
            dt.compute_view(vals).astype(np.float32).reshape(-1)
    store(dst, vals, op, what)
    _cores.after_load(dst)


@instruction(engine="DMA", cost=_costs.dma_transfers)
def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=_oob_mode.error, name=None):
    """``dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...)`` inside the DMA engines (fp32,
    rounded to dst's dtype). Sources and dst are in HBM or SBUF with the same element count;
    ``reduce_op`` must be ``nl.add`` and every scale 1.0 (or ``scales=None``): the engines have no other
    scale (NKI 0.4.0 removed the official simulator's "fictional additive scale mode").
    ``oob_mode`` (NKI 0.4.0): ``error`` refuses an out-of-bounds run-time offset; ``skip``, only with
    indirect (``vector_offset``) operands, reads an out-of-bounds element as nothing added and drops
    its write, so a gather leaves those dst partitions and a scatter those HBM rows unmodified.
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
    skip = _compute_oob_mode(oob_mode, dst, srcs)
    vals = [dt.compute_view(np.asarray(_read_skipping(s, op, f"srcs[{i}]") if skip else read(s, op, f"srcs[{i}]")))
            .astype(np.float32) for i, s in enumerate(srcs)]
    n = {int(v.size) for v in vals}
    if len(n) != 1:
        raise NKIError("operand shapes", f"nisa.{op}: sources have different element counts "
                       f"{[tuple(v.shape) for v in vals]}")
    acc = vals[0].reshape(-1).copy()
    for v in vals[1:]:
        acc += v.reshape(-1)  # (every scale is 1.0: the rule above)
    lay = dynamic_layout(dst) if skip else None
    if lay is None:
        store(dst, acc, op, "reduction")
        return
    keep, addr, flat = _in_bounds(lay, f"nisa.{op}(oob_mode=skip)")
    if addr.size != acc.size:
        raise NKIError("dst shape", f"nisa.{op}: dst {tuple(lay.shape)} has {addr.size} elements, the reduction "
                       f"{acc.size}")
    sel = np.flatnonzero(keep.reshape(-1))
    if sel.size:
        at = addr.reshape(-1)[sel]
        _transfers.store(Access(flat, Index(flat.shape, at.shape, [at])), dt.through_fp32(acc[sel], lay.dtype))


def _compute_oob_mode(oob_mode, dst, srcs):
    """Whether ``dma_compute`` skips out-of-bounds elements: ``oob_mode`` is ``oob_mode.error`` or
    ``oob_mode.skip``, and "validation ensures oob_mode.skip is used only with indirect indexing" (NKI
    0.4.0 release notes): an operand with run-time (``vector_offset``) offsets."""
    mode = getattr(oob_mode, "value", None)
    if not isinstance(oob_mode, _oob_mode) or mode not in ("error", "skip"):
        raise NKIError("oob_mode", f"nisa.dma_compute: oob_mode={oob_mode!r}; it must be nki.isa.oob_mode.error "
                       "or nki.isa.oob_mode.skip")
    if mode == "error":
        return False
    if all(dynamic_layout(x) is None for x in (dst, *srcs)):
        raise NKIError("oob_mode", "nisa.dma_compute: oob_mode=skip is only for indirect gather / scatter (an "
                       "operand with a vector_offset access pattern); no operand has run-time offsets")
    if getattr(current_or_none(), "nb", 0):
        raise NotBatchable("nisa.dma_compute: oob_mode=skip in a batch of programs")
    return True


def _read_skipping(x, op, what):
    """The values of DMA operand ``x``, an element whose run-time offset is out of bounds read as 0 (it
    adds nothing to the reduction: ``oob_mode.skip`` "silently skips any operations involving
    out-of-bounds indices")."""
    lay = dynamic_layout(x)
    if lay is None:
        return np.asarray(read(x, op, what))
    keep, addr, flat = _in_bounds(lay, f"nisa.{op}(oob_mode=skip)")
    out = np.zeros(addr.shape, lay.dtype)
    if keep.any():
        at = addr[keep]
        out[keep] = Index(flat.shape, at.shape, [at]).read(flat.data, None, what=flat.name)
    return out


_TRANSPOSE_AXES = ((1, 0), (2, 1, 0), (3, 1, 2, 0))  # the page's "Supported axes"


def _transpose_rules(dst, src, axes, dge_mode):
    """dma_transpose's page (v2.32): dst "must be a tile in SBUF"; ``src.dtype == dst.dtype``; axes
    (1, 0), (2, 1, 0) or (3, 1, 2, 0); with ``dge_mode=hwdge`` (a Hardware DGE transpose) a 2-D
    src has 16 partitions, a 3-D/4-D src ``src.shape[0]`` in {1, 2, 4, 8, 16} with
    ``src.shape[0] * src.shape[-2]`` a multiple of 16, ``src.shape[-1] <= 128`` and a 2-byte dtype."""
    op = "dma_transpose"
    if isinstance(dst, (Access, HBMTensor)) or (isinstance(dst, Tile) and dst.buffer is not sbuf):
        where = "HBM" if isinstance(dst, (Access, HBMTensor)) else dst.buffer.name.upper()
        raise NKIError("dst memory", f"nisa.{op}: dst (shape {tuple(dst.shape)}) is in {where}; the destination "
                       "of a DMA transpose must be a tile in SBUF")
    sdt, ddt = getattr(src, "dtype", None), getattr(dst, "dtype", None)
    if sdt is not None and ddt is not None and np.dtype(sdt) != np.dtype(ddt):
        raise NKIError("dtype", f"nisa.{op}: src dtype {sdt} and dst dtype {ddt} differ; the transpose copies "
                       "elements, src.dtype == dst.dtype")
    if axes is not None and tuple(int(a) for a in axes) not in _TRANSPOSE_AXES:
        raise NKIError("axes", f"nisa.{op}: axes={tuple(axes)}; the supported axes are (1, 0), (2, 1, 0) and "
                       "(3, 1, 2, 0)")
    if getattr(dge_mode, "value", dge_mode) == "hwdge":
        shape = tuple(src.shape)
        rule = None
        if len(shape) == 2 and shape[0] != 16:
            rule = "src.shape[0] == 16 for a 2-D src"
        elif len(shape) in (3, 4) and (shape[0] not in (1, 2, 4, 8, 16) or (shape[0] * shape[-2]) % 16):
            rule = ("src.shape[0] in {1, 2, 4, 8, 16} and (src.shape[0] * src.shape[-2]) % 16 == 0 for a "
                    "3-D/4-D src")
        elif shape[-1] > 128:
            rule = "src.shape[-1] <= 128"
        elif sdt is not None and np.dtype(sdt).itemsize != 2:
            rule = f"a 2-byte src.dtype (src is {sdt})"
        if rule is not None:
            raise NKIError("dge_mode", f"nisa.{op}(dge_mode=hwdge): src shape {shape}: a Hardware DGE transpose "
                           f"requires {rule}")


@instruction(engine="DMA", cost=_costs.dma_transfers, batched=True)
def dma_transpose(dst, src, axes=None, priority=None, dge_mode=_dge_mode.unknown, oob_mode=_oob_mode.error, name=None):
    """Transpose ``src`` (HBM or SBUF) into ``dst`` (SBUF) through DMA: 2-D swaps the axes, 3-D
    reverses them, 4-D permutes ``[3, 1, 2, 0]`` (``axes``, when given, is one of these); src and dst
    have the same dtype; ``dge_mode=hwdge`` adds the Hardware DGE limits (see :func:`_transpose_rules`).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.32.0/nki/api/generated/nki.isa.dma_transpose.html)
    """
    _transpose_rules(dst, src, axes, dge_mode)
    _transpose(dst, src, axes)


def _transpose(dst, src, axes=None):
    """The transposition of :func:`dma_transpose` without the current page's rules (the first
    generation's ``dma_transpose`` takes any permutation and casts to its ``dtype``)."""
    vals = _per_program(src, np.asarray(read(src, "dma_transpose")))
    nb = getattr(current_or_none(), "nb", 0)
    perm = tuple(axes) if axes is not None else {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(vals.ndim - nb)
    if perm is None:
        raise NKIError("dma_transpose", f"nisa.dma_transpose takes a 2-D to 4-D source, got shape {vals.shape[nb:]}")
    out = np.ascontiguousarray(np.transpose(vals, tuple(range(nb)) + tuple(p + nb for p in perm)))
    shape = out.shape[nb:]
    if isinstance(dst, Tile) and tuple(dst.shape) != shape and dst.shape[0] != shape[0]:
        raise NKIError("dst shape", f"nisa.dma_transpose: dst has shape {dst.shape}, the transposed source has "
                       f"shape {shape}")
    store(dst, out, "dma_transpose", "transposed source")


_transpose.__name__ = "dma_transpose"  # (the instruction's name in messages and the engine logs)
transpose_gen1 = instruction(batched=True)(_transpose)


# ---------------------------------------------------------------------------
# DMA with run-time offsets (vector_offset / scalar_offset) and oob_mode=skip
# ---------------------------------------------------------------------------
def dynamic_layout(x):
    """The layout of an HBM view whose offsets are read at run time (vector or scalar), else ``None``."""
    if not isinstance(x, HBMTensor):
        return None
    lay = x.__dict__.get("_layout")
    return lay if lay is not None and lay.dynamic is not None else None


def _in_bounds(lay, what):
    """``(keep, addr, flat)``: which elements the DMA moves, their element addresses and a flat HBM
    view of the storage to address them through. A vector offset gives each partition its own
    descriptor, so a partition moves whole or not at all; a scalar offset moves the elements that
    lie inside the storage ("silently skip the runtime out-of-bounds access", nki.isa.oob_mode)."""

    addr, ok = ap.addresses_now(lay, what)
    if lay.dynamic.kind == "vector":
        ok = np.broadcast_to(ok.reshape(lay.shape[0], -1).all(axis=1).reshape((-1,) + (1,) * (ok.ndim - 1)),
                             ok.shape)
    n = ap._storage_elems(lay.root, lay.dtype)
    flat = HBMTensor(ap._storage_bytes(lay.root)[: n * lay.dtype.itemsize].view(lay.dtype), lay.root.buffer,
                     lay.root.name)
    ap._share_hbm(flat, lay.root)
    return ok, addr, flat


def copy_skipping_oob(dst, src, op):
    """``dma_copy`` with ``oob_mode=skip``: a gather (src with run-time offsets) leaves the dst elements
    whose source is out of bounds unmodified; a scatter (dst with run-time offsets) drops the elements
    whose destination is out of bounds (whole partitions for vector offsets). Returns False, copying
    nothing, when neither side has run-time offsets: the pages give ``skip`` no meaning for a direct
    access, whose bounds are static, so the caller's bounds-checked copy applies (nki-library's MoE CTE
    passes ``skip`` for a plain ``.ap`` store when its config skips token DMAs)."""
    what = f"nisa.{op}(oob_mode=skip)"
    src_lay, dst_lay = dynamic_layout(src), dynamic_layout(dst)
    if src_lay is not None and dst_lay is not None:
        raise NKIError("indirect DMA", f"{what}: at most one side of a DMA has run-time offsets")
    if src_lay is not None:
        keep, addr, flat = _in_bounds(src_lay, what)
        d = check_dst(dst, op, (sbuf,))
        if int(np.prod(d.shape)) != addr.size:
            raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must hold the gathered {tuple(src_lay.shape)}")
        out = np.array(np.reshape(d.data, -1))
        sel = np.flatnonzero(keep.reshape(-1))
        if sel.size:
            acc_addr = addr.reshape(-1)[sel]
            idx = Index(flat.shape, acc_addr.shape, [acc_addr])
            got = idx.read(flat.data, None, what=flat.name)
            _prof.dma(flat, got, "read", Access(flat, idx), None)  # (the HBM access log needs the access)
            out[sel] = dt.cast(dt.compute_view(got), d.dtype) if got.dtype != d.dtype else got
        write(d, out.reshape(d.shape), op, "gathered elements")
        return True
    if dst_lay is not None:
        keep, addr, flat = _in_bounds(dst_lay, what)
        vals = np.asarray(read(src, op))
        if int(np.size(vals)) != addr.size:
            raise NKIError("dst shape", f"nisa.{op}: src has {int(np.size(vals))} elements, the scatter "
                           f"{tuple(dst_lay.shape)} {addr.size}")
        sel = np.flatnonzero(keep.reshape(-1))
        if sel.size:
            acc_addr = addr.reshape(-1)[sel]
            _transfers.store(Access(flat, Index(flat.shape, acc_addr.shape, [acc_addr])), np.reshape(vals, -1)[sel])
        return True
    src_ind, dst_ind = _indirect_access(src), _indirect_access(dst)
    if src_ind is not None and dst_ind is not None:
        raise NKIError("indirect DMA", f"{what}: at most one side of a DMA is indexed by a tile")
    if src_ind is not None:
        keep = _indirect_in_bounds(src_ind)
        got = src_ind.index.read(src_ind.tensor.data, keep, what=src_ind.tensor.name)
        _prof.dma(src_ind.tensor, got, "read", src_ind, keep)
        d = check_dst(dst, op, (sbuf,))
        if int(np.prod(d.shape)) != got.size:
            raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must hold the gathered {tuple(got.shape)}")
        got = dt.cast(dt.compute_view(got), d.dtype) if got.dtype != d.dtype else got
        out = np.where(keep.reshape(d.shape), got.reshape(d.shape), d.data)
        write(d, out, op, "gathered elements")
        return True
    if dst_ind is not None:
        keep = _indirect_in_bounds(dst_ind)
        vals = np.asarray(read(src, op))
        if int(np.size(vals)) != keep.size:
            raise NKIError("dst shape", f"nisa.{op}: src has {int(np.size(vals))} elements, the scatter "
                           f"{dst_ind.tensor.name}{list(dst_ind.shape)} {keep.size}")
        t = dst_ind.tensor
        vals = np.reshape(vals, keep.shape)
        if t._borrowers:
            t.materialize_borrowers()
        _prof.dma(t, vals, "write", dst_ind, keep)
        dst_ind.index.write(t.data, dt.cast(vals, t.dtype), keep, what=t.name)
        return True
    return False


def _indirect_access(x):
    """``x`` when it is an HBM access indexed by a tile's values (the first generation's
    ``tensor[idx_tile, i_f]`` gather / scatter), else ``None``."""
    if isinstance(x, Access) and any(isinstance(c, np.ndarray) for c in x.index.comps):
        return x
    return None


def _indirect_in_bounds(acc):
    """Which elements of an indirect access have every tile-given offset inside its axis: the ones
    ``oob_mode=skip`` moves ("silently skip the runtime out-of-bounds access"). Offsets known at
    compile time stay bounds-checked when the access is read or written."""
    idx = acc.index
    keep = np.ones(idx.out_shape, bool)
    for comp, arr, dim in zip(idx.comps, idx.arrays(), idx.shape):
        if isinstance(comp, np.ndarray):
            a = np.broadcast_to(arr, idx.out_shape)
            keep &= (a >= 0) & (a < dim)
    return keep
