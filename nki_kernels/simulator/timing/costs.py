"""Per-instruction costs, in cycles of the instruction's engine, from the documented formulas.

The formulas are the "Estimated instruction cost" sections of the ``nki.isa`` API pages
(:data:`.hardware.ISA_PAGES`) and the cost models of the architecture guides (``ARCH_V2`` ... in
:mod:`.hardware`); each function names its page. A cost is a function ``(instr, hw) -> cycles``.

Each instruction declares its cost where it is declared, in the instruction registry
(``@instruction(engine="Vector", cost=costs.tensor_tensor)``, kept on its ``Spec`` beside its
engine and batch rules, as JAX keeps a primitive's rules beside the primitive). This module does
not know the registry (it sits below it): the registry hands its table over with
:func:`read_declarations`, and :func:`rule_for` reads an instruction's cost from its declaration.
What has no declaration (a hand-built event, a first-generation op that is not a registry
instruction) gets :data:`UNDECLARED`'s rule or :func:`engine_default`; the scheduler counts those
(``Result.default_costed``), so a missing declaration shows.

``instr`` is duck-typed (any object with the fields of :class:`.model.Instr`), so this module does
not import the model. ``N`` below is ``instr.free_elems``: the elements per partition the engine
streams (of one block: a block dimension is *not* part of it).

DMA instructions are not costed in cycles: their declared cost is :func:`dma_transfers`, which
splits one into per-engine transfers whose time the scheduler books on the DMA engines.
"""

from __future__ import annotations

_ITEMSIZE = {"float32": 4, "fp32": 4, "tfloat32": 4, "tf32": 4, "int32": 4, "uint32": 4, "float16": 2, "fp16": 2,
             "bfloat16": 2, "bf16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1,
             "float8_e4m3": 1, "float8_e5m2": 1, "float8_e3m4": 1, "float8_e4m3fn": 1, "fp8": 1,
             "float8_e4m3fn_x4": 4, "float8_e5m2_x4": 4, "float4_e2m1fn_x4": 2, "float64": 8, "int64": 8}


_SHORT = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "tf32": "tfloat32"}
_NAMES = {}  # name given as a string -> its name (the cost rules ask for the same few on every instruction)


def dtype_name(dtype) -> str:
    """A dtype (NumPy dtype, class, or name such as ``"bf16"``) as a lower-case name."""
    if type(dtype) is str:
        name = _NAMES.get(dtype)
        if name is not None:
            return name
    name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    name = name.lower().replace("nl.", "").replace("np.", "")
    name = _SHORT.get(name, name)
    if type(dtype) is str and len(_NAMES) < 1024:
        _NAMES[dtype] = name
    return name


def itemsize(dtype) -> int:
    """Bytes per element of ``dtype`` (4 for names this table does not know)."""
    return _ITEMSIZE.get(dtype_name(dtype), 4)


def is_half(dtype) -> bool:
    """BF16 / FP16: the types of the Vector and Scalar performance modes."""
    return dtype_name(dtype) in ("bfloat16", "float16")


def is_fp32(dtype) -> bool:
    """FP32 operands: the slow TensorE path (TF32 runs at the BF16 rate)."""
    return dtype_name(dtype) == "float32"


def _spaces(keys):
    return {k[0] for k in keys if k}


def _all_sbuf(ins) -> bool:
    return _spaces(ins.reads) <= {"sbuf"} and _spaces(ins.writes) <= {"sbuf"}


def _vector_speedup(ins, hw, two_inputs=False) -> float:
    """NeuronCore-v3+ VectorE performance mode (trn2 guide, 'Vector Engine Performance Mode'): 4x for
    tensor_copy / tensor_scalar with all tensors in SBUF, BF16/FP16 and contiguous; 2x when not contiguous
    or one side is in PSUM; 2x for tensor_tensor with both inputs in SBUF and all tensors BF16/FP16."""
    top = hw.vector_perf_mode.value
    if top <= 1 or not (is_half(ins.dtype_in) and is_half(ins.dtype_out)):
        return 1.0
    if two_inputs:
        return 2.0 if _spaces(ins.reads) <= {"sbuf"} else 1.0
    if _all_sbuf(ins):
        return top if ins.contiguous else 2.0
    return 2.0 if ins.contiguous else 1.0


def one_input(ins, hw) -> float:
    """Vector / Scalar default (ISA_PAGES, e.g. nki.isa.activation, tensor_scalar): ``max(MIN_II, N)``: one
    input streamed at one element per partition per cycle, at least the minimum initiation interval."""
    return max(hw.min_ii.value, ins.free_elems)


def matmul(ins, hw) -> float:
    """nki.isa.nc_matmul (ISA_PAGES): ``max(min(64, N_stationary), N_moving)`` Tensor cycles for
    FP8/BF16/FP16/TF32 inputs, ``4 *`` that for FP32 (ARCH_V2: "For FP32 input data type, the instruction
    cost is roughly 4x higher"). 64 is MM_INIT_LATENCY. A double-row FP8 (v3) or MX (v4) matmul takes the
    time of a BF16 one with the same output free size: pass that size as ``moving_free``."""
    n_moving = ins.moving_free or ins.free_elems
    cyc = max(min(hw.mm_init_latency.value, ins.stationary_free), n_moving)
    return cyc * (hw.fp32_matmul_factor.value if is_fp32(ins.dtype_in) else 1.0)


def transpose(ins, hw) -> float:
    """nki.isa.nc_transpose (ISA_PAGES): Tensor ``max(P, min(64, F))``; Vector ``max(MIN_II, N)``. On
    NeuronCore-v3+ the Tensor transpose mode is "2x speedup in FP32 transpose" (ARCH_V3)."""
    if ins.engine == "Tensor":
        cyc = max(ins.partitions, min(hw.mm_init_latency.value, ins.free_elems))
        if is_fp32(ins.dtype_in):
            cyc *= hw.fp32_matmul_factor.value / (2.0 if hw.version >= 3 else 1.0)
        return cyc
    return one_input(ins, hw)


def tensor_tensor(ins, hw) -> float:
    """nki.isa.tensor_tensor (ISA_PAGES), Vector: ``max(MIN_II, N)`` when one input is in PSUM and the other
    in SBUF, or both in SBUF with all-BF16 add/multiply/subtract on contiguous data; ``max(MIN_II, 2N)``
    otherwise ("If there are two input tiles, the instruction can execute in roughly 2N cycles", ARCH_V2).
    On GpSimd see :func:`_gpsimd_default`."""
    if ins.engine == "GpSimd":
        return gpsimd_default(ins, hw)
    n = ins.free_elems
    spaces = [k[0] for k in ins.reads if k]
    one_psum = "psum" in spaces and "sbuf" in spaces
    fast_bf16 = (set(spaces) <= {"sbuf"} and is_half(ins.dtype_in) and is_half(ins.dtype_out)
                 and ins.op in ("add", "multiply", "subtract") and ins.contiguous)
    per = 1 if (one_psum or fast_bf16) else 2
    return max(hw.min_ii.value, per * n / _vector_speedup(ins, hw, two_inputs=True))


def copy_like(ins, hw) -> float:
    """nki.isa.tensor_copy / tensor_scalar (ISA_PAGES): ``max(MIN_II, N)`` cycles; with the v3+ Vector
    performance mode (ARCH_V3) or the v4 ScalarE performance mode ("up to 2x performance uplift for
    BF16/FP16", ARCH_V4) divided accordingly."""
    if ins.engine == "GpSimd":
        return gpsimd_default(ins, hw)
    speed = 1.0
    if ins.engine == "Vector":
        speed = _vector_speedup(ins, hw)
    elif ins.engine == "Scalar" and is_half(ins.dtype_in) and is_half(ins.dtype_out):
        speed = hw.scalar_perf_mode.value
    return max(hw.min_ii.value, ins.free_elems / speed)


def activation(ins, hw) -> float:
    """nki.isa.activation (ISA_PAGES): ``max(MIN_II, N)`` Scalar cycles."""
    return one_input(ins, hw)


def activation_reduce(ins, hw) -> float:
    """nki.isa.activation_reduce / tensor_scalar_reduce: :func:`activation`'s ``max(MIN_II, N)`` plus
    ``MIN_II`` for the accumulator read-out (ISA_PAGES; ARCH_V2: "ActReadAccumulator ... roughly 64
    ScalarE cycles")."""
    return one_input(ins, hw) + hw.min_ii.value


def memset(ins, hw) -> float:
    """nki.isa.memset (ISA_PAGES): zero into BF16/FP16 ``max(MIN_II, N/2)``, else ``max(MIN_II, N)``
    (``op="zero"`` marks a zero fill)."""
    if ins.engine == "GpSimd":
        return hw.gpsimd_start.value + ins.free_elems
    half = ins.op == "zero" and is_half(ins.dtype_out)
    return max(hw.min_ii.value, ins.free_elems / (2 if half else 1))


def tensor_reduce(ins, hw) -> float:
    """nki.isa.tensor_reduce (ISA_PAGES): ``N/2`` for BF16 in and out with add/max, else ``N`` (at least
    MIN_II)."""
    fast = is_half(ins.dtype_in) and is_half(ins.dtype_out) and ins.op in ("add", "max", "maximum")
    return max(hw.min_ii.value, ins.free_elems / (2 if fast else 1))


def tensor_tensor_scan(ins, hw) -> float:
    """nki.isa.tensor_tensor_scan (ISA_PAGES): ``max(MIN_II, 2N)`` Vector cycles (two inputs)."""
    return two_inputs(ins, hw)


def scalar_tensor_tensor(ins, hw) -> float:
    """nki.isa.scalar_tensor_tensor (ISA_PAGES): ``max(MIN_II, 2N)``; ``N`` for BF16 subtract-then-multiply."""
    if is_half(ins.dtype_in) and ins.op == "subtract_multiply":
        return one_input(ins, hw)
    return two_inputs(ins, hw)


def reciprocal(ins, hw) -> float:
    """nki.isa.reciprocal (ISA_PAGES): ``max(MIN_II, 8N)`` Vector cycles."""
    return max(hw.min_ii.value, 8 * ins.free_elems)


def bn_aggr(ins, hw) -> float:
    """nki.isa.bn_aggr (ISA_PAGES): ``max(MIN_II, 13*(N/3))`` Vector cycles."""
    return max(hw.min_ii.value, 13 * ins.free_elems / 3)


def dynamic_copy(ins, hw) -> float:
    """nki.isa.tensor_copy_dynamic_* (ISA_PAGES): ``max(MIN_II_DYNAMIC, N)``, MIN_II_DYNAMIC roughly 600."""
    return max(600.0, ins.free_elems)


def gpsimd_start(ins, hw) -> float:
    """nki.isa.iota / affine_select (ISA_PAGES): ``GPSIMD_START + N`` GpSimd cycles, GPSIMD_START ~150."""
    return hw.gpsimd_start.value + ins.free_elems


def gpsimd_default(ins, hw) -> float:
    """GpSimd has "no rule-of-thumb" (ARCH_V2); its SBUF read interface delivers "up to 32-bit per
    partition ... per cycle", so each input streams one element per partition per cycle after the start-up:
    ``GPSIMD_START + n_inputs * N``."""
    return hw.gpsimd_start.value + max(1, ins.n_inputs) * ins.free_elems


def two_inputs(ins, hw) -> float:
    """Vector with two tensor inputs and no rule of its own: ``max(MIN_II, 2N)`` ("If there are two input
    tiles, the instruction can execute in roughly 2N cycles", ARCH_V2)."""
    return max(hw.min_ii.value, 2 * ins.free_elems)


def engine_default(ins, hw) -> float:
    """The documented default of the instruction's engine, for an instruction whose page gives no cost of
    its own (the newer instructions: their pages have no "Estimated instruction cost" section): Tensor
    :func:`matmul`'s issue interval; GpSimd :func:`gpsimd_default`; Vector with two inputs
    :func:`two_inputs`; otherwise :func:`one_input`, ``max(MIN_II, N)``. A declaration that names it says
    so on purpose (``cost=costs.engine_default``)."""
    if ins.engine == "Tensor":
        return matmul(ins, hw)
    if ins.engine == "GpSimd":
        return gpsimd_default(ins, hw)
    if ins.engine == "Vector" and ins.n_inputs >= 2:
        return two_inputs(ins, hw)
    return one_input(ins, hw)


def not_scheduled(ins, hw) -> float:
    """The cost of an instruction the model does not schedule: those that synchronise the logical cores
    of a launch (``core_barrier``, ``sendrecv``): the model times one NeuronCore, so a wait for another
    core has no figure here (the recorder does not hand Sync-engine instructions to the scheduler); 0
    cycles if one is."""
    return 0.0


# Costs of first-generation ops that are not registry instructions (the front end's own functions in
# isa.py): the recorder names them by their API name.
UNDECLARED = {"tensor_copy_dynamic_src": dynamic_copy, "tensor_copy_dynamic_dst": dynamic_copy}

_declared = {}  # the instruction registry's table (name -> Spec with a .cost), see read_declarations


def read_declarations(table) -> None:
    """Read instruction costs from ``table`` (name -> declaration with a ``cost`` attribute): the
    instruction registry calls this once with its table, which it keeps filling as instructions are
    declared."""
    global _declared
    _declared = table


def declared_cost(name):
    """The cost function declared with instruction ``name`` (``None``: not declared, or no cost)."""
    spec = _declared.get(name)
    return getattr(spec, "cost", None) if spec is not None else None


def rule_for(name):
    """``(cost function, declared)`` of the instruction called ``name``: its declaration's cost, else
    :data:`UNDECLARED`'s, else :func:`engine_default` (``declared`` is False for the last two)."""
    c = declared_cost(name)
    if c is not None:
        return c, True
    return UNDECLARED.get(name, engine_default), False


def instruction_cycles(ins, hw) -> float:
    """Cycles ``ins`` occupies its engine (``ins.engine``): its own ``cost`` if the event carries one, else
    its declared cost (:func:`rule_for`). Excludes the static overhead of a dependent instruction, which
    the scheduler adds."""
    rule = getattr(ins, "cost", None) or rule_for(ins.name)[0]
    return float(rule(ins, hw))


# ----------------------------------------------------------------------------------------------------------
# DMA

def dma_bandwidth(ins, hw) -> float:
    """Bytes/s one DMA engine moves for ``ins``: the engine's peak, capped by its share of the core's HBM
    bandwidth, times the documented efficiency of accumulate (``op="accumulate"``) and transpose DMAs."""
    bw = min(hw.dma_engine_bw.value, hw.hbm_bw_core.value / hw.dma_engines.value)
    if ins.op == "accumulate":
        bw *= hw.dma_rmw_efficiency.value
    if ins.name == "dma_transpose" or ins.op == "transpose":
        bw *= hw.dma_transpose_efficiency.value
    return bw


def dma_transfers(ins, hw, first_partition=0):
    """Split DMA ``ins`` into per-engine transfers: a list of ``(dma_engine, bytes)``.

    The DMA overview: "each DMA transfer is by default parallelized up to 16 DMA engines, depending on the
    shape", each engine "responsible for moving data for eight SBUF partitions"; its [4, 4096] example uses
    one engine, its [128, 128] example all 16. So an access of ``partitions`` rows starting at
    ``first_partition`` uses the engines of the partition groups it touches, one transfer each, unless the
    recorder gives ``transfers`` (then that many, round-robin over those engines).
    """
    ppe = int(hw.dma_partitions_per_engine.value)
    n_dma = int(hw.dma_engines.value)
    rows = max(1, ins.partitions)
    lo = (first_partition // ppe) % n_dma
    span = min(n_dma, (first_partition % ppe + rows + ppe - 1) // ppe)
    engines = [(lo + i) % n_dma for i in range(span)]
    count = ins.transfers or len(engines)
    each = ins.nbytes / count
    return [(engines[i % len(engines)], each) for i in range(count)]


dma_transfers.dma_split = True  # (marks a DMA cost: the scheduler calls it as (ins, hw, first_partition))


def dma_transfer_times(nbytes, bw, hw):
    """``(occupancy, latency)`` of one transfer of ``nbytes`` on one DMA engine at ``bw`` B/s.

    The fixed cost (~1300 ns per transfer, DMA bandwidth guide) is pipelined with the data of other
    transfers on the engine: the engine starts a transfer at most every ``fixed`` seconds and streams at
    most ``bw`` bytes/s, so it is occupied ``max(fixed, nbytes/bw)``; one transfer completes
    ``fixed + nbytes/bw`` after it starts. This reproduces the shape of the DMA overview's "DMA Throughput
    varying Bytes per Partition" figure (throughput proportional to bytes per partition below ~1 KiB, near
    peak from 4 KiB) and the performance guide's "larger than 32KiB to achieve ideal bandwidth".
    """
    data = nbytes / bw
    fixed = hw.dma_fixed.value
    return max(fixed, data), fixed + data


def ceil_div(a, b):
    """Integer ceiling of ``a / b``."""
    return -(-a // b)


__all__ = [
    "UNDECLARED",
    "activation",
    "activation_reduce",
    "bn_aggr",
    "ceil_div",
    "copy_like",
    "declared_cost",
    "dynamic_copy",
    "engine_default",
    "gpsimd_default",
    "gpsimd_start",
    "matmul",
    "memset",
    "not_scheduled",
    "one_input",
    "read_declarations",
    "reciprocal",
    "rule_for",
    "scalar_tensor_tensor",
    "tensor_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "transpose",
    "two_inputs",
    "dma_bandwidth",
    "dma_transfer_times",
    "dma_transfers",
    "dtype_name",
    "instruction_cycles",
    "is_fp32",
    "is_half",
    "itemsize",
]
