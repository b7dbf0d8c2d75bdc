"""The library ops in JAX (and on NumPy arrays) against float64 jnp references: values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_ops
import nki_kernels as K

from . import library_refs as R

JDT = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _x64(fn, *args):
    """``fn`` on float64 copies of ``args`` (JAX x64 mode), as NumPy."""
    with jax.enable_x64(True):
        out = fn(*[jnp.asarray(R.f64(a)) if np.issubdtype(np.asarray(a).dtype, np.floating) or
                   str(np.asarray(a).dtype) == "bfloat16" else jnp.asarray(a) for a in args])
        return jax.tree.map(np.asarray, out)


def _rand(rng, shape, dtype, scale=1.0):
    return jnp.asarray((rng.standard_normal(shape) * scale).astype(np.float32), JDT[dtype])


# --- float64 jnp references (independent of the kernels) -------------------------------------------

def ref_rms_norm(x, w, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def ref_attention(q, k, v, causal, scale=None):
    """jax.nn.dot_product_attention, which takes (batch, seq, heads, head_dim)."""
    t = lambda a: a.transpose(0, 2, 1, 3)  # noqa: E731
    return t(jax.nn.dot_product_attention(t(q), t(k), t(v), is_causal=causal, scale=scale))


def ref_cross_entropy(logits, labels, ignore_index=-100):
    logp = jax.nn.log_softmax(logits, -1)
    valid = labels != ignore_index
    picked = jnp.take_along_axis(logp, jnp.where(valid, labels, 0)[..., None], -1)[..., 0]
    return -(picked * valid).sum() / valid.sum()


@pytest.mark.parametrize("dtype", list(JDT))
@pytest.mark.parametrize("shape", [(1,), (7, 300), (2, 65, 129), (130, 2500)])
def test_softmax(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x, ct = _rand(rng, shape, dtype, 3.0), _rand(rng, shape, dtype)
    y = jax.jit(jax_ops.softmax)(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    R.close(y, _x64(lambda a: jax.nn.softmax(a, -1), x), dtype)
    g = jax.jit(jax.grad(lambda a: (jax_ops.softmax(a).astype(jnp.float32) * ct).sum()))(x)
    R.close(g, _x64(jax.grad(lambda a, c: (jax.nn.softmax(a, -1) * c).sum()), x, ct), dtype)


@pytest.mark.parametrize("dtype", list(JDT))
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 70, 1000), (9, 40000)])
def test_cross_entropy(shape, dtype):
    rng = np.random.default_rng(sum(shape) + 3)
    logits = _rand(rng, shape, dtype, 4.0)
    labels = rng.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    labels.reshape(-1)[1::4] = -100
    if (labels == -100).all():
        labels.reshape(-1)[0] = 0
    labels = jnp.asarray(labels)
    loss, g = jax.jit(jax.value_and_grad(jax_ops.cross_entropy))(logits, labels)
    assert loss.dtype == jnp.float32 and g.dtype == logits.dtype
    want, want_g = _x64(jax.value_and_grad(ref_cross_entropy), logits, labels)
    R.close(loss, want, "float32", scale=abs(want) + 1.0)
    R.close(g, want_g, dtype)


def test_cross_entropy_ignore_index_and_numpy():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((20, 33)).astype(np.float32)
    labels = rng.integers(0, 33, 20).astype(np.int32)
    labels[:5] = 7
    want = _x64(lambda a, b: ref_cross_entropy(a, b, ignore_index=7), logits, labels)
    R.close(K.cross_entropy(logits, labels, ignore_index=7), want, "float32")
    R.close(jax_ops.cross_entropy(jnp.asarray(logits), jnp.asarray(labels), ignore_index=7), want, "float32")


@pytest.mark.parametrize("dtype", list(JDT))
@pytest.mark.parametrize("shape", [(1, 1), (5, 300), (2, 70, 513), (3, 17000)])
def test_residual_rms_norm(shape, dtype):
    rng = np.random.default_rng(sum(shape) + 5)
    x, res = _rand(rng, shape, dtype), _rand(rng, shape, dtype)
    w = _rand(rng, shape[-1:], dtype)
    cy, ch = _rand(rng, shape, dtype), _rand(rng, shape, dtype)

    def loss(op, a, b, c, dy, dh):
        y, h = op(a, b, c)
        return (y.astype(jnp.float32) * dy).sum() + (h.astype(jnp.float32) * dh).sum()

    y, h = jax.jit(jax_ops.residual_rms_norm)(x, res, w)
    assert y.dtype == h.dtype == x.dtype
    y_ref, h_ref, rstd = R.residual_rms_norm(x, res, w, 1e-6, dtype)
    np.testing.assert_array_equal(R.f64(h), h_ref)
    R.close(y, y_ref, dtype)
    grads = jax.jit(jax.grad(lambda *a: loss(jax_ops.residual_rms_norm, *a), argnums=(0, 1, 2)))(x, res, w, cy, ch)
    # The reference normalises the rounded h, as the op does (h is an output in x's dtype).
    ref_grads = _x64(jax.grad(lambda h_, c, dy, dh: loss(lambda _a, _b, c_: (ref_rms_norm(h_, c_), h_), None, None,
                                                             c, dy, dh), argnums=(0, 1)), h_ref, w, cy, ch)
    dh_ref, dw_ref = ref_grads
    terms = (rstd * np.abs(R.f64(cy) * R.f64(w))).max() + np.abs(R.f64(ch)).max()
    R.close(grads[0], dh_ref, dtype, scale=terms, what="dx")
    R.close(grads[1], dh_ref, dtype, scale=terms, what="dresidual")
    R.close(grads[2], dw_ref, dtype, scale=np.abs(dw_ref).max() + np.abs(R.f64(cy)).max(), what="dweight")


ATTENTION_CASES = [
    (1, 1, 1, 1, 1, 8, False),
    (2, 4, 2, 70, 90, 16, True),     # GQA, causal, ragged
    (1, 2, 1, 130, 600, 32, False),  # two key tiles, two query tiles
    (1, 3, 3, 200, 200, 64, True),
]


@pytest.mark.parametrize("dtype", list(JDT))
@pytest.mark.parametrize("b,h,hkv,sq,sk,d,causal", ATTENTION_CASES)
def test_flash_attention(b, h, hkv, sq, sk, d, causal, dtype):
    rng = np.random.default_rng(b + h + sq + sk)
    q, k, v = _rand(rng, (b, h, sq, d), dtype), _rand(rng, (b, hkv, sk, d), dtype), _rand(rng, (b, hkv, sk, d), dtype)
    ct = _rand(rng, (b, h, sq, d), dtype)

    def loss(fn, q_, k_, v_, c):
        return (fn(q_, k_, v_).astype(jnp.float32) * c).sum()

    ours = lambda q_, k_, v_: jax_ops.flash_attention(q_, k_, v_, causal=causal)  # noqa: E731
    o = jax.jit(ours)(q, k, v)
    assert o.dtype == q.dtype
    R.close(o, _x64(lambda *a: ref_attention(*a, causal), q, k, v), dtype)
    grads = jax.jit(jax.grad(lambda *a: loss(ours, *a), argnums=(0, 1, 2)))(q, k, v, ct)
    want = _x64(jax.grad(lambda *a: loss(lambda *t: ref_attention(*t, causal), *a), argnums=(0, 1, 2)), q, k, v, ct)
    # A gradient that vanishes (one key: dq = 0) is compared on the scale of all three.
    floor = max(np.abs(g).max() for g in want)
    for got, ref, name in zip(grads, want, ("dq", "dk", "dv")):
        assert got.dtype == q.dtype
        R.close(got, ref, dtype, scale=floor * 0.1, what=name)


def test_flash_attention_scale_and_numpy():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 40, 16)).astype(np.float32) for _ in range(3))
    want = _x64(lambda *a: ref_attention(*a, False, 0.3), q, k, v)
    R.close(K.flash_attention(q, k, v, scale=0.3), want, "float32")


def test_vmap_folds_into_one_op():
    """vmap over a leading batch gives the per-example results (rows folded)."""
    rng = np.random.default_rng(2)
    x = _rand(rng, (3, 5, 40), "float32")
    r = _rand(rng, (3, 5, 40), "float32")
    w = _rand(rng, (40,), "float32")
    y = jax.vmap(lambda a, b: jax_ops.residual_rms_norm(a, b, w)[0])(x, r)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(y[i]), np.asarray(jax_ops.residual_rms_norm(x[i], r[i], w)[0]),
                                   rtol=1e-6, atol=1e-6)
    s = jax.vmap(jax_ops.softmax)(x)
    R.close(s, R.softmax(x), "float32")


@pytest.mark.parametrize("call,exc,words", [
    (lambda: K.softmax(np.ones((2, 3), np.int32)), TypeError, ["x", "int32"]),
    (lambda: K.cross_entropy(np.ones((4, 5), np.float32), np.zeros(3, np.int32)), ValueError, ["labels", "(3,)"]),
    (lambda: K.cross_entropy(np.ones((4, 5), np.float32), np.zeros(4, np.float32)), TypeError, ["labels"]),
    (lambda: K.residual_rms_norm(np.ones((4, 5), np.float32), np.ones((4, 6), np.float32), np.ones(5, np.float32)),
     ValueError, ["residual", "(4, 6)"]),
    (lambda: K.flash_attention(np.ones((1, 3, 4, 8), np.float32), np.ones((1, 2, 4, 8), np.float32),
                               np.ones((1, 2, 4, 8), np.float32)), ValueError, ["multiple", "3", "2"]),
    (lambda: K.flash_attention(np.ones((1, 1, 4, 200), np.float32), np.ones((1, 1, 4, 200), np.float32),
                               np.ones((1, 1, 4, 200), np.float32)), ValueError, ["head_dim", "128"]),
    (lambda: K.flash_attention(np.ones((1, 4, 8), np.float32), np.ones((1, 4, 8), np.float32),
                               np.ones((1, 4, 8), np.float32)), ValueError, ["q", "(batch, heads, seq, head_dim)"]),
])
def test_errors_name_the_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for w in words:
        assert w in str(info.value)


def test_saved_statistics_are_differentiable():
    """The ops' aux outputs (lse, rstd) carry gradients like any other output."""
    from nki_kernels.library import ops as L

    rng = np.random.default_rng(6)
    logits = _rand(rng, (9, 130), "float32", 3.0)
    labels = jnp.asarray(rng.integers(0, 130, 9).astype(np.int32))
    c = _rand(rng, (9,), "float32")
    got = jax.jit(jax.grad(lambda a: (L.cross_entropy_rows(a, labels)[1] * c).sum()))(logits)
    R.close(got, _x64(jax.grad(lambda a, c_: (jax.nn.logsumexp(a, -1) * c_).sum()), logits, c), "float32")

    x, res, w = _rand(rng, (7, 50), "float32"), _rand(rng, (7, 50), "float32"), _rand(rng, (50,), "float32")
    cr = _rand(rng, (7, 1), "float32")
    got = jax.jit(jax.grad(lambda a: (L.residual_rms_norm_op(a, res, w)[2] * cr).sum()))(x)
    want = _x64(jax.grad(lambda a, r_, c_: (jax.lax.rsqrt(jnp.mean((a + r_) ** 2, -1, keepdims=True) + 1e-6)
                                            * c_).sum()), x, res, cr)
    R.close(got, want, "float32")

    q, k, v = _rand(rng, (1, 2, 70, 16), "float32"), _rand(rng, (1, 1, 90, 16), "float32"), \
        _rand(rng, (1, 1, 90, 16), "float32")
    cl = _rand(rng, (1, 2, 70, 1), "float32")

    def ref_lse(q_, k_, c_):
        s = q_ @ jnp.repeat(k_, 2, 1).swapaxes(-1, -2) / 4.0
        s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -jnp.inf)
        return (jax.nn.logsumexp(s, -1, keepdims=True) * c_).sum()

    got = jax.jit(jax.grad(lambda a, b: (L.flash_attention_op(a, b, v, causal=True)[1] * cl).sum(),
                           argnums=(0, 1)))(q, k)
    want = _x64(jax.grad(ref_lse, argnums=(0, 1)), q, k, cl)
    for g, r in zip(got, want):
        R.close(g, r, "float32")
