"""Small kernel-body helpers shared by the tests/test_isa_*.py files (current ``nki`` API)."""

from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa


def to_sbuf(x, dtype=None):
    """A new SBUF tile holding HBM tensor ``x`` (DMA-copied)."""
    t = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def to_hbm(t):
    """A new shared-HBM output holding tile ``t`` (DMA-copied)."""
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o
