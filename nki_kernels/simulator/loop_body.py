"""Which ``nl.affine_range`` loop bodies may run batched, decided from their source.

:mod:`.loop_batch` runs the iterations of a loop together by calling the loop's body once, as a
function of a symbolic loop index, instead of running it once per iteration. That is the same
program only when the body is *self-contained* (:func:`site`):

* its statements are assignments, calls, nested loops and branches on values from outside (a
  kernel's static options); no ``while``, ``return``, ``break``, comprehension or ``lambda``;
* a name it binds is read nowhere else in the function but where another loop binds it first
  (after a batch the user's frame holds an early iteration's values);
* it assigns into no tile from outside but region by region (``buf[i] = ...``,
  ``buf[ip, i, jf] += ...``) or by accumulating (``acc += x``), and writes through no name bound
  from such a tile;
* every name it reads from outside holds, when the loop starts, a value without Python state of
  its own (:func:`free_values`): a number, a string, a dtype, an HBM tensor or view, a module or
  function of NumPy or of the simulator, a frozen dataclass of such values, or a tile. A list, a
  NumPy array, a user function or any other object keeps the loop per iteration: the body could
  change it, and running the body once instead of once per iteration would change the program;
* its file compiles to the code running (an edited file is not the loop running).

The body is then compiled from the source as ``fn(index, *free values)`` (:class:`Body`).
"""

from __future__ import annotations

import ast
import builtins
import copy
import linecache
import types

import numpy as np

from .core import Access, HBMTensor, Tile

# Builtins a self-contained body may call: pure functions of their arguments.
_PURE_BUILTINS = frozenset({"range", "len", "min", "max", "abs", "int", "float", "bool", "slice", "tuple", "list",
                            "dict", "zip", "enumerate", "divmod", "round", "isinstance", "getattr", "sum", "reversed",
                            "sorted", "type", "str", "all", "any", "Ellipsis", "None", "True", "False"})
# Packages whose modules and functions have no Python state a loop body could change.
_INERT_PACKAGES = frozenset({"numpy", "math", "ml_dtypes", "nki_kernels", "neuronxcc", "nki"})
_STATEMENTS = (ast.Assign, ast.AugAssign, ast.Expr, ast.For, ast.If, ast.Pass)
_FORBIDDEN_EXPRESSIONS = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr,
                          ast.Yield, ast.YieldFrom, ast.Await)

_sites = {}  # (code object, line of the for statement) -> Body, or None where the loop is not self-contained
_modules = {}  # source file -> (its text, syntax tree, code), parsed once per text
class Body:
    """A self-contained affine loop body compiled as ``fn(index, *free values)``."""

    def __init__(self, fn, free, writes=frozenset(), tests=frozenset()):
        self.fn = fn
        self.free = free  # names the body reads from outside, in ``fn``'s argument order
        self.writes = writes  # those of them that are tiles the body assigns into
        self.tests = tests  # those of them that ``if`` statements of the body test (no tiles)
        self.plan = {}  # iterations left after the reference ones -> 0 where they do not batch
        self.chunk = 1 << 30  # iterations one batch may hold (lowered when a batch outgrew BATCH_BYTES)


def site(frame):
    """The :class:`Body` of the ``for`` statement running in ``frame`` when its loop is
    self-contained (see the module text), else None. Decided once per statement."""
    key = (frame.f_code, frame.f_lineno)
    try:
        return _sites[key]
    except KeyError:
        pass
    try:
        body = _compile(frame.f_code, frame.f_lineno)
    except (SyntaxError, ValueError, TypeError):  # (no usable source: exec'd or interactive code)
        body = None
    _sites[key] = body
    return body


def _module(filename):
    """(syntax tree, code) of the source file ``filename`` as linecache holds it, parsed and compiled
    once per file and text; None without source."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return None
    hit = _modules.get(filename)
    if hit is None or hit[0] != source:
        tree = ast.parse(source)
        hit = _modules[filename] = (source, tree, compile(tree, filename, "exec", dont_inherit=True))
    return hit[1], hit[2]


_rebinds = {}  # (code, line) -> the name a `name = <call>` statement there rebinds, or None


def rebound_name(frame):
    """The name that the statement running at ``frame``'s line assigns a call's result to, when it
    is one plain name (``b = nl.loop_reduce(...)``); None otherwise or without source."""
    key = (frame.f_code, frame.f_lineno)
    if key in _rebinds:
        return _rebinds[key]
    name = None
    try:
        parsed = _module(frame.f_code.co_filename)
    except SyntaxError:
        parsed = None
    if parsed is not None:
        line = frame.f_lineno
        for node in ast.walk(parsed[0]):
            if (isinstance(node, ast.Assign) and node.lineno <= line <= node.end_lineno
                    and isinstance(node.value, ast.Call) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                name = node.targets[0].id
                break
    _rebinds[key] = name
    return name


def _compile(code, line):
    parsed = _module(code.co_filename)
    if parsed is None:
        return None
    tree, module = parsed
    running = _code_named(module, code)
    if running is None or not _same_code(running, code):
        return None  # the source is not the code running (edited since it was imported)
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == code.co_name and min([n.lineno] + [d.lineno for d in n.decorator_list])
                 == code.co_firstlineno), None)
    if func is None:
        return None
    loops = [n for n in ast.walk(func) if isinstance(n, ast.For) and n.lineno <= line <= n.iter.end_lineno]
    if len(loops) != 1 or not isinstance(loops[0].target, ast.Name) or loops[0].orelse:
        return None
    loop = copy.deepcopy(loops[0])  # (the scan rewrites `acc += x` into a tile from outside)
    scan = _Scan(loop.target.id)
    if not all(_self_contained(s, scan) for s in loop.body) or scan.writes & scan.own \
            or loop.target.id in scan.writes or scan.aliases_outer_written():
        return None
    own = scan.own
    if not _names_stay_inside(func, loops[0], own):
        return None  # the user's frame would keep a name the body binds: the loop must run as written
    free = sorted({n.id for s in loop.body for n in ast.walk(s)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - own)
    template = ast.parse(f"def _affine_loop_body({', '.join([loop.target.id] + free)}):\n    pass\n")
    template.body[0].body = loop.body
    ast.fix_missing_locations(template)
    namespace = {}
    exec(compile(template, code.co_filename, "exec"), {"__builtins__": builtins}, namespace)  # noqa: S102
    return Body(namespace["_affine_loop_body"], free, scan.writes, scan.tests)


def _names_stay_inside(func, loop, own) -> bool:
    """Whether no code of ``func`` outside ``loop`` can read a value ``loop``'s body bound to a name
    of ``own`` (after a batch the frame holds an early iteration's): every other occurrence of such
    a name is in another loop that binds it first (as its loop variable, or by the first statement
    of its body that mentions it), not around ``loop``, and not in that loop's range expression."""
    if own & {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}:
        return False
    inside = {id(n) for n in ast.walk(loop)}
    covered = {}
    for other in ast.walk(func):
        if not isinstance(other, ast.For) or id(other) in inside or any(n is loop for n in ast.walk(other)):
            continue
        bound = {n.id for n in ast.walk(other.target) if isinstance(n, ast.Name)}
        for name in own:
            if name in bound or _assigned_first(other.body, name):
                covered.setdefault(name, set()).update(
                    id(n) for part in [other.target, *other.body] for n in ast.walk(part))
    return all(id(n) in covered.get(n.id, ()) for n in ast.walk(func)
               if isinstance(n, ast.Name) and n.id in own and id(n) not in inside)


def _assigned_first(body, name) -> bool:
    """Whether the first statement of ``body`` that mentions ``name`` is ``name = <value without it>``."""
    for stmt in body:
        if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt)):
            return (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
                    and not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.value)))
    return False


def _code_named(parent, code):
    """The code object in ``parent`` (recursively) with ``code``'s name and first line."""
    for c in parent.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == code.co_name and c.co_firstlineno == code.co_firstlineno:
                return c
            found = _code_named(c, code)
            if found is not None:
                return found
    return None


def _same_code(a, b) -> bool:
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars, a.co_cellvars) != \
            (b.co_code, b.co_names, b.co_varnames, b.co_freevars, b.co_cellvars) or len(a.co_consts) != len(b.co_consts):
        return False
    return all(_same_code(x, y) if isinstance(x, types.CodeType) and isinstance(y, types.CodeType)
               else type(x) is type(y) and x == y for x, y in zip(a.co_consts, b.co_consts))


class _Scan:
    """What :func:`_self_contained` learns of a body: the names it binds (``own``), the tiles from
    outside it assigns into (``writes``), the names it writes through (``roots``) and what each
    binding is made of (``binds``)."""

    def __init__(self, target):
        self.own = {target}
        self.writes, self.roots, self.binds, self.tests = set(), set(), [], set()

    def aliases_outer_written(self) -> bool:
        """Whether a name the body writes through may view a tile from outside that the body
        assigns into (bound, directly or through other names, from an expression naming it)."""
        tainted, grew = set(), True
        while grew:
            grew = False
            for name, mentioned in self.binds:
                if name not in tainted and mentioned & (self.writes | tainted):
                    tainted.add(name)
                    grew = True
        return bool(tainted & self.roots)


def _names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _self_contained(stmt, scan) -> bool:
    """Whether ``stmt`` is a statement a batched body may hold; records what it binds in ``scan``."""
    if not isinstance(stmt, _STATEMENTS):
        return False
    if any(isinstance(n, _FORBIDDEN_EXPRESSIONS) for n in ast.walk(stmt)):
        return False
    own = scan.own
    if isinstance(stmt, ast.If):
        # a branch on values from outside only (a kernel's static options): the same in every iteration
        names = _names(stmt.test)
        if names & own:
            return False
        scan.tests |= names
        return all(_self_contained(s, scan) for s in stmt.body + stmt.orelse)
    if isinstance(stmt, ast.For):
        if stmt.orelse or not all(isinstance(n, ast.Name) for n in ast.walk(stmt.target)
                                  if not isinstance(n, (ast.Tuple, ast.List, ast.expr_context))):
            return False
        for name in _names(stmt.target):
            own.add(name)
            scan.binds.append((name, _names(stmt.iter)))
        return all(_self_contained(s, scan) for s in stmt.body)
    if isinstance(stmt, (ast.Assign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                if isinstance(n, ast.Name):
                    if isinstance(stmt, ast.AugAssign):
                        if n.id not in own:
                            # `acc += x` into a tile from outside (an accumulation across iterations): in
                            # place, as a tile's += is, so the body is compiled with `acc[...] += x`
                            if not isinstance(stmt.op, ast.Add):
                                return False
                            scan.writes.add(n.id)
                            stmt.target = ast.Subscript(ast.Name(n.id, ast.Load()), ast.Constant(Ellipsis),
                                                        ast.Store())
                            continue
                        scan.roots.add(n.id)
                    own.add(n.id)
                    scan.binds.append((n.id, _names(stmt.value)))
                elif isinstance(n, ast.Subscript):
                    root = n.value
                    while isinstance(root, ast.Subscript):
                        root = root.value
                    if not isinstance(root, ast.Name):
                        return False  # (an attribute's element: an object's state)
                    if root.id in own:
                        scan.roots.add(root.id)
                    else:
                        scan.writes.add(root.id)  # a tile from outside: written region by region
                else:
                    return False
    return True


def _inert(value) -> bool:
    """Whether a value a loop body reads from outside has no Python state the body could change."""
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, complex, str, bytes, slice,
                                                                  np.generic, np.dtype, HBMTensor, Access)):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(_inert(v) for v in value)
    if isinstance(value, types.ModuleType):
        return value.__name__.partition(".")[0] in _INERT_PACKAGES
    if isinstance(value, (Tile, np.ndarray)):
        return False  # on-chip tiles and NumPy arrays hold values a body could change
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc, types.MethodType)):
        module = getattr(value, "__module__", None) or ""
        if isinstance(value, types.MethodType):
            return _inert(value.__self__) and _inert(value.__func__)
        return module.partition(".")[0] in _INERT_PACKAGES or (module == "builtins" and value.__name__ in _PURE_BUILTINS)
    params = getattr(type(value), "__dataclass_params__", None)
    if params is not None and params.frozen:  # a kernel's options record (FlashConfig)
        return all(_inert(getattr(value, f)) for f in type(value).__dataclass_fields__)
    # objects of the simulator's own classes (enums, tile-size records, ...) other than tiles
    return type(value).__module__.partition(".")[0] in _INERT_PACKAGES and not isinstance(value, (list, dict, set))


def free_values(body, frame):
    """The values of ``body``'s free names in ``frame`` (locals, globals, then builtins), or None
    when one is missing, or neither :func:`_inert` nor a tile (which the body may only read: it
    assigns into no tile of its own but its own, which :func:`site` checks)."""
    values = []
    f_locals, f_globals = frame.f_locals, frame.f_globals
    for name in body.free:
        if name in f_locals:
            v = f_locals[name]
        elif name in f_globals:
            v = f_globals[name]
        elif name in _PURE_BUILTINS and hasattr(builtins, name):
            v = getattr(builtins, name)
        else:
            return None
        if not (type(v) is Tile if name in body.writes else _inert(v) or (type(v) is Tile and name not in body.tests)):
            return None
        values.append(v)
    return values
