"""``nki.isa`` (``nisa``) on NumPy: one function per engine instruction.

Semantics follow the neuronxcc.nki.isa reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/api/nki.isa.html).
The Tensor engine contracts over the partition axis: ``nc_matmul(stationary,
moving)`` computes ``stationary.T @ moving`` with K (partitions) <= 128,
stationary free size <= 128 and moving free size <= 512, writing fp32 to PSUM.
"""

import inspect as _inspect

import numpy as _np

from . import diagnostics as _diag
from . import dtypes as _dt
from . import language as _nl
from . import memory as _memory
from . import recording as _prof
from .core import PMAX as _PMAX, Access as _Access, HBMTensor as _HBMTensor, Tile as _Tile
from .core import psum as _psum, sbuf as _sbuf
from .core import current_or_none as _current_or_none
from .core import read_inside as _read_inside
from .errors import NKIError as _NKIError
from .errors import NotBatchable as _NotBatchable
from .indexing import _full_mask
from .instructions import operands as _ops
from .instructions import registry as _registry
from .instructions import mx as _mx, scalar as _scalar, tensor as _tensor  # noqa: F401 - declare their instructions
from .instructions import registers as _regs
from .instructions import dma as _dma
from .instructions import gpsimd as _gpsimd
from .instructions import rng as _rng
from .instructions import vector as _vector
from .instructions import vector_search as _vector_search
from .instructions.target import dge_mode, engine, get_nc_version, nc_version, reduce_cmd
from .instructions.target import matmul_perf_mode as _matmul_perf_mode
from .instructions.target import oob_mode


unknown_engine = engine.unknown
tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
dma_engine = engine.dma  # "DMA Engine" on the v2.20 .. v2.22 pages' engine list


def _tile(x, name, op, buffers=(_sbuf, _psum), mask=None):
    if not isinstance(x, _Tile):
        _nl._values(x, name)
        raise _NKIError("operand type", f"nisa.{op}: {name} must be a tile, got {type(x).__name__}")
    if x._thunk is not None:
        x = _read_inside(x, mask)
    if x.buffer not in buffers:
        allowed = " or ".join(b.name.upper() for b in buffers)
        raise _NKIError("operand memory", f"nisa.{op}: {name} (shape {x.shape}) is in {x.buffer.name.upper()}; "
                       f"this operand must be in {allowed}")
    if x._diag is not None or _diag.loops:
        _diag.on_read(x)
    return x


def _reading_mask(x, mask, out_shape, op):
    """``(operand, result mask)`` of an instruction whose result is not element-for-element its
    operand (``bn_stats``, ``max8``, ``tensor_reduce``): a ``mask`` of the result's shape masks the
    result, as for every instruction; a mask written in the operand's index space (``j * F + i_f <
    n`` over the free axis of ``t[i_p, j * F + i_f]``) selects the operand elements the instruction
    reads -- its free-axis box is the operand the instruction sees, its partition rows the rows of
    the result it writes."""
    if mask is None:
        return x, None
    try:
        fits = _np.broadcast_shapes(_np.shape(mask), tuple(out_shape)) == tuple(out_shape)
    except ValueError:
        fits = False
    if fits:
        return x, mask
    try:
        if _full_mask(mask, tuple(x.shape)) is None:
            return x, None  # (it selects every element of the operand)
    except _NKIError:
        pass
    box = _nl.mask_box(mask, tuple(x.shape)) if isinstance(mask, _nl.Mask) else None
    if box is None:
        raise _NKIError("mask shape", f"nisa.{op}: mask of shape {_np.shape(mask)} fits neither the result "
                        f"{tuple(out_shape)} nor, as a box of elements to read, the operand {tuple(x.shape)}")
    if any(b.stop <= b.start for b in box[1:]):
        raise _NKIError("mask", f"nisa.{op}: the mask selects no element of the operand {tuple(x.shape)}")
    sub = x[(slice(None),) + tuple(box[1:])] if any((b.start, b.stop) != (0, n) for b, n in
                                                    zip(box[1:], x.shape[1:])) else x
    rows = box[0]
    if (rows.start, rows.stop) == (0, x.shape[0]):
        return sub, None
    keep = _np.zeros(tuple(out_shape), bool)
    keep[rows] = True
    return sub, keep


def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, perf_mode=None, name=None):
    """``stationary.T @ moving`` on the Tensor engine; fp32 result tile in PSUM.

    stationary is [K, M], moving is [K, N]: K <= 128 partitions (the contraction),
    M <= 128 (``gemm_stationary_fmax``), N <= 512 (``gemm_moving_fmax``). ``tile_position`` /
    ``tile_size`` (PE-array tiling), ``perf_mode`` and ``name`` do not change results.
    """
    return _nl._result(_matmul_product(stationary, moving, perf_mode), _dt.float32, mask, buffer=_psum,
                       engine="Tensor")


def _matmul_product(stationary, moving, perf_mode=None):
    """The checked operands' product ``stationary.T @ moving`` in fp32 (an array; the standalone
    ``nc_matmul`` writes it into its ``dst``)."""
    # The first generation's compiler places tiles: a PSUM result fed to nc_matmul (the official
    # flash-attention backward transposes dy on the Tensor engine and multiplies it) is copied to
    # SBUF for it, so PSUM operands are accepted here; the standalone API (dst=) has no such copies.
    s = _tile(stationary, "stationary", "nc_matmul", (_sbuf, _psum))
    m = _tile(moving, "moving", "nc_matmul", (_sbuf, _psum))
    s_shape, m_shape = s.shape, m.shape
    pair = _double_row(perf_mode, s_shape, m_shape)
    if pair:
        s_shape, m_shape = (s_shape[0], s_shape[2]), (m_shape[0], m_shape[2])
    elif len(s_shape) != 2 or len(m_shape) != 2:
        raise _NKIError("matmul operands", f"nc_matmul needs 2-D tiles, got stationary {s.shape} and moving {m.shape}"
                        + ("; with perf_mode=double_row each is [K, 2, free], the FP8 pair of rows a partition "
                           "holds" if len(s_shape) == 3 or len(m_shape) == 3 else ""))
    _matmul_dtypes(s, m)
    _perf_mode_rule(perf_mode, s, m)
    k, mm = s_shape
    k2, n = m_shape
    if k != k2:
        raise _NKIError("matmul operands", f"contraction (partition) sizes differ: stationary {s.shape} vs "
                       f"moving {m.shape}")
    if k > _PMAX:
        raise _NKIError("matmul operands", f"contraction size K={k} > {_PMAX}")
    if mm > _nl.tile_size.gemm_stationary_fmax:
        raise _NKIError("matmul operands", f"stationary free size {mm} (shape {s.shape}) > "
                       f"{_nl.tile_size.gemm_stationary_fmax} (gemm_stationary_fmax)")
    if n > _nl.tile_size.gemm_moving_fmax:
        raise _NKIError("matmul operands", f"moving free size {n} (shape {m.shape}) > "
                       f"{_nl.tile_size.gemm_moving_fmax} (gemm_moving_fmax)")
    a = _dt.compute_view(s.data).astype(_np.float32, copy=False)
    b = _dt.compute_view(m.data).astype(_np.float32, copy=False)
    if pair:  # contract the pair with the partitions: out[i, j] = sum_{k, l} a[k, l, i] * b[k, l, j]
        a = a.reshape(a.shape[:-3] + (-1, a.shape[-1]))
        b = b.reshape(b.shape[:-3] + (-1, b.shape[-1]))
    return _np.swapaxes(a, -1, -2) @ b


def _double_row(perf_mode, s_shape, m_shape):
    """Whether ``nc_matmul`` operands are the FP8 double-row layout: ``perf_mode=double_row`` (or
    ``double_row_gen3``) with stationary ``[K, 2, M]`` and moving ``[K, 2, N]``, each partition
    holding two rows of the contraction (the documentation's double-row test computes
    ``einsum("kli,klj->ij")``); the pair doubles the contraction, not the tile limits."""
    if perf_mode is None or getattr(perf_mode, "value", perf_mode) not in ("double_row", "double_row_gen3"):
        return False
    return len(s_shape) == 3 and len(m_shape) == 3 and s_shape[1] == 2 and m_shape[1] == 2


def _perf_mode_rule(perf_mode, stationary, moving):
    """``perf_mode=double_row`` is the Tensor engine's FP8 double performance mode: NeuronCore-v3 and newer,
    fp8 operands (results are the same as the normal mode's)."""
    if perf_mode is None or perf_mode is _PERF_NONE:  # (the default, without the enum's value property)
        return
    name = getattr(perf_mode, "value", perf_mode)
    if name == "none":
        return
    if name not in ("double_row", "double_row_gen3"):
        raise _NKIError("perf_mode", f"nisa.nc_matmul: perf_mode={perf_mode!r} is not a matmul_perf_mode")
    if get_nc_version() < nc_version.gen3:
        raise _NKIError("perf_mode", f"nisa.nc_matmul: perf_mode={name} needs NeuronCore-v3 or newer; the target "
                        f"is {get_nc_version().name}")
    fp8 = (_dt.float8_e4m3, _dt.float8_e4m3fn, _dt.float8_e5m2)
    for t, what in ((stationary, "stationary"), (moving, "moving")):
        if isinstance(t, _Tile) and t.dtype not in fp8:
            raise _NKIError("perf_mode", f"nisa.nc_matmul: perf_mode={name} is the FP8 double performance mode; "
                            f"{what} is {t.dtype}")


_MATMUL_DTYPES = (_dt.float8_e4m3, _dt.float8_e4m3fn, _dt.float8_e5m2, _dt.bfloat16, _dt.float16,
                  _dt.tfloat32, _dt.float32)
_MATMUL_DTYPE_SET = frozenset(_MATMUL_DTYPES)  # (one hash lookup per operand, not up to 7 dtype comparisons)
_PERF_NONE = _matmul_perf_mode.none


def _matmul_dtypes(*operands):
    """nc_matmul reads fp8 / bf16 / fp16 / tf32 / fp32 only ("currently supports float8_e4m3/
    float8_e5m2/bfloat16/float16/tfloat32/float32 input data types"):
    https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.isa.nc_matmul.html"""
    for name, x in zip(("stationary", "moving"), operands):
        if x.dtype not in _MATMUL_DTYPE_SET:
            from . import config

            config.report("operand", _NKIError(
                "operand", f"nisa.nc_matmul: {name} (shape {x.shape}) has dtype {x.dtype}; the Tensor engine "
                "takes float8_e4m3/float8_e5m2/bfloat16/float16/tfloat32/float32 operands (cast with dtype= "
                "on nl.load or nl.copy)"))


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, name=None):
    """Transpose a 2-D tile: Tensor engine (<= 128x128, result in PSUM) or Vector (<= 32x32, SBUF)."""
    x = _tile(data, "data", "nc_transpose", mask=mask)
    if x.ndim != 2:
        raise _NKIError("transpose", f"nc_transpose needs a 2-D tile, got {x.shape}")
    on_vector = engine == "Vector"
    limit = 32 if on_vector else _PMAX
    if x.shape[0] > limit or x.shape[1] > limit:
        raise _NKIError("transpose", f"nc_transpose on the {'Vector' if on_vector else 'Tensor'} engine takes "
                       f"at most {limit}x{limit}, got {x.shape}")
    out_dtype = _nl._out_dtype(dtype, x)
    return _nl._result(_np.swapaxes(_nl._values(x, "data"), -1, -2), out_dtype, mask,
                       buffer=_sbuf if on_vector else _psum, engine="Vector" if on_vector else "Tensor")


def _per_partition(v, x, name, op):
    """A scalar or a [P, 1] tile broadcast along the free axes of ``x``."""
    if v is None:
        return None
    if isinstance(v, _Tile):
        if v.shape[0] != x.shape[0] or int(_np.prod(v.shape[1:])) != 1:
            raise _NKIError("operand shapes", f"nisa.{op}: {name} must be a scalar or a [{x.shape[0]}, 1] "
                           f"per-partition tile, got shape {v.shape}")
        d = _dt.compute_view(v.data)
        return d.reshape(d.shape[:v.nb] + (x.shape[0],) + (1,) * (x.ndim - 1))
    return _nl._values(v, name)


_DEFAULT_CMD = object()


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=_DEFAULT_CMD,
               mask=None, dtype=None, name=None):
    """``op(data * scale + bias)`` on the Scalar engine; bias/scale are scalars or [P, 1] tiles.

    With ``reduce_cmd`` the Scalar engine's per-partition accumulation registers
    take this instruction's free-axis reduction (``reduce_op``, default add):
    ``reset`` / ``reduce`` / ``reset_reduce`` / ``load_reduce`` / ``idle``, so
    ``reduce`` really accumulates across instructions; ``reduce_res`` receives
    the registers. Without ``reduce_cmd``, a given ``reduce_res`` gets this
    instruction's reduction alone (``reset_reduce``).
    """
    x = _tile(data, "data", "activation", mask=mask)
    fn = _ops.alu(op)
    if reduce_op is not None and get_nc_version() < nc_version.gen3 and _ops.alu(reduce_op) is not _np.add:
        raise _NKIError("reduce_op", f"nisa.activation: reduce_op {reduce_op!r} on NeuronCore-v2; its Scalar "
                        "engine reduces with addition only (np.add / nl.add)")
    v = _nl._values(x, "data")
    s = _per_partition(scale, x, "scale", "activation")
    b = _per_partition(bias, x, "bias", "activation")
    v = v * s if not (_np.isscalar(s) and s == 1.0) else v
    if b is not None:
        v = v + b
    out = _nl._result(fn(v), _nl._out_dtype(dtype, x), mask, engine="Scalar")
    if reduce_cmd is not _DEFAULT_CMD:
        if x.nb:
            raise _NotBatchable("nisa.activation(reduce_cmd=...) keeps per-program registers")
        _regs.accumulate("activation", "Scalar", _dt.compute_view(out.data), x.shape[0], reduce_op, reduce_res,
                         reduce_cmd)
        prog = _current_or_none()
        if prog is not None and out._mem is not None:
            # writing reduce_res is part of this instruction: `t[...] = nisa.activation(...)` still
            # moves the result into t (official attention tutorial v9/v10, all SBUF hand-placed)
            _memory.functional_result(out._mem, prog)
    elif reduce_res is not None:
        axes = tuple(range(1 + x.nb, x.ndim + x.nb))
        vals = _ops.reducer(reduce_op if reduce_op is not None else _np.add)(
            _dt.compute_view(out.data).astype(_np.float32), axis=axes, keepdims=True)
        reduce_res[...] = _Tile(_np.asarray(vals, _np.float32), _sbuf, parent=out)
    return out


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, name=None):
    """``activation`` that also reduces each partition's results into ``reduce_res``."""
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      mask=mask, dtype=dtype)


_reducer = _ops.reducer


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, name=None):
    """Reduce free ``axis`` of a tile with ``op`` (nl.add / nl.maximum / ...) on the Vector engine."""
    x = _tile(data, "data", "tensor_reduce", mask=mask)
    axes = tuple(a + x.nb for a in _nl._axes(x, axis, "tensor_reduce"))
    red = {a - x.nb for a in axes}
    out_shape = tuple(1 if i in red else n for i, n in enumerate(x.shape) if keepdims or i not in red)
    x, mask = _reading_mask(x, mask, out_shape, "tensor_reduce")
    res = _reducer(op)(_nl._values(x, "data"), axis=axes, keepdims=keepdims)
    if negate:
        res = -res
    return _nl._result(res, _nl._out_dtype(dtype, x), mask)


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, name=None):
    """Reduce across the partition axis with ``op``; result has one partition (GpSimd engine)."""
    x = _tile(data, "data", "tensor_partition_reduce", (_sbuf,), mask=mask)  # GpSimd cannot access PSUM
    res = _reducer(op)(_nl._values(x, "data"), axis=(x.nb,), keepdims=True)
    return _nl._result(res, _nl._out_dtype(dtype, x), mask, engine="GpSimd")


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, name=None):
    """Element-wise ``op(data1, data2)`` of two tiles of the same partition size (Vector engine)."""
    a = _tile(data1, "data1", "tensor_tensor", mask=mask)
    b = _tile(data2, "data2", "tensor_tensor", mask=mask)
    if a.shape[0] != b.shape[0]:
        raise _NKIError("operand shapes", f"nisa.tensor_tensor: partition sizes differ: {a.shape} vs {b.shape}")
    if a.buffer is _psum and b.buffer is _psum:
        raise _NKIError("operand memory", "nisa.tensor_tensor: data1 and data2 cannot both be in PSUM")
    na, nb_ = _ops.per_partition(a.shape), _ops.per_partition(b.shape)
    # The page asks for the same number of elements per partition, but the first generation's
    # front end reads a [P, 1] operand of a [P, N] one through a zero-step free access pattern, as
    # it does for nl.multiply: nki-samples' quantized_double_row_matmul (before c4b806e) scales a
    # [128, N] block by a [128, 1] tile this way and matches NumPy on Trainium. So one element per
    # partition broadcasts along the free axes; other mismatches stay the page's rule.
    column = na != nb_ and 1 in (na, nb_)
    if na != nb_ and not column:
        raise _NKIError("operand shapes", f"nisa.tensor_tensor: data1 {a.shape} and data2 {b.shape} need the same "
                        "number of elements per partition (the page: no broadcasting along the free axes; a "
                        "[P, 1] operand broadcasts, as the compiler reads it; else use nisa.tensor_scalar)")
    _ops.no_gpsimd_psum(engine, "tensor_tensor", a, b)
    fn = _ops.alu(op)
    va, vb = _nl._values(a, "data1"), _nl._values(b, "data2")
    if column:
        wide, big = (va, a) if na > nb_ else (vb, b)
        col = vb if na > nb_ else va
        col = _np.reshape(col, _np.shape(col)[:_np.ndim(col) - len((b if na > nb_ else a).shape)] +
                          (big.shape[0],) + (1,) * (len(big.shape) - 1))
        col = _np.broadcast_to(col, _np.broadcast_shapes(_np.shape(col), _np.shape(wide)))
        va, vb = (wide, col) if na > nb_ else (col, wide)
    elif b.shape != a.shape:  # element k of a partition pairs with element k: a [P] vector with a [P, 1] tile
        vb = _np.reshape(vb, _np.shape(va))
    return _nl._result(fn(va, vb), _nl._out_dtype(dtype, a, b), mask)


def tensor_scalar(data, op0, operand0, reverse0=False, *, op1=None, operand1=None, reverse1=False,
                  dtype=None, mask=None, engine=engine.unknown, name=None):
    """``(data op0 operand0) op1 operand1`` with scalar or [P, 1] operands (Vector/Scalar/GpSimd)."""
    x = _tile(data, "data", "tensor_scalar", mask=mask)
    _ops.no_gpsimd_psum(engine, "tensor_scalar", x, operand0, operand1)
    v = _nl._values(x, "data")

    def apply(v, op, operand, reverse, name):
        fn = _ops.alu(op)
        o = _per_partition(operand, x, name, "tensor_scalar")
        return fn(o, v) if reverse else fn(v, o)

    v = apply(v, op0, operand0, reverse0, "operand0")
    if op1 is not None:
        v = apply(v, op1, operand1, reverse1, "operand1")
    return _nl._result(v, _nl._out_dtype(dtype, x), mask)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None,
                         name=None):
    """``data op0 operand0`` on the Vector engine, also reducing the result over all free axes with
    ``reduce_op`` into ``reduce_res`` ([P, 1], written in place); returns the result tile."""
    out = tensor_scalar(data, op0, operand0, reverse0, dtype=dtype, mask=mask)
    vals = _reducer(reduce_op)(_dt.compute_view(out.data).astype(_np.float32),
                               axis=tuple(range(1 + out.nb, out.ndim + out.nb)), keepdims=True)
    reduce_res[...] = _Tile(_np.asarray(vals, _np.float32), _sbuf, parent=out)
    return out


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, name=None):
    """Copy a tile within on-chip memory, casting to ``dtype``."""
    x = _tile(src, "src", "tensor_copy", mask=mask)
    _ops.no_gpsimd_psum(engine, "tensor_copy", x)
    return _nl._result(_np.array(x.data), _nl._out_dtype(dtype, x), mask)


def iota(expr, dtype, *, mask=None, name=None):
    """A tile holding the values of an index expression (``nl.arange`` arithmetic), GpSimd engine."""
    nb = _nl._nb()
    if type(expr) is _nl.BExpr:
        vals, rank = expr.batched_array(), expr.ndim
    else:
        vals = _np.asarray(expr)
        rank = vals.ndim
    # A [P] expression is the partition column; a scalar one (``nl.program_id(1)``, a loop index, as
    # vLLM's paged attention writes ``nisa.iota(head_id, ...)``) is one value, a [1, 1] tile.
    if rank < 2:
        vals = vals.reshape(vals.shape[:vals.ndim - rank] + (vals.shape[vals.ndim - rank:] + (1, 1))[:2])
    if nb and type(expr) is not _nl.BExpr:
        vals = _np.broadcast_to(vals, _current_or_none().bshape + vals.shape)
    return _nl._result(vals, _dt.as_dtype(dtype), mask, engine="GpSimd")


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, name=None):
    """A new SBUF tile of ``shape`` filled with ``value``."""
    shape, _ = _nl._parse_shape(shape)
    prog = _current_or_none()
    full = _np.full(shape, value, _dt.as_dtype(dtype))
    if prog is not None and prog.nb:
        full = _np.broadcast_to(full, prog.bshape + shape)
    return _nl._result(full, _dt.as_dtype(dtype), mask)


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             name=None):
    """Copy ``src`` into ``dst`` through DMA (HBM or SBUF, never PSUM); ``dst_rmw_op`` (np.add) accumulates.
    Without ``mask`` this is :func:`nki_kernels.simulator.instructions.dma.dma_copy`; a ``mask`` limits
    the elements moved. ``dge_mode`` does not change results."""
    if mask is None:
        return _dma.dma_copy(dst, src, dst_rmw_op=dst_rmw_op, oob_mode=oob_mode, dge_mode=dge_mode)
    for x, what in ((dst, "dst"), (src, "src")):
        if isinstance(x, _Tile) and x.buffer is _psum:
            raise _NKIError("operand memory", f"nisa.dma_copy: {what} (shape {x.shape}) is in PSUM; DMA moves data "
                           "between HBM and SBUF (copy PSUM to SBUF with nisa.tensor_copy first)")
    if isinstance(dst, (_Access, _HBMTensor)):
        if dst_rmw_op is not None:
            acc = _nl._as_access(dst, "dst", "nisa.dma_copy")
            cur = _Tile(acc.index.read(acc.tensor.data, mask), _sbuf)
            src = _nl._make_binary("rmw", _ops.alu(dst_rmw_op))(cur, _nl.load(src) if not isinstance(
                src, _Tile) else src)
        if isinstance(src, (_Access, _HBMTensor)):
            src = _nl.load(src, mask=mask)
        _nl.store(dst, src, mask=mask)
        return None
    if not isinstance(dst, _Tile):
        raise _NKIError("operand type", f"nisa.dma_copy: dst must be a tensor, got {type(dst).__name__}")
    val = _nl.load(src, mask=mask) if isinstance(src, (_Access, _HBMTensor)) else src
    if dst_rmw_op is not None:
        val = _nl._make_binary("rmw", _ops.alu(dst_rmw_op))(dst, val)
    dst[...] = val
    return None


def affine_select(pred, on_true_tile, on_false_value, *, dtype=None, mask=None, name=None):
    """Select ``on_true_tile`` where the affine predicate (index expression) holds, else a scalar."""
    # GpSimd cannot read PSUM, but the first generation's compiler places tiles for the instruction:
    # the official flash attention selects straight from its PSUM scores (a copy is inserted).
    x = _tile(on_true_tile, "on_true_tile", "affine_select", mask=mask)
    cond = _np.broadcast_to(_np.asarray(pred), x.shape)
    return _nl._result(_np.where(cond, _nl._values(x, "on_true_tile"), on_false_value),
                      _nl._out_dtype(dtype, x), mask, engine="GpSimd")


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None,
                       mask=None, name=None):
    """Inclusive scan along the free axis: ``r[i] = (data0[i] op0 r[i-1]) op1 data1[i]``
    (``reverse0``: ``r[i-1] op0 data0[i]``; ``reverse1``: ``data1[i] op1 ...``); a new tile
    (see :func:`nki_kernels.simulator.instructions.vector.tensor_tensor_scan`)."""
    t0 = _tile(data0, "data0", "tensor_tensor_scan", mask=mask)
    return _functional(t0.shape, _nl._out_dtype(dtype, data0, data1), mask, lambda d: _vector.tensor_tensor_scan(
        d, data0, data1, initial, op0, op1, reverse0, reverse1))


def bn_stats(data, *, mask=None, dtype=None, name=None):
    """Per-partition batch-norm statistics of <= 512 free elements (Vector engine): a new [P, 6] tile,
    ``(count, mean, var * count)`` of the even-indexed and then of the odd-indexed elements, to be
    combined by :func:`bn_aggr` (see :func:`nki_kernels.simulator.instructions.vector.bn_stats`)."""
    x = _tile(data, "data", "bn_stats", mask=mask)
    x, mask = _reading_mask(x, mask, (x.shape[0], 6), "bn_stats")
    return _functional((x.shape[0], 6), _nl._out_dtype(dtype, x), mask, lambda d: _vector.bn_stats(d, x))


def bn_aggr(data, *, mask=None, dtype=None, name=None):
    """Combine :func:`bn_stats` outputs (concatenated along the free axis) into a new [P, 2] tile (mean,
    variance) (see :func:`nki_kernels.simulator.instructions.vector.bn_aggr`)."""
    x = _tile(data, "data", "bn_aggr", mask=mask)
    return _functional((x.shape[0], 2), _nl._out_dtype(dtype, x), mask, lambda d: _vector.bn_aggr(d, x))


# ---------------------------------------------------------------------------
# Instructions implemented once, destination-style, in nki_kernels.simulator.instructions: the
# first generation's functional forms allocate the result tile and pass it as dst.
# ---------------------------------------------------------------------------
def _functional(shape, dtype, mask, run, buffer=_sbuf):
    """A new result tile of ``shape`` / ``dtype`` written by ``run(dst)``; elements outside the
    first generation's ``mask`` stay zero."""
    out = _ops.new_tile(shape, dtype, buffer)
    run(out)
    prog = _current_or_none()
    if prog is not None and out._mem is not None:
        _memory.functional_result(out._mem, prog)  # `t[...] = nisa.reciprocal(...)`: the instruction writes t
    keep = None if mask is None else _full_mask(mask, tuple(shape))
    if keep is not None:
        out.data[...] = _np.where(keep, out.data, _np.zeros((), out.dtype))
        out._written = _np.broadcast_to(keep, out.shape)  # assigned into a tile, it writes only these (as nl ops)
    return out


def _in_place(dst, mask, dtype, op, run):
    """Run ``run()`` writing ``dst`` in place; elements outside ``mask`` keep their values."""
    if dtype is not None and _dt.as_dtype(dtype) != getattr(dst, "dtype", None):
        raise _NKIError("dtype", f"nisa.{op}: dtype={dtype} differs from dst's dtype {getattr(dst, 'dtype', None)}; "
                       "this instruction writes dst in its own dtype")
    before = _np.array(dst.data) if mask is not None and isinstance(dst, _Tile) else None
    run()
    if before is not None:
        keep = _full_mask(mask, tuple(dst.shape))
        if keep is not None:
            dst[...] = _np.where(keep, dst.data, before)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, name=None):
    """Move partitions within 32-partition quadrants of ``src`` into ``dst`` (in place, Vector
    engine); see :func:`nki_kernels.simulator.instructions.vector_search.nc_stream_shuffle`."""
    _in_place(dst, mask, dtype, "nc_stream_shuffle", lambda: _vector_search.nc_stream_shuffle(dst, src, shuffle_mask))


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, name=None):
    """Copy ``src`` into ``dst`` (in place) where ``predicate`` holds; see
    :func:`nki_kernels.simulator.instructions.vector_search.tensor_copy_predicated`."""
    _in_place(dst, mask, dtype, "tensor_copy_predicated",
              lambda: _vector_search.tensor_copy_predicated_gen1(dst, src, predicate, reverse_pred))


def max8(*, src, mask=None, dtype=None, name=None):
    """The 8 largest values of each partition of ``src``, descending: a new [P, 8] tile
    (``dtype``, default src's)."""
    x = _tile(src, "src", "max8", mask=mask)
    x, mask = _reading_mask(x, mask, (x.shape[0], 8), "max8")
    return _functional((x.shape[0], 8), dtype or x.dtype, mask, lambda d: _vector_search.max8(d, x))


def nc_find_index8(*, data, vals, mask=None, dtype=None, name=None):
    """Indices of the first occurrences of the 8 ``vals`` in each partition of ``data``: a new
    [P, 8] uint32 (or ``dtype`` uint16) tile; ``mask`` applies to ``data`` only."""
    x = _tile(data, "data", "nc_find_index8", mask=mask)
    return _functional((x.shape[0], 8), dtype or _dt.uint32, None,
                       lambda d: _vector_search.find_index8(d, x, vals, mask))


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, name=None):
    """``data`` with the first occurrence of each of the 8 ``vals`` replaced by ``imm``: a new tile
    (``dtype``, default data's); ``dst_idx`` receives the matched positions."""
    x = _tile(data, "data", "nc_match_replace8", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask,
                       lambda d: _vector_search.nc_match_replace8(d, x, vals, imm, dst_idx))


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, name=None):
    """Copy ``src`` (a tile view at a dynamic offset within each partition, SBUF or PSUM) into a new tile
    (``dtype``, default src's): the simulator knows the offset's value, so this is ``tensor_copy`` of
    the view. GpSimd cannot access PSUM."""
    x = _tile(src, "src", "tensor_copy_dynamic_src", mask=mask)
    _ops.no_gpsimd_psum(_ops.engine_name(engine), "tensor_copy_dynamic_src", x)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _vector.tensor_copy(d, x))


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=engine.unknown, name=None):
    """Copy ``src`` into ``dst``, a tile view at a dynamic offset within each partition (SBUF or PSUM),
    in place; both have the same partitions and elements per partition."""
    x = _tile(src, "src", "tensor_copy_dynamic_dst", mask=mask)
    _ops.no_gpsimd_psum(_ops.engine_name(engine), "tensor_copy_dynamic_dst", x, dst)
    _in_place(dst, mask, dtype, "tensor_copy_dynamic_dst",
              lambda: _vector.tensor_copy(dst, x))


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, name=None):
    """Gather within each GpSimd core's 16 partitions (see
    :func:`nki_kernels.simulator.instructions.gpsimd.local_gather`): a new SBUF tile
    ``[P, *index free dims, 16, num_elem_per_idx]`` (all indices valid) or
    ``[P, num_valid_indices, num_elem_per_idx]``."""
    s = _tile(src_buffer, "src_buffer", "local_gather", (_sbuf,), mask=mask)
    ix = _tile(index, "index", "local_gather", (_sbuf,), mask=mask)
    n = int(num_elem_per_idx)
    full = 16 * int(_np.prod(ix.shape[1:]))
    if num_valid_indices is None or int(num_valid_indices) == full:
        shape = (s.shape[0],) + tuple(ix.shape[1:]) + (16, n)
    else:
        shape = (s.shape[0], int(num_valid_indices), n)
    return _functional(shape, s.dtype, mask, lambda d: _gpsimd.local_gather(d, s, ix, n, num_valid_indices))


def reciprocal(data, *, dtype=None, mask=None, name=None):
    """``1 / data`` element-wise (Vector engine): a new tile (``dtype``, default data's)."""
    x = _tile(data, "data", "reciprocal", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _vector.reciprocal(d, x))


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, name=None):
    """``(data op0 operand0) op1 operand1`` (Vector engine): operand0 a scalar or [P, 1] tile, operand1 a
    tile like data; a new tile (``dtype``, default the operands' promoted dtype)."""
    x = _tile(data, "data", "scalar_tensor_tensor", mask=mask)
    out_dtype = _nl._out_dtype(dtype, x, operand1)
    return _functional(x.shape, out_dtype, mask, lambda d: _vector.scalar_tensor_tensor(
        d, x, op0, operand0, op1, operand1, reverse0, reverse1))


def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=dge_mode.unknown, name=None):
    """Transpose ``src`` (HBM or SBUF) through DMA into a new SBUF tile (2-D swaps the axes, 3-D reverses
    them, 4-D permutes [3, 1, 2, 0], or ``axes``). ``dge_mode`` picks the descriptor generation, which
    does not change results; the page: "HWDGE is only supported for NeuronCore-v3+"."""
    _dge_mode_rule(dge_mode, "dma_transpose")
    shape = tuple(src.shape)
    perm = tuple(axes) if axes is not None else {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(len(shape))
    if perm is None:
        raise _NKIError("dma_transpose", f"nisa.dma_transpose takes a 2-D to 4-D source, got shape {shape}")
    out_shape = tuple(shape[a] for a in perm)
    return _functional(out_shape, dtype or src.dtype, mask, lambda d: _dma.transpose_gen1(d, src, axes=perm))


def _dge_mode_rule(mode, op):
    """``mode`` is a ``nisa.dge_mode``; ``hwdge`` needs NeuronCore-v3 or newer."""
    if not isinstance(mode, dge_mode):
        raise _NKIError("dge_mode", f"nisa.{op}: dge_mode={mode!r} is not a nisa.dge_mode")
    if mode is dge_mode.hwdge and get_nc_version() < nc_version.gen3:
        raise _NKIError("dge_mode", f"nisa.{op}: dge_mode=hwdge (hardware DGE) needs NeuronCore-v3 or newer; the "
                        f"target is {get_nc_version().name}")


_FP32_MIN = float(_np.finfo(_np.float32).min)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=_np.amax, range_start=0, on_false_value=_FP32_MIN, mask=None, dtype=None, name=None):
    """Keep ``on_true_tile`` where ``comp_op0(i + range_start, bound0)`` and ``comp_op1(i + range_start,
    bound1)`` hold for free index ``i``, else ``on_false_value``: a new tile, with the max reduction
    into the Vector registers / ``reduce_res`` (NeuronCore-v3+)."""
    x = _tile(on_true_tile, "on_true_tile", "range_select", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _vector.range_select_gen1(
        d, x, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, reduce_op, range_start, on_false_value))


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=_np.amax, reverse_pred=False, mask=None, dtype=None, name=None):
    """``dst = where(predicate, on_true, on_false)`` in place, with the max reduction into the Vector
    registers / ``reduce_res``."""
    _in_place(dst, mask, dtype, "select_reduce", lambda: _vector.select_reduce_gen1(
        dst, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred))


def sequence_bounds(*, segment_ids, dtype=None, name=None):
    """``[start, end)`` of the segment of each element of ``segment_ids`` ([1, n]): a new [1, 2, n] tile
    (``dtype``, default segment_ids')."""
    s = _tile(segment_ids, "segment_ids", "sequence_bounds", (_sbuf,))
    n = int(_np.prod(s.shape[1:]))
    return _functional((s.shape[0], 2, n), dtype or s.dtype, None, lambda d: _gpsimd.sequence_bounds(d, s))


def dropout(data, prob, *, mask=None, dtype=None, name=None):
    """``data`` with each element zeroed with drop probability ``prob`` (scalar or [P, 1] tile): a new tile
    (``dtype``, default data's); draws from the Vector engine's generator."""
    x = _tile(data, "data", "dropout", mask=mask)
    return _functional(x.shape, dtype or x.dtype, mask, lambda d: _rng.dropout(d, x, prob))


# Not on the v2.26 nki.isa page, but neuronxcc has it since 2.27 in the dst= form of the standalone
# page (the documentation's example tests at aws-neuron-sdk 81ce03a call it as
# ``nisa.tensor_scalar_cumulative(src=..., dst=..., op0=..., op1=..., imm0=...)``).
tensor_scalar_cumulative = _vector.tensor_scalar_cumulative




def _derived(spec):
    """The functional form of an instruction declared with ``gen1=Gen1(like=...)`` and no form of
    its own here: a new SBUF result shaped like operand ``like`` (dtype ``dtype=`` or that
    operand's), elements outside ``mask`` zero, written by the instruction as its ``dst``."""
    sig = _inspect.signature(spec.run)
    sig = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "dst"])
    like = spec.gen1.like

    def form(*args, dtype=None, mask=None, **kwargs):
        bound = sig.bind(*args, **kwargs)
        x = _tile(bound.arguments[like], like, spec.name, mask=mask)
        out_dtype = _dt.as_dtype(dtype) if dtype is not None else x.dtype
        prog = _current_or_none()
        if prog is not None and prog.nb:  # a batch of programs: the result carries the batch's axes
            if mask is not None:
                raise _NotBatchable(f"nisa.{spec.name} with mask= runs one program at a time")
            out = _Tile(_np.zeros(x.data.shape, out_dtype), _sbuf)
            spec.run(out, **bound.arguments)
            return out
        return _functional(x.shape, out_dtype, mask, lambda d: spec.run(d, **bound.arguments))

    form.__name__ = form.__qualname__ = spec.name
    form.__doc__ = f"The first generation's functional ``nisa.{spec.name}``: {spec.run.__doc__ or ''}"
    form.__module__ = __name__
    form = form if spec.gen1.batched else _nl._per_program_only(form, "nisa")
    form._derived_from = spec  # (registry.withdraw removes only what it derived)
    return form


# Instructions with batched first-generation forms, as declared (see nl.BATCH_SAFE); the others run
# one program at a time. Declared instructions without a form here get a derived one (_derived).
_BATCH_SAFE = _registry.batch_safe("gen1")
_nl._guard_module(globals(), _BATCH_SAFE, "nisa")
_registry.publish(globals(), "gen1", _derived)

# The documented names of the first generation's nki.isa page (instructions, config enums, target)
# and the engine shorthands its pages use; everything else here is internal.
__all__ = sorted(n for n in (
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_reduce", "tensor_partition_reduce",
    "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar", "tensor_scalar_reduce",
    "tensor_scalar_cumulative", "tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "tensor_copy_predicated", "reciprocal",
    "iota", "dropout", "affine_select", "range_select", "select_reduce", "sequence_bounds", "memset", "bn_stats",
    "bn_aggr", "local_gather", "dma_copy", "dma_transpose", "max8", "nc_find_index8", "nc_match_replace8",
    "nc_stream_shuffle", "engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "get_nc_version",
    "unknown_engine", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "dma_engine")
    if n in globals())
