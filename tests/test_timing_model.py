"""Tests of the engine-level timing model (nki_kernels/simulator/timing) against hand-computed
expectations.

The expected times are computed here from the documented numbers, restated with their pages, not
read from the model's tables, so a wrong table entry fails too:

* trn1 engine clocks (NKI Trainium/Inferentia2 architecture guide, "Data-path Width ... Frequency"
  table): Tensor 2.8 GHz, Vector 1.12 GHz, Scalar 1.4 GHz, GpSimd 1.4 GHz; trn2 (Trainium2 guide):
  Tensor 2.4, Vector 0.96, Scalar 1.2 GHz.
* nki.isa cost sections: one-input ops ``max(64, N)`` cycles; tensor_tensor ``max(64, 2N)`` (N when one
  input is in PSUM); nc_matmul ``max(min(64, N_stationary), N_moving)``, fp32 "roughly 4x higher".
* architecture guide: "static instruction overhead of 100 engine cycles" for an instruction that
  depends on the output of the previous one.
* DMA (NKI DMA overview and bandwidth guide): 16 DMA engines per core, 8 partitions per engine,
  17 B/ns per engine on trn1 and 23 B/ns on trn2, "~1300 ns" per transfer.
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

from nki_kernels.simulator.timing import Instr, Operand, Scheduler, core, simulate
from nki_kernels.simulator.timing import model as tmodel

# documented numbers (see the module docstring for the pages)
TENSOR_HZ, VECTOR_HZ, SCALAR_HZ = 2.8e9, 1.12e9, 1.4e9
V3_VECTOR_HZ = 0.96e9
MIN_II, STATIC = 64, 100
DMA_FIXED = 1300e-9
DMA_BW_V2, DMA_BW_V3 = 17e9, 23e9


def sb(ident, p=(0, 128), b=(0, 1024)):
    """An SBUF buffer key."""
    return ("sbuf", ident, (p, b))


def vec(name, src, dst, n=512, **kw):
    return Instr(name, "Vector", free_elems=n, reads=(src,), writes=(dst,), **kw)


def act(src, dst, n=512):
    return Instr("activation", "Scalar", free_elems=n, reads=(src,), writes=(dst,))


def load(ident, dst, rows=128, cols=512, dtype_bytes=2, queue=None, **kw):
    nbytes = rows * cols * dtype_bytes
    return Instr("dma_copy", "DMA", partitions=rows, free_elems=cols, nbytes=nbytes,
                 reads=(("hbm", ident, ((0, rows), (0, cols))),), writes=(dst,), queue=queue, **kw)


def matmul(st, mv, out, n=512, dtype="bfloat16"):
    return Instr("nc_matmul", "Tensor", dtype_in=dtype, dtype_out="float32", free_elems=n, moving_free=n,
                 stationary_free=128, reads=(st, mv), writes=(out,))


# -- engines overlap, dependencies serialise ---------------------------------------------------------------

def test_independent_ops_on_two_engines_overlap():
    r = simulate([vec("tensor_copy", sb(1), sb(2)), act(sb(3), sb(4))])
    v, s = 512 / VECTOR_HZ, 512 / SCALAR_HZ
    assert r.total_s == pytest.approx(max(v, s))
    assert r.start == [0.0, 0.0]


def _raw_two_engines(version=2):
    r = simulate([vec("tensor_copy", sb(1), sb(2)), act(sb(2), sb(3))], version)
    v = 512 / VECTOR_HZ
    # it waited on another engine (a semaphore): no static overhead, the guide's two cases are a run of
    # N << 128 instructions and an instruction reading its own engine's previous result
    s = 512 / SCALAR_HZ
    assert r.start[1] == pytest.approx(v)
    assert r.total_s == pytest.approx(v + s)
    return r


def test_raw_dependency_serialises():
    r = _raw_two_engines()
    assert r.cause[1] == "RAW" and r.pred[1] == 0
    assert r.critical_path() == [0, 1]


def test_planted_bug_ignoring_dependencies_fails_the_raw_test(monkeypatch):
    # the suite catches a scheduler that forgets dependencies
    real = tmodel.Scheduler._deps  # (it still records the accesses: only the waits are forgotten)
    monkeypatch.setattr(tmodel.Scheduler, "_deps", lambda self, *keys: ([],) + real(self, *keys)[1:])
    with pytest.raises(AssertionError):
        _raw_two_engines()


def test_same_engine_dependent_instruction_pays_static_overhead():
    dep = simulate([vec("tensor_copy", sb(1), sb(2)), vec("tensor_copy", sb(2), sb(3))])
    ind = simulate([vec("tensor_copy", sb(1), sb(2)), vec("tensor_copy", sb(4), sb(3))])
    assert ind.total_s == pytest.approx(2 * 512 / VECTOR_HZ)
    assert dep.total_s == pytest.approx((512 + 512 + STATIC) / VECTOR_HZ)


def test_back_to_back_tiny_instructions_pay_static_overhead():
    # "many back-to-back instructions ... with N << 128": the second of two independent 32-element Vector
    # instructions in a row pays the 100 cycles; each costs MIN_II = 64 cycles (nki.isa cost sections)
    tiny = simulate([vec("tensor_copy", sb(1), sb(2), n=32), vec("tensor_copy", sb(4), sb(3), n=32)])
    assert tiny.total_s == pytest.approx((64 + 64 + STATIC) / VECTOR_HZ)
    # 512-element ones do not
    big = simulate([vec("tensor_copy", sb(1), sb(2)), vec("tensor_copy", sb(4), sb(3))])
    assert big.total_s == pytest.approx(2 * 512 / VECTOR_HZ)


def test_zeroed_psum_accumulation_tile_is_no_instruction():
    # trn1 architecture guide: the compiler identifies the "overwrite, accumulate, accumulate, ..." pattern
    # from res_psum = nl.zeros(..., buffer=nl.psum) and the matmul accumulations: the zero fill costs nothing
    acc = ("psum", 1, None)
    zero = Instr("memset", "GpSimd", dtype_out="float32", free_elems=512, writes=(acc,), op="zero")
    r = simulate([zero, matmul(sb(1), sb(2), acc), matmul(sb(1), sb(2), acc)])
    assert r.start[1] == 0.0 and r.total_s == pytest.approx(2 * 512 / TENSOR_HZ)
    assert r.busy_s["GpSimd"] == 0.0 and r.flags["psum_zero_folded"] == 1
    # a zero fill of SBUF is an instruction: GpSimd 150 + N cycles at 1.4 GHz (nki.isa memset on GpSimd)
    sz = simulate([Instr("memset", "GpSimd", dtype_out="float32", free_elems=512, writes=(sb(5),), op="zero")])
    assert sz.total_s == pytest.approx((150 + 512) / 1.4e9)


def test_war_on_a_reused_buffer_waits_for_the_reader():
    # Vector reads buffer 7; the next load into buffer 7 (allocation reuse) waits for that read,
    # a load into another buffer does not
    reader = vec("tensor_tensor", sb(7), sb(8), n=512)  # one SBUF input: max(64, 2N) (not a PSUM pair)
    t_read = 2 * 512 / VECTOR_HZ
    reuse = simulate([reader, load("x", sb(7))])
    fresh = simulate([reader, load("x", sb(9))])
    assert reuse.start[1] == pytest.approx(t_read)
    assert reuse.cause[1] == "WAR"
    assert fresh.start[1] == 0.0


def test_waw_waits_for_the_previous_writer():
    r = simulate([load("x", sb(5)), act(sb(1), sb(5))])
    per_engine = 128 * 512 * 2 / 16
    t_load = DMA_FIXED + per_engine / DMA_BW_V2
    assert r.start[1] == pytest.approx(t_load)
    assert r.cause[1] == "WAW"


def test_partial_boxes_conflict_only_where_they_overlap():
    a = ("sbuf", 1, ((0, 128), (0, 512)))
    b = ("sbuf", 1, ((0, 128), (512, 1024)))
    r = simulate([vec("tensor_copy", sb(0), a), act(b, sb(3)), act(a, sb(4))])
    assert r.start[1] == 0.0          # reads the other half: no RAW
    assert r.cause[2] == "RAW"


def test_in_order_engine_blocks_behind_a_waiting_instruction():
    # the second Vector op is independent, but the engine runs its stream in program order
    r = simulate([load("x", sb(1)), vec("tensor_copy", sb(1), sb(2)), vec("tensor_copy", sb(3), sb(4))])
    assert r.start[2] == pytest.approx(r.end[1])


# -- Tensor engine -------------------------------------------------------------------------------------------

def test_fp32_matmul_is_four_times_bf16():
    bf = simulate([matmul(sb(1), sb(2), ("psum", 1, None))])
    fp = simulate([matmul(sb(1), sb(2), ("psum", 1, None), dtype="float32")])
    assert bf.total_s == pytest.approx(512 / TENSOR_HZ)
    assert fp.total_s == pytest.approx(4 * 512 / TENSOR_HZ)
    assert any("fp32" in a for a in fp.advice())


def test_narrow_matmul_pays_the_issue_interval():
    r = simulate([matmul(sb(1), sb(2), ("psum", 1, None), n=16)])
    assert r.total_s == pytest.approx(MIN_II / TENSOR_HZ)


def test_psum_accumulation_group_pipelines_on_the_tensor_engine():
    # psum += matmul four times: one accumulation group, back to back, no waits between them
    acc = ("psum", 1, None)
    r = simulate([matmul(sb(1), sb(2), acc) for _ in range(4)])
    assert r.total_s == pytest.approx(4 * 512 / TENSOR_HZ)


def test_psum_bank_reuse_waits_for_the_eviction():
    # the next group writing the same PSUM bank waits for the Vector copy that reads it (WAR)
    acc = ("psum", 1, None)
    ev = [matmul(sb(1), sb(2), acc), Instr("tensor_copy", "Vector", dtype_in="float32", free_elems=512,
                                           reads=(acc,), writes=(sb(3),)), matmul(sb(1), sb(2), acc)]
    r = simulate(ev)
    mm = 512 / TENSOR_HZ
    copy = 512 / VECTOR_HZ  # (it waited on Tensor: no static overhead, see _raw_two_engines)
    assert r.start[2] == pytest.approx(mm + copy)
    assert r.cause[2] == "WAR"


# -- Vector / Scalar costs -----------------------------------------------------------------------------------

def test_tensor_tensor_cost_rules():
    psum_pair = Instr("tensor_tensor", "Vector", free_elems=512, reads=(("psum", 1, None), sb(2)),
                      writes=(sb(3),), n_inputs=2)
    fp32_pair = Instr("tensor_tensor", "Vector", dtype_in="float32", dtype_out="float32", free_elems=512,
                      reads=(sb(1), sb(2)), writes=(sb(3),), n_inputs=2, op="add")
    assert simulate([psum_pair]).total_s == pytest.approx(512 / VECTOR_HZ)
    assert simulate([fp32_pair]).total_s == pytest.approx(2 * 512 / VECTOR_HZ)


def test_small_free_size_pays_the_minimum_interval():
    r = simulate([act(sb(1), sb(2), n=8)])
    assert r.total_s == pytest.approx(MIN_II / SCALAR_HZ)
    assert any("fewer than 128 elements" in a for a in r.advice())


def test_trn2_vector_performance_mode():
    # trn2 guide: tensor_copy all-SBUF BF16 contiguous gets a 4x throughput lift; Vector at 0.96 GHz
    r = simulate([vec("tensor_copy", sb(1), sb(2))], version=3)
    assert r.total_s == pytest.approx(max(MIN_II, 512 / 4) / V3_VECTOR_HZ)
    r2 = simulate([vec("tensor_copy", sb(1), sb(2))], version="trn1")
    assert r2.total_s == pytest.approx(512 / VECTOR_HZ)


def test_trn1_vector_and_gpsimd_share_the_sbuf_port():
    # trn1 guide: "Vector Engine and GpSimd Engine cannot access SBUF in parallel" (lifted on trn2)
    ev = [vec("tensor_copy", sb(1), sb(2)), Instr("iota", "GpSimd", free_elems=512, writes=(sb(3),))]
    v1 = simulate(ev, version=2)
    v = 512 / VECTOR_HZ
    assert v1.start[1] == pytest.approx(v)
    assert v1.cause[1] == "port"
    assert simulate(ev, version=3).start[1] == 0.0


def test_strided_access_halves_the_bandwidth():
    # trn1 guide: a most-minor stride over 16 bytes halves the SBUF/PSUM interface bandwidth
    r = simulate([vec("tensor_copy", sb(1), sb(2), stride_bytes=32)])
    assert r.total_s == pytest.approx(2 * 512 / VECTOR_HZ)


# -- DMA -----------------------------------------------------------------------------------------------------

def test_one_small_dma_uses_one_engine():
    # DMA overview: [4, 4096] bf16 (32 KiB) goes to a single DMA engine
    r = simulate([load("a", sb(1, p=(0, 4), b=(0, 8192)), rows=4, cols=4096)], version=3)
    data = 4 * 4096 * 2 / DMA_BW_V3
    assert r.total_s == pytest.approx(DMA_FIXED + data)
    assert r.dma.transfers == 1
    # the overview's trn2 profile shows this transfer's data movement taking 1416 ns
    assert data == pytest.approx(1416e-9, rel=0.02)


def test_full_tile_dma_splits_over_sixteen_engines():
    r = simulate([load("a", sb(1), rows=128, cols=128)])
    assert r.dma.transfers == 16
    assert r.dma.bytes_per_transfer == 2048   # "each performing a single DMA operation of 2KiB"
    assert r.total_s == pytest.approx(DMA_FIXED + 2048 / DMA_BW_V2)


def test_many_small_dmas_cost_more_than_one_big_one():
    # the same 256 KiB as one [128, 1024] bf16 load or as 64 loads of [128, 16]
    big = simulate([load("a", sb(0, b=(0, 2048)), cols=1024)])
    small = simulate([load("a", sb(i, b=(0, 32)), cols=16) for i in range(64)])
    per_engine_big = 128 * 1024 * 2 / 16
    assert big.total_s == pytest.approx(DMA_FIXED + per_engine_big / DMA_BW_V2)
    # each engine starts one small transfer every 1300 ns (the fixed cost dominates 256-byte transfers)
    per_engine_small = 8 * 16 * 2
    assert small.total_s == pytest.approx(64 * DMA_FIXED + per_engine_small / DMA_BW_V2)
    assert small.total_s > 30 * big.total_s
    assert small.dma.small_transfers == 64 * 16
    assert small.bounding_engine == "DMA"
    assert any("per-transfer" in a for a in small.advice())


def test_dma_throughput_curve_has_the_documented_shape():
    # DMA overview figure "DMA Throughput varying Bytes per Partition for p_dim = 128": throughput grows
    # in proportion to bytes per partition up to ~1 KiB and is near peak from 4 KiB on.
    def rate(bpp):
        n = 32
        r = simulate([load("a", sb(i, b=(0, bpp)), cols=bpp // 2) for i in range(n)])
        return n * 128 * bpp / r.total_s

    peak = rate(32768)
    assert rate(512) / rate(256) == pytest.approx(2.0, rel=0.05)
    assert rate(1024) / peak < 0.5
    assert rate(4096) / peak > 0.9


def test_queues_do_not_block_each_other():
    # a load that waits for a buffer (WAR) holds up its own queue, not another queue
    reader = Instr("activation", "Scalar", free_elems=65536, reads=(sb(1),), writes=(sb(2),))
    ev = [reader, load("a", sb(1), queue="q0"), load("a", sb(3), queue="q0"), load("b", sb(4), queue="q1")]
    r = simulate(ev)
    t_read = (65536) / SCALAR_HZ
    assert r.start[1] == pytest.approx(t_read)
    # in order behind it in q0; its transfers follow the first one's on the DMA engines (one per 1300 ns)
    assert r.start[2] == pytest.approx(t_read + DMA_FIXED)
    assert r.start[3] == 0.0                     # q1 goes ahead


def test_a_dma_named_like_a_compute_instruction_gets_the_documented_split():
    # a DMA event whose name declares a cycle cost (not a transfer split) is split as any DMA
    ev = load("a", sb(1), rows=128, cols=128)
    ev.name = "tensor_copy"
    r = simulate([ev])
    assert r.dma.transfers == 16 and r.total_s == pytest.approx(DMA_FIXED + 2048 / DMA_BW_V2)


def test_hardware_dge_issue_cost_on_trn2():
    plain = simulate([load("a", sb(1))], version=3)
    hw = simulate([load("a", sb(1), dge="hwdge")], version=3)
    assert hw.total_s - plain.total_s == pytest.approx(600e-9)


# -- report, trace, picture ---------------------------------------------------------------------------------

def _small_kernel():
    ev = []
    for k in range(4):
        ev.append(load("lhsT", sb(10 + k % 2, b=(0, 256)), cols=128, queue="lhsT"))
        ev.append(load("rhs", sb(20 + k % 2), cols=512, queue="rhs"))
        ev.append(matmul(sb(10 + k % 2, b=(0, 256)), sb(20 + k % 2), ("psum", 0, None)))
    ev.append(Instr("tensor_copy", "Vector", dtype_in="float32", free_elems=512, reads=(("psum", 0, None),),
                    writes=(sb(30),)))
    ev.append(Instr("dma_copy", "DMA", nbytes=128 * 512 * 2, free_elems=512, reads=(sb(30),),
                    writes=(("hbm", "out", ((0, 128), (0, 512))),)))
    return ev


def test_critical_path_ends_with_the_store_and_report_figures():
    r = simulate(_small_kernel())
    path = r.critical_path()
    assert path[-1] == len(r.start) - 1
    assert r.events[path[-2]].name == "tensor_copy"
    u = r.utilisation
    assert 0 < u["Tensor"] < 1 and 0 < u["DMA"] <= 1
    assert r.bounding_engine == "DMA"
    d = r.as_dict()
    assert d["instructions"]["Tensor"] == 4 and d["instructions"]["DMA"] == 9
    assert "estimated" in r.summary()


def test_trace_has_one_track_per_engine_and_queue(tmp_path):
    r = simulate(_small_kernel())
    path = r.write_trace(tmp_path / "t.json")
    tr = json.loads(pathlib.Path(path).read_text())
    names = {e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"Tensor", "Vector", "DMA queue lhsT", "DMA queue rhs", "DMA queue out"} <= names
    assert sum(e["ph"] == "X" for e in tr["traceEvents"]) == len(r.start)


def test_png_timeline(tmp_path):
    pytest.importorskip("matplotlib")
    path = simulate(_small_kernel()).plot(tmp_path / "t.png")
    assert pathlib.Path(path).read_bytes()[:4] == b"\x89PNG"


def test_incremental_scheduler_matches_simulate():
    s = Scheduler(2)
    for ins in _small_kernel():
        s.add(ins)
    assert s.result().total_s == simulate(_small_kernel()).total_s


# -- recorder interface ----------------------------------------------------------------------------------

def test_instr_of_operands_block_dimension_tile():
    # a [4 blocks, 128 partitions, 512] tile: 128 partitions, 2048 elements per partition streamed
    src = Operand((4, 128, 512), "bfloat16", "sbuf", 1, partition_axis=1)
    dst = Operand((4, 128, 512), "float32", "sbuf", 2, partition_axis=1)
    ins = Instr.of("tensor_copy", "DVE", [src], [dst])
    assert (ins.engine, ins.partitions, ins.free_elems, ins.dtype_out) == ("Vector", 128, 2048, "float32")
    mm = Instr.of("nc_matmul", "PE", [Operand((128, 128), "bfloat16", "sbuf", 3),
                                      Operand((128, 512), "bfloat16", "sbuf", 4)],
                  [Operand((128, 512), "float32", "psum", 5)])
    assert (mm.stationary_free, mm.moving_free) == (128, 512)
    dma = Instr.of("dma_copy", "DMA", [Operand((128, 1024), "float32", "hbm", "x")],
                   [Operand((128, 1024), "float32", "sbuf", 6)])
    assert dma.nbytes == 128 * 1024 * 4 and dma.partitions == 128 and dma.chunk_bytes == 4096


# -- the facts ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [2, 3, 4])
def test_every_constant_cites_a_page(version):
    hw = core(version)
    facts = hw.facts()
    assert len(facts) >= 25
    for name, f in facts.items():
        assert f.source.startswith("https://"), name
        assert len(f.quote) > 10, name
    # the undocumented ones are few and say why
    assert len(hw.assumptions()) <= 4
    assert all(len(f.assumption) > 20 for f in hw.assumptions().values())


def test_version_aliases():
    assert core("trn1").version == core("inf2").version == 2
    assert core("trn2").version == core("v3").version == 3
    assert core("trn3").version == 4
    with pytest.raises(ValueError):
        core("trn9")


def test_timing_package_imports_nothing_from_the_simulator():
    pkg = pathlib.Path(tmodel.__file__).parent
    allowed_top = {"__future__", "json", "bisect", "dataclasses", "matplotlib"}
    for f in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    assert node.module.split(".")[0] in allowed_top, (f.name, node.module)
                else:
                    assert node.level == 1, (f.name, node.module)  # siblings only
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name.split(".")[0] in allowed_top, (f.name, a.name)


# -- capacity: PSUM banks, spills ------------------------------------------------------------------------

def test_ninth_psum_allocation_waits_for_the_first_banks_reader():
    # trn1 architecture guide: 8 PSUM banks per partition, "up to eight outstanding matmul accumulation
    # groups". Nine accumulation groups in nine allocations, each evicted by a Vector copy; Vector is
    # first busy with a long independent instruction, so Tensor runs ahead: groups 0-7 go back to back,
    # the ninth shares the first's bank and waits for that group's copy (WAR).
    long_n = 20000
    ev = [vec("tensor_copy", sb(100), sb(101), n=long_n)]
    for k in range(9):
        ev.append(matmul(sb(1), sb(2), ("psum", k, None)))
        ev.append(Instr("tensor_copy", "Vector", dtype_in="float32", free_elems=512, reads=(("psum", k, None),),
                        writes=(sb(10 + k),)))
    r = simulate(ev)
    mm = 512 / TENSOR_HZ
    for k in range(8):
        assert r.start[1 + 2 * k] == pytest.approx(k * mm)
    # the first copy starts when Vector is free (it is ready long before), no static overhead: it does not
    # read what Vector's previous instruction wrote and did not wait for another engine
    first_copy_end = long_n / VECTOR_HZ + 512 / VECTOR_HZ
    assert r.start[1 + 2 * 8] == pytest.approx(first_copy_end)
    assert r.cause[1 + 2 * 8] == "WAR"


def test_spilled_allocation_costs_a_store_and_a_reload():
    # An SBUF allocation marked as spilled (it did not fit beside the others live): its write is followed
    # by a store to the HBM scratchpad and its reader waits for the reload. [128, 1024] bf16 = 2 KiB per
    # partition: one transfer per DMA engine of 8 partitions x 2 KiB = 16 KiB, which completes 1300 ns +
    # 16384 B / 17 B/ns after it starts on trn1 (DMA bandwidth guide, DMA overview table).
    box = ((0, 128), (0, 2048))
    ev = [vec("tensor_copy", sb(1), ("sbuf", 7, box), n=1024),
          vec("tensor_copy", ("sbuf", 7, box), sb(8), n=1024)]
    copy = 1024 / VECTOR_HZ
    plain = simulate(ev)
    assert plain.start[1] == pytest.approx(copy)
    sched = Scheduler(2, spilled={7})
    for e in ev:
        sched.add(e)
    r = sched.result()
    transfer = DMA_FIXED + 8 * 2048 / DMA_BW_V2
    assert r.start[1] == pytest.approx(copy + 2 * transfer)
    assert r.end[1] == pytest.approx(copy + 2 * transfer + (1024 + STATIC) / VECTOR_HZ)
    assert r.spills == {"stores": 1, "reloads": 1, "bytes": 2 * 128 * 2048}
    assert r.dma.transfers == 32
    assert "spills: 1 stores and 1 reloads" in r.summary()
