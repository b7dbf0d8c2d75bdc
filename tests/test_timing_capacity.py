"""SBUF capacity under profile(): a tile that does not fit beside the others live costs a spill.

trn1's SBUF is 24 MiB, 192 KiB per partition (Trainium/Inferentia2 architecture guide). Thirteen
[128, 4096] fp32 tiles (16 KiB per partition each) loaded before any is stored: twelve fill the
192 KiB exactly, the thirteenth does not fit. The compiler would keep it in the HBM scratchpad (the
Neuron runtime's device-memory page: "additional space used to store intermediary SBUF"): the model
charges a store to HBM after its load and a reload before its store, each a DMA of its 2 MiB.
"""

import numpy as np

from nki_kernels.simulator import install
from nki_kernels.simulator import profile as sim_profile

install()
import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402

WIDTH = 4096  # fp32 elements per partition: 16 KiB
SBUF_PARTITION_BYTES = 192 * 1024  # trn1 architecture guide


def _kernel(n):
    @nki1.jit
    def hold_then_store(a):
        out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
        tiles = [nl1.load(a[:, i * WIDTH:(i + 1) * WIDTH]) for i in range(n)]
        for i, t in enumerate(tiles):
            nl1.store(out[:, i * WIDTH:(i + 1) * WIDTH], value=t)
        return out

    return hold_then_store


def test_the_tile_over_capacity_costs_a_store_and_a_reload():
    fits = SBUF_PARTITION_BYTES // (WIDTH * 4)
    assert fits == 12
    over = fits + 1
    a = np.random.default_rng(0).standard_normal((128, over * WIDTH)).astype(np.float32)
    rep = sim_profile(_kernel(over), a, grid=(1,), version=2)
    np.testing.assert_array_equal(rep.outputs, a)
    assert rep.spilled_allocations == 1
    assert rep.timing.spills == {"stores": 1, "reloads": 1, "bytes": 2 * 128 * WIDTH * 4}
    a12 = a[:, :fits * WIDTH].copy()
    rep12 = sim_profile(_kernel(fits), a12, grid=(1,), version=2)
    assert rep12.spilled_allocations == 0 and rep12.timing.spills["stores"] == 0
