"""Where the kernel is: the source line of the innermost frame outside the simulator.

The checks name the kernel's ``file:line`` in their reports; an instruction's accesses share the
line its call was made on (the thread context's ``site``, found once per instruction).
"""

from __future__ import annotations

import os
import sys

from .errors import _THREADING_FILE, thread_where

_SIM_DIR = os.path.dirname(os.path.abspath(__file__))
_is_sim_file = {}


def where(depth: int = 1):
    """``(file, line, function)`` of the innermost frame outside the simulator (cheap, cached per file)."""
    return where_from(sys._getframe(depth))


def where_from(f):
    """:func:`where` starting the search at frame ``f``."""
    while f is not None:
        fn = f.f_code.co_filename
        sim = _is_sim_file.get(fn)
        if sim is None:
            sim = _is_sim_file[fn] = os.path.abspath(fn).startswith(_SIM_DIR) or fn == _THREADING_FILE
        if not sim:
            return (fn, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return thread_where.fallback or ("<unknown>", 0, "?")  # (a core's thread: its kernel's return)


def fmt_where(w) -> str:
    """``file:line in function`` for a :func:`where` tuple."""
    return f"{w[0]}:{w[1]} in {w[2]}"


def definition(kernel):
    """``file:line in function`` of a kernel's (or function's) ``def`` line, or ``None``."""
    code = getattr(getattr(kernel, "func", kernel), "__code__", None)
    return None if code is None else fmt_where((code.co_filename, code.co_firstlineno, code.co_name))
