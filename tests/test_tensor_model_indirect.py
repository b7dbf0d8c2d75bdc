"""``NkiTensor.indirect`` (Tensor Indirection, NeuronCore-v4): a ``(P, num_elem)`` view whose column ``i``
is the tensor's column at free offset ``index[i % G, i // G]`` (``G`` = 16 on the Vector / Scalar /
GpSimd engines, 32 on the Tensor engine), gathering as an instruction's input and scattering as its
output -- against NumPy fancy indexing of the same offsets."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.core import HBMTensor, Tile, hbm, psum, sbuf
from nki_kernels.simulator.instructions import target

from .test_tensor_model import SETTINGS

nl = nki.language
nisa = nki.isa


@pytest.fixture(autouse=True)
def _trn3():
    with target.use(target.nc_version.gen4):
        yield


def _offsets(index, n, group):
    return np.array([index[i % group, i // group] for i in range(n)])


@st.composite
def _case(draw):
    parts = draw(st.integers(16, 32))
    free = (draw(st.integers(1, 4)), draw(st.integers(1, 8)))
    k = draw(st.integers(1, 3))
    n = draw(st.integers(1, 16 * k))
    seed = draw(st.integers(0, 10 ** 6))
    return parts, free, k, n, seed


@SETTINGS
@given(_case())
def test_indirect_gather_reads_the_columns_at_the_offsets(case):
    parts, free, k, n, seed = case
    rng = np.random.default_rng(seed)
    nfree = free[0] * free[1]
    t = Tile(rng.standard_normal((parts,) + free).astype(np.float32), sbuf)
    index = Tile(rng.integers(0, nfree, (parts, k)).astype(np.int32), sbuf)
    dst = Tile(np.zeros((parts, n), np.float32), sbuf)
    nisa.tensor_copy(dst=dst, src=t.indirect(index, num_elem=n))
    flat = t.data.reshape(parts, nfree)
    np.testing.assert_array_equal(dst.data, flat[:, _offsets(index.data, n, 16)])


@SETTINGS
@given(_case())
def test_indirect_scatter_writes_the_columns_at_the_offsets_only(case):
    parts, free, k, n, seed = case
    rng = np.random.default_rng(seed)
    nfree = free[0] * free[1]
    before = rng.standard_normal((parts,) + free).astype(np.float32)
    t = Tile(before.copy(), sbuf)
    index = Tile(rng.integers(0, nfree, (parts, k)).astype(np.int32), sbuf)
    src = Tile(rng.standard_normal((parts, n)).astype(np.float32), sbuf)
    nisa.tensor_copy(dst=t.indirect(index, num_elem=n), src=src)
    want = before.reshape(parts, nfree).copy()
    offs = _offsets(index.data, n, 16)
    for i, o in enumerate(offs):  # a repeated offset keeps the last column written there
        want[:, o] = src.data[:, i]
    np.testing.assert_array_equal(t.data.reshape(parts, nfree), want)


def test_indirect_view_of_a_view_offsets_count_in_the_view():
    base = Tile(np.arange(16 * 24, dtype=np.float32).reshape(16, 24), sbuf)
    view = base.slice(1, 4, 24, step=2)  # free elements 4, 6, ..., 22 of each partition
    index = Tile(np.tile(np.array([[3, 0]], np.int32), (16, 1)), sbuf)
    dst = Tile(np.zeros((16, 17), np.float32), sbuf)
    nisa.tensor_copy(dst=dst, src=view.indirect(index, num_elem=17))
    offs = _offsets(index.data, 17, 16)  # 3 (x16), then 0
    np.testing.assert_array_equal(dst.data, base.data[:, 4 + 2 * offs])


def test_predicated_copy_scatters_through_an_indirect_dst():
    rng = np.random.default_rng(3)
    t = Tile(np.zeros((16, 10), np.float32), sbuf)
    index = Tile(rng.permutation(16 * 2).reshape(16, 2).astype(np.int32) % 10, sbuf)
    index.data[:, 0] = np.arange(16) % 10  # distinct offsets in the first group: 0..9, 0..5
    pred = Tile((rng.random((16, 8)) < 0.5).astype(np.uint8), sbuf)
    src = Tile(rng.standard_normal((16, 8)).astype(np.float32), sbuf)
    nisa.tensor_copy_predicated(dst=t.indirect(index, num_elem=8), src=src, predicate=pred)
    want = np.zeros((16, 10), np.float32)
    for i, o in enumerate(_offsets(index.data, 8, 16)):
        want[:, o] = np.where(pred.data[:, i] != 0, src.data[:, i], want[:, o])
    np.testing.assert_array_equal(t.data, want)


def test_the_tensor_engine_groups_offsets_by_32_partitions():
    rng = np.random.default_rng(4)
    k_, m, n = 32, 8, 40
    moving = Tile(rng.standard_normal((k_, 64)).astype(np.float32).astype(nl.bfloat16), sbuf)
    stationary = Tile(rng.standard_normal((k_, m)).astype(np.float32).astype(nl.bfloat16), sbuf)
    index = Tile(rng.integers(0, 64, (k_, 2)).astype(np.int32), sbuf)
    dst = Tile(np.zeros((m, n), np.float32), psum)
    nisa.nc_matmul(dst, stationary=stationary, moving=moving.indirect(index, num_elem=n))
    cols = _offsets(index.data, n, 32)
    want = stationary.data.astype(np.float64).T @ moving.data.astype(np.float64)[:, cols]
    np.testing.assert_allclose(dst.data, want, rtol=1e-5, atol=1e-5)


def test_an_index_read_when_used_not_when_made():
    t = Tile(np.arange(16 * 4, dtype=np.float32).reshape(16, 4), sbuf)
    index = Tile(np.zeros((16, 1), np.int32), sbuf)
    view = t.indirect(index, num_elem=1)
    index.data[0, 0] = 3
    np.testing.assert_array_equal(view.data[:, 0], t.data[:, 3])


ILLEGAL = [
    ("before NeuronCore-v4", lambda: _on_gen3(), "NeuronCore-v4"),
    ("an HBM tensor", lambda: HBMTensor(np.zeros((16, 4), np.float32), hbm, "x").indirect(
        Tile(np.zeros((16, 1), np.int32), sbuf)), "indirect"),
    ("index partitions differ", lambda: Tile(np.zeros((16, 4), np.float32), sbuf).indirect(
        Tile(np.zeros((8, 2), np.int32), sbuf)), "partitions"),
    ("float index", lambda: Tile(np.zeros((16, 4), np.float32), sbuf).indirect(
        Tile(np.zeros((16, 1), np.float32), sbuf)), "integers"),
    ("num_elem over index.size", lambda: Tile(np.zeros((16, 4), np.float32), sbuf).indirect(
        Tile(np.zeros((16, 1), np.int32), sbuf), num_elem=17), "num_elem"),
    ("offset past the free size", lambda: Tile(np.zeros((16, 4), np.float32), sbuf).indirect(
        Tile(np.full((16, 1), 4, np.int32), sbuf)).data, "out-of-bounds"),
    ("column whose index row is missing", lambda: Tile(np.zeros((20, 4), np.float32), sbuf).indirect(
        Tile(np.zeros((20, 1), np.int32), sbuf), num_elem=18).data, "indirect index"),
    ("indirect of an indirect", lambda: _twice(), "indirect view"),
]


def _on_gen3():
    with target.use(target.nc_version.gen3):
        Tile(np.zeros((16, 4), np.float32), sbuf).indirect(Tile(np.zeros((16, 1), np.int32), sbuf))


def _twice():
    t, i = Tile(np.zeros((16, 4), np.float32), sbuf), Tile(np.zeros((16, 1), np.int32), sbuf)
    t.indirect(i).indirect(i)


@pytest.mark.parametrize("name, make, rule", ILLEGAL, ids=[c[0] for c in ILLEGAL])
def test_illegal_indirect_views_are_rejected_with_their_rule(name, make, rule):
    with pytest.raises(NKIError, match=rule):
        make()
