"""The declaration of an engine instruction: ``@instruction(engine=..., cost=..., batched=..., gen1=...)``.

A declared instruction is recorded once in :mod:`.registry` (both API namespaces, the batch and
sync sets and the profiler derive from it). Its wrapper runs on every call: it refuses a batch
of programs unless the instruction is ``batched``, names the running instruction for the
diagnostics (its kernel line, found once), tells an installed profile recorder its name,
engine and arguments, and in a current-API kernel numbers it for the scheduling edges and returns
its ``nisa.NkiInstruction`` handle (:mod:`..scheduling`). :func:`first_generation` makes the first generation's entry point of an
instruction whose body takes ``gen1=``. :mod:`.operands` re-exports both names.
"""

from __future__ import annotations

import functools
import sys

from .. import diagnostics as _diag
from ..source_lines import _is_sim_file
from ..context import _tls  # (the running state without a call, on the per-instruction path)
from ..errors import NotBatchable
from ..scheduling import NkiInstruction
from . import registry as _registry


def instruction(fn=None, *, engine=None, cost=None, batched=False, sync=False, gen1=None):
    """Declare ``fn`` as an engine instruction: ``@instruction(engine="Vector", cost=costs.tensor_tensor,
    batched=True, gen1=Gen1(...))``.

    ``cost`` is its cost in cycles of its engine, a function ``(instr, hw) -> cycles`` of
    :mod:`..timing.costs` (DMA: :func:`..timing.costs.dma_transfers`); the timing model reads it from
    the declaration.

    The declaration is recorded once in :mod:`.registry` (the namespaces, batch sets and the
    profiler read it). Without ``batched`` it runs one program at a time: in a batch of grid
    programs (:mod:`..vectorize`) it raises :class:`NotBatchable` and they run singly. A
    ``batched`` instruction takes operands and a ``dst`` that carry the batch's leading axes
    (:func:`.operands.write` places its values) and raises :class:`NotBatchable` itself for the cases it has
    no batched meaning for. ``engine=None`` only for the first generation's variants of
    :func:`first_generation`, which are not declared again."""
    if fn is None:
        return functools.partial(instruction, engine=engine, cost=cost, batched=batched, sync=sync, gen1=gen1)
    name = fn.__name__
    _getframe = sys._getframe

    @functools.wraps(fn)
    def run(*args, **kwargs):
        prog = _tls.program
        if not batched and prog is not None and prog.nb:
            raise NotBatchable(f"nisa.{name} runs one program at a time")
        iw = _tls.site
        depth = iw.depth
        # a current-API kernel's instruction is numbered for the scheduling edges (its returned handle)
        sched = prog.schedule if prog is not None and not depth else None
        ordinal = sched.issue(kwargs.get("name")) if sched is not None else None
        if not depth:
            iw.op = name  # (Tensor Indirection views group their offsets by the engine)
            iw.prog = prog  # (its body may compute with no program current: dtypes.cast reads it)
            if iw.loops:  # its accesses are logged under its kernel line: found from the caller's frame
                f = _getframe(1)
                code = f.f_code
                file = code.co_filename
                # (where_from's answer for a caller known to be the kernel's own file, without the call)
                iw.where = (file, f.f_lineno, code.co_name) if _is_sim_file.get(file) is False else _diag.where_from(f)
        iw.depth = depth + 1
        rec = iw.recorder if not depth else None  # (RunContext.recorder's place, without its lookup)
        if rec is not None:  # a profile is recorded: it learns the instruction and its operands
            rec.begin(name, engine, args, kwargs, ordinal)
        try:
            out = fn(*args, **kwargs)  # (its dst write ends the memory model's instruction slot)
        finally:
            iw.depth = depth
            if not depth:
                iw.where = iw.op = iw.prog = None
            if rec is not None:
                rec.end()
        # "Returned by nki.isa operations during tracing" (nisa.NkiInstruction): a dst= instruction's handle
        return NkiInstruction(sched, ordinal, name) if sched is not None and out is None else out

    if engine is not None:
        _registry.register(_registry.Spec(name, engine, run, batched, sync, gen1, fn.__module__, cost=cost))
    return run


def first_generation(impl, name):
    """The first generation's entry point of instruction ``name``: ``impl`` (the instruction's body,
    taking ``gen1=``) with the rules of the first generation's page, as an :func:`instruction`."""

    def run(*args, **kwargs):
        return impl(*args, gen1=True, **kwargs)

    run.__name__ = run.__qualname__ = name  # (the instruction's name in messages and the engine logs)
    run.__doc__ = f"The first generation's ``nisa.{name}`` (see :func:`{impl.__name__}`)."
    return instruction(run)
