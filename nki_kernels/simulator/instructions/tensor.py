"""Tensor Engine instructions: ``nc_matmul`` and ``nc_transpose`` (destination-style).

The arithmetic is the first generation's (``nki_kernels.simulator.isa``: fp32
products, operand and tile-size rules); these functions add the destination
rules of the current reference and PSUM accumulation. ``nc_matmul_mx`` is in
:mod:`.mx`.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import recording as _prof
from ..access_pattern import layout_of
from ..core import PSUM_BANK_BYTES, PSUM_BYTES_PER_PARTITION, Tile, psum, sbuf
from ..errors import NKIError, NotBatchable
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from .registry import Gen1
from . import functional as _functional  # the computing forms both generations share
from .operands import check_dst, engine_name, fit_dst, instruction, lazy_text, scratch, write, write_accumulating
from .target import engine as _engine
from .target import get_nc_version, matmul_perf_mode, nc_version


_PERF_NONE = matmul_perf_mode.none


def one_bank(d, op):
    """A Tensor-engine result ``d`` lies inside one 2 KiB PSUM bank of each partition.

    Standalone PSUM tensors may span banks (``nl.tile_size.psum_num_banks``); the
    engine writes one bank, so a result view of such a tensor must not cross a
    bank boundary (a tensor is taken to start at a bank, as the allocator places it)."""
    if d._parent is None and not d.pdim and d._thunk is None and not d.nb:
        data = d._data  # (a plain tile: its bytes per partition without the property calls)
        parts = data.shape[0] if data.ndim else 0
        if parts and data.size // parts * data.itemsize <= PSUM_BANK_BYTES:
            return
    root = d
    while root._parent is not None:
        root = root._parent
    if root.bytes_per_partition() // root.blocks() <= PSUM_BANK_BYTES:
        return
    lay = layout_of(d)
    free = root.bytes_per_partition() // d.dtype.itemsize
    f0 = lay.offset % free
    lo = f0 + sum(min(0, (n - 1) * s) for n, s in zip(lay.shape[1:], lay.strides[1:]))
    hi = f0 + sum(max(0, (n - 1) * s) for n, s in zip(lay.shape[1:], lay.strides[1:]))
    first, last = lo * d.dtype.itemsize // PSUM_BANK_BYTES, ((hi + 1) * d.dtype.itemsize - 1) // PSUM_BANK_BYTES
    if first != last:
        raise NKIError("PSUM bank", f"nisa.{op}: dst (shape {d.shape} {d.dtype}) covers bytes "
                       f"{lo * d.dtype.itemsize}..{(hi + 1) * d.dtype.itemsize - 1} of each partition of a PSUM tensor "
                       f"{root.shape}, crossing from bank {first} into bank {last}; a Tensor engine result fits one "
                       f"{PSUM_BANK_BYTES} B bank (nl.tile_size.psum_fmax fp32 elements)")


def moving_fmax(d):
    """The largest moving free size of a matmul into ``d``, or ``None`` for ``gemm_moving_fmax`` (512, one
    PSUM bank of fp32) before NeuronCore-v4. From v4 the result may fill the whole PSUM, 8 banks of
    2 KiB: 4096 elements of a float32 ``dst``, 8192 of a bfloat16 one (nc_matmul page, Neuron 2.32;
    the 8192 bf16 limit is NKI 0.5.0's release note)."""
    if get_nc_version() < nc_version.gen4:
        return None
    return PSUM_BYTES_PER_PARTITION // (2 if d.dtype == dt.bfloat16 else 4)


def _row_pairs(perf_mode, stationary, moving) -> bool:
    """``perf_mode=double_row`` with both operands ``[K, 2, free]`` (a pair of rows per partition)."""
    if perf_mode is _PERF_NONE:  # (the default, without the enum's value property)
        return False
    name = getattr(perf_mode, "value", perf_mode)
    return (name in ("double_row", "double_row_gen3") and isinstance(stationary, Tile) and isinstance(moving, Tile)
            and len(stationary.shape) == 3 and len(moving.shape) == 3 and stationary.shape[1] == 2
            and moving.shape[1] == 2)


def _unit_free_axes_dropped(t):
    """``t`` without its size-1 free axes (a view), while it has more than two axes."""
    while isinstance(t, Tile) and len(t.shape) > 2 and 1 in t.shape[1:]:
        t = t.squeeze_dim(list(t.shape).index(1, 1))
    return t


def _free_axes_flattened(t):
    """A 3-D+ operand ``t`` [K, a, b, ...] as the [K, a * b * ...] matrix of its free axes in row-major
    order (a scratch copy, read only): the engine streams every element of an access pattern, and NKI
    0.4.0 fixed the official simulator's 3-D+ operands ("nc_matmul with 3D+ operand shapes now copies all
    elements", release notes); the page sizes dst by the operands' free sizes."""
    if not isinstance(t, Tile) or len(t.shape) <= 2:
        return t
    data = t.data
    with scratch():
        return Tile(np.reshape(data, data.shape[:t.nb] + (t.shape[0], -1)), t.buffer)


def _fp8_flavours(stationary, moving):
    """The page's float8_e4m3fn rules: "Starting NeuronCore-v4, float8_e4m3fn (OCP FP8) is also supported;
    float8_e4m3 (legacy) and float8_e4m3fn cannot be mixed in the same matmul" (NKI 0.4.0)."""
    kinds = {getattr(t, "dtype", None) for t in (stationary, moving)}
    if dt.float8_e4m3fn in kinds and dt.float8_e4m3 in kinds:
        raise NKIError("matmul operands", "nisa.nc_matmul: float8_e4m3 (legacy) and float8_e4m3fn (OCP FP8) "
                       "operands cannot be mixed in the same matmul")
    if dt.float8_e4m3fn in kinds and get_nc_version() < nc_version.gen4:
        raise NKIError("matmul operands", "nisa.nc_matmul: float8_e4m3fn (OCP FP8) operands need NeuronCore-v4; "
                       f"the target is {get_nc_version().name} (use float8_e4m3)")


@instruction(engine="Tensor", cost=_costs.matmul, batched=True, gen1=Gen1(batched=True))
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None):
    """``dst = stationary.T @ moving`` (or ``+=``) on the Tensor engine; ``dst`` must be a PSUM tile.

    stationary [K, M] and moving [K, N] are SBUF tiles with K <= 128, M <= 128,
    N <= 512 inside one PSUM bank (from NeuronCore-v4: N <= 4096 for a float32 ``dst``, 8192 for a
    bfloat16 one, across the 8 banks); ``dst`` is [M, N], fp32 (bf16 from NeuronCore-v4). ``accumulate``:
    ``False`` overwrites, ``True`` adds to what ``dst`` holds (which must have
    been written before), ``None`` (default) overwrites the elements never
    written and accumulates onto the others, as the compiler infers "first write
    overwrites, later writes accumulate". ``perf_mode=double_row`` (FP8 double
    performance mode, NeuronCore-v3+) gives the same results; ``tile_position`` /
    ``tile_size`` (PE-array tiling) do not change results. Without double_row a 3-D+ operand is the
    matrix of its flattened free axes (:func:`_free_axes_flattened`); float8_e4m3fn operands need
    NeuronCore-v4 and never meet float8_e4m3 ones (:func:`_fp8_flavours`).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_matmul.html).
    """
    gen1 = _functional
    d = check_dst(dst, "nc_matmul", (psum,))
    if is_transpose and isinstance(stationary, Tile) and d.dtype == stationary.dtype:
        # a PE-array transpose (nc_transpose's Tensor-engine form, "equivalent to calling nisa.nc_matmul
        # directly with is_transpose=True") moves data and may write its input's dtype on every
        # NeuronCore version ("The output dst tile must have the same data type as that of data";
        # nki-library moe_cte transposes bf16 into bf16 PSUM on Trn2)
        pass
    elif d.dtype not in (dt.float32, dt.bfloat16):
        raise NKIError("dst dtype", f"nisa.nc_matmul: dst dtype is {d.dtype}; the matmul result tile must be "
                       "float32 (bfloat16 is accepted from NeuronCore-v4)")
    elif d.dtype == dt.bfloat16 and get_nc_version() < nc_version.gen4:
        raise NKIError("dst dtype", f"nisa.nc_matmul: a bfloat16 result tile needs NeuronCore-v4; the target is "
                       f"{get_nc_version().name} (write float32 to PSUM)")
    if isinstance(stationary, Tile) and isinstance(moving, Tile):
        s32, m32 = stationary.dtype == dt.float32, moving.dtype == dt.float32
        if s32 != m32:
            an, bn, b = ("stationary", "moving", moving) if s32 else ("moving", "stationary", stationary)
            raise NKIError("matmul operands", f"nisa.nc_matmul: {an} is float32 but {bn} is {b.dtype}; if one "
                           "input is float32/tfloat32 the other must be too")
    # a size-1 free axis moves neither the element order nor the count: [K, 1, M] is the [K, M] matrix
    # (nki-library moe_cte upcasts quantized gate/up weights into a (128, 1, n) tile and multiplies it)
    pairs = _row_pairs(perf_mode, stationary, moving)
    if not pairs:
        stationary, moving = _unit_free_axes_dropped(stationary), _unit_free_axes_dropped(moving)
        stationary, moving = _free_axes_flattened(stationary), _free_axes_flattened(moving)
    gen1._perf_mode_rule(perf_mode, stationary, moving)
    _fp8_flavours(stationary, moving)
    fmax = moving_fmax(d)
    if fmax is None:
        one_bank(d, "nc_matmul")  # (from NeuronCore-v4 a result may span the 8 banks: moving_fmax)
    if pairs:
        # FP8 double-row mode packs two rows per PE: operands [K, 2, M] / [K, 2, N] contract over K and
        # the pair (nki-library output_projection_tkg: heads 2p and 2p+1 in one matmul)
        prod = sum(gen1._matmul_product(stationary.select(1, j), moving.select(1, j), moving_fmax=fmax)
                   for j in range(2))
    else:
        prod = gen1._matmul_product(stationary, moving, moving_fmax=fmax)
    _prof.instruction("Tensor", prod)
    vals = fit_dst(d, prod, "nc_matmul", lazy_text(("product stationary.T @ moving ({}x{})", prod.shape[-2],
                                                     prod.shape[-1])))
    write_accumulating(d, vals, accumulate, "nc_matmul")


@instruction(engine="Tensor", cost=_costs.transpose, batched=True, gen1=Gen1(batched=True))
def nc_transpose(dst, data, engine=_engine.unknown, name=None):
    """Transpose partition and (flattened) free axes of ``data`` into ``dst``.

    Tensor engine: <= 128x128, SBUF in, PSUM out. Vector engine: <= 32x32, SBUF
    or PSUM either way. With ``engine`` unknown the simulator picks Tensor when
    ``data`` is in SBUF and ``dst`` in PSUM, else Vector. ``dst`` has ``data``'s dtype.
    """
    gen1 = _functional
    d = check_dst(dst, "nc_transpose")
    x = gen1._tile(data, "data", "nc_transpose")
    eng = engine_name(engine)
    if eng == "unknown":
        eng = "Tensor" if (x.buffer is sbuf and d.buffer is psum) else "Vector"
    if eng == "Tensor" and (x.buffer is not sbuf or d.buffer is not psum):
        raise NKIError("operand memory", f"nisa.nc_transpose on the Tensor engine reads SBUF and writes PSUM; "
                       f"got data in {x.buffer.name.upper()} and dst in {d.buffer.name.upper()}")
    if eng == "Tensor":
        one_bank(d, "nc_transpose")
    if d.dtype != x.dtype:
        raise NKIError("dst dtype", f"nisa.nc_transpose: dst dtype {d.dtype} differs from data dtype {x.dtype}; "
                       "the transpose output has the input's dtype")
    if x.nb and x.ndim != 2:
        raise NotBatchable("nisa.nc_transpose: a data tile of more than two axes in a batch of programs")
    with scratch():
        src = x if x.ndim == 2 else Tile(x.data.reshape(x.shape[0], -1), x.buffer)
        res = gen1.nc_transpose(src, engine="Vector" if eng == "Vector" else "Tensor")
    write(d, res.data, "nc_transpose", f"transpose of {src.shape}")
