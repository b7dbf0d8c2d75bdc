"""NKI data types as NumPy dtypes (bf16 / fp8 through ml_dtypes) and the compute rules.

The engines compute in fp32 and round to the output dtype when they write a
tile; :func:`compute_view` and :func:`cast` implement those two halves.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from .context import running_program
from .errors import NKIError

float32 = np.dtype(np.float32)
# tfloat32 is an fp32 container whose mantissa the PE array truncates to 10 bits;
# it is stored as fp32 here (rounding modelled in cast()).
tfloat32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
# nl.float8_e4m3 (both generations) is the IEEE-style e4m3: inf and NaN, max 240 -- the
# first generation's page shows ``nki.language.float8_e4m3 = dtype(float8_e4m3)`` (ml_dtypes'
# name; its e4m3fn prints as float8_e4m3fn) and nki-samples quantize to it with a range of 240.
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)
# Extras that appear in newer NKI and in the standalone package.
float64 = np.dtype(np.float64)
int64 = np.dtype(np.int64)

# The fp8 e4m3 types, distinct as on Neuron: ``float8_e4m3`` is the IEEE-style type above,
# ``float8_e4m3fn`` the extended-range OCP one (no inf, NaN S.1111.111, max 448).
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e4m3_ieee = np.dtype(ml_dtypes.float8_e4m3)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)  # MX shared scale: unsigned power of two, NaN 0xFF


def _packed(name: str, nbytes: int) -> np.dtype:
    # A structured dtype of raw bytes: a distinct type of the right size that NumPy never
    # converts to or from numbers implicitly (cast() refuses it; see pack_x4 / unpack_x4).
    return np.dtype([(name, np.uint8, (nbytes,))])


# Packed MX types: four values per element (nki.isa.nc_matmul_mx / quantize_mx, NeuronCore-v4).
float8_e4m3fn_x4 = _packed("float8_e4m3fn_x4", 4)
float8_e5m2_x4 = _packed("float8_e5m2_x4", 4)
float4_e2m1fn_x4 = _packed("float4_e2m1fn_x4", 2)
PACKED_X4 = {
    float8_e4m3fn_x4: np.dtype(ml_dtypes.float8_e4m3fn),
    float8_e5m2_x4: np.dtype(ml_dtypes.float8_e5m2),
    float4_e2m1fn_x4: np.dtype(ml_dtypes.float4_e2m1fn),
}

SUPPORTED = {
    float32, bfloat16, float16, float8_e4m3, float8_e5m2, int8, int16, int32,
    uint8, uint16, uint32, bool_, float8_e4m3fn, float8_e8m0fnu, *PACKED_X4,
}
_LOW_FLOATS = {bfloat16, float16, float8_e4m3, float8_e5m2, float8_e4m3fn, float8_e8m0fnu}
# Rank used to pick "the input type with the highest precision" (NKI's default output dtype).
_RANK = {
    bool_: 0, uint8: 1, int8: 1, uint16: 2, int16: 2, uint32: 3, int32: 3,
    float8_e8m0fnu: 4, float8_e5m2: 4, float8_e4m3fn: 5, float8_e4m3: 5, float16: 6, bfloat16: 7, float32: 8,
    int64: 4, float64: 9,
}


def as_dtype(dtype) -> np.dtype:
    """Normalise a dtype given as an nl.* constant, a NumPy dtype/type or a name."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        aliases = {"bfloat16": bfloat16, "float8_e4m3": float8_e4m3, "float8_e5m2": float8_e5m2,
                   "tfloat32": tfloat32, "bool": bool_, "bool_": bool_, "float8_e4m3fn": float8_e4m3fn,
                   "float8_e8m0fnu": float8_e8m0fnu, **{d.names[0]: d for d in PACKED_X4}}
        if dtype in aliases:
            return aliases[dtype]
    return np.dtype(dtype)


def is_float(dtype: np.dtype) -> bool:
    """True for every floating dtype, ml_dtypes' included."""
    return dtype in _LOW_FLOATS or np.issubdtype(dtype, np.floating)


def _promote2(a: np.dtype, b: np.dtype) -> np.dtype:
    """NKI's pairwise type promotion (NKI API "Type Promotion" table)."""
    if a == b:
        return a
    if a == bool_ or b == bool_:
        return b if a == bool_ else a
    fa, fb = is_float(a), is_float(b)
    if fa != fb:  # (float, int) -> the float type
        return a if fa else b
    if fa:
        if float32 in (a, b):
            return float32
        if {a, b} == {float16, bfloat16}:
            return float32  # no common 16-bit type: widened
        if a.itemsize == b.itemsize == 1:  # two different fp8 types: no common 8-bit type
            return bfloat16
        return a if a.itemsize > b.itemsize else b
    sa, sb = np.issubdtype(a, np.signedinteger), np.issubdtype(b, np.signedinteger)
    if sa == sb:
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if sa else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    # Same or smaller signed width: the next wider signed type; (int32, uint32) has none on HW.
    return {1: int16, 2: int32}.get(unsigned.itemsize, float32)


def promote(*dtypes: np.dtype) -> np.dtype:
    """NKI's default output dtype of an op: its operands' dtypes promoted pairwise.

    Python scalars count as the widest hardware type of their kind (see
    :func:`scalar_dtype`), so ``bf16_tile * 2.0`` is fp32 unless ``dtype=`` says otherwise.
    """
    best = None
    for d in dtypes:
        if d is None:
            continue
        best = d if best is None else _promote2(best, d)
    return best if best is not None else float32


def scalar_dtype(x) -> np.dtype:
    """The dtype NKI infers for a weakly typed operand: bool -> uint8, int -> int32, float -> float32."""
    if isinstance(x, (bool, np.bool_)):
        return uint8
    if isinstance(x, (int, np.integer)) and not isinstance(x, np.generic):
        return int32
    if isinstance(x, float) and not isinstance(x, np.generic):
        return float32
    d = np.asarray(x).dtype
    return {int64: int32, float64: float32}.get(d, d)


_NARROW_INTS = {int8, uint8, int16, uint16}


def compute_view(data: np.ndarray) -> np.ndarray:
    """The array an engine computes on: fp32 for low-precision floats, int32 for 8- and 16-bit
    integers (the engines compute in fp32, which holds every such value and their sums and
    products, so `(int8, 2) -> int32` arithmetic does not wrap at 8 bits), else as stored."""
    dtype = data.dtype
    if dtype in _NARROW_INTS:
        return data.astype(np.int32)
    if dtype in _LOW_FLOATS:
        if dtype.itemsize == 1 and data.ndim:
            # fp8: the fp32 value of each of the 256 bit patterns, looked up (ml_dtypes converts fp8
            # element by element, ~5x slower; the table holds its own conversions, so the bits agree)
            return _look_up(_fp8_to_fp32(dtype), data.view(np.uint8))
        if dtype is float16 and data.ndim:
            # NumPy widens fp16 element by element (~2 ns each, 10x its bf16 rate); a gather from a
            # table of the 65536 patterns' own conversions gives the same bits faster. (Not float
            # arithmetic on the bits: under the flush-to-zero / denormals-are-zero mode XLA's CPU
            # threads run custom calls in, a step through an fp32 subnormal would lose fp16 subnormals.)
            return _look_up(_fp16_to_fp32(), data.view(np.uint16))
        if not _rows_contiguous(data):
            data = np.ascontiguousarray(data)
        return data.astype(np.float32)
    return data


def through_fp32(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``values`` on their way to ``dtype`` through fp32 (a DMA engine's conversion): fp32, or already
    ``cast`` to ``dtype`` where that is cheaper -- an fp8 source converts by a 256-entry table of its
    patterns' own fp32-then-``cast`` conversions (bit for bit the two steps, without the fp32 array)."""
    src = values.dtype
    if src.itemsize == 1 and src in _LOW_FLOATS and values.ndim and dtype in SUPPORTED \
            and dtype not in PACKED_X4:
        return _look_up(_fp8_to(src, dtype), values.view(np.uint8))
    return compute_view(values).astype(np.float32, copy=False)


def _look_up(table: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """``table[bits]``: the entry of every element's bit pattern (``table`` has one per pattern)."""
    # mode="wrap" skips take's per-element bounds check (an unsigned pattern indexes a table of all its
    # values, so none wraps): 10 us for a 128x128 fp16 tile, against 16 us for np.take, 24 for table[bits]
    return table.take(bits, mode="wrap")


@functools.lru_cache(maxsize=None)
def _fp8_to(src: np.dtype, dtype: np.dtype) -> np.ndarray:
    """Every bit pattern of the one-byte float ``src`` widened to fp32, then rounded to ``dtype``."""
    return cast(_fp8_to_fp32(src), dtype)


@functools.lru_cache(maxsize=None)
def _fp8_to_fp32(dtype: np.dtype) -> np.ndarray:
    """The float32 value of every bit pattern of the one-byte float ``dtype`` (NaN payloads as ml_dtypes
    converts them)."""
    return np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)


@functools.cache
def _fp16_to_fp32() -> np.ndarray:
    """The float32 value of every fp16 bit pattern, as NumPy converts it (NaN payloads kept)."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _rows_contiguous(a: np.ndarray) -> bool:
    """Whether ``a``'s innermost axis is contiguous (or ``a`` is one block). ml_dtypes converts any
    other array -- every other element, a transposed block -- element by element, 10-20x slower
    than a copy followed by the conversion; rows far apart (a tile of a placed SBUF tensor, a
    column block of an HBM tensor) convert at full speed."""
    flags = a.flags
    if flags.c_contiguous or flags.f_contiguous:
        return True
    return a.ndim > 0 and (a.shape[-1] <= 1 or a.strides[-1] == a.itemsize)


def cast(values, dtype: np.dtype) -> np.ndarray:
    """Round computed values to ``dtype`` the way an engine writes its output."""
    values = np.asarray(values)
    if values.dtype == dtype:
        return values
    if dtype in PACKED_X4 or values.dtype in PACKED_X4:
        raise NKIError("packed dtype", f"cannot convert {values.dtype} to {dtype}: packed MX types hold four "
                       "values per element and are written by quantize_mx / read by nc_matmul_mx (or viewed "
                       "with .view(dtype)), not converted element-wise")
    if np.issubdtype(dtype, np.integer) and not np.issubdtype(values.dtype, np.integer):
        info = np.iinfo(dtype)
        prog = running_program()
        if prog is not None and prog.current_api:
            # The current API: "fp32-to-integer casts match hardware (round to nearest, ties to even;
            # saturate to the destination range) instead of numpy's default behavior" (NKI 0.6.0 release
            # notes, Neuron 2.32, nki.simulate correctness fixes).
            values = np.clip(np.rint(values), info.min, info.max)
        else:
            # The first generation truncates toward zero, saturated: its official CPU simulator converts
            # with NumPy (truncation), and the official nki-samples resize_nearest_fixed_dma_kernel needs
            # it: nl.floor(iota / out_w, dtype=int32) is its row index, and the int32 quotient (the
            # promoted type of an int32 tile and a weak int, computed in fp32) rounded to nearest instead
            # reads past its image (row 30 of 30 at 59x38).
            values = np.clip(np.trunc(values), info.min, info.max)
    elif dtype in _LOW_FLOATS and not _rows_contiguous(values):
        values = np.ascontiguousarray(values)
    return values.astype(dtype)


def unpack_x4(packed: np.ndarray) -> np.ndarray:
    """The values of a packed MX array as float32, four per element along the last axis
    (``(..., n)`` -> ``(..., 4 * n)``). Value ``j`` of an fp8 element is its byte ``j``; an fp4
    element's value ``j`` is nibble ``j`` counting from the low nibble of its first byte."""
    packed = np.asarray(packed)
    inner = PACKED_X4.get(packed.dtype)
    if inner is None:
        raise TypeError(f"unpack_x4: {packed.dtype} is not a packed MX dtype")
    raw = packed[packed.dtype.names[0]]  # (..., n, bytes)
    if inner.itemsize == 1 and packed.dtype.itemsize == 4:
        vals = raw.view(inner)
    else:
        vals = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(raw.shape[:-1] + (4,)).astype(np.uint8).view(inner)
    return vals.astype(np.float32).reshape(packed.shape[:-1] + (packed.shape[-1] * 4,) if packed.ndim else (4,))


def pack_x4(values, dtype) -> np.ndarray:
    """Pack ``values`` (last axis a multiple of 4) into the MX dtype ``dtype``, rounding each value
    to the element type (round to nearest even, as ml_dtypes converts); inverse of :func:`unpack_x4`."""
    dtype = np.dtype(dtype)
    inner = PACKED_X4.get(dtype)
    if inner is None:
        raise TypeError(f"pack_x4: {dtype} is not a packed MX dtype")
    values = np.asarray(values, dtype=np.float32)
    if values.ndim == 0 or values.shape[-1] % 4:
        raise ValueError(f"pack_x4: the last axis of values {values.shape} must be a multiple of 4")
    groups = values.reshape(values.shape[:-1] + (values.shape[-1] // 4, 4)).astype(inner).view(np.uint8)
    if dtype.itemsize == 2:
        groups = (groups[..., 0::2] & 0xF) | ((groups[..., 1::2] & 0xF) << 4)
    out = np.empty(values.shape[:-1] + (values.shape[-1] // 4,), dtype)
    out[dtype.names[0]] = groups
    return out


INT_SENTINEL = 4  # the official simulator fills integer tensors with 4 (NKI CPU Simulator guide)


def sentinel(dtype):
    """The fill value of never-written memory of ``dtype``: NaN for floats, 4 for integers (the
    official simulator's sentinels)."""
    dtype = np.dtype(dtype)
    if dtype.fields is not None:  # packed MX elements: all-zero bytes (NaN does not assign to a record)
        return np.zeros((), dtype)[()]
    if dtype == np.bool_:
        return True
    if np.issubdtype(dtype, np.integer):
        return INT_SENTINEL
    return np.nan


def as_strided(x: np.ndarray, shape, strides, writeable: bool = True) -> np.ndarray:
    """``numpy.lib.stride_tricks.as_strided`` for every dtype the simulator holds. NumPy rebuilds the
    view from ``__array_interface__``, whose type string cannot name ml_dtypes' 8-bit floats
    (``'<f1'`` is "not understood"), so the view is made over same-sized raw bytes and given the
    dtype back (``hbm_tensor.view(nl.float8_e5m2)`` of the documentation's double-row matmul test)."""
    from numpy.lib.stride_tricks import as_strided as _np_as_strided

    if x.dtype.kind in "biuf" and x.dtype.type.__module__ == "numpy":
        return _np_as_strided(x, shape, strides, writeable=writeable)
    raw = _np_as_strided(x.view(np.dtype((np.void, x.dtype.itemsize))), shape, strides, writeable=writeable)
    return raw.view(x.dtype)
