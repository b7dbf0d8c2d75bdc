"""A first-generation op's cost under profile() follows its arguments as the documented formula needs.

``nisa.tensor_reduce`` (nki.isa cost section): ``N/2`` Vector cycles for BF16 in and out with add or
max, else ``N`` (at least MIN_II = 64). On trn1 the Vector engine runs at 1.12 GHz (Trainium/Inferentia2
architecture guide). The reduce waits for its load on another engine, which adds no static overhead.
"""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import install
from nki_kernels.simulator import profile as sim_profile

install()
import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.isa as nisa1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402

VECTOR_HZ = 1.12e9
N = 1024


def _reduce_kernel(op, dtype):
    @nki1.jit
    def reduce_rows(a):
        out = nl1.ndarray((128, 1), dtype=a.dtype, buffer=nl1.shared_hbm)
        t = nl1.load(a)
        nl1.store(out, value=nisa1.tensor_reduce(op, data=t, axis=(1,), dtype=dtype))
        return out

    return reduce_rows


@pytest.mark.parametrize("op,dtype,cycles", [
    (np.max, "bf16", N / 2), (np.add, "bf16", N / 2), (np.min, "bf16", N), (np.max, "fp32", N)],
    ids=["bf16-max", "bf16-add", "bf16-min", "fp32-max"])
def test_first_generation_tensor_reduce_is_costed_by_its_op(op, dtype, cycles):
    np_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float32
    a = (np.arange(128 * N) % 7).reshape(128, N).astype(np_dtype)
    rep = sim_profile(_reduce_kernel(op, nl1.bfloat16 if dtype == "bf16" else nl1.float32), a, grid=(), version=2)
    want = (np.sum if op is np.add else op)(a.astype(np.float32), axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(rep.outputs, np.float32), want, rtol=1e-2)
    assert rep.instructions["Vector"] == 1
    assert rep.busy_s["Vector"] == pytest.approx(cycles / VECTOR_HZ)
