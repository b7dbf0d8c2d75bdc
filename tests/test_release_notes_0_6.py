"""Items of the NKI release notes for NKI 0.6.0 (Neuron 2.32.0) and NKI 0.5.0 (Neuron 2.31.0), each
checked with a small current-API kernel against an independent NumPy reference, with the Neuron 2.32
``nki.isa`` reference stubs for the semantics:

* nc_match_replace8 pairs duplicate search values with their matches in reverse (0.6.0 fix);
* activation with a ``reduce_res`` that aliases ``dst`` keeps the reduction (0.6.0 fix);
* nc_matmul accumulating into overlapping views of one PSUM tile (the convolution pattern, 0.6.0 fix);
* tensor_copy_predicated / select_reduce with operands of different ranks (0.6.0 fix);
* tensor_scalar_reduce with ``reduce_res=None`` on non-final calls of a chain (0.6.0 feature);
* dma_transpose's Hardware DGE relaxations (0.6.0 feature);
* quantize_mx / nc_matmul_mx with sliced scale views (0.6.0 fix);
* nc_matmul with a bfloat16 dst of up to 8192 elements per partition, fp32 4096 (0.5.0 feature).

Each rule involved has a refused case and an allowed edge case.
"""

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install
from nki_kernels.simulator.instructions import target
from tests.isa_helpers import to_hbm, to_sbuf

install()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(606)
BF16 = ml_dtypes.bfloat16


# (an SBUF copy of an HBM tensor, and an HBM copy of a tile: the helpers of the test_isa_* files)
_load, _store = to_sbuf, to_hbm


# --------------------------------------------------------------------------------------------------------
# 1. nc_match_replace8: duplicate vals processed in reverse (i = 7 .. 0)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def match_replace(data, vals, imm):
    d, v = _load(data), _load(vals)
    out = nl.ndarray(data.shape, data.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((data.shape[0], 8), nl.uint32, buffer=nl.sbuf)
    nisa.nc_match_replace8(dst=out, data=d, vals=v, imm=imm, dst_idx=idx)
    return _store(out), _store(idx)


def match_replace_reference(data, vals, imm):
    """The stub's rule, row by row: vals taken from the last to the first, each takes the first
    position equal to it that no later val took; that position is replaced by ``imm``."""
    out, idx = data.copy(), np.full(vals.shape, 0xFFFFFFFF, np.uint64)
    for r in range(data.shape[0]):
        taken = set()
        for i in reversed(range(8)):
            for j in range(data.shape[1]):
                if data[r, j] == vals[r, i] and j not in taken:
                    taken.add(j)
                    idx[r, i] = j
                    out[r, j] = imm
                    break
    return out, idx


def test_match_replace8_the_stubs_duplicate_example():
    # the stub's example: data [1, 2, 3, 4, 8 x 7], vals [3, 8 x 7] -> dst_idx [2, 10, 9, 8, 7, 6, 5, 4]
    data = np.array([[1, 2, 3, 4] + [8] * 7], np.float32)
    vals = np.array([[3] + [8] * 7], np.float32)
    out, idx = match_replace(data, vals, -1.0)
    assert idx.tolist() == [[2, 10, 9, 8, 7, 6, 5, 4]]
    assert out.tolist() == [[1, 2, -1, 4] + [-1] * 7]


def test_match_replace8_interleaved_duplicates_against_reference():
    # duplicates not adjacent in vals, more occurrences in data than in vals, and a value that occurs
    # in vals twice but in data once (the earlier slot finds nothing: it is not replaced twice)
    data = RNG.integers(0, 5, (4, 24)).astype(np.float32)
    vals = np.array([[1, 2, 1, 3, 1, 2, 4, 0]] * 3 + [[7, 1, 7, 1, 2, 2, 3, 3]], np.float32)
    data[3] = 9
    data[3, [5, 11]] = 7
    data[3, 2] = 1
    out, idx = match_replace(data, vals, -5.0)
    want_out, want_idx = match_replace_reference(data, vals, -5.0)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(idx, want_idx)


# --------------------------------------------------------------------------------------------------------
# 2. activation: reduce_res aliasing dst is not clobbered
# --------------------------------------------------------------------------------------------------------
@nki.jit
def exp_sum_into_own_column(x):
    """dst = exp(x) and reduce_res = dst[:, 0:1]: column 0 must end as the row sums."""
    t = _load(x)
    o = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=o, op=nl.exp, data=t, reduce_op=nl.add, reduce_res=o[:, 0:1],
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _store(o)


@nki.jit
def exp_sum_in_place_chain(x, y):
    """Two activations chained on the Scalar registers, the second in place (dst = data) with its
    reduce_res the last column of that same tile."""
    a, b = _load(x), _load(y)
    nisa.activation(dst=a, op=nl.exp, data=a, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    F = y.shape[1]
    nisa.activation(dst=b, op=nl.exp, data=b, reduce_op=nl.add, reduce_res=b[:, F - 1:F],
                    reduce_cmd=nisa.reduce_cmd.reduce)
    return _store(a), _store(b)


def test_activation_reduce_res_aliasing_dst_keeps_the_reduction():
    x = RNG.standard_normal((16, 12)).astype(np.float32)
    got = exp_sum_into_own_column(x)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(got[:, 0], e.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(got[:, 1:], e[:, 1:], rtol=1e-6)


def test_activation_reduce_res_aliasing_an_in_place_dst_after_a_chain():
    x = RNG.standard_normal((8, 5)).astype(np.float32)
    y = RNG.standard_normal((8, 7)).astype(np.float32)
    a, b = exp_sum_in_place_chain(x, y)
    ex, ey = np.exp(x.astype(np.float64)), np.exp(y.astype(np.float64))
    np.testing.assert_allclose(a, ex, rtol=1e-6)
    np.testing.assert_allclose(b[:, -1], ex.sum(axis=1) + ey.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(b[:, :-1], ey[:, :-1], rtol=1e-6)


# --------------------------------------------------------------------------------------------------------
# 3. nc_matmul accumulating into overlapping views of one PSUM tile (convolution pattern)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def shifted_taps(w, x, shifts, accumulate):
    """A 1-D convolution written tap by tap: tap t's product w[t].T @ x accumulates into the PSUM
    window starting at column shifts[t]; the windows overlap."""
    T, K, M = w.shape
    _, N = x.shape
    xs = _load(x)
    p = nl.ndarray((M, N + max(shifts)), nl.float32, buffer=nl.psum)
    for t in range(T):
        ws = nl.ndarray((K, M), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ws, src=w[t])
        s = shifts[t]
        nisa.nc_matmul(dst=p[:, s:s + N], stationary=ws, moving=xs, accumulate=accumulate[t])
    r = nl.ndarray(p.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=p)
    return _store(r)


@nki.jit
def taps_2d(w, x):
    """The 2-D form: 2 x 2 taps into shifted [H, W] windows of a [M, H + 1, W + 1] PSUM tile."""
    _, K, M = w.shape
    H, W = x.shape[1], x.shape[2]
    p = nl.ndarray((M, H + 1, W + 1), nl.float32, buffer=nl.psum)
    for t in range(4):
        di, dj = divmod(t, 2)
        ws = nl.ndarray((K, M), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ws, src=w[t])
        xs = nl.ndarray((K, H * W), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x.reshape((K, H * W)))
        nisa.nc_matmul(dst=p[:, di:di + H, dj:dj + W], stationary=ws, moving=xs)
    r = nl.ndarray(p.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=p)
    return _store(r)


def _shifted_reference(w, x, shifts):
    out = np.zeros((w.shape[2], x.shape[1] + max(shifts)))
    for t, s in enumerate(shifts):
        out[:, s:s + x.shape[1]] += w[t].astype(np.float64).T @ x.astype(np.float64)
    return out


@pytest.mark.parametrize("accumulate", [(None, None, None), (False, None, None)])
def test_matmuls_into_overlapping_psum_windows_accumulate(accumulate):
    w = RNG.standard_normal((3, 32, 16)).astype(np.float32)
    x = RNG.standard_normal((32, 40)).astype(np.float32)
    shifts = (0, 3, 1)
    got = shifted_taps(w, x, shifts, accumulate)
    np.testing.assert_allclose(got, _shifted_reference(w, x, shifts), rtol=1e-5, atol=1e-4)


def test_matmuls_into_overlapping_2d_psum_windows_accumulate():
    K, M, H, W = 16, 8, 3, 5
    w = RNG.standard_normal((4, K, M)).astype(np.float32)
    x = RNG.standard_normal((K, H, W)).astype(np.float32)
    want = np.zeros((M, H + 1, W + 1))
    for t in range(4):
        di, dj = divmod(t, 2)
        want[:, di:di + H, dj:dj + W] += np.einsum("km,khw->mhw", w[t].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(taps_2d(w, x), want, rtol=1e-5, atol=1e-4)


def test_overlapping_window_accumulate_true_over_unwritten_columns_refused():
    # the second window reaches columns no matmul wrote: accumulate=True there is undefined on hardware
    w = RNG.standard_normal((2, 32, 16)).astype(np.float32)
    x = RNG.standard_normal((32, 8)).astype(np.float32)
    with pytest.raises(NKIError) as ei:
        shifted_taps(w, x, (0, 2), (False, True))
    assert ei.value.rule == "matmul accumulate"
    # the edge: accumulate=True onto a window lying wholly inside columns the first two wrote
    w = RNG.standard_normal((3, 32, 16)).astype(np.float32)
    got = shifted_taps(w, x, (0, 2, 1), (False, None, True))
    np.testing.assert_allclose(got, _shifted_reference(w, x, (0, 2, 1)), rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------------------------------------------
# 4. tensor_copy_predicated / select_reduce with operands of different ranks
# --------------------------------------------------------------------------------------------------------
@nki.jit
def copy_predicated(src, init, pred):
    s, d, p = _load(src), _load(init), _load(pred)
    nisa.tensor_copy_predicated(dst=d, src=s, predicate=p)
    return _store(d)


@nki.jit
def select_max(pred, on_true, dst_shape, on_false):
    p, t = _load(pred), _load(on_true)
    d = nl.ndarray(dst_shape, on_true.dtype, buffer=nl.sbuf)
    res = nl.ndarray((on_true.shape[0], 1), nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=d, predicate=p, on_true=t, on_false=on_false, reduce_res=res,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)
    return _store(d), _store(res)


@pytest.mark.parametrize("src_shape, dst_shape, pred_shape", [
    ((8, 24), (8, 2, 3, 4), (8, 2, 3, 4)),   # the release note's example: 2-D src, 4-D dst and predicate
    ((8, 2, 3, 4), (8, 24), (8, 24)),
    ((8, 24), (8, 24), (8, 4, 6)),
    ((8, 6, 4), (8, 3, 8), (8, 2, 2, 6)),   # three ranks
])
def test_copy_predicated_mixed_ranks(src_shape, dst_shape, pred_shape):
    src = RNG.standard_normal(src_shape).astype(np.float32)
    init = RNG.standard_normal(dst_shape).astype(np.float32)
    pred = (RNG.random(pred_shape) > 0.5).astype(np.uint8)
    got = copy_predicated(src, init, pred)
    flat = np.where(pred.reshape(8, -1) != 0, src.reshape(8, -1), init.reshape(8, -1))
    np.testing.assert_array_equal(got, flat.reshape(dst_shape))


def test_copy_predicated_mixed_ranks_with_other_counts_refused():
    with pytest.raises(NKIError) as ei:
        copy_predicated(np.zeros((8, 20), np.float32), np.zeros((8, 2, 3, 4), np.float32),
                        np.ones((8, 2, 3, 4), np.uint8))
    assert ei.value.rule == "operand shapes"
    with pytest.raises(NKIError) as ei:
        copy_predicated(np.zeros((8, 24), np.float32), np.zeros((8, 24), np.float32),
                        np.ones((8, 5, 4), np.uint8))
    assert ei.value.rule == "operand shapes"


@pytest.mark.parametrize("true_shape, dst_shape, pred_shape", [
    ((8, 24), (8, 2, 3, 4), (8, 2, 3, 4)),
    ((8, 2, 3, 4), (8, 24), (8, 24)),
    ((8, 24), (8, 4, 6), (8, 2, 12)),
])
def test_select_reduce_mixed_ranks(true_shape, dst_shape, pred_shape):
    on_true = RNG.standard_normal(true_shape).astype(np.float32)
    pred = (RNG.random(pred_shape) > 0.5).astype(np.uint8)
    pred.reshape(8, -1)[:, 0] = 1  # (every row selects at least one value)
    got, red = select_max(pred, on_true, dst_shape, -3.0)
    flat = np.where(pred.reshape(8, -1) != 0, on_true.reshape(8, -1), np.float32(-3.0))
    np.testing.assert_array_equal(got, flat.reshape(dst_shape))
    np.testing.assert_array_equal(red[:, 0], flat.max(axis=1))


def test_select_reduce_mixed_ranks_with_other_counts_refused():
    with pytest.raises(NKIError) as ei:
        select_max(np.ones((8, 2, 3, 4), np.uint8), np.zeros((8, 24), np.float32), (8, 2, 3, 5), -3.0)
    assert ei.value.rule == "operand shapes"


# --------------------------------------------------------------------------------------------------------
# 5. tensor_scalar_reduce: reduce_res=None until the last call of a chain
# --------------------------------------------------------------------------------------------------------
@nki.jit
def scaled_reduce_chain(x, op, init=None):
    """dst[:, t] = x[:, t] * 2 for each slice t; the reduction runs over all slices on the Vector
    accumulator, spilled to SBUF by the last call only."""
    P, T, F = x.shape
    res = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    out = nl.ndarray((P, T, F), nl.float32, buffer=nl.sbuf)
    for t in range(T):
        a = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x[:, t, :])
        first = nisa.reduce_cmd.load_reduce if init is not None else nisa.reduce_cmd.reset_reduce
        nisa.tensor_scalar_reduce(dst=out[:, t, :], data=a, op0=nl.multiply, operand0=2.0, reduce_op=op,
                                  reduce_res=res if t == T - 1 else None,
                                  reduce_cmd=first if t == 0 else nisa.reduce_cmd.reduce,
                                  reduce_init=init if t == 0 else None)
    return _store(out), _store(res)


@pytest.mark.parametrize("op, ref", [(nl.add, np.sum), (nl.maximum, np.max), (nl.minimum, np.min)])
def test_tensor_scalar_reduce_chain_spills_on_the_last_call(op, ref):
    x = np.random.default_rng(309).standard_normal((16, 4, 10)).astype(np.float32)
    out, res = scaled_reduce_chain(x, op)
    np.testing.assert_array_equal(out, x * np.float32(2))
    # (atol: a row sum near zero leaves fp32 summation-order error larger than rtol of it)
    np.testing.assert_allclose(res[:, 0], ref(2.0 * x.astype(np.float64), axis=(1, 2)), rtol=1e-5, atol=1e-4)


def test_tensor_scalar_reduce_chain_from_a_loaded_accumulator():
    # the edge: the first call loads reduce_init (load_reduce) and also writes nothing out
    # (its own generator, and an absolute tolerance: with the module's shared RNG the values depended on
    # which tests ran before it, and a sum near -10 made rtol alone fail now and then)
    x = np.random.default_rng(316).standard_normal((16, 3, 6)).astype(np.float32)
    _, res = scaled_reduce_chain(x, nl.add, init=10.0)
    np.testing.assert_allclose(res[:, 0], 10.0 + 2.0 * x.astype(np.float64).sum(axis=(1, 2)), rtol=1e-5, atol=1e-4)


def test_tensor_scalar_reduce_load_reduce_without_init_refused():
    @nki.jit
    def no_init(x):
        a = _load(x)
        o = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(dst=o, data=a, op0=nl.add, operand0=1.0, reduce_op=nl.add, reduce_res=None,
                                  reduce_cmd=nisa.reduce_cmd.load_reduce)
        return _store(o)

    with pytest.raises(NKIError) as ei:
        no_init(np.zeros((4, 8), np.float32))
    assert ei.value.rule == "reduce_cmd"


# --------------------------------------------------------------------------------------------------------
# 6. dma_transpose: Hardware DGE relaxations
# --------------------------------------------------------------------------------------------------------
_PERM = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@nki.jit
def hw_transpose(x, dst_shape=None):
    perm = _PERM[len(x.shape)]
    d = nl.ndarray(dst_shape or tuple(x.shape[p] for p in perm), x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=d, src=x, dge_mode=nisa.dge_mode.hwdge)
    return _store(d)


@pytest.mark.parametrize("shape", [
    (16, 128), (16, 100),                                   # 2-D: 16 partitions, last axis up to 128
    (1, 16, 128), (2, 8, 64), (4, 4, 32), (8, 2, 128), (16, 1, 96),   # 3-D: {1, 2, 4, 8, 16}
    (2, 3, 8, 64), (1, 2, 16, 100),                         # 4-D
])
def test_dma_transpose_hwdge_relaxed_shapes(shape):
    x = RNG.standard_normal(shape).astype(BF16)
    np.testing.assert_array_equal(hw_transpose(x), np.transpose(x, _PERM[len(shape)]))


@pytest.mark.parametrize("shape, dst_shape, words", [
    ((8, 64), None, "src.shape[0] == 16"),
    ((3, 16, 64), None, "{1, 2, 4, 8, 16}"),
    ((32, 1, 64), None, "{1, 2, 4, 8, 16}"),
    ((2, 4, 64), None, "% 16 == 0"),
    ((16, 129), (16, 129), "src.shape[-1] <= 128"),
])
def test_dma_transpose_hwdge_refused_shapes(shape, dst_shape, words):
    x = RNG.standard_normal(shape).astype(BF16)
    with pytest.raises(NKIError) as ei:
        hw_transpose(x, dst_shape)
    assert ei.value.rule == "dge_mode" and words in str(ei.value)


def test_dma_transpose_hwdge_needs_two_byte_elements():
    with pytest.raises(NKIError) as ei:
        hw_transpose(np.zeros((2, 8, 64), np.float32))
    assert ei.value.rule == "dge_mode" and "2-byte" in str(ei.value)


# --------------------------------------------------------------------------------------------------------
# 7. quantize_mx / nc_matmul_mx with sliced scale views
# --------------------------------------------------------------------------------------------------------
E4M3 = ml_dtypes.float8_e4m3fn


def mx_reference(x):
    """OCP MX sample conversion to e4m3 (emax 8) of x [P, F] in 8-partition x 4-element groups:
    the biased e8m0 scale bytes [P // 8, F // 4] and the quantized values [P, F]."""
    P, F = x.shape
    g = x.astype(np.float64).reshape(P // 8, 8, F // 4, 4)
    amax = np.abs(g).max(axis=(1, 3))
    _, e = np.frexp(amax)  # amax = m * 2**e with m in [0.5, 1): floor(log2(amax)) = e - 1
    biased = np.clip(np.where(amax > 0, e - 1, -127) - 8 + 127, 0, 254).astype(np.uint8)
    factor = np.exp2(biased.astype(np.float64) - 127)[:, None, :, None]
    top = float(ml_dtypes.finfo(E4M3).max)
    return biased, np.clip(g / factor, -top, top).reshape(P, F).astype(E4M3)


def scale_layout(biased, rows, fill):
    """Scale bytes in the hardware layout: group g in partition (g // 4) * 32 + g % 4; other rows ``fill``."""
    out = np.full((rows, biased.shape[1]), fill, np.uint8)
    for g in range(biased.shape[0]):
        out[(g // 4) * 32 + g % 4] = biased[g]
    return out


def _mx_input(P, F):
    mag = np.exp2(RNG.integers(-12, 12, (P // 8, 1, F // 4, 1))).astype(np.float32)
    return (RNG.standard_normal((P // 8, 8, F // 4, 4)) * mag).reshape(P, F).astype(BF16)


@nki.jit
def quantize_in_column_slices(x):
    """The source in two column halves, the second first, each into its slice of one scale tile
    pre-filled with 77 (scales already written must survive the other call)."""
    P, F = x.shape
    t = _load(x)
    q = nl.ndarray((P, F // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.full((P, F // 4), 77, dtype=nl.uint8, buffer=nl.sbuf)
    h = F // 8
    nisa.quantize_mx(dst=q[:, h:], src=t[:, 4 * h:], dst_scale=s[:, h:])
    nisa.quantize_mx(dst=q[:, 0:h], src=t[:, 0:4 * h], dst_scale=s[:, 0:h])
    return _store(s)


@nki.jit
def quantize_in_partition_slices(x, rows):
    """Two 32-partition halves of a 64-partition source, scales into partition views [32 + .., rows)
    and [0, rows) of one scale tile (``rows`` partitions each: 4 hold scales)."""
    P, F = x.shape
    t = _load(x)
    q = nl.ndarray((P, F // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.full((32 + rows, F // 4), 77, dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=q[32:64], src=t[32:64], dst_scale=s[32:32 + rows])
    nisa.quantize_mx(dst=q[0:32], src=t[0:32], dst_scale=s[0:rows])
    return _store(s)


@nki.jit
def mx_matmul_scale_views(a, b):
    """Both operands quantized into column slices of one packed tile, their scales into slices of
    different planes of one 3-D scale tile; the matmul reads the same views."""
    K, M = a.shape
    N = b.shape[1]
    ta, tb = _load(a), _load(b)
    q = nl.ndarray((K, (M + N) // 4), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.full((K, 2, (M + N) // 4), 64.0, dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)  # 2**6: byte 133
    m4 = M // 4
    nisa.quantize_mx(dst=q[:, 0:m4], src=ta, dst_scale=s[:, 1, 0:m4])
    nisa.quantize_mx(dst=q[:, m4:], src=tb, dst_scale=s[:, 0, m4:])
    acc = nl.ndarray((m4, N // 4), nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=q[:, 0:m4], moving=q[:, m4:], stationary_scale=s[:, 1, 0:m4],
                      moving_scale=s[:, 0, m4:])
    r = nl.ndarray(acc.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=acc)
    return _store(r), _store(s)


def test_quantize_mx_into_column_slices_of_one_scale_tile():
    x = _mx_input(64, 64)
    with target.use("gen4"):
        got = quantize_in_column_slices(x)
    biased, _ = mx_reference(x.astype(np.float32))
    # the view's partitions without a scale are written 0 (module rule); every column is some call's
    np.testing.assert_array_equal(got, scale_layout(biased, 64, 0))


def test_quantize_mx_into_partition_slices_of_one_scale_tile():
    x = _mx_input(64, 32)
    biased, _ = mx_reference(x.astype(np.float32))
    with target.use("gen4"):
        got = quantize_in_partition_slices(x, 4)  # the edge: views of exactly the 4 scale partitions
    want = np.full((36, 8), 77, np.uint8)
    want[0:4], want[32:36] = biased[0:4], biased[4:8]
    np.testing.assert_array_equal(got, want)
    with target.use("gen4"):
        got = quantize_in_partition_slices(x, 32)
    want = np.concatenate([scale_layout(biased[0:4], 32, 0), scale_layout(biased[4:8], 32, 0)])
    np.testing.assert_array_equal(got, want)


def test_quantize_mx_scale_view_too_small_refused():
    with target.use("gen4"), pytest.raises(NKIError) as ei:
        quantize_in_partition_slices(_mx_input(64, 32), 3)  # 3 partitions: a 32-row source has 4 scales
    assert ei.value.rule == "dst_scale shape"


def test_nc_matmul_mx_reads_scale_views_and_leaves_the_rest():
    K, M, N = 64, 32, 64
    a, b = _mx_input(K, M), _mx_input(K, N)
    with target.use("gen4"):
        got, s = mx_matmul_scale_views(a, b)
    sa, qa = mx_reference(a.astype(np.float32))
    sb, qb = mx_reference(b.astype(np.float32))
    da = qa.astype(np.float64).reshape(K, M // 4, 4) * np.repeat(np.exp2(sa - 127.0), 8, 0)[:, :, None]
    db = qb.astype(np.float64).reshape(K, N // 4, 4) * np.repeat(np.exp2(sb - 127.0), 8, 0)[:, :, None]
    np.testing.assert_allclose(got, np.einsum("kiq,kjq->ij", da, db), rtol=1e-6, atol=1e-30)
    s = s.view(np.uint8)
    np.testing.assert_array_equal(s[:, 1, :M // 4], scale_layout(sa, K, 0))
    np.testing.assert_array_equal(s[:, 0, M // 4:], scale_layout(sb, K, 0))
    assert (s[:, 0, :M // 4] == 127 + 6).all() and (s[:, 1, M // 4:] == 127 + 6).all()


# --------------------------------------------------------------------------------------------------------
# 8. nc_matmul: a bfloat16 dst holds up to 8192 elements per partition, float32 4096 (NeuronCore-v4)
# --------------------------------------------------------------------------------------------------------
@nki.jit
def wide_matmul(a, b, dst_dtype, twice=False):
    K, M = a.shape
    N = b.shape[1]
    ta, tb = _load(a), _load(b)
    p = nl.ndarray((M, N), dst_dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=ta, moving=tb)
    if twice:
        nisa.nc_matmul(dst=p, stationary=ta, moving=tb, accumulate=True)
    r = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=p)
    return _store(r)


def _wide(N):
    a = RNG.standard_normal((32, 16)).astype(BF16)
    b = RNG.standard_normal((32, N)).astype(BF16)
    return a, b, a.astype(np.float64).T @ b.astype(np.float64)


@pytest.mark.parametrize("N, dst_dtype", [(8192, "bfloat16"), (4096, "float32"), (600, "float32")])
def test_nc_matmul_result_fills_the_psum_on_neuroncore_v4(N, dst_dtype):
    a, b, want = _wide(N)
    with target.use("gen4"):
        got = wide_matmul(a, b, getattr(nl, dst_dtype), twice=True)
    if dst_dtype == "bfloat16":  # the bf16 dst rounds each result (2**-9 relative, twice)
        np.testing.assert_allclose(got, 2 * want, rtol=2 ** -7, atol=1e-5)
        assert np.abs(got - 2 * want).max() > 0  # (it is held in bfloat16, not float32)
    else:
        np.testing.assert_allclose(got, 2 * want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("N, dst_dtype", [(8193, "bfloat16"), (4097, "float32")])
def test_nc_matmul_result_past_the_psum_refused_on_neuroncore_v4(N, dst_dtype):
    a, b, _ = _wide(N)
    with target.use("gen4"), pytest.raises(NKIError) as ei:
        wide_matmul(a, b, getattr(nl, dst_dtype))
    assert ei.value.rule in ("PSUM bank", "matmul operands")


def test_nc_matmul_result_stays_in_one_bank_before_neuroncore_v4():
    a, b, want = _wide(512)
    with target.use("gen3"):
        np.testing.assert_allclose(wide_matmul(a, b, nl.float32), want, rtol=1e-5, atol=1e-4)
    a, b, _ = _wide(513)
    with target.use("gen3"), pytest.raises(NKIError) as ei:
        wide_matmul(a, b, nl.float32)
    assert ei.value.rule == "PSUM bank"


def test_nc_matmul_moving_limit_of_the_dst_dtype():
    # a bfloat16 moving tile of 4097..8192 elements needs a bfloat16 dst: into float32 it is refused
    @nki.jit
    def into_fp32_view(a, b):
        ta, tb = _load(a), _load(b)
        p = nl.ndarray((16, 4096), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=ta, moving=tb)
        return a

    a, b, _ = _wide(4098)
    with target.use("gen4"), pytest.raises(NKIError) as ei:
        into_fp32_view(a, b)
    assert ei.value.rule == "matmul operands" and "4096" in str(ei.value)
