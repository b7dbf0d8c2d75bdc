"""Train a small pre-norm MLP block with NKI ops (jax_ops.rms_norm, jax_ops.add) next to plain jnp.

    python scripts/jax_train.py [--steps 40] [--batch 32] [--seq 16] [--dim 64] [--shard 8]

Both models start from the same parameters and see the same batches; each
step is ``jax.jit(jax.value_and_grad(loss))`` followed by an Adam update. The
script prints both losses per step and the largest difference in loss and in
parameters, and exits non-zero if they drift apart beyond float32 tolerance.
With ``--shard N`` the batch is sharded over N host devices (the NKI ops
then run per shard through custom_partitioning).
"""

from __future__ import annotations

import argparse
import os
import sys


def parse_args(argv=None):
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--shard", type=int, default=0, help="shard the batch over this many host devices")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed relative difference")
    return ap.parse_args(argv)


def _host_devices_for_shard(argv):
    """``--shard N`` needs N host devices, which XLA fixes when JAX initialises: set it first."""
    n = parse_args(argv).shard
    if n > 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


if __name__ == "__main__":
    _host_devices_for_shard(sys.argv[1:])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_ops  # noqa: E402


def rms_norm_jnp(x, w, eps=1e-6):
    """RMSNorm in plain jnp."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def make_model(norm, add):
    """loss(params, x, target) of a pre-norm residual MLP block followed by a normed linear head."""
    def forward(p, x):
        h = norm(x, p["g1"])
        h = jax.nn.gelu(h @ p["w1"]) @ p["w2"]
        y = add(x, h)  # residual
        return norm(y, p["g2"]) @ p["head"]

    def loss(p, x, target):
        return jnp.mean((forward(p, x) - target) ** 2)

    return loss


def init_params(key, dim, hidden):
    """Random initial parameters (norm gains start at 1)."""
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "g1": jnp.ones((dim,)), "g2": jnp.ones((dim,)),
        "w1": jax.random.normal(k1, (dim, hidden)) / dim ** 0.5,
        "w2": jax.random.normal(k2, (hidden, dim)) / hidden ** 0.5,
        "head": jax.random.normal(k3, (dim, dim)) / dim ** 0.5,
    }


def adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    """A minimal Adam: (init(params) -> state, update(grads, state, params) -> (params, state))."""
    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return {"m": zeros, "v": zeros, "t": jnp.zeros((), jnp.int32)}

    def update(grads, state, params):
        t = state["t"] + 1
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
        return params, {"m": m, "v": v, "t": t}

    return init, update


def make_step(loss, opt_update):
    """One jitted training step: value_and_grad, then the optimizer update."""
    @jax.jit
    def step(params, state, x, target):
        value, grads = jax.value_and_grad(loss)(params, x, target)
        params, state = opt_update(grads, state, params)
        return params, state, value

    return step


def batches(key, n, args, teacher):
    """``n`` (x, target) batches; targets come from a fixed random teacher map."""
    for k in jax.random.split(key, n):
        x = jax.random.normal(k, (args.batch, args.seq, args.dim))
        yield x, jnp.tanh(x @ teacher)


def max_rel_diff(a, b) -> float:
    """Largest |a - b| / max(|b|) over the leaves of two pytrees."""
    diffs = jax.tree.map(lambda x, y: float(jnp.abs(x - y).max() / (jnp.abs(y).max() + 1e-12)), a, b)
    return max(jax.tree.leaves(diffs))


def main(argv=None) -> int:
    """Train both models side by side; return 0 if they agree within ``--tol``."""
    args = parse_args(argv)
    key = jax.random.PRNGKey(0)
    params = init_params(key, args.dim, args.hidden)
    teacher = jax.random.normal(jax.random.PRNGKey(1), (args.dim, args.dim)) / args.dim ** 0.5
    opt_init, opt_update = adam(args.lr)
    nki_step = make_step(make_model(jax_ops.rms_norm, jax_ops.add), opt_update)
    ref_step = make_step(make_model(rms_norm_jnp, jnp.add), opt_update)

    shard = None
    if args.shard:
        mesh = Mesh(np.array(jax.devices()[:args.shard]), ("batch",))
        shard = NamedSharding(mesh, P("batch"))
        print(f"batch sharded over {args.shard} devices: {mesh}")

    p_nki, s_nki = params, opt_init(params)
    p_ref, s_ref = params, opt_init(params)
    worst_loss = 0.0
    print(f"{'step':>4} {'loss (NKI ops)':>15} {'loss (jnp)':>12} {'|diff|':>9}")
    for i, (x, target) in enumerate(batches(jax.random.PRNGKey(2), args.steps, args, teacher)):
        if shard is not None:
            x, target = jax.device_put(x, shard), jax.device_put(target, shard)
        p_nki, s_nki, l_nki = nki_step(p_nki, s_nki, x, target)
        p_ref, s_ref, l_ref = ref_step(p_ref, s_ref, x, target)
        diff = abs(float(l_nki) - float(l_ref))
        worst_loss = max(worst_loss, diff / max(abs(float(l_ref)), 1e-12))
        print(f"{i:>4} {float(l_nki):>15.6f} {float(l_ref):>12.6f} {diff:>9.2e}")
    worst_param = max_rel_diff(p_nki, p_ref)
    print(f"max relative loss difference:      {worst_loss:.3e}")
    print(f"max relative parameter difference: {worst_param:.3e}")
    ok = worst_loss <= args.tol and worst_param <= args.tol
    print("OK: the NKI-op model tracks the jnp model" if ok else f"FAIL: difference above {args.tol}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
