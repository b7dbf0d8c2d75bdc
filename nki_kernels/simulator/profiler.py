"""Simulator-side profile of a kernel launch: DMA traffic, instructions per engine, on-chip memory
peaks, and an estimated Trainium time from the engine-level timing model (:mod:`.timing`, issue 31).

``profile(kernel[grid], *arrays)`` runs the launch once with a :class:`Recorder` installed in
:mod:`.recording` and returns a :class:`Report`; ``nki.benchmark`` kernels attach the same report
after each call, and ``benchmark_result.nc_latency.get_latency_percentile(p)`` is the model's time
in microseconds. This is a *model*, not a measurement: see ``docs/timing_model.md`` for its
constants (each cites its page), its schedule and what it ignores.

How the running simulator feeds the model
-----------------------------------------
* Every engine instruction and DMA calls a hook of :mod:`.recording`; a declared instruction
  (:mod:`.instructions.registry`) also tells the recorder its name and arguments
  (:meth:`Recorder.begin` / :meth:`Recorder.end`), so its operands, destination and engine are
  known exactly. A first-generation functional op (``nl.add``, ``nl.load`` ...) only reports its
  engine and result; its operands are the tiles the memory model saw it read in the instruction's
  slot (``ProgramMemory.ws_recs``: reads before the hook, the result written after it).
* ``psum[...] += nisa.nc_matmul(...)`` is one Tensor instruction that accumulates into the PSUM
  tile (the memory model marks the matmul's result as moved into the accumulator): the ``+=`` is
  merged into the matmul, not counted again.
* A tile is known by its allocation (the memory model's record; a block of a block-dimension
  tensor is a region of its tensor, a view of a tile covers its partitions and bytes). The
  compiler reuses SBUF/PSUM bytes, which the NumPy simulator does not: :class:`_Allocator` stands
  in for it (each tile lives from the first to the last instruction that touches it; tiles with
  the same first writer stand for one allocation site, and a freed region of theirs is reused
  once ``SBUF_SPARE`` others wait, i.e. loop-local SBUF tiles are double-buffered, PSUM tiles
  rotate over the 8 banks; beyond the capacity the oldest free region is reused), so a load into
  a reused buffer waits for its last reader (WAR).
* Tiles placed by direct allocation (``ncc.sbuf.alloc`` ..., ``address=``) are known by their
  partitions and bytes: they alias where the kernel made them alias.
* The events of all programs of the launch are scheduled on one NeuronCore of the simulated version
  (:func:`.instructions.target.get_nc_version`, ``NKI_SIM_NC_VERSION``) after the launch.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import threading

import numpy as np

from . import recording as _prof_hooks
from .context import current_or_none
from .core import Access, HBMTensor, Tile
from .indexing import full_mask
from .instructions.registry import REGISTRY
from .instructions.target import get_nc_version
from .launch import Kernel, Launch, _bind, _unwrap, normalize_grid, run_programs
from .memory import CAPACITY, NAMES
from .timing import Instr, Scheduler, core
from .timing.report import _fmt_s, _kib

ENGINES = ("Tensor", "Vector", "Scalar", "GpSimd", "DMA")
COMPUTE = ENGINES[:4]
SBUF_SPARE = 1  # free SBUF regions of one size kept back before one is reused: double buffering
_SIM_DIR = os.path.dirname(os.path.abspath(__file__))

# Parameters of declared instructions that the instruction writes (the others are read).
_WRITES = frozenset({"dst", "reduce_res", "dst_idx", "dst_scale", "val_dst", "idx_dst"})

# First-generation functional ops (by their nl / nisa name) and the cost rule of .timing.costs
# that prices them; names not here use their engine's default rule.
_TT_OPS = {"add", "subtract", "multiply", "maximum", "minimum", "divide", "power", "equal", "not_equal",
           "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
           "bitwise_and", "bitwise_or", "bitwise_xor", "mod", "fmod", "invert", "left_shift", "right_shift"}
_REDUCE = {"sum": "add", "max": "max", "min": "min", "mean": "add", "prod": "multiply", "all": "min",
           "any": "max", "var": "add", "tensor_reduce": "", "argmax": "max", "argmin": "min"}
_COPY = {"copy", "tensor_copy", "cast", "broadcast_to", "full", "ones", "zeros_like"}
_MEMSET = {"zeros", "memset", "ones", "full", "ndarray"}


# ----------------------------------------------------------------------------------------------------------
# operands
# ----------------------------------------------------------------------------------------------------------
def _space(buf_index) -> str:
    return "psum" if buf_index == 1 else "sbuf"


def _root(tile):
    while tile._parent is not None:
        tile = tile._parent
    return tile


def _view_box(view, root):
    """``((partition_lo, partition_hi), (byte_lo, byte_hi))`` that ``view`` covers in the partitions of
    ``root`` (a plain, row-major tile whose axis 0 is the partition axis), or ``None`` (all of it) when
    the view is not a simple strided view of it."""
    try:
        v, r = view._raw(), root._raw()
    except Exception:  # (a view reaching outside its tile: its reads raise later, not here)
        return None
    if root.pdim or r.ndim < 1 or not r.flags.c_contiguous or v.ndim < 1 or r.size == 0 or v.size == 0:
        return None
    if any(s < 0 for s in v.strides):
        return None
    rlo = r.__array_interface__["data"][0]
    vlo = v.__array_interface__["data"][0]
    ps = r.strides[0]
    off = vlo - rlo
    if off < 0 or off >= r.nbytes or ps <= 0:
        return None
    p0, b0 = divmod(off, ps)
    extent = sum((n - 1) * s for n, s in zip(v.shape[1:], v.strides[1:])) + v.itemsize
    p1 = p0 + ((v.shape[0] - 1) * v.strides[0]) // ps + 1 if v.strides[0] else p0 + 1
    if b0 + extent > ps:  # (a view reaching over a partition's end: say all of the partitions' bytes)
        return ((p0, max(p1, p0 + 1)), (0, ps))
    return ((p0, max(p1, p0 + 1)), (b0, b0 + extent))


def _rec_operand(rec, box=None):
    """The operand ``(space, unit, box)`` of a memory-model record (see :class:`_Allocator`)."""
    space = _space(rec.buf)
    if rec.place is not None:  # direct allocation: the bytes themselves
        part, n, lo, hi = rec.place
        return (space, ("placed", space), ((part, part + n), (lo, hi)))
    if rec.root is not None:  # a block of a block-dimension tensor: that block of its tensor
        flat = 0
        for b, n in zip(rec.key, rec.root.shape):
            flat = flat * int(n) + int(b)
        return (space, rec.root, ("block", flat))
    return (space, rec, ("blocks",) if rec.blocks is not None else box)


def _nblocks(rec) -> int:
    """Blocks of a block-dimension tensor's record (its block axes: those of a block used so far, else
    the axes before the partition axis of its shape)."""
    key = next(iter(rec.blocks), None) if rec.blocks else None
    nb = len(key) if key is not None else 0
    if key is None:
        shape = tuple(rec.shape)
        lead = [i for i, n in enumerate(shape[:-1]) if n <= 128]
        nb = max(lead, key=lambda i: (shape[i], -i)) if lead else 0
    return math.prod(int(n) for n in rec.shape[:nb]) if nb else 1


def _tile_operand(tile):
    """The operand of a tile argument of a declared instruction (a view: its partitions and bytes)."""
    rec = tile._mem
    root = _root(tile)
    if rec is None:  # (a tile made outside any program: known by its root object)
        return ("psum" if tile.buffer.name == "psum" else "sbuf", ("tile", id(root)), None)
    box = None
    if tile is not root and rec is root._mem and rec.place is None and rec.root is None:
        box = _view_box(tile, root)
    return _rec_operand(rec, box)


def _hbm_box(access):
    """Element ranges per dimension that an HBM access touches (its bounding box), or ``None``."""
    idx = getattr(access, "index", None)
    basic = getattr(idx, "basic", None)
    if basic is None or idx.perm is not None:
        return None
    shape = access.tensor.shape
    out = []
    for i, n in enumerate(shape):
        k = basic[i] if i < len(basic) else slice(None)
        if isinstance(k, slice):
            a, b, s = k.indices(n)
            if s < 0:
                a, b = b + 1, a + 1
            out.append((a, max(a, b)))
        elif isinstance(k, (int, np.integer)):
            k = int(k) + n if int(k) < 0 else int(k)
            out.append((k, k + 1))
        else:
            return None
    return tuple(out)


def _hbm_operand(x):
    """``("hbm", tensor, box)`` of an HBM tensor or access, and the tensor."""
    t = x.tensor if isinstance(x, Access) else x
    box = _hbm_box(x) if isinstance(x, Access) else None
    return ("hbm", (t.name, id(t)), box), t


def _partitions(shape) -> int:
    """Partition-axis size of a result without a declared partition axis: axis 0, or for a block
    tensor's result (three or more axes) the largest leading axis of at most 128 (its partition axis)."""
    if not shape:
        return 1
    if len(shape) <= 2:
        return max(1, int(shape[0]))
    lead = [int(s) for s in shape[:-1] if s <= 128]
    return max(lead) if lead else max(1, int(shape[0]))


def _per_partition(shape, pdim=None) -> int:
    n = math.prod(int(s) for s in shape) if shape else 1
    p = int(shape[pdim]) if pdim is not None and len(shape) > pdim else _partitions(shape)
    return max(1, n // max(1, p))


def _tile_geometry(tile):
    """``(partitions, elements per partition)`` of a tile (its block axes in the free size)."""
    shape = tuple(tile.shape)
    pdim = tile.pdim if tile.pdim < len(shape) else 0
    return (int(shape[pdim]) if shape else 1), _per_partition(shape, pdim)


def _gen1_name():
    """The first-generation API function (``add``, ``load`` ...) whose hook is running: the outermost
    frame inside the simulator package (a generated op's own name from its closure)."""
    f = sys._getframe(3)
    name = None
    for _ in range(10):
        if f is None or not f.f_code.co_filename.startswith(_SIM_DIR):
            break
        co = f.f_code.co_name
        if co in ("op", "iop"):
            loc = f.f_locals
            co = loc.get("name") or loc.get("opname") or co
            if co == "iop":
                co = "iadd"
        if not co.startswith(("_", "<")):
            name = co
        f = f.f_back
    return name or "instr"


# ----------------------------------------------------------------------------------------------------------
# the allocator that stands in for the compiler's
# ----------------------------------------------------------------------------------------------------------
class _Allocator:
    """Gives each SBUF/PSUM allocation of the launch a *region* (an ident of the timing model). Tiles
    are grouped by *role*, what first writes them (the loads of one HBM tensor, the results of one op),
    which stands for the allocation site of a loop body: a region of the same role and size freed
    earlier is reused once ``spare`` others wait (SBUF: 1, double buffering; PSUM: as many as the 8
    banks hold), and when the memory is full the oldest free region of any role is reused. A reused
    region makes the new tile's writer wait for the old one's last reader (WAR). Capacity is counted
    in bytes per partition of the simulated NeuronCore."""

    def __init__(self, hw, sbuf_spare=SBUF_SPARE):
        self.cap = {"sbuf": int(hw.sbuf_partition_bytes.value), "psum": int(hw.psum_partition_bytes.value)}
        self.spare = {"sbuf": sbuf_spare, "psum": 1 << 30}
        self.used = {"sbuf": 0, "psum": 0}  # bytes per partition of every region made
        self.free = {"sbuf": {}, "psum": {}}  # (role, size) -> [region, ...] oldest first
        self.order = {"sbuf": [], "psum": []}  # free regions, oldest first: (region, size)
        self.size = {}
        self.pool = {}  # region -> its (role, size) pool
        self.n = 0
        self.spilled = 0  # allocations made beyond the capacity (the compiler would spill)

    def take(self, space, nbytes, role=None):
        """A region for a new allocation of ``nbytes`` per partition whose first writer is ``role``."""
        key = (role, nbytes)
        pool = self.free[space].get(key)
        if pool and len(pool) > self.spare[space]:
            return self._reuse(space, pool.pop(0))
        if self.used[space] + nbytes <= self.cap[space]:
            self.n += 1
            self.used[space] += nbytes
            self.size[self.n] = nbytes
            self.pool[self.n] = key
            return self.n
        if pool:
            return self._reuse(space, pool.pop(0))
        order = self.order[space]
        if order:  # the oldest free region of another size takes the new tile
            reg = order[0]
            self.free[space][self.pool[reg]].remove(reg)
            self.used[space] += nbytes - self.size[reg]
            self.size[reg] = nbytes
            self.pool[reg] = key
            return self._reuse(space, reg)
        self.spilled += 1
        self.n += 1
        self.size[self.n] = nbytes
        self.pool[self.n] = key
        return self.n

    def _reuse(self, space, reg):
        self.order[space].remove(reg)
        return reg

    def give(self, space, reg):
        """Region ``reg`` is free again (its tile's last instruction has been issued)."""
        self.free[space].setdefault(self.pool[reg], []).append(reg)
        self.order[space].append(reg)


# ----------------------------------------------------------------------------------------------------------
# the recorder
# ----------------------------------------------------------------------------------------------------------
class _Event:
    """One recorded instruction before it is scheduled: ``kind`` ``"c"`` (compute) or ``"d"`` (DMA)."""

    __slots__ = ("kind", "engine", "name", "label", "prog", "slot", "reads", "writes", "info", "lst", "n0",
                 "hbm", "declared")

    def __init__(self, kind, engine, name, label, prog, slot, info):
        self.kind, self.engine, self.name, self.label = kind, engine, name, label
        self.prog, self.slot, self.info = prog, slot, info
        self.reads, self.writes = [], []
        self.lst, self.n0 = None, 0
        self.hbm = None
        self.declared = False


class _ProgState:
    __slots__ = ("prog", "events", "pending", "deferred")

    def __init__(self, prog):
        self.prog = prog
        self.events = []
        self.pending = None  # the last event, whose result the memory model may still be adding
        self.deferred = None  # the operand of the last deferred op's result (a store may compute it)


class Recorder:
    """Receives the hooks of :mod:`.recording` during a launch and turns them into timing-model events
    (see the module docstring); :meth:`finish` schedules them and fills the :class:`Report`."""

    def __init__(self, report, version=None, sbuf_spare=SBUF_SPARE):
        self.r = report
        self.hw = core(version if version is not None else int(getattr(get_nc_version(), "value", 3)))
        self.sbuf_spare = sbuf_spare
        self.states = {}  # id(program) -> _ProgState, in launch order
        # [name, engine, args, kwargs, used, program] of the declared instruction running now, per thread
        # (a launch's core workers share its recorder)
        self._local = threading.local()
        self.merged = 0  # `psum += nc_matmul(...)` additions folded into their matmul
        self.orphans = []  # events outside any program (nothing to order them by but time)

    # -- hooks ----------------------------------------------------------------------------------------
    def begin(self, name, engine, args, kwargs) -> None:
        """A declared instruction ``name`` (its registry engine, or ``None``) starts with these
        arguments; the engine hooks it calls belong to it until :meth:`end`."""
        # (the program is kept: a standalone instruction computes through its functional form with no
        # program current, so the memory model does not count those inner hooks)
        self._local.cur = [name, engine, args, kwargs, False, current_or_none()]

    def end(self) -> None:
        """The instruction begun last has returned (one that called no hook, e.g. an SBUF-to-SBUF
        ``dma_copy``, is recorded here from its arguments)."""
        cur = getattr(self._local, "cur", None)
        self._local.cur = None
        if cur is None or cur[4] or cur[1] is None:
            return
        name, engine = cur[0], cur[1]
        if engine not in ENGINES:
            return
        st, slot = self._state()
        ev = _Event("d" if engine == "DMA" else "c", engine, name, name, st.prog if st else None, slot, {})
        self._from_args(ev, name, cur[2], cur[3])
        if engine == "DMA":
            self._dma_size_from_tiles(ev)
        self._push(st, ev)

    def instruction(self, engine, out) -> None:
        """One compute instruction on ``engine`` producing ``out`` (values, or an object with ``.shape``)."""
        engine = engine if engine in COMPUTE else "GpSimd"  # (Sync and unknown engines: GpSimd's default cost)
        st, slot = self._state()
        shape = tuple(np.shape(out)) if not hasattr(out, "shape") else tuple(out.shape)
        cur = getattr(self._local, "cur", None)
        if cur is not None and not cur[4] and cur[1] is not None:
            cur[4] = True
            name = cur[0]
            ev = _Event("c", engine, name, name, st.prog if st else None, slot, {"shape": shape})
            ev.declared = True
            self._from_args(ev, name, cur[2], cur[3])
            ev.info["dtype_out"] = getattr(out, "dtype", None)
            self._push(st, ev)
            return
        else:
            # a first-generation op: its operands come from the memory model (a functional form of a
            # declared instruction, begun without an engine, names itself; its arguments hold no dst)
            label = cur[0] if cur is not None and cur[1] is None else _gen1_name()
            if st is not None and engine == "Tensor" and self._merge_accumulate(st, slot):
                return
            ev = _Event("c", engine, label, label, st.prog if st else None, slot,
                        {"shape": shape, "dtype_out": getattr(out, "dtype", None)})
            # an element-wise op that defers its values (nl_math: counted where it is issued) may be
            # computed straight into HBM by a store that then reads no tile: remember it for that store
            ev.info["deferred"] = sys._getframe(2).f_code.co_name in ("_deferred", "op")
        self._capture(st, ev, slot)
        self._push(st, ev)

    def dma(self, tensor, data, direction, access, mask) -> None:
        """One DMA of the elements of ``access`` (of HBM ``tensor``) selected by ``mask``."""
        st, slot = self._state()
        out_shape = access.index.out_shape
        m = full_mask(mask, out_shape) if mask is not None else None
        n = math.prod(out_shape) if m is None else int(np.count_nonzero(m))
        nbytes = n * tensor.dtype.itemsize
        if direction == "read":
            self.r.hbm_read_bytes += nbytes
        else:
            self.r.hbm_write_bytes += nbytes
        cur = getattr(self._local, "cur", None)
        if cur is not None and cur[1] is None:
            cur = None
        hop = ("hbm", (tensor.name, id(tensor)), _hbm_box(access))
        info = {"nbytes": nbytes, "rows": _partitions(out_shape) if len(out_shape) else 1, "tensor": tensor.name,
                "direction": direction, "chunk": self._chunk(access, tensor)}
        if cur is not None and not cur[4]:
            cur[4] = True
            ev = _Event("d", "DMA", cur[0], cur[0], st.prog if st else None, slot, info)
            ev.declared = True
            self._from_args(ev, cur[0], cur[2], cur[3])
            kw = cur[3]
            if kw.get("dst_rmw_op") is not None:
                info["op"] = "accumulate"
            dge = kw.get("dge_mode")
            if dge is not None and "hw" in str(getattr(dge, "name", dge)):
                info["dge"] = "hwdge"
            _add_hbm(ev, hop, direction)
            self._push(st, ev)
            return
        else:
            # (nl.load / nl.store call the hook themselves: their own frame names them, no walk)
            label = sys._getframe(2).f_code.co_name
            if label.startswith("_") or label in ("load_batched", "store_batched"):
                label = _gen1_name()
            ev = _Event("d", "DMA", "dma_transpose" if "transpose" in label else "dma_copy", label,
                        st.prog if st else None, slot, info)
        _add_hbm(ev, hop, direction)
        self._capture(st, ev, slot)
        self._push(st, ev)

    # -- helpers --------------------------------------------------------------------------------------
    def _state(self):
        """The running program's state and the slot of the instruction whose hook runs (the memory
        model counted it already; inside a declared instruction computing with no program current it
        has not: the slot is the next one)."""
        p = current_or_none()
        counted = p is not None
        cur = getattr(self._local, "cur", None) if p is None else None
        if cur is not None:
            p = cur[5]
        if p is None:
            return None, 0
        st = self.states.get(id(p))
        if st is None:
            st = self.states[id(p)] = _ProgState(p)
        return st, p.mem.ic - 1 if counted else p.mem.ic

    @staticmethod
    def _chunk(access, tensor):
        """Contiguous bytes per row of an HBM access (for the report's small-buffer count)."""
        idx = access.index
        isz = tensor.dtype.itemsize
        basic = idx.basic
        if basic is None or idx.perm is not None or not idx.out_shape:
            return isz
        last = basic[len(tensor.shape) - 1] if len(basic) >= len(tensor.shape) else slice(None)
        if isinstance(last, slice) and (last.step in (None, 1)):
            return int(idx.out_shape[-1]) * isz
        return isz

    def _capture(self, st, ev, slot):
        """Hold the memory model's list of the tiles touched in the instruction's slot: the ones there
        now were read (or, for a load, written) before the hook; the ones added until the next hook
        are the result (see :meth:`_finalize`)."""
        if st is None:
            return
        m = st.prog.mem
        if m.ws_c < slot:
            m.close(slot)  # (what the slot's first touch would do: start its list now, to keep it)
        if m.ws_c == slot:
            ev.lst, ev.n0 = m.ws_recs, len(m.ws_recs)

    def _push(self, st, ev):
        if st is None:
            self._finalize(None, ev)
            self.orphans.append(ev)
            return
        if st.pending is not None:
            self._finalize(st, st.pending)
        st.pending = ev
        st.events.append(ev)

    def _merge_accumulate(self, st, slot) -> bool:
        """``acc += <result of the previous Tensor instruction>``: the matmul accumulated into ``acc``
        (the memory model moved its result there); fold the ``+=`` into it."""
        prev = st.pending
        if prev is None or prev.engine != "Tensor" or prev.slot != slot - 1 or prev.lst is None:
            return False
        if not any(getattr(r, "moved", -1) == slot for r in prev.lst[prev.n0:]):
            return False
        prev.info["accumulate"] = True
        self.merged += 1
        return True

    def _from_args(self, ev, name, args, kwargs):
        """Reads and writes of a declared instruction from its arguments."""
        spec = REGISTRY.get(name)
        params = _params(spec) if spec is not None else ()
        items = list(zip(params, args)) + list(kwargs.items())
        tiles = {}
        for pname, v in items:
            vals = v if isinstance(v, (list, tuple)) else (v,)
            for x in vals:
                if isinstance(x, Tile):
                    op = _tile_operand(x)
                    (ev.writes if pname in _WRITES else ev.reads).append(op)
                    tiles.setdefault(pname, x)
                elif isinstance(x, (Access, HBMTensor)):
                    op, t = _hbm_operand(x)
                    (ev.writes if pname in _WRITES else ev.reads).append(op)
                    ev.info.setdefault("tensor", t.name)
        if kwargs.get("accumulate") or kwargs.get("dst_rmw_op") is not None:
            ev.reads.extend(o for o in ev.writes if o not in ev.reads)
        ev.info["tiles"] = tiles
        op = kwargs.get("op") or kwargs.get("op0")
        if op is not None:
            ev.info["op"] = getattr(op, "__name__", None) or str(getattr(op, "name", op))
        if name == "memset":
            v = kwargs.get("value", args[1] if len(args) > 1 else None)
            if isinstance(v, (int, float)) and v == 0:
                ev.info["op"] = "zero"

    def _dma_size_from_tiles(self, ev):
        """Size of a DMA that called no DMA hook (on-chip to on-chip): its destination tile's bytes."""
        t = ev.info.get("tiles", {}).get("dst") or next(iter(ev.info.get("tiles", {}).values()), None)
        if t is None:
            ev.info.update(nbytes=0, rows=1, chunk=0)
            return
        p, f = _tile_geometry(t)
        ev.info.update(nbytes=p * f * t.dtype.itemsize, rows=p, chunk=f * t.dtype.itemsize)

    def _finalize(self, st, ev):
        """Complete ``ev``'s operands from the memory model's list of its slot (first-generation ops)."""
        lst, n0 = ev.lst, ev.n0
        ev.lst = None
        if ev.declared or lst is None:
            return
        if ev.kind == "d":
            onchip = [r for r in lst if r.moved < 0]  # (a load's own tile moved into `t[...] =`'s: t)
            if ev.info["direction"] == "read":
                ev.writes.extend(_rec_operand(r) for r in onchip)
            else:
                reads = [_rec_operand(r) for r in lst[:n0]]
                if not reads and st is not None and st.deferred is not None:
                    reads = [st.deferred]  # a deferred value computed straight into HBM by this store
                ev.reads.extend(reads)
        else:
            reads = [r for r in lst[:n0]]
            writes = [r for r in lst[n0:] if r.moved < 0]
            if ev.info.get("accumulate"):
                # `acc += matmul`: the accumulator is in the list after the hook, read and written
                writes = [r for r in lst[n0:] if r.moved < 0 and r not in reads]
            ev.reads.extend(_rec_operand(r) for r in reads)
            if writes:
                ev.writes.extend(_rec_operand(r) for r in writes)
            elif reads:  # no new tile: an in-place update (`t += x`, `t[...] = op(t, ...)`) of its first operand
                ev.writes.append(ev.reads[0])
            ev.info["read_recs"] = reads
            if ev.info.get("deferred") and writes and st is not None:
                st.deferred = ev.writes[0]

    # -- scheduling -----------------------------------------------------------------------------------
    def finish(self):
        """Schedule the launch's events on the timing model and fill in the report."""
        for st in self.states.values():
            if st.pending is not None:
                self._finalize(st, st.pending)
                st.pending = None
        r = self.r
        res, slots, alloc = self.schedule(self.hw)
        r.timing = res
        r._recorder = self
        r.version = self.hw.version
        r.neuroncore = self.hw.name
        r.spilled_allocations = alloc.spilled
        r.merged_accumulations = self.merged
        r.estimated_s = res.total_s
        r.busy_s = {e: res.busy_s.get(e, 0.0) for e in ENGINES}
        r.instructions = {e: res.count.get(e, 0) for e in ENGINES}
        names = res._lanes()
        for i, (ev, start) in enumerate(slots):
            ins = res.events[i]
            shape = ev.info.get("shape")
            what = (f"{ev.label} {ev.info.get('tensor', '')} {ins.nbytes} B" if ev.kind == "d"
                    else f"{ev.label} {shape}")
            r.events.append((ins.engine, names[i], what, ev.prog.pid if ev.prog is not None else (), res.start[i],
                             res.end[i] - res.start[i]))
        for st in self.states.values():
            p = st.prog
            r.sbuf_peak = max(r.sbuf_peak, p.sbuf_peak)
            r.psum_peak = max(r.psum_peak, p.psum_peak)
        times = {}
        for ev, start in slots:
            if ev.prog is not None:
                times.setdefault(id(ev.prog), []).append((ev.slot, start))
        for st in self.states.values():
            p = st.prog
            if p.mem.curve is not None:
                r.occupancy.append((p.pid, p.mem.curve, times.get(id(p), [])))

    def events(self) -> list:
        """The recorded events of the launch, programs in launch order."""
        return [ev for st in self.states.values() for ev in st.events] + self.orphans

    def schedule(self, hw):
        """Schedule the recorded events on NeuronCore ``hw``: ``(Result, [(event, start)], allocator)``."""
        sched = Scheduler(hw)
        alloc = _Allocator(hw, self.sbuf_spare)
        events = self.events()
        # each allocation lives from the first to the last event that names it
        last = {}
        for i, ev in enumerate(events):
            for o in ev.reads + ev.writes:
                if not isinstance(o[1], tuple):
                    last[id(o[1])] = i
        region = {}  # id(unit) -> ident
        units = {}  # keep the units alive while their ids are keys
        slots = []
        for i, ev in enumerate(events):
            ins = self._instr(ev, alloc, region, units)
            start, _ = sched.add(ins)
            slots.append((ev, start))
            for o in ev.reads + ev.writes:
                u = o[1]
                if last.get(id(u)) == i and id(u) in region and o[0] != "hbm":
                    alloc.give(o[0], region.pop(id(u)))
                    last.pop(id(u), None)
        return sched.result(), slots, alloc

    @staticmethod
    def _keys(o, alloc, region, units, role):
        """The timing model's buffer keys of operand ``o``. Each block of a block-dimension tensor is
        a buffer of its own (its blocks are disjoint: the scheduler then checks one entry, not every
        block's), so the whole tensor is all of its blocks."""
        space, unit, box = o
        if space == "hbm" or isinstance(unit, tuple):
            return ((space, unit, box),)
        ident = region.get(id(unit))
        if ident is None:
            nbytes = int(getattr(unit, "nbytes", 0) or 0)
            ident = region[id(unit)] = alloc.take(space, nbytes, role)
            units[id(unit)] = unit
        if type(box) is tuple and box and box[0] == "block":
            return ((space, (ident, box[1]), None),)
        if box == ("blocks",):
            return tuple((space, (ident, b), None) for b in range(_nblocks(unit)))
        return ((space, ident, box),)

    def _instr(self, ev, alloc, region, units):
        """The timing model's :class:`Instr` of a recorded event."""
        keys = self._keys
        role = (ev.kind, ev.label, ev.info.get("tensor"))  # (the allocation site a loop body repeats)
        reads = tuple(k for o in ev.reads for k in keys(o, alloc, region, units, role))
        writes = tuple(k for o in ev.writes for k in keys(o, alloc, region, units, role))
        info = ev.info
        pid = ev.prog.pid if ev.prog is not None else ()
        if ev.kind == "d":
            return Instr(ev.name, "DMA", partitions=max(1, min(128, int(info.get("rows", 1)))),
                         free_elems=0, nbytes=int(info.get("nbytes", 0)), chunk_bytes=int(info.get("chunk", 0)),
                         reads=reads, writes=writes, queue=info.get("tensor") or "dma", program=pid,
                         op=info.get("op", ""), dge=info.get("dge", ""), label=ev.label)
        tiles = info.get("tiles")
        if tiles is not None:
            return self._declared_instr(ev, reads, writes, pid)
        shape = info.get("shape") or (1,)
        dtype_out = info.get("dtype_out")
        read_recs = info.get("read_recs", [])
        dtype_in = max((r.dtype for r in read_recs), key=_itemsize, default=dtype_out)
        label = ev.label
        name, op = label, ""
        parts = _partitions(shape)
        free = _per_partition(shape)
        kw = {}
        if ev.engine == "Tensor":
            if len(read_recs) >= 2 or label in ("nc_matmul", "matmul"):
                name = "nc_matmul"
                kw = {"stationary_free": int(shape[0]) if shape else 128,
                      "moving_free": _per_partition(shape, 0)}
                free = kw["moving_free"]
                parts = 128
            else:
                name = "nc_transpose"
        elif label in _REDUCE:
            name, op = "tensor_reduce", _REDUCE[label]
            free = max([free] + [max(1, r.nbytes // max(1, np.dtype(r.dtype).itemsize)) for r in read_recs])
        elif label in _TT_OPS and ev.engine == "Vector":
            # a [P, 1] column operand is a per-partition scalar: tensor_scalar streams one tile
            tiles = [r for r in read_recs if r.nbytes > np.dtype(r.dtype).itemsize]
            name, op = ("tensor_tensor" if len(tiles) >= 2 else "tensor_scalar"), label
            read_recs = tiles or read_recs
        elif label in _COPY and ev.engine != "GpSimd":
            name = "tensor_copy"
        elif label in _MEMSET or (not read_recs and ev.engine in ("Vector", "GpSimd")):
            name, op = "memset", ("zero" if label in ("zeros", "ndarray") else "")
        elif ev.engine == "Scalar":
            name = "activation"
        return Instr(name, ev.engine, dtype_in=_dname(dtype_in), dtype_out=_dname(dtype_out), partitions=parts,
                     free_elems=free, reads=reads, writes=writes, program=pid, op=op,
                     n_inputs=max(1, len(read_recs)), label=label, **kw)

    def _declared_instr(self, ev, reads, writes, pid):
        tiles = ev.info["tiles"]
        name = ev.name
        ins = [t for p, t in tiles.items() if p not in _WRITES]
        outs = [t for p, t in tiles.items() if p in _WRITES]
        geo = [_tile_geometry(t) for t in ins + outs]
        parts = max((g[0] for g in geo), default=128)
        free = max((g[1] for g in geo), default=1)
        dtype_in = max((t.dtype for t in ins), key=_itemsize, default=None)
        dtype_out = outs[0].dtype if outs else ev.info.get("dtype_out")
        kw = {}
        if ev.engine == "Tensor" and name in ("nc_matmul", "nc_matmul_mx") and "stationary" in tiles:
            kw["stationary_free"] = _tile_geometry(tiles["stationary"])[1]
            kw["moving_free"] = free = _tile_geometry(tiles["moving"])[1] if "moving" in tiles else free
        elif ev.engine == "Tensor" and name == "nc_transpose":
            name = "nc_transpose"
        if ins:
            free = max(_tile_geometry(t)[1] for t in ins) if name != "nc_matmul" else free
        op = ev.info.get("op", "")
        return Instr(name, ev.engine, dtype_in=_dname(dtype_in or dtype_out), dtype_out=_dname(dtype_out),
                     partitions=parts, free_elems=free, reads=reads, writes=writes, program=pid, op=_op_name(op),
                     n_inputs=max(1, len(ins)), label=name, **kw)


def _add_hbm(ev, hop, direction):
    ev.hbm = hop
    side = ev.reads if direction == "read" else ev.writes
    if hop not in side:
        side.append(hop)


_DNAMES = {}


def _itemsize(dtype) -> int:
    return getattr(dtype, "itemsize", None) or np.dtype(dtype).itemsize



def _dname(dtype) -> str:
    name = _DNAMES.get(dtype)  # (once per dtype: np.dtype() on every instruction costs)
    if name is None:
        try:
            name = np.dtype(dtype).name if dtype is not None else "float32"
        except TypeError:
            name = str(dtype)
        _DNAMES[dtype] = name
    return name


def _op_name(op) -> str:
    s = str(op).lower()
    for k in ("subtract", "multiply", "add", "maximum", "minimum", "max", "min"):
        if k in s:
            return k
    return s


_PARAMS = {}


def _params(spec):
    """Parameter names of a declared instruction, in order (cached)."""
    p = _PARAMS.get(spec.name)
    if p is None:
        try:
            p = tuple(inspect.signature(inspect.unwrap(spec.run)).parameters)
        except (TypeError, ValueError):
            p = ()
        _PARAMS[spec.name] = p
    return p


# ----------------------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------------------
class Report:
    """Profile of one launch: traffic, instructions, memory peaks and the timing model's schedule.

    Figures: ``estimated_s`` (the model's time), ``busy_s`` / :attr:`utilisation` per engine (``DMA``:
    the mean over the 16 DMA engines), :attr:`bounding_engine` (``bottleneck``), :meth:`critical_path`,
    :attr:`dma` (transfers, bytes per transfer, transfers under the efficient size), :meth:`advice`;
    ``timing`` is the model's :class:`.timing.Result`. Pictures: :meth:`perfetto` (a trace with one
    track per engine and DMA queue), :meth:`plot_timeline` (PNG), :meth:`plot_memory` (PNG)."""

    def __init__(self, name, grid):
        self.kernel = name
        self.grid = tuple(grid)
        self.programs = 0
        self.hbm_read_bytes = 0
        self.hbm_write_bytes = 0
        self.min_bytes = 0
        self.instructions = {e: 0 for e in ENGINES}
        self.busy_s = {e: 0.0 for e in ENGINES}
        self.sbuf_peak = 0
        self.psum_peak = 0
        self.estimated_s = 0.0
        self.events = []  # (engine, track, name, program, start_s, dur_s)
        # per program, in launch order: (pid, live SBUF/PSUM bytes per partition at each
        # instruction slot [2, slots], [(slot, model start time)] of its recorded events)
        self.occupancy = []
        self.outputs = None
        self.timing = None
        self.version = None
        self.neuroncore = ""
        self.spilled_allocations = 0
        self.merged_accumulations = 0
        self._recorder = None

    # -- figures --------------------------------------------------------------------------------------
    @property
    def hbm_bytes(self) -> int:
        """Bytes moved between HBM and on-chip memory by DMA (read + written)."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def traffic_ratio(self) -> float:
        """DMA bytes over the minimum (every input byte read once, every output byte written once)."""
        return self.hbm_bytes / self.min_bytes if self.min_bytes else float("nan")

    @property
    def estimated_us(self) -> float:
        """The model's time in microseconds (what ``nc_latency.get_latency_percentile`` returns)."""
        return self.estimated_s * 1e6

    @property
    def utilisation(self) -> dict:
        """Busy time over the estimated time, per engine (``DMA``: mean over the 16 DMA engines)."""
        return self.timing.utilisation if self.timing is not None else {e: 0.0 for e in ENGINES}

    @property
    def roofline_s(self) -> float:
        """Lower bound: the busiest engine's busy time (DMA: one DMA engine's mean)."""
        return max(self.busy_s.values())

    @property
    def bounding_engine(self) -> str:
        """The engine with the highest utilisation: what bounds the kernel while the others overlap it."""
        return self.timing.bounding_engine if self.timing is not None and self.timing.total_s else \
            max((v, k) for k, v in self.busy_s.items())[1]

    @property
    def bottleneck(self) -> str:
        """Same as :attr:`bounding_engine` (the older name)."""
        return self.bounding_engine

    @property
    def dma(self):
        """DMA efficiency (:class:`.timing.DmaStats`): transfers, bytes, ``bytes_per_transfer``,
        ``small_transfers`` (under 32 KiB), ``fixed_share`` ..."""
        return self.timing.dma if self.timing is not None else None

    def critical_path(self) -> list:
        """Indices (into :attr:`events`) of the chain of instructions that set the estimated time."""
        return self.timing.critical_path() if self.timing is not None else []

    def critical_path_summary(self) -> dict:
        """Time on the critical path by track and its links by kind (see :class:`.timing.Result`)."""
        return self.timing.critical_path_summary() if self.timing is not None else {}

    def advice(self) -> list:
        """A few lines of advice from the figures (bounding engine, DMA sizes, narrow matmuls ...)."""
        out = list(self.timing.advice()) if self.timing is not None else []
        if self.spilled_allocations:
            out.append(f"{self.spilled_allocations:,} tiles did not fit the SBUF/PSUM capacity with the others live: "
                       "the compiler would spill them to HBM (not costed)")
        return out

    def as_dict(self) -> dict:
        """The report's figures as plain Python values."""
        d = {
            "kernel": self.kernel, "grid": list(self.grid), "programs": self.programs,
            "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
            "min_bytes": self.min_bytes, "traffic_ratio": self.traffic_ratio,
            "instructions": dict(self.instructions), "busy_s": dict(self.busy_s),
            "sbuf_peak_bytes_per_partition": self.sbuf_peak, "psum_peak_bytes_per_partition": self.psum_peak,
            "estimated_s": self.estimated_s, "roofline_s": self.roofline_s, "bottleneck": self.bottleneck,
            "neuroncore": self.neuroncore, "utilisation": dict(self.utilisation),
            "bounding_engine": self.bounding_engine, "advice": self.advice(),
        }
        if self.timing is not None:
            t = self.timing.as_dict()
            d["dma"] = t["dma"]
            d["critical_path"] = t["critical_path"]
        return d

    def retime(self, version):
        """The same launch's instructions scheduled on another NeuronCore version (2/3/4, ``"trn1"``
        ...): the timing model's :class:`.timing.Result` (the simulation is not run again)."""
        if self._recorder is None:
            raise ValueError("this report holds no recorded instructions")
        return self._recorder.schedule(core(version))[0]

    # -- text -----------------------------------------------------------------------------------------
    def rows(self):
        """``(name, value)`` rows for printing."""
        yield "kernel", f"{self.kernel} grid={self.grid}"
        yield "NeuronCore (timing model)", self.neuroncore
        yield "programs", str(self.programs)
        yield "HBM read (DMA)", f"{self.hbm_read_bytes:,} B"
        yield "HBM written (DMA)", f"{self.hbm_write_bytes:,} B"
        yield "minimum (inputs + outputs once)", f"{self.min_bytes:,} B"
        yield "HBM traffic ratio", f"{self.traffic_ratio:.2f}"
        u = self.utilisation
        for e in ENGINES:
            busy = f"busy {_fmt_s(self.busy_s[e])}" + (" per DMA engine" if e == "DMA" else "")
            yield f"{e} instructions", f"{self.instructions[e]:,}  ({busy}, {u.get(e, 0.0):.0%})"
        # live bytes over the capacity: the compiler's allocator spills to HBM (slower, not an error)
        spill = " (over capacity: spills)"
        hw = self.timing.hw if self.timing is not None else None
        cap = (int(hw.sbuf_partition_bytes.value), int(hw.psum_partition_bytes.value)) if hw else CAPACITY
        yield "peak SBUF per partition (live)", f"{self.sbuf_peak:,} B of {cap[0]:,}" + (
            spill if self.sbuf_peak > cap[0] else "")
        yield "peak PSUM per partition (live)", f"{self.psum_peak:,} B of {cap[1]:,}" + (
            spill if self.psum_peak > cap[1] else "")
        d = self.dma
        if d is not None and d.instructions:
            yield "DMA transfers", (f"{d.transfers:,} of {_kib(d.bytes_per_transfer)} on average; "
                                    f"{d.small_transfers:,} under 32 KiB; fixed cost {d.fixed_share:.0%} of DMA time")
        cp = self.critical_path_summary().get("time_by_track", {})
        if cp:
            top = sorted(cp.items(), key=lambda kv: -kv[1])[:3]
            yield "critical path", ", ".join(f"{k} {_fmt_s(v)}" for k, v in top)
        yield "estimated time (timing model)", f"{_fmt_s(self.estimated_s)} ({self.bounding_engine}-bound)"
        yield "roofline lower bound", f"{_fmt_s(self.roofline_s)}"
        for i, a in enumerate(self.advice()):
            yield ("advice" if i == 0 else ""), a

    def __str__(self):
        rows = list(self.rows())
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)

    def summary(self) -> str:
        """The timing model's own summary (per-engine table, DMA efficiency, critical path, advice)."""
        return self.timing.summary() if self.timing is not None else str(self)

    def table(self):
        """The report as a ``rich.table.Table``."""
        from rich.table import Table

        t = Table(title=f"NKI simulator profile: {self.kernel}")
        t.add_column("metric")
        t.add_column("value", justify="right")
        for k, v in self.rows():
            t.add_row(k, v)
        return t

    # -- trace and pictures ---------------------------------------------------------------------------
    def trace(self, max_events=500_000) -> dict:
        """Chrome / Perfetto trace (JSON object format): one track per engine and per DMA queue (as
        neuron-profile shows them), times in us, and counter tracks of the live on-chip bytes."""
        if self.timing is None:
            return {"traceEvents": [], "displayTimeUnit": "ns", "otherData": self.as_dict()}
        tr = self.timing.trace(max_events=max_events)
        ev = tr["traceEvents"]
        ev[0]["args"]["name"] = f"{self.neuroncore} timing model: {self.kernel}"
        for pid, curve, times in self.occupancy:  # Perfetto counter tracks: live on-chip bytes
            for slot, start in times:
                if slot < curve.shape[1]:
                    ev.append({"ph": "C", "name": "on-chip live B/partition", "pid": 1, "ts": start * 1e6,
                               "args": {"SBUF": int(curve[0, slot]), "PSUM": int(curve[1, slot])}})
        tr["otherData"] = self.as_dict()
        return tr

    def write_trace(self, path) -> str:
        """Write :meth:`trace` as JSON to ``path`` (open it in https://ui.perfetto.dev); returns the path."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return str(path)

    perfetto = write_trace

    def plot_timeline(self, path, title=None) -> str:
        """Write a PNG timeline of the schedule (one row per engine and DMA queue); returns the path."""
        if self.timing is None:
            raise ValueError("no schedule to draw")
        return self.timing.plot(path, title=title or (f"{self.kernel} on {self.neuroncore}: "
                                                      f"{_fmt_s(self.estimated_s)}, {self.bounding_engine}-bound"))

    def plot_memory(self, path) -> str:
        """Write a PNG of live SBUF and PSUM bytes per partition over the instruction slots of the
        launch's programs (in launch order), with the capacities; returns the path."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
        start = 0
        for pid, curve, _ in self.occupancy:
            x = np.arange(start, start + curve.shape[1])
            for b, ax in enumerate(axes):
                ax.step(x, curve[b] / 1024, where="post", color="C0" if b == 0 else "C1", linewidth=0.8)
            start += curve.shape[1]
            if len(self.occupancy) <= 64:
                for ax in axes:
                    ax.axvline(start, color="0.85", linewidth=0.5)
        for b, ax in enumerate(axes):
            ax.axhline(CAPACITY[b] / 1024, color="red", linestyle="--", linewidth=0.8, label="capacity")
            ax.set_ylabel(f"{NAMES[b]} live KiB / partition")
            ax.legend(loc="upper right")
        axes[0].set_title(f"On-chip memory: {self.kernel} (grid {self.grid}); peaks SBUF {self.sbuf_peak:,} B, "
                          f"PSUM {self.psum_peak:,} B")
        axes[1].set_xlabel("instruction slot (programs in launch order)")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return str(path)


def _nbytes(x):
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


def profile(kernel, *arrays, grid=None, version=None, sbuf_spare=SBUF_SPARE, **static) -> Report:
    """Run ``kernel[grid](*arrays, **static)`` on the simulator and return its :class:`Report`.

    ``report.outputs`` holds the kernel's results. ``version`` (2/3/4, ``"trn2"`` ...) picks the
    NeuronCore of the timing model; by default the simulated target's
    (:func:`.instructions.target.get_nc_version`). ``sbuf_spare``: free SBUF regions of a size the
    allocator stand-in keeps before reusing one (1: double buffering).
    """
    if isinstance(kernel, Launch):
        kernel, g = kernel.kernel, kernel.grid
        grid = g if grid is None else normalize_grid(grid)
    elif not isinstance(kernel, Kernel):
        kernel = Kernel(getattr(kernel, "func", kernel))
    grid = normalize_grid(grid)
    report = Report(getattr(kernel.func, "__qualname__", str(kernel)), grid)
    rec = Recorder(report, version, sbuf_spare)
    args, kw = _bind(kernel, arrays, static)
    prev = _prof_hooks.recorder()
    _prof_hooks.set_recorder(rec)
    try:
        result, state = run_programs(kernel, grid, args, kw)
    finally:
        _prof_hooks.set_recorder(prev)
    rec.finish()
    report.programs = state.programs
    report.outputs = _unwrap(result, kernel)
    report.min_bytes = sum(_nbytes(a) for a in arrays) + _nbytes(report.outputs)
    return report


class _Latency:
    """``benchmark_result.nc_latency`` of the official API, from the model's estimate."""

    def __init__(self, seconds):
        self.seconds = seconds

    def get_latency_percentile(self, percentile=50):
        """The estimated latency in microseconds (the model has no spread: every percentile)."""
        return self.seconds * 1e6


class _BenchmarkResult:
    def __init__(self, report):
        self.report = report
        self.nc_latency = _Latency(report.estimated_s)


class BenchmarkKernel:
    """``@nki.benchmark`` on the simulator: calling it profiles the launch.

    After a call, ``.report`` (and ``.benchmark_result.report``) is the :class:`Report`;
    ``.benchmark_result.nc_latency.get_latency_percentile(50)`` gives the model's estimate in µs.
    """

    def __init__(self, kernel, grid=(), **options):
        self.kernel = kernel
        self.grid = grid
        self.options = options
        self.report = None
        self.benchmark_result = None

    def __getitem__(self, grid):
        b = BenchmarkKernel(self.kernel, grid, **self.options)
        b._parent = self
        return b

    def __call__(self, *arrays, **static):
        rep = profile(Launch(self.kernel, normalize_grid(self.grid)), *arrays, **static)
        for target in (self, getattr(self, "_parent", None)):
            if target is not None:
                target.report = rep
                target.benchmark_result = _BenchmarkResult(rep)
        return rep.outputs
