"""Per-rule switches for the simulator's diagnostics: ``error`` (default), ``warn`` or ``off``.

Rules (see :mod:`nki_kernels.simulator.diagnostics` for what each checks):

* ``race``: two SPMD programs write overlapping HBM elements, or one reads what another writes.
* ``loop_carried``: an ``affine_range`` iteration reads a value written by another iteration.
* ``uninit``: reading an ``nl.ndarray`` tile or HBM output region before anything was written to it.
* ``capacity``: live SBUF / PSUM bytes per partition of a program exceed the hardware.
* ``operand``: an op's documented operand rules (memory, dtype, partition broadcasting).
* ``removed``: a construct the current NKI release removed from current-API kernels (NKI 0.7.0:
  ``for i in nl.dynamic_range(...)`` and ``while reg:`` loops). ``warn`` by default: kernels written
  for earlier releases (nki-library's among them) keep running as those releases ran them, with a
  warning that NKI 0.7.0's compiler refuses them; ``error`` refuses them as that compiler does
  (see :mod:`.specialization`).

Set them in code::

    from nki_kernels.simulator import config
    config.set("race", "warn")
    with config.override(uninit="off", loop_carried="warn"):
        ...

or from the environment, read at import: ``NKI_SIM_CHECKS="race=warn,uninit=off"``
(``all=off`` sets every rule). ``config.thorough`` (env ``NKI_SIM_THOROUGH=1``)
turns on element-exact (bool mask) bookkeeping for HBM accesses that are not
boxes; by default such accesses are compared by their element indices only
when their bounding boxes overlap, which gives the same answers.

``config.vectorize`` (env ``NKI_SIM_VECTORIZE=0`` turns it off) lets a launch run
programs that do not interact as one batched NumPy program
(:mod:`nki_kernels.simulator.vectorize`); results and diagnostics are the same,
only faster. Thorough mode and profiling always run one program at a time.

``config.nan_fill`` (env ``NKI_SIM_NAN_FILL=0`` turns it off) fills memory handed out
uninitialised (``nl.ndarray`` tiles and HBM tensors, placed SBUF/PSUM storage) with NaN for
floats and 4 for integers, as the official NKI CPU simulator does ("fills all newly allocated
tensors with sentinel values"), so a read of never-written memory poisons the result even with
the ``uninit`` check off.

``config.shadow`` (env ``NKI_SIM_SHADOW=1``, pytest ``--nki-shadow``) runs every launch twice, on its
fast path and on the reference path (:func:`reference_path`: no vectorising, caches emptied), and
raises ``[shadow]`` where outputs, in-place writes, verdicts, warnings or prints differ
(:mod:`nki_kernels.simulator.shadow`).

``config.blas_threads`` (env ``NKI_SIM_BLAS_THREADS``: ``auto``, the default, or a count; 0 leaves it
alone) is the number of threads NumPy's BLAS uses while a launch runs; ``auto`` shares the process's
CPUs among the machine's pytest-xdist workers, at least one, fixed for the process
(:mod:`nki_kernels.simulator.blas` says why).
"""

from __future__ import annotations

import contextlib
import os
import warnings

RULES = ("race", "loop_carried", "uninit", "capacity", "operand", "removed")
MODES = ("error", "warn", "off")
_ALIASES = {"warning": "warn", "warnings": "warn", "err": "error", "raise": "error", "ignore": "off",
            "none": "off", "0": "off", "1": "error", "on": "error"}

_modes = {r: "error" for r in RULES}
_modes["removed"] = "warn"  # (see the module docstring)
thorough = os.environ.get("NKI_SIM_THOROUGH", "") not in ("", "0")
nan_fill = os.environ.get("NKI_SIM_NAN_FILL", "1").strip().lower() not in ("0", "off", "false", "no")
vectorize = os.environ.get("NKI_SIM_VECTORIZE", "1").strip().lower() not in ("0", "off", "false", "no")

shadow = os.environ.get("NKI_SIM_SHADOW", "").strip().lower() not in ("", "0", "off", "false", "no")


@contextlib.contextmanager
def reference_path():
    """Run the simulator's reference path inside: every fast path (grid vectorising) off."""
    global vectorize
    saved = vectorize
    vectorize = False
    try:
        yield
    finally:
        vectorize = saved


def _blas_threads(text: str):
    if text.lower() == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"NKI_SIM_BLAS_THREADS={text!r}: expected 'auto' or a thread count >= 0 (0 leaves BLAS "
                         "as it is)")
    return n


blas_threads = _blas_threads(os.environ.get("NKI_SIM_BLAS_THREADS", "auto").strip() or "auto")


class NKIWarning(UserWarning):
    """A diagnostic reported in ``warn`` mode (same text as the error would have)."""


def _mode(mode: str) -> str:
    m = _ALIASES.get(str(mode).strip().lower(), str(mode).strip().lower())
    if m not in MODES:
        raise ValueError(f"diagnostic mode {mode!r} is not one of {MODES}")
    return m


def _rules(rule: str):
    if rule == "all":
        return RULES
    if rule not in RULES:
        raise ValueError(f"unknown diagnostic rule {rule!r}; rules: {', '.join(RULES)} (or 'all')")
    return (rule,)


def set(rule: str, mode: str) -> None:  # noqa: A001 - the documented name
    """Set ``rule`` (or ``"all"``) to ``"error"``, ``"warn"`` or ``"off"``."""
    m = _mode(mode)
    for r in _rules(rule):
        _modes[r] = m


def get(rule: str) -> str:
    """The current mode of ``rule``."""
    return _modes[_rules(rule)[0]]


def modes() -> dict:
    """A copy of every rule's mode."""
    return dict(_modes)


def enabled(rule: str) -> bool:
    """Whether ``rule`` is checked at all (error or warn)."""
    return _modes[rule] != "off"


@contextlib.contextmanager
def override(**rules):
    """Temporarily set modes, e.g. ``with config.override(race="off", all="warn"):``."""
    saved = dict(_modes)
    try:
        if "all" in rules:
            set("all", rules.pop("all"))
        for r, m in rules.items():
            set(r, m)
        yield
    finally:
        _modes.clear()
        _modes.update(saved)


def parse(spec: str) -> dict:
    """Parse ``"race=warn,uninit=off"`` into ``{rule: mode}`` (validating both)."""
    out = {}
    for part in spec.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"NKI_SIM_CHECKS entry {part!r} is not rule=mode")
        r, m = (s.strip() for s in part.split("=", 1))
        _rules(r)
        out[r] = _mode(m)
    return out


def load_env(env=None) -> None:
    """Apply ``NKI_SIM_CHECKS`` from ``env`` (default ``os.environ``)."""
    spec = (os.environ if env is None else env).get("NKI_SIM_CHECKS", "")
    parsed = parse(spec)
    if "all" in parsed:
        set("all", parsed.pop("all"))
    for r, m in parsed.items():
        set(r, m)


def report(rule: str, error) -> None:
    """Raise ``error`` (an NKIError) or warn with its text, as ``rule``'s mode says."""
    mode = _modes[rule]
    if mode == "error":
        raise error
    if mode == "warn":
        warnings.warn(str(error), NKIWarning, stacklevel=3)


load_env()
