"""Scalar Engine instructions added with NeuronCore-v4: ``activate2`` (two tensor-scalar stages,
an activation and a configurable reduction in one instruction)."""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import recording as _prof
from ..core import Tile
from ..errors import NKIError, NotBatchable
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from .registry import Gen1
from . import functional as _functional  # the computing forms both generations share
from .operands import (alu, check_dst, column, engine_name, instruction, no_gpsimd_psum, one_per_partition,
                       per_partition, rows,
                       tile_operand, write)
from .target import engine as _engine
from .target import reduce_cmd as _reduce_cmd
from . import registers, target
from .operands import scratch
from .operators import v4_operator

# The six (op0, op1) pairs of the tensor-scalar stage, by NumPy function (identity = bypass).
_IDENTITY = "bypass"


def _stage(op):
    name = getattr(op, "__name__", None)
    if op is None or name in ("bypass", "copy", "identity"):
        return _IDENTITY
    fn = alu(op)
    return {np.multiply: "multiply", np.add: "add", np.subtract: "subtract"}.get(fn, getattr(fn, "__name__", fn))


_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", _IDENTITY), ("add", _IDENTITY),
          ("subtract", _IDENTITY), (_IDENTITY, _IDENTITY)}


@instruction(engine="Scalar", cost=_costs.activation)
def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False, reduce_op=None,
              reduce_res=None, reduce_cmd=_reduce_cmd.idle, engine=_engine.scalar, name=None):
    """``dst = op((data op0 imm0) op1 imm1)`` (``imm0 op0 data`` with ``reverse0``, ``imm1 op1 x`` with
    ``reverse1``), fp32 inside, with an optional free-axis reduction (``reduce_op``: add, max,
    min, abs_max or abs_min) into the Scalar engine's registers per ``reduce_cmd``; (op0, op1) is one of the six pairs
    the page lists; ``relu_param`` is the negative slope when ``op`` is ``nl.relu``. NeuronCore-v4+.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.activate2.html)
    """

    name_ = "activate2"
    target.require(name_, target.nc_version.gen4)
    eng = engine_name(engine)
    d = check_dst(dst, name_)
    x = tile_operand(data, "data", name_)
    no_gpsimd_psum(eng, name_, d, x)
    if x.shape[0] != d.shape[0] or per_partition(x.shape) != per_partition(d.shape):
        raise NKIError("dst shape", f"nisa.{name_}: dst {d.shape} must match data {x.shape}")
    pair = (_stage(op0), _stage(op1))
    if pair not in _PAIRS:
        raise NKIError("op", f"nisa.{name_}: (op0, op1) = {pair} is not one of the supported pairs {sorted(_PAIRS)}")
    parts = x.shape[0]
    v = rows(dt.compute_view(x.data), parts).astype(np.float32)
    for stage, imm, rev, what in ((op0, imm0, reverse0, "imm0"), (op1, imm1, reverse1, "imm1")):
        if _stage(stage) == _IDENTITY:
            continue
        a = column(imm, parts, what, name_)
        v = alu(stage)(a, v) if rev else alu(stage)(v, a)
    if getattr(op, "__name__", None) == "relu" or is_prelu(op):
        # relu_param: the negative slope (nl.prelu's "relu_param argument"), a scalar or a [P, 1] tile
        slope = column(relu_param, parts, "relu_param", name_)
        out = np.where(v >= 0, v, slope * v).astype(np.float32)
    else:
        if isinstance(relu_param, Tile) or float(relu_param) != 0.0:
            raise NKIError("relu_param", f"nisa.{name_}: relu_param={relu_param} only applies to the parameterized "
                           f"activations (nl.prelu, nl.relu), op is {op!r}")
        out = np.asarray(alu(op)(v), np.float32)
    _prof.instruction(eng, out)
    write(d, out.reshape(d.shape), name_)
    if reduce_op is not None or reduce_res is not None:
        if eng != "Scalar":
            raise NKIError("reduce_cmd", f"nisa.{name_}: the accumulation registers are on the Scalar engine only")
        # the page: "Supported: nl.add, nl.maximum, nl.minimum, nl.abs_max, nl.abs_min"
        if reduce_op is not None and alu(reduce_op) not in (np.add, np.maximum, np.minimum) \
                and v4_operator(reduce_op) is None:
            raise NKIError("reduce_op", f"nisa.{name_}: reduce_op {reduce_op!r}: add, maximum, minimum, abs_max "
                           "or abs_min")
    registers.accumulate(name_, "Scalar", out, parts, reduce_op, reduce_res, reduce_cmd)


_DEFAULT_CMD = object()


@instruction(engine="Scalar", cost=_costs.activation, batched=True, gen1=Gen1(batched=True))
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=_DEFAULT_CMD,
               engine=_engine.scalar, name=None):
    """``dst = op(data * scale + bias)`` on the Scalar engine (or GpSimd, NeuronCore-v4+), with an
    optional free-axis reduction of the result on the Scalar engine.

    ``scale`` and ``bias`` are scalars or [P, 1] tiles. The reduction (``reduce_op``
    must be ``nl.add``: the Scalar engine's registers only sum) feeds per-partition
    registers controlled by ``reduce_cmd`` (``reset``, ``idle``, ``reduce``,
    ``reset_reduce``); ``reduce_res`` ([P, 1]) receives them. Given ``reduce_res`` and
    ``reduce_op`` without ``reduce_cmd``, the simulator uses ``reset_reduce``
    (``activation_reduce``'s behaviour, which kernels of earlier releases expect).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.activation.html)
    """

    op_name = "activation"
    eng = engine_name(engine)
    if eng in ("unknown", "None"):
        eng = "Scalar"
    if eng not in ("Scalar", "GpSimd"):
        raise NKIError("engine", f"nisa.{op_name}: engine {engine!r}; activation runs on the Scalar engine (or "
                       "GpSimd from NeuronCore-v4)")
    if eng == "GpSimd":
        target.require(op_name + " on the GpSimd engine", target.nc_version.gen4)
    d = check_dst(dst, op_name)
    x = tile_operand(data, "data", op_name)
    no_gpsimd_psum(eng, op_name, d, x, bias, scale)
    if reduce_cmd is _DEFAULT_CMD:
        reduce_cmd = "reset_reduce" if (reduce_res is not None and reduce_op is not None) else "idle"
    reducing = reduce_res is not None or getattr(reduce_cmd, "value", reduce_cmd) != "idle"
    if reducing and eng != "Scalar":
        raise NKIError("reduce_cmd", f"nisa.{op_name}: the accumulation registers are on the Scalar engine only")
    if reduce_op is not None and alu(reduce_op) is not np.add:
        raise NKIError("reduce_op", f"nisa.{op_name}: reduce_op {reduce_op!r}; the Scalar engine's reduction "
                       "registers only sum (nl.add); use nisa.tensor_reduce or nisa.activate2 for max/min")
    if reducing and x.nb:
        raise NotBatchable(f"nisa.{op_name}: the accumulation registers in a batch of programs")
    one_per_partition(reduce_res, x.shape[0], "reduce_res", op_name)  # "a tile of shape (data.shape[0], 1)"
    with scratch():
        res = _functional.activation(_identity_op(op), x, bias=bias, scale=scale, dtype=dt.float32)
    out = res.data
    write(d, out, op_name)
    registers.accumulate(op_name, "Scalar", out, x.shape[0], reduce_op, reduce_res, reduce_cmd)


def is_prelu(op) -> bool:
    """Whether ``op`` is ``nl.prelu``: the current ``nki.language`` lists it as the parametric-ReLU
    activation constant; the simulator's ``nl.prelu`` is also the element-wise function
    ``prelu(x, alpha)``, which as an ``op=`` means the activation (as ``nl.copy`` means the identity)."""
    return getattr(op, "__name__", None) == "prelu" and "nki_kernels" in (getattr(op, "__module__", "") or "")


def _identity_op(op):
    """``nl.copy`` / ``nl.bypass`` of either generation as the identity activation. ``nl.prelu`` is
    refused: its negative slope is "controlled by the relu_param argument", which ``nisa.activation``
    does not take, and a slope the pages do not state would be a guess (``nisa.activate2`` takes it)."""
    if is_prelu(op):
        raise NKIError("op", "nisa.activation: op=nl.prelu needs its negative slope, the relu_param argument, "
                       "which nisa.activation does not take; use nisa.activate2(op=nl.prelu, relu_param=...) "
                       "(NeuronCore-v4+), or nl.relu for slope 0")
    return np.copy if getattr(op, "__name__", None) in ("copy", "bypass") else op


@instruction(engine="Scalar", cost=_costs.activation_reduce, gen1=Gen1(batched=True))
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``activation`` plus a free-axis sum of its result into ``reduce_res`` (registers reset first)."""
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd="reset_reduce")
