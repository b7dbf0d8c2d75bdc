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


def promote(*dtypes: np.dtype) -> np.dtype:
    """The highest-precision dtype among the operands (NKI's default for an op's output)."""
    best = None
    for d in dtypes:
        if d is None:
            continue
        if best is None or _RANK.get(d, 8) > _RANK.get(best, 8):
            best = d
    return best if best is not None else float32


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
