"""The first generation's functional instruction forms that compute a new result tile: one
implementation each, used by the first-generation ``nisa`` namespace (:mod:`..isa`) as they are
and by the standalone (``dst=``) instructions of the engine modules, which compute through them
and write the result into their ``dst``.

Each returns a new tile (SBUF, or PSUM for the Tensor engine) and applies the first generation's
operand rules; the ``dst=`` forms add their own destination rules on top.
"""

import numpy as _np

from .. import config as _config
from .. import diagnostics as _diag
from .. import dtypes as _dt
from .. import memory as _memory
from .. import op_functions as _op_functions
from ..core import PMAX as _PMAX, MaskedOperand as _MaskedOperand, Tile as _Tile
from ..core import psum as _psum, sbuf as _sbuf
from ..context import current_or_none as _current_or_none
from ..core import read_inside as _read_inside
from ..errors import NKIError as _NKIError
from ..errors import NotBatchable as _NotBatchable
from ..index_expr import Mask
from ..indexing import _full_mask, mask_box
from ..tile_ops import _axes, _out_dtype, _result, _values, tile_size
from . import operands as _ops
from . import registers as _regs
from .target import engine, get_nc_version, nc_version
from .target import matmul_perf_mode as _matmul_perf_mode

def _tile(x, name, op, buffers=(_sbuf, _psum), mask=None):
    if not isinstance(x, _Tile):
        _values(x, name)
        raise _NKIError("operand type", f"nisa.{op}: {name} must be a tile, got {type(x).__name__}")
    if x._thunk is not None or mask is False or mask is _np.False_:
        x = _read_inside(x, mask)
    if x.buffer not in buffers:
        allowed = " or ".join(b.name.upper() for b in buffers)
        raise _NKIError("operand memory", f"nisa.{op}: {name} (shape {x.shape}) is in {x.buffer.name.upper()}; "
                       f"this operand must be in {allowed}")
    _diag.read(x)
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
    box = mask_box(mask, tuple(x.shape)) if isinstance(mask, Mask) else None
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
    Either operand may be ``tile[mask]`` (operand masking, :func:`unmask_operand`).
    """
    stationary, ks = unmask_operand(stationary, "stationary")
    moving, km = unmask_operand(moving, "moving")
    if ks is not None or km is not None:
        m, n = stationary.shape[-1], moving.shape[-1]
        keep = ((ks.any(axis=0) if ks is not None else _np.ones(m, bool))[:, None]
                & (km.any(axis=0) if km is not None else _np.ones(n, bool))[None, :])
        if mask is not None and _same_selection(mask, stationary, ks, moving, km):
            # `nc_matmul(w[..., idx][idx < I], x, mask=(idx < I))` (the blockwise MoE kernel): the
            # instruction's mask restates an operand's, over that operand's axes; laid over the result
            # instead, a [1, M] mask would cut the moving operand's columns
            mask = None
        full = _full_mask(mask, (m, n)) if mask is not None else None
        mask = keep if full is None else keep & full
        stationary, moving = _contracted_rows(stationary, moving, ks, km)
    return _result(_matmul_product(stationary, moving, perf_mode), _dt.float32, mask, buffer=_psum,
                       engine="Tensor")


def _same_selection(mask, stationary, ks, moving, km) -> bool:
    """Whether instruction ``mask`` selects exactly the elements an operand mask (``ks`` / ``km``)
    selects, laid over that operand."""
    for t, keep in ((stationary, ks), (moving, km)):
        if keep is None:
            continue
        try:
            m = _full_mask(mask, tuple(t.shape))
        except _NKIError:
            continue
        if m is not None and _np.array_equal(m, keep):
            return True
    return False


def _contracted_rows(stationary, moving, ks, km):
    """The operands of a matmul under operand masking, cut to the contraction (partition) rows both
    select: a row one operand's mask leaves out is contracted by neither (the blockwise MoE kernel
    masks the moving rows past I of a ragged last K tile, whose stationary rows were never written;
    0 * NaN would otherwise reach the result). A prefix of rows is a view of each operand (so only
    those rows count as read); other row sets zero the rows left out."""
    rows = _np.ones(stationary.shape[0], bool)
    for keep in (ks, km):
        if keep is not None:
            rows &= keep.any(axis=1)
    if rows.all() or stationary.nb or moving.nb:
        return stationary, moving
    k = int(rows.sum())
    if k and rows[:k].all():
        return stationary[0:k], moving[0:k]
    return tuple(_Tile(_np.where(rows.reshape((-1,) + (1,) * (t.ndim - 1)), t.data, _np.zeros((), t.dtype)), t.buffer)
                 for t in (_tile(stationary, "stationary", "nc_matmul", (_sbuf, _psum)),
                           _tile(moving, "moving", "nc_matmul", (_sbuf, _psum))))


def unmask_operand(x, name):
    """``(tile, keep)`` for a matmul operand: a plain tile as it is (``keep`` None); a ``tile[mask]``
    (:class:`..core.MaskedOperand`) as a tile holding its selected elements, zero elsewhere (so they
    add nothing to the contraction), and the 2-D bool ``keep`` of the selected elements. The mask may
    hide elements of a view that reach outside its tile (a ragged last tile, as nki-samples'
    contributed rmsnorm_quant masks its gamma columns); those are never read."""
    if not isinstance(x, _MaskedOperand):
        return x, None
    t = _tile(x.tile, name, "nc_matmul", (_sbuf, _psum), mask=x.mask)
    keep = _full_mask(x.mask, tuple(t.shape))
    if keep is None:
        return t, None
    if t.nb or len(t.shape) != 2:
        raise _NKIError("mask", f"nc_matmul: operand masking ({name}[mask]) needs a 2-D tile, got shape {t.shape}")
    vals = _np.where(keep, t.data, _np.zeros((), t.dtype))
    return _Tile(vals, t.buffer), _np.array(keep)


def _matmul_product(stationary, moving, perf_mode=None, moving_fmax=None):
    """The checked operands' product ``stationary.T @ moving`` in fp32 (an array; the standalone
    ``nc_matmul`` writes it into its ``dst``). ``moving_fmax``: the largest moving free size, when the
    caller's target allows more than ``gemm_moving_fmax`` (the standalone ``nc_matmul`` from
    NeuronCore-v4: the whole PSUM, 4096 fp32 or 8192 bf16 results)."""
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
    if mm > tile_size.gemm_stationary_fmax:
        raise _NKIError("matmul operands", f"stationary free size {mm} (shape {s.shape}) > "
                       f"{tile_size.gemm_stationary_fmax} (gemm_stationary_fmax)")
    if n > (moving_fmax or tile_size.gemm_moving_fmax):
        limit = (f"{moving_fmax} (8 PSUM banks of the result's dtype)" if moving_fmax else
                 f"{tile_size.gemm_moving_fmax} (gemm_moving_fmax)")
        raise _NKIError("matmul operands", f"moving free size {n} (shape {m.shape}) > {limit}")
    a = _dt.compute_view(s.data).astype(_np.float32, copy=False)
    b = _dt.compute_view(m.data).astype(_np.float32, copy=False)
    if pair:  # contract the pair with the partitions: out[i, j] = sum_{k, l} a[k, l, i] * b[k, l, j]
        a = a.reshape(a.shape[:-3] + (-1, a.shape[-1]))
        b = b.reshape(b.shape[:-3] + (-1, b.shape[-1]))
    return a.swapaxes(-1, -2) @ b  # (the method: np.swapaxes adds a Python-level dispatch)


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
            _config.report("operand", _NKIError(
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
    out_dtype = _out_dtype(dtype, x)
    return _result(_np.swapaxes(_values(x, "data"), -1, -2), out_dtype, transposed_mask(mask, x),
                       buffer=_sbuf if on_vector else _psum, engine="Vector" if on_vector else "Tensor")


def transposed_mask(mask, x):
    """The result mask of a transpose of tile ``x`` under ``mask=``. NKI API Masking: "Each comparison
    expression should indicate which range of indices along one of the input tile axes should be
    valid", so the mask is laid over the operand (the contributed transpose and conv kernels write
    ``nc_transpose(t[i, j], mask=(i < B) & (j < N))``) and transposed with it; a mask that fits only the
    result's shape is taken as written over the result."""
    if mask is None or x.nb:
        return mask
    try:
        keep = _full_mask(mask, tuple(x.shape))
    except _NKIError:
        return mask
    return None if keep is None else _np.swapaxes(keep, -1, -2)


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
    return _values(v, name)


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
    v = _values(x, "data")
    s = _per_partition(scale, x, "scale", "activation")
    b = _per_partition(bias, x, "bias", "activation")
    v = v * s if not (_np.isscalar(s) and s == 1.0) else v
    if b is not None:
        v = v + b
    out = _result(fn(v), _out_dtype(dtype, x), mask, engine="Scalar")
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
    axes = tuple(a + x.nb for a in _axes(x, axis, "tensor_reduce"))
    red = {a - x.nb for a in axes}
    out_shape = tuple(1 if i in red else n for i, n in enumerate(x.shape) if keepdims or i not in red)
    keep = _scattered_reading_mask(x, mask, out_shape)
    if keep is not None:
        # A padded window's mask (``t[i_p, i_f + i_k - 1]`` with ``mask=(i_f + i_k - 1 >= 0) & ...``,
        # the contributed MaxPool2D): the masked-off elements take no part, as the operator's identity;
        # a result element none of whose elements is selected is not written.
        vals = _np.where(keep, _values(x, "data"), _ops.identity_of(op))
        written = keep.any(axis=tuple(a - x.nb for a in axes), keepdims=keepdims)
        mask = None if written.all() else written
    else:
        x, mask = _reading_mask(x, mask, out_shape, "tensor_reduce")
        vals = _values(x, "data")
    res = _reducer(op)(vals, axis=axes, keepdims=keepdims)
    if negate:
        res = -res
    return _result(res, _out_dtype(dtype, x), mask)


def _scattered_reading_mask(x, mask, out_shape):
    """For a reduction: the bool mask (the operand's shape) of a ``mask`` written over the operand's
    index space that is no box of it (:func:`_reading_mask` takes the others), else ``None``."""
    if mask is None or x.nb or not isinstance(mask, Mask):
        return None
    try:
        if _np.broadcast_shapes(_np.shape(mask), tuple(out_shape)) == tuple(out_shape):
            return None
    except ValueError:
        pass
    try:
        keep = _full_mask(mask, tuple(x.shape))
    except _NKIError:
        return None
    if keep is None or mask_box(mask, tuple(x.shape)) is not None:
        return None
    return keep


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, name=None):
    """Reduce across the partition axis with ``op``; result has one partition (GpSimd engine)."""
    x = _tile(data, "data", "tensor_partition_reduce", (_sbuf,), mask=mask)  # GpSimd cannot access PSUM
    res = _reducer(op)(_values(x, "data"), axis=(x.nb,), keepdims=True)
    return _result(res, _out_dtype(dtype, x), mask, engine="GpSimd")


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
    va, vb = _values(a, "data1"), _values(b, "data2")
    if column:
        wide, big = (va, a) if na > nb_ else (vb, b)
        col = vb if na > nb_ else va
        col = _np.reshape(col, _np.shape(col)[:_np.ndim(col) - len((b if na > nb_ else a).shape)] +
                          (big.shape[0],) + (1,) * (len(big.shape) - 1))
        col = _np.broadcast_to(col, _np.broadcast_shapes(_np.shape(col), _np.shape(wide)))
        va, vb = (wide, col) if na > nb_ else (col, wide)
    elif b.shape != a.shape:  # element k of a partition pairs with element k: a [P] vector with a [P, 1] tile
        vb = _np.reshape(vb, _np.shape(va))
    return _result(fn(va, vb), _out_dtype(dtype, a, b), mask)


def _is_unary(op) -> bool:
    """Whether ``op`` is a one-input operator (``nl.abs``, ``nl.exp``, ``nl.copy`` ...)."""

    return getattr(op, "__name__", None) in (*_op_functions._UNARY, "copy", "bypass")


def _unary_operand(opname, op0, operand0, what="operand0"):
    """Whether ``op0`` is a one-input operator (``nl.abs``, ``nl.rsqrt`` ...: the "Supported Math
    Operators" table lists them as ``op``); its ``operand0`` "must be None or 0 when op0 is a unary
    operator" (the tensor_scalar page), else an error."""
    if not _is_unary(op0):
        return False
    if operand0 is not None and (isinstance(operand0, _Tile) or float(operand0) != 0.0):
        shown = f"a tile of shape {operand0.shape}" if isinstance(operand0, _Tile) else repr(operand0)
        raise _NKIError(what, f"nisa.{opname}: {what.replace('operand', 'op')}={getattr(op0, '__name__', op0)} is a "
                        f"unary operator, so {what} must be None or 0; got {shown}")
    return True


def tensor_scalar(data, op0, operand0, reverse0=False, *, op1=None, operand1=None, reverse1=False,
                  dtype=None, mask=None, engine=engine.unknown, name=None):
    """``(data op0 operand0) op1 operand1`` with scalar or [P, 1] operands (Vector/Scalar/GpSimd); a
    one-input operator (``nl.abs``, ``nl.rsqrt``, ``nl.reciprocal`` ...) with its operand None or 0
    applies to the data alone (:func:`_unary_operand`)."""
    x = _tile(data, "data", "tensor_scalar", mask=mask)
    _ops.no_gpsimd_psum(engine, "tensor_scalar", x, operand0, operand1)
    v = _values(x, "data")

    def apply(v, op, operand, reverse, name):
        fn = _ops.alu(op)
        if _unary_operand("tensor_scalar", op, operand, name):
            return fn(v)
        o = _per_partition(operand, x, name, "tensor_scalar")
        return fn(o, v) if reverse else fn(v, o)

    v = apply(v, op0, operand0, reverse0, "operand0")
    if op1 is not None:
        v = apply(v, op1, operand1, reverse1, "operand1")
    return _result(v, _out_dtype(dtype, x), mask)


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
    return _result(_np.array(x.data), _out_dtype(dtype, x), mask)
