"""``nki.collectives`` over simulated ranks (``simulate_ranks``): each collective against a NumPy
reference for several world sizes and replica groups, the operand rules, and deadlocks."""

import time

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import collectives as cc
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.ranks import simulate_ranks

nl = nki.language
nisa = nki.isa
rng = np.random.default_rng(4)
RG = cc.ReplicaGroup

GROUPS = [  # (world size, rank-lists)
    (2, [[0, 1]]),
    (4, [[0, 1, 2, 3]]),
    (4, [[0, 1], [2, 3]]),
    (4, [[3, 1], [0, 2]]),  # rank-list order, not rank order
    (8, [[0, 4], [1, 5], [2, 6], [3, 7]]),
]


def _inputs(world, shape, dtype=np.float32):
    return [rng.standard_normal(shape).astype(dtype) for _ in range(world)]


def _list_of(groups, r):
    return next(rl for rl in groups if r in rl)


# ---------------------------------------------------------------------------
# kernels (the collective and its static arguments are kernel parameters)
# ---------------------------------------------------------------------------
@nki.jit
def all_reduce_k(x, groups=None, op=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_reduce(srcs=[x], dsts=[out], replica_group=RG(groups), op=op)
    return out


@nki.jit
def all_gather_k(x, groups=None, n=1):
    out = nl.ndarray((x.shape[0] * n,) + tuple(x.shape[1:]), dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_gather(srcs=[x], dsts=[out], replica_group=RG(groups), collective_dim=0)
    return out


@nki.jit
def all_gather_sbuf_k(x, groups=None, n=1, dim=1):
    P, F = x.shape
    shape = (P, F * n) if dim == 1 else (P * n, F)
    out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    d = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    cc.all_gather(srcs=[s], dsts=[d], replica_group=RG(groups), collective_dim=dim)
    nisa.dma_copy(dst=out, src=d)
    return out


@nki.jit
def reduce_scatter_k(x, groups=None, n=1, op=None):
    out = nl.ndarray((x.shape[0] // n,) + tuple(x.shape[1:]), dtype=x.dtype, buffer=nl.shared_hbm)
    cc.reduce_scatter(srcs=[x], dsts=[out], replica_group=RG(groups), collective_dim=0, op=op)
    return out


@nki.jit
def all_to_all_k(x, groups=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_to_all(srcs=[x], dsts=[out], replica_group=RG(groups), collective_dim=0)
    return out


@nki.jit
def coalesced_all_reduce_k(x, y, groups=None):
    ox = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    oy = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    cc.all_reduce(srcs=[x, y], dsts=[ox, oy], replica_group=RG(groups), op=nl.maximum)
    return ox, oy


@nki.jit
def permute_k(x, pairs=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=-1.0)
    nisa.dma_copy(dst=out, src=zero)
    cc.collective_permute(srcs=[x], dsts=[out], source_target_pairs=pairs)
    return out


@nki.jit
def ring_k(x, groups=None, channels=1):
    outs = nl.ndarray((channels,) + tuple(x.shape[1:]), dtype=x.dtype, buffer=nl.shared_hbm)
    cc.collective_permute_implicit(srcs_by_channel=[[x[c]] for c in range(channels)],
                                   dsts_by_channel=[[outs[c]] for c in range(channels)],
                                   replica_group=RG(groups), channel_ids=list(range(channels)))
    return outs


@nki.jit
def ring_reduce_k(a, b, groups=None):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    cc.collective_permute_implicit_reduce(srcs0_by_channel=[[a]], srcs1_by_channel=[[b]], dsts_by_channel=[[out]],
                                          replica_group=RG(groups), op=nl.add)
    return out


@nki.jit
def ids_k(x, groups=None, steps=1):
    out = nl.ndarray((1, 1 + steps), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1 + steps), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=t[:, 0:1], value=int(cc.rank_id()))
    for it in range(steps):
        r = cc.collective_permute_implicit_current_processing_rank_id(iteration_id=it, replica_group=RG(groups))
        nisa.memset(dst=t[:, 1 + it:2 + it], value=int(r))
    nisa.dma_copy(dst=out, src=t)
    return out


# ---------------------------------------------------------------------------
# against NumPy
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("world,groups", GROUPS)
@pytest.mark.parametrize("op,ref", [(nl.add, np.sum), (nl.maximum, np.max), (nl.minimum, np.min)])
def test_all_reduce(world, groups, op, ref):
    xs = _inputs(world, (64, 16))
    outs = simulate_ranks(all_reduce_k, world, xs, groups=groups, op=op)
    for r in range(world):
        expect = ref(np.stack([xs[q].astype(np.float64) for q in _list_of(groups, r)]), axis=0)
        np.testing.assert_allclose(outs[r], expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("world,groups", GROUPS)
def test_all_gather_hbm(world, groups):
    xs = _inputs(world, (8, 4, 3))
    n = len(groups[0])
    outs = simulate_ranks(all_gather_k, world, xs, groups=groups, n=n)
    for r in range(world):
        np.testing.assert_array_equal(outs[r], np.concatenate([xs[q] for q in _list_of(groups, r)], axis=0))


@pytest.mark.parametrize("dim", [0, 1])
def test_all_gather_sbuf_along_partitions_or_free_axis(dim):
    groups = [[1, 0], [2, 3]]
    xs = _inputs(4, (32, 8))
    outs = simulate_ranks(all_gather_sbuf_k, 4, xs, groups=groups, n=2, dim=dim)
    for r in range(4):
        np.testing.assert_array_equal(outs[r], np.concatenate([xs[q] for q in _list_of(groups, r)], axis=dim))


@pytest.mark.parametrize("world,groups", GROUPS)
def test_reduce_scatter(world, groups):
    n = len(groups[0])
    xs = _inputs(world, (8 * n, 5))
    outs = simulate_ranks(reduce_scatter_k, world, xs, groups=groups, n=n, op=nl.add)
    for r in range(world):
        rl = _list_of(groups, r)
        total = np.sum([xs[q].astype(np.float64) for q in rl], axis=0)
        k = rl.index(r)
        np.testing.assert_allclose(outs[r], total[8 * k:8 * (k + 1)], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("world,groups", GROUPS)
def test_all_to_all(world, groups):
    n = len(groups[0])
    xs = _inputs(world, (4 * n, 6))
    outs = simulate_ranks(all_to_all_k, world, xs, groups=groups)
    for r in range(world):
        rl = _list_of(groups, r)
        k = rl.index(r)
        np.testing.assert_array_equal(outs[r], np.concatenate([xs[q][4 * k:4 * (k + 1)] for q in rl]))


def test_coalesced_all_reduce_on_hbm():
    xs, ys = _inputs(3, (16, 4)), _inputs(3, (8,))
    outs = simulate_ranks(coalesced_all_reduce_k, 3, xs, ys, groups=[[0, 1, 2]])
    for ox, oy in outs:
        np.testing.assert_array_equal(ox, np.max(xs, axis=0))
        np.testing.assert_array_equal(oy, np.max(ys, axis=0))


def test_integer_all_reduce_is_exact():
    xs = [rng.integers(-1000, 1000, (16, 4)).astype(np.int32) for _ in range(4)]
    outs = simulate_ranks(all_reduce_k, 4, xs, groups=[[0, 1, 2, 3]], op=nl.add)
    for o in outs:
        np.testing.assert_array_equal(o, np.sum(xs, axis=0))


@pytest.mark.parametrize("world,pairs", [(2, [(0, 1), (1, 0)]), (4, [(0, 1), (1, 2), (2, 3), (3, 0)]),
                                         (4, [(0, 2), (3, 1)])])
def test_collective_permute(world, pairs):
    xs = _inputs(world, (16, 4))
    outs = simulate_ranks(permute_k, world, xs, pairs=pairs)
    for r in range(world):
        src = next((s for s, t in pairs if t == r), None)
        np.testing.assert_array_equal(outs[r], xs[src] if src is not None else np.full((16, 4), -1, np.float32))


@pytest.mark.parametrize("world,groups", GROUPS)
@pytest.mark.parametrize("channels", [1, 2])
def test_collective_permute_implicit_ring(world, groups, channels):
    xs = _inputs(world, (channels, 8, 4))
    outs = simulate_ranks(ring_k, world, xs, groups=groups, channels=channels)
    for r in range(world):
        rl = _list_of(groups, r)
        pred = rl[(rl.index(r) - 1) % len(rl)]
        np.testing.assert_array_equal(outs[r], xs[pred])


@pytest.mark.parametrize("world,groups", GROUPS)
def test_collective_permute_implicit_reduce(world, groups):
    a, b = _inputs(world, (8, 4)), _inputs(world, (8, 4))
    outs = simulate_ranks(ring_reduce_k, world, a, b, groups=groups)
    for r in range(world):
        rl = _list_of(groups, r)
        pred = rl[(rl.index(r) - 1) % len(rl)]
        np.testing.assert_allclose(outs[r], a[pred].astype(np.float64) + b[pred], rtol=1e-6)


@pytest.mark.parametrize("world,groups", GROUPS)
def test_rank_id_and_ring_processing_order(world, groups):
    n = len(groups[0])
    outs = simulate_ranks(ids_k, world, np.zeros((1, 1), np.float32), groups=groups, steps=n)
    for r in range(world):
        rl = _list_of(groups, r)
        k = rl.index(r)
        # step 0: own data; step s: the data that came s hops around the ring (predecessors)
        assert outs[r].tolist() == [[r] + [rl[(k - s) % n] for s in range(n)]]


def test_rank_id_outside_simulate_ranks_is_zero():
    out = ids_k(np.zeros((1, 1), np.float32), groups=[[0]], steps=1)
    assert out.tolist() == [[0, 0]]


@nki.jit
def a2av_k(x, meta, out_elems=0, groups=None, known=False, rdispls=False):
    out = nl.ndarray((out_elems,), dtype=x.dtype, buffer=nl.shared_hbm)
    fill = nl.ndarray((1, out_elems), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=-1.0)
    nisa.dma_copy(dst=out, src=fill)
    cc.all_to_all_v(srcs=[x], dsts=[out], replica_group=RG(groups), metadata_tensor=meta,
                    recv_counts_known=known, has_rdispls=rdispls)
    return out


@pytest.mark.parametrize("rdispls", [False, True])
def test_all_to_all_v_against_numpy(rdispls):
    world, groups, size, out_elems = 3, [[0, 1, 2]], 12, 40
    xs = _inputs(world, (size,))
    counts = rng.integers(0, 5, (world, world))  # counts[j, k]: elements rank j sends to rank k
    metas, expect = [], [np.full(out_elems, -1.0, np.float32) for _ in range(world)]
    for j in range(world):
        sd = rng.integers(0, size - 4, world)
        recv = counts[:, j]
        rd = np.array([0, 12, 25]) if rdispls else np.concatenate([[0], np.cumsum(recv)[:-1]])
        metas.append(np.stack([counts[j], sd, recv, rd]).astype(np.uint32))
    for k in range(world):
        for j in range(world):
            cnt, start = counts[j, k], metas[j][1][k]
            at = metas[k][3][j]
            expect[k][at:at + cnt] = xs[j][start:start + cnt]
    outs = simulate_ranks(a2av_k, world, xs, metas, out_elems=out_elems, groups=groups, known=True, rdispls=rdispls)
    for k in range(world):
        np.testing.assert_array_equal(outs[k], expect[k])


@nki.jit
def agv_k(x, meta, out_elems=0, groups=None, rdispls=False):
    out = nl.ndarray((out_elems,), dtype=x.dtype, buffer=nl.shared_hbm)
    fill = nl.ndarray((1, out_elems), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=fill, value=-1.0)
    nisa.dma_copy(dst=out, src=fill)
    cc.all_gather_v(srcs=[x], dsts=[out], replica_group=RG(groups), metadata_tensor=meta, has_rdispls=rdispls)
    return out


def test_all_gather_v_chunks_land_in_slots():
    world, groups, slot = 4, [[0, 1], [3, 2]], 6
    xs = _inputs(world, (10,))
    counts, starts = [3, 6, 0, 5], [2, 4, 0, 1]
    metas = [np.stack([np.full(2, counts[r]), np.full(2, starts[r])]).astype(np.uint32) for r in range(world)]
    outs = simulate_ranks(agv_k, world, xs, metas, out_elems=2 * slot, groups=groups)
    for r in range(world):
        rl = _list_of(groups, r)
        expect = np.full(2 * slot, -1.0, np.float32)
        for s, q in enumerate(rl):
            expect[s * slot:s * slot + counts[q]] = xs[q][starts[q]:starts[q] + counts[q]]
        np.testing.assert_array_equal(outs[r], expect)


# ---------------------------------------------------------------------------
# two logical cores per rank
# ---------------------------------------------------------------------------
@nki.jit
def lnc_all_reduce_k(x, groups=None):
    """Each of the two cores all-reduces its half of the rows across the ranks."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(0)
    h = x.shape[0] // 2
    cc.all_reduce(srcs=[x[c * h:(c + 1) * h, :]], dsts=[out[c * h:(c + 1) * h, :]], replica_group=RG(groups),
                  op=nl.add)
    return out


def test_collectives_on_two_logical_cores_per_rank():
    xs = _inputs(4, (16, 8))
    outs = simulate_ranks(lnc_all_reduce_k[2], 4, xs, groups=[[0, 1, 2, 3]])
    for o in outs:
        np.testing.assert_allclose(o, np.sum([x.astype(np.float64) for x in xs], axis=0), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# replica groups
# ---------------------------------------------------------------------------
def test_replica_group_from_partition_op():
    assert cc.ReplicaGroup.from_partition_op(8, cc.rg_partition_op.bitwise_and, 0) == RG([list(range(8))])
    assert cc.ReplicaGroup.from_partition_op(8, cc.rg_partition_op.div, 4) == RG([[0, 1, 2, 3], [4, 5, 6, 7]])
    assert cc.ReplicaGroup.from_partition_op(8, cc.rg_partition_op.mod, 4) == RG([[0, 4], [1, 5], [2, 6], [3, 7]])


def test_replica_group_rejects_overlapping_rank_lists():
    with pytest.raises(ValueError, match="rank 1"):
        RG([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="empty"):
        RG([[0], []])


# ---------------------------------------------------------------------------
# rules and planted bugs
# ---------------------------------------------------------------------------
def test_group_larger_than_world_is_reported():
    with pytest.raises(NKIError, match="world has 2 rank"):
        simulate_ranks(all_reduce_k, 2, _inputs(2, (4, 4)), groups=[[0, 1, 2, 3]], op=nl.add)


def test_rank_in_no_rank_list_is_reported():
    with pytest.raises(NKIError, match="rank 2 is in no rank-list"):
        simulate_ranks(all_reduce_k, 3, _inputs(3, (4, 4)), groups=[[0, 1]], op=nl.add)


def test_reduction_op_must_be_add_min_or_max():
    with pytest.raises(NKIError, match="nl.add, nl.minimum or nl.maximum"):
        simulate_ranks(all_reduce_k, 2, _inputs(2, (4, 4)), groups=[[0, 1]], op=nl.multiply)


def test_reduce_scatter_needs_divisible_dimension():
    with pytest.raises(NKIError, match="not a multiple of the 4 ranks"):
        simulate_ranks(reduce_scatter_k, 4, _inputs(4, (6, 4)), groups=[[0, 1, 2, 3]], n=1, op=nl.add)


def test_all_gather_wrong_dst_shape():
    with pytest.raises(NKIError, match=r"dst has shape \(4, 4\)"):
        simulate_ranks(all_gather_k, 2, _inputs(2, (4, 4)), groups=[[0, 1]], n=1)


@nki.jit
def a2a_sbuf_k(x, groups=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=x)
    cc.all_to_all(srcs=[s], dsts=[d], replica_group=RG(groups), collective_dim=0)
    return out


@nki.jit
def mixed_k(x, groups=None):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    cc.all_reduce(srcs=[s], dsts=[out], replica_group=RG(groups), op=nl.add)
    return out


@nki.jit
def gather_dim1_hbm_k(x, groups=None):
    out = nl.ndarray((x.shape[0], 2 * x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    cc.all_gather(srcs=[x], dsts=[out], replica_group=RG(groups), collective_dim=1)
    return out


def test_memory_rules():
    x2 = _inputs(2, (8, 4))
    with pytest.raises(NKIError, match="must reside on HBM"):
        simulate_ranks(a2a_sbuf_k, 2, x2, groups=[[0, 1]])
    with pytest.raises(NKIError, match="both HBM and SBUF"):
        simulate_ranks(mixed_k, 2, x2, groups=[[0, 1]])
    with pytest.raises(NKIError, match="collective_dim=1; currently 0 is supported for HBM"):
        simulate_ranks(gather_dim1_hbm_k, 2, x2, groups=[[0, 1]])


def test_channel_ids_must_be_consecutive_from_zero():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        cc.collective_permute_implicit([[x]], [[out]], RG([[0, 1]]), channel_ids=[1])
        return out

    with pytest.raises(NKIError, match="consecutive integers from 0"):
        simulate_ranks(k, 2, _inputs(2, (4, 4)))


def test_unknown_keyword_is_a_type_error():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        cc.all_reduce(srcs=[x], dsts=[out], replica_group=RG([[0]]), op=nl.add, collective_dim=0)
        return out

    with pytest.raises(TypeError, match="collective_dim"):
        k(np.zeros((4, 4), np.float32))


@nki.jit
def skip_on_rank1_k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if int(cc.rank_id()) != 1:
        cc.all_reduce(srcs=[x], dsts=[out], replica_group=RG([[0, 1, 2]]), op=nl.add)  # MISSING
    return out


@nki.jit
def different_ops_k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    op = nl.add if int(cc.rank_id()) == 0 else nl.maximum
    cc.all_reduce(srcs=[x], dsts=[out], replica_group=RG([[0, 1]]), op=op)
    return out


def test_rank_skipping_a_collective_is_a_deadlock_not_a_hang():
    t0 = time.monotonic()
    with pytest.raises(NKIError, match=r"\[deadlock\]") as e:
        simulate_ranks(skip_on_rank1_k, 3, _inputs(3, (4, 4)))
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert "rank 0 core 0 waits" in msg and "rank 1 core 0 has finished" in msg and "waits for rank(s) [1]" in msg
    assert "test_collectives.py" in msg


def test_ranks_disagreeing_on_the_collective_is_reported():
    with pytest.raises(NKIError, match="every rank of a rank-list must make the same collective calls"):
        simulate_ranks(different_ops_k, 2, _inputs(2, (4, 4)))


def test_simulate_ranks_argument_errors():
    with pytest.raises(ValueError, match="one per rank"):
        simulate_ranks(all_reduce_k, 3, _inputs(2, (4, 4)), groups=[[0, 1, 2]], op=nl.add)
    with pytest.raises(ValueError, match="ranks must be a positive integer"):
        simulate_ranks(all_reduce_k, 0, np.zeros((4, 4), np.float32))


def test_replica_group_is_an_nki_object():
    from nki_kernels.simulator.nki_object import NKIObject

    assert isinstance(RG([[0, 1]]), NKIObject)


def test_star_import_gives_every_name_of_the_collectives_index():
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.collectives.html lists these
    from nki_kernels.simulator import collectives as cc

    documented = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
                  "collective_permute_implicit", "collective_permute_implicit_reduce",
                  "collective_permute_implicit_current_processing_rank_id", "rank_id", "ReplicaGroup"}
    assert documented <= set(cc.__all__), sorted(documented - set(cc.__all__))
