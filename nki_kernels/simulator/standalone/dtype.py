"""``nki.dtype`` (also ``nki.language.dtypes``): the data types of the current ``nki.language`` page.

Kernel signatures annotate with it (``dtype: nki.dtype = nl.bfloat16``); each name
is the NumPy dtype the simulator stores that type in (``ml_dtypes`` for the
low-precision floats). ``float8_e4m3`` (IEEE-style, max 240) and
``float8_e4m3fn`` (OCP, no inf, max 448) are distinct types, as on Neuron; the
packed MX types hold four values per element (see
:func:`nki_kernels.simulator.dtypes.unpack_x4`).
"""

from .. import dtypes as _dt

bool_ = _dt.bool_
int8 = _dt.int8
int16 = _dt.int16
int32 = _dt.int32
int64 = _dt.int64  # NKI 0.7.0: the width of a 64-bit NkiScalar (nisa.scalar_load / scalar_store)
uint8 = _dt.uint8
uint16 = _dt.uint16
uint32 = _dt.uint32
float16 = _dt.float16
float32 = _dt.float32
bfloat16 = _dt.bfloat16
tfloat32 = _dt.tfloat32
float8_e4m3 = _dt.float8_e4m3_ieee
float8_e4m3fn = _dt.float8_e4m3fn
float8_e5m2 = _dt.float8_e5m2
float8_e8m0fnu = _dt.float8_e8m0fnu
float8_e4m3fn_x4 = _dt.float8_e4m3fn_x4
float8_e5m2_x4 = _dt.float8_e5m2_x4
float4_e2m1fn_x4 = _dt.float4_e2m1fn_x4

__all__ = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
           "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fn_x4",
           "float8_e5m2_x4", "float4_e2m1fn_x4"]
