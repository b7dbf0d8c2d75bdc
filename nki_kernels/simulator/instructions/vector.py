"""Vector Engine instructions: selects, scans, element-wise arithmetic, reductions and statistics
(shuffles and top-8 search are in :mod:`.vector_search`).

Semantics and operand rules follow the current ``nki.isa`` reference
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.isa.html).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import recording as _prof
from ..core import Tile, psum
from ..errors import NKIError, NotBatchable
from .registry import Gen1
from . import functional as _functional  # the computing forms both generations share
from .functional import _is_unary, _unary_operand
from .operands import (alu, bitvec_on_integers, check_dst, column, compute_into, engine_name, first_generation,
                       identity_of, instruction, is_bitvec, max_rank, no_gpsimd_psum, one_per_partition, per_partition, rows, same_rows, scratch, tile_operand, values_of, write)
from .operands import BITVEC as _BITVEC
from .operators import v4_operator
from .target import engine as _engine
from .target import reduce_cmd as _reduce_cmd
from . import registers, target
from .target import command
from .. import tile_ops as _tile_ops
from .. import core as _core
from ..timing import costs as _costs  # (each instruction's cost, declared with it)

# ---------------------------------------------------------------------------
# selects and cumulative ops
# ---------------------------------------------------------------------------
FP32_MIN = float(np.finfo(np.float32).min)  # -3.4028235e+38: range_select's only on_false_value
_RANGE_COMPARE = {np.equal: "equal", np.less: "less", np.less_equal: "less_equal", np.greater: "greater",
                  np.greater_equal: "greater_equal"}


@instruction(engine="Vector", cost=_costs.engine_default)
def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=_reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=np.maximum, range_start=0.0, on_false_value=FP32_MIN, name=None):
    """``dst = where(comp_op0(i + range_start, bound0) & comp_op1(i + range_start, bound1), on_true_tile,
    on_false_value)`` with ``i`` the free index of each element (Vector engine, NeuronCore-v3+); the
    result's free-axis reduction (``reduce_op``, max) feeds the Vector engine's accumulation
    registers per ``reduce_cmd`` and ``reduce_res``.

    The page's constraints: comparisons are equal / less / less_equal / greater / greater_equal;
    ``on_true_tile`` has a float dtype; ``bound0`` / ``bound1`` are float32 tiles with one element per
    partition; ``reduce_op`` is maximum only; ``on_false_value`` "must be FP32_MIN (-3.4028235e+38)"
    (the default; the v2.32 signature's ``Ellipsis`` means the same).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.32.0/nki/api/generated/nki.isa.range_select.html)
    """
    select_in_range(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, reduce_op,
                    range_start, on_false_value)




def select_in_range(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, reduce_op,
                    range_start, on_false_value, gen1=False):
    """:func:`range_select`; ``gen1=True`` applies only the rules the first generation's page (v2.26)
    states as well (comparison operators, float on_true_tile, fp32 bounds of one element per
    partition): its bounds may still be scalars, and its ``on_false_value`` / ``reduce_op`` are free."""

    op = "range_select"
    target.require(op, target.nc_version.gen3)
    d = check_dst(dst, op)
    x = tile_operand(on_true_tile, "on_true_tile", op)
    same_rows(op, d, "dst", x, "on_true_tile")
    for cmp, what in ((comp_op0, "comp_op0"), (comp_op1, "comp_op1")):
        if alu(cmp) not in _RANGE_COMPARE:
            raise NKIError("comp_op", f"nisa.{op}: {what}={cmp!r}; the comparison operators must be one of "
                           "nl.equal, nl.less, nl.less_equal, nl.greater, nl.greater_equal")
    if not dt.is_float(x.dtype):
        raise NKIError("dtype", f"nisa.{op}: on_true_tile (shape {x.shape}) has dtype {x.dtype}; it must be one of "
                       "the FP dtypes")
    for b, what in ((bound0, "bound0"), (bound1, "bound1")):
        if isinstance(b, Tile):
            if b.dtype != dt.float32:
                raise NKIError("dtype", f"nisa.{op}: {what} (shape {b.shape}) has dtype {b.dtype}; bound0/bound1 "
                               "must be FP32 (the comparison runs in fp32)")
        elif not gen1:
            raise NKIError("operand type", f"nisa.{op}: {what} is a {type(b).__name__} ({b!r}); bound0 and bound1 "
                           f"are tiles with one element per partition ([{x.shape[0]}, 1] float32)")
    if not gen1:
        fill = FP32_MIN if on_false_value is Ellipsis else on_false_value
        if isinstance(fill, Tile) or float(np.float32(fill)) != FP32_MIN:
            raise NKIError("on_false_value", f"nisa.{op}: on_false_value={on_false_value!r}; due to hardware "
                           "constraints it must be FP32_MIN (-3.4028235e+38), the default")
        if alu(reduce_op) is not np.maximum:
            raise NKIError("reduce_op", f"nisa.{op}: reduce_op={reduce_op!r}; only nl.maximum is supported")
        on_false_value = FP32_MIN
    v = values_of(x, "on_true_tile", op)
    parts = x.shape[0]
    idx = np.arange(v.shape[1], dtype=np.float32)[None, :] + np.float32(range_start)
    b0 = column(bound0, parts, "bound0", op)
    b1 = column(bound1, parts, "bound1", op)

    cond = np.asarray(alu(comp_op0)(idx, b0), bool) & np.asarray(alu(comp_op1)(idx, b1), bool)
    out = np.where(cond, v, np.float32(on_false_value))
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)
    registers.accumulate(op, "Vector", out, parts, reduce_op, reduce_res, reduce_cmd)


# the first generation's entry point: its page's rules only (see select_in_range)
range_select_gen1 = first_generation(select_in_range, "range_select")


_PRED_SELECT = (dt.int8, dt.uint8, dt.int16, dt.uint16)
_GEN1_PRED_SELECT = (dt.bool_,) + _PRED_SELECT  # (v2.26: bool is "boolean stored as uint8")


@instruction(engine="Vector", cost=_costs.engine_default)
def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=_reduce_cmd.idle, reduce_op=np.maximum,
                  reverse_pred=False, name=None):
    """``dst = where(predicate, on_true, on_false)`` (``~predicate`` with ``reverse_pred``), with a max
    reduction of the result into the Vector engine's registers / ``reduce_res`` (Vector engine).

    on_true, dst, predicate: same partitions and elements per partition; on_false a
    float32 scalar or a [P, 1] tile; predicate int8/uint8/int16/uint16; on_true not
    tfloat32/int32/uint32; on_true and predicate not both in PSUM; reduce_op max only.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.select_reduce.html)
    """
    select_where(dst, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred)


def select_where(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=_reduce_cmd.idle,
                 reduce_op=np.maximum, reverse_pred=False, gen1=False):
    """:func:`select_reduce`'s body; ``gen1``: the first generation's page (v2.26), whose example passes a
    NumPy bool array as the predicate (its dtype table: bool is "boolean stored as uint8")."""

    op = "select_reduce"
    d = check_dst(dst, op)
    t = tile_operand(on_true, "on_true", op)
    p = tile_operand(predicate, "predicate", op)
    same_rows(op, d, "dst", t, "on_true")
    same_rows(op, d, "dst", p, "predicate")
    if p.dtype not in (_GEN1_PRED_SELECT if gen1 else _PRED_SELECT):
        raise NKIError("predicate dtype", f"nisa.{op}: predicate dtype {p.dtype}; it must be "
                       f"{'bool, ' if gen1 else ''}int8, uint8, int16 or uint16")
    if t.dtype in (dt.int32, dt.uint32):
        raise NKIError("dtype", f"nisa.{op}: on_true dtype {t.dtype} is not supported (no int32/uint32/tfloat32)")
    if t.buffer is psum and p.buffer is psum:
        raise NKIError("operand memory", f"nisa.{op}: on_true and predicate cannot both be in PSUM")
    if alu(reduce_op) is not np.maximum:
        raise NKIError("reduce_op", f"nisa.{op}: reduce_op {reduce_op!r}; only max is supported")
    parts = t.shape[0]
    cond = rows(p.data, parts) != 0
    if reverse_pred:
        cond = ~cond
    out = np.where(cond, values_of(t, "on_true", op), column(on_false, parts, "on_false", op))
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)
    if reduce_res is not None and not dt.is_float(reduce_res.dtype):
        raise NKIError("reduce_res dtype", f"nisa.{op}: reduce_res dtype {reduce_res.dtype} must be a float type")
    one_per_partition(reduce_res, parts, "reduce_res", op)  # "a vector of shape (on_true.shape[0], 1)"
    registers.accumulate(op, "Vector", out, parts, reduce_op, reduce_res, reduce_cmd)


# the first generation's entry point: a bool predicate too (see select_where)
select_reduce_gen1 = first_generation(select_where, "select_reduce")


_CUMULATIVE_DTYPES = (dt.bfloat16, dt.float16, dt.float32, dt.float8_e4m3, dt.float8_e4m3fn, dt.float8_e5m2,
                      dt.uint8, dt.uint16, dt.int8, dt.int16)


@instruction(engine="Vector", cost=_costs.engine_default)
def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=_reduce_cmd.reset_reduce, name=None):
    """Running reduction along the free axis: ``reg = op1(op0(src[i], imm0), reg); dst[i] = reg`` per
    partition, the Vector engine's register starting from
    ``reduce_cmd``: ``reset_reduce`` (op1's identity), ``reduce`` (the register as left by the
    previous instruction) or ``load_reduce`` (``imm1``).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_scalar_cumulative.html)
    """

    op = "tensor_scalar_cumulative"
    d = check_dst(dst, op)
    x = tile_operand(src, "src", op)
    same_rows(op, d, "dst", x, "src")
    for t, what in ((x, "src"), (d, "dst")):
        if t.dtype not in _CUMULATIVE_DTYPES:
            raise NKIError("dtype", f"nisa.{op}: {what} dtype {t.dtype} is not supported (BF16, FP16, FP32, FP8, "
                           "UINT8, UINT16, INT8, INT16)")
    f1 = alu(op1)
    if f1 not in (np.add, np.subtract, np.multiply, np.maximum, np.minimum):
        raise NKIError("op1", f"nisa.{op}: op1 {op1!r} must be add, subtract, multiply, maximum or minimum")
    f0 = alu(op0)
    parts = x.shape[0]
    cmd = command(reduce_cmd)
    bank = registers._bank()
    reg = bank.get("Vector")
    if cmd == "reset_reduce" or reg is None or reg.shape[0] != parts:
        reg = np.full((parts, 1), identity_of(op1), np.float32)
    if cmd == "load_reduce":
        reg = column(imm1 if imm1 is not None else 0.0, parts, "imm1", op)
    v = values_of(x, "src", op)
    a = column(imm0, parts, "imm0", op)
    pre = f0(v, a)
    out = np.empty_like(v)
    cur = reg[:, 0].astype(np.float32)
    for i in range(v.shape[1]):
        cur = np.asarray(f1(pre[:, i], cur), np.float32)
        out[:, i] = cur
    bank["Vector"] = cur[:, None]
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)


@instruction(engine="Vector", cost=_costs.reciprocal, batched=True)
def reciprocal(dst, data, name=None):
    """``dst = 1 / data`` element-wise (Vector engine), fp32 compute rounded to ``dst.dtype``."""
    d = check_dst(dst, "reciprocal")
    x = tile_operand(data, "data", "reciprocal")
    max_rank("reciprocal", 5, dst=d, data=x)
    v = dt.compute_view(x.data).astype(np.float32)
    with np.errstate(divide="ignore"):
        out = np.float32(1.0) / v
    _prof.instruction("Vector", out)
    write(d, out, "reciprocal", f"reciprocal of {x.shape}")


@instruction(engine="Vector", cost=_costs.scalar_tensor_tensor, batched=True)
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         reduce_cmd=_reduce_cmd.reset_reduce, reduce_op=..., reduce_res=None, name=None):
    """``dst = (data op0 operand0) op1 operand1`` (Vector engine): ``operand0`` a scalar or a [P, 1]
    tile, ``operand1`` a tile with data's partitions and elements per partition; data and operand1
    not both in PSUM; ``reverse0`` / ``reverse1`` swap an operator's inputs.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.scalar_tensor_tensor.html)

    NKI 0.7.0 (Neuron 2.33) adds ``reduce_cmd`` / ``reduce_op`` / ``reduce_res``. The stored page gives
    only the signature, so they are read as :func:`tensor_scalar_reduce`'s (its page describes them): with
    ``reduce_op`` given, the result is reduced over all free axes into the Vector engine's registers per
    ``reduce_cmd`` (default ``reset_reduce``) and, with ``reduce_res`` ([P, 1]) given, written there.
    Without ``reduce_op`` (the signature's ``...``) nothing is reduced and the registers are untouched,
    as before 0.7.0; ``reduce_res`` without ``reduce_op`` is refused.
    """

    op = "scalar_tensor_tensor"
    reducing = reduce_op is not ... and reduce_op is not None
    if reduce_res is not None and not reducing:
        raise NKIError("reduce_op", f"nisa.{op}: reduce_res is given but reduce_op is not: name the reduction "
                       "(nl.add, nl.multiply, nl.max or nl.min)")
    if reducing:
        if _core._tls.program is not None and _core._tls.program.nb:
            raise NotBatchable(f"nisa.{op} reduces into the engine's registers, one program at a time")
        if v4_operator(reduce_op) is not None or alu(reduce_op) not in (np.add, np.multiply, np.maximum, np.minimum):
            raise NKIError("reduce_op", f"nisa.{op}: reduce_op {getattr(reduce_op, '__name__', reduce_op)}; the "
                           "reduce_op can be nl.add, nl.multiply, nl.max or nl.min")
    d = check_dst(dst, op)
    x = tile_operand(data, "data", op)
    o1 = tile_operand(operand1, "operand1", op)
    same_rows(op, x, "data", o1, "operand1")
    same_rows(op, d, "dst", x, "data")
    for fn, what in ((op0, "op0"), (op1, "op1")):
        if is_bitvec(fn):
            raise NKIError("op", f"nisa.{op}: {what}={getattr(fn, '__name__', fn)} is a bitvec operator; op0 and op1 "
                           "must be arithmetic operators (bitvec operators are not supported)")
    if x.buffer is psum and o1.buffer is psum:
        raise NKIError("operand memory", f"nisa.{op}: data and operand1 cannot both be in PSUM")
    parts = x.shape[0]
    v = values_of(x, "data", op)
    a = column(operand0, parts, "operand0", op)
    first = alu(op0)(a, v) if reverse0 else alu(op0)(v, a)
    other = values_of(o1, "operand1", op)
    out = alu(op1)(other, first) if reverse1 else alu(op1)(first, other)
    _prof.instruction("Vector", out)
    write(d, out if d.nb else np.reshape(out, d.shape) if d.shape[0] == parts else out, op)
    if reducing:
        registers.accumulate(op, "Vector", out, parts, reduce_op, reduce_res, reduce_cmd)


@instruction(engine="Vector", cost=_costs.engine_default)
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=_reduce_cmd.idle, reduce_init=0.0, name=None):
    """``dst = exp(src - max_value)`` (Vector engine, fp32 inside; ``max_value`` a scalar or [P, 1] tile),
    with the row sums accumulated in the Vector engine's registers per ``reduce_cmd``
    (``load_reduce`` starts from ``reduce_init``) and written to ``reduce_res``. NeuronCore-v4+.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.exponential.html)
    """

    op = "exponential"
    target.require(op, target.nc_version.gen4)
    d = check_dst(dst, op)
    x = tile_operand(src, "src", op)
    max_rank(op, 4, dst=d, src=x)
    same_rows(op, d, "dst", x, "src")
    cmd = command(reduce_cmd)
    if cmd != "load_reduce" and not (isinstance(reduce_init, (int, float)) and float(reduce_init) == 0.0):
        raise NKIError("reduce_init", f"nisa.{op}: reduce_init is only used with reduce_cmd=load_reduce; leave it 0.0")
    parts = x.shape[0]
    out = np.exp(values_of(x, "src", op) - column(max_value, parts, "max_value", op))
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)
    registers.accumulate(op, "Vector", out, parts, np.add, reduce_res, cmd,
                         init=reduce_init if cmd == "load_reduce" else None)


# ---------------------------------------------------------------------------
# element-wise, reductions and statistics (first-generation arithmetic, dst= rules)
# ---------------------------------------------------------------------------
def _compute_dtype(dst, *tiles):
    """Native integer math when every tile is an integer tile, else fp32 (rounded once, on write)."""
    if dst.dtype.kind not in "iu":  # (the common case, without the generator)
        return dt.float32
    if all(t.dtype.kind in "iu" for t in (dst, *tiles)):  # (np.issubdtype(., np.integer), cheaper)
        return None
    return dt.float32


@instruction(engine="Vector", cost=_costs.copy_like, batched=True, gen1=Gen1(batched=True))
def tensor_copy(dst, src, engine=_engine.unknown, name=None, *, dtype=None):
    """Copy ``src`` (SBUF/PSUM) into ``dst`` (SBUF/PSUM), casting to ``dst.dtype``.

    Same dtype: a bit-exact copy; different dtypes: through fp32. ``dst`` has
    ``src``'s partition size and elements per partition. GpSimd cannot access PSUM.
    ``dtype=`` is the first generation's keyword, still passed by the official matmul tutorial
    (``tensor_copy(dst=fp32_tile, src=psum, dtype=bf16_output.dtype)``): the values are cast to it
    on the way, then written as ``dst.dtype``, so ``dst`` decides the stored type.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_copy.html)
    """

    d = check_dst(dst, "tensor_copy")
    no_gpsimd_psum(engine_name(engine), "tensor_copy", src, d)
    x = _functional._tile(src, "src", "tensor_copy")
    with scratch():
        res = _functional.tensor_copy(x, dtype=d.dtype if dtype is None else dt.as_dtype(dtype))
    write(d, res.data, "tensor_copy", f"source (shape {x.shape})")


@instruction(engine="Vector", cost=_costs.tensor_tensor, batched=True, gen1=Gen1(batched=True))
def tensor_tensor(dst, data1, data2, op, engine=_engine.unknown, name=None):
    """``dst = op(data1, data2)`` element-wise (Vector engine; ``nl.power`` on GpSimd).

    data1 and data2 have the same partition size and the same number of
    elements per partition (no broadcasting: that is ``tensor_scalar``'s job)
    and cannot both be in PSUM; ``dst`` may be SBUF or PSUM. fp32 compute,
    rounded to ``dst.dtype``.
    """

    d = check_dst(dst, "tensor_tensor")
    gen1 = _functional
    a = gen1._tile(data1, "data1", "tensor_tensor")
    b = gen1._tile(data2, "data2", "tensor_tensor")
    ash, bsh = a.shape, b.shape
    if ash != bsh and (ash[0] != bsh[0] or per_partition(ash) != per_partition(bsh)):
        raise NKIError("operand shapes", f"nisa.tensor_tensor: data1 {a.shape} and data2 {b.shape} need the same "
                       "partition size and the same number of elements per partition (use nisa.tensor_scalar "
                       "to broadcast a [P, 1] operand)")
    v4_operators_rule("tensor_tensor", op)
    fn = alu(op)
    if fn in _BITVEC:
        bitvec_on_integers(op, "tensor_tensor", ("data1", a), ("data2", b), ("dst", d))
    if fn is np.power or (engine is not _engine.unknown and engine_name(engine) == "GpSimd"):
        no_gpsimd_psum("GpSimd", "tensor_tensor", a, b, d)
    cdt = _compute_dtype(d, a, b)
    if cdt is not None and (a.buffer is not psum or b.buffer is not psum):
        # fp32 math, as the first generation's nisa.tensor_tensor computes it, without its result tile
        bv = dt.compute_view(b.data)
        compute_into(d, fn, dt.compute_view(a.data), bv if bsh == ash else bv.reshape(ash), cdt, "Vector",
                     "tensor_tensor")
        return
    with scratch():
        if b.shape != a.shape:
            b = Tile(b.data.reshape(a.shape), b.buffer)
        res = _functional.tensor_tensor(a, b, op, dtype=_compute_dtype(d, a, b))
    write(d, res.data, "tensor_tensor")


_V4_NAMES = {}  # operator -> v4_operator's answer


def v4_operators_rule(opname, *ops):
    """``nl.abs_max`` / ``nl.abs_min`` as an instruction's operator: "These are trn3 only and run on the
    Vector Engine. Also usable as op0 with nki.isa.tensor_scalar and nki.isa.tensor_scalar_reduce"
    (NKI 0.4.0 release notes), so an older target refuses them."""
    for op in ops:
        try:
            name = _V4_NAMES[op]  # (each operator is looked at once: this runs per Vector instruction)
        except KeyError:
            name = _V4_NAMES[op] = v4_operator(op)
        except TypeError:  # (an unhashable operator argument: answered each time)
            name = v4_operator(op)
        if name is not None:
            target.require(f"{opname}: op nl.{name}", target.nc_version.gen4)


def _scalar_ops_rules(opname, d, x, op0, operand0, op1, operand1, eng="unknown"):
    """tensor_scalar's operator rules: op1 needs operand1; op0 and op1 are both bitvec or both
    arithmetic; bitvec operators run on the Vector engine, on integer tiles; the GpSimd engine is
    "only allowed for rsqrt"."""
    v4_operators_rule(opname, op0, op1)
    if op1 is not None and operand1 is None:
        raise NKIError("operand1", f"nisa.{opname}: op1={getattr(op1, '__name__', op1)} is given without operand1; "
                       "op1 and operand1 are used together (both None when unused)")
    ops = [fn for fn in (op0, op1) if fn is not None]
    kinds = [not _is_unary(fn) and is_bitvec(fn) for fn in ops]
    if len(set(kinds)) > 1:
        raise NKIError("op", f"nisa.{opname}: op0={getattr(op0, '__name__', op0)} and op1="
                       f"{getattr(op1, '__name__', op1)} mix a bitvec and an arithmetic operator; both must be "
                       "bitvec or both arithmetic")
    if any(kinds):
        if eng not in ("Vector", "unknown"):
            raise NKIError("engine", f"nisa.{opname}: bitvec operators run on the Vector engine only, engine is {eng}")
        bitvec_on_integers(ops[0], opname, ("data", x), ("dst", d), ("operand0", operand0), ("operand1", operand1))
    if eng == "GpSimd" and not (getattr(op0, "__name__", None) == "rsqrt" and op1 is None):
        raise NKIError("engine", f"nisa.{opname}: engine=gpsimd is only allowed for rsqrt (op0=nl.rsqrt, no op1); "
                       f"got op0={getattr(op0, '__name__', op0)}, op1={getattr(op1, '__name__', op1)}")


@instruction(engine="Vector", cost=_costs.copy_like, batched=True, gen1=Gen1(batched=True))
def tensor_scalar(dst, data, op0, operand0=None, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=_engine.unknown, name=None):
    """``dst = (data op0 operand0) op1 operand1`` with scalar or [P, 1] operands broadcast along the free axes.

    ``reverse0`` / ``reverse1`` swap an operator's inputs; ``op1`` is optional (``operand1`` with
    it); a one-input ``op0`` (``nl.exp``, ``nl.abs`` ...) with ``operand0`` None or 0 applies it.
    op0 and op1 are both bitvec or both arithmetic; bitvec operators run on the Vector engine on
    integer tiles (bit patterns, no casting); engine=gpsimd only for rsqrt. fp32 compute, rounded to
    ``dst.dtype``; data and dst in SBUF or PSUM (SBUF only on GpSimd).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_scalar.html)
    """

    d = check_dst(dst, "tensor_scalar")
    eng = engine_name(engine)
    no_gpsimd_psum(eng, "tensor_scalar", data, operand0, operand1, d)
    x = _functional._tile(data, "data", "tensor_scalar")
    _scalar_ops_rules("tensor_scalar", d, x, op0, operand0, op1, operand1, eng)
    with scratch():
        if _unary_operand("tensor_scalar", op0, operand0):
            x = Tile(np.asarray(alu(op0)(dt.compute_view(x.data))), x.buffer)
            res = x if op1 is None else _functional.tensor_scalar(x, op1, operand1, reverse1, dtype=dt.float32)
        else:
            res = _functional.tensor_scalar(x, op0, operand0, reverse0, op1=op1, operand1=operand1, reverse1=reverse1,
                                        dtype=_compute_dtype(d, x))
    write(d, res.data, "tensor_scalar")


@instruction(engine="Vector", cost=_costs.activation_reduce, gen1=Gen1(batched=True))
def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=_reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None):
    """``dst = data op0 operand0`` (one arithmetic operator) plus a reduction of the result over all
    free axes with ``reduce_op`` into ``reduce_res`` ([P, 1]) through the Vector engine's registers
    (``reduce_cmd``, default ``reset_reduce``; ``reduce_res_negate`` writes the negated result).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_scalar_reduce.html)
    """

    d = check_dst(dst, "tensor_scalar_reduce")
    x = _functional._tile(data, "data", "tensor_scalar_reduce")
    max_rank("tensor_scalar_reduce", 4, dst=d, data=x)
    v4_operators_rule("tensor_scalar_reduce", op0)
    if v4_operator(reduce_op) is not None:  # (NKI 0.4.0 adds them "as op0"; the page's reduce_op list stays)
        raise NKIError("reduce_op", f"nisa.tensor_scalar_reduce: reduce_op nl.{v4_operator(reduce_op)}; the "
                       "reduce_op can be nl.add, nl.multiply, nl.max or nl.min (abs_max / abs_min are op0 operators)")
    if _unary_operand("tensor_scalar_reduce", op0, operand0):  # nki-library: op0=nl.abs, operand0=0.0
        out = np.asarray(alu(op0)(dt.compute_view(x.data).astype(np.float32)), np.float32)
    else:
        with scratch():
            out = _functional.tensor_scalar(x, op0, operand0, reverse0, dtype=dt.float32).data
    write(d, out, "tensor_scalar_reduce")
    registers.accumulate("tensor_scalar_reduce", "Vector", out, x.shape[0], reduce_op, reduce_res, reduce_cmd,
                         reduce_init, negate=reduce_res_negate)


@instruction(engine="Vector", cost=_costs.tensor_reduce, batched=True, gen1=Gen1(batched=True))
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """Reduce ``data`` over free ``axis`` with ``op`` into ``dst`` (Vector engine).

    ``axis`` must be the last contiguous free dimension(s), ending at the last
    one; axis 0 (partition) cannot be reduced. Several axes reduce as one: their
    elements, flattened in row-major order, fold left with ``op`` (the same result
    for add / max / ...; for ``nl.subtract`` it is ``x0 - x1 - x2 ...`` over the flattened
    elements). fp32 compute for arithmetic operators; bitvec operators (bitwise_and ...)
    need integer tiles and reduce their bit patterns; ``negate`` (arithmetic operators only)
    multiplies the result by -1. ``dst`` has data's partition size and as many elements per
    partition as the reduction leaves.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_reduce.html)
    """

    v4_operators_rule("tensor_reduce", op)
    d = check_dst(dst, "tensor_reduce")
    x = _functional._tile(data, "data", "tensor_reduce")
    axes = sorted(_tile_ops._axes(x, axis, "tensor_reduce"))
    if axes != list(range(x.ndim - len(axes), x.ndim)):
        raise NKIError("reduce axes", f"nisa.tensor_reduce: axis={axis} on a tile of shape {x.shape}; the reduced "
                       f"axes must be the last contiguous free dimensions, ending at axis {x.ndim - 1}")
    bitvec = is_bitvec(op)
    if bitvec:
        bitvec_on_integers(op, "tensor_reduce", ("data", x), ("dst", d))
        if negate:
            raise NKIError("negate", f"nisa.tensor_reduce: negate=True with the bitvec operator "
                           f"{getattr(op, '__name__', op)}; negate only applies to arithmetic operators")
    with scratch():
        if len(axes) > 1:
            # the trailing axes as one (row-major, the order the engine reads them): a fold of the
            # flattened elements, which non-reorderable operators (subtract) need
            kept = x.shape[:axes[0]]
            flat = Tile(np.reshape(x.data, x.data.shape[:x.nb] + kept + (-1,)), x.buffer)
            res = _functional.tensor_reduce(op, flat, len(kept), negate=negate, keepdims=keepdims,
                                        dtype=x.dtype if bitvec else dt.float32)
            vals = res.data
            if keepdims:
                vals = np.reshape(vals, vals.shape[:x.nb] + kept + (1,) * len(axes))
        else:
            vals = _functional.tensor_reduce(op, x, axis, negate=negate, keepdims=keepdims,
                                         dtype=x.dtype if bitvec else dt.float32).data
    write(d, vals, "tensor_reduce", f"reduction of {x.shape} over axis {axis}")


@instruction(engine="Vector", cost=_costs.tensor_tensor_scan)
def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    """Scan along each partition: ``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` into ``dst``, ``r[-1] =
    initial`` (a scalar or a [P, 1] tile); ``reverse0`` / ``reverse1`` swap an operator's inputs.

    The page's pseudo-code runs per partition over its elements, so a tile with several free axes
    is scanned over the partition's flattened free elements (row-major), one chain per partition.
    data0 and data1 have the same partitions and elements per partition and are not both in PSUM;
    fp32 compute, rounded to ``dst.dtype``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_tensor_scan.html)
    """

    op = "tensor_tensor_scan"
    d = check_dst(dst, op)
    gen1 = _functional
    t0, t1 = gen1._tile(data0, "data0", op), gen1._tile(data1, "data1", op)
    same_rows(op, t0, "data0", t1, "data1")
    same_rows(op, d, "dst", t0, "data0")
    if t0.buffer is psum and t1.buffer is psum:
        raise NKIError("operand memory", "nisa.tensor_tensor_scan: data0 and data1 cannot both be in PSUM")
    parts = t0.shape[0]
    a = values_of(t0, "data0", op)  # [P, elements]: the chain runs over all of a partition's elements
    b = values_of(t1, "data1", op)
    f0, f1 = alu(op0), alu(op1)
    prev = column(initial, parts, "initial", op)[:, 0]
    out = np.empty_like(a)
    for i in range(a.shape[1]):
        t = f0(a[:, i], prev) if not reverse0 else f0(prev, a[:, i])  # the page: op0(data0[:, i], result[:, i-1])
        prev = f1(t, b[:, i]) if not reverse1 else f1(b[:, i], t)
        out[:, i] = prev
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)


def _memset_value_rule(d, value):
    """NKI 0.3.0: "nisa.memset - Enforces strict type matching between value and destination dtype ...
    Kernels that pass float values to integer-typed tensors (e.g., value=2.0 instead of value=2) will now
    raise an error" (release notes). Refused here: a float with a fraction, which an integer tile cannot
    hold. A whole float (0.0, 2.0) is accepted although the note's example refuses it: nki-library
    (d2ad3a5), hardware-tested, fills uint32 tiles with value=0.0 (utils/cross_partition_copy.py, under
    router_topk), so refusing it would reject official kernels. The current API's kernels only: the first
    generation kept its rules."""
    prog = _core.current_or_none()
    if prog is None or not getattr(prog, "current_api", False) or d.dtype.kind not in "iu":
        return
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise NKIError("memset value", f"nisa.memset: value={value!r} is a float with a fraction but dst (shape "
                       f"{d.shape}) is {d.dtype}; the value must match the destination dtype (an int for an "
                       "integer tile)")


@instruction(engine="Vector", cost=_costs.memset, batched=True, gen1=Gen1(batched=True))
def memset(dst, value, engine=_engine.unknown, name=None):
    """Fill ``dst`` with the compile-time constant ``value`` (Vector or GpSimd engine; GpSimd cannot reach
    PSUM). Every NKI dtype; for the x4 packed types (``float8_e4m3fn_x4``, ``float8_e5m2_x4``,
    ``float4_e2m1fn_x4``) only ``value=0`` (all-zero bits) is supported.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.memset.html)
    """

    d = check_dst(dst, "memset")
    max_rank("memset", 5, dst=d)
    eng = engine_name(engine)
    if eng not in ("Vector", "GpSimd", "unknown"):
        raise NKIError("engine", f"nisa.memset: engine={engine!r}; memset runs on nki.isa.engine.vector or "
                       "nki.isa.engine.gpsimd (or engine.unknown, the compiler's choice)")
    no_gpsimd_psum(eng, "memset", d)
    _memset_value_rule(d, value)
    if d.dtype in dt.PACKED_X4:
        if isinstance(value, Tile) or float(value) != 0.0:
            raise NKIError("packed dtype", f"nisa.memset: dst (shape {d.shape}) has the x4 packed dtype "
                           f"{d.dtype.names[0]}; only value=0 is supported for x4 packed types, got {value!r}")
        vals = np.zeros(d.shape, d.dtype)  # four zero elements in each packed element: all bits clear
    else:
        vals = np.full(d.shape, value)
    _prof.instruction("GpSimd" if eng == "GpSimd" else "Vector", d.data)
    write(d, vals, "memset")


@instruction(engine="Vector", cost=_costs.engine_default)
def bn_stats(dst, data, name=None):
    """Per-partition mean/variance statistics of ``data`` (<= 512 elements) into ``dst`` (Vector engine)."""

    d = check_dst(dst, "bn_stats")
    x = _functional._tile(data, "data", "bn_stats")
    v = dt.compute_view(x.data).reshape(x.shape[0], -1).astype(np.float32)

    fmax = _tile_ops.tile_size.bn_stats_fmax
    if v.shape[1] > fmax:
        raise NKIError("bn_stats", f"free size {v.shape[1]} > {fmax} (bn_stats_fmax)")
    cols = []
    for half in (v[:, 0::2], v[:, 1::2]):  # (count, mean, var * count) of the even, then the odd elements
        n = half.shape[1]
        mean = half.mean(1, keepdims=True) if n else np.zeros((v.shape[0], 1), np.float32)
        m2 = ((half - mean) ** 2).sum(1, keepdims=True) if n else np.zeros_like(mean)
        cols += [np.full_like(mean, n), mean, m2]
    out = np.concatenate(cols, 1)
    _prof.instruction("Vector", out)
    write(d, out, "bn_stats")


@instruction(engine="Vector", cost=_costs.bn_aggr)
def bn_aggr(dst, data, name=None):
    """Combine ``bn_stats`` outputs into [P, 2] mean and variance in ``dst``."""

    d = check_dst(dst, "bn_aggr")
    x = _functional._tile(data, "data", "bn_aggr")
    max_rank("bn_aggr", 5, data=x)
    max_rank("bn_aggr", 3, dst=d)
    if per_partition(x.shape) % 3:
        raise NKIError("bn_aggr", f"nisa.bn_aggr: data (shape {x.shape}) has {per_partition(x.shape)} elements per "
                       "partition; bn_aggr reads (count, mean, variance*count) triples from bn_stats, so the "
                       "number of elements per partition must be a multiple of three")
    s = dt.compute_view(x.data).reshape(x.shape[0], -1, 3).astype(np.float64)
    n, mean, m2 = s[..., 0], s[..., 1], s[..., 2]
    tot = n.sum(1, keepdims=True)
    m = (n * mean).sum(1, keepdims=True) / tot
    var = (m2 + n * (mean - m) ** 2).sum(1, keepdims=True) / tot
    out = np.concatenate([m, var], 1).astype(np.float32)  # the engine's fp32 result, then dst's dtype
    _prof.instruction("Vector", out)
    write(d, out, "bn_aggr")
