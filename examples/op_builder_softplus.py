"""Write an op once (``nki_kernels.op``): two kernels and one declaration give a NumPy function
(the simulator), a differentiable JAX op and a differentiable PyTorch op.

    python examples/op_builder_softplus.py       # JAX / PyTorch parts run where they are installed
"""

import importlib.util

import numpy as np

import nki_kernels
# nki / nl: the genuine Neuron stack's where it imports, else the simulator's
from nki_kernels.backend import nki, nl

P = 128  # rows per program (one partition each)


def _rows(n):
    ip = nl.program_id(0) * P + nl.arange(P)[:, None]
    return ip, ip < n


@nki.jit
def softplus_fwd(x, beta=1.0):
    """``log(1 + exp(beta * x)) / beta`` of a 2-D ``x`` (columns <= 512), 128 rows per program."""
    n, d = x.shape
    y = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    t = nl.load(x[ip, iw], mask=rows)
    sp = nl.softplus(nl.multiply(t, beta, dtype=nl.float32), mask=rows)
    nl.store(y[ip, iw], value=nl.multiply(sp, 1.0 / beta, dtype=x.dtype), mask=rows)
    return y


@nki.jit
def softplus_bwd(x, dy, beta=1.0):
    """``dy * sigmoid(beta * x)``, the gradient of :func:`softplus_fwd` (residuals = the inputs)."""
    n, d = x.shape
    dx = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ip, rows = _rows(n)
    iw = nl.arange(d)[None, :]
    s = nl.sigmoid(nl.multiply(nl.load(x[ip, iw], mask=rows), beta, dtype=nl.float32), mask=rows)
    nl.store(dx[ip, iw], value=nl.multiply(nl.load(dy[ip, iw], mask=rows), s, dtype=x.dtype), mask=rows)
    return dx


softplus = nki_kernels.op(
    "mylib::softplus",
    forward=softplus_fwd,           # parameters with defaults (beta) are static
    backward=softplus_bwd,          # (*residuals, *grads, beta) -> one gradient per float input
    residuals="inputs",
    grid=lambda x: nki_kernels.row_grid(x.shape[0]),
    batch="rows",                   # vmap folds a batch into rows: one launch
    partition="rows",               # sharded jit keeps rows sharded
)


def reference(x, beta):
    """softplus in float64 NumPy."""
    return np.logaddexp(0.0, beta * x.astype(np.float64)) / beta


def check(what, got, want, tol):
    """Print the largest error against ``tol`` and fail if it is over."""
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    print(f"  {what:<34} max |error| {err:.1e}  (tolerance {tol:.0e})  {'OK' if err <= tol else 'FAIL'}")
    assert err <= tol, (what, err)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 256)).astype(np.float32)
    sig = 1 / (1 + np.exp(-2.0 * x.astype(np.float64)))
    print("mylib::softplus")
    check("NumPy (simulator)", softplus(x, beta=2.0), reference(x, 2.0), 1e-5)
    if importlib.util.find_spec("jax"):
        import jax
        import jax.numpy as jnp

        g = jax.jit(jax.grad(lambda v: softplus(v, beta=2.0).sum()))(jnp.asarray(x))
        check("JAX jit(grad) vs sigmoid(2x)", g, sig, 1e-5)
    if importlib.util.find_spec("torch"):
        import torch

        t = torch.from_numpy(x).requires_grad_()
        softplus(t, beta=2.0).sum().backward()       # torch.ops.mylib.softplus, with autograd
        check("torch autograd vs sigmoid(2x)", t.grad, sig, 1e-5)
    print("OK")
