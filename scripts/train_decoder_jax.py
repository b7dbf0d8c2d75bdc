"""Train a small decoder block on the NKI kernel library (jax_ops) next to the same model in plain jnp.

    python scripts/train_decoder_jax.py [--steps 30] [--devices 8] [--json PATH]

The block is pre-norm: RMSNorm -> causal grouped-query attention
(``jax_ops.flash_attention``) -> residual RMSNorm (``jax_ops.residual_rms_norm``)
-> GELU MLP -> residual RMSNorm -> vocabulary head -> ``jax_ops.cross_entropy``.
The twin model computes the same thing with plain ``jnp``. Both start from the
same parameters, see the same batches of a synthetic next-token task and take
the same Adam steps (``jax.jit(jax.value_and_grad(loss))``); the script prints
both loss curves and the largest differences, and exits non-zero when they drift
apart beyond float32 tolerance. ``--devices N`` shards the batch over N host
devices (set before JAX starts, as ``XLA_FLAGS=--xla_force_host_platform_device_count=N``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The simulator's Tensor-engine matmuls are small (<= 128 x 512): BLAS threads only add spin-waiting,
# which costs 100x on a busy machine with few cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def parse_args(argv=None):
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=96, help="tokens per sequence (ragged: not a multiple of 128)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--devices", type=int, default=0, help="shard the batch over this many host devices")
    ap.add_argument("--json", help="write both loss curves to this file")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed relative difference")
    return ap.parse_args(argv)


if __name__ == "__main__":
    _n = parse_args(sys.argv[1:]).devices
    if _n > 1:  # XLA fixes the host device count when JAX initialises
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={_n}").strip()
    sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec  # noqa: E402
from jax_train import adam, make_step, max_rel_diff  # noqa: E402

import jax_ops  # noqa: E402


class PlainOps:
    """The block's ops in plain jnp (the reference)."""

    @staticmethod
    def rms_norm(x, w, eps=1e-6):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w

    @staticmethod
    def residual_rms_norm(x, residual, w, eps=1e-6):
        h = x + residual
        return PlainOps.rms_norm(h, w, eps), h

    @staticmethod
    def flash_attention(q, k, v, causal=False):
        group = q.shape[1] // k.shape[1]
        k, v = jnp.repeat(k, group, 1), jnp.repeat(v, group, 1)
        s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
        if causal:
            s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
        return jax.nn.softmax(s, -1) @ v

    @staticmethod
    def cross_entropy(logits, labels):
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))


class LibraryOps:
    """The block's ops from the NKI kernel library."""

    rms_norm = staticmethod(jax_ops.rms_norm)
    residual_rms_norm = staticmethod(jax_ops.residual_rms_norm)
    flash_attention = staticmethod(jax_ops.flash_attention)
    cross_entropy = staticmethod(jax_ops.cross_entropy)


def make_loss(ops, args):
    """loss(params, tokens, targets) of the decoder block built from ``ops``."""
    hd = args.dim // args.heads

    def heads(t, n):
        b, s, _ = t.shape
        return t.reshape(b, s, n, hd).transpose(0, 2, 1, 3)

    def loss(p, tokens, targets):
        x = p["embed"][tokens]
        n = ops.rms_norm(x, p["g_attn"])
        q, k, v = heads(n @ p["wq"], args.heads), heads(n @ p["wk"], args.kv_heads), heads(n @ p["wv"], args.kv_heads)
        o = ops.flash_attention(q, k, v, causal=True)
        o = o.transpose(0, 2, 1, 3).reshape(x.shape)
        n2, h = ops.residual_rms_norm(o @ p["wo"], x, p["g_mlp"])
        n3, _ = ops.residual_rms_norm(jax.nn.gelu(n2 @ p["w1"]) @ p["w2"], h, p["g_out"])
        logits = n3 @ p["head"]
        return ops.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))

    return loss


def init_params(key, args):
    """Random initial parameters (norm gains start at 1)."""
    d, hd = args.dim, args.dim // args.heads
    ks = jax.random.split(key, 8)
    lin = lambda k, i, o: jax.random.normal(k, (i, o)) / np.sqrt(i)  # noqa: E731
    return {
        "embed": jax.random.normal(ks[0], (args.vocab, d)),
        "g_attn": jnp.ones(d), "g_mlp": jnp.ones(d), "g_out": jnp.ones(d),
        "wq": lin(ks[1], d, args.heads * hd), "wk": lin(ks[2], d, args.kv_heads * hd),
        "wv": lin(ks[3], d, args.kv_heads * hd), "wo": lin(ks[4], args.heads * hd, d),
        "w1": lin(ks[5], d, args.hidden), "w2": lin(ks[6], args.hidden, d), "head": lin(ks[7], d, args.vocab),
    }


def batches(seed, args):
    """(tokens, targets) batches of a next-token task: each token's successor is fixed by a random permutation."""
    rng = np.random.default_rng(seed)
    successor = rng.permutation(args.vocab)
    for _ in range(args.steps):
        seqs = np.empty((args.batch, args.seq + 1), np.int32)
        seqs[:, 0] = rng.integers(0, args.vocab, args.batch)
        for i in range(args.seq):
            seqs[:, i + 1] = successor[seqs[:, i]]
        yield jnp.asarray(seqs[:, :-1]), jnp.asarray(seqs[:, 1:])


def compiled_summary(step, *args) -> str:
    """What the compiled (partitioned) step holds: NKI custom-calls per shard and collectives."""
    hlo = step.lower(*args).compile().as_text()
    count = lambda op: len(re.findall(rf"= [^=]* {op}\(", hlo))  # noqa: E731
    return (f"compiled step per shard: {count('custom-call')} NKI custom-calls, {count('all-gather')} all-gathers, "
            f"{count('all-reduce')} all-reduces")


def main(argv=None) -> int:
    """Train both models side by side; return 0 if they agree within ``--tol``."""
    args = parse_args(argv)
    params = init_params(jax.random.PRNGKey(0), args)
    opt_init, opt_update = adam(args.lr)
    lib_step = make_step(make_loss(LibraryOps, args), opt_update)
    ref_step = make_step(make_loss(PlainOps, args), opt_update)

    shard = None
    if args.devices > 1:
        mesh = Mesh(np.array(jax.devices()[:args.devices]), ("batch",))
        shard = NamedSharding(mesh, PartitionSpec("batch"))
        print(f"batch sharded over {args.devices} devices: {mesh}")

    p_lib, s_lib = params, opt_init(params)
    p_ref, s_ref = params, opt_init(params)
    if shard is not None:
        tokens, targets = (jax.device_put(a, shard) for a in next(batches(1, args)))
        print(compiled_summary(lib_step, p_lib, s_lib, tokens, targets))
    curves = {"library": [], "plain": []}
    worst = 0.0
    print(f"{'step':>4} {'loss (NKI library)':>19} {'loss (jnp)':>12} {'|diff|':>9}")
    for i, (tokens, targets) in enumerate(batches(1, args)):
        if shard is not None:
            tokens, targets = jax.device_put(tokens, shard), jax.device_put(targets, shard)
        p_lib, s_lib, l_lib = lib_step(p_lib, s_lib, tokens, targets)
        p_ref, s_ref, l_ref = ref_step(p_ref, s_ref, tokens, targets)
        l_lib, l_ref = float(l_lib), float(l_ref)
        curves["library"].append(l_lib)
        curves["plain"].append(l_ref)
        worst = max(worst, abs(l_lib - l_ref) / max(abs(l_ref), 1e-12))
        print(f"{i:>4} {l_lib:>19.6f} {l_ref:>12.6f} {abs(l_lib - l_ref):>9.2e}", flush=True)
    worst_param = max_rel_diff(p_lib, p_ref)
    print(f"max relative loss difference:      {worst:.3e}")
    print(f"max relative parameter difference: {worst_param:.3e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"framework": "jax", "devices": max(args.devices, 1), **curves,
                       "max_rel_loss_diff": worst, "max_rel_param_diff": worst_param}, f, indent=1)
    ok = worst <= args.tol and worst_param <= args.tol
    print("OK: the NKI-library model tracks the jnp model" if ok else f"FAIL: difference above {args.tol}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
