"""The current API's scheduling controls: the handle each ``nki.isa`` call returns
(``nisa.NkiInstruction`` and its ``depends_on``), ``nl.no_reorder()`` blocks and
``kernel.with_schedule(...)`` (the NKI guide "How to Use the NKI Scheduling APIs", the
``nki.isa.NkiInstruction`` and ``nki.language.no_reorder`` pages, the dynamic-loops deep dive).

Each adds dependency edges between instructions that "constrain the reordering that the
automatic scheduler will do". The simulator runs a program's instructions one after another in
program order, which every such edge allows, so none of them changes a value: they are checked
as the pages state their rules, kept per program (:class:`ProgramSchedule`, the explicit state
object a :class:`~.program.Program` of a current-API kernel carries) and read by the profile's
timing model, where a consumer starts once each of its producers has completed (the semaphore
wait an edge "lowers to").

Rules checked (each an :class:`~.errors.NKIError` naming the rule):

* ``depends_on`` takes ``NkiInstruction`` handles of the same program; "both instructions must
  sit at the same dynamic-loop nesting (or the producer in an enclosing scope). You cannot wire an
  edge into or out of a dynamic loop (``nl.fori_loop`` / ``nl.while_loop``)";
* "Register-based dynamic loops (``nl.fori_loop``, ``nl.while_loop``) are not supported inside a
  ``no_reorder`` block", nor ``nl.dynamic_range`` ("This is NOT supported and will error");
  ``affine_range``, ``sequential_range`` and ``static_range`` are;
* ``with_schedule``'s pairs are ``(name, name or list of names)`` and every name is the
  ``name=`` of an instruction of the kernel (the compiler "will ... check that it makes sense");
* the edges together form no cycle (an instruction waiting on itself never runs).
"""

from __future__ import annotations

from contextlib import contextmanager

from .context import _tls
from .errors import NKIError
from .nki_object import NKIObject


class ProgramSchedule:
    """The scheduling state of one program of a current-API kernel: the declared instructions issued
    so far (``count``: the next one's ordinal, in program order), their ``name=`` (``names``: name ->
    ordinals), the dependency ``edges`` ``(producer, consumer, why)`` by ordinal, the open
    ``no_reorder`` blocks and the dynamic loops the program is inside now (``dynamic``: one token per
    loop, outermost first)."""

    __slots__ = ("count", "names", "edges", "block", "block_last", "dynamic", "closed")

    def __init__(self):
        self.count = 0
        self.names = {}
        self.edges = []
        self.block = 0  # depth of the open no_reorder blocks
        self.block_last = None  # ordinal of the last instruction issued in the outermost open block
        self.dynamic = ()
        self.closed = False

    def issue(self, name) -> int:
        """A declared instruction (``name=`` ``name``) starts: its ordinal, with its ``no_reorder`` edge."""
        i = self.count
        self.count = i + 1
        if name is not None:
            self.names.setdefault(name, []).append(i)
        if self.block:
            if self.block_last is not None:
                self.edges.append((self.block_last, i, "no_reorder"))
            self.block_last = i
        return i

    def finish(self, schedule=()) -> None:
        """The program ended: resolve ``with_schedule``'s named pairs (``schedule``, already checked for
        form) into edges, then refuse a cycle among all the edges."""
        for consumer, producers in schedule:
            for n in (consumer, *producers):
                if n not in self.names:
                    known = ", ".join(repr(k) for k in sorted(self.names)) or "none"
                    raise NKIError("with_schedule", f"kernel.with_schedule: no instruction of the kernel is named "
                                   f"{n!r} (instructions with name=: {known})")
            for c in self.names[consumer]:
                for p in producers:
                    for j in self.names[p]:
                        if j == c:
                            raise NKIError("with_schedule", f"kernel.with_schedule: pair ({consumer!r}, {p!r}) makes "
                                           "an instruction depend on itself")
                        self.edges.append((j, c, "with_schedule"))
        self.closed = True
        cycle = _cycle(self.edges)
        if cycle:
            names = {i: n for n, ords in self.names.items() for i in ords}
            path = " -> ".join(f"#{i}" + (f" ({names[i]!r})" if i in names else "") for i in cycle)
            raise NKIError("schedule cycle", f"the kernel's dependency edges (depends_on, no_reorder, with_schedule) "
                           f"form a cycle, so none of its instructions could start: {path} (instructions "
                           "numbered in program order from #0)")


def _cycle(edges) -> list:
    """A cycle of the graph of ``edges`` (``(producer, consumer, why)``), as ordinals, or ``[]``."""
    after = {}
    for p, c, _ in edges:
        after.setdefault(p, []).append(c)
    state = {}  # ordinal -> 1 on the path, 2 done
    for root in after:
        if state.get(root):
            continue
        path, stack = [root], [iter(after.get(root, ()))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(after.get(nxt, ())))
    return []


class NkiInstruction(NKIObject):
    """``nisa.NkiInstruction``: the handle an ``nki.isa`` call returns. ``c.depends_on(a, b)`` makes
    ``c`` run after ``a`` and ``b`` complete and returns ``c``."""

    __slots__ = ("_sched", "_ordinal", "_op", "_scope")

    def __init__(self, sched, ordinal, op):
        self._sched, self._ordinal, self._op = sched, ordinal, op
        self._scope = sched.dynamic

    def __repr__(self):
        return f"NkiInstruction(#{self._ordinal} nisa.{self._op})"

    def depends_on(self, *producers) -> NkiInstruction:
        """Add scheduling dependencies: this instruction (the consumer) runs after each producer
        completes. Returns ``self``, so ``c.depends_on(b).depends_on(a)`` chains."""
        sched = self._sched
        if sched.closed:
            raise NKIError("depends_on", f"{self!r}.depends_on: the kernel has returned; dependencies are added "
                           "while it is traced")
        for k, p in enumerate(producers):
            if not isinstance(p, NkiInstruction):
                raise NKIError("depends_on", f"{self!r}.depends_on: producer {k} is a {type(p).__name__}; pass the "
                               "NkiInstruction an nki.isa call returned")
            if p._sched is not sched:
                raise NKIError("depends_on", f"{self!r}.depends_on: producer {p!r} belongs to another kernel "
                               "launch or program")
            if p is self or p._ordinal == self._ordinal:
                raise NKIError("depends_on", f"{self!r}.depends_on: an instruction cannot depend on itself")
            if self._scope[:len(p._scope)] != p._scope:
                raise NKIError("depends_on", f"{self!r}.depends_on({p!r}): both instructions must sit at the same "
                               "dynamic-loop nesting, or the producer in an enclosing scope; an edge cannot be "
                               "wired into or out of a dynamic loop (nl.fori_loop / nl.while_loop / "
                               "nl.dynamic_range): its semaphore could fire unconditionally or never")
            sched.edges.append((p._ordinal, self._ordinal, "depends_on"))
        return self


def _running_schedule(what):
    prog = _tls.program
    if prog is None:
        raise NKIError("kernel context", f"{what} is only valid inside a running kernel")
    sched = getattr(prog, "schedule", None)
    if sched is None:
        raise NKIError(what, f"{what} belongs to the current nki API (nki.jit); this kernel was decorated with the "
                       "first generation's neuronxcc.nki.jit")
    return sched


class no_reorder:  # noqa: N801 - nl.no_reorder, as kernels spell it
    """``with nl.no_reorder():``: every instruction issued inside the block (dynamically scoped: in
    functions it calls too) depends on the one issued before it in the block, so they run in
    program order. Dynamic loops (``nl.dynamic_range``, ``nl.fori_loop``, ``nl.while_loop``) are
    not supported inside it; put the block inside the loop body instead."""

    def __enter__(self):
        sched = self._sched = _running_schedule("nl.no_reorder")
        if not sched.block:
            sched.block_last = None
        sched.block += 1
        return self

    def __exit__(self, *exc):
        sched = self._sched
        sched.block -= 1
        if not sched.block:
            sched.block_last = None
        return False


@contextmanager
def dynamic_loop(what):
    """The body of dynamic loop ``what`` (``"nl.fori_loop"`` ...) runs inside this: refused in a
    ``no_reorder`` block, and a dynamic-loop nesting for ``depends_on``'s rule."""
    prog = _tls.program
    sched = getattr(prog, "schedule", None) if prog is not None else None
    if sched is None:
        yield
        return
    if sched.block:
        raise NKIError("no_reorder", f"{what} inside a nl.no_reorder() block is not supported (dynamic loops "
                       "cannot sit in a no_reorder block); put the no_reorder block inside the loop body instead. "
                       "affine_range, sequential_range and static_range are allowed in the block")
    outer = sched.dynamic
    sched.dynamic = outer + (object(),)
    try:
        yield
    finally:
        sched.dynamic = outer


def check_schedule(edges) -> tuple:
    """``kernel.with_schedule(edges)``'s argument in its checked form: ``((consumer, (producer, ...)),
    ...)``; ``edges`` is a list of pairs ``(name, name)`` or ``(name, [name, ...])``."""
    if isinstance(edges, (str, bytes)) or not hasattr(edges, "__iter__"):
        raise NKIError("with_schedule", f"kernel.with_schedule: edges must be a list of (consumer, producer) pairs "
                       f"of instruction names, got {type(edges).__name__}")
    out = []
    for k, pair in enumerate(edges):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise NKIError("with_schedule", f"kernel.with_schedule: edge {k} is {pair!r}; each edge is a pair "
                           "(consumer name, producer name or list of producer names)")
        consumer, producers = pair
        producers = (producers,) if isinstance(producers, str) else producers
        if not isinstance(consumer, str) or not isinstance(producers, (tuple, list)) or \
                not all(isinstance(p, str) for p in producers):
            raise NKIError("with_schedule", f"kernel.with_schedule: edge {k} is {pair!r}; names are strings (the "
                           "name= given to the instructions)")
        out.append((consumer, tuple(producers)))
    return tuple(out)


def event_waits(events) -> dict:
    """For a profile: event index -> the indices of the events it waits for through its program's edges.
    ``events`` are the recorded events in program order, each with ``prog`` and ``ordinal`` (its
    instruction's number, or ``None``). An instruction's first event waits for each producer's last
    event; a producer that recorded no event passes on its own producers (earlier in program order)."""
    spans = {}  # (id(program), ordinal) -> [first, last] event index
    progs = {}
    for i, ev in enumerate(events):
        if ev.ordinal is not None and ev.prog is not None:
            key = (id(ev.prog), ev.ordinal)
            progs[id(ev.prog)] = ev.prog
            sp = spans.get(key)
            if sp is None:
                spans[key] = [i, i]
            else:
                sp[1] = i
    waits = {}
    for pid, prog in progs.items():
        sched = getattr(prog, "schedule", None)
        if sched is None or not sched.edges:
            continue
        producers = {}
        for p, c, _ in sched.edges:
            producers.setdefault(c, []).append(p)
        passed = {}  # ordinal without events -> the events it passes on
        for c in sorted(producers):
            acc = set()
            for p in producers[c]:
                sp = spans.get((pid, p))
                if sp is not None:
                    acc.add(sp[1])
                elif p < c:
                    acc.update(passed.get(p, ()))
            sp = spans.get((pid, c))
            if sp is None:
                passed[c] = acc
            elif acc:
                waits[sp[0]] = tuple(sorted(acc))
    return waits
