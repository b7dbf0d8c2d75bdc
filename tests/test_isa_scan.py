"""nisa.tensor_tensor_scan against the NumPy loop of its reference page
(result[:, i] = op1(op0(data0[:, i], result[:, i - 1]), data1[:, i]), result[:, -1] = initial),
operand order flipped by reverse0 / reverse1, initial a scalar or one value per partition, and the
page's memory rule (data0 and data1 not both in PSUM)."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa
rng = np.random.default_rng(16)


def scan_reference(a, b, init, op0, op1, reverse0=False, reverse1=False):
    """The page's loop in float64; ``reverse0`` computes op0(prev, data0), ``reverse1`` op1(data1, t)."""
    prev = np.broadcast_to(np.asarray(init, np.float64), (a.shape[0],)).copy()
    out = np.empty(a.shape)
    for i in range(a.shape[1]):
        t = op0(prev, a[:, i]) if reverse0 else op0(a[:, i], prev)
        prev = op1(b[:, i], t) if reverse1 else op1(t, b[:, i])
        out[:, i] = prev
    return out


@nki.jit
def scan_kernel(a, b, init, op0, op1, reverse0=False, reverse1=False, scalar_init=None, a_in_psum=False,
                b_in_psum=False):
    P, F = a.shape
    ta = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    tb = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tb, src=b)
    if a_in_psum:
        pa = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=pa, src=ta)
        ta = pa
    if b_in_psum:
        pb = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=pb, src=tb)
        tb = pb
    if scalar_init is None:
        ti = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ti, src=init)
    else:
        ti = scalar_init
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=r, data0=ta, data1=tb, initial=ti, op0=op0, op1=op1, reverse0=reverse0,
                            reverse1=reverse1)
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


def _inputs(P=16, F=24):
    a = rng.uniform(0.5, 1.0, (P, F)).astype(np.float32)
    b = rng.standard_normal((P, F)).astype(np.float32)
    init = rng.standard_normal((P, 1)).astype(np.float32)
    return a, b, init


def test_first_order_recurrence_with_a_per_partition_initial():
    a, b, init = _inputs()
    got = nki.simulate(scan_kernel)(a, b, init, nl.multiply, nl.add)
    np.testing.assert_allclose(got, scan_reference(a, b, init[:, 0], np.multiply, np.add), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reverse0", [False, True])
@pytest.mark.parametrize("reverse1", [False, True])
def test_operand_order_of_non_commutative_operators(reverse0, reverse1):
    a, b, init = _inputs(8, 6)
    got = nki.simulate(scan_kernel)(a, b, init, nl.subtract, nl.subtract, reverse0, reverse1)
    want = scan_reference(a, b, init[:, 0], np.subtract, np.subtract, reverse0, reverse1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_scalar_initial_and_data1_in_psum():
    a, b, init = _inputs()
    got = nki.simulate(scan_kernel)(a, b, init, nl.add, nl.multiply, scalar_init=2.0, b_in_psum=True)
    np.testing.assert_allclose(got, scan_reference(a, b, 2.0, np.add, np.multiply), rtol=1e-5, atol=1e-5)


def test_both_inputs_in_psum_are_rejected():
    a, b, init = _inputs()
    with pytest.raises(NKIError, match="PSUM"):
        nki.simulate(scan_kernel)(a, b, init, nl.multiply, nl.add, a_in_psum=True, b_in_psum=True)
