"""The name a kernel statement assigns a call's result to, read from the kernel's source.

``b = nl.loop_reduce(a, np.add, [k])`` accumulates into the tile ``b`` already holds
(:func:`.language.loop_reduce`), which the call finds through the statement that made it.
"""

from __future__ import annotations

import ast
import linecache

_trees = {}  # source file -> (its text, syntax tree), parsed once per text
_rebinds = {}  # (code, line) -> the name a `name = <call>` statement there rebinds, or None


def _tree(filename):
    """The syntax tree of the source file ``filename`` as linecache holds it, parsed once per file
    and text; None without source."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    hit = _trees.get(filename)
    if hit is None or hit[0] != source:
        hit = _trees[filename] = (source, ast.parse(source))
    return hit[1]


def rebound_name(frame):
    """The name that the statement running at ``frame``'s line assigns a call's result to, when it
    is one plain name (``b = nl.loop_reduce(...)``); None otherwise or without source."""
    key = (frame.f_code, frame.f_lineno)
    if key in _rebinds:
        return _rebinds[key]
    name = None
    try:
        tree = _tree(frame.f_code.co_filename)
    except SyntaxError:
        tree = None
    if tree is not None:
        line = frame.f_lineno
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and node.lineno <= line <= node.end_lineno
                    and isinstance(node.value, ast.Call) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                name = node.targets[0].id
                break
    _rebinds[key] = name
    return name
