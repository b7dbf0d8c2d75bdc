"""scripts/timing_tutorials.py without an nki-samples checkout: its published pairs, its NumPy reference of
the Mamba scan, the documentation's pseudo-code kernels under profile(), and the import of a kernel file
from a samples folder (here a stand-in written by the test, not the tutorial's kernel)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import textwrap

import numpy as np

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "timing_tutorials.py"


def _script():
    spec = importlib.util.spec_from_file_location("timing_tutorials", SCRIPT)  # (scripts/ stays off sys.path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_published_pairs_are_the_same_shape_ones():
    tt = _script()
    pairs = tt.published_pairs()
    # v1 slower than v2 and v3 at [512, 4096]; v2 slower than v3 at each seq_len from 1024 (equal at 512: no pair)
    assert ("mamba_v1/L512", "mamba_v2/L512") in pairs and ("mamba_v1/L512", "mamba_v3/L512") in pairs
    assert {(f"mamba_v2/L{L}", f"mamba_v3/L{L}") for L in (1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192)} \
        <= set(pairs)
    assert len(pairs) == 10
    assert tt.pair_order(pairs, {"mamba_v1/L512": 3.0, "mamba_v2/L512": 2.0, "mamba_v3/L512": 9.0}) == [
        ("mamba_v1/L512", "mamba_v2/L512", True), ("mamba_v1/L512", "mamba_v3/L512", False)]
    assert tt.pair_order([("a", "b")], {"a": 1.0, "b": 2.0}) == [("a", "b", False)]


def test_mamba_reference_matches_the_four_dimensional_formula():
    tt = _script()
    delta, u, A, B, C = tt.mamba_inputs(2, 7, 3, 4, seed=5)
    d = delta.astype(np.float64)
    deltaA = np.exp(d[:, :, None, :] * A[None, :, :, None])            # [b, c, s, L]
    deltaBu = d[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = np.zeros_like(deltaA)
    for t in range(d.shape[-1]):
        scan[..., t] = deltaA[..., t] * (scan[..., t - 1] if t else 0) + deltaBu[..., t]
    expected = (C[:, None, :, :] * scan).sum(axis=2)
    np.testing.assert_allclose(tt.mamba_reference(delta, u, A, B, C), expected, rtol=1e-6, atol=1e-6)


def test_pseudo_code_ratios_without_samples(tmp_path, capsys):
    tt = _script()
    out = tmp_path / "q.json"
    assert tt.main(["--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the Mamba cases are not run" in printed
    res = json.loads(out.read_text())
    assert res["mamba"] == {} and len(res["skipped"]) == len(tt.CASES)
    for pair in res["pseudo_code"].values():
        rows = list(pair["variants"].values())
        assert all(r["rel_err"] < 1e-5 for r in rows)  # the kernels compute what the pages say
        for v in ("2", "3"):
            busy = [r["versions"][v]["compute_busy_ms"] for r in rows]
            assert all(b > 0 for b in busy)
            assert busy[0] > busy[1]  # the pages' faster variant is faster under the model


def test_kernels_are_imported_from_the_samples_folder(tmp_path):
    """A stand-in ``mamba_v1`` in the nki-samples layout is imported through the installed ``neuronxcc``,
    profiled on v2 and v3, and its wrong output is caught by the reference check."""
    tt = _script()
    folder = tmp_path / "src" / "nki_samples" / "tutorials" / "fused_mamba"
    folder.mkdir(parents=True)
    (folder / "mamba_nki_kernels.py").write_text(textwrap.dedent("""
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl

        @nki.jit
        def mamba_v1(delta, u, A, B, C):
            batch, channels, seq_len = delta.shape
            out = nl.ndarray((batch, channels, seq_len), dtype=delta.dtype, buffer=nl.shared_hbm)
            for t in nl.affine_range(channels // 128):
                d = nl.load(delta[0, t * 128:(t + 1) * 128, 0:seq_len])
                nl.store(out[0, t * 128:(t + 1) * 128, 0:seq_len], value=nl.multiply(d, 2.0))
            return out
    """))
    mod = tt.mamba_module(str(tmp_path))
    case = next(c for c in tt.CASES if c["name"] == "mamba_v1/L512/C256")
    rows = tt.run_mamba(mod, [case], log=lambda s: None)
    row = rows["mamba_v1/L512/C256"]
    assert set(row["versions"]) == {2, 3}
    assert all(v["ms"] > 0 and v["bound"] for v in row["versions"].values())
    assert row["instructions"]["DMA"] == 4  # 2 loads, 2 stores
    assert row["rel_err"] > 0.1  # delta * 2 is not the scan
