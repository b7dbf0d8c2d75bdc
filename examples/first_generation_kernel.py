"""The same idea in the first API generation (``neuronxcc.nki``: ``nl.load`` / ``nl.store``, SPMD grids).

    nki-ops run examples/first_generation_kernel.py
"""

import neuronxcc.nki as nki  # noqa: PLR0402 - the official pages spell it so
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def add_rows(a, b):
    """``a + b`` for [N, 512] inputs, 128 rows per program of a 1-D grid; the last block is masked."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    j = nl.arange(a.shape[1])[None, :]
    rows = i < a.shape[0]
    nl.store(out[i, j], value=nl.add(nl.load(a[i, j], mask=rows), nl.load(b[i, j], mask=rows)), mask=rows)
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 512), dtype=np.float32)
    b = rng.standard_normal((300, 512), dtype=np.float32)
    out = add_rows[(300 + 127) // 128](a, b)   # a grid of 3 programs
    err = float(np.abs(out - (a + b)).max())
    assert err <= 1e-6, err
    print(f"add_rows over a grid of 3: max |error| {err:.1e} (tolerance 1e-6): OK")
