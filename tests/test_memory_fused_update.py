"""``tile -= a * b`` (and ``+=``, ``*=``) of an fp32 SBUF tile with a fresh product: the simulator
updates the tile block by block without forming the full-size product (issue 16: peak extra
memory of a launch), with the same bits as NumPy's float32 ``tile - a * b``."""

import tracemalloc

import numpy as np
import pytest

from nki_kernels.simulator import buffer_pool
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.launch import jit

rng = np.random.default_rng(16)
PROGRAMS, F = 16, 2048


@jit
def scaled_minus_product(a, b, c):
    """``2a - b * c`` per 128-row program (``c`` [N, 1] a per-row scale), through ``g -= b * c``."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    jf = nl.arange(a.shape[1])[None, :]
    g = nl.multiply(nl.load(a[ip, jf]), 2.0)
    g -= nl.multiply(nl.load(b[ip, jf]), nl.load(c[ip, nl.arange(1)[None, :]]), dtype=nl.float32)
    nl.store(out[ip, jf], value=g)
    return out


@jit
def updates_reusing_operands(a, b):
    """``g += g * b`` (the product reads the tile it updates), then ``g *= p`` with ``p = a * b``
    kept and stored afterwards, and ``g -= p``: every form against its NumPy value."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    kept = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    g = nl.multiply(ta, 3.0)
    g += nl.multiply(g, tb)
    p = nl.multiply(ta, tb)
    g *= p
    g -= p
    nl.store(out, value=g)
    nl.store(kept, value=p)
    return out, kept


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_in_place_update_with_a_product_matches_numpy_bit_for_bit():
    a, b, c = _f32(PROGRAMS * 128, F), _f32(PROGRAMS * 128, F), _f32(PROGRAMS * 128, 1)
    got = scaled_minus_product[PROGRAMS](a, b, c)
    np.testing.assert_array_equal(got, a * np.float32(2.0) - b * c)


def test_products_that_read_the_tile_or_are_used_again_keep_their_values():
    a, b = _f32(128, 512), _f32(128, 512)
    out, kept = updates_reusing_operands(a, b)
    g = a * np.float32(3.0)
    g = g + g * b
    p = a * b
    np.testing.assert_array_equal(out, g * p - p)
    np.testing.assert_array_equal(kept, p)


def test_in_place_update_forms_no_full_size_product():
    # The batch of 16 programs holds g (one input's size) and the output; the product b * c
    # would be another input-sized array.
    a, b, c = _f32(PROGRAMS * 128, F), _f32(PROGRAMS * 128, F), _f32(PROGRAMS * 128, 1)
    scaled_minus_product[PROGRAMS](a, b, c)
    buffer_pool.release()  # the pool's buffers must be counted: the measured launch allocates them again
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = scaled_minus_product[PROGRAMS](a, b, c)
        extra = tracemalloc.get_traced_memory()[1] - base - out.nbytes
    finally:
        tracemalloc.stop()
    assert extra <= 1.25 * a.nbytes, (extra, a.nbytes)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_other_dtypes_and_psum_keep_the_plain_path(dtype):
    @jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        acc = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.psum)
        acc += nl.multiply(ta, tb)
        g = nl.add(ta, tb)
        g -= nl.multiply(ta, tb)
        nl.store(out, value=nl.add(g, acc, dtype=a.dtype))
        return out

    a = (rng.standard_normal((128, 64)) * 8).astype(dtype)
    b = (rng.standard_normal((128, 64)) * 8).astype(dtype)
    np.testing.assert_array_equal(k(a, b), (a + b - a * b) + a * b)
