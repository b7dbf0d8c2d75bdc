"""First-generation nisa functional ops (they allocate a result and call the one instruction
implementation) against float64 NumPy: masks, dtypes, and the rules they share with the
standalone instructions."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki

RNG = np.random.default_rng(21)
FILL = 7.0


def _masked_into_prefilled(fn, x, rows=64):
    """``d[...] = fn(tile, mask=partitions < rows)`` into a tile holding ``FILL``."""

    @nki.jit
    def k(a):
        t = nl.load(a)
        d = nl.full(fn(t, None).shape, FILL, nl.float32)
        ip = nl.arange(a.shape[0])[:, None]
        d[...] = fn(t, ip < rows)
        out = nl.ndarray(d.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, d)
        return out

    return k(x)


@pytest.mark.parametrize("name,fn,ref", [
    ("reciprocal", lambda t, m: nisa.reciprocal(t, mask=m), lambda v: 1.0 / v),
    ("scalar_tensor_tensor", lambda t, m: nisa.scalar_tensor_tensor(
        data=t, op0=np.multiply, operand0=2.0, op1=np.add, operand1=t, mask=m), lambda v: v * 2.0 + v),
    ("max8", lambda t, m: nisa.max8(src=t, mask=m), lambda v: -np.sort(-v, axis=1)[:, :8]),
    ("tensor_scalar", lambda t, m: nisa.tensor_scalar(t, np.multiply, 3.0, mask=m), lambda v: 3.0 * v),
])
def test_a_masked_result_assigned_into_a_tile_leaves_the_masked_off_elements(name, fn, ref):
    x = RNG.uniform(0.5, 2.0, (128, 16)).astype(np.float32)
    got = _masked_into_prefilled(fn, x)
    want = ref(x.astype(np.float64))
    want = np.where(np.arange(128)[:, None] < 64, want, FILL)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_a_functional_result_assigned_into_a_placed_tensor_is_written_there(masked):
    # A kernel placing all its SBUF tensors by hand (the contributed pipelined attention:
    # div_25_sbuf[ip, g] = nisa.reciprocal(running_sum[ip, g])) has no automatically allocated result tile.
    from nki_kernels.simulator.nki import compiler as ncc

    x = RNG.uniform(0.5, 2.0, (128, 8)).astype(np.float32)

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 8), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        d = nl.ndarray((128, 8), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=64))
        s = nl.ndarray((128, 8), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=128))
        out = nl.ndarray((2, 128, 8), nl.float32, buffer=nl.shared_hbm)
        t[...] = nl.load(a)
        d[...] = nisa.memset((128, 8), FILL, nl.float32)
        ip = nl.arange(128)[:, None]
        d[...] = nisa.reciprocal(t, mask=(ip < 64) if masked else None)
        s[...] = nisa.scalar_tensor_tensor(data=t, op0=np.multiply, operand0=2.0, op1=np.add, operand1=d)
        nl.store(out[0], d)
        nl.store(out[1], s)
        return out

    rows = np.arange(128)[:, None] < (64 if masked else 128)
    rec = np.where(rows, 1.0 / x.astype(np.float64), FILL)
    got = k(x)
    np.testing.assert_allclose(got[0], rec, rtol=1e-6)
    np.testing.assert_allclose(got[1], 2.0 * x + rec, rtol=1e-6)
