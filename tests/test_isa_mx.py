"""quantize_mx and nc_matmul_mx on the packed MX types, bit-exact against a NumPy reference of the
OCP Microscaling spec's sample conversion (groups of 8 partitions x 4 elements, e8m0 scales
2**(floor(log2(amax)) - emax_elem), elements saturated to the element maximum and rounded to
nearest even); the Neuron 2.32 page's two-times-larger scale as the ``double`` rule."""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError, config
from nki_kernels.simulator.instructions import target
from nki_kernels.simulator import dtypes as dt
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.instructions import mx, target

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(17)
ELEM = {"e4m3": (ml_dtypes.float8_e4m3fn, 8, dt.float8_e4m3fn_x4), "e5m2": (ml_dtypes.float8_e5m2, 15,
                                                                          dt.float8_e5m2_x4)}


def mx_reference(x, elem, emax, extra=0):
    """OCP MX sample conversion of x [P, F] in groups of 8 partitions x 4 elements: shared exponent
    floor(log2(amax)) - emax (+ ``extra``: 1 for the two-times-larger scale), clamped to the e8m0
    range [-127, 127]; values divided by the scale, saturated to +-max of the element type, then
    rounded to nearest even."""
    P, F = x.shape
    g = x.astype(np.float64).reshape(P // 8, 8, F // 4, 4)
    amax = np.abs(g).max(axis=(1, 3))
    _, e = np.frexp(amax)  # amax = m * 2**e, m in [0.5, 1): floor(log2(amax)) = e - 1
    shared = np.where(amax > 0, e - 1, -127) - emax + extra
    biased = np.clip(shared + 127, 0, 254).astype(np.uint8)
    factor = np.exp2(biased.astype(np.float64) - 127)
    top = float(ml_dtypes.finfo(elem).max)
    q = np.clip(g / factor[:, None, :, None], -top, top).reshape(P, F).astype(elem)
    return q, biased


def scale_rows(biased, P):
    """Scales in the scale tile layout: group g at partition (g // 4) * 32 + g % 4."""
    out = np.zeros((P, biased.shape[1]), np.uint8)
    for gi in range(biased.shape[0]):
        out[(gi // 4) * 32 + gi % 4] = biased[gi]
    return out


@nki.jit
def quantize_kernel(x, kind="e4m3"):
    P, F = x.shape
    packed = ELEM[kind][2]
    t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    q = nl.ndarray((P, F // 4), dtype=packed, buffer=nl.sbuf)
    s = nl.zeros((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=q, src=t, dst_scale=s)
    oq = nl.ndarray((P, F // 4), dtype=packed, buffer=nl.shared_hbm)
    os_ = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=oq, src=q)
    nisa.dma_copy(dst=os_, src=s)
    return oq, os_


def _mixed(P, F):
    # Magnitudes differ by group so every group gets its own scale (and some groups are tiny).
    mag = np.exp2(RNG.integers(-20, 20, (P // 8, 1, F // 4, 1))).astype(np.float32)
    x = (RNG.standard_normal((P // 8, 8, F // 4, 4)) * mag).reshape(P, F)
    return x.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
@pytest.mark.parametrize("P", [32, 128])
def test_quantize_mx_bit_exact(kind, P):
    x = _mixed(P, 64)
    with target.use("gen4"):
        q, s = nki.simulate(quantize_kernel)(x, kind)
    elem, emax, _ = ELEM[kind]
    want_q, want_s = mx_reference(x.astype(np.float32), elem, emax)
    np.testing.assert_array_equal(dt.unpack_x4(q).astype(elem).view(np.uint8), want_q.view(np.uint8))
    np.testing.assert_array_equal(s, scale_rows(want_s, P))


def _quantize(x, kind="e4m3"):
    with target.use("gen4"):
        q, s = nki.simulate(quantize_kernel)(x, kind)
    return dt.unpack_x4(q).astype(ELEM[kind][0]), s


def _check(x, kind="e4m3", extra=0):
    got_q, got_s = _quantize(x, kind)
    want_q, want_s = mx_reference(x.astype(np.float32), *ELEM[kind][:2], extra=extra)
    np.testing.assert_array_equal(got_q.view(np.uint8), want_q.view(np.uint8))
    np.testing.assert_array_equal(got_s, scale_rows(want_s, x.shape[0]))
    return got_q, want_s


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_quantize_mx_saturates_the_group_maximum(kind):
    # amax = 1.9375 * 2**3: the OCP sample scale 2**(3 - emax) maps it to 1.9375 * 2**emax, past the
    # element maximum (1.75 * 2**emax for both fp8 types), so it saturates to that maximum.
    x = np.full((32, 4), 0.5, np.float32)
    x[3, 1] = 15.5
    x[5, 2] = -15.5
    q, s = _check(x.astype(ml_dtypes.bfloat16), kind)
    top = float(ml_dtypes.finfo(ELEM[kind][0]).max)
    assert s[0, 0] == 127 + 3 - ELEM[kind][1]
    assert float(q[3, 1]) == top and float(q[5, 2]) == -top


def test_quantize_mx_rounds_to_nearest_even():
    # With scale 2**(0 - 8) = 2**-8 a value v becomes v * 256; e4m3 has 3 mantissa bits, so in
    # [16, 32) its step is 2: 17 (a tie) rounds to 16, 19 (a tie) rounds to 20.
    x = np.zeros((32, 4), np.float32)
    x[0, 0] = 1.0
    x[1, 0] = 17 / 256
    x[2, 0] = 19 / 256
    x[3, 0] = -17 / 256
    q, _ = _check(x.astype(ml_dtypes.bfloat16))
    assert [float(q[i, 0]) for i in range(4)] == [256.0, 16.0, 20.0, -16.0]


def test_quantize_mx_small_values_become_element_subnormals_or_zero():
    # Group maximum 1.0 -> scale 2**-8. e4m3's subnormals are multiples of 2**-9 below 2**-6:
    # 2**-15 -> 2**-7, 3 * 2**-17 -> 3 * 2**-9, 2**-18 -> 2**-10 (a tie between 0 and 2**-9: even, 0),
    # 2**-20 -> 2**-12 -> 0.
    x = np.zeros((32, 8), np.float32)
    x[0, :4] = [1.0, 2.0 ** -15, 3 * 2.0 ** -17, 2.0 ** -18]
    x[1, 0] = 2.0 ** -20  # same group: partitions 0..7, columns 0..3
    q, s = _check(x.astype(ml_dtypes.bfloat16))
    assert s[0, 0] == 127 - 8
    assert [float(v) for v in q[0, :4]] + [float(q[1, 0])] == [256.0, 2.0 ** -7, 3 * 2.0 ** -9, 0.0, 0.0]


def test_quantize_mx_zero_and_tiny_groups_clamp_the_scale():
    # An all-zero group has scale byte 0 (2**-127) and zero data; a group of bf16 values near the
    # smallest normal has floor(log2(amax)) - 8 below -127, so its scale clamps to 2**-127 too and
    # the data holds x * 2**127 (the dequantized product still equals x).
    x = np.zeros((32, 8), np.float32)
    x[:, 4:] = RNG.standard_normal((32, 4)) * 2.0 ** -125
    q, s = _check(x.astype(ml_dtypes.bfloat16))
    assert (s[:4] == 0).all()
    assert (q[:, :4].astype(np.float32) == 0).all()
    deq = q[:, 4:].astype(np.float64) * 2.0 ** -127
    np.testing.assert_allclose(deq, x[:, 4:].astype(ml_dtypes.bfloat16).astype(np.float64), rtol=2 ** -3)


def test_quantize_mx_double_scale_rule():
    # The Neuron 2.32 page's rule: a block scale two times the OCP sample one, so nothing saturates.
    x = _mixed(32, 64)
    with mx.use_scale_rule("double"):
        q, s = _check(x, "e4m3", extra=1)
    ocp_q, ocp_s = mx_reference(x.astype(np.float32), *ELEM["e4m3"][:2])
    assert (s.astype(int) == ocp_s.astype(int) + 1).all()
    assert np.abs(q.astype(np.float32)).max() <= 256
    with pytest.raises(ValueError, match="not one of"):
        with mx.use_scale_rule("twice"):
            pass


def test_quantize_mx_zeroes_scale_partitions_without_a_scale():
    @nki.jit
    def into_garbage(x):
        P, F = x.shape
        t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        q = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.full((P, F // 4), 77, dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=t, dst_scale=s)
        out = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    x = _mixed(64, 32)
    with target.use("gen4"):
        s = nki.simulate(into_garbage)(x)
    _, want_s = mx_reference(x.astype(np.float32), *ELEM["e4m3"][:2])
    np.testing.assert_array_equal(s, scale_rows(want_s, 64))
    for quadrant in (0, 32):
        assert (s[quadrant + 4:quadrant + 32] == 0).all()


def test_quantize_mx_rules():
    x = _mixed(32, 64)
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):
        nki.simulate(quantize_kernel)(x)
    with target.use("gen4"), pytest.raises(NKIError, match="multiple of 32"):
        nki.simulate(quantize_kernel)(x[:24])


@nki.jit
def mx_matmul_kernel(a, b):
    K, M = a.shape
    _, N = b.shape
    ta = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    qa = nl.ndarray((K, M // 4), dtype=dt.float8_e4m3fn_x4, buffer=nl.sbuf)
    qb = nl.ndarray((K, N // 4), dtype=dt.float8_e4m3fn_x4, buffer=nl.sbuf)
    sa = nl.zeros((K, M // 4), dtype=nl.uint8, buffer=nl.sbuf)
    sb = nl.zeros((K, N // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=qa, src=ta, dst_scale=sa)
    nisa.quantize_mx(dst=qb, src=tb, dst_scale=sb)
    acc = nl.ndarray((M // 4, N // 4), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=qa, moving=qb, stationary_scale=sa, moving_scale=sb)
    res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_nc_matmul_mx_matches_dequantized_product():
    K, M, N = 64, 64, 128
    a = _mixed(K, M)
    b = _mixed(K, N)
    with target.use("gen4"):
        got = nki.simulate(mx_matmul_kernel)(a, b)
    qa, sa = mx_reference(a.astype(np.float32), ml_dtypes.float8_e4m3fn, 8)
    qb, sb = mx_reference(b.astype(np.float32), ml_dtypes.float8_e4m3fn, 8)
    da = qa.astype(np.float64).reshape(K, M // 4, 4) * np.repeat(np.exp2(sa - 127.0), 8, 0)[:, :, None]
    db = qb.astype(np.float64).reshape(K, N // 4, 4) * np.repeat(np.exp2(sb - 127.0), 8, 0)[:, :, None]
    want = np.einsum("kiq,kjq->ij", da, db)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)
    # and the MX product approximates the unquantized one: each quantized value is within 12.5 % of
    # its input (a saturated group maximum loses at most 1 - 1.75 / 2; rounding at most 2**-4), so
    # each term of the sum is within (1.125**2 - 1) of its exact value.
    a3 = a.astype(np.float64).reshape(K, M // 4, 4)
    b3 = b.astype(np.float64).reshape(K, N // 4, 4)
    exact = np.einsum("kiq,kjq->ij", a3, b3)
    bound = (1.125 ** 2 - 1) * np.einsum("kiq,kjq->ij", np.abs(a3), np.abs(b3))
    assert (np.abs(got - exact) <= bound).all()


def test_nc_matmul_mx_rejects_unpacked_operands():
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        s = nl.zeros((32, 4), dtype=nl.uint8, buffer=nl.sbuf)
        acc = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=acc, stationary=t, moving=t, stationary_scale=s, moving_scale=s)
        return a

    with target.use("gen4"), pytest.raises(NKIError, match="packed MX"):
        nki.simulate(k)(np.zeros((32, 4), np.float32))


def test_nc_matmul_mx_tiling_rules():
    @nki.jit
    def k(a, pos=None, size=None, m=4):
        t = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        q = nl.ndarray((32, a.shape[1] // 4), dtype=dt.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.zeros((32, a.shape[1] // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=t, dst_scale=s)
        acc = nl.ndarray((m, a.shape[1] // 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=acc, stationary=q[:, 0:m], moving=q, stationary_scale=s, moving_scale=s,
                          tile_position=pos, tile_size=size)
        return a

    a = _mixed(32, 16)
    with target.use("gen4"):
        nki.simulate(k)(a, pos=(32, 0), size=(32, 128))  # valid: second 32-row tile
        with pytest.raises(NKIError, match="both be set"):
            nki.simulate(k)(a, size=(32, 128))
        with pytest.raises(NKIError, match="multiple of the row size"):
            nki.simulate(k)(a, pos=(16, 0), size=(32, 128))
        with pytest.raises(NKIError, match="even"):
            nki.simulate(k)(a, m=3)


def test_quantize_mx_into_a_fresh_packed_tile_read_back_whole():
    # A packed MX nl.ndarray tile gets the never-written fill (all-zero records; NaN cannot be
    # assigned to a packed element) when only part of it is written before the whole is read.
    @nki.jit
    def half(x):
        P, F = x.shape
        t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        q = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s = nl.zeros((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q[:, 0:F // 8], src=t[:, 0:F // 2], dst_scale=s[:, 0:F // 8])
        out = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=q)
        return out

    x = _mixed(32, 64)
    with target.use("gen4"), config.override(uninit="off"):
        got = nki.simulate(half)(x)
    want, _ = mx_reference(x[:, :32].astype(np.float32), *ELEM["e4m3"][:2])
    np.testing.assert_array_equal(dt.unpack_x4(got[:, :8]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8),
                                  want.view(np.uint8))
    assert (got[:, 8:].view(np.uint8) == 0).all()
