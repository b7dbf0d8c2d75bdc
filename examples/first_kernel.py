"""A first NKI kernel (the standalone ``nki`` API), run unmodified on the nki-ops simulator.

    nki-ops run examples/first_kernel.py          # or: NKI_SIMULATOR=1 python examples/first_kernel.py

On a Trainium host with the Neuron SDK the same file runs on the device (``import nki`` is then
the genuine package).
"""

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np


@nki.jit
def scaled_add(a_ptr, b_ptr, scale):
    """``(a + b) * scale`` of two [128, F] HBM tensors."""
    a = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.sbuf)   # on-chip tiles
    b = nl.ndarray(b_ptr.shape, dtype=b_ptr.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=a_ptr)                                  # HBM -> SBUF
    nisa.dma_copy(dst=b, src=b_ptr)
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)           # Vector engine
    nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=scale)
    out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)                                    # SBUF -> HBM
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 512), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    out = scaled_add(a, b, 0.5)
    err = float(np.abs(out - (a + b) * 0.5).max())
    assert err <= 1e-6, err
    print(f"scaled_add: max |error| {err:.1e} (tolerance 1e-6): OK")
