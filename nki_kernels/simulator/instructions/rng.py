"""The engines' pseudo random number generators: XORWOW per compute lane (partition).

``rand_set_state`` / ``set_rng_seed`` seed them, ``rand_get_state`` reads the state back,
``rng`` draws raw 32-bit values, ``rand2`` uniform floats in ``[min, max]`` and
``dropout`` zeroes elements with a drop probability. Each program of a launch owns its
generators; the same seeds give the same numbers, run after run. The state of a lane is
XORWOW's five xorshift words plus its Weyl counter (6 uint32); the Vector engine's state
tile holds 24 values per lane (the first 6 drive the generator here).
"""

from __future__ import annotations

import numpy as np

from .. import core
from .. import dtypes as dt
from .. import recording as _prof
from ..core import Tile, sbuf
from ..errors import NKIError
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from .operands import (check_dst, column, engine_name, instruction, no_gpsimd_psum, per_partition, rows,
                       tile_operand, write)
from .target import engine as _engine
from . import target

_LANES = 128
_WEYL = np.uint32(362437)


def _splitmix(x):
    """SplitMix32-style mixing of seeds into well-spread state words."""
    x = (np.asarray(x, np.uint64) + np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF)
    x = ((x ^ (x >> np.uint64(16))) * np.uint64(0x85EBCA6B)) & np.uint64(0xFFFFFFFF)
    x = ((x ^ (x >> np.uint64(13))) * np.uint64(0xC2B2AE35)) & np.uint64(0xFFFFFFFF)
    return (x ^ (x >> np.uint64(16))).astype(np.uint32)


def _seeded(seed):
    """A [128, 6] XORWOW state from one 32-bit seed (each lane its own stream)."""
    lanes = np.arange(_LANES, dtype=np.uint64)
    words = [_splitmix(np.uint64(seed) * np.uint64(7) + lanes * np.uint64(6) + np.uint64(k)) for k in range(6)]
    state = np.stack(words, axis=1)
    state[:, :5] |= (state[:, :5] == 0).astype(np.uint32)  # xorshift words must not all be zero
    return state


def _states():
    prog = core.current()
    bank = prog.__dict__.setdefault("_nki_rng", {})
    return bank


def _state(eng):
    bank = _states()
    if eng not in bank:
        bank[eng] = _seeded(0)
    return bank[eng]


def _draw(state, parts, n):
    """``n`` XORWOW outputs for each of the first ``parts`` lanes (advances ``state`` in place)."""
    out = np.empty((parts, n), np.uint32)
    x = state[:parts, :5].copy()
    d = state[:parts, 5].copy()
    with np.errstate(over="ignore"):
        for i in range(n):
            t = x[:, 4]
            s = x[:, 0]
            x[:, 4] = x[:, 3]
            x[:, 3] = x[:, 2]
            x[:, 2] = x[:, 1]
            x[:, 1] = s
            t = t ^ (t >> np.uint32(2))
            t = t ^ (t << np.uint32(1))
            t = t ^ (s ^ (s << np.uint32(4)))
            x[:, 0] = t
            d = d + _WEYL
            out[:, i] = t + d
    state[:parts, :5] = x
    state[:parts, 5] = d
    return out


def _lane_engine(engine, op, *tiles, default="Vector"):
    eng = engine_name(engine)
    if eng in ("unknown", "None"):
        eng = default
    if eng not in ("Vector", "GpSimd"):
        raise NKIError("engine", f"nisa.{op}: engine {engine!r}; the random number generators are on the Vector "
                       "and GpSimd engines")
    no_gpsimd_psum(eng, op, *tiles)
    return eng


@instruction(engine="Vector", cost=_costs.engine_default)
def rand_set_state(src_seeds, engine=_engine.gpsimd, name=None):
    """Seed the PRNG of each compute lane from the matching partition of ``src_seeds`` (uint32, 6
    values per lane on GpSimd, 24 on Vector). NeuronCore-v3+ (Vector: v4+)."""

    op = "rand_set_state"
    target.require(op, target.nc_version.gen3)
    s = tile_operand(src_seeds, "src_seeds", op, (sbuf,))
    eng = _lane_engine(engine, op, s, default="GpSimd")
    if eng == "Vector":
        target.require(op + " on the Vector engine", target.nc_version.gen4)
    if s.dtype != dt.uint32:
        raise NKIError("dtype", f"nisa.{op}: src_seeds dtype {s.dtype}; it must be uint32")
    want = 6 if eng == "GpSimd" else 24
    if per_partition(s.shape) != want:
        raise NKIError("operand shapes", f"nisa.{op}: src_seeds {s.shape} must hold {want} uint32 per lane for "
                       f"the {eng} engine's XORWOW state")
    state = _state(eng)
    state[:s.shape[0]] = rows(s.data, s.shape[0])[:, :6]


@instruction(engine="Vector", cost=_costs.engine_default)
def rand_get_state(dst, engine=_engine.gpsimd, name=None):
    """Write the PRNG state of each lane into the matching partition of ``dst`` (uint32, 6 values per
    lane on GpSimd, 24 on Vector)."""

    op = "rand_get_state"
    target.require(op, target.nc_version.gen3)
    d = check_dst(dst, op)
    eng = _lane_engine(engine, op, d, default="GpSimd")
    if eng == "Vector":
        target.require(op + " on the Vector engine", target.nc_version.gen4)
    elif target.get_nc_version() < target.nc_version.gen4 and d.buffer.name != "sbuf":
        raise NKIError("dst memory", f"nisa.{op}: on NeuronCore-v3 dst must be in SBUF")
    if d.dtype != dt.uint32:
        raise NKIError("dtype", f"nisa.{op}: dst dtype {d.dtype}; it must be uint32")
    want = 6 if eng == "GpSimd" else 24
    if per_partition(d.shape) != want:
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must hold {want} uint32 per lane")
    st = _state(eng)[:d.shape[0]]
    out = np.zeros((d.shape[0], want), np.uint32)
    out[:, :6] = st
    write(d, out.reshape(d.shape), op)


@instruction(engine="Vector", cost=_costs.engine_default)
def set_rng_seed(src_seeds, name=None):
    """Seed the Vector engine's PRNG from the single 32-bit value in ``src_seeds`` ([1, 1], SBUF or PSUM):
    the same seed gives the same numbers from ``nisa.rng`` / ``rand2`` / ``dropout``."""
    s = tile_operand(src_seeds, "src_seeds", "set_rng_seed")
    if int(np.prod(s.shape)) != 1 or s.dtype.itemsize != 4:
        raise NKIError("operand shapes", f"nisa.set_rng_seed: src_seeds must be a [1, 1] 32-bit tensor, got "
                       f"{s.shape} {s.dtype}")
    seed = int(np.asarray(s.data).reshape(-1).view(np.uint32)[0])
    _states()["Vector"] = _seeded(seed)


@instruction(engine="Vector", cost=_costs.engine_default)
def rng(dst, engine=_engine.vector, name=None):
    """Fill ``dst`` with raw 32-bit XORWOW values of each lane's generator, converted to ``dst.dtype``."""

    d = check_dst(dst, "rng")
    eng = _lane_engine(engine, "rng", d)
    if eng == "GpSimd":
        target.require("rng on the GpSimd engine", target.nc_version.gen3)
    if d.dtype not in (dt.int8, dt.int16, dt.int32, dt.uint8, dt.uint16, dt.uint32):
        raise NKIError("dst dtype", f"nisa.rng: dst dtype {d.dtype}; it must be int8, int16, int32, uint8, uint16 "
                       "or uint32 (the random bits, least significant first)")
    vals = _draw(_state(eng), d.shape[0], per_partition(d.shape))
    _prof.instruction(eng, vals)
    # Each element keeps the least significant bits of its 32-bit draw.
    unsigned = np.dtype(f"uint{8 * d.dtype.itemsize}")
    low = (vals & np.uint32(np.iinfo(unsigned).max)).astype(unsigned).view(d.dtype)
    write(d, low.reshape(d.shape), "rng")


def uniform(parts, n, eng="Vector"):
    """``[parts, n]`` fp32 draws in [0, 1) from ``eng``'s generators."""
    return (_draw(_state(eng), parts, n) >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


@instruction(engine="Vector", cost=_costs.engine_default)
def rand2(dst, min, max, name=None):  # noqa: A002 - the documented parameter names
    """Uniform fp32 random numbers in ``[min, max]`` (scalars or [P, 1] tiles) into ``dst`` (Vector
    engine, XORWOW; NeuronCore-v4+)."""

    op = "rand2"
    target.require(op, target.nc_version.gen4)
    d = check_dst(dst, op)
    lo, hi = column(min, d.shape[0], "min", op), column(max, d.shape[0], "max", op)
    if np.any(np.asarray(lo) >= np.asarray(hi)):
        raise NKIError(op, f"nisa.{op}: min must be < max")
    u = uniform(d.shape[0], per_partition(d.shape))
    out = lo + (hi - lo) * u
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)


@instruction(engine="Vector", cost=_costs.engine_default)
def dropout(dst, data, prob, name=None):
    """Zero each element of ``data`` with drop probability ``prob`` (a scalar or a [P, 1] tile of
    per-partition probabilities; 1.0 drops all, 0.0 keeps all), Vector engine's generator."""
    op = "dropout"
    d = check_dst(dst, op)
    x = tile_operand(data, "data", op)
    if x.shape[0] != d.shape[0] or per_partition(x.shape) != per_partition(d.shape):
        raise NKIError("dst shape", f"nisa.{op}: dst {d.shape} must match data {x.shape}")
    if d.dtype != x.dtype:
        raise NKIError("dtype", f"nisa.{op}: dst dtype {d.dtype} must match data dtype {x.dtype}")
    if np.issubdtype(x.dtype, np.integer) and isinstance(prob, Tile) and prob.dtype != dt.float32:
        raise NKIError("dtype", f"nisa.{op}: with integer data ({x.dtype}) a prob tile must be float32, got "
                       f"{prob.dtype}")
    p = column(prob, x.shape[0], "prob", op)
    u = uniform(x.shape[0], per_partition(x.shape))
    v = rows(dt.compute_view(x.data), x.shape[0])
    out = np.where(u >= p, v, np.zeros((), v.dtype))
    _prof.instruction("Vector", out)
    write(d, out.reshape(d.shape), op)

