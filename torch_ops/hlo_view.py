"""Turn the HLO that torch-xla executes into the HLO the Neuron compiler would receive.

On an XLA device that cannot execute ``AwsNeuronCustomNativeKernel`` (here
XLA:CPU), each kernel result is the *shim*
``slice(concatenate(sim, custom_call), dimensions={0})[0:n]`` (for bf16/fp8
``convert(slice(concatenate(sim_f32, convert(custom_call))))``): ``sim`` is a
parameter holding the simulator's values, so XLA's algebraic simplifier folds
the slice to ``sim`` and dead-code elimination drops the custom-call before
code generation, while the unoptimised graph still has the custom-call in its
place (see :mod:`torch_ops.xla`). :func:`neuron_view` undoes the shim in the
HLO text: uses of the shim become uses of the custom-call (or its
``get-tuple-element``), the shim's instructions and the ``sim`` parameter
disappear, and the remaining parameters are renumbered, with the module's
``entry_computation_layout`` and the ENTRY signature rebuilt to match. Text
without shims comes back unchanged.

Pure text processing: no torch-xla needed, so it is tested on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nki_kernels.custom_call import TARGET

_INSTR = re.compile(r"^(\s*)(ROOT\s+)?%([\w.\-]+)\s*=\s*(.*)$")
_NAME = r"%[\w.\-]+"
_LAYOUT = re.compile(r"\{[^{}]*\}")


@dataclass
class Instruction:
    """One HLO instruction line: its name, result type text, opcode, operand names, attributes."""

    index: int
    name: str
    type: str
    opcode: str
    operands: list
    args: str
    attrs: str


def _balanced(text: str, start: int) -> int:
    """Index just past the parenthesised group opening at ``text[start] == '('``."""
    depth = 0
    quoted = False
    for i in range(start, len(text)):
        ch = text[i]
        if ch == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced parentheses in HLO text: {text[start:start + 80]!r}")


def parse_instruction(line: str, index: int = 0) -> Instruction | None:
    """Parse an HLO instruction line; None for anything else (headers, braces, blank lines)."""
    m = _INSTR.match(line)
    if not m:
        return None
    rest = m.group(4)
    if rest.startswith("("):
        end = _balanced(rest, 0)
    else:
        end = rest.find(" ")
    type_text, rest = rest[:end], rest[end:].lstrip()
    paren = rest.find("(")
    opcode = rest[:paren]
    close = _balanced(rest, paren)
    args = rest[paren + 1:close - 1]
    attrs = rest[close:].lstrip(", ")
    operands = [n[1:] for n in re.findall(_NAME, args)]
    return Instruction(index, m.group(3), type_text, opcode, operands, args, attrs)


def _attr(attrs: str, key: str) -> str | None:
    m = re.search(key + r'=("((?:[^"\\]|\\.)*)"|[^,\s]+)', attrs)
    if not m:
        return None
    return m.group(2) if m.group(2) is not None else m.group(1)


def custom_calls(hlo_text: str, target: str = TARGET) -> list[dict]:
    """The custom-calls to ``target`` in ``hlo_text``: name, result type, operand types, api_version,
    backend_config (one dict each, in text order)."""
    found = []
    for i, line in enumerate(hlo_text.splitlines()):
        ins = parse_instruction(line, i)
        if ins is None or ins.opcode != "custom-call" or _attr(ins.attrs, "custom_call_target") != target:
            continue
        operand_types = [t.strip().rsplit(" ", 1)[0] for t in _split_top(ins.args)] if ins.args else []
        found.append({"name": ins.name, "result_type": ins.type, "operand_types": operand_types,
                      "api_version": _attr(ins.attrs, "api_version"),
                      "backend_config": _attr(ins.attrs, "backend_config")})
    return found


def _split_top(text: str) -> list[str]:
    """Split at commas not nested in brackets/braces/parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur))
    return parts


def _entry_bounds(lines: list[str]) -> tuple[int, int]:
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ENTRY "))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "}")
    return start, end


def _is_our_custom_call(ins: Instruction, by_name: dict) -> bool:
    if ins.opcode == "get-tuple-element" and len(ins.operands) == 1:
        ins = by_name.get(ins.operands[0])
        if ins is None:
            return False
    return ins.opcode == "custom-call" and _attr(ins.attrs, "custom_call_target") == TARGET


@dataclass
class Shim:
    """One simulator shim: uses of ``head`` become uses of ``result`` (the kernel's output);
    ``dropped`` instructions go; ``param`` (the simulator values) goes if nothing else uses it."""

    head: Instruction
    result: Instruction
    dropped: list
    param: Instruction


def _find_shims(instrs: list[Instruction], sim_parameters) -> list:
    """Every simulator shim: ``slice(concatenate(P, G))[0:n]`` with ``G`` the kernel result, or
    the widened form ``convert(slice(concatenate(P, convert(G)))[0:n])`` used for bf16/fp8."""
    by_name = {i.name: i for i in instrs}
    users: dict = {}
    for i in instrs:
        for o in i.operands:
            users.setdefault(o, []).append(i)
    shims = []
    for s in instrs:
        if s.opcode != "slice" or len(s.operands) != 1 or not (_attr(s.attrs, "slice") or "").startswith("{[0:"):
            continue
        c = by_name.get(s.operands[0])
        if c is None or c.opcode != "concatenate" or _attr(c.attrs, "dimensions") != "{0}" or len(c.operands) != 2:
            continue
        p, g = (by_name.get(n) for n in c.operands)
        if p is None or g is None or p.opcode != "parameter" or p.type != s.type:
            continue
        if sim_parameters is not None and int(p.args) not in sim_parameters:
            continue
        head, dropped = s, [s, c]
        if g.opcode == "convert" and len(g.operands) == 1:  # widened form
            widen = g
            g = by_name.get(widen.operands[0])
            outer = users.get(s.name, [])
            if g is None or len(outer) != 1 or outer[0].opcode != "convert" or outer[0].type != g.type:
                continue
            head, dropped = outer[0], [outer[0], s, c, widen]
        elif g.type != s.type:
            continue
        if _is_our_custom_call(g, by_name):
            shims.append(Shim(head, g, dropped, p))
    return shims


def _rename(line: str, mapping: dict) -> str:
    if not mapping:
        return line
    return re.sub(r"(?<![\w.\-])%([\w.\-]+)(?![\w.\-])", lambda m: "%" + mapping.get(m.group(1), m.group(1)), line)


def neuron_view(hlo_text: str, sim_parameters=None) -> str:
    """``hlo_text`` with every simulator shim removed: the graph as the Neuron compiler would get it.

    ``sim_parameters``: the ENTRY parameter numbers known to hold simulator
    results (:func:`torch_ops.xla_graph.neuron_hlo` knows them from the tensor ids).
    With ``None`` the pattern alone decides, which a graph of the user's own
    could match only by concatenating a parameter with a raw kernel result
    and slicing off the first half.
    """
    lines = hlo_text.splitlines()
    if not any(ln.startswith("ENTRY ") for ln in lines):
        return hlo_text
    start, end = _entry_bounds(lines)
    instrs = [i for i in (parse_instruction(lines[k], k) for k in range(start + 1, end)) if i is not None]
    shims = _find_shims(instrs, sim_parameters)
    if not shims:
        return hlo_text

    uses = {sh.head.name: sh.result.name for sh in shims}
    dropped = {i.index for sh in shims for i in sh.dropped}
    body = {k: _rename(lines[k], uses) for k in range(start + 1, end) if k not in dropped}
    for sh in shims:
        pattern = re.compile(r"(?<![\w.\-])%" + re.escape(sh.param.name) + r"(?![\w.\-])")
        if not any(pattern.search(ln) for k, ln in body.items() if k != sh.param.index):
            del body[sh.param.index]

    params = sorted((i for i in instrs if i.opcode == "parameter" and i.index in body), key=lambda i: int(i.args))
    renames, new_params = {}, []
    for new, ins in enumerate(params):
        m = re.fullmatch(r"p(\d+)\.(\d+)", ins.name)
        name = f"p{new}.{m.group(2)}" if m else ins.name
        renames[ins.name] = name
        body[ins.index] = re.sub(r"parameter\(\d+\)", f"parameter({new})", body[ins.index])
        new_params.append((name, ins.type))
    body = {k: _rename(ln, renames) for k, ln in body.items()}

    out = list(lines[:start]) + [_entry_header(lines[start], new_params)]
    out += [body[k] for k in sorted(body)] + list(lines[end:])
    out = [_module_header(ln, new_params) if ln.startswith("HloModule ") else ln for ln in out]
    text = "\n".join(out)
    return text + "\n" if hlo_text.endswith("\n") else text


def _entry_header(line: str, params: list) -> str:
    """``ENTRY %name (p0: T, ...) -> R {`` with the parameter list replaced."""
    open_ = line.index("(")
    close = _balanced(line, open_)
    sig = ", ".join(f"{name}: {_LAYOUT.sub('', t)}" for name, t in params)
    return f"{line[:open_]}({sig}){line[close:]}"


def _module_header(line: str, params: list) -> str:
    """``HloModule m, entry_computation_layout={(T, ...)->R}`` with the parameter layouts replaced."""
    key = "entry_computation_layout={"
    at = line.find(key)
    if at < 0:
        return line
    open_ = at + len(key)
    close = _balanced(line, open_)
    return line[:open_] + "(" + ", ".join(t for _, t in params) + ")" + line[close:]
