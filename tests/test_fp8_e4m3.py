"""``float8_e4m3`` in both generations is the IEEE-style e4m3 (inf and NaN, largest finite 240), not
the extended-range ``float8_e4m3fn`` (no inf, NaN S.1111.111, largest finite 448).

Pages: the first generation's ``nki.language.float8_e4m3`` entry shows ``dtype(float8_e4m3)`` (the
ml_dtypes type of that name); the second generation lists ``float8_e4m3`` (1S,4E,3M) and
``float8_e4m3fn`` "(1S,4E,3M), Extended range: no inf, NaN represented by 0bS111'1111" as two types.
The reference is ml_dtypes' own conversion of every value and bit pattern."""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki
from nki_kernels.simulator import standalone

nl2 = standalone.language

# In range, rounding cases, the top of each format, past them, fp32's extremes, tiny values.
EDGES = np.array([[0.0, -0.0, 1.0, 1.0625, 1.1875, -3.3, 0.013671875, 2.0 ** -9, 2.0 ** -10, 224.0, 232.0,
                   240.0, 247.9, 248.0, 256.0, 300.0, 448.0, 464.0, 1e4, -1e4, 3.4028235e38, -3.4028235e38,
                   np.inf, -np.inf]], np.float32)


def _copy_to(dtype):
    @nki.jit
    def kernel(x):
        t = nl.copy(nl.load(x), dtype=dtype)
        out = nl.ndarray(t.shape, dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    return kernel


def _bits(a):
    return np.asarray(a).view(np.uint8)


def test_gen1_float8_e4m3_is_ieee_style_e4m3():
    assert np.dtype(nl.float8_e4m3) == np.dtype(ml_dtypes.float8_e4m3)
    assert float(ml_dtypes.finfo(nl.float8_e4m3).max) == 240.0
    assert np.dtype(nl.float8_e4m3) == np.dtype(nl2.float8_e4m3)  # one type, both generations


def test_gen2_names_are_two_types():
    assert np.dtype(nl2.float8_e4m3) == np.dtype(ml_dtypes.float8_e4m3)
    assert np.dtype(nl2.float8_e4m3fn) == np.dtype(ml_dtypes.float8_e4m3fn)
    assert float(ml_dtypes.finfo(nl2.float8_e4m3fn).max) == 448.0


@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e5m2"])
def test_gen1_engine_write_rounds_as_ml_dtypes(name):
    """A copy to nl.float8_e4m3 rounds each fp32 value as ml_dtypes' float8_e4m3 does: bit for bit
    (past 240 it becomes inf, where e4m3fn would give 256..448 or NaN)."""
    ref_type = getattr(ml_dtypes, name)
    got = _copy_to(getattr(nl, name))(EDGES)
    assert got.dtype == np.dtype(ref_type)
    np.testing.assert_array_equal(_bits(got), _bits(EDGES.astype(ref_type)))


def test_gen1_e4m3_overflow_is_inf_not_e4m3fn_value():
    """The values where the two formats part: on the old mapping (e4m3fn) 256 and 300 stayed finite
    and fp32's lowest became NaN (the documentation's range_select example fills masked-off fp8
    elements with nl.fp32.min and compares against NumPy's -inf)."""
    got = _copy_to(nl.float8_e4m3)(np.array([[248.0, 256.0, 300.0, -3.4028235e38]], np.float32))
    assert np.isposinf(got.astype(np.float32)[0, :3]).all() and np.isneginf(got.astype(np.float32)[0, 3])
    assert np.isfinite(np.array([256.0, 300.0], np.float32).astype(ml_dtypes.float8_e4m3fn)).all()


def test_gen1_e4m3_bit_patterns_read_as_ml_dtypes():
    """Raw bytes viewed as nl.float8_e4m3 and widened by an engine: every one of the 256 patterns
    reads as ml_dtypes' float8_e4m3 (0x78 is +inf, 0x7F NaN; under e4m3fn 0x78 would read 256)."""

    @nki.jit
    def kernel(raw):
        t = nl.load(raw.view(nl.float8_e4m3))
        w = nl.copy(t, dtype=nl.float32)
        out = nl.ndarray(w.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=w)
        return out

    raw = np.arange(256, dtype=np.uint8).reshape(2, 128)
    got = kernel(raw)
    ref = raw.view(ml_dtypes.float8_e4m3).astype(np.float32)
    np.testing.assert_array_equal(got, ref)  # NaN where ref is NaN (assert_array_equal matches NaNs)
    assert np.isposinf(got[0, 0x78]) and np.isnan(got[0, 0x7F])
    assert float(np.uint8(0x78).view(ml_dtypes.float8_e4m3fn)) == 256.0  # the other format's reading


def test_e4m3fn_stays_a_low_float_of_its_own():
    """Edge: float8_e4m3fn (no longer the same type as float8_e4m3) still widens to fp32 for the engines
    and rounds as ml_dtypes' e4m3fn on a write; the two fp8 types have no common 8-bit type (bf16)."""
    from nki_kernels.simulator import dtypes as dt

    fn = np.dtype(ml_dtypes.float8_e4m3fn)
    assert dt.is_float(fn) and fn in dt.SUPPORTED
    np.testing.assert_array_equal(_bits(dt.cast(EDGES, fn)), _bits(EDGES.astype(fn)))
    raw = np.arange(256, dtype=np.uint8).reshape(2, 128)
    wide = dt.compute_view(raw.view(fn))
    assert wide.dtype == np.float32
    np.testing.assert_array_equal(wide, raw.view(fn).astype(np.float32))
    assert dt.promote(dt.float8_e4m3, fn) == dt.bfloat16
