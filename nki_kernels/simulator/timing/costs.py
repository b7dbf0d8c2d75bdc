"""Per-instruction costs, in cycles of the instruction's engine, from the documented formulas.

The formulas are the "Estimated instruction cost" sections of the ``nki.isa`` API pages
(:data:`.hardware.ISA_PAGES`) and the cost models of the architecture guides (``ARCH_V2`` ... in
:mod:`.hardware`); each rule names its page. A rule is a function ``(instr, hw) -> cycles``
registered for one or more instruction names with :func:`cost_rule`; an instruction without a rule
gets its engine's default (one input:
``max(MIN_II, N)``; two inputs on Vector: ``max(MIN_II, 2N)``; GpSimd: ``GPSIMD_START + N`` per
input). The instruction registry can register its own rules next to its instructions.

``instr`` is duck-typed (any object with the fields of :class:`.model.Instr`), so this module does
not import the model. ``N`` below is ``instr.free_elems``: the elements per partition the engine
streams (of one block: a block dimension is *not* part of it).

DMA instructions are not costed in cycles; :func:`dma_transfers` splits one into per-engine
transfers whose time the scheduler books on the DMA engines.
"""

from __future__ import annotations

_RULES = {}

_ITEMSIZE = {"float32": 4, "fp32": 4, "tfloat32": 4, "tf32": 4, "int32": 4, "uint32": 4, "float16": 2, "fp16": 2,
             "bfloat16": 2, "bf16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1,
             "float8_e4m3": 1, "float8_e5m2": 1, "float8_e3m4": 1, "float8_e4m3fn": 1, "fp8": 1,
             "float8_e4m3fn_x4": 4, "float8_e5m2_x4": 4, "float4_e2m1fn_x4": 2, "float64": 8, "int64": 8}


def dtype_name(dtype) -> str:
    """A dtype (NumPy dtype, class, or name such as ``"bf16"``) as a lower-case name."""
    name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    name = name.lower().replace("nl.", "").replace("np.", "")
    return {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "tf32": "tfloat32"}.get(name, name)


def itemsize(dtype) -> int:
    """Bytes per element of ``dtype`` (4 for names this table does not know)."""
    return _ITEMSIZE.get(dtype_name(dtype), 4)


def is_half(dtype) -> bool:
    """BF16 / FP16: the types of the Vector and Scalar performance modes."""
    return dtype_name(dtype) in ("bfloat16", "float16")


def is_fp32(dtype) -> bool:
    """FP32 operands: the slow TensorE path (TF32 runs at the BF16 rate)."""
    return dtype_name(dtype) == "float32"


def cost_rule(*names):
    """Register ``fn(instr, hw) -> cycles`` as the cost of the instructions ``names``."""
    def deco(fn):
        """Register ``fn`` under every name."""
        for n in names:
            _RULES[n] = fn
        return fn
    return deco


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


def _one_input(ins, hw) -> float:
    return max(hw.min_ii.value, ins.free_elems)


@cost_rule("nc_matmul", "matmul", "nc_matmul_mx")
def _matmul(ins, hw) -> float:
    """nki.isa.nc_matmul (ISA_PAGES): ``max(min(64, N_stationary), N_moving)`` Tensor cycles for
    FP8/BF16/FP16/TF32 inputs, ``4 *`` that for FP32 (ARCH_V2: "For FP32 input data type, the instruction
    cost is roughly 4x higher"). 64 is MM_INIT_LATENCY. A double-row FP8 (v3) or MX (v4) matmul takes the
    time of a BF16 one with the same output free size: pass that size as ``moving_free``."""
    n_moving = ins.moving_free or ins.free_elems
    cyc = max(min(hw.mm_init_latency.value, ins.stationary_free), n_moving)
    return cyc * (hw.fp32_matmul_factor.value if is_fp32(ins.dtype_in) else 1.0)


@cost_rule("nc_transpose", "transpose")
def _transpose(ins, hw) -> float:
    """nki.isa.nc_transpose (ISA_PAGES): Tensor ``max(P, min(64, F))``; Vector ``max(MIN_II, N)``. On
    NeuronCore-v3+ the Tensor transpose mode is "2x speedup in FP32 transpose" (ARCH_V3)."""
    if ins.engine == "Tensor":
        cyc = max(ins.partitions, min(hw.mm_init_latency.value, ins.free_elems))
        if is_fp32(ins.dtype_in):
            cyc *= hw.fp32_matmul_factor.value / (2.0 if hw.version >= 3 else 1.0)
        return cyc
    return _one_input(ins, hw)


@cost_rule("tensor_tensor")
def _tensor_tensor(ins, hw) -> float:
    """nki.isa.tensor_tensor (ISA_PAGES), Vector: ``max(MIN_II, N)`` when one input is in PSUM and the other
    in SBUF, or both in SBUF with all-BF16 add/multiply/subtract on contiguous data; ``max(MIN_II, 2N)``
    otherwise ("If there are two input tiles, the instruction can execute in roughly 2N cycles", ARCH_V2).
    On GpSimd see :func:`_gpsimd_default`."""
    if ins.engine == "GpSimd":
        return _gpsimd_default(ins, hw)
    n = ins.free_elems
    spaces = [k[0] for k in ins.reads if k]
    one_psum = "psum" in spaces and "sbuf" in spaces
    fast_bf16 = (set(spaces) <= {"sbuf"} and is_half(ins.dtype_in) and is_half(ins.dtype_out)
                 and ins.op in ("add", "multiply", "subtract") and ins.contiguous)
    per = 1 if (one_psum or fast_bf16) else 2
    return max(hw.min_ii.value, per * n / _vector_speedup(ins, hw, two_inputs=True))


@cost_rule("tensor_copy", "tensor_scalar", "copy")
def _copy_like(ins, hw) -> float:
    """nki.isa.tensor_copy / tensor_scalar (ISA_PAGES): ``max(MIN_II, N)`` cycles; with the v3+ Vector
    performance mode (ARCH_V3) or the v4 ScalarE performance mode ("up to 2x performance uplift for
    BF16/FP16", ARCH_V4) divided accordingly."""
    if ins.engine == "GpSimd":
        return _gpsimd_default(ins, hw)
    speed = 1.0
    if ins.engine == "Vector":
        speed = _vector_speedup(ins, hw)
    elif ins.engine == "Scalar" and is_half(ins.dtype_in) and is_half(ins.dtype_out):
        speed = hw.scalar_perf_mode.value
    return max(hw.min_ii.value, ins.free_elems / speed)


@cost_rule("activation", "activation_reduce", "tensor_scalar_reduce")
def _activation(ins, hw) -> float:
    """nki.isa.activation: ``max(MIN_II, N)`` Scalar cycles; activation_reduce and tensor_scalar_reduce add
    ``MIN_II`` for the accumulator read-out (ISA_PAGES; ARCH_V2: "ActReadAccumulator ... roughly 64 ScalarE
    cycles")."""
    extra = hw.min_ii.value if ins.name in ("activation_reduce", "tensor_scalar_reduce") else 0.0
    return _one_input(ins, hw) + extra


@cost_rule("memset")
def _memset(ins, hw) -> float:
    """nki.isa.memset (ISA_PAGES): zero into BF16/FP16 ``max(MIN_II, N/2)``, else ``max(MIN_II, N)``
    (``op="zero"`` marks a zero fill)."""
    if ins.engine == "GpSimd":
        return hw.gpsimd_start.value + ins.free_elems
    half = ins.op == "zero" and is_half(ins.dtype_out)
    return max(hw.min_ii.value, ins.free_elems / (2 if half else 1))


@cost_rule("tensor_reduce")
def _tensor_reduce(ins, hw) -> float:
    """nki.isa.tensor_reduce (ISA_PAGES): ``N/2`` for BF16 in and out with add/max, else ``N`` (at least
    MIN_II)."""
    fast = is_half(ins.dtype_in) and is_half(ins.dtype_out) and ins.op in ("add", "max", "maximum")
    return max(hw.min_ii.value, ins.free_elems / (2 if fast else 1))


@cost_rule("tensor_tensor_scan", "scalar_tensor_tensor")
def _two_n(ins, hw) -> float:
    """nki.isa.tensor_tensor_scan ``max(MIN_II, 2N)``; scalar_tensor_tensor ``2N`` (``N`` for BF16
    subtract-then-multiply) (ISA_PAGES)."""
    if ins.name == "scalar_tensor_tensor" and is_half(ins.dtype_in) and ins.op == "subtract_multiply":
        return max(hw.min_ii.value, ins.free_elems)
    return max(hw.min_ii.value, 2 * ins.free_elems)


@cost_rule("reciprocal")
def _reciprocal(ins, hw) -> float:
    """nki.isa.reciprocal (ISA_PAGES): ``max(MIN_II, 8N)`` Vector cycles."""
    return max(hw.min_ii.value, 8 * ins.free_elems)


@cost_rule("bn_aggr")
def _bn_aggr(ins, hw) -> float:
    """nki.isa.bn_aggr (ISA_PAGES): ``max(MIN_II, 13*(N/3))`` Vector cycles."""
    return max(hw.min_ii.value, 13 * ins.free_elems / 3)


@cost_rule("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")
def _dynamic_copy(ins, hw) -> float:
    """nki.isa.tensor_copy_dynamic_* (ISA_PAGES): ``max(MIN_II_DYNAMIC, N)``, MIN_II_DYNAMIC roughly 600."""
    return max(600.0, ins.free_elems)


@cost_rule("iota", "affine_select")
def _gpsimd_start(ins, hw) -> float:
    """nki.isa.iota / affine_select (ISA_PAGES): ``GPSIMD_START + N`` GpSimd cycles, GPSIMD_START ~150."""
    return hw.gpsimd_start.value + ins.free_elems


def _gpsimd_default(ins, hw) -> float:
    """GpSimd has "no rule-of-thumb" (ARCH_V2); its SBUF read interface delivers "up to 32-bit per
    partition ... per cycle", so each input streams one element per partition per cycle after the start-up:
    ``GPSIMD_START + n_inputs * N``."""
    return hw.gpsimd_start.value + max(1, ins.n_inputs) * ins.free_elems


def instruction_cycles(ins, hw) -> float:
    """Cycles ``ins`` occupies its engine (``ins.engine``), from its rule or the engine's default. Excludes
    the static overhead of a dependent instruction, which the scheduler adds."""
    rule = _RULES.get(ins.name)
    if rule is not None:
        return float(rule(ins, hw))
    if ins.engine == "Tensor":
        return _matmul(ins, hw)
    if ins.engine == "GpSimd":
        return _gpsimd_default(ins, hw)
    if ins.engine == "Vector" and ins.n_inputs >= 2:
        return max(hw.min_ii.value, 2 * ins.free_elems)
    return _one_input(ins, hw)


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
    "ceil_div",
    "cost_rule",
    "dma_bandwidth",
    "dma_transfer_times",
    "dma_transfers",
    "dtype_name",
    "instruction_cycles",
    "is_fp32",
    "is_half",
    "itemsize",
]
