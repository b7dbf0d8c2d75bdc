"""``nki.simulator.simulate_kernel`` as vllm-neuron's CPU mode and nki-library's harness call it."""

from __future__ import annotations

import numpy as np
import pytest

from nki_kernels.simulator import install


@pytest.fixture(scope="module")
def nki():
    install()
    import nki

    return nki


def _kernels(nki):
    import nki.isa as nisa
    import nki.language as nl

    def scale(x, factor):  # a raw kernel function, as vllm-neuron passes it
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=factor)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    @nki.jit
    def core_ids(x):
        """Each logical core writes its own id into its half of the rows."""
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        half = x.shape[0] // nl.num_programs()
        t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=nl.program_id(0))
        nisa.dma_copy(dst=out[nl.program_id(0) * half:(nl.program_id(0) + 1) * half, :], src=t)
        return out

    return scale, core_ids


def test_vllm_neuron_call_forms(nki):
    from nki.simulator import simulate_kernel

    assert nki.simulator.simulate_kernel is simulate_kernel
    scale, _ = _kernels(nki)
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(simulate_kernel(scale, (), {"x": x, "factor": 3.0}, lnc=1), x * 3)  # vllm-neuron
    np.testing.assert_array_equal(simulate_kernel(scale, (x, 2.0), {}), x * 2)  # positional args, default lnc
    np.testing.assert_array_equal(simulate_kernel(nki.jit(scale), args=[], kwargs={"x": x, "factor": 0.5}, _lnc=1),
                                  x * 0.5)  # nki-library's harness


def test_lnc_runs_that_many_logical_cores(nki):
    from nki.simulator import simulate_kernel

    _, core_ids = _kernels(nki)
    x = np.zeros((128, 8), np.float32)
    out = simulate_kernel(core_ids, (x,), {}, lnc=2)
    assert (out[:64] == 0).all() and (out[64:] == 1).all()
    assert (simulate_kernel(core_ids, (), {"x": x}, _lnc=1) == 0).all()
    with pytest.raises(TypeError, match="disagree"):
        simulate_kernel(core_ids, (x,), {}, lnc=2, _lnc=1)
