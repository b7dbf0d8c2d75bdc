"""``profile()`` fed by the running simulator, checked against hand-computed times.

The expected times are computed here from the documented numbers (restated with their pages, not
read from the model's tables):

* trn1 (NeuronCore-v2) clocks, NKI Trainium/Inferentia2 architecture guide: Tensor 2.8 GHz,
  Vector 1.12 GHz, Scalar 1.4 GHz, GpSimd 1.4 GHz.
* nki.isa cost sections: nc_matmul ``max(min(64, N_stationary), N_moving)`` Tensor cycles, "roughly 4x"
  for fp32 inputs; activation ``max(64, N)``; tensor_tensor ``2N`` for two SBUF inputs (not BF16);
  reciprocal ``8N``; tensor_reduce ``max(64, N)`` (fp32); ``N`` is the elements per partition (a block dimension is free size, not
  partitions). The architecture guide's 100-cycle static overhead applies to an instruction reading its own
  engine's previous result or to a run of N << 128 instructions, not to one that waited on another engine.
* DMA overview / bandwidth guide: 16 DMA engines, 8 partitions each, 17 B/ns per engine on trn1,
  ~1300 ns per transfer: a [128, F] transfer is 16 transfers of ``128 F b / 16`` bytes, complete
  ``1300 ns + bytes / 17 B/ns`` after they start.
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki, profile
from nki_kernels.simulator import standalone as nki2
from nki_kernels.simulator.instructions.target import use as use_target
from nki_kernels.simulator.timing import model as tmodel

TENSOR_HZ, VECTOR_HZ, SCALAR_HZ, GPSIMD_HZ = 2.8e9, 1.12e9, 1.4e9, 1.4e9
DMA_FIXED, DMA_BW = 1300e-9, 17e9
BF16 = ml_dtypes.bfloat16
nl2, nisa2 = nki2.language, nki2.isa


def dma_time(rows, cols, itemsize):
    """One DMA of a [rows <= 128, cols] region: its transfers run in parallel, one per 8 partitions."""
    per_engine = rows * cols * itemsize / max(1, -(-rows // 8))
    return DMA_FIXED + per_engine / DMA_BW


def by_label(rep, text):
    """Indices of the report's events whose name starts with ``text``."""
    return [i for i, e in enumerate(rep.events) if e[2].startswith(text)]


# -- DMA and dependencies -------------------------------------------------------------------------------------

@nki.jit
def copy_through(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out


def test_load_then_store_is_two_dma_latencies():
    x = np.ones((128, 512), BF16)
    rep = profile(copy_through, x, version=2)
    np.testing.assert_array_equal(rep.outputs, x)
    assert rep.instructions["DMA"] == 2
    assert rep.estimated_s == pytest.approx(2 * dma_time(128, 512, 2))
    assert rep.dma.transfers == 32 and rep.dma.bytes_per_transfer == 128 * 512 * 2 / 16


@nki.jit
def exp_and_copy(a, b):
    """exp of a (Scalar) and an independent copy of b through SBUF: the DMA of b overlaps the exp."""
    out_a = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out_b = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    ta = nl.load(a)
    e = nl.exp(ta)
    tb = nl.load(b)
    nl.store(out_b, value=tb)
    nl.store(out_a, value=e)
    return out_a, out_b


def _exp_and_copy_schedule():
    a = np.full((128, 2048), 0.5, np.float32)
    b = np.ones((128, 64), np.float32)
    rep = profile(exp_and_copy, a, b, version=2)
    np.testing.assert_allclose(rep.outputs[0], np.exp(a), rtol=1e-6)
    ld_a, ld_b = by_label(rep, "load a")[0], by_label(rep, "load b")[0]
    ex = by_label(rep, "exp")[0]
    st_a, st_b = by_label(rep, "store out0")[0], by_label(rep, "store out1")[0]
    start = {i: rep.events[i][4] for i in range(len(rep.events))}
    end = {i: rep.events[i][4] + rep.events[i][5] for i in range(len(rep.events))}
    t_load_a = dma_time(128, 2048, 4)
    t_exp = 2048 / SCALAR_HZ  # it waited for the load on another engine: no static overhead
    assert end[ld_a] == pytest.approx(t_load_a)
    assert start[ex] == pytest.approx(end[ld_a])  # RAW: the exp reads the loaded tile
    assert end[ex] - start[ex] == pytest.approx(t_exp)
    assert start[st_a] >= end[ex] - 1e-15  # RAW: the store reads the exp's result
    # b's load waits only for DMA engines (a's transfers hold them), not for the exp: it overlaps it
    assert start[ld_b] < start[ex] and end[ld_b] > start[ex]
    assert start[st_b] < end[ex]
    return rep, t_load_a, t_exp


def test_independent_dma_overlaps_compute():
    rep, t_load_a, t_exp = _exp_and_copy_schedule()
    serial = sum(e[5] for e in rep.events)  # every instruction one after another
    assert rep.estimated_s < serial
    assert rep.estimated_s == pytest.approx(t_load_a + t_exp + dma_time(128, 2048, 4))
    assert rep.bounding_engine in ("Scalar", "DMA")


def test_planted_bug_ignoring_dependencies_fails(monkeypatch):
    # a scheduler that forgets dependencies lets the exp start before its input is loaded
    real = tmodel.Scheduler._deps  # (it still records the accesses: only the waits are forgotten)
    monkeypatch.setattr(tmodel.Scheduler, "_deps", lambda self, *keys: ([],) + real(self, *keys)[1:])
    with pytest.raises(AssertionError):
        _exp_and_copy_schedule()


def test_planted_bug_losing_first_generation_operands_fails(monkeypatch):
    # a recorder that drops the reads it found in the memory model's slot breaks the RAW chain too
    from nki_kernels.simulator import profiler

    real = profiler.Recorder._finalize

    def lossy(self, st, ev):
        if ev.lst is not None and not ev.declared:
            ev.n0 = 0
            del ev.lst[:]
        real(self, st, ev)

    monkeypatch.setattr(profiler.Recorder, "_finalize", lossy)
    with pytest.raises(AssertionError):
        _exp_and_copy_schedule()


# -- Tensor engine: psum += nc_matmul ------------------------------------------------------------------------

@nki.jit
def mm_accumulate(a_t, b):
    """K = 4 x 128 contraction accumulated in one PSUM tile (first generation)."""
    K, M = a_t.shape
    out = nl.ndarray((M, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        s = nl.load(a_t[k * 128:(k + 1) * 128, :])
        m = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(s, m)
    nl.store(out, value=nl.copy(acc))
    return out


@nki2.jit
def mm_accumulate2(a_t, b):
    """The same with the standalone API (dst= instructions)."""
    K, M = a_t.shape
    N = b.shape[1]
    out = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.shared_hbm)
    acc = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.psum)
    for k in nl2.affine_range(K // 128):
        s = nl2.ndarray((128, M), dtype=a_t.dtype, buffer=nl2.sbuf)
        m = nl2.ndarray((128, N), dtype=b.dtype, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=s, src=a_t[k * 128:(k + 1) * 128, :])
        nisa2.dma_copy(dst=m, src=b[k * 128:(k + 1) * 128, :])
        nisa2.nc_matmul(dst=acc, stationary=s, moving=m)
    res = nl2.ndarray((M, N), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_copy(dst=res, src=acc)
    nisa2.dma_copy(dst=out, src=res)
    return out


@pytest.mark.parametrize("kernel", [mm_accumulate, mm_accumulate2], ids=["first-generation", "standalone"])
@pytest.mark.parametrize("dtype,factor", [(BF16, 1), (np.float32, 4)], ids=["bf16", "fp32"])
def test_psum_accumulation_is_one_tensor_instruction_per_matmul(kernel, dtype, factor):
    rng = np.random.default_rng(0)
    a_t = rng.standard_normal((512, 128)).astype(dtype)
    b = rng.standard_normal((512, 512)).astype(dtype)
    rep = profile(kernel, a_t, b, version=2)
    want = a_t.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(rep.outputs, want, rtol=2e-2, atol=2e-1)
    assert rep.instructions["Tensor"] == 4  # not 8: the += is the matmul's own accumulation
    per_matmul = factor * max(min(64, 128), 512) / TENSOR_HZ
    assert rep.busy_s["Tensor"] == pytest.approx(4 * per_matmul)
    # the four matmuls write one PSUM bank back to back; the copy reads it after the last
    mm = by_label(rep, "nc_matmul")
    cp = [i for i, e in enumerate(rep.events) if e[0] == "Vector"][0]
    assert rep.events[cp][4] >= rep.events[mm[-1]][4] + rep.events[mm[-1]][5] - 1e-15


# -- block dimension ------------------------------------------------------------------------------------------

@nki.jit
def block_exp(x):
    """exp of a [4 blocks, 128 partitions, 64] SBUF tensor in one instruction."""
    B, P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((B, nl.par_dim(P), F), dtype=x.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(B):
        t[b] = nl.load(x[b])
    e = nl.exp(t)
    for b in nl.affine_range(B):
        nl.store(out[b], value=e[b])
    return out


@nki.jit
def block_activation(x):
    """The same through nisa.activation (a declared instruction) on block tiles."""
    B, P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((B, nl.par_dim(P), F), dtype=x.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(B):
        t[b] = nl.load(x[b])
    e = nisa.activation(op=nl.exp, data=t)
    for b in nl.affine_range(B):
        nl.store(out[b], value=e[b])
    return out


@pytest.mark.parametrize("kernel", [block_exp, block_activation], ids=["nl.exp", "nisa.activation"])
def test_block_dimension_tile_is_costed_per_partition(kernel):
    x = np.full((4, 128, 64), 0.25, np.float32)
    rep = profile(kernel, x, version=2)
    np.testing.assert_allclose(rep.outputs, np.exp(x), rtol=1e-6)
    assert rep.instructions["Scalar"] == 1
    # 128 partitions x (4 x 64) elements per partition: 256 cycles, not 4 x 128 x 64
    assert rep.busy_s["Scalar"] == pytest.approx(4 * 64 / SCALAR_HZ)


# -- views: an op reading part of a tile costs what it reads (issue 31) --------------------------------------

def _reduce_kernel(api, view):
    """One fp32 max-reduce of a [128, 128] operand: a view (columns 512:640) of a loaded [128, 4096]
    tile, or a loaded [128, 128] tile; ``api`` the call that reduces."""

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        if view == "slice":
            v = t[:, 512:640]
        elif view == "arange":
            v = t[nl.arange(128)[:, None], 512 + nl.arange(128)[None, :]]
        else:
            v = t
        if api == "nisa":
            r = nisa.tensor_reduce(np.max, data=v, axis=(1,), dtype=nl.float32, keepdims=True)
        else:
            r = nl.max(v, axis=(1,), keepdims=True)
        nl.store(out, value=r)
        return out

    @nki2.jit
    def k2(x):  # the standalone API's declared instruction (dst=)
        out = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.shared_hbm)
        t = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=t, src=x)
        r = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_reduce(dst=r, op=np.maximum, data=t[:, 512:640] if view == "slice" else t, axis=1,
                            keepdims=True)
        nisa2.dma_copy(dst=out, src=r)
        return out

    return k2 if api == "standalone" else k


@pytest.mark.parametrize("api,view", [("nisa", "slice"), ("nisa", "arange"), ("nl", "slice"),
                                      ("standalone", "slice")])
def test_op_on_a_view_costs_the_elements_it_reads(api, view):
    big = np.arange(128 * 4096, dtype=np.float32).reshape(128, 4096) % 977
    rep = profile(_reduce_kernel(api, view), big, version=2)
    np.testing.assert_array_equal(np.asarray(rep.outputs).reshape(128, 1), big[:, 512:640].max(1, keepdims=True))
    small = np.ascontiguousarray(big[:, 512:640])
    ref = profile(_reduce_kernel(api, "tile"), small, version=2)
    np.testing.assert_array_equal(np.asarray(ref.outputs).reshape(128, 1), small.max(1, keepdims=True))
    # one Vector instruction each (it waited for its load on the DMA queues: no static overhead): N = 128
    # elements per partition, max(64, 128), as for the [128, 128] tile (not N = 4096)
    for r in (rep, ref):
        assert r.instructions["Vector"] == 1
        assert r.busy_s["Vector"] == pytest.approx(max(64, 128) / VECTOR_HZ)
    assert rep.busy_s["Vector"] == pytest.approx(ref.busy_s["Vector"])
    # its dependency is the view's partitions and bytes in its tile, columns 512:640 of fp32
    red = next(e for e in rep.timing.events if e.engine == "Vector")
    assert any(k[0] == "sbuf" and k[2] == ((0, 128), (512 * 4, 640 * 4)) for k in red.reads)


# -- the allocator stand-in: reuse makes WAR -----------------------------------------------------------------

@nki.jit
def recip_loop(x):
    """A loop-local tile per iteration, read by a long Vector instruction (nisa.reciprocal: 8N cycles)."""
    n, P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n):
        t = nl.load(x[i])
        nl.store(out[i], value=nisa.reciprocal(t))
    return out


def test_reused_buffer_waits_for_its_last_reader():
    x = np.full((4, 128, 2048), 2.0, np.float32)
    rep = profile(recip_loop, x, version=2)
    np.testing.assert_allclose(rep.outputs, 0.5)
    loads, recips = by_label(rep, "load"), by_label(rep, "reciprocal")
    for i in recips:  # 8N cycles (waiting for its load on another engine adds no static overhead)
        assert rep.events[i][5] == pytest.approx(8 * 2048 / VECTOR_HZ)
    assert rep.timing.cause[recips[0]] == "RAW"
    ins = rep.timing.events
    # double buffering: the third iteration's tile is the first one's region again
    assert ins[loads[2]].writes[0][1] == ins[loads[0]].writes[0][1] != ins[loads[1]].writes[0][1]
    # and its load waits for the first reciprocal, which reads that region (WAR)
    assert rep.events[loads[2]][4] >= rep.events[recips[0]][4] + rep.events[recips[0]][5] - 1e-15
    # with more buffers (4 regions per role) the third load does not wait for the first reciprocal
    deeper = profile(recip_loop, x, version=2, sbuf_spare=3)
    dins = deeper.timing.events
    assert len({dins[i].writes[0][1] for i in loads}) == 4
    assert deeper.events[loads[2]][4] < rep.events[recips[0]][4] + rep.events[recips[0]][5]
    assert deeper.estimated_s <= rep.estimated_s


# -- versions, trace, picture, benchmark ----------------------------------------------------------------------

def test_version_follows_the_simulated_target():
    x = np.ones((128, 512), BF16)
    with use_target("gen2"):
        v2 = profile(copy_through, x)
    with use_target("gen4"):
        v4 = profile(copy_through, x)
    assert (v2.version, v4.version) == (2, 4)
    assert v2.estimated_s == pytest.approx(2 * dma_time(128, 512, 2))
    # trn3: 33 B/ns per DMA engine (DMA overview table)
    assert v4.estimated_s == pytest.approx(2 * (DMA_FIXED + 128 * 512 * 2 / 16 / 33e9))
    assert v2.retime(4).total_s == pytest.approx(v4.estimated_s)


def test_report_trace_png_and_text(tmp_path):
    rng = np.random.default_rng(0)
    rep = profile(mm_accumulate, rng.standard_normal((512, 128)).astype(BF16),
                  rng.standard_normal((512, 512)).astype(BF16), version=2)
    tr = json.loads(open(rep.perfetto(tmp_path / "t.json")).read())
    names = {e["args"]["name"] for e in tr["traceEvents"] if e.get("name") == "thread_name"}
    assert {"Tensor", "Vector", "GpSimd", "DMA queue a_t", "DMA queue b", "DMA queue out0"} <= names
    assert sum(e["ph"] == "X" for e in tr["traceEvents"]) == len(rep.events)
    assert {"nc_matmul", "load", "store", "copy", "zeros"} <= {e["name"] for e in tr["traceEvents"] if e["ph"] == "X"}
    assert tr["otherData"]["estimated_s"] == rep.estimated_s
    png = rep.plot_timeline(tmp_path / "t.png")
    assert open(png, "rb").read(4) == b"\x89PNG"
    d = rep.as_dict()
    assert d["bounding_engine"] == rep.bounding_engine and set(d["utilisation"]) >= {"Tensor", "DMA"}
    assert d["dma"]["transfers"] == rep.dma.transfers and d["dma"]["bytes_per_transfer"] > 0
    assert sum(d["critical_path"]["time_by_track"].values()) == pytest.approx(rep.estimated_s)
    text = str(rep)
    assert "estimated time" in text and "critical path" in text and "DMA transfers" in text
    assert rep.advice() and rep.advice()[0].startswith(f"{rep.bounding_engine}-bound")


def test_benchmark_latency_is_the_model_time_in_microseconds():
    x = np.ones((128, 512), BF16)
    bench = nki.benchmark(copy_through)
    with use_target("gen2"):
        bench(x)
    us = bench.benchmark_result.nc_latency.get_latency_percentile(50)
    assert us == pytest.approx(2 * dma_time(128, 512, 2) * 1e6)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(99) == us
