"""Profile figures on kernels whose DMA traffic and instruction counts are known by hand."""

import json

import numpy as np

from nki_kernels.add import add_grid, tensor_add_kernel
from nki_kernels.simulator import nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import profile, profiler


def test_tensor_add_traffic_and_counts():
    a = np.ones((256, 1024), np.float32)
    rep = profile(tensor_add_kernel[add_grid(a.shape)], a, a)
    np.testing.assert_array_equal(rep.outputs, 2 * a)
    assert rep.programs == 4  # 2 x 2 tiles of 128 x 512
    assert rep.hbm_read_bytes == 2 * a.nbytes and rep.hbm_write_bytes == a.nbytes
    assert rep.min_bytes == 3 * a.nbytes and rep.traffic_ratio == 1.0
    assert rep.instructions == {"Tensor": 0, "Vector": 4, "Scalar": 0, "GpSimd": 0, "DMA": 12}
    assert rep.sbuf_peak == 3 * 512 * 4  # a, b and c tiles live together
    assert rep.psum_peak == 0
    # timing model (NeuronCore-v2 here): each 128 x 512 fp32 DMA is split over the 16 DMA engines
    # (8 partitions each, DMA overview), one 16 KiB transfer per engine, which occupies the engine
    # max(~1300 ns per-transfer cost, 16 KiB / 17 B/ns) (DMA bandwidth guide); busy_s["DMA"] is one
    # engine's. The fp32 add reads two SBUF tiles: 2N cycles at 1.12 GHz (nki.isa tensor_tensor cost,
    # trn1 architecture guide); waiting for the loads (another engine) adds no static overhead.
    rep = profile(tensor_add_kernel[add_grid(a.shape)], a, a, version=2)
    assert np.isclose(rep.busy_s["DMA"], 12 * max(1300e-9, 16384 / 17e9))
    assert np.isclose(rep.busy_s["Vector"], 4 * 2 * 512 / 1.12e9)
    assert rep.bottleneck == "DMA" and rep.estimated_s >= rep.roofline_s > 0
    assert rep.neuroncore.startswith("NeuronCore-v2")


def test_ragged_masks_count_only_moved_bytes():
    a = np.ones((130, 600), np.float32)
    rep = profile(tensor_add_kernel[add_grid(a.shape)], a, a)
    assert rep.hbm_read_bytes == 2 * a.nbytes and rep.hbm_write_bytes == a.nbytes
    assert rep.traffic_ratio == 1.0 and rep.programs == 4


@nki.jit
def matmul_reload(a_t, b):
    """[K=256, M=128]^T @ [K, N=512] with the stationary tile loaded twice (ratio > 1)."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        s = nl.load(a_t[k * 128 + nl.arange(128)[:, None], nl.arange(128)[None, :]])
        s2 = nl.load(a_t[k * 128 + nl.arange(128)[:, None], nl.arange(128)[None, :]])
        m = nl.load(b[k * 128 + nl.arange(128)[:, None], nl.arange(512)[None, :]])
        acc += nisa.nc_matmul(nl.maximum(s, s2), m)
    nl.store(out, value=nl.copy(acc))
    return out


def test_matmul_counts_peaks_and_ratio():
    rng = np.random.default_rng(0)
    a_t = rng.standard_normal((256, 128), dtype=np.float32)
    b = rng.standard_normal((256, 512), dtype=np.float32)
    rep = profile(matmul_reload, a_t, b)
    np.testing.assert_allclose(rep.outputs, a_t.T @ b, rtol=1e-4, atol=1e-4)
    assert rep.hbm_read_bytes == 2 * a_t.nbytes + b.nbytes
    assert rep.hbm_write_bytes == 128 * 512 * 4
    assert np.isclose(rep.traffic_ratio, (2 * a_t.nbytes + b.nbytes + 128 * 512 * 4)
                      / (a_t.nbytes + b.nbytes + 128 * 512 * 4))
    # 2 matmuls, each accumulating into acc (`acc += nc_matmul(...)` is one Tensor instruction);
    # maximum x2 and copy on Vector; nl.zeros is a GpSimd memset; 7 DMAs
    assert rep.instructions == {"Tensor": 2, "Vector": 3, "Scalar": 0, "GpSimd": 1, "DMA": 7}
    assert rep.merged_accumulations == 2
    # the matmul accumulates straight into acc (its result is no tile of its own): one PSUM tile
    assert rep.psum_peak == 512 * 4
    assert rep.programs == 1


def test_trace_has_one_track_per_engine(tmp_path):
    a = np.ones((128, 512), np.float32)
    rep = profile(tensor_add_kernel[add_grid(a.shape)], a, a)
    path = rep.write_trace(tmp_path / "t.json")
    trace = json.load(open(path))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    # one track per engine used and per DMA queue (one queue per HBM tensor)
    assert names == {"Vector", "DMA queue a_input", "DMA queue b_input", "DMA queue out0"}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 4 and all(e["dur"] > 0 for e in slices)
    for tid in {e["tid"] for e in slices}:  # no overlap on a track
        spans = sorted((e["ts"], e["dur"]) for e in slices if e["tid"] == tid)
        assert all(t1 >= t0 + d0 - 1e-9 for (t0, d0), (t1, _) in zip(spans, spans[1:]))
    assert str(rep).count("\n") > 5 and rep.table().row_count > 5


def test_benchmark_returns_the_same_report():
    a = np.ones((128, 512), np.float32)
    bench = nki.benchmark(tensor_add_kernel)
    out = bench[add_grid(a.shape)](a, a)
    np.testing.assert_array_equal(out, 2 * a)
    ref = profile(tensor_add_kernel[add_grid(a.shape)], a, a)
    assert bench.report.as_dict() == ref.as_dict()
    assert np.isclose(bench.benchmark_result.nc_latency.get_latency_percentile(50), ref.estimated_s * 1e6)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(99) == ref.estimated_us
    assert profiler.Report is type(ref)
