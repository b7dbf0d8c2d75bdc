"""The RNG family (set_rng_seed, rand_set_state, rand_get_state, rng, rand2, dropout): deterministic
for a seed, different for different seeds, values where the pages put them."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.instructions import target

nl = nki.language
nisa = nki.isa


@nki.jit
def draws(seed, x, prob):
    s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=seed)
    nisa.set_rng_seed(s)
    raw = nl.ndarray((16, 64), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.rng(dst=raw)
    uni = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.rand2(dst=uni, min=-2.0, max=3.0)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dropout(dst=d, data=t, prob=prob)
    outs = []
    for tile in (raw, uni, d):
        o = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=tile)
        outs.append(o)
    return tuple(outs)


def _run(seed, prob=0.5):
    x = np.arange(1, 16 * 32 + 1, dtype=np.float32).reshape(16, 32)
    with target.use("gen4"):
        return nki.simulate(draws)(np.array([[seed]], np.uint32), x, prob), x


def test_same_seed_same_numbers_other_seed_other_numbers():
    (a_raw, a_uni, a_drop), _ = _run(7)
    (b_raw, b_uni, b_drop), _ = _run(7)
    (c_raw, _, _), _ = _run(8)
    np.testing.assert_array_equal(a_raw, b_raw)
    np.testing.assert_array_equal(a_uni, b_uni)
    np.testing.assert_array_equal(a_drop, b_drop)
    assert (a_raw != c_raw).mean() > 0.99
    assert len(np.unique(a_raw[:, 0])) == 16  # every lane its own stream


def test_rand2_range_and_dropout_rate():
    (raw, uni, drop), x = _run(3, prob=0.25)
    assert uni.min() >= -2.0 and uni.max() <= 3.0 and uni.std() > 1.0
    dropped = drop == 0
    np.testing.assert_array_equal(drop[~dropped], x[~dropped])
    assert 0.15 < dropped.mean() < 0.35
    (_, _, none), _ = _run(3, prob=0.0)
    (_, _, all_), _ = _run(3, prob=1.0)
    np.testing.assert_array_equal(none, x)
    assert not all_.any()


def test_rand_state_round_trip_and_rules():
    @nki.jit
    def k(state):
        s = nl.ndarray(state.shape, dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=state)
        nisa.rand_set_state(s, engine=nisa.gpsimd_engine)
        g = nl.ndarray(state.shape, dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(g, engine=nisa.gpsimd_engine)
        o = nl.ndarray(state.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=g)
        return o

    st = np.arange(1, 8 * 6 + 1, dtype=np.uint32).reshape(8, 6)
    np.testing.assert_array_equal(nki.simulate(k)(st), st)
    with pytest.raises(NKIError, match="6 uint32"):
        nki.simulate(k)(np.ones((8, 5), np.uint32))
    with target.use("gen2"), pytest.raises(NKIError, match="NeuronCore-v3"):
        nki.simulate(k)(st)


def test_rand2_needs_neuroncore_v4():
    x = np.ones((16, 32), np.float32)
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):
        nki.simulate(draws)(np.array([[1]], np.uint32), x, 0.5)


def test_rng_keeps_the_low_bits_and_needs_an_integer_dst():
    @nki.jit
    def k(seed, dtype=nl.uint32):
        s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=seed)
        nisa.set_rng_seed(s)
        raw = nl.ndarray((4, 16), dtype=dtype, buffer=nl.sbuf)
        nisa.rng(raw)
        o = nl.ndarray(raw.shape, dtype=dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=raw)
        return o

    seed = np.array([[5]], np.uint32)
    full = nki.simulate(k)(seed)
    low16 = nki.simulate(k)(seed, dtype=nl.int16)
    np.testing.assert_array_equal(low16, (full & 0xFFFF).astype(np.uint16).view(np.int16))
    with pytest.raises(NKIError, match="int8, int16"):
        nki.simulate(k)(seed, dtype=nl.float32)
