"""Standalone nisa.affine_select against the pseudo code of its reference page: the predicate
cmp_op(offset + channel_id * channel_multiplier + sum(index * step), 0) per element over a [[step, num], ...]
pattern, on_true_tile where it holds and on_false_value elsewhere; the page's positional order
(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op)."""

import inspect

import numpy as np
import pytest

from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa
rng = np.random.default_rng(21)


def select_reference(x, pattern, offset, channel_multiplier, on_false, cmp):
    """The page's loop over partitions and the (row-major) pattern dimensions, in NumPy."""
    P = x.shape[0]
    dims = [np.arange(num) * step for step, num in pattern]
    free = np.zeros(())
    for d in dims:
        free = free[..., None] + d
    value = offset + np.arange(P).reshape((P,) + (1,) * free.ndim) * channel_multiplier + free
    return np.where(cmp(value.reshape(x.shape), 0), x, on_false)


@nki.jit
def causal_kernel(x, pattern, offset, channel_multiplier, positional=False):
    t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    if positional:
        # the Neuron 2.32 page's positional order (NKI 0.3.0 moved offset to a keyword after cmp_op)
        nisa.affine_select(r, pattern, channel_multiplier, t, -9.0, nl.greater_equal, offset)
    else:
        nisa.affine_select(dst=r, pattern=pattern, offset=offset, channel_multiplier=channel_multiplier,
                           cmp_op=nl.greater_equal, on_true_tile=t, on_false_value=-9.0)
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_signature_follows_the_page():
    assert list(inspect.signature(nisa.affine_select).parameters) == [
        "dst", "pattern", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op", "offset", "name"]


def test_causal_mask_with_offset_keyword_and_positional():
    # keep x[p, f] where 3 + p - f >= 0 (a causal mask shifted by 3 columns)
    x = rng.standard_normal((32, 40)).astype(np.float32)
    want = select_reference(x, [[-1, 40]], 3, 1, -9.0, np.greater_equal)
    np.testing.assert_array_equal(nki.simulate(causal_kernel)(x, [[-1, 40]], 3, 1), want)
    np.testing.assert_array_equal(nki.simulate(causal_kernel)(x, [[-1, 40]], 3, 1, True), want)


def test_two_dimensional_pattern():
    x = rng.standard_normal((16, 4, 6)).astype(np.float32)
    want = select_reference(x, [[6, 4], [-1, 6]], -5, 2, -9.0, np.greater_equal)
    np.testing.assert_array_equal(nki.simulate(causal_kernel)(x, [[6, 4], [-1, 6]], -5, 2), want)


def test_offset_and_channel_multiplier_default_to_zero_tiles_are_required():
    # nki-library's cascaded max calls affine_select without offset (an identity-matrix mask).
    n = 64

    @nki.jit
    def k(x):
        out = nl.ndarray((n, n), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((n, n), dtype=x.dtype, buffer=nl.sbuf)
        r = nl.ndarray((n, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.affine_select(dst=r, pattern=[[1, n]], channel_multiplier=-1, on_true_tile=t, on_false_value=0.0)
        nisa.dma_copy(dst=out, src=r)
        return out

    x = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(x), np.where(np.eye(n, dtype=bool), x, 0.0))

    @nki.jit
    def missing(x):
        r = nl.ndarray((n, n), dtype=x.dtype, buffer=nl.sbuf)
        nisa.affine_select(dst=r, pattern=[[1, n]], offset=0, channel_multiplier=-1, on_false_value=0.0)
        return x

    with pytest.raises(TypeError, match="on_true_tile"):
        nki.simulate(missing)(x)
