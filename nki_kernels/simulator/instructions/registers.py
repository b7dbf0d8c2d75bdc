"""Engine registers: virtual scalar registers (``register_alloc`` / ``move`` / ``load`` / ``store``)
and the per-partition accumulation registers behind ``reduce_cmd``.

Virtual registers hold one 32-bit integer each; the simulator knows their value
when the instruction runs, so ``nl.dynamic_range(reg)``, ``nl.fori_loop`` and
``while reg:`` read it at run time, as the engine sequencers do.

Accumulation registers: each engine (Scalar for ``activation``, Vector for
``tensor_scalar_reduce`` / ``range_select`` / ``select_reduce`` ...) keeps one
fp32 register per partition. ``reduce_cmd`` says what an instruction does with
them: ``idle`` leaves them, ``reset`` sets them to the reduction's identity,
``reduce`` accumulates this instruction's reduction onto them, ``reset_reduce``
does both, ``load_reduce`` loads ``reduce_init`` then accumulates. So a chain of
instructions with ``reduce`` really accumulates across instructions.
"""

from __future__ import annotations


import numpy as np

from .. import core
from .. import dtypes as dt
from .. import specialization as _specialization
from .. import transfers as _transfers
from ..core import Access, HBMTensor, Tile, sbuf
from ..errors import NKIError
from .scalars import NkiScalar
from .operands import alu, check_dst, identity_of, reducer, tile_operand, write
from .target import command


class VirtualRegister:
    """A virtual engine register (``nki.isa.VirtualRegister``) holding a 32-bit integer."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = None if value is None else _int32(value, "register value")

    def _get(self, what="register"):
        if self.value is None:
            raise NKIError("register", f"{what} was allocated without a value and read before nisa.register_move / "
                           "register_load wrote it")
        return self.value

    def __int__(self):
        return self._get()

    __index__ = __int__

    def __bool__(self):
        # a register as a Python condition is the dynamic ``while reg:`` loop: "NKI emits a deprecation
        # warning when it encounters ... ``while reg:`` loops" (NKI 0.6.0 release notes), removed by NKI 0.7.0
        # from the default (tracing) specialization (see specialization.removed_dynamic_loop)
        _specialization.removed_dynamic_loop("while reg:", "nl.while_loop(init, body_fun)")
        return self._get() != 0

    def __repr__(self):
        return f"VirtualRegister({self.value})"


def _int32(x, what):
    if isinstance(x, VirtualRegister):
        return x._get()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise NKIError("register", f"{what} must be an integer or a VirtualRegister, got {type(x).__name__}")
    v = int(x)
    if not -2 ** 31 <= v < 2 ** 32:
        raise NKIError("register", f"{what} {v} does not fit a 32-bit register")
    return v


def register_alloc(x=None):
    """Allocate a virtual register, optionally initialised with the integer ``x`` (or a register's value)."""
    return VirtualRegister(x)


def _reg(r, name, op):
    if not isinstance(r, VirtualRegister):
        raise NKIError("register", f"nisa.{op}: {name} must be a register from nisa.register_alloc, got "
                       f"{type(r).__name__}")
    return r


def register_move(dst, src):
    """``dst = src``: a constant integer or another register's value into register ``dst``."""
    _reg(dst, "dst", "register_move").value = _int32(src, "nisa.register_move: src")


def _one_element(t, name, op):
    if int(np.prod(t.shape)) != 1:
        raise NKIError("operand shapes", f"nisa.{op}: {name} has shape {tuple(t.shape)}; it must hold exactly one "
                       "element ([1] or [1, 1])")


def register_load(dst, src):
    """Load the single element of ``src`` (an SBUF tile or HBM tensor, shape [1] / [1, 1]) into ``dst``."""
    d = _reg(dst, "dst", "register_load")
    if isinstance(src, (Access, HBMTensor)):
        acc = src if isinstance(src, Access) else src[...]
        _one_element(acc, "src", "register_load")
        vals = acc.index.read(acc.tensor.data, None, what=acc.tensor.name)
    else:
        t = tile_operand(src, "src", "register_load", (sbuf,))
        _one_element(t, "src", "register_load")
        vals = t.data
    _not_packed(np.asarray(vals).dtype, "src", "register_load")
    v = np.asarray(vals).reshape(-1)[0]
    d.value = int(np.int64(np.rint(v)) if dt.is_float(np.asarray(vals).dtype) else int(v))


def _not_packed(dtype, what, op):
    """The register_load / register_store pages (Neuron 2.33): any NKI dtype "except the packed MX x4 types
    (nl.float8_e5m2_x4, nl.float8_e4m3fn_x4, nl.float4_e2m1fn_x4)": four values in one element are no scalar."""
    if dtype in dt.PACKED_X4:
        raise NKIError("dtype", f"nisa.{op}: {what} has the packed MX dtype {dtype.names[0]}; a register moves one "
                       "value, and a packed element holds several (use an unpacked dtype)")


def register_store(dst, src):
    """Store register ``src``'s value into the single element of ``dst`` (an SBUF tile or HBM tensor)."""
    v = _reg(src, "src", "register_store")._get("nisa.register_store: src")
    if isinstance(dst, (Access, HBMTensor)):
        acc = dst if isinstance(dst, Access) else dst[...]
        _one_element(acc, "dst", "register_store")
        _not_packed(acc.tensor.dtype, "dst", "register_store")
        _transfers.store(acc, np.full(acc.shape, v))
        return
    d = check_dst(dst, "register_store", (sbuf,))
    _one_element(d, "dst", "register_store")
    _not_packed(d.dtype, "dst", "register_store")
    write(d, np.full(d.shape, v), "register_store")


def value_of(x, what):
    """An integer bound: a Python int, a register's value now, or a 32-bit NkiScalar's value (NKI 0.7.0:
    "lower / upper (int, VirtualRegister, or NkiScalar)"; "A bound must be 32-bit")."""
    if isinstance(x, NkiScalar):
        return x.bound(what)
    return _int32(x, what)


# ---------------------------------------------------------------------------
# accumulation registers (reduce_cmd)
# ---------------------------------------------------------------------------
def _bank():
    """The running program's accumulation registers (engine name -> [P, 1] fp32)."""
    return core.current().__dict__.setdefault("_nki_reduce_regs", {})


def accumulate(op, eng, values, parts, reduce_op, reduce_res, cmd, init=None, negate=False):
    """Apply ``reduce_cmd`` ``cmd`` of instruction ``op`` on engine ``eng``: ``values`` are the
    instruction's results ([parts, ...]); ``reduce_res`` ([P, 1], optional) receives the registers
    (negated with ``negate``)."""
    cmd = command(cmd)
    regs = _bank()
    cur = regs.get(eng)
    if cur is None or cur.shape[0] != parts:
        cur = np.zeros((parts, 1), np.float32)
    if cmd in ("reset", "reset_reduce"):
        cur = np.full((parts, 1), identity_of(reduce_op), np.float32)
    if cmd == "load_reduce":
        if init is None:
            raise NKIError("reduce_cmd", f"nisa.{op}: reduce_cmd=load_reduce needs reduce_init (the value to load)")
        if isinstance(init, Tile):
            iv = dt.compute_view(tile_operand(init, "reduce_init", op).data).reshape(-1, 1)
        else:
            iv = np.asarray(init, np.float32).reshape(-1, 1)
        cur = np.broadcast_to(iv.astype(np.float32), (parts, 1)).copy()
    if cmd in ("reduce", "reset_reduce", "load_reduce"):
        part = np.asarray(reducer(reduce_op if reduce_op is not None else np.add)(
            np.asarray(values, np.float32).reshape(parts, -1), axis=1, keepdims=True), np.float32)
        cur = np.asarray(alu(reduce_op if reduce_op is not None else np.add)(cur, part), np.float32)
    regs[eng] = cur
    if reduce_res is not None:
        res = check_dst(reduce_res, op)
        if res.shape[0] != parts:
            raise NKIError("reduce_res shape", f"nisa.{op}: reduce_res {res.shape} needs {parts} partitions (one "
                           "register per partition of the data)")
        write(res, np.broadcast_to(-cur if negate else cur, (parts, int(np.prod(res.shape[1:])) or 1)),
              op, "reduction result ([P, 1])")
