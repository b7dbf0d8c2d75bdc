"""Kernels in the official ``neuronxcc.nki`` style (import after ``simulator.install()``).

Each is this project's own code exercising a pattern real NKI programs use; the tests
compare them with independent NumPy math.
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_kernel(a_t, b):
    """C[M, N] = A @ B from A^T [K, M] and B [K, N]; grid (M/128, N/512); PSUM accumulation over K."""
    k, m = a_t.shape
    _, n = b.shape
    c = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    im = nl.program_id(0) * 128
    jn = nl.program_id(1) * 512
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    for kk in nl.affine_range(k // 128):
        s = nl.load(a_t[kk * 128 + nl.arange(128)[:, None], im + nl.arange(128)[None, :]])
        mv = nl.load(b[kk * 128 + nl.arange(128)[:, None], jn + nl.arange(512)[None, :]])
        acc += nisa.nc_matmul(s, mv)
    nl.store(c[im + nl.arange(128)[:, None], jn + nl.arange(512)[None, :]], value=nl.copy(acc))
    return c


@nki.jit
def transpose_kernel(x):
    """y = x.T for a 2-D x; grid (R/128, C/128); Tensor-engine transpose of 128x128 tiles."""
    r, c = x.shape
    y = nl.ndarray((c, r), dtype=x.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0) * 128, nl.program_id(1) * 128
    t = nl.load(x[i + nl.arange(128)[:, None], j + nl.arange(128)[None, :]])
    nl.store(y[j + nl.arange(128)[:, None], i + nl.arange(128)[None, :]], value=nl.transpose(t))
    return y


@nki.jit
def softmax_kernel(x):
    """Row softmax of [N, D]; grid (ceil(N/128),); masks cover a ragged last tile."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iw = nl.arange(d)[None, :]
    rows = ip < n
    t = nl.load(x[ip, iw], mask=rows)
    mx = nl.max(t, axis=[1], keepdims=True, mask=rows)
    e = nl.exp(nl.subtract(t, mx, mask=rows), mask=rows)
    s = nl.sum(e, axis=[1], keepdims=True, mask=rows)
    nl.store(y[ip, iw], value=nl.divide(e, s, mask=rows), mask=rows)
    return y


@nki.jit
def layernorm_kernel(x, gamma, beta, eps):
    """LayerNorm over the last axis of [N, D] with gamma/beta [D]; grid (N/128,)."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iw = nl.arange(d)[None, :]
    t = nl.load(x[ip, iw])
    g = nl.load(gamma.reshape((1, d))[nl.arange(1)[:, None], iw]).broadcast_to((128, d))
    b = nl.load(beta.reshape((1, d))[nl.arange(1)[:, None], iw]).broadcast_to((128, d))
    mean = nl.mean(t, axis=[1], keepdims=True)
    xc = nl.subtract(t, mean)
    var = nl.mean(nl.square(xc), axis=[1], keepdims=True)
    rstd = nl.rsqrt(nl.add(var, eps))
    nl.store(y[ip, iw], value=nl.add(nl.multiply(nl.multiply(xc, rstd), g), b))
    return y


@nki.jit
def avgpool_kernel(x, pool):
    """2-D average pooling (window = stride = ``pool``) of [C<=128, H, W] via a 5-D mgrid access."""
    c, h, w = x.shape
    ho, wo = h // pool, w // pool
    y = nl.ndarray((c, ho, wo), dtype=x.dtype, buffer=nl.shared_hbm)
    i0, i1, i2, i3, i4 = nl.mgrid[0:c, 0:ho, 0:pool, 0:wo, 0:pool]
    t = nl.load(x[i0, pool * i1 + i2, pool * i3 + i4])  # [c, ho, pool, wo, pool]
    s = nl.sum(t, axis=[2, 4])
    j0, j1, j2 = nl.mgrid[0:c, 0:ho, 0:wo]
    nl.store(y[j0, j1, j2], value=nl.multiply(s, 1.0 / (pool * pool)))
    return y


@nki.jit
def scale_3d_kernel(x):
    """y[b, i, j] = x[b, i, j] * (b + 1) on a 3-D grid (B, N/128, D/512)."""
    b, n, d = x.shape
    y = nl.ndarray((b, n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ib = nl.program_id(0)
    ip = nl.program_id(1) * 128 + nl.arange(128)[:, None]
    iw = nl.program_id(2) * 512 + nl.arange(512)[None, :]
    assert nl.program_ndim() == 3 and nl.num_programs(0) == b
    t = nl.load(x[ib, ip, iw])
    nl.store(y[ib, ip, iw], value=nl.multiply(t, float(ib + 1)))
    return y


@nki.jit
def cumsum_blocks_kernel(x):
    """Running sums over column blocks of [128, D]: y[:, blk j] = sum_{i<=j} x[:, blk i].

    Each iteration stores the partial sum: a loop-carried dependency, so sequential_range."""
    _, d = x.shape
    y = nl.ndarray((128, d), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 128), dtype=nl.float32)
    for j in nl.sequential_range(d // 128):
        acc += nl.load(x[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]])
        nl.store(y[nl.arange(128)[:, None], j * 128 + nl.arange(128)[None, :]], value=acc)
    return y


@nki.jit
def activation_kernel(x, bias):
    """y = tanh(x * 0.5 + bias[p]) with a per-partition bias [128, 1] on the Scalar engine."""
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    b = nl.load(bias)
    nl.store(y, value=nisa.activation(op=nl.tanh, data=t, bias=b, scale=0.5))
    return y


@nki.jit
def spmd_add_kernel(a, b):
    """c = a + b on a grid whose first axis is split across NeuronCores with nl.spmd_dim."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iw = nl.arange(a.shape[1])[None, :]
    nl.store(c[ip, iw], value=nl.add(nl.load(a[ip, iw]), nl.load(b[ip, iw])))
    return c


@nki.jit
def rms_rows_kernel(x):
    """x / rms(x) per row, reducing without keepdims: the [P] result broadcasts partition-aligned
    against [P, F] (the pattern of the official RMSNorm / LayerNorm samples)."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iw = nl.arange(d)[None, :]
    t = nl.load(x[ip, iw])
    ms = nl.sum(nl.square(t), axis=[1]) / d  # shape [128]
    nl.store(y[ip, iw], value=nl.multiply(t, nl.rsqrt(ms)))
    return y
