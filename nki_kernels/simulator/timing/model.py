"""Engine-level timing model of one NeuronCore: a compiler-like schedule of a kernel's instructions.

Input: the kernel's instructions in program order, each an :class:`Instr`. Output: a :class:`Result`
with the estimated time, busy time and utilisation per engine, the critical path, the bounding
engine, DMA efficiency, advice, a Chrome/Perfetto trace and a PNG timeline.

Recorder interface (how the simulator feeds this model)
-------------------------------------------------------
The model is a pure layer (standard library only; matplotlib for the optional PNG) and imports
nothing from the simulator. A recorder makes one :class:`Instr` per executed instruction, in program order, and passes
them to :class:`Scheduler` (``sched.add(instr)`` one at a time, then ``sched.result()``) or to
:func:`simulate` (a whole list). The simplest way to fill one is :meth:`Instr.of`, from what the
instruction registry knows at the call:

``Instr.of(name, engine, inputs, outputs, **extra)``

* ``name``: the ISA instruction name (``"nc_matmul"``, ``"tensor_tensor"``, ``"activation"``,
  ``"tensor_copy"``, ``"memset"``, ``"iota"``, ``"dma_copy"`` ...); its cost is the one declared with
  the instruction in the instruction registry (``@instruction(engine=..., cost=costs.<fn>)``, read
  through :func:`.costs.rule_for`), or the event's own ``cost`` field if it carries one. A name with
  no declaration gets its engine's default, and the result counts it (``Result.default_costed``).
* ``engine``: where it ran: ``"Tensor"``, ``"Vector"``, ``"Scalar"``, ``"GpSimd"`` or ``"DMA"``
  (aliases ``"PE"``, ``"DVE"``, ``"Act"``, ``"Pool"`` are accepted).
* ``inputs`` / ``outputs``: the operand tiles as :class:`Operand` (``shape``, ``dtype``, ``space``
  ``"sbuf"``/``"psum"``/``"hbm"``, ``ident`` = the allocation's identity, ``box`` = the region of
  the allocation it touches, ``partition_axis``). For ``nc_matmul`` the inputs are
  ``[stationary, moving]``; an accumulating ``psum[...] += nc_matmul(...)`` is ONE instruction whose
  output is the PSUM tile (do not record the ``+=`` separately: the accumulation is near-memory).
* ``extra``: ``op`` (ALU op or variant: ``"add"``, ``"zero"`` for memset(0), ``"accumulate"`` for
  DMA read-add-write ...), ``queue`` (DMA queue hint), ``program`` (the program id), ``dge``
  (``"hwdge"`` for hardware-DGE DMAs), ``transfers`` (DMA: transfers if the recorder knows them).

Buffer keys. ``reads`` / ``writes`` hold keys ``(space, ident, box)``: ``ident`` identifies an
allocation (an SBUF/PSUM allocation id, or an HBM tensor's name), ``box`` a region of it as a tuple of
half-open ``(lo, hi)`` intervals (on-chip: ``((partition_lo, partition_hi), (byte_lo, byte_hi))``
within the partition; HBM: element ranges per dimension), or ``None`` for the whole allocation. Two
accesses conflict when their spaces and idents are equal and their boxes intersect. Reusing an
allocation (the allocator handing the same SBUF bytes to the next iteration's tile) is expressed by
reusing its ``ident``: that is what makes the next writer wait for the last reader.

Schedule. Each compute engine runs its instructions in program order; one starts when its engine is
free and its dependencies are met: RAW (what it reads has been written), WAR (a writer waits for the
last reader of the bytes it overwrites) and WAW (and for the last writer), and the kernel's explicit
scheduling edges (``Instr.after``: it starts once each producer has completed). An instruction that waits
on a dependency, or reads what its engine's previous instruction wrote, pays the documented static
overhead. DMA instructions issue in order per queue and split into per-engine transfers (see
:func:`.costs.dma_transfers`) booked on the 16 DMA engines, filling idle gaps; queues overlap each
other and the compute engines. Programs of a launch share the core's engines.

Capacity. PSUM allocations take the 8 PSUM banks in turn, one accumulation group per bank, so a
ninth allocation waits for the last reader of the first's bank (:meth:`Scheduler._bank_keys`).
SBUF allocations named ``spilled`` (they did not fit beside the others live) cost a spill store to
the HBM scratchpad after each write and a reload before the next read (:meth:`Scheduler._spill`).

Every constant comes from :mod:`.hardware` (documented, cited); the formulas from :mod:`.costs`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import costs as _costs
from .boxes import BoxIndex
from .dma import DmaStats, Lane
from .dma import plan as _plan
from .hardware import COMPUTE, NeuronCore, core
from .report import Result

_ENGINES = frozenset(COMPUTE + ("DMA",))
_ENGINE_ALIASES = {"pe": "Tensor", "tensor": "Tensor", "tensore": "Tensor", "dve": "Vector", "vector": "Vector",
                   "vectore": "Vector", "act": "Scalar", "activation": "Scalar", "scalar": "Scalar",
                   "scalare": "Scalar", "pool": "GpSimd", "gpsimd": "GpSimd", "gpsimde": "GpSimd",
                   "dma": "DMA", "sync": "DMA", "sp": "DMA"}


def engine_name(engine) -> str:
    """The canonical engine name (``"Tensor"``, ``"Vector"``, ``"Scalar"``, ``"GpSimd"``, ``"DMA"``)."""
    name = getattr(engine, "name", engine)
    try:
        return _ENGINE_ALIASES[str(name).lower()]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}: one of {COMPUTE + ('DMA',)}") from None


@dataclass(frozen=True)
class Operand:
    """One operand tile as a recorder sees it (see the module docstring).

    ``shape`` includes any block dimensions; ``partition_axis`` says which axis is the partition axis
    (the engine streams the product of the others per partition). ``box`` is the region of the
    allocation ``ident`` it touches (``None``: all of it). ``stride_bytes``: the innermost free-axis
    stride in bytes where it is not unit stride.
    """

    shape: tuple
    dtype: object
    space: str
    ident: object
    box: tuple = None
    partition_axis: int = 0
    contiguous: bool = True
    stride_bytes: int = 0

    @property
    def partitions(self) -> int:
        """Partition-axis size (rows for an HBM operand)."""
        return int(self.shape[self.partition_axis]) if self.shape else 1

    @property
    def per_partition(self) -> int:
        """Elements per partition: the product of every axis but the partition axis."""
        n = 1
        for i, s in enumerate(self.shape):
            if i != self.partition_axis:
                n *= int(s)
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the operand."""
        return self.partitions * self.per_partition * _costs.itemsize(self.dtype)

    @property
    def key(self) -> tuple:
        """Its buffer key ``(space, ident, box)``."""
        return (self.space, self.ident, self.box)


@dataclass(eq=False, slots=True)  # (not frozen: a frozen dataclass's __init__ costs ~3x, once per instruction)
class Instr:
    """One instruction (event) in program order. Fields (defaults suit a full-width BF16 tile):

    ``name``, ``engine``: see the module docstring. ``dtype_in`` / ``dtype_out``: the input dtype (the
    widest input's) and the output dtype. ``partitions``: partition-axis size the engine uses (DMA: rows
    of the on-chip side). ``free_elems``: elements per partition streamed (the widest input, block
    dimensions included, partition axis excluded). ``moving_free`` / ``stationary_free``: matmul
    free sizes. ``n_inputs``: tensor inputs read by the data path. ``reads`` / ``writes``: buffer keys.
    ``nbytes``, ``transfers``, ``chunk_bytes`` (contiguous bytes per DMA buffer), ``queue``, ``dge``:
    DMA. ``program``: the program id. ``op``: ALU op or variant. ``contiguous``: unit stride in the
    innermost free dimension; ``stride_bytes``: that stride in bytes when it is not (over 16 bytes halves
    the SBUF/PSUM access bandwidth). ``label``: the name the trace shows (the API call, e.g. ``nl.add``;
    default ``name``). ``cost``: a cost function ``(instr, hw) -> cycles`` (DMA: ``-> transfers``) that
    replaces the one declared for ``name`` (an event of an instruction the registry does not declare).
    ``after``: indices of earlier events this one waits for besides its data dependencies (the
    kernel's scheduling edges: ``depends_on``, ``no_reorder``, ``with_schedule``).
    """

    name: str
    engine: str
    dtype_in: str = "bfloat16"
    dtype_out: str = "bfloat16"
    partitions: int = 128
    free_elems: int = 1
    moving_free: int = 0
    stationary_free: int = 128
    reads: tuple = ()
    writes: tuple = ()
    nbytes: int = 0
    transfers: int = 0
    queue: object = None
    program: tuple = ()
    op: str = ""
    n_inputs: int = 1
    contiguous: bool = True
    chunk_bytes: int = 0
    dge: str = ""
    stride_bytes: int = 0
    label: str = ""
    cost: object = None
    after: tuple = ()

    @classmethod
    def of(cls, name, engine, inputs=(), outputs=(), **extra) -> Instr:
        """Build an :class:`Instr` from operand tiles (:class:`Operand`); ``extra`` sets any other field."""
        engine = engine_name(engine)
        inputs, outputs = list(inputs), list(outputs)
        kw = {"reads": tuple(o.key for o in inputs), "writes": tuple(o.key for o in outputs),
                  "n_inputs": max(1, sum(1 for o in inputs if o.space != "const"))}
        widest = max(inputs, key=lambda o: _costs.itemsize(o.dtype), default=None)
        if widest is not None:
            kw["dtype_in"] = _costs.dtype_name(widest.dtype)
        if outputs:
            kw["dtype_out"] = _costs.dtype_name(outputs[0].dtype)
        if engine == "DMA":
            src = inputs[0] if inputs else outputs[0]
            dst = outputs[0] if outputs else src
            onchip = next((o for o in (dst, src) if o.space in ("sbuf", "psum")), dst)
            kw.update(partitions=onchip.partitions, free_elems=onchip.per_partition,
                      nbytes=max(src.nbytes, dst.nbytes), contiguous=src.contiguous and dst.contiguous)
            kw["chunk_bytes"] = (onchip.per_partition * _costs.itemsize(onchip.dtype)
                                 if kw["contiguous"] else _costs.itemsize(onchip.dtype))
        else:
            tiles = inputs or outputs
            kw["partitions"] = max(o.partitions for o in tiles) if tiles else 1
            kw["free_elems"] = max((o.per_partition for o in tiles), default=1)
            kw["contiguous"] = all(o.contiguous for o in inputs + outputs)
            kw["stride_bytes"] = max((o.stride_bytes for o in inputs + outputs), default=0)
            if engine == "Tensor" and len(inputs) >= 2:
                kw["stationary_free"] = inputs[0].per_partition
                kw["moving_free"] = inputs[1].per_partition
                kw["free_elems"] = inputs[1].per_partition
        kw.update(extra)
        return cls(name=name, engine=engine, **kw)


# ----------------------------------------------------------------------------------------------------------
# helpers

def _overlap(a, b) -> bool:
    if a is None or b is None or a == b:
        return True
    if len(a) != len(b):
        return True
    if len(a) == 2:  # the common case (partitions x bytes, rows x columns), unrolled
        (a0, a1), (a2, a3) = a
        (b0, b1), (b2, b3) = b
        return a0 < b1 and b0 < a1 and a2 < b3 and b2 < a3
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b))


def _contains(outer, inner) -> bool:
    if outer is None or outer == inner:
        return True
    if inner is None or len(outer) != len(inner):
        return False
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))


_INDEX_AT = 48  # boxes at one location before it is indexed (below, the plain scan is as fast)


class Scheduler:
    """Schedules :class:`Instr` events one at a time (``add``) and builds the :class:`Result`."""

    def __init__(self, version=2, keep_events=True, spilled=()):
        """``version``: the NeuronCore (2/3/4, ``"trn2"`` ...). ``keep_events``: keep the :class:`Instr`
        objects for the result. ``spilled``: idents of SBUF allocations that do not fit the SBUF beside the
        others live (a set the caller may fill while it adds events): each write of one is followed by a
        spill store to HBM and each read after a write by a reload (see :meth:`_spill`)."""
        self.hw: NeuronCore = core(version)
        self.events = []
        self.keep_events = keep_events
        self.start, self.end, self.track, self.pred, self.cause = [], [], [], [], []
        self._free = {e: 0.0 for e in COMPUTE}
        self._last = {e: None for e in COMPUTE}
        self._small = {e: False for e in COMPUTE}  # its last instruction streamed N <= MIN_II elements
        self.busy = {e: 0.0 for e in COMPUTE}
        self.count = {e: 0 for e in COMPUTE + ("DMA",)}
        # (space, ident) -> ({box: its last writer's (end, index)}, {box: its last reader's (end, index)}): one
        # look-up finds both
        self._acc = {}
        self._queues = {}
        self._ports = {"sbuf": (0.0, None), "psum": (0.0, None)}
        n = int(self.hw.dma_engines.value)
        self._lanes = [Lane() for _ in range(n)]
        self._uniform = True
        self.dma = DmaStats()
        self.flags = {"fp32_matmul": 0, "narrow_matmul": 0, "small_free": 0, "few_partitions": 0,
                      "dependency_waits": 0, "psum_zero_folded": 0, "backward_edges": 0}
        self.default_costed = {}  # name -> count: events whose name declares no cost (their engine's default)
        # PSUM banks: an accumulation group lives in one bank, 8 per partition (psum_banks), so the next
        # allocation given a bank waits for the last reader of the one before it there (see _bank_keys)
        self._nbanks = int(self.hw.psum_banks.value)
        self._bank_bytes = int(self.hw.psum_partition_bytes.value) // self._nbanks
        self._bank = {}  # PSUM ident -> its first bank
        self._next_bank = 0
        # spills (see _spill): the idents, the end of each one's last spill store awaiting a reload
        self._spilled = spilled
        self._spill_pending = {}
        self.spills = {"stores": 0, "reloads": 0, "bytes": 0}
        self._rules = {}  # name -> (cost function, declared): the registry's answer, once per name
        self._clock = {e: self.hw.clock(e) for e in COMPUTE}
        # a loop's DMAs repeat a few sizes: each one's split, transfer times and figures are derived once
        # (see _dma); keyed by the fields the documented split and bandwidth read
        self._plans = {}
        self._tracks = {}  # DMA queue -> its track name

    # -- dependencies -------------------------------------------------------------------------------------
    def _bank_keys(self, keys) -> list:
        """The PSUM-bank keys of ``keys``' PSUM accesses. Each PSUM allocation is given banks in turn at
        its first access (as many 2 KiB banks as its first access's bytes reach; ARCH_V2: "8 PSUM banks per
        partition ... TensorE can have up to eight outstanding matmul accumulation groups ... TensorE can
        move onto the next accumulation group without waiting for VectorE/ScalarE to evict previous
        accumulation group results"): with more than 8 allocations in turn, the ninth shares the first's
        bank, and its first write waits for the last reader of the first there (WAR), which bounds the
        accumulation groups in flight at 8 whatever the allocations' own idents say."""
        out = []
        for k in keys:
            if not k or k[0] != "psum":
                continue
            nb, bb = self._nbanks, self._bank_bytes
            ident = k[1]
            box = k[2] if len(k) > 2 else None
            if box is not None and len(box) != 2:
                box = None
            base = self._bank.get(ident)
            if base is None:
                span = 1 if box is None else max(1, min(nb, -(-box[1][1] // bb)))
                base = self._bank[ident] = self._next_bank
                self._next_bank = (base + span) % nb
            if box is None:
                out.append(("psum-bank", base, None))
                continue
            parts, (b0, b1) = box
            for i in range(b0 // bb, max(b0, b1 - 1) // bb + 1):
                lo = max(b0, i * bb) - i * bb
                hi = min(b1, (i + 1) * bb) - i * bb
                out.append(("psum-bank", (base + i) % nb, (parts, (lo, max(lo + 1, hi)))))
        return out

    def _deps(self, reads, writes):
        """``(dependencies, [(readers, box)] of the reads, [((writers, readers), box)] of the writes)``: what
        the accesses wait for, in the order of the keys, and where :meth:`_commit` records them (each
        location's tables are looked up once per access)."""
        deps, rents, wents = [], [], []
        acc = self._acc
        for k in reads:
            loc = (k[0], k[1])
            ent = acc.get(loc)
            if ent is None:
                ent = acc[loc] = [{}, {}, None, None]  # (writers, readers, their BoxIndex once large)
            box = k[2] if len(k) > 2 else None
            rents.append((ent, box))
            w = ent[0]
            if w:
                near = ent[2].near(box) if ent[2] is not None else None
                if near is None:
                    for b, (t, j) in w.items():  # (the box test's common cases inline)
                        if b is None or box is None or b == box or _overlap(b, box):
                            deps.append((t, j, "RAW"))
                else:
                    for b in near:
                        if b is None or b == box or _overlap(b, box):
                            t, j = w[b]
                            deps.append((t, j, "RAW"))
        for k in writes:
            loc = (k[0], k[1])
            ent = acc.get(loc)
            if ent is None:
                ent = acc[loc] = [{}, {}, None, None]
            box = k[2] if len(k) > 2 else None
            wents.append((ent, box))
            if ent[2] is None and ent[3] is None:
                for b, (t, j) in ent[0].items():
                    if b is None or box is None or b == box or _overlap(b, box):
                        deps.append((t, j, "WAW"))
                for b, (t, j) in ent[1].items():
                    if b is None or box is None or b == box or _overlap(b, box):
                        deps.append((t, j, "WAR"))
                continue
            for d, ix, why in ((ent[0], ent[2], "WAW"), (ent[1], ent[3], "WAR")):
                near = ix.near(box) if ix is not None else None
                if near is None:
                    for b, (t, j) in d.items():
                        if b is None or box is None or b == box or _overlap(b, box):
                            deps.append((t, j, why))
                else:
                    for b in near:
                        if b is None or b == box or _overlap(b, box):
                            t, j = d[b]
                            deps.append((t, j, why))
        return deps, rents, wents

    def _commit(self, idx, end, rents, wents):
        done = (end, idx)  # (one tuple shared by every entry this event leaves: fewer objects for the collector)
        for ent, box in rents:
            rd = ent[1]
            old = rd.get(box)
            if old is None:
                rd[box] = done
                if ent[3] is not None:
                    ent[3].add(box)
                elif len(rd) > _INDEX_AT:
                    ent[3] = BoxIndex(rd)
            elif old[0] < end:
                rd[box] = done
        for ent, box in wents:
            for i in (0, 1):
                d = ent[i]
                if not d:
                    continue
                ix = ent[i + 2]
                if len(d) == 1 and box in d:
                    del d[box]  # rewriting the same region: the common case
                    if ix is not None:
                        ix.remove(box)
                    continue
                if box is None:
                    d.clear()  # (the whole allocation contains every region of it)
                    if ix is not None:
                        ix.clear()
                    continue
                near = ix.near(box) if ix is not None else None
                for b in [b for b in (d if near is None else near) if b == box or _contains(box, b)]:
                    del d[b]
                    if ix is not None:
                        ix.remove(b)
            w = ent[0]
            if box not in w:
                w[box] = done
                if ent[2] is not None:
                    ent[2].add(box)
                elif len(w) > _INDEX_AT:
                    ent[2] = BoxIndex(w)
            else:
                w[box] = done

    # -- scheduling ---------------------------------------------------------------------------------------
    def add(self, ins: Instr):
        """Schedule the next instruction in program order; returns its ``(start, end)`` in seconds."""
        idx = len(self.start)
        engine = ins.engine
        if engine not in _ENGINES:
            engine = engine_name(engine)
        reads, writes = ins.reads, ins.writes
        for k in reads:  # (PSUM-bank keys: most instructions touch no PSUM)
            if k and k[0] == "psum":
                reads = tuple(reads) + tuple(self._bank_keys(reads))
                break
        for k in writes:
            if k and k[0] == "psum":
                writes = tuple(writes) + tuple(self._bank_keys(writes))
                break
        deps, rents, wents = self._deps(reads, writes)
        if self._spill_pending:
            deps.extend(self._reloads(ins))
        if ins.after:
            # an explicit edge "lowers to a hardware semaphore wait" (nki.isa.NkiInstruction): the instruction
            # starts once each producer has completed; the model keeps program order, so it cannot honour an
            # edge to a later instruction (counted, and said in the report's advice)
            for j in ins.after:
                if j < idx:
                    deps.append((self.end[j], j, "edge"))
                else:
                    self.flags["backward_edges"] += 1
        ready, dep = 0.0, None
        for d in deps:
            if d[0] > ready:
                ready, dep = d[0], d
        if engine == "DMA":
            qname = ins.queue if ins.queue is not None else self._queue_of(ins)
            start, end, cause = self._dma(ins, idx, ready, dep, qname)
            track = self._tracks.get(qname)
            if track is None:
                track = self._tracks[qname] = f"DMA queue {qname}"
        else:
            start, end, cause = self._compute(ins, engine, idx, ready, dep, deps)
            track = engine
        self.count[engine] += 1
        self.start.append(start)
        self.end.append(end)
        self.track.append(track)
        self.pred.append(cause[1])
        self.cause.append(cause[0])
        if self.keep_events:
            self.events.append(ins)
        self._commit(idx, end, rents, wents)
        if self._spilled:
            for k in writes:
                if k and k[0] == "sbuf" and self._is_spilled(k[1]):
                    self._spill_pending[k[1]] = (self._spill(k, ins, end), k)
                    self.spills["stores"] += 1
        return start, end

    # -- spills -------------------------------------------------------------------------------------------
    def _is_spilled(self, ident) -> bool:
        sp = self._spilled
        return ident in sp or (type(ident) is tuple and bool(ident) and ident[0] in sp)

    def _spill(self, key, ins, after) -> float:
        """Book one spill transfer of the SBUF region ``key`` (written or read by ``ins``) between SBUF and
        the HBM scratchpad (the Neuron runtime's device-memory page: "scratchpad ... additional space used to
        store intermediary SBUF and other computations"), issued at ``after`` on the queue ``"spill"``: a
        DMA like any other, split over the DMA engines of its partitions (same documented costs). Returns
        its completion time. It is counted in the DMA figures and ``spills``; it is not an event."""
        box = key[2] if len(key) > 2 else None
        if box is not None and len(box) == 2:
            rows = box[0][1] - box[0][0]
            nbytes = rows * (box[1][1] - box[1][0])
            first = box[0][0]
        else:
            rows = max(1, ins.partitions)
            nbytes = ins.nbytes or rows * ins.free_elems * _costs.itemsize(ins.dtype_out)
            first = 0
        q = self._queues.setdefault("spill", [0.0, None])
        t0 = max(after, q[0])
        q[0] = t0
        pseudo = Instr("dma_copy", "DMA", partitions=max(1, min(128, rows)), nbytes=int(nbytes))
        transfers = _costs.dma_transfers(pseudo, self.hw, first)
        end, _, _ = self._book(_plan(pseudo, transfers, self.hw, len(self._lanes)), t0, None)
        self.spills["bytes"] += int(nbytes)
        return end

    def _reloads(self, ins) -> list:
        """Dependencies of ``ins`` on reloads of the spilled regions it reads: each region written since its
        last reload is brought back (after its spill store completes) before the first instruction reading
        it; a write of it instead drops the pending reload (the old values are dead). The reload is issued as
        soon as the store completes (the earliest the compiler could; it cannot be later than the reader)."""
        out = []
        for k in ins.reads:
            if k and k[0] == "sbuf" and k[1] in self._spill_pending:
                stored, wkey = self._spill_pending.pop(k[1])
                self.spills["reloads"] += 1
                out.append((self._spill(wkey, ins, stored), None, "spill"))
        for k in ins.writes:
            if k and k[0] == "sbuf" and k[1] in self._spill_pending:
                self._spill_pending.pop(k[1])
        return out

    def _compute(self, ins, engine, idx, ready, dep, deps):
        hw = self.hw
        free, last = self._free[engine], self._last[engine]
        if ins.op == "zero" and ins.name == "memset" and ins.writes and all(k and k[0] == "psum" for k in ins.writes):
            # an accumulation group's zero-filled PSUM tile is no instruction: "NeuronCompiler is able to identify
            # the overwrite, accumulate, accumulate, ... pattern from an explicit empty PSUM bank declaration
            # (e.g., res_psum = nl.zeros((128, 512), np.float32, buffer=nl.psum)) and matmul output accumulations"
            # (trn1 architecture guide): the first matmul overwrites. It occupies no engine; it still orders the
            # group after the bank's last reader (its dependencies)
            self.flags["psum_zero_folded"] += 1
            return ready, ready, ((dep[2], dep[1]) if dep is not None else ("start", None))
        start = max(free, ready)
        ports = ()
        if engine != "Tensor" and hw.shared_ports.value:  # (no Tensor instruction shares a port)
            # NeuronCore-v2: VectorE and GpSimdE cannot access SBUF in parallel, VectorE and ScalarE cannot
            # access PSUM in parallel: such instructions of the two engines are serialised.
            spaces = {k[0] for k in ins.reads + ins.writes if k}
            ports = tuple(sp for sp, pair in (("sbuf", ("Vector", "GpSimd")), ("psum", ("Vector", "Scalar")))
                          if sp in spaces and engine in pair)
            port_free, port_last = max((self._ports[p] for p in ports), default=(0.0, None),
                                       key=lambda x: x[0])
            if port_free > start:
                start, ready, dep = port_free, port_free, (port_free, port_last, "port")
        cycles = self._rule(ins)(ins, hw)
        if ins.stride_bytes > 16:
            cycles *= hw.strided_factor.value
        small = ins.free_elems <= hw.min_ii.value
        if engine != "Tensor":
            # The documented static overhead, in its two cases ("In the rare cases where VectorE is running many
            # back-to-back instructions either with N << 128 or with every instruction depending on the output
            # tile of the previous instruction, we need to add a static instruction overhead of 100 engine
            # cycles", trn1 architecture guide; the same notes apply to ScalarE): the instruction reads what its
            # engine's previous instruction wrote, or it follows that instruction back to back and both stream
            # N << 128 elements, read as N <= MIN_II (below it the cost is MIN_II whatever N). A wait for another
            # engine (a semaphore) adds nothing: the pages give no figure for it.
            raw_prev = last is not None and any(k == "RAW" and j == last for _, j, k in deps)
            tiny_run = small and self._small[engine] and start == free
            if raw_prev or tiny_run:
                cycles += hw.static_overhead.value
            if ins.free_elems < 128:
                self.flags["small_free"] += 1
        else:
            n_mov = ins.moving_free or ins.free_elems
            if _costs.is_fp32(ins.dtype_in) and ins.name in ("nc_matmul", "matmul"):
                self.flags["fp32_matmul"] += 1
            if ins.name in ("nc_matmul", "matmul") and n_mov < 128:
                self.flags["narrow_matmul"] += 1
        if ins.partitions < 64:
            self.flags["few_partitions"] += 1
        dur = cycles / self._clock[engine]
        end = start + dur
        self._free[engine], self._last[engine] = end, idx
        self._small[engine] = small
        for p in ports:
            self._ports[p] = (end, idx)
        self.busy[engine] += dur
        if ready > free:
            self.flags["dependency_waits"] += 1
            cause = (dep[2], dep[1])
        else:
            cause = ("engine", last) if last is not None else ("start", None)
        return start, end, cause

    def _rule(self, ins):
        """The cost function of ``ins``: its own, else the one declared with its name (counted in
        ``default_costed`` when there is none and the engine's default applies)."""
        if ins.cost is not None:
            return ins.cost
        rule = self._rules.get(ins.name)
        if rule is None:
            rule = self._rules[ins.name] = _costs.rule_for(ins.name)
        if not rule[1]:
            self.default_costed[ins.name] = self.default_costed.get(ins.name, 0) + 1
        return rule[0]

    def _queue_of(self, ins):
        if ins.queue is not None:
            return ins.queue
        # default: one queue per HBM tensor, so the loads of one tensor stay in order but do not wait
        # behind another tensor's (the compiler spreads DMAs over queues)
        for k in tuple(ins.reads) + tuple(ins.writes):
            if k and k[0] == "hbm":
                return k[1]
        return "dma"

    def _dma(self, ins, idx, ready, dep, qname):
        hw = self.hw
        q = self._queues.get(qname)
        if q is None:
            q = self._queues[qname] = [0.0, None]
        issue = max(ready, q[0])
        if dep is not None and ready >= q[0]:
            cause = (dep[2], dep[1])
        else:
            cause = ("queue", q[1]) if q[1] is not None else ("start", None)
        t0 = issue + (hw.hwdge_issue.value if ins.dge == "hwdge" else 0.0)
        q[0], q[1] = t0, idx
        first = 0  # (the first partition of its first on-chip key with a box, writes before reads)
        for k in ins.writes:
            if k and (k[0] == "sbuf" or k[0] == "psum") and len(k) > 2 and k[2]:
                first = int(k[2][0][0])
                break
        else:
            for k in ins.reads:
                if k and (k[0] == "sbuf" or k[0] == "psum") and len(k) > 2 and k[2]:
                    first = int(k[2][0][0])
                    break
        split = self._rule(ins)  # (a DMA's declared cost is its split into per-engine transfers)
        if not getattr(split, "dma_split", False):
            # a DMA whose name declares no split (undeclared, or a compute instruction's cycle cost given a DMA
            # engine): the documented split
            split = _costs.dma_transfers
        if split is _costs.dma_transfers:  # (pure in these fields: its plan is kept)
            key = (ins.name, ins.op, ins.partitions, ins.transfers, ins.nbytes, ins.chunk_bytes, first)
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = _plan(ins, split(ins, hw, first), hw, len(self._lanes))
        else:
            plan = _plan(ins, split(ins, hw, first), hw, len(self._lanes))
        end, bind, first_start = self._book(plan, t0, idx)
        st = self.dma
        if bind is not None and bind[1] is not None and bind[0] > t0:
            cause = ("dma-engine", bind[1])
        st.instructions += 1
        if plan[2]:
            st.small_partition_instrs += 1
        if plan[3]:
            st.tiny_chunk_instrs += 1
        # the DMA's slice runs from its first transfer's start (not its issue: a prefetched DMA may wait
        # for an engine) to its last transfer's completion
        return (issue if first_start is None else first_start), end, cause

    def _book(self, plan, t0, owner):
        """Book the transfers of a DMA's :func:`.dma.plan` on the DMA engines from ``t0``, each in its engine's
        earliest idle gap; returns ``(end, (start, owner) of the binding transfer, first start)``."""
        lanes = self._lanes
        end, bind, first_start = t0, None, None
        if plan[0] is not None and self._uniform:
            # every DMA so far used all engines equally: the lanes are identical, book one for all
            _, b, occ, lat, data, acct = plan[0]
            s, p = lanes[0].book(t0, occ, owner)
            lanes[0].data += data
            end, bind, first_start = s + lat, (s, p), s
            st = self.dma
            st.transfers += acct[0]
            st.bytes += acct[1]
            st.small_transfers += acct[2]
            st.fixed_s += acct[3]
            st.busy_s += acct[4]
        else:
            if self._uniform:
                base = lanes[0]
                self._lanes = lanes = [base] + [base.copy() for _ in range(len(lanes) - 1)]
                self._uniform = False
            for e, b, occ, lat, data, acct in plan[1]:
                s, p = lanes[e].book(t0, occ, owner)
                lanes[e].data += data
                if s + lat > end:
                    end, bind = s + lat, (s, p)
                first_start = s if first_start is None else min(first_start, s)
                self._account(acct)
        return end, bind, first_start

    def _account(self, acct):
        """Add one booking's :class:`DmaStats` increments (``acct`` of :func:`.dma.plan`)."""
        count, nbytes, small, fixed, busy = acct
        st = self.dma
        st.transfers += count
        st.bytes += nbytes
        st.small_transfers += small
        st.fixed_s += fixed
        st.busy_s += busy

    # -- result -------------------------------------------------------------------------------------------
    def result(self) -> Result:
        """The :class:`Result` of the instructions added so far."""
        return Result(self)


def simulate(events, version=2, keep_events=True, spilled=()) -> Result:
    """Schedule ``events`` (an iterable of :class:`Instr` in program order) on NeuronCore ``version``
    (``spilled``: see :class:`Scheduler`)."""
    sched = Scheduler(version, keep_events=keep_events, spilled=spilled)
    for ins in events:
        sched.add(ins)
    return sched.result()

__all__ = ["COMPUTE", "DmaStats", "Instr", "Operand", "Result", "Scheduler", "engine_name", "simulate"]
