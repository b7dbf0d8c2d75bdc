"""Microscaling (OCP MX) instructions: ``quantize_mx`` (Vector engine) and ``nc_matmul_mx``
(Tensor engine), NeuronCore-v4 and newer.

Layout, as the reference pages give it: a scaling group is 32 values, 8 partitions x 4
consecutive elements of one partition. Data tiles use the packed ``*_x4`` dtypes, each element
holding the 4 values of one partition's part of a group, so a ``[P, F]`` source quantizes into a
``[P, F / 4]`` packed tile. Scales are ``float8_e8m0fnu`` (or ``uint8``) biased exponents, one
per group: group ``g`` of partitions ``8g .. 8g + 7`` keeps its scales in partition
``(g // 4) * 32 + g % 4`` of the scale tile (the first four partitions of each 32-partition
quadrant), column ``j`` for elements ``4j .. 4j + 3``.

Block scale of ``quantize_mx``: the reference pages of two Neuron releases differ. The Neuron
2.29 page says only "as defined in the OCP Microscaling standard", whose sample conversion takes
``shared_exp = floor(log2(amax)) - emax_elem`` (emax_elem 8 for e4m3, 15 for e5m2, 2 for e2m1)
and saturates values past the element maximum; nki-library's and nki-samples' goldens "matching
the hardware" compute exactly that. The Neuron 2.32 page says the instruction uses "a block scale
that is two times larger" (``shared_exp + 1``), so the largest value never saturates. The
simulator follows the OCP sample rule by default; ``NKI_SIM_MX_SCALE=double`` (or
:func:`use_scale_rule`) selects the 2.32 page's rule.
"""

from __future__ import annotations

import contextlib
import os

import ml_dtypes
import numpy as np

from .. import dtypes as dt
from .. import recording as _prof
from ..core import psum, sbuf
from ..errors import NKIError
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from .operands import check_dst, instruction, per_partition, psum_accumulate, rows, tile_operand, write
from .target import nc_version, require

GROUP_PARTITIONS = 8
GROUP_ELEMENTS = 4
_EMAX = {dt.float8_e4m3fn_x4: 8, dt.float8_e5m2_x4: 15, dt.float4_e2m1fn_x4: 2}
_SCALE_DTYPES = (dt.float8_e8m0fnu, dt.uint8)
_F32_BIAS = 127
SCALE_RULES = {"ocp": 0, "double": 1}  # rule name -> exponent added to the OCP sample scale


def _rule_from_env():
    name = os.environ.get("NKI_SIM_MX_SCALE", "ocp").strip().lower()
    if name not in SCALE_RULES:
        raise ValueError(f"NKI_SIM_MX_SCALE={name!r}: expected one of {', '.join(SCALE_RULES)}")
    return name


scale_rule = _rule_from_env()


@contextlib.contextmanager
def use_scale_rule(name):
    """Run a block with ``quantize_mx`` block scales chosen by rule ``name`` (``"ocp"``: the OCP
    sample conversion, ``"double"``: two times that, as the Neuron 2.32 reference page states)."""
    global scale_rule
    if name not in SCALE_RULES:
        raise ValueError(f"MX scale rule {name!r} is not one of {', '.join(SCALE_RULES)}")
    old, scale_rule = scale_rule, name
    try:
        yield
    finally:
        scale_rule = old


def scale_partition(group):
    """The partition of a scale tile that holds the scales of 8-partition group ``group``."""
    return (group // 4) * 32 + group % 4


def _scale_rows(groups):
    return scale_partition(groups - 1) + 1 if groups else 0


def _exponent_field(x):
    """The biased fp32 exponent field of ``x`` (0 for zeros and subnormals)."""
    return ((np.abs(x).astype(np.float32).view(np.uint32) >> 23) & 0xFF).astype(np.int32)


@instruction(engine="Vector", cost=_costs.engine_default)
def quantize_mx(dst, src, dst_scale, name=None):
    """Quantize a float16/bfloat16 SBUF tile ``src`` [P, F] (P a multiple of 32, <= 128; F a multiple
    of 4) to MXFP8: ``dst`` [P, F / 4] in ``float8_e4m3fn_x4`` / ``float8_e5m2_x4``, ``dst_scale``
    the e8m0 biased exponent of each 32-value group (see the module docstring for the layout);
    the partitions of ``dst_scale`` that hold no scale are set to 0.
    Scale exponent = the group's largest fp32 exponent - element emax (the OCP sample conversion;
    one more under the ``double`` rule, see the module docstring), clamped to the e8m0 range; values
    are divided by the scale, saturated to the element maximum and rounded to nearest even.
    NeuronCore-v4 and newer.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.quantize_mx.html)
    """
    op = "quantize_mx"
    require(op, nc_version.gen4)
    d = check_dst(dst, op, (sbuf,))
    s = tile_operand(src, "src", op, (sbuf,))
    sc = check_dst(dst_scale, op, (sbuf,))
    if s.dtype not in (dt.float16, dt.bfloat16):
        raise NKIError("dtype", f"nisa.{op}: src dtype {s.dtype}; it must be float16 or bfloat16")
    if d.dtype not in (dt.float8_e4m3fn_x4, dt.float8_e5m2_x4):
        raise NKIError("dtype", f"nisa.{op}: dst dtype {d.dtype}; it must be float8_e4m3fn_x4 or float8_e5m2_x4")
    if sc.dtype not in _SCALE_DTYPES:
        raise NKIError("dtype", f"nisa.{op}: dst_scale dtype {sc.dtype}; it must be float8_e8m0fnu (or uint8)")
    P, F = s.shape[0], per_partition(s.shape)
    if P % 32 or P > 128:
        raise NKIError("partition dimension", f"nisa.{op}: src {s.shape} has {P} partitions; it must be a "
                       "multiple of 32 and at most 128")
    if F % GROUP_ELEMENTS:
        raise NKIError("operand shapes", f"nisa.{op}: src {s.shape} has {F} elements per partition; it must be "
                       "a multiple of 4")
    if d.shape[0] != P or per_partition(d.shape) != F // 4:
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must have {P} partitions and {F // 4} packed "
                       "elements per partition (four values each)")
    groups = P // GROUP_PARTITIONS
    if sc.shape[0] < _scale_rows(groups) or per_partition(sc.shape) != F // 4:
        raise NKIError("dst_scale shape", f"nisa.{op}: dst_scale {sc.shape} needs at least {_scale_rows(groups)} "
                       f"partitions and {F // 4} elements per partition (one scale per 8x4 group)")
    x = rows(dt.compute_view(s.data), P).astype(np.float32)
    emax = _EMAX[d.dtype]
    field = _exponent_field(x).reshape(groups, GROUP_PARTITIONS, F // 4, GROUP_ELEMENTS).max(axis=(1, 3))
    scale = np.clip(field - emax + SCALE_RULES[scale_rule], 0, 254)  # [groups, F/4], biased
    factor = np.exp2(np.repeat(np.repeat(scale, GROUP_PARTITIONS, 0), GROUP_ELEMENTS, 1).astype(np.float64)
                     - _F32_BIAS)
    elem = dt.PACKED_X4[d.dtype]
    limit = float(ml_dtypes.finfo(elem).max)
    q = np.clip(x.astype(np.float64) / factor, -limit, limit)
    _prof.instruction("Vector", q)
    write(d, dt.pack_x4(q, d.dtype).reshape(d.shape), op, "quantized data")
    # The Vector engine writes the whole dst_scale access pattern: partitions that hold no scale
    # (4..31 of each quadrant) are written 0, as nki-library's hardware-validated goldens expect.
    out = np.zeros((sc.shape[0], F // 4), np.uint8)
    for g in range(groups):
        out[scale_partition(g)] = scale[g]
    write(sc, out.view(sc.dtype).reshape(sc.shape), op, "scales")


def _scales(t, name, K, free, op):
    """fp32 scale factors [K, free] of a packed operand, read from scale tile ``t`` (HW layout)."""
    s = tile_operand(t, name, op, (sbuf,))
    if s.dtype not in _SCALE_DTYPES:
        raise NKIError("dtype", f"nisa.{op}: {name} dtype {s.dtype}; it must be float8_e8m0fnu (or uint8)")
    groups = K // GROUP_PARTITIONS
    if s.shape[0] < _scale_rows(groups) or per_partition(s.shape) < free:
        raise NKIError("operand shapes", f"nisa.{op}: {name} {s.shape} needs at least {_scale_rows(groups)} "
                       f"partitions and {free} elements per partition")
    raw = rows(s.data, s.shape[0]).view(np.uint8)
    biased = np.stack([raw[scale_partition(g), :free] for g in range(groups)]).astype(np.float64)
    return np.repeat(np.exp2(biased - _F32_BIAS), GROUP_PARTITIONS, axis=0)


@instruction(engine="Tensor", cost=_costs.matmul)
def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
                 accumulate=None, name=None):
    """``dst[m, n] = sum_{k, q} S[k, m, q] * s_S[k // 8, m] * M[k, n, q] * s_M[k // 8, n]`` on the Tensor
    engine: stationary [K, M] and moving [K, N] packed MX tiles (``float8_e4m3fn_x4`` /
    ``float8_e5m2_x4`` / ``float4_e2m1fn_x4``; the 4 values of an element run along the
    contraction) with their e8m0 scale tiles; K a multiple of 32 and <= 128, M even and <= 128,
    N <= 4096 (8192 for a bfloat16 dst); dst a float32 (or bfloat16) PSUM tile, accumulating as
    ``nc_matmul`` does; row tiling with ``tile_position`` / ``tile_size`` (both or neither). NeuronCore-v4+.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.nc_matmul_mx.html)
    """
    op = "nc_matmul_mx"
    require(op, nc_version.gen4)
    d = check_dst(dst, op, (psum,))
    if d.dtype not in (dt.float32, dt.bfloat16):
        raise NKIError("dst dtype", f"nisa.{op}: dst dtype {d.dtype}; the result tile is float32 or bfloat16")
    s = tile_operand(stationary, "stationary", op, (sbuf,))
    m = tile_operand(moving, "moving", op, (sbuf,))
    for t, what in ((s, "stationary"), (m, "moving")):
        if t.dtype not in _EMAX:
            raise NKIError("dtype", f"nisa.{op}: {what} dtype {t.dtype}; it must be a packed MX type "
                           "(float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4)")
    K, M, N = s.shape[0], per_partition(s.shape), per_partition(m.shape)
    if m.shape[0] != K:
        raise NKIError("matmul operands", f"nisa.{op}: stationary {s.shape} and moving {m.shape} need the same "
                       "partition (contraction) size")
    if K % 32 or K > 128:
        raise NKIError("matmul operands", f"nisa.{op}: contraction size {K} must be a multiple of 32, <= 128")
    n_max = 4096 if d.dtype == dt.float32 else 8192  # the whole PSUM (8 banks)
    if M > 128 or M % 2 or N > n_max:
        raise NKIError("matmul operands", f"nisa.{op}: stationary free size {M} must be even and <= 128, moving "
                       f"free size {N} <= {n_max} (8 PSUM banks of {d.dtype})")
    if (tile_position is None) != (tile_size is None):
        raise NKIError("tile_size", f"nisa.{op}: tile_position and tile_size must both be set to use row tiling")
    if tile_size is not None:
        rows_, cols = tuple(int(v) for v in tile_size)
        start, col0 = tuple(int(v) for v in tile_position)
        if rows_ not in (32, 64, 128) or cols != 128 or K > rows_:
            raise NKIError("tile_size", f"nisa.{op}: tile_size {tuple(tile_size)}: row size 128, 64 or 32 (at "
                           f"least the stationary's {K} partitions) and column size 128")
        if col0 != 0 or start % rows_ or start + rows_ > 128:
            raise NKIError("tile_position", f"nisa.{op}: tile_position {tuple(tile_position)}: start column 0, start "
                           f"row a multiple of the row size {rows_} within the 128 PE rows")
    if d.shape[0] != M or per_partition(d.shape) != N:
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must be [{M}, {N}]")
    sv = dt.unpack_x4(rows(s.data, K)).reshape(K, M, 4).astype(np.float64)
    mv = dt.unpack_x4(rows(m.data, K)).reshape(K, N, 4).astype(np.float64)
    sv *= _scales(stationary_scale, "stationary_scale", K, M, op)[:, :, None]
    mv *= _scales(moving_scale, "moving_scale", K, N, op)[:, :, None]
    prod = np.einsum("kiq,kjq->ij", sv, mv).astype(np.float32)
    prod = psum_accumulate(d, prod, accumulate, op)
    _prof.instruction("Tensor", prod)
    write(d, prod.reshape(d.shape), op)
