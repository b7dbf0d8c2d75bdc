"""NKI data types as NumPy dtypes (bf16 / fp8 through ml_dtypes) and the compute rules.

The engines compute in fp32 and round to the output dtype when they write a
tile; :func:`compute_view` and :func:`cast` implement those two halves.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

float32 = np.dtype(np.float32)
# tfloat32 is an fp32 container whose mantissa the PE array truncates to 10 bits;
# it is stored as fp32 here (rounding modelled in cast()).
tfloat32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
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

SUPPORTED = {
    float32, bfloat16, float16, float8_e4m3, float8_e5m2, int8, int16, int32,
    uint8, uint16, uint32, bool_,
}
_LOW_FLOATS = {bfloat16, float16, float8_e4m3, float8_e5m2}
# Rank used to pick "the input type with the highest precision" (NKI's default output dtype).
_RANK = {
    bool_: 0, uint8: 1, int8: 1, uint16: 2, int16: 2, uint32: 3, int32: 3,
    float8_e5m2: 4, float8_e4m3: 5, float16: 6, bfloat16: 7, float32: 8,
    int64: 4, float64: 9,
}


def as_dtype(dtype) -> np.dtype:
    """Normalise a dtype given as an nl.* constant, a NumPy dtype/type or a name."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        aliases = {"bfloat16": bfloat16, "float8_e4m3": float8_e4m3, "float8_e5m2": float8_e5m2,
                   "tfloat32": tfloat32, "bool": bool_, "bool_": bool_}
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
        if {a, b} == {float8_e4m3, float8_e5m2}:
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


def compute_view(data: np.ndarray) -> np.ndarray:
    """The array an engine computes on: fp32 for low-precision floats, else as stored."""
    if data.dtype in _LOW_FLOATS:
        return data.astype(np.float32)
    return data


def cast(values, dtype: np.dtype) -> np.ndarray:
    """Round computed values to ``dtype`` the way an engine writes its output."""
    values = np.asarray(values)
    if values.dtype == dtype:
        return values
    if np.issubdtype(dtype, np.integer) and not np.issubdtype(values.dtype, np.integer):
        # Engines convert float->int with round-to-nearest-even and saturation.
        info = np.iinfo(dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    return values.astype(dtype)
