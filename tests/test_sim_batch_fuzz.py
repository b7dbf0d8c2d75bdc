"""Random kernels against NumPy; a grid's programs batched and one at a time.

The simulator runs a grid's programs (:mod:`nki_kernels.simulator.vectorize`) as one batched NumPy
program where it can, with the per-program path as the reference. Hand-written tests cover the
cases someone thought of; here a generator writes kernels of both API generations out of loads,
element-wise and per-partition ops, reductions, activations, matmuls and stores, with rows taken
forwards or backwards (first generation: also over a ragged last block, loads and stores masked).
The body runs once per program of a grid, or once per iteration of an ``nl.affine_range`` loop
(which may also accumulate matmuls across the loop and accumulate or write regions into tiles made
before it). NumPy, running the same program (its own source, generated beside the kernel), must
give the same values within float32 rounding; a grid kernel runs both batched and one program at a
time, and the two must give the same bits.

Some kernels break the contract on purpose (iterations or programs storing to the same HBM rows;
a tile carried to the next iteration through a Python variable): they must be rejected with
``[loop_carried]`` (grids: ``[race]``, batched or not the same error).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import random
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nki_kernels.simulator import NKIError, config
from nki_kernels.simulator.launch import _bind, _unwrap, normalize_grid, run_programs

P = 128
W = 128  # columns of the input x [R * 128, W] and of the main output
WIDTHS = (32, 64, 128)
OPS = ("add", "subtract", "multiply", "maximum", "minimum")
_serial = itertools.count()


@dataclasses.dataclass
class Program:
    """A random kernel: its source, NumPy's source of the same computation, and how to launch it."""

    gen: str  # "gen1" (neuronxcc.nki) or "standalone" (nki, dst= instructions)
    mode: str  # "loop" (an affine_range over R iterations) or "grid" (R programs)
    iters: int
    rows: int  # rows of x and of the main output: iters * 128, or fewer (a ragged last block, masked)
    invalid: str | None  # the contract break planted, if any: "store" or "carry"
    kernel_src: str
    numpy_src: str


class _Writer:
    """Builds a kernel's and NumPy's source statement by statement, keeping the tiles' widths."""

    def __init__(self, rnd: random.Random, gen: str, mode: str, iters: int, ragged: int | None = None):
        self.rnd, self.gen, self.mode, self.R = rnd, gen, mode, iters
        self.ragged = ragged  # rows of x when its last block is partial (first generation: masked accesses)
        self.k, self.n = [], []  # loop-body lines: kernel, NumPy
        self.tiles = []  # (name, width) of the body's tiles so far
        self.outputs = []  # HBM outputs [R * 128, W] that statements add (each written whole)
        self.count = 0

    # -- operands ---------------------------------------------------------------------------------
    def rows(self, forwards: bool) -> str:
        first = "i * 128" if forwards else f"({self.R - 1} - i) * 128"
        return f"{first}:{first} + 128"

    def block(self, tensor: str, forwards: bool, c0: int, width: int) -> tuple[str, str]:
        """(kernel access, NumPy access) of a [128, width] block of rows of ``tensor``; with ragged
        rows, by index arrays with a mask (``, mask=...`` follows the access in the kernel)."""
        np_access = f"{tensor}[{self.rows(forwards)}, {c0}:{c0 + width}]"
        if self.ragged is None:
            return np_access, np_access
        first = "i * 128" if forwards else f"({self.R - 1} - i) * 128"
        ip, jf = f"ip{self.count}_{len(self.k)}", f"jf{self.count}_{len(self.k)}"
        self.k.append(f"{ip}, {jf} = nl.mgrid[0:128, 0:{width}]")
        return f"{tensor}[{first} + {ip}, {c0} + {jf}], mask=({first} + {ip} < {self.ragged})", np_access

    def operand(self, width: int) -> str | None:
        """A tile (or a column window of a wider one) of ``width`` columns, if any is that wide."""
        wide = [(t, w) for t, w in self.tiles if w >= width and (w == 1) == (width == 1)]
        if not wide:
            return None
        t, w = self.rnd.choice(wide)
        if w == width:
            return t
        c0 = self.rnd.randrange(0, w - width + 1, 32)
        return f"{t}[:, {c0}:{c0 + width}]"

    def new(self, width: int) -> str:
        name = f"t{self.count}"
        self.count += 1
        self.tiles.append((name, width))
        if self.gen == "standalone":
            self.k.append(f"{name} = nl.ndarray((128, {width}), dtype=nl.float32, buffer=nl.sbuf)")
        return name

    # -- statements -------------------------------------------------------------------------------
    def load(self, forwards: bool | None = None, width: int | None = None):
        width = width or self.rnd.choice(WIDTHS)
        c0 = self.rnd.randrange(0, W - width + 1, 32)
        if forwards is None and self.rnd.random() < 0.2:
            src = f"y[:, {c0}:{c0 + width}]"  # the same rows in every iteration
        else:
            fw = self.rnd.random() < 0.6 if forwards is None else forwards
            src, np_src = self.block("x", fw, c0, width)
            t = self.new(width)
            self.k.append(f"{t} = nl.load({src})" if self.gen == "gen1" else f"nisa.dma_copy(dst={t}, src={src})")
            self.n.append(f"{t} = {np_src}.copy()")
            return
        t = self.new(width)
        self.k.append(f"{t} = nl.load({src})" if self.gen == "gen1" else f"nisa.dma_copy(dst={t}, src={src})")
        self.n.append(f"{t} = {src}.copy()")

    def binary(self):
        width = self.rnd.choice([w for _, w in self.tiles if w > 1])
        a, b = self.operand(width), self.operand(width)
        op = self.rnd.choice(OPS)
        t = self.new(width)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.{op}({a}, {b})")
        else:
            self.k.append(f"nisa.tensor_tensor(dst={t}, data1={a}, data2={b}, op=nl.{op})")
        self.n.append(f"{t} = np.{op}({a}, {b})")

    def scalar(self):
        width = self.rnd.choice([w for _, w in self.tiles if w > 1])
        a = self.operand(width)
        c, d = self.rnd.choice((0.5, -1.5, 2.0, 0.75)), self.rnd.choice((0.25, -1.0, 3.0))
        t = self.new(width)
        if self.gen == "gen1":
            self.k.append(f"{t} = {a} * {c} + {d}")
        else:
            self.k.append(f"nisa.tensor_scalar(dst={t}, data={a}, op0=nl.multiply, operand0={c}, "
                          f"op1=nl.add, operand1={d})")
        self.n.append(f"{t} = {a} * np.float32({c}) + np.float32({d})")

    def reduce(self):
        width = self.rnd.choice([w for _, w in self.tiles if w > 1])
        a = self.operand(width)
        op, np_op = self.rnd.choice((("sum", "add"), ("max", "maximum")))
        t = self.new(1)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.{op}({a}, axis=1, keepdims=True)")
        else:
            self.k.append(f"nisa.tensor_reduce(dst={t}, op=nl.{np_op if op == 'sum' else 'maximum'}, "
                          f"data={a}, axis=1, keepdims=True)")
        self.n.append(f"{t} = np.{np_op}.reduce({a}, axis=1, keepdims=True)")

    def per_partition(self):
        s = self.operand(1)
        width = self.rnd.choice([w for _, w in self.tiles if w > 1])
        a = self.operand(width)
        t = self.new(width)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.multiply({a}, {s})")
        else:
            self.k.append(f"nisa.tensor_scalar(dst={t}, data={a}, op0=nl.multiply, operand0={s})")
        self.n.append(f"{t} = {a} * {s}")

    def exp(self):
        width = self.rnd.choice([w for _, w in self.tiles if w > 1])
        a = self.operand(width)
        t = self.new(width)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.exp({a} * 0.125)")
        else:
            self.k.append(f"nisa.activation(dst={t}, op=nl.exp, data={a}, scale=0.125)")
        self.n.append(f"{t} = np.exp({a} * np.float32(0.125))")

    def load_by_index(self):
        """A load addressed by index arrays (``nl.mgrid``) instead of slices (first generation), or
        through ``nl.ds`` slices (standalone)."""
        width = self.rnd.choice(WIDTHS)
        c0 = self.rnd.randrange(0, W - width + 1, 32)
        fw = self.rnd.random() < 0.6
        first = "i * 128" if fw else f"({self.R - 1} - i) * 128"
        t = self.new(width)
        if self.gen == "gen1":
            self.k.append(f"ip{t}, jf{t} = nl.mgrid[0:128, 0:{width}]")
            self.k.append(f"{t} = nl.load(x[{first} + ip{t}, {c0} + jf{t}])")
        else:
            self.k.append(f"nisa.dma_copy(dst={t}, src=x[nl.ds({first}, 128), nl.ds({c0}, {width})])")
        self.n.append(f"{t} = x[{self.rows(fw)}, {c0}:{c0 + width}].copy()")

    def round_bf16(self):
        """Values rounded to bfloat16 and back (a cast on the way in, fp32 math after)."""
        width = self.rnd.choice([w for _, w in self.tiles if w > 1])
        a = self.operand(width)
        t = self.new(width)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.copy(nl.copy({a}, dtype=nl.bfloat16), dtype=nl.float32)")
        else:
            h = f"h{t}"
            self.k += [f"{h} = nl.ndarray((128, {width}), dtype=nl.bfloat16, buffer=nl.sbuf)",
                       f"nisa.tensor_copy(dst={h}, src={a})", f"nisa.tensor_copy(dst={t}, src={h})"]
        self.n.append(f"{t} = {a}.astype(ml_dtypes.bfloat16).astype(np.float32)")

    def transpose(self):
        """A 128x128 block transposed (partition and free axes swapped)."""
        a = self.operand(128)
        if a is None:
            return self.load()
        t = self.new(128)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.transpose({a})")
        else:
            self.k += [f"p{t} = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)",
                       f"nisa.nc_transpose(dst=p{t}, data={a})", f"nisa.tensor_copy(dst={t}, src=p{t})"]
        self.n.append(f"{t} = {a}.T.copy()")

    def matmul(self):
        """One matmul whose [128, n] result the iteration copies out of PSUM."""
        a = self.operand(128)
        if a is None:
            return self.load()
        n = self.rnd.choice([w for _, w in self.tiles if w > 1])
        b = self.operand(n)
        t = self.new(n)
        if self.gen == "gen1":
            self.k.append(f"{t} = nl.copy(nisa.nc_matmul({a}, {b}))")
        else:
            self.k += [f"p{t} = nl.ndarray((128, {n}), dtype=nl.float32, buffer=nl.psum)",
                       f"nisa.nc_matmul(dst=p{t}, stationary={a}, moving={b})",
                       f"nisa.tensor_copy(dst={t}, src=p{t})"]
        self.n.append(f"{t} = {a}.T @ {b}")

    def inner_affine(self):
        """An inner ``affine_range`` loop over column windows: load, scale, store to ``out2``."""
        if "out2" in self.outputs:
            return self.load()
        self.outputs.append("out2")
        wj = self.rnd.choice((32, 64))
        c = self.rnd.choice((0.5, -2.0))
        rows = self.rows(self.rnd.random() < 0.5)
        win = f"j * {wj}:j * {wj} + {wj}"
        if self.gen == "gen1":
            self.k += [f"for j in nl.affine_range({W // wj}):",
                       f"    u = nl.load(x[{rows}, {win}])",
                       f"    nl.store(out2[{rows}, {win}], value=u * {c})"]
        else:
            self.k += [f"for j in nl.affine_range({W // wj}):",
                       f"    u = nl.ndarray((128, {wj}), dtype=nl.float32, buffer=nl.sbuf)",
                       f"    nisa.dma_copy(dst=u, src=x[{rows}, nl.ds(j * {wj}, {wj})])",
                       f"    v = nl.ndarray((128, {wj}), dtype=nl.float32, buffer=nl.sbuf)",
                       f"    nisa.tensor_scalar(dst=v, data=u, op0=nl.multiply, operand0={c})",
                       f"    nisa.dma_copy(dst=out2[{rows}, nl.ds(j * {wj}, {wj})], src=v)"]
        self.n += [f"for j in range({W // wj}):", f"    out2[{rows}, {win}] = x[{rows}, {win}] * np.float32({c})"]

    def inner_sequential(self):
        """A running sum over column windows in an inner ``sequential_range`` loop."""
        wj = self.rnd.choice((32, 64))
        rows = self.rows(self.rnd.random() < 0.5)
        win = f"j * {wj}:j * {wj} + {wj}"
        t = self.new(wj)
        if self.gen == "gen1":
            self.k += [f"{t} = nl.zeros((128, {wj}), nl.float32, buffer=nl.sbuf)",
                       f"for j in nl.sequential_range({W // wj}):",
                       f"    {t} = nl.add({t}, nl.load(x[{rows}, {win}]))"]
        else:
            self.k += [f"nisa.memset(dst={t}, value=0.0)",
                       f"for j in nl.sequential_range({W // wj}):",
                       f"    u = nl.ndarray((128, {wj}), dtype=nl.float32, buffer=nl.sbuf)",
                       f"    nisa.dma_copy(dst=u, src=x[{rows}, nl.ds(j * {wj}, {wj})])",
                       f"    nisa.tensor_tensor(dst={t}, data1={t}, data2=u, op=nl.add)"]
        self.n += [f"{t} = np.zeros((128, {wj}), np.float32)", f"for j in range({W // wj}):",
                   f"    {t} = {t} + x[{rows}, {win}]"]

    def statement(self):
        kinds = [self.load, self.load_by_index, self.binary, self.scalar, self.reduce, self.exp, self.round_bf16,
                 self.transpose, self.matmul, self.inner_affine, self.inner_sequential]
        if any(w == 1 for _, w in self.tiles):
            kinds.append(self.per_partition)
        if self.ragged is not None:  # (a partial block's other rows are garbage: nothing may mix rows)
            kinds = [k for k in kinds if k not in (self.load_by_index, self.transpose, self.matmul,
                                                  self.inner_affine, self.inner_sequential)]
        self.rnd.choice(kinds)()

    def any_tile(self, width: int) -> str:
        """An operand of ``width`` columns, loading one if no tile is that wide."""
        a = self.operand(width)
        if a is None:
            self.load(width=width)
            a = self.operand(width)
        return a


def random_program(seed: int, gen: str, mode: str) -> Program:
    """A random kernel of API generation ``gen`` over ``mode`` ("loop" or "grid"), with its NumPy twin."""
    rnd = random.Random(seed)
    R = rnd.randint(4, 8)
    invalid = None
    roll = rnd.random()
    if roll < 0.08:
        invalid = "store"
    elif roll < 0.14 and mode == "loop":
        invalid = "carry"
    ragged = R * P - rnd.randint(1, 127) if gen == "gen1" and invalid is None and rnd.random() < 0.3 else None
    w = _Writer(rnd, gen, mode, R, ragged)
    N = ragged or R * P
    out_fw = rnd.random() < 0.7  # the main output's rows: the iteration's own block, or reversed

    pre_k, pre_n, post_k, post_n, outs = [], [], [], [], ["out"]
    hbm = "nl.shared_hbm"

    def out(name, shape):
        pre_k.append(f"{name} = nl.ndarray({shape}, dtype=nl.float32, buffer={hbm})")
        pre_n.append(f"{name} = np.zeros({shape}, np.float32)")
        if name != "out":
            outs.append(name)

    out("out", (N, W))
    if rnd.random() < 0.4:  # a tile made before the loop, read by every iteration
        wo = rnd.choice(WIDTHS)
        c0 = rnd.randrange(0, W - wo + 1, 32)
        if gen == "gen1":
            pre_k.append(f"o0 = nl.load(y[:, {c0}:{c0 + wo}])")
        else:
            pre_k += [f"o0 = nl.ndarray((128, {wo}), dtype=nl.float32, buffer=nl.sbuf)",
                      f"nisa.dma_copy(dst=o0, src=y[:, {c0}:{c0 + wo}])"]
        pre_n.append(f"o0 = y[:, {c0}:{c0 + wo}].copy()")
        w.tiles.append(("o0", wo))
    w.load(forwards=True, width=W)
    for _ in range(rnd.randint(2, 7)):
        w.statement()

    if mode == "loop" and ragged is None:
        if rnd.random() < 0.5:  # a matmul accumulated over the loop, in PSUM
            m, n = rnd.choice((32, 64, 128)), rnd.choice((32, 64, 128))
            out("out_mm", (m, n))
            a, b = w.any_tile(m), w.any_tile(n)
            if gen == "gen1":
                pre_k.append(f"acc = nl.zeros(({m}, {n}), nl.float32, buffer=nl.psum)")
                w.k.append(f"acc += nisa.nc_matmul({a}, {b})")
                post_k.append("nl.store(out_mm, value=nl.copy(acc))")
            else:
                pre_k.append(f"acc = nl.ndarray(({m}, {n}), dtype=nl.float32, buffer=nl.psum)")
                w.k.append(f"nisa.nc_matmul(dst=acc, stationary={a}, moving={b})")
                post_k += [f"res_mm = nl.ndarray(({m}, {n}), dtype=nl.float32, buffer=nl.sbuf)",
                           "nisa.tensor_copy(dst=res_mm, src=acc)", "nisa.dma_copy(dst=out_mm, src=res_mm)"]
            pre_n.append(f"acc = np.zeros(({m}, {n}), np.float32)")
            w.n.append(f"acc += {a}.T @ {b}")
            post_n.append("out_mm[...] = acc")
        if rnd.random() < 0.4:  # an SBUF tile accumulated into
            wa = rnd.choice(WIDTHS)
            out("out_acc", (P, wa))
            a = w.any_tile(wa)
            if gen == "gen1":
                pre_k.append(f"sacc = nl.zeros((128, {wa}), nl.float32, buffer=nl.sbuf)")
                w.k.append(f"sacc += {a}")
                post_k.append("nl.store(out_acc, value=sacc)")
            else:
                pre_k += [f"sacc = nl.ndarray((128, {wa}), dtype=nl.float32, buffer=nl.sbuf)",
                          "nisa.memset(dst=sacc, value=0.0)"]
                w.k.append(f"nisa.tensor_tensor(dst=sacc, data1=sacc, data2={a}, op=nl.add)")
                post_k.append("nisa.dma_copy(dst=out_acc, src=sacc)")
            pre_n.append(f"sacc = np.zeros((128, {wa}), np.float32)")
            w.n.append(f"sacc += {a}")
            post_n.append("out_acc[...] = sacc")
        if rnd.random() < 0.4:  # each iteration's own columns of a tile made before the loop
            wb = rnd.choice((16, 32))
            out("out_buf", (P, R * wb))
            a = w.any_tile(wb)
            region = f"buf[:, i * {wb}:i * {wb} + {wb}]"
            if gen == "gen1":
                pre_k.append(f"buf = nl.ndarray((128, {R * wb}), dtype=nl.float32, buffer=nl.sbuf)")
                w.k.append(f"{region} = nl.copy({a})")
                post_k.append("nl.store(out_buf, value=buf)")
            else:
                pre_k.append(f"buf = nl.ndarray((128, {R * wb}), dtype=nl.float32, buffer=nl.sbuf)")
                w.k.append(f"nisa.tensor_copy(dst={region}, src={a})")
                post_k.append("nisa.dma_copy(dst=out_buf, src=buf)")
            pre_n.append(f"buf = np.zeros((128, {R * wb}), np.float32)")
            w.n.append(f"{region} = {a}")
            post_n.append("out_buf[...] = buf")

    if invalid == "carry":
        wc = rnd.choice(WIDTHS)
        prev_src = f"y[:, 0:{wc}]"
        if gen == "gen1":
            pre_k.append(f"prev = nl.load({prev_src})")
        else:
            pre_k += [f"prev = nl.ndarray((128, {wc}), dtype=nl.float32, buffer=nl.sbuf)",
                      f"nisa.dma_copy(dst=prev, src={prev_src})"]
        a = w.any_tile(wc)
        t = w.new(wc)
        w.k.append(f"{t} = nl.add(prev, {a})" if gen == "gen1" else
                   f"nisa.tensor_tensor(dst={t}, data1=prev, data2={a}, op=nl.add)")
        w.k.append(f"prev = {t}")
    if invalid == "store":  # every iteration (program) stores its own rows of x to the same rows
        ws = rnd.choice(WIDTHS)
        out("out_same", (P, ws))
        a = "t0" if ws == W else f"t0[:, 0:{ws}]"  # (identical values from every program would be no race)
        w.k.append(f"nl.store(out_same, value={a})" if gen == "gen1" else f"nisa.dma_copy(dst=out_same, src={a})")

    for name in w.outputs:
        out(name, (R * P, W))
    # the main output: every iteration writes its whole block, column window by column window
    c = 0
    while c < W:
        width = rnd.choice([v for v in WIDTHS if c + v <= W])
        a = w.any_tile(width)
        dst, np_dst = w.block("out", out_fw, c, width)
        w.k.append(f"nl.store({dst}, value={a})" if gen == "gen1" else f"nisa.dma_copy(dst={dst}, src={a})")
        w.n.append(f"{np_dst} = {a}")
        c += width

    ind = "    "
    if gen == "gen1":
        head = ["from nki_kernels.simulator import nki", "from nki_kernels.simulator import language as nl",
                "from nki_kernels.simulator import isa as nisa"]
    else:
        head = ["from nki_kernels.simulator import standalone as nki", "nl, nisa = nki.language, nki.isa"]
    body = [ind * 2 + line for line in w.k] if mode == "loop" else [ind + line for line in w.k]
    loop = [ind + f"for i in nl.affine_range({R}):"] if mode == "loop" else [ind + "i = nl.program_id(0)"]
    ret = ind + "return " + ", ".join(outs)
    kernel_src = "\n".join(head + ["", "", "@nki.jit", "def kernel(x, y):"] + [ind + s for s in pre_k] + loop
                           + body + [ind + s for s in post_k] + [ret]) + "\n"
    pad = [f"x = np.concatenate([x, np.zeros(({R * P - N}, {W}), np.float32)])",
           f"out = np.zeros(({R * P}, {W}), np.float32)"] if ragged else []
    crop = [f"out = out[:{N}]"] if ragged else []
    numpy_src = "\n".join(["import ml_dtypes", "import numpy as np", "", "", "def reference(x, y):"]
                          + [ind + s for s in pre_n + pad] + [ind + f"for i in range({R}):"]
                          + [ind * 2 + s for s in w.n] + [ind + s for s in post_n + crop] + [ret]) + "\n"
    return Program(gen, mode, R, N, invalid, kernel_src, numpy_src)


def _module(src: str, tmp_path, stem: str):
    # (in a file of its own, a failure's traceback and the simulator's reports name the kernel's lines)
    path = tmp_path / f"{stem}_{next(_serial)}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def _launch(kernel, grid, arrays, batched: bool):
    """(outputs as a tuple, or the NKIError raised; programs run batched)."""
    saved, config.vectorize = config.vectorize, batched
    try:
        args, kw = _bind(kernel, arrays, {})
        result, state = run_programs(kernel, normalize_grid(grid), args, kw)
        got = _unwrap(result)
        return (got if isinstance(got, tuple) else (got,)), state.batched
    except NKIError as e:
        return e, 0
    finally:
        config.vectorize = saved


def check(prog: Program, tmp_path, data_seed: int = 0) -> int:
    """Run ``prog`` against NumPy (a grid both ways, batched and per program); returns how many
    programs ran batched."""
    kernel = _module(prog.kernel_src, tmp_path, "fuzz_kernel").kernel
    reference = _module(prog.numpy_src, tmp_path, "fuzz_numpy").reference
    rng = np.random.default_rng(data_seed)
    x = rng.standard_normal((prog.rows, W), dtype=np.float32)
    y = rng.standard_normal((P, W), dtype=np.float32)
    grid = prog.iters if prog.mode == "grid" else ()
    ref, _ = _launch(kernel, grid, (x, y), batched=False)
    got, batched = _launch(kernel, grid, (x, y), batched=True) if prog.mode == "grid" else (ref, 0)
    listing = f"\n--- kernel ---\n{prog.kernel_src}"
    if prog.invalid is not None:
        rule = "race" if prog.mode == "grid" else "loop_carried"
        assert isinstance(ref, NKIError) and f"[{rule}]" in str(ref), f"unbatched: {ref!r}{listing}"
        assert isinstance(got, NKIError) and str(got) == str(ref), f"batched: {got!r}{listing}"
        return batched
    assert not isinstance(ref, NKIError), f"valid kernel rejected: {ref}{listing}"
    assert not isinstance(got, NKIError), f"valid kernel rejected when batched: {got}{listing}"
    expect = reference(x, y)
    expect = expect if isinstance(expect, tuple) else (expect,)
    for r, g, e in zip(ref, got, expect):
        np.testing.assert_array_equal(g, r, err_msg=f"batched differs from per-program{listing}")
        finite = np.abs(e[np.isfinite(e)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(r, e, rtol=2e-5, atol=2e-5 * scale, err_msg=f"differs from NumPy{listing}")
    return batched


@pytest.mark.parametrize("mode", ["loop", "grid"])
@pytest.mark.parametrize("gen", ["gen1", "standalone"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1))
def test_random_kernels_match_numpy_and_batched_grids_the_per_program_path(gen, mode, seed, tmp_path):
    check(random_program(seed, gen, mode), tmp_path)


@pytest.mark.parametrize("gen", ["gen1", "standalone"])
def test_the_generator_writes_grids_that_batch(gen, tmp_path):
    # Without this the test above could pass by never batching (the generator drifting into bodies
    # that always fall back); most valid random grid kernels batch.
    progs = [random_program(seed, gen, "grid") for seed in range(40)]
    valid = [p for p in progs if p.invalid is None]
    batched = [check(p, tmp_path) > 0 for p in valid]
    assert len(valid) >= 10 and sum(batched) >= 0.7 * len(valid), (sum(batched), len(valid))
