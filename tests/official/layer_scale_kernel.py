"""A kernel written exactly as for Trainium, with the official neuronxcc imports.

y[i, :] = gelu(x[i, :] @ w) * scale, rows tiled by 128 on a 1-D grid, K tiled by 128
with PSUM accumulation.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_gelu_kernel(x, w, scale):
    n, k = x.shape
    _, m = w.shape
    out = nl.ndarray((n, m), dtype=x.dtype, buffer=nl.shared_hbm)
    i_row = nl.program_id(0) * 128 + nl.arange(128)[None, :]  # rows along the free axis of x^T
    acc = nl.zeros((128, m), dtype=nl.float32, buffer=nl.psum)
    for kk in nl.affine_range(k // 128):
        i_k = kk * 128 + nl.arange(128)[:, None]
        x_t = nl.load(x[i_row, i_k])  # [K=128 partitions, 128 rows]: x transposed by the access pattern
        w_t = nl.load(w[i_k, nl.arange(m)[None, :]])
        acc += nisa.nc_matmul(x_t, w_t)
    y = nisa.activation(op=nl.gelu, data=acc, scale=1.0)
    y = nl.multiply(y, scale, dtype=x.dtype)
    nl.store(out[nl.program_id(0) * 128 + nl.arange(128)[:, None], nl.arange(m)[None, :]], value=y)
    return out
