"""The NkiTensor model on placed on-chip storage: a tensor given an address (``nl.ndarray(...,
address=(partition, byte))``, as nki-library's SbufManager places every SBUF tensor) lives inside the
SBUF / PSUM, so consecutive partitions of it are a whole SBUF / PSUM partition apart in memory. The
"NKI Access Patterns" deep dive defines ``.ap`` over the *tensor* flattened (the partition step is the
tensor's free size), so every view and pattern must address the same elements as on an unplaced
tensor, write into the placed memory, and leave the bytes around the tensor alone."""

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.core import Tile, psum, sbuf

from .test_tensor_model import SETTINGS, _apply, _chain

nl = nki.language
nisa = nki.isa


def _placed(shape, dtype=np.float32, buffer=sbuf, lo=24, width=None):
    """``(tile, storage)``: a tile of ``shape`` whose partitions are rows of a wider byte ``storage``
    (``lo`` bytes into each row), holding 0, 1, 2, ... like its contiguous twin; the rest of the
    storage holds 0xAB bytes."""
    isz = np.dtype(dtype).itemsize
    fbytes = math.prod(shape[1:]) * isz
    width = width or lo + fbytes + 40
    storage = np.full((shape[0], width), 0xAB, np.uint8)
    data = storage[:, lo:lo + fbytes].view(dtype).reshape(shape)
    data[...] = np.arange(math.prod(shape), dtype=np.int64).astype(dtype).reshape(shape)
    return Tile(data, buffer), storage


def _in_storage(storage, shape, lo=24, dtype=np.float32):
    """What the placed memory holds where the tensor of ``shape`` lives."""
    fbytes = math.prod(shape[1:]) * np.dtype(dtype).itemsize
    return storage[:, lo:lo + fbytes].view(dtype).reshape(shape)


def _outside_untouched(storage, lo, fbytes):
    around = np.concatenate([storage[:, :lo], storage[:, lo + fbytes:]], axis=1)
    assert (around == 0xAB).all()


@SETTINGS
@given(_chain(on_chip=True), st.booleans())
def test_view_chains_on_placed_storage_match_numpy_views_of_the_tensor(case, use_psum):
    shape, steps = case
    buffer = psum if use_psum and math.prod(shape[1:]) * 4 <= 2048 else sbuf
    t, storage = _placed(shape, buffer=buffer)
    twin = Tile(t.data.copy(), buffer)  # the same tensor unplaced: the documented (flat) addressing
    assert not t.data.flags.c_contiguous or shape[0] == 1
    view, ref = t, t.data
    for op, seed in steps:
        got = _apply(op, seed, view, ref, True)
        if got is None:
            continue
        view, ref = got
        np.testing.assert_array_equal(view.data, ref)
        assert view.shape == ref.shape and view.buffer is buffer
    # the pattern and offset the kernel sees are the tensor's (free size as partition step), not memory's
    lay = view.get_pattern(), view.offset
    direct = t.ap(view.get_pattern(), offset=view.offset)
    np.testing.assert_array_equal(direct.data, ref)
    flat = twin.data.reshape(-1)
    idx = np.indices(view.shape).reshape(view.ndim, -1) if view.ndim else np.zeros((0, 1), int)
    addr = lay[1] + sum(i * s for i, (s, _) in zip(idx, lay[0]))
    np.testing.assert_array_equal(np.asarray(view.data).reshape(-1), flat[addr])


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 12), st.integers(0, 10 ** 6))
def test_writes_through_an_ap_of_placed_storage_land_in_the_tensor_only(parts, free, seed):
    rng = np.random.default_rng(seed)
    t, storage = _placed((parts, free))
    nparts = int(rng.integers(1, parts + 1))
    p0 = int(rng.integers(0, parts - nparts + 1))
    step = int(rng.integers(1, 3))
    num = int(rng.integers(1, (free - 1) // step + 2))
    f0 = int(rng.integers(0, free - (num - 1) * step))
    v = t.ap([[free, nparts], [step, num]], offset=p0 * free + f0)
    vals = rng.standard_normal((nparts, num)).astype(np.float32)
    nisa.tensor_copy(dst=v, src=Tile(vals, sbuf))
    want = np.arange(parts * free, dtype=np.float32).reshape(parts, free)
    want[p0:p0 + nparts, f0:f0 + (num - 1) * step + 1:step] = vals
    np.testing.assert_array_equal(_in_storage(storage, (parts, free)), want)
    _outside_untouched(storage, 24, free * 4)


def test_views_of_a_placed_tensor_alias_each_other():
    t, storage = _placed((4, 6))
    a = t.reshape_dim(1, (2, 3)).select(1, 1)  # elements 3..5 of each partition
    b = t.slice(1, 3, 6)
    nisa.memset(dst=a, value=-1.0)
    np.testing.assert_array_equal(b.data, np.full((4, 3), -1.0, np.float32))
    want = np.arange(24, dtype=np.float32).reshape(4, 6)
    want[:, 3:] = -1.0
    np.testing.assert_array_equal(_in_storage(storage, (4, 6)), want)


def test_reinterpreting_a_placed_tensor_keeps_partitions_apart():
    t, _ = _placed((4, 8), np.int32)
    cast = t.ap([[16, 4], [1, 16]], dtype=nl.bfloat16)  # each int32 is two bf16 halves
    assert cast.shape == (4, 16)
    np.testing.assert_array_equal(cast.data.view(np.uint16), t.data.view(np.uint16))


PLACED_ILLEGAL = [
    ("every other partition", lambda: _placed((16, 32))[0].ap([[64, 8], [1, 32]]), "partition step"),
    ("the memory's partition stride as step", lambda: _placed((4, 8))[0].ap([[8 + 16, 4], [1, 8]]),
     "partition step"),
    ("free pattern leaves its partition", lambda: _placed((4, 8))[0].ap([[8, 4], [1, 8]], offset=1).data,
     "out-of-bounds"),
    ("past the last partition", lambda: _placed((4, 8))[0].ap([[8, 4], [1, 8]], offset=8).data, "out-of-bounds"),
]


@pytest.mark.parametrize("name, make, rule", PLACED_ILLEGAL, ids=[c[0] for c in PLACED_ILLEGAL])
def test_illegal_patterns_on_placed_storage_are_rejected_with_their_rule(name, make, rule):
    with pytest.raises(NKIError, match=rule):
        make()


# ---------------------------------------------------------------------------
# kernels with nl.ndarray(..., address=): the way nki-library's SbufManager allocates
# ---------------------------------------------------------------------------
def test_ap_of_a_reshaped_placed_sbuf_tensor_in_a_kernel():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 4, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.sbuf, address=(0, 1024))
        b = nl.ndarray((128, 4, 5), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
        nisa.dma_copy(dst=a, src=x)
        a3 = a.reshape((128, 5, 4))
        nisa.tensor_copy(dst=b, src=a3.ap([[20, 128], [1, 4], [4, 5]]))  # the (5, 4) free layout transposed
        nisa.dma_copy(dst=out, src=b)
        return out

    x = np.random.default_rng(1).standard_normal((128, 20)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(x), x.reshape(128, 5, 4).transpose(0, 2, 1))


def test_matmuls_into_column_groups_of_a_placed_psum_tensor_each_overwrite_their_group():
    # nki-library attention_tkg MM1: one matmul per (128, 5) column group of a placed PSUM tensor; a
    # group never written before is overwritten, not accumulated onto what the other groups hold
    groups, cols = 3, 5

    @nki.jit
    def k(kt, q):
        out = nl.ndarray((2, 128, groups * cols), dtype=nl.float32, buffer=nl.shared_hbm)
        for b in range(2):
            k_sb = nl.ndarray((128, 128 * groups), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
            q_sb = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
            nisa.dma_copy(dst=k_sb, src=kt[b])
            nisa.dma_copy(dst=q_sb, src=q[b])
            ps = nl.ndarray((128, groups * cols), dtype=nl.float32, buffer=nl.psum, address=(0, 0))
            for i in range(groups):
                dst = ps.reshape_dim(1, [groups, cols]).select(1, i)
                nisa.nc_matmul(dst, stationary=k_sb.slice(1, i, 128 * groups, step=groups), moving=q_sb)
            res = nl.ndarray((128, groups * cols), dtype=nl.float32, buffer=nl.sbuf, address=(0, 8192))
            nisa.tensor_copy(dst=res, src=ps)
            nisa.dma_copy(dst=out[b], src=res)
        return out

    rng = np.random.default_rng(2)
    kt = rng.standard_normal((2, 128, 128 * groups)).astype(np.float32)
    q = rng.standard_normal((2, 128, cols)).astype(np.float32)
    got = nki.simulate(k)(kt, q)
    for b in range(2):
        want = np.concatenate([kt[b][:, i::groups].astype(np.float64).T @ q[b] for i in range(groups)], axis=1)
        np.testing.assert_allclose(got[b], want, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------
# reusing the bytes of a dead placed tensor (nki-library's SbufManager stack after close_scope)
# ---------------------------------------------------------------------------
def _reuse_kernel(read_a_late):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(a, 1.0)
        b = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
        nisa.tensor_copy(b, a)  # a's last use unless read_a_late
        c = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))  # a's bytes
        nisa.dma_copy(c, x)
        nisa.tensor_tensor(b, b, a if read_a_late else c, nl.add)
        nisa.dma_copy(out, b)
        return out

    return k


def test_a_tensor_placed_over_a_dead_ones_bytes_is_no_conflict():
    x = np.arange(2560, dtype=np.float32).reshape(128, 20)
    np.testing.assert_array_equal(nki.simulate(_reuse_kernel(False))(x), x + 1)


def test_a_tensor_placed_over_a_live_ones_bytes_is_a_conflict():
    x = np.arange(2560, dtype=np.float32).reshape(128, 20)
    with pytest.raises(NKIError, match="allocation conflict"):
        nki.simulate(_reuse_kernel(True))(x)


def _transpose_through_psum(x_hbm, dst_sb):
    x_sb = nl.ndarray((20, 128), dtype=nl.bfloat16, buffer=nl.sbuf, address=(0, 0))
    nisa.dma_copy(x_sb, x_hbm)
    tp = nl.ndarray((128, 20), dtype=nl.bfloat16, buffer=nl.psum, address=(0, 0))
    nisa.nc_transpose(tp, x_sb)
    nisa.tensor_copy(dst_sb, tp)


def test_psum_transposes_placed_at_one_address_one_after_another():
    # nki-library attention_tkg _apply_rope: the same (0, 0) SBUF / PSUM addresses for q's and k's transposes
    @nki.jit
    def k(q, kk):
        out = nl.ndarray((2, 128, 20), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
        b = nl.ndarray((128, 20), dtype=nl.float32, buffer=nl.sbuf, address=(0, 8192))
        _transpose_through_psum(q, a)
        _transpose_through_psum(kk, b)
        nisa.dma_copy(out[0], a)
        nisa.dma_copy(out[1], b)
        return out

    rng = np.random.default_rng(5)
    q, kk = (rng.standard_normal((20, 128)).astype(nl.bfloat16) for _ in range(2))
    got = nki.simulate(k)(q, kk)
    np.testing.assert_array_equal(got[0], q.T.astype(np.float32))
    np.testing.assert_array_equal(got[1], kk.T.astype(np.float32))


def test_views_of_a_broadcast_view_stay_views():
    t = Tile(np.arange(8, dtype=np.float32).reshape(8, 1), sbuf)
    b = nl.broadcast_to(t, (8, 4))
    v = b.slice(1, 0, 2)
    assert v.get_pattern() == [[1, 8], [0, 2]]
    np.testing.assert_array_equal(v.data, np.repeat(t.data, 2, axis=1))


def test_a_view_made_before_its_root_took_a_private_copy_writes_into_the_copy():
    src = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    src.flags.writeable = False  # a tile that still views read-only memory (copy-on-write)
    t = Tile(src, sbuf)
    r = t.reshape((4, 2, 3))  # made while t has no private memory yet
    nisa.memset(dst=r.ap([[6, 4], [3, 2], [1, 1]], offset=2), value=-1.0)
    want = np.arange(24, dtype=np.float32).reshape(4, 6)
    want[:, [2, 5]] = -1.0
    np.testing.assert_array_equal(t.data, want)
    np.testing.assert_array_equal(src, np.arange(24, dtype=np.float32).reshape(4, 6))  # the original untouched
