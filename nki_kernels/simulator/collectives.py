"""``nki.collectives``: collective communication between ranks, simulated in one process.

A collective is a meeting of the ranks of one rank-list of a :class:`ReplicaGroup`: every
rank posts its sources, waits until all ranks of its rank-list have posted, and writes its
own destinations from the posts (a NumPy reference of the operation, reductions in fp32
for float types, in rank-list order). Ranks are the workers of
:func:`nki_kernels.simulator.ranks.simulate_ranks` (``simulate_ranks(kernel[2], 4, x)``:
4 ranks, each running the kernel on its own HBM, on 2 logical cores each); a collective of
a logical core meets the same core of the other ranks. A plain launch is a world of one
rank. A rank that never makes the matching call is reported as a deadlock with every
rank's source line, as for ``nisa.sendrecv``.

Signatures are those of the current reference pages
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/nki.collectives.html);
``priority`` and ``name`` are accepted and unused.
"""

from __future__ import annotations

import enum
import functools

import numpy as np

from . import cores as _cores
from . import diagnostics as _diag
from . import dtypes as dt
from . import transfers as _transfers
from .core import Access, HBMTensor, Tile, current_or_none, psum
from .errors import NKIError
from .instructions import lnc as _lnc
from .instructions.registers import VirtualRegister
from .nki_object import NKIObject

_MAX_CHANNELS = 4


# ---------------------------------------------------------------------------
# replica groups
# ---------------------------------------------------------------------------
class rg_partition_op(enum.Enum):
    """How :meth:`ReplicaGroup.from_partition_op` maps a rank to its rank-list id."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


class ReplicaGroup(NKIObject):
    """The set of ranks a collective runs on, as a list of rank-lists (``nki.collectives.ReplicaGroup``).

    The collective runs independently within each rank-list, on all rank-lists in parallel;
    a rank belongs to at most one rank-list. ``ReplicaGroup([[0, 1, 2, 3], [4, 5, 6, 7]])``.
    """

    def __init__(self, replica_groups):
        try:
            lists = [[int(r) for r in rl] for rl in replica_groups]
        except TypeError:
            raise TypeError(f"ReplicaGroup takes a list of rank-lists such as [[0, 1], [2, 3]], got "
                            f"{replica_groups!r}") from None
        seen = set()
        for rl in lists:
            if not rl:
                raise ValueError(f"ReplicaGroup {lists}: a rank-list is empty")
            for r in rl:
                if r < 0:
                    raise ValueError(f"ReplicaGroup {lists}: rank {r} is negative")
                if r in seen:
                    raise ValueError(f"ReplicaGroup {lists}: rank {r} is in more than one rank-list (or twice)")
                seen.add(r)
        self.replica_groups = lists

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> "ReplicaGroup":
        """Partition ranks ``[0, world_size)``: ranks with the same ``op(rank, operand)`` form one rank-list
        (``div, 4`` over 8 ranks: ``[[0, 1, 2, 3], [4, 5, 6, 7]]``; ``mod, 4``: ``[[0, 4], [1, 5], ...]``)."""
        fn = {rg_partition_op.bitwise_and: lambda r: r & operand,
              rg_partition_op.div: lambda r: r // operand,
              rg_partition_op.mod: lambda r: r % operand}.get(op)
        if fn is None:
            raise TypeError(f"from_partition_op: op must be an rg_partition_op, got {op!r}")
        lists = {}
        for r in range(int(world_size)):
            lists.setdefault(fn(r), []).append(r)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def rank_list(self, rank: int):
        """The rank-list containing ``rank`` (``None`` if none does)."""
        return next((rl for rl in self.replica_groups if rank in rl), None)

    def __eq__(self, other):
        return isinstance(other, ReplicaGroup) and other.replica_groups == self.replica_groups

    def __hash__(self):
        return hash(tuple(map(tuple, self.replica_groups)))

    def __repr__(self):
        return f"ReplicaGroup({self.replica_groups})"


# ---------------------------------------------------------------------------
# ranks and meetings
# ---------------------------------------------------------------------------
def _me(op):
    """``(worker or None, rank, world size)`` of the running program."""
    w = _cores.current_worker(f"nki.collectives.{op}")
    if w is None:
        return None, 0, 1
    return w, w.rank, w.group.world


def _rank_list(replica_group, op):
    if not isinstance(replica_group, ReplicaGroup):
        raise NKIError(op, f"nki.collectives.{op}: replica_group must be a ReplicaGroup, got "
                       f"{type(replica_group).__name__}")
    w, rank, world = _me(op)
    rl = replica_group.rank_list(rank)
    if rl is None:
        raise NKIError(op, f"nki.collectives.{op}: rank {rank} is in no rank-list of {replica_group}")
    if max(rl) >= world:
        raise NKIError(op, f"nki.collectives.{op}: rank-list {rl} names rank {max(rl)} but the world has {world} "
                       "rank(s); run the kernel with nki_kernels.simulator.ranks.simulate_ranks(kernel, ranks, ...)")
    return w, rank, rl


class _Post:
    __slots__ = ("op", "params", "payload", "where", "done")

    def __init__(self, op, params, payload, where):
        self.op, self.params, self.payload, self.where, self.done = op, params, payload, where, False


def _meet(w, rank, members, op, params, payload):
    """Post ``payload`` and wait for every rank of ``members``; returns ``{rank: payload}``."""
    members = tuple(members)
    if w is None or members == (rank,):
        return {rank: payload}
    g = w.group
    key = (members, w.core)
    seq = w.collectives[key]
    w.collectives[key] += 1
    posts = g.meetings.setdefault(key + (seq,), {})
    mine = _Post(op, params, payload, _diag.where())
    with g.cv:
        posts[rank] = mine

    def missing():
        return [r for r in members if r not in posts]

    g.block(w, lambda: not missing(),
            lambda: f"nki.collectives.{op} over ranks {list(members)} waits for rank(s) {missing()} to make their "
                    f"collective call #{seq + 1} on this rank-list")
    for r in members:
        p = posts[r]
        if p.op != op or p.params != params:
            raise NKIError(op, f"collective call #{seq + 1} over ranks {list(members)}: rank {rank} calls "
                           f"nki.collectives.{op}{params} at {_diag.fmt_where(mine.where)} but rank {r} calls "
                           f"nki.collectives.{p.op}{p.params} at {_diag.fmt_where(p.where)}; every rank of a "
                           "rank-list must make the same collective calls in the same order")
    with g.cv:
        mine.done = True
        if all(p.done for p in posts.values()):
            g.meetings.pop(key + (seq,), None)
    return {r: posts[r].payload for r in members}


# ---------------------------------------------------------------------------
# operands
# ---------------------------------------------------------------------------
def _memory(x, op, name):
    if isinstance(x, (HBMTensor, Access)):
        return "HBM"
    if isinstance(x, Tile):
        if x.buffer is psum:
            raise NKIError("operand memory", f"nki.collectives.{op}: {name} (shape {x.shape}) is in PSUM; collectives "
                           "read and write HBM or SBUF")
        return "SBUF"
    raise NKIError("operand type", f"nki.collectives.{op}: {name} must be an HBM tensor or an SBUF tile, got "
                   f"{type(x).__name__}")


def _tensor_lists(op, srcs, dsts, hbm_only=False, exactly_one=False):
    """Check the tensor lists of a collective; returns their common memory (``"HBM"``/``"SBUF"``)."""
    lists, names = (srcs, dsts), ("srcs", "dsts")
    mems = set()
    for lst, name in zip(lists, names):
        if not isinstance(lst, (list, tuple)) or not lst:
            raise NKIError(op, f"nki.collectives.{op}: {name} must be a non-empty list of tensors, got {lst!r}")
        if exactly_one and len(lst) != 1:
            raise NKIError(op, f"nki.collectives.{op}: {name} has {len(lst)} tensors; exactly one is supported "
                           "(coalesced collective communication is not)")
        mems.update(_memory(x, op, f"{name}[{i}]") for i, x in enumerate(lst))
    if len({len(lst) for lst in lists}) != 1:
        raise NKIError(op, f"nki.collectives.{op}: " + ", ".join(f"{n} has {len(lst)}" for lst, n in zip(lists, names))
                       + " tensors; the lists pair up one to one")
    if len(mems) > 1:
        raise NKIError("operand memory", f"nki.collectives.{op}: tensors are on both HBM and SBUF; all must be on "
                       "HBM or all on SBUF")
    mem = mems.pop()
    if hbm_only and mem != "HBM":
        raise NKIError("operand memory", f"nki.collectives.{op}: tensors must reside on HBM (SBUF is not supported)")
    if mem == "SBUF" and len(lists[0]) > 1:
        raise NKIError(op, f"nki.collectives.{op}: {len(lists[0])} SBUF tensors; coalesced collective communication "
                       "(several tensors) is only supported on HBM")
    return mem


def _write(dst, vals, op):
    """Write ``vals`` (exactly ``dst``'s shape) into ``dst``, rounding to its dtype."""
    shape = tuple(dst.shape)
    if tuple(np.shape(vals)) != shape:
        raise NKIError("dst shape", f"nki.collectives.{op}: dst has shape {shape}, the result has shape "
                       f"{tuple(np.shape(vals))}")
    if isinstance(dst, Tile):
        dst[...] = vals
    else:
        _transfers.store(dst, np.asarray(vals))


def _write_flat(dst, pieces):
    """Write each ``(offset, values)`` of ``pieces`` at that flat (row-major) element offset of HBM
    ``dst``; other elements are not written."""
    if isinstance(dst, HBMTensor):
        flat = dst.reshape((int(np.prod(dst.shape)),))
        for at, vals in pieces:
            if vals.size:
                _transfers.store(flat[at:at + vals.size], np.asarray(vals))
        return
    acc = dst  # a region of a tensor: read-modify-write of the region
    out = np.array(acc.index.read(acc.tensor.data, None, what=acc.tensor.name), copy=True)
    flat = out.reshape(-1)
    for at, vals in pieces:
        flat[at:at + vals.size] = dt.cast(vals, flat.dtype)
    _transfers.store(acc, out)


def _reducer(op, name):
    return _lnc.reduction(op, f"nki.collectives.{name}")


def _reduce(fn, arrays):
    """Left fold of ``fn`` over ``arrays`` (fp32 for float types, native for integers)."""
    arrays = [dt.compute_view(np.asarray(a)) for a in arrays]
    if not all(np.issubdtype(a.dtype, np.integer) for a in arrays):
        arrays = [a.astype(np.float32) for a in arrays]
    return functools.reduce(fn, arrays)


def _dim(collective_dim, mem, op, allowed_sbuf=(0,)):
    allowed = allowed_sbuf if mem == "SBUF" else (0,)
    if isinstance(collective_dim, bool) or not isinstance(collective_dim, (int, np.integer)) \
            or int(collective_dim) not in allowed:
        raise NKIError(op, f"nki.collectives.{op}: collective_dim={collective_dim!r}; currently "
                       f"{' or '.join(map(str, allowed))} is supported for {mem} tensors")
    return int(collective_dim)


def _same_shapes(op, arrays, what):
    shapes = {np.shape(a) for a in arrays}
    if len(shapes) > 1:
        raise NKIError("shape", f"nki.collectives.{op}: the ranks' {what} have different shapes {sorted(shapes)}")


# ---------------------------------------------------------------------------
# collectives
# ---------------------------------------------------------------------------
def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Reduce each ``srcs[i]`` element-wise over the ranks of the rank-list (``op``: ``nl.add``,
    ``nl.minimum`` or ``nl.maximum``) into ``dsts[i]`` on every rank.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.all_reduce.html)"""
    _tensor_lists("all_reduce", srcs, dsts)
    fn = _reducer(op, "all_reduce")
    w, rank, rl = _rank_list(replica_group, "all_reduce")
    posts = _meet(w, rank, rl, "all_reduce", (fn.__name__, len(srcs)), [_lnc.read_values(s) for s in srcs])
    for i, d in enumerate(dsts):
        parts = [posts[r][i] for r in rl]
        _same_shapes("all_reduce", parts, f"srcs[{i}]")
        _write(d, _reduce(fn, parts), "all_reduce")


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Concatenate each ``srcs[i]`` of the rank-list's ranks (in rank-list order) along
    ``collective_dim`` into ``dsts[i]`` on every rank (0 on HBM; 0 or 1 for 2-D SBUF tiles).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.all_gather.html)"""
    mem = _tensor_lists("all_gather", srcs, dsts)
    dim = _dim(collective_dim, mem, "all_gather", (0, 1))
    w, rank, rl = _rank_list(replica_group, "all_gather")
    posts = _meet(w, rank, rl, "all_gather", (dim, len(srcs)), [_lnc.read_values(s) for s in srcs])
    for i, d in enumerate(dsts):
        parts = [posts[r][i] for r in rl]
        _same_shapes("all_gather", parts, f"srcs[{i}]")
        _write(d, np.concatenate(parts, axis=dim), "all_gather")


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None):
    """Reduce each ``srcs[i]`` over the rank-list, split the result along ``collective_dim`` (0)
    into one equal chunk per rank, and write the k-th chunk to ``dsts[i]`` of the rank-list's
    k-th rank.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.reduce_scatter.html)"""
    mem = _tensor_lists("reduce_scatter", srcs, dsts)
    dim = _dim(collective_dim, mem, "reduce_scatter")
    fn = _reducer(op, "reduce_scatter")
    w, rank, rl = _rank_list(replica_group, "reduce_scatter")
    posts = _meet(w, rank, rl, "reduce_scatter", (dim, fn.__name__, len(srcs)), [_lnc.read_values(s) for s in srcs])
    k, n = rl.index(rank), len(rl)
    for i, d in enumerate(dsts):
        parts = [posts[r][i] for r in rl]
        _same_shapes("reduce_scatter", parts, f"srcs[{i}]")
        total = _reduce(fn, parts)
        if total.shape[dim] % n:
            raise NKIError("shape", f"nki.collectives.reduce_scatter: srcs[{i}] dimension {dim} has size "
                           f"{total.shape[dim]}, not a multiple of the {n} ranks of the rank-list")
        _write(d, np.split(total, n, axis=dim)[k], "reduce_scatter")


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Split each rank's ``srcs[i]`` along ``collective_dim`` (0) into one chunk per rank of the
    rank-list; rank k's ``dsts[i]`` is the concatenation of every rank's k-th chunk (HBM only).
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.all_to_all.html)"""
    mem = _tensor_lists("all_to_all", srcs, dsts, hbm_only=True)
    dim = _dim(collective_dim, mem, "all_to_all")
    w, rank, rl = _rank_list(replica_group, "all_to_all")
    posts = _meet(w, rank, rl, "all_to_all", (dim, len(srcs)), [_lnc.read_values(s) for s in srcs])
    k, n = rl.index(rank), len(rl)
    for i, d in enumerate(dsts):
        parts = [posts[r][i] for r in rl]
        _same_shapes("all_to_all", parts, f"srcs[{i}]")
        if parts[0].shape[dim] % n:
            raise NKIError("shape", f"nki.collectives.all_to_all: srcs[{i}] dimension {dim} has size "
                           f"{parts[0].shape[dim]}, not a multiple of the {n} ranks of the rank-list")
        _write(d, np.concatenate([np.split(p, n, axis=dim)[k] for p in parts], axis=dim), "all_to_all")


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """Send ``srcs[0]`` of each pair's source rank to ``dsts[0]`` of its target rank (HBM, one
    tensor each). The ranks named in the pairs meet; a rank named in no pair does nothing.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.collective_permute.html)"""
    op = "collective_permute"
    _tensor_lists(op, srcs, dsts, hbm_only=True, exactly_one=True)
    try:
        pairs = tuple((int(s), int(t)) for s, t in source_target_pairs)
    except (TypeError, ValueError):
        raise NKIError(op, f"nki.collectives.{op}: source_target_pairs must be a list of (source, target) rank "
                       f"pairs, got {source_target_pairs!r}") from None
    targets = [t for _, t in pairs]
    dup = {t for t in targets if targets.count(t) > 1}
    if dup:
        raise NKIError(op, f"nki.collectives.{op}: rank(s) {sorted(dup)} are the target of several pairs in "
                       f"{list(pairs)}; a rank receives from one source")
    w, rank, world = _me(op)
    members = sorted({r for p in pairs for r in p})
    if members and members[-1] >= world:
        raise NKIError(op, f"nki.collectives.{op}: pairs {list(pairs)} name rank {members[-1]} but the world has "
                       f"{world} rank(s)")
    if rank not in members:
        return
    posts = _meet(w, rank, members, op, (pairs,), _lnc.read_values(srcs[0]))
    source = next((s for s, t in pairs if t == rank), None)
    if source is not None:
        _write(dsts[0], posts[source], op)


def _channels(op, lists, names, channel_ids):
    for lst, name in zip(lists, names):
        if not isinstance(lst, (list, tuple)) or not lst:
            raise NKIError(op, f"nki.collectives.{op}: {name} must be a non-empty list of per-channel tensor lists")
        for c, inner in enumerate(lst):
            if not isinstance(inner, (list, tuple)) or len(inner) != 1:
                raise NKIError(op, f"nki.collectives.{op}: {name}[{c}] must be a list of exactly one tensor "
                               "(coalesced collective communication is not supported)")
    n = len(lists[0])
    if any(len(lst) != n for lst in lists):
        raise NKIError(op, f"nki.collectives.{op}: " + ", ".join(f"{nm} has {len(lst)}" for lst, nm in
                                                                 zip(lists, names)) + " channels")
    ids = list(channel_ids)
    if ids != list(range(len(ids))) or len(ids) != n:
        raise NKIError(op, f"nki.collectives.{op}: channel_ids={ids}; they must be consecutive integers from 0, "
                       f"one per channel ({n})")
    if n > _MAX_CHANNELS:
        raise NKIError(op, f"nki.collectives.{op}: {n} channels; at most {_MAX_CHANNELS} are available")
    mems = {_memory(inner[0], op, f"{name}[{c}][0]") for lst, name in zip(lists, names) for c, inner in enumerate(lst)}
    if len(mems) > 1:
        raise NKIError("operand memory", f"nki.collectives.{op}: tensors are on both HBM and SBUF; all must be on "
                       "HBM or all on SBUF")
    return n


def _ring(replica_group, op):
    w, rank, rl = _rank_list(replica_group, op)
    k, n = rl.index(rank), len(rl)
    return w, rank, rl, rl[(k - 1) % n]


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=[0], priority=None,
                                name=None):
    """Ring exchange: each rank sends ``srcs_by_channel[c][0]`` to its successor in its rank-list
    and receives its predecessor's into ``dsts_by_channel[c][0]``, for every channel ``c``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.collective_permute_implicit.html)"""
    op = "collective_permute_implicit"
    n = _channels(op, (srcs_by_channel, dsts_by_channel), ("srcs_by_channel", "dsts_by_channel"), channel_ids)
    w, rank, rl, pred = _ring(replica_group, op)
    posts = _meet(w, rank, rl, op, (n,), [_lnc.read_values(ch[0]) for ch in srcs_by_channel])
    for c in range(n):
        _write(dsts_by_channel[c][0], posts[pred][c], op)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=[0], priority=None, name=None):
    """Ring exchange with a reduction: each rank computes ``op(srcs0[c][0], srcs1[c][0])``, sends it
    to its successor and receives its predecessor's result into ``dsts_by_channel[c][0]``.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.collective_permute_implicit_reduce.html)"""
    what = "collective_permute_implicit_reduce"
    n = _channels(what, (srcs0_by_channel, srcs1_by_channel, dsts_by_channel),
                  ("srcs0_by_channel", "srcs1_by_channel", "dsts_by_channel"), channel_ids)
    fn = _reducer(op, what)
    w, rank, rl, pred = _ring(replica_group, what)
    mine = []
    for c in range(n):
        a, b = _lnc.read_values(srcs0_by_channel[c][0]), _lnc.read_values(srcs1_by_channel[c][0])
        if a.shape != b.shape:
            raise NKIError("shape", f"nki.collectives.{what}: channel {c} reduces srcs0 {a.shape} with srcs1 {b.shape}")
        mine.append(_reduce(fn, [a, b]))
    posts = _meet(w, rank, rl, what, (n, fn.__name__), mine)
    for c in range(n):
        _write(dsts_by_channel[c][0], posts[pred][c], what)


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0, num_channels=1,
                                                           name=None):
    """The rank whose data a ring algorithm processes at step ``iteration_id``: the rank itself
    at step 0, then its predecessors around its rank-list. Returns a scalar register.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.collective_permute_implicit_current_processing_rank_id.html)"""
    op = "collective_permute_implicit_current_processing_rank_id"
    if not 1 <= int(num_channels) <= _MAX_CHANNELS or not 0 <= int(channel_id) < int(num_channels):
        raise NKIError(op, f"nki.collectives.{op}: channel_id={channel_id}, num_channels={num_channels}; need "
                       f"0 <= channel_id < num_channels <= {_MAX_CHANNELS}")
    _, rank, rl = _rank_list(replica_group, op)
    return VirtualRegister(rl[(rl.index(rank) - int(iteration_id)) % len(rl)])


def rank_id(name=None):
    """The rank of the running program within the collective world, as a scalar register
    (``nki.collectives.rank_id``; 0 outside :func:`~nki_kernels.simulator.ranks.simulate_ranks`)."""
    _, rank, _ = _me("rank_id")
    return VirtualRegister(rank)


def _metadata(metadata_tensor, op, rows_needed, n):
    meta = _lnc.read_values(metadata_tensor)
    if meta.dtype != np.uint32:
        raise NKIError("dtype", f"nki.collectives.{op}: metadata_tensor is {meta.dtype}; it must be uint32")
    if meta.ndim == 3 and meta.shape[0] == 1:
        meta = meta[0]
    if meta.ndim != 2 or meta.shape[0] < rows_needed or meta.shape[1] != n:
        raise NKIError("shape", f"nki.collectives.{op}: metadata_tensor has shape {tuple(np.shape(meta))}; it needs "
                       f"{rows_needed} rows and one column per rank of the rank-list ({n})")
    return meta.astype(np.int64)


def _v_rows(recv_counts_known, has_rdispls):
    return 4 if has_rdispls else (3 if recv_counts_known else 2)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Variable-length all-to-all over flat element buffers (HBM, one tensor each).

    ``metadata_tensor`` (uint32, one column per rank of the rank-list, in rank-list order):
    row 0 send counts, row 1 send displacements, row 2 receive counts (checked when
    ``recv_counts_known``), row 3 receive displacements (used when ``has_rdispls``; else the
    chunks land back to back in rank-list order). Rank j's chunk for rank k is
    ``src.flat[sdispl[k] : sdispl[k] + scount[k]]``. Elements of ``dst`` nothing lands on
    keep their values.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.all_to_all_v.html)"""
    op = "all_to_all_v"
    _tensor_lists(op, srcs, dsts, hbm_only=True, exactly_one=True)
    w, rank, rl = _rank_list(replica_group, op)
    meta = _metadata(metadata_tensor, op, _v_rows(recv_counts_known, has_rdispls), len(rl))
    _all_to_all_v_run(op, srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls)


def _all_to_all_v_run(op, srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls):
    """all_to_all_v's exchange with its metadata ``meta`` already read (``srcs`` read now)."""
    k = rl.index(rank)
    posts = _meet(w, rank, rl, op, (bool(recv_counts_known), bool(has_rdispls)),
                  (_lnc.read_values(srcs[0]).reshape(-1), meta[0], meta[1]))
    size, pieces, at = int(np.prod(dsts[0].shape)), [], 0
    for j, r in enumerate(rl):
        src, counts, displs = posts[r]
        cnt, start = int(counts[k]), int(displs[k])
        if start + cnt > src.size:
            raise NKIError("bounds", f"nki.collectives.{op}: rank {r} sends elements {start}:{start + cnt} of a "
                           f"{src.size}-element source to rank {rank}")
        if recv_counts_known and int(meta[2][j]) != cnt:
            raise NKIError(op, f"nki.collectives.{op}: rank {rank} expects {int(meta[2][j])} elements from rank {r} "
                           f"(metadata row 2) but rank {r} sends {cnt}")
        dst_at = int(meta[3][j]) if has_rdispls else at
        if dst_at + cnt > size:
            raise NKIError("bounds", f"nki.collectives.{op}: {cnt} elements from rank {r} land at {dst_at}, past "
                           f"the {size}-element destination of rank {rank}")
        pieces.append((dst_at, src[start:start + cnt]))
        at = dst_at + cnt
    _write_flat(dsts[0], pieces)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Variable-length all-gather over flat element buffers (HBM, one tensor each).

    Each rank contributes one chunk ``src.flat[sdispl : sdispl + scount]`` (the first column
    of metadata rows 0 and 1) to every rank of its rank-list. ``dst`` is split into one equal
    slot per rank of the rank-list; the chunk of the rank-list's s-th rank lands at the start
    of slot s, or at receive displacement ``metadata[3][s]`` when ``has_rdispls``. With
    ``recv_counts_known``, ``metadata[2][s]`` must equal that rank's count.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.collectives.all_gather_v.html)"""
    op = "all_gather_v"
    _tensor_lists(op, srcs, dsts, hbm_only=True, exactly_one=True)
    w, rank, rl = _rank_list(replica_group, op)
    meta = _metadata(metadata_tensor, op, _v_rows(recv_counts_known, has_rdispls), len(rl))
    _all_gather_v_run(op, srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls)


def _all_gather_v_run(op, srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls):
    """all_gather_v's exchange with its metadata ``meta`` already read (``srcs`` read now)."""
    n = len(rl)
    src = _lnc.read_values(srcs[0]).reshape(-1)
    cnt, start = int(meta[0][0]), int(meta[1][0])
    if start + cnt > src.size:
        raise NKIError("bounds", f"nki.collectives.{op}: rank {rank} sends elements {start}:{start + cnt} of a "
                       f"{src.size}-element source")
    posts = _meet(w, rank, rl, op, (bool(recv_counts_known), bool(has_rdispls)), src[start:start + cnt])
    size, pieces = int(np.prod(dsts[0].shape)), []
    if size % n:
        raise NKIError("shape", f"nki.collectives.{op}: dst has {size} elements, not a multiple of the {n} "
                       "ranks of the rank-list")
    slot = size // n
    for s, r in enumerate(rl):
        chunk = posts[r]
        if recv_counts_known and int(meta[2][s]) != chunk.size:
            raise NKIError(op, f"nki.collectives.{op}: rank {rank} expects {int(meta[2][s])} elements from rank {r} "
                           f"(metadata row 2) but rank {r} sends {chunk.size}")
        at = int(meta[3][s]) if has_rdispls else s * slot
        if (not has_rdispls and chunk.size > slot) or at + chunk.size > size:
            raise NKIError("bounds", f"nki.collectives.{op}: {chunk.size} elements from rank {r} do not fit at "
                           f"{at} (slots of {slot} of a {size}-element destination)")
        pieces.append((at, chunk))
    _write_flat(dsts[0], pieces)


# ---------------------------------------------------------------------------
# prepare / trigger splits of the variable-length collectives (NKI 0.7.0)
# ---------------------------------------------------------------------------
# "A plain all_to_all_v() couples its metadata setup with the execution of the a2a-v collective ...
# Splitting it into prepare + trigger lets the setup run ahead". "prepare reads metadata_tensor, which must
# already hold valid data. It does not read the contents of srcs/dsts, so it may be issued before they are
# filled." "Each prepare must be followed by exactly one [trigger], with no other prepare in between.
# Prepares share a single slot, so an intervening prepare of any kind is rejected." The trigger "reuses the
# buffers, replica group, and every other argument from the paired [prepare], so it takes only the prepare
# instruction" and "is the phase that reads srcs and writes dsts" (nki.collectives.all_to_all_v_prepare /
# _trigger, all_gather_v_prepare / _trigger pages, Neuron 2.33). The slot belongs to the running program
# (one per rank); a prepare still waiting for its trigger when the kernel returns is refused
# (:meth:`VCollectivePrepare.check_triggered`, called as the program finishes).
class VCollectivePrepare:
    """The handle a ``*_v_prepare`` call returns: pass it to the paired ``*_v_trigger``."""

    __slots__ = ("op", "args", "triggered", "where", "name")

    def __init__(self, op, args, where, name):
        self.op, self.args, self.where, self.name = op, args, where, name
        self.triggered = False

    def check_triggered(self) -> None:
        """Called as the program finishes: a prepare never triggered is refused (exactly one trigger each)."""
        if not self.triggered:
            raise NKIError("prepare/trigger", f"nki.collectives.{self.op}_prepare made at "
                           f"{_diag.fmt_where(self.where)} is never triggered: each prepare must be followed by "
                           f"exactly one {self.op}_trigger")

    def __repr__(self):
        return f"NkiInstruction(nki.collectives.{self.op}_prepare{'' if self.name is None else ' ' + repr(self.name)})"


def _prepare(op, srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls, name):
    what = f"{op}_prepare"
    prog = current_or_none()
    pending = prog.v_prepare if prog is not None else None
    if pending is not None and not pending.triggered:
        raise NKIError("prepare/trigger", f"nki.collectives.{what}: the {pending.op}_prepare made at "
                       f"{_diag.fmt_where(pending.where)} has not been triggered; prepares share a single slot, so "
                       f"each prepare must be followed by exactly one trigger with no other prepare in between")
    _tensor_lists(what, srcs, dsts, hbm_only=True, exactly_one=True)
    w, rank, rl = _rank_list(replica_group, what)
    meta = _metadata(metadata_tensor, what, _v_rows(recv_counts_known, has_rdispls), len(rl)).copy()  # read now
    handle = VCollectivePrepare(op, (srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls), _diag.where(),
                                name)
    if prog is not None:
        prog.v_prepare = handle
    return handle


def _trigger(op, prepare_instr, run):
    what = f"{op}_trigger"
    if not isinstance(prepare_instr, VCollectivePrepare):
        raise NKIError("prepare/trigger", f"nki.collectives.{what}: prepare_instr must be the instruction "
                       f"nki.collectives.{op}_prepare returned, got {type(prepare_instr).__name__}")
    if prepare_instr.op != op:
        raise NKIError("prepare/trigger", f"nki.collectives.{what}: prepare_instr came from "
                       f"nki.collectives.{prepare_instr.op}_prepare; pair it with {prepare_instr.op}_trigger")
    if prepare_instr.triggered:
        raise NKIError("prepare/trigger", f"nki.collectives.{what}: the {op}_prepare made at "
                       f"{_diag.fmt_where(prepare_instr.where)} was already triggered; each prepare is followed by "
                       "exactly one trigger")
    prepare_instr.triggered = True
    srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls = prepare_instr.args
    run(op, srcs, dsts, w, rank, rl, meta, recv_counts_known, has_rdispls)


def all_to_all_v_prepare(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                         priority=None, name=None):
    """Begin a split :func:`all_to_all_v`: checks the operands and reads ``metadata_tensor`` now (not
    ``srcs`` / ``dsts``); returns the handle :func:`all_to_all_v_trigger` takes."""
    return _prepare("all_to_all_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                    name)


def all_to_all_v_trigger(prepare_instr, name=None):
    """Complete a split :func:`all_to_all_v`: the exchange, reading ``srcs`` and writing ``dsts`` now with the
    metadata its prepare read."""
    _trigger("all_to_all_v", prepare_instr, _all_to_all_v_run)


def all_gather_v_prepare(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                         priority=None, name=None):
    """Begin a split :func:`all_gather_v` (see :func:`all_to_all_v_prepare`)."""
    return _prepare("all_gather_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                    name)


def all_gather_v_trigger(prepare_instr, name=None):
    """Complete a split :func:`all_gather_v` (see :func:`all_to_all_v_trigger`)."""
    _trigger("all_gather_v", prepare_instr, _all_gather_v_run)


__all__ = ["ReplicaGroup", "all_gather", "all_gather_v", "all_gather_v_prepare", "all_gather_v_trigger",
           "all_reduce", "all_to_all", "all_to_all_v", "all_to_all_v_prepare", "all_to_all_v_trigger",
           "collective_permute", "collective_permute_implicit", "collective_permute_implicit_current_processing_rank_id",
           "collective_permute_implicit_reduce", "rank_id", "reduce_scatter", "rg_partition_op"]
