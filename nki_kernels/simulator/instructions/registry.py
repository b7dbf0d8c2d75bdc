"""Every NKI instruction, declared once: the table the namespaces, the batch sets and the profiler read.

An instruction is one destination-style function in an engine module of
:mod:`nki_kernels.simulator.instructions`, decorated with
:func:`nki_kernels.simulator.instructions.operands.instruction`, which wraps it (op site,
batch guard) and records a :class:`Spec` here::

    @instruction(engine="Vector", cost=costs.copy_like, batched=True, gen1=Gen1(like="data", batched=True))
    def tensor_double(dst, data):
        ...

From that one declaration:

* the standalone ``nki.isa`` namespace exports ``spec.run`` (:func:`publish` with ``"standalone"``);
* the first generation's ``neuronxcc.nki.isa`` exports a functional form: the front end's
  hand-written one where it has one (its page's signature), else one derived from ``spec.gen1``
  (allocate the result like the operand ``gen1.like``, call ``run`` with it as ``dst``);
* :func:`batch_safe` gives each namespace's instructions that run a batch of grid programs at once;
* :func:`sync_names` gives the instructions that synchronise logical cores (a kernel naming one
  runs its cores as cooperating workers);
* ``spec.engine`` is the engine the profiler records (an ``engine=`` argument may override it);
* ``spec.cost`` is its cost in cycles of its engine, a function of :mod:`..timing.costs`
  (``(instr, hw) -> cycles``; DMA: its split into transfers) that the timing model reads from here
  (:func:`..timing.costs.read_declarations`). Every instruction declares one; one whose page gives
  no figure names its engine's documented default, ``costs.engine_default``, on purpose.

This module is pure data; its only simulator import is the timing layer's cost table (below it),
so it sits below every layer that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ..timing import costs as _costs

ENGINES = ("Tensor", "Vector", "Scalar", "GpSimd", "DMA", "Sync")


@dataclass(frozen=True)
class Gen1:
    """How the first generation's functional form is derived: the result is a new SBUF tile shaped
    like operand ``like`` (in ``dtype=`` if given, else that operand's dtype); ``batched``: that form
    runs a batch of grid programs at once."""

    like: Optional[str] = None
    batched: bool = False


@dataclass
class Spec:
    """One instruction: its name, engine, the wrapped destination-style entry point ``run``, whether
    ``run`` batches, whether it synchronises cores, its first-generation form (``None``: the
    instruction is not in the first generation's namespace unless the front end defines it) and its
    ``cost`` (a :mod:`..timing.costs` function of the timing model's event and the NeuronCore's facts,
    in cycles of its engine; ``None`` only for a declaration that gives none, which
    ``tests/test_instruction_registry.py`` refuses for the simulator's own instructions)."""

    name: str
    engine: str
    run: Callable
    batched: bool = False
    sync: bool = False
    gen1: Optional[Gen1] = None
    module: str = ""
    published: list = field(default_factory=list)
    cost: Optional[Callable] = None


REGISTRY: dict = {}
# the timing model reads each instruction's declared cost from this table (it cannot import it)
_costs.read_declarations(REGISTRY)
_namespaces: list = []  # (namespace dict, kind, derive) of publish()


def register(spec: Spec) -> Spec:
    """Record ``spec`` and add it to every namespace published so far. A name is declared once:
    a second declaration from another module is an error (the tables would disagree)."""
    if spec.engine not in ENGINES:
        raise ValueError(f"instruction {spec.name}: engine {spec.engine!r} is not one of {ENGINES}")
    old = REGISTRY.get(spec.name)
    if old is not None and old.module != spec.module:
        raise ValueError(f"instruction {spec.name} is declared twice ({old.module} and {spec.module})")
    REGISTRY[spec.name] = spec
    for namespace, kind, derive in _namespaces:
        _add(namespace, kind, derive, spec)
    return spec


def _add(namespace, kind, derive, spec) -> None:
    if kind == "standalone":
        namespace.setdefault(spec.name, spec.run)
    elif spec.name not in namespace and spec.gen1 is not None:
        namespace[spec.name] = derive(spec)


def publish(namespace: dict, kind: str, derive: Callable = None) -> None:
    """Make ``namespace`` (a module's globals) show every instruction of ``kind`` (``"standalone"``:
    ``spec.run``; ``"gen1"``: ``derive(spec)`` for specs with a :class:`Gen1` form that the module
    does not define itself), now and for instructions declared later."""
    if kind not in ("standalone", "gen1") or (kind == "gen1" and derive is None):
        raise ValueError(f"publish: kind {kind!r} (gen1 needs derive=)")
    _namespaces.append((namespace, kind, derive))
    for spec in list(REGISTRY.values()):
        _add(namespace, kind, derive, spec)


def withdraw(name: str) -> None:
    """Remove instruction ``name`` from the table and from every published namespace (an
    instruction declared for a while, e.g. by a test, leaves the namespaces as they were)."""
    spec = REGISTRY.pop(name)
    for namespace, kind, _ in _namespaces:
        if kind == "standalone" and namespace.get(name) is spec.run:
            del namespace[name]
        elif kind == "gen1" and getattr(namespace.get(name), "_derived_from", None) is spec:
            del namespace[name]


def batch_safe(kind: str) -> frozenset:
    """Names of the instructions whose ``kind`` form (``"standalone"`` or ``"gen1"``) batches."""
    if kind == "standalone":
        return frozenset(s.name for s in REGISTRY.values() if s.batched)
    return frozenset(s.name for s in REGISTRY.values() if s.gen1 is not None and s.gen1.batched)


def sync_names() -> frozenset:
    """Names of the instructions that synchronise the logical cores of a launch."""
    return frozenset(s.name for s in REGISTRY.values() if s.sync)


def engine_of(name: str, default: str = "Vector") -> str:
    """The declared engine of instruction ``name`` (``default`` for a name not declared)."""
    spec = REGISTRY.get(name)
    return spec.engine if spec is not None else default


def without_cost() -> list:
    """Names of the declared instructions that declare no cost (the timing model would give them their
    engine's default without saying so)."""
    return sorted(n for n, s in REGISTRY.items() if s.cost is None)
