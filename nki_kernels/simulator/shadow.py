"""Shadow mode: every launch runs twice, on its fast path and on the reference path, and must agree.

The simulator has one reference path (each SPMD program run alone, one Python call of the kernel
after another) and fast paths that must give the same answers (grid vectorising, see
:mod:`.vectorize`). With shadow mode on (``NKI_SIM_SHADOW=1``, or ``config.shadow = True``, or
pytest's ``--nki-shadow``), :func:`run` launches the kernel as usual, then once more on copies of
the inputs with every fast path off and the simulator's caches emptied, and compares:

* the verdict: no error, or the same :class:`~.errors.NKIError` rule (any other exception: the
  same type);
* every output bit, and every bit the kernel wrote into its inputs (in-place kernels);
* the diagnostics reported as warnings (rule names, in order), and what the kernel printed
  (``nl.device_print``; printed once).

Both runs draw the same unseeded random numbers (``nl.rand``: one launch seed, per program id), and
both start from the same Python state of the objects the kernel's code names (a module-level
allocator, say): the reference run is the same launch again, not the launch after it.
With ``config.nan_fill`` off, never-written memory is garbage, so outputs are not compared then.

A disagreement raises :class:`ShadowMismatch` naming both verdicts (or the first differing
element) and the kernel line; otherwise the fast path's result (or error) is returned as usual.
It costs one more launch per launch: a testing tool, off by default.
"""

from __future__ import annotations

import contextlib
import copy
import io
import types
import re
import secrets
import sys
import threading
import warnings

import numpy as np

from . import access_pattern, config, core, diagnostics, indexing, vectorize
from .errors import NKIError

# Caches of derived facts (resolved indexes, access plans, regions, split plans): emptied before the
# reference run, so what one launch (or the fast path) cached cannot decide the reference's answer.
_CACHES = ((indexing, "_RESOLVED"), (diagnostics, "_REGION_OF"), (diagnostics, "_WHOLE"),
           (access_pattern, "_PLANS"), (access_pattern, "_ROOT_INDEX"), (access_pattern, "_ROOT_INDEX_ELEMENTWISE"),
           (access_pattern, "_placed_positions"), (access_pattern, "_OWNER_ADDRESSES"), (core, "_WHOLE_INDEX"),
           (vectorize, "_plans"))


def clear_caches() -> None:
    """Empty the simulator's caches of derived facts (a fresh process's state)."""
    for module, name in _CACHES:
        getattr(module, name).clear()


_local = threading.local()  # depth: a launch made while a shadowed launch runs is not shadowed again


class ShadowMismatch(NKIError):
    """The fast path and the reference path of one launch disagree (a simulator bug: please report)."""

    def __init__(self, detail: str, where: str):
        super().__init__("shadow", detail, where=where)


def wanted() -> bool:
    """Whether the launch being made now is shadowed: shadow mode on and not inside another
    shadowed launch."""
    return config.shadow and not getattr(_local, "depth", 0)


def run(kernel, simulate, arrays, outputs):
    """Run ``simulate(arrays, outputs, seed)`` (one launch of ``kernel``) on its fast path, then
    ``simulate(copies, (), seed)`` on the reference path (the same entropy for unseeded random
    numbers); return the fast result if both agree, else raise :class:`ShadowMismatch`."""
    before = _copies(arrays)
    seed = secrets.randbits(64)
    kernel_state = _KernelState(kernel)
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        fast, fast_error, fast_warnings, fast_printed = _attempt(simulate, arrays, outputs, seed)
        with config.reference_path(), kernel_state.as_before():
            clear_caches()
            ref, ref_error, ref_warnings, ref_printed = _attempt(simulate, before, (), seed)
    finally:
        _local.depth -= 1
    sys.stdout.write(fast_printed)  # (what the kernel printed, nl.device_print: once)
    where = diagnostics.definition(kernel) or "<unknown>"
    v_fast, v_ref = _verdict(fast_error), _verdict(ref_error)
    if v_fast != v_ref:
        raise ShadowMismatch(
            f"the fast path and the reference path of {_name(kernel)} disagree: fast path: "
            f"{_describe(fast_error)}; reference path (no vectorising, fresh state): {_describe(ref_error)}"
            f"{_RERUN_HINT if fast_error is None else ''}",
            where=_error_where(fast_error) or _error_where(ref_error) or where)
    if fast_printed != ref_printed:
        raise ShadowMismatch(f"{_name(kernel)} prints differently on the fast path ({fast_printed[:200]!r}) and the "
                             f"reference path ({ref_printed[:200]!r})", where=where)
    if _rules(fast_warnings) != _rules(ref_warnings):
        raise ShadowMismatch(
            f"the fast path and the reference path of {_name(kernel)} report different diagnostics: fast "
            f"path warned {_rules(fast_warnings)}, reference path {_rules(ref_warnings)}", where=where)
    if fast_error is None and config.nan_fill:  # (without the fill, never-written memory is garbage)
        _compare("output", fast, ref, kernel, where)
        _compare("input", [a for a in arrays if isinstance(a, np.ndarray)],
                 [a for a in before if isinstance(a, np.ndarray)], kernel, where, after_run=True)
    for w in fast_warnings:  # (through the file's registry: a repeated warning shows as often as without shadowing)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                               registry=_registries.setdefault(w.filename, {}))
    if fast_error is not None:
        raise fast_error
    return fast


# (the reference run is the kernel's second run: a kernel body that changes Python state outside
# itself, and not through the objects _KernelState restores, fails there for its own reasons)
_RERUN_HINT = (". If the kernel's Python code changes state outside the kernel (a module-level allocator or "
               "counter), its second run differs for that reason: shadow mode needs kernels that can run twice")

# Python's default warning filter shows a warning once per location and module registry; the fast run's
# warnings are recorded under "always" and re-issued here, one registry per file standing for its module's.
_registries: dict = {}


class _KernelState:
    """The attributes of the objects the kernel's code names (its globals and closure cells), saved
    before the fast run: the reference run starts from them, and the fast run's state is put back
    after it, so the reference run is the same launch again and the process continues as after one
    launch. Why: kernels keep Python state across launches, e.g. the nki-samples attention
    tutorial's module-level ``SBufAllocator``, whose offset each launch advances."""

    def __init__(self, kernel):
        func = getattr(kernel, "func", kernel)
        self._objects = [obj for obj in _named_objects(func) if _has_plain_state(obj)]
        self._before = [self._snapshot(obj) for obj in self._objects]

    @staticmethod
    def _snapshot(obj):
        try:
            return copy.deepcopy(vars(obj))
        except Exception:  # noqa: BLE001 - an object that cannot be copied is left as it is
            return None

    def _restore(self, states):
        for obj, state in zip(self._objects, states):
            if state is not None:
                vars(obj).clear()
                vars(obj).update(copy.deepcopy(state))

    @contextlib.contextmanager
    def as_before(self):
        """Run the block with the saved state, then put back the state found on entry."""
        after = [self._snapshot(obj) for obj in self._objects]
        self._restore(self._before)
        try:
            yield
        finally:
            self._restore(after)


def _named_objects(func) -> list:
    """The distinct objects ``func``'s code (nested functions included) reads by global name or
    from its closure."""
    code = getattr(func, "__code__", None)
    if code is None:
        return []
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    scope = getattr(func, "__globals__", {})
    found = [scope[n] for n in sorted(names) if n in scope]
    found += [cell.cell_contents for cell in (func.__closure__ or ()) if _filled(cell)]
    return list({id(o): o for o in found}.values())


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _has_plain_state(obj) -> bool:
    """An instance of a user class with attributes (not a module, function, class or the simulator's
    own objects)."""
    if isinstance(obj, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type, np.ndarray)):
        return False
    module = getattr(type(obj), "__module__", "") or ""
    if module.split(".")[0] in ("builtins", "nki_kernels", "nki", "neuronxcc", "numpy", "functools"):
        return False
    return isinstance(getattr(obj, "__dict__", None), dict)


def _copies(arrays) -> list:
    """Copies of the array arguments, one per distinct array: an array passed twice stays one array
    (NumPy multiplies ``a.T @ a`` of one buffer by another routine, which rounds differently)."""
    memo = {}
    return [memo.setdefault(id(a), np.array(a, copy=True)) if isinstance(a, np.ndarray) else a for a in arrays]


def _attempt(simulate, arrays, outputs, seed):
    printed = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed):
        warnings.simplefilter("always")
        try:
            return simulate(arrays, outputs, seed), None, list(caught), printed.getvalue()
        except Exception as e:  # noqa: BLE001 - compared, then re-raised
            return None, e, list(caught), printed.getvalue()


def _verdict(error):
    if error is None:
        return None
    if isinstance(error, NKIError):
        return ("NKIError", error.rule)
    return (type(error).__name__,)


def _describe(error) -> str:
    if error is None:
        return "no error"
    text = f"[{error.rule}] {error.detail}" if isinstance(error, NKIError) else str(error)
    return f"{type(error).__name__}: {text.splitlines()[0][:400]}"


def _error_where(error):
    return getattr(error, "where", None)


_RULE = re.compile(r"^\[([^\]]+)\]")


def _rules(caught) -> list:
    return [(_RULE.match(str(w.message)) or [None, type(w.message).__name__])[1] for w in caught]


def _name(kernel) -> str:
    func = getattr(kernel, "func", kernel)
    return getattr(func, "__qualname__", repr(kernel))


def _leaves(value, path=()):
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _compare(what, fast, ref, kernel, where, after_run=False):
    """Raise :class:`ShadowMismatch` unless ``fast`` and ``ref`` hold the same structure, shapes,
    dtypes and bits."""
    fl, rl = list(_leaves(fast)), list(_leaves(ref))
    if [p for p, _ in fl] != [p for p, _ in rl]:
        raise ShadowMismatch(f"{_name(kernel)} returns {len(fl)} value(s) on the fast path and {len(rl)} on the "
                             "reference path", where=where)
    for (path, a), (_, b) in zip(fl, rl):
        label = f"{what} {'/'.join(map(str, path)) or '0'}" + (" (written by the kernel)" if after_run else "")
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            plain = (int, float, bool, str, bytes, type(None))
            same = (type(a) is type(b) and (a.tobytes() == b.tobytes() if isinstance(a, np.generic)
                                           else a == b if isinstance(a, plain) else True))
            if not same:  # (other objects -- a kernel returning a tile -- are compared by type)
                raise ShadowMismatch(f"{label} of {_name(kernel)}: fast path {a!r}, reference path {b!r}", where=where)
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ShadowMismatch(f"{label} of {_name(kernel)}: fast path {a.shape} {a.dtype}, reference path "
                                 f"{b.shape} {b.dtype}", where=where)
        ab, bb = np.ascontiguousarray(a), np.ascontiguousarray(b)
        if ab.tobytes() == bb.tobytes():
            continue
        diff = (ab.reshape(-1).view(np.uint8).reshape(ab.size, -1) != bb.reshape(-1).view(np.uint8).reshape(bb.size, -1)).any(1)
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), a.shape)) if a.ndim else ()
        raise ShadowMismatch(
            f"{label} of {_name(kernel)} differs in {int(diff.sum())} of {a.size} elements; first at {first}: "
            f"fast path {ab[first]!r}, reference path {bb[first]!r}", where=where)

