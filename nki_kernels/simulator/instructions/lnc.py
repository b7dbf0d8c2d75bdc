"""The instructions between the logical cores of a launch (LNC=2): ``nisa.sendrecv``,
``nisa.sendrecv_compute`` and ``nisa.core_barrier``, and the helpers the collectives share
(:func:`read_values`, :func:`reduction`).

Each blocks its core's worker (:mod:`..cores`) until its peers make the matching call; a peer that
never does is reported as a deadlock. ``core_barrier`` on shared HBM orders the cores' accesses to
it for the race check (:mod:`..lnc_checks`).
"""

from __future__ import annotations

import numpy as np

from .. import diagnostics as _diag
from .. import dtypes as dt
from .. import recording as _prof
from ..core import Access, HBMTensor, Tile, private_hbm, sbuf
from ..cores import current_worker
from ..errors import NKIError
from ..lnc_checks import memory_id
from ..op_functions import np_function as _np_function
from ..timing import costs as _costs  # (each instruction's cost, declared with it)
from ..transfers import store as _store
from . import registry as _registry
from . import target as _target


class _Message:
    __slots__ = ("data", "shape", "dtype", "where", "taken")

    def __init__(self, data, where):
        self.data, self.shape, self.dtype, self.where, self.taken = data, data.shape, data.dtype, where, False


def _rank_arg(x, name, op, ncores):
    try:
        v = int(x)
    except (TypeError, ValueError):
        raise NKIError(op, f"nisa.{op}: {name} must be an integer core rank, got {type(x).__name__}") from None
    if isinstance(x, bool) or v not in (0, 1):
        raise NKIError(op, f"nisa.{op}: {name}={x!r}; the cores of a logical NeuronCore are ranks 0 and 1")
    if v >= ncores:
        raise NKIError(op, f"nisa.{op}: {name}={v} but this launch runs on {ncores} logical core(s); launch the "
                       "kernel as kernel[2](...) (LNC=2) to exchange data between two cores")
    return v


def _sbuf_tile(x, name, op):
    if isinstance(x, (HBMTensor, Access)):
        raise NKIError("operand memory", f"nisa.{op}: {name} is in HBM (shape {tuple(x.shape)}); both src and dst "
                       "must be SBUF tiles")
    if not isinstance(x, Tile):
        raise NKIError("operand type", f"nisa.{op}: {name} must be an SBUF tile, got {type(x).__name__}")
    if x.buffer is not sbuf:
        raise NKIError("operand memory", f"nisa.{op}: {name} (shape {x.shape}) is in {x.buffer.name.upper()}; both "
                       "src and dst must be SBUF tiles")
    return x


_GPSIMD_BYTES = {4: 1024, 2: 512, 1: 256}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Send SBUF tile ``src`` to core ``send_to_rank`` while receiving core ``recv_from_rank``'s
    tile into SBUF tile ``dst`` (``nki.isa.sendrecv``, LNC=2).

    The call returns once this core has received and its own data was received: calls with
    the same ``pipe_id`` meet. ``src`` and ``dst`` have the same shape and dtype, and so must
    the peer's ``src``. A peer that never makes the matching call is reported as a deadlock.
    ``dma_engine`` (earlier releases) selects the transfer mechanism; ``gpsimd_dma`` limits
    the partitions to a multiple of 16 and the bytes per partition (1024 for 32-bit types,
    512 for 16-bit, 256 for 8-bit). ``name`` is accepted and unused.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.sendrecv.html)
    """
    op = "sendrecv"
    w = current_worker("nisa.sendrecv")
    _target.require(op, _target.nc_version.gen3)
    _sbuf_tile(src, "src", op)
    _sbuf_tile(dst, "dst", op)
    if src.dtype != dst.dtype:
        raise NKIError("dtype", f"nisa.sendrecv: src is {src.dtype} and dst is {dst.dtype}; they must have the "
                       "same data type")
    if tuple(src.shape) != tuple(dst.shape):
        raise NKIError("shape", f"nisa.sendrecv: src has shape {src.shape} and dst {dst.shape}; they must have the "
                       "same shape and layout")
    if getattr(dma_engine, "name", dma_engine) == "gpsimd_dma":
        per_part = int(np.prod(src.shape[1:])) * src.dtype.itemsize
        limit = _GPSIMD_BYTES.get(src.dtype.itemsize, 256)
        if src.shape[0] % 16 or per_part > limit:
            raise NKIError(op, f"nisa.sendrecv(dma_engine=gpsimd_dma): tiles of shape {src.shape} {src.dtype} have "
                           f"{src.shape[0]} partitions and {per_part} B per partition; gpsimd_dma needs a multiple "
                           f"of 16 partitions and at most {limit} B per partition for {8 * src.dtype.itemsize}-bit types")
    if isinstance(pipe_id, bool) or not isinstance(pipe_id, (int, np.integer)) or pipe_id < 0:
        raise NKIError(op, f"nisa.sendrecv: pipe_id must be a non-negative integer, got {pipe_id!r}")
    ncores = w.group.cores(w.rank) if w is not None else 1
    to = _rank_arg(send_to_rank, "send_to_rank", op, ncores)
    frm = _rank_arg(recv_from_rank, "recv_from_rank", op, ncores)
    _diag.on_read(src)
    got = _exchange(w, f"nisa.sendrecv(pipe_id={int(pipe_id)})", ("pipe", int(pipe_id)), src, dst, to, frm)
    dst[...] = got
    return None


def _exchange(w, what, channel, src, dst, to, frm):
    """Send a copy of ``src`` to core ``to`` and return what core ``frm`` sends on ``channel``
    (checked against ``dst``'s shape and dtype); returns once both transfers are done."""
    msg = _Message(np.array(src.data, copy=True), _diag.where())
    if w is None:  # one core exchanging with itself
        return msg.data
    g, me, rank = w.group, w.core, w.rank
    inbox = g.mail[(rank, channel, frm, me)]
    with g.cv:
        g.mail[(rank, channel, me, to)].append(msg)
    g.block(w, lambda: bool(inbox), lambda: f"{what} waits for core {frm} to send (recv_from_rank={frm})")
    with g.cv:
        got = inbox.popleft()
        got.taken = True
    if got.shape != tuple(dst.shape) or got.dtype != dst.dtype:
        raise NKIError("shape", f"{what}: core {me} receives into dst {dst.shape} {dst.dtype} at "
                       f"{_diag.fmt_where(msg.where)} but core {frm} sent {got.shape} {got.dtype} at "
                       f"{_diag.fmt_where(got.where)}; the two cores' tiles must match")
    g.block(w, lambda: msg.taken,
            lambda: f"{what} sent to core {to}, which has not received it (no matching call with "
                    f"recv_from_rank={me})")
    return got.data


def sendrecv_compute(src, dst, send_to_rank, recv_from_rank, reduce_op, name=None):
    """Exchange ``src`` with core ``recv_from_rank`` / ``send_to_rank`` like ``nisa.sendrecv`` and
    write ``reduce_op(src, peer's src)`` (``nl.add``, ``nl.maximum`` or ``nl.minimum``, in fp32)
    into ``dst`` (``nki.isa.sendrecv_compute``; LNC degree > 1). ``src`` and ``dst`` are both in
    SBUF or both in private HBM, with the same shape and dtype. ``name`` is accepted and unused.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.sendrecv_compute.html)
    """
    op = "sendrecv_compute"
    w = current_worker(f"nisa.{op}")
    _target.require(op, _target.nc_version.gen3)
    mems = []
    for x, nm in ((src, "src"), (dst, "dst")):
        if isinstance(x, Tile) and x.buffer is sbuf:
            mems.append("SBUF")
        elif isinstance(x, (HBMTensor, Access)) and (x.tensor if isinstance(x, Access) else x).buffer is private_hbm:
            mems.append("private HBM")
        else:
            where = x.buffer.name if isinstance(x, (Tile, HBMTensor, Access)) else type(x).__name__
            raise NKIError("operand memory", f"nisa.{op}: {nm} is in {where}; src and dst must both be in SBUF or "
                           "both in private HBM (shared HBM is not supported)")
    if mems[0] != mems[1]:
        raise NKIError("operand memory", f"nisa.{op}: src is in {mems[0]} and dst in {mems[1]}; they must be in the "
                       "same memory")
    if src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
        raise NKIError("shape", f"nisa.{op}: src {tuple(src.shape)} {src.dtype} and dst {tuple(dst.shape)} {dst.dtype} "
                       "must have the same shape and dtype")
    fn = reduction(reduce_op, f"nisa.{op}")
    ncores = w.group.cores(w.rank) if w is not None else 1
    to = _rank_arg(send_to_rank, "send_to_rank", op, ncores)
    frm = _rank_arg(recv_from_rank, "recv_from_rank", op, ncores)
    mine = read_values(src)
    peer = _exchange(w, f"nisa.{op}", ("compute",), _Held(mine), dst, to, frm)
    f32 = [dt.compute_view(a).astype(np.float32) for a in (mine, peer)]
    out = fn(*f32)
    if isinstance(dst, Tile):
        dst[...] = out
    else:
        _store(dst, dt.cast(out, dst.dtype))
    return None


def reduction(op, what):
    """The NumPy function of a collective reduction ``op``: ``nl.add``, ``nl.minimum`` or ``nl.maximum``."""
    try:
        fn = _np_function(op)
    except NKIError:
        fn = None
    if fn not in (np.add, np.maximum, np.minimum):
        raise NKIError("op", f"{what}: op={op!r}; the reduction must be nl.add, nl.minimum or nl.maximum")
    return fn


def read_values(x):
    """A copy of the values of SBUF tile or HBM tensor/region ``x``, telling the diagnostics."""
    if isinstance(x, Tile):
        _diag.on_read(x)
        return np.array(x.data, copy=True)
    acc = x[...] if isinstance(x, HBMTensor) else x
    vals = np.array(acc.index.read(acc.tensor.data, None, what=acc.tensor.name), copy=True)
    _prof.dma(acc.tensor, vals, "read", acc, None)
    return vals


class _Held:
    """Values already read, in the place of a tile for :func:`_exchange`."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


def core_barrier(data, cores, engine=None, name=None):
    """Wait until every core in ``cores`` reaches its matching barrier (``nki.isa.core_barrier``).

    ``data`` is the shared HBM tensor the cores synchronise on: the race checker treats the
    barrier as ordering the cores' accesses to it (writes before the barrier on one core,
    reads after it on the other are not a race). The page says it "must be data in shared HBM",
    but nki-library's shard-on-I MoE CTE kernel (a Trn2 test of its own suite) passes an SBUF tile
    as a plain synchronisation point, so an on-chip tile is accepted: the cores wait for each
    other, and no HBM access is ordered by it. ``cores`` must be ``(0, 1)`` (or ``(c,)``, a barrier
    of one core with itself) and include the calling core. ``engine`` and ``name`` are accepted
    and unused.
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.core_barrier.html)
    """
    w = current_worker("nisa.core_barrier")
    _target.require("core_barrier", _target.nc_version.gen3)
    if isinstance(data, Tile):
        tensor = None  # a synchronisation point only
    elif not isinstance(data, (HBMTensor, Access)):
        raise NKIError("operand type", f"nisa.core_barrier: data must be a shared HBM tensor (or an on-chip tile), "
                       f"got {type(data).__name__}")
    else:
        tensor = data.tensor if isinstance(data, Access) else data
    if tensor is not None and tensor.buffer is private_hbm:
        raise NKIError("operand memory", f"nisa.core_barrier: data {tensor.name} is in private_hbm; the barrier "
                       "synchronises on shared HBM that several cores access")
    try:
        members = tuple(int(c) for c in cores)
    except TypeError:
        raise NKIError("core_barrier", f"nisa.core_barrier: cores must be a tuple of core ids such as (0, 1), got "
                       f"{cores!r}") from None
    ncores = w.group.cores(w.rank) if w is not None else 1
    me = w.core if w is not None else 0
    if not members or len(set(members)) != len(members) or any(c not in (0, 1) for c in members):
        raise NKIError("core_barrier", f"nisa.core_barrier: cores={cores!r}; only cores=(0, 1) is supported (distinct "
                       "core ids 0 and 1)")
    if any(c >= ncores for c in members):
        raise NKIError("core_barrier", f"nisa.core_barrier(cores={members}) in a launch on {ncores} logical core(s); "
                       "launch the kernel as kernel[2](...) (LNC=2)")
    if me not in members:
        raise NKIError("core_barrier", f"nisa.core_barrier(cores={members}) is called by core {me}, which is not "
                       "one of the cores it synchronises")
    if w is None:
        return None
    g = w.group
    key = (w.rank, frozenset(members))
    with g.cv:
        g.arrivals[key][me] += 1
        n = g.arrivals[key][me]
    arrivals = g.arrivals[key]

    def missing():
        return [c for c in members if arrivals[c] < n]

    g.block(w, lambda: not missing(),
            lambda: f"nisa.core_barrier(cores={members}) #{n} waits for core(s) {missing()} to reach barrier #{n}")
    if tensor is not None:
        w.epochs[memory_id(tensor)] += 1
    return None


# Declared as the instructions that synchronise the cores of a launch (a kernel naming one runs its
# cores as cooperating workers, never vectorised); they keep their own operand checks and run outside
# the instruction wrapper, whose batch guard they do not need.
for _fn in (sendrecv, sendrecv_compute, core_barrier):
    _registry.register(_registry.Spec(_fn.__name__, "Sync", _fn, sync=True, module=__name__, cost=_costs.not_scheduled))

