"""The profiler's recorder: turns the simulator's instruction and DMA hooks (:mod:`.recording`)
into events of the timing model (:mod:`.timing`) and schedules them after the launch.

How the running simulator feeds the model
-----------------------------------------
* Every engine instruction and DMA calls a hook of :mod:`.recording`; a declared instruction
  (:mod:`.instructions.registry`) also tells the recorder its name and arguments
  (:meth:`Recorder.begin` / :meth:`Recorder.end`), so its operands, destination and engine are
  known exactly. A first-generation functional op (``nl.add``, ``nl.load`` ...) only reports its
  engine and result; its operands are the tiles the memory model saw it read in the instruction's
  slot (``ProgramMemory.ws_recs``: reads before the hook, the result written after it), each
  narrowed to the views of it that the op was given (its arguments, or the calling frames' in the
  simulator: ``t[:, j * 128:(j + 1) * 128]`` of a [128, 4096] tile is 128 elements per partition
  for the cost and its partitions and bytes for the dependencies, not the whole tile).
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
import sys
import threading

import numpy as np

from .context import _tls, current_or_none
from .core import Access, HBMTensor, Tile
from .indexing import full_mask
from .instructions.registry import REGISTRY
from .instructions.target import get_nc_version
from .profile_allocator import SBUF_SPARE, _Allocator
from .profile_operands import (
    _SIM_DIR,
    _access_geometry,
    _arg_tiles,
    _chunk_bytes,
    _gen1_call,
    _hbm_operand,
    _nblocks,
    _partitions,
    _per_partition,
    _read_operands,
    _rec_operand,
    _tile_geometry,
    _tile_operand,
    _view_reads,
)
from . import scheduling as _scheduling
from .profile_report import ENGINES
from .timing import Instr, Scheduler, core

COMPUTE = ENGINES[:4]

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
# the recorder
# ----------------------------------------------------------------------------------------------------------
class _Event:
    """One recorded instruction before it is scheduled: ``kind`` ``"c"`` (compute) or ``"d"`` (DMA)."""

    __slots__ = ("kind", "engine", "name", "label", "prog", "slot", "reads", "writes", "info", "lst", "n0",
                 "hbm", "declared", "ordinal")

    def __init__(self, kind, engine, name, label, prog, slot, info):
        self.kind, self.engine, self.name, self.label = kind, engine, name, label
        self.prog, self.slot, self.info = prog, slot, info
        self.reads, self.writes = [], []
        self.lst, self.n0 = None, 0
        self.hbm = None
        self.declared = False
        self.ordinal = None  # the declared instruction's number in its program (scheduling edges), if any


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
    def begin(self, name, engine, args, kwargs, ordinal=None) -> None:
        """A declared instruction ``name`` (its registry engine, or ``None``) starts with these
        arguments (``ordinal``: its number for the program's scheduling edges, :mod:`.scheduling`);
        the engine hooks it calls belong to it until :meth:`end`."""
        # (the program is kept: a standalone instruction computes through its functional form with no
        # program current, so the memory model does not count those inner hooks)
        self._local.cur = [name, engine, args, kwargs, False, current_or_none(), ordinal]

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
        ev.ordinal = cur[6]  # (the instruction has ended: _push no longer sees it as running)
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
            if st is not None and engine == "Tensor" and self._merge_accumulate(st, slot):
                return
            f = sys._getframe(2)
            if cur is not None and cur[1] is None:
                label, tiles = cur[0], _arg_tiles(list(cur[2]) + list(cur[3].values()), [])
            else:
                label, tiles = _gen1_call(f, [])
            # an element-wise op that defers its values (nl_math: counted where it is issued) may be
            # computed straight into HBM by a store that then reads no tile: remember it for that store
            ev = _Event("c", engine, label, label, st.prog if st else None, slot,
                        {"shape": shape, "dtype_out": getattr(out, "dtype", None), "views": _view_reads(tiles),
                         "deferred": f.f_code.co_name in ("_deferred", "op")})
        self._capture(st, ev, slot)
        if ev.label == "tensor_reduce" and not ev.declared:  # (its ALU op picks the cost: BF16 add/max are N/2)
            ev.info["op"] = _reduce_op(sys._getframe(1))
        self._push(st, ev)

    def dma(self, tensor, data, direction, access, mask) -> None:
        """One DMA of the elements of ``access`` (of HBM ``tensor``) selected by ``mask``."""
        st, slot = self._state()
        box, rows, chunk, n = _access_geometry(access, tensor)
        m = full_mask(mask, access.index.out_shape) if mask is not None else None
        if m is not None:
            n = int(np.count_nonzero(m))
        nbytes = n * tensor.dtype.itemsize
        if direction == "read":
            self.r.hbm_read_bytes += nbytes
        else:
            self.r.hbm_write_bytes += nbytes
        cur = getattr(self._local, "cur", None)
        if cur is not None and cur[1] is None:
            cur = None
        hop = ("hbm", (tensor.name, id(tensor)), box)
        info = {"nbytes": nbytes, "rows": rows, "tensor": tensor.name, "direction": direction, "chunk": chunk}
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
            f = sys._getframe(2)
            label = f.f_code.co_name
            named = not label.startswith("_") and label not in ("load_batched", "store_batched")
            if direction == "write":  # (what a store reads: the views of tiles it was given)
                name, tiles = _gen1_call(f, [])
                info["views"] = _view_reads(tiles)
                if not named:
                    label = name
            elif not named:
                label = _gen1_call(f, None)[0]
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
        p = _tls.program
        if p is not None:
            st = self.states.get(id(p))
            if st is None:
                st = self.states[id(p)] = _ProgState(p)
            return st, p.mem.ic - 1
        cur = getattr(self._local, "cur", None)
        p = cur[5] if cur is not None else None
        if p is None:
            return None, 0
        st = self.states.get(id(p))
        if st is None:
            st = self.states[id(p)] = _ProgState(p)
        return st, p.mem.ic

    @staticmethod
    def _chunk(access, tensor):
        """Contiguous bytes per row of an HBM access (for the report's small-buffer count)."""
        return _chunk_bytes(access.index, tensor)

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
        cur = getattr(self._local, "cur", None)
        if cur is not None:
            ev.ordinal = cur[6]
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
        for r in prev.lst[prev.n0:]:
            if getattr(r, "moved", -1) == slot:
                break
        else:
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
            if ev.info["direction"] == "read":  # (a load's own tile moved into `t[...] =`'s: t)
                ev.writes.extend([_rec_operand(r) for r in lst if r.moved < 0])
            else:
                reads = _read_operands(lst[:n0], ev.info.pop("views", ()))[0]
                if not reads and st is not None and st.deferred is not None:
                    reads = [st.deferred]  # a deferred value computed straight into HBM by this store
                ev.reads.extend(reads)
        else:
            reads = lst[:n0]
            if ev.info.get("accumulate"):
                # `acc += matmul`: the accumulator is in the list after the hook, read and written
                writes = [r for r in lst[n0:] if r.moved < 0 and r not in reads]
            else:
                writes = [r for r in lst[n0:] if r.moved < 0]
            ops, read_recs, elems = _read_operands(reads, ev.info.pop("views", ()))
            ev.reads.extend(ops)
            if writes:
                ev.writes.extend([_rec_operand(r) for r in writes])
            elif reads:  # no new tile: an in-place update (`t += x`, `t[...] = op(t, ...)`) of its first operand
                ev.writes.append(_rec_operand(reads[0]))
            ev.info["read_recs"], ev.info["read_elems"] = read_recs, elems
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
        res, starts, alloc = self.schedule(self.hw)
        r.timing = res
        r._recorder = self
        r.version = self.hw.version
        r.neuroncore = self.hw.name
        r.spilled_allocations = alloc.spilled
        r.merged_accumulations = self.merged
        r.estimated_s = res.total_s
        r.busy_s = {e: res.busy_s.get(e, 0.0) for e in ENGINES}
        r.instructions = {e: res.count.get(e, 0) for e in ENGINES}
        for st in self.states.values():
            p = st.prog
            r.sbuf_peak = max(r.sbuf_peak, p.sbuf_peak)
            r.psum_peak = max(r.psum_peak, p.psum_peak)
        # (the trace rows and the occupancy curves' times are built when the report is first asked for them)
        r._pending = (self, res, starts)
        # The report keeps this recorder (retime, the rows above), not the other way round: without the
        # cycle a dropped report frees its events at once, instead of leaving them all to a full garbage
        # collection of the process (one took as long as a fifth of a plain call of the next kernel).
        self.r = None

    def report_rows(self, res, starts):
        """``(events, occupancy)`` of the :class:`Report` (see its attributes) from the schedule ``res``
        of this recorder's events and their start times ``starts``."""
        events = self.events()
        names = res._lanes()
        rows = []
        whats = {}  # (the same label and shape repeat in every iteration: one string each)
        for i, ev in enumerate(events):
            ins = res.events[i]
            info = ev.info
            if ev.kind == "d":
                key = (ev.label, info.get("tensor", ""), ins.nbytes)
                what = whats.get(key)
                if what is None:
                    what = whats[key] = f"{ev.label} {info.get('tensor', '')} {ins.nbytes} B"
            else:
                key = (ev.label, info.get("shape"))
                what = whats.get(key)
                if what is None:
                    what = whats[key] = f"{ev.label} {info.get('shape')}"
            rows.append((ins.engine, names[i], what, ev.prog.pid if ev.prog is not None else (), res.start[i],
                         res.end[i] - res.start[i]))
        times = {}
        for ev, start in zip(events, starts):
            if ev.prog is not None:
                times.setdefault(id(ev.prog), []).append((ev.slot, start))
        occupancy = []
        for st in self.states.values():
            p = st.prog
            if p.mem.curve is not None:
                occupancy.append((p.pid, p.mem.curve, times.get(id(p), [])))
        return rows, occupancy

    def events(self) -> list:
        """The recorded events of the launch, programs in launch order."""
        return [ev for st in self.states.values() for ev in st.events] + self.orphans

    def schedule(self, hw):
        """Schedule the recorded events on NeuronCore ``hw``: ``(Result, [start of each event], allocator)``."""
        alloc = _Allocator(hw, self.sbuf_spare)
        sched = Scheduler(hw, spilled=alloc.spilled_regions)  # (filled as the allocator runs out of room)
        events = self.events()
        # each allocation lives from the first to the last event that names it
        last = {}
        for i, ev in enumerate(events):
            for o in ev.reads:
                if not isinstance(o[1], tuple):
                    last[id(o[1])] = i
            for o in ev.writes:
                if not isinstance(o[1], tuple):
                    last[id(o[1])] = i
        region = {}  # id(unit) -> ident
        units = {}  # keep the units alive while their ids are keys
        starts = []
        waits = _scheduling.event_waits(events)  # (the kernel's depends_on / no_reorder / with_schedule)
        add, keys_of, instr, give = sched.add, self._keys_of, self._instr, alloc.give
        for i, ev in enumerate(events):
            reads, writes, freed = keys_of(ev, alloc, region, units, last, i)
            ins = instr(ev, reads, writes)
            if waits and i in waits:
                ins.after = waits[i]
            starts.append(add(ins)[0])
            if freed:
                for space, u in freed:  # (the allocations this event is the last to name, in operand order)
                    if u in region:
                        give(space, region.pop(u))
        return sched.result(), starts, alloc

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

    def _keys_of(self, ev, alloc, region, units, last, i):
        """The buffer keys ``(reads, writes)`` of event ``i``'s operands (:meth:`_keys` of each, in order),
        and ``[(space, id(unit))]`` of its on-chip operands whose allocation ``last`` says it names last."""
        out = ([], [])
        freed = []
        for ops, keys in zip((ev.reads, ev.writes), out):
            for o in ops:
                unit = o[1]
                if o[0] == "hbm" or isinstance(unit, tuple):
                    keys.append(o)
                    continue
                u = id(unit)
                if last.get(u) == i:
                    freed.append((o[0], u))
                box = o[2]
                ident = region.get(u)
                if ident is not None and (box is None or (type(box) is tuple and len(box) == 2 and box[0] != "block")):
                    keys.append((o[0], ident, box))  # (the common case: a known allocation, all of it or a box)
                    continue
                # (the allocation site a loop body repeats)
                keys.extend(self._keys(o, alloc, region, units, (ev.kind, ev.label, ev.info.get("tensor"))))
        return tuple(out[0]), tuple(out[1]), freed

    def _instr(self, ev, reads, writes):
        """The timing model's :class:`Instr` of a recorded event whose operands' buffer keys are ``reads``
        and ``writes``."""
        info = ev.info
        pid = ev.prog.pid if ev.prog is not None else ()
        if ev.kind == "d":
            # (a loop's DMAs repeat a few kinds: their fields are derived once per kind)
            key = (ev.name, ev.label, info.get("rows", 1), info.get("nbytes", 0), info.get("chunk", 0),
                   info.get("tensor"), info.get("op", ""), info.get("dge", ""))
            fields = _DMA_FIELDS.get(key)
            if fields is None:
                if len(_DMA_FIELDS) >= 4096:
                    _DMA_FIELDS.clear()
                fields = _DMA_FIELDS[key] = {
                    "name": ev.name, "engine": "DMA", "partitions": max(1, min(128, int(key[2]))), "free_elems": 0,
                    "nbytes": int(key[3]), "chunk_bytes": int(key[4]), "queue": key[5] or "dma", "op": key[6],
                    "dge": key[7], "label": ev.label}
            return Instr(reads=reads, writes=writes, program=pid, **fields)
        if info.get("tiles") is not None:
            return self._declared_instr(ev, reads, writes, pid)
        read_recs = info.get("read_recs", [])
        # (a loop's events repeat a few kinds: their fields are derived once per kind)
        key = (ev.engine, ev.label, info.get("shape"), info.get("dtype_out"), info.get("op", ""),
               tuple([r.dtype for r in read_recs]), tuple(info.get("read_elems", ())))
        fields = _FIELDS.get(key)
        if fields is None:
            if len(_FIELDS) >= 4096:
                _FIELDS.clear()
            fields = _FIELDS[key] = _compute_fields(ev.engine, ev.label, info)
        return Instr(reads=reads, writes=writes, program=pid, **fields)

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


# (engine, label, shape, dtype out, op, dtypes read, elements read per operand) -> Instr fields
_FIELDS = {}
# (name, label, rows, bytes, contiguous bytes, tensor, op, DGE) of a DMA event -> Instr fields
_DMA_FIELDS = {}


def _compute_fields(engine, label, info) -> dict:
    """The :class:`Instr` fields (but its operands and program) of a first-generation compute event:
    its instruction and cost inputs from what the op produced and read."""
    shape = info.get("shape") or (1,)
    dtype_out = info.get("dtype_out")
    read_recs = info.get("read_recs", [])
    elems = info.get("read_elems", [])  # (per read operand: elements per partition of what it read)
    dtype_in = max((r.dtype for r in read_recs), key=_itemsize, default=dtype_out)
    name, op = label, ""
    parts = _partitions(shape)
    free = _per_partition(shape)
    kw = {}
    if engine == "Tensor":
        if len(read_recs) >= 2 or label in ("nc_matmul", "matmul"):
            name = "nc_matmul"
            kw = {"stationary_free": int(shape[0]) if shape else 128,
                  "moving_free": _per_partition(shape, 0)}
            free = kw["moving_free"]
            parts = 128
        else:
            name = "nc_transpose"
    elif label in _REDUCE:
        name, op = "tensor_reduce", _REDUCE[label] or info.get("op", "")
        free = max([free] + elems)
    elif label in _TT_OPS and engine == "Vector":
        # a [P, 1] column operand is a per-partition scalar: tensor_scalar streams one tile
        tiles = [r for r, n in zip(read_recs, elems) if n > 1]
        name, op = ("tensor_tensor" if len(tiles) >= 2 else "tensor_scalar"), label
        read_recs = tiles or read_recs
    elif label in _COPY and engine != "GpSimd":
        name = "tensor_copy"
    elif label in _MEMSET or (not read_recs and engine in ("Vector", "GpSimd")):
        name, op = "memset", ("zero" if label in ("zeros", "ndarray") else "")
    elif engine == "Scalar":
        name = "activation"
    return {"name": name, "engine": engine, "dtype_in": _dname(dtype_in), "dtype_out": _dname(dtype_out),
            "partitions": parts, "free_elems": free, "op": op, "n_inputs": max(1, len(read_recs)), "label": label, **kw}


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


def _reduce_op(f) -> str:
    """The ALU op of the first-generation ``nisa.tensor_reduce`` running in frame ``f`` or a caller (its
    ``op`` argument, as :func:`_op_name` names it; ``""`` if not found)."""
    for _ in range(12):
        if f is None or not f.f_code.co_filename.startswith(_SIM_DIR):
            break
        if f.f_code.co_name == "tensor_reduce" and "op" in f.f_locals:
            op = f.f_locals["op"]
            return _op_name(getattr(op, "__name__", None) or op)
        f = f.f_back
    return ""


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
