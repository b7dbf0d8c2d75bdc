"""Vectorised SPMD launches (nki_kernels.simulator.vectorize) against the per-program reference.

Every kernel here runs twice, batched and one program at a time, and both must
match NumPy; the tests also check that batching really happened where the
kernel allows it, and that it falls back where it must (control flow on
program_id, ragged edges, races, in-place kernels) without changing results or
diagnostics.
"""

import contextlib
import importlib

import numpy as np
import pytest

import nki_kernels as K
from nki_kernels import add as add_mod
from nki_kernels import rmsnorm
from nki_kernels.simulator import NKIError, config, install, nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.launch import _bind, _unwrap, normalize_grid, run_programs

install()
C = importlib.import_module("tests.compat_kernels.kernels")
rng = np.random.default_rng(7)


@contextlib.contextmanager
def vectorize(on):
    saved = config.vectorize
    config.vectorize = on
    try:
        yield
    finally:
        config.vectorize = saved


def launch(kernel, grid, *arrays, vectorized=True, **static):
    """(outputs, programs run batched) of one launch."""
    args, kw = _bind(kernel, arrays, static)
    with vectorize(vectorized):
        result, state = run_programs(kernel, normalize_grid(grid), args, kw)
    return _unwrap(result), state.batched


def both(kernel, grid, *arrays, **static):
    ref, n0 = launch(kernel, grid, *arrays, vectorized=False, **static)
    got, n = launch(kernel, grid, *arrays, **static)
    again, n2 = launch(kernel, grid, *arrays, **static)  # replays the cached plan
    assert n0 == 0 and n == n2
    return ref, got, again, n


def check_same(ref, got):
    for r, g in zip(ref if isinstance(ref, tuple) else (ref,), got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(4096, 1024), (256, 512), (300, 700), (129, 513), (1000, 2048)])
def test_tensor_add_batched_matches_numpy(shape):
    a = rng.standard_normal(shape, dtype=np.float32)
    b = rng.standard_normal(shape, dtype=np.float32)
    ref, got, again, n = both(add_mod.tensor_add_kernel, add_mod.add_grid(shape), a, b)
    np.testing.assert_array_equal(got, a + b)
    np.testing.assert_array_equal(again, a + b)
    np.testing.assert_array_equal(ref, a + b)
    g0, g1 = add_mod.add_grid(shape)
    full0, full1 = shape[0] // 128, shape[1] // 512
    # Every program whose tile is full, except the reference program (0, 0), runs batched
    # when there are at least two of them in a box.
    if full0 * full1 >= 3:
        assert n >= full0 * full1 - 1 - full1
    assert n <= g0 * g1 - 1


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n,d", [(1024, 384), (1000, 300), (640, 4096)])
def test_rms_norm_fwd_bwd_batched(n, d, dtype):
    x = rng.standard_normal((n, d)).astype(dtype)
    w = rng.standard_normal(d).astype(dtype)
    dy = rng.standard_normal((n, d)).astype(dtype)
    grid = rmsnorm.row_grid(n)
    ref, got, _, nf = both(rmsnorm.rms_norm_fwd_kernel, grid, x, w, eps=1e-6, return_rstd=True)
    check_same(ref, got)
    x64 = x.astype(np.float64)
    rstd = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got[0].astype(np.float64), x64 * rstd * w, rtol=tol, atol=tol)
    ref_b, got_b, _, nb = both(rmsnorm.rms_norm_bwd_kernel, grid, dy, x, w, got[1])
    check_same(ref_b, got_b)
    full = n // 128
    assert nf >= full - 1 and nb >= full - 1


def test_dw_partials_and_backward_against_numpy():
    n, d = 1000, 300
    x = rng.standard_normal((n, d), dtype=np.float32)
    w = rng.standard_normal(d, dtype=np.float32)
    dy = rng.standard_normal((n, d), dtype=np.float32)
    dx, dw = K.rms_norm_backward(dy, x, w)
    x64, dy64, w64 = x.astype(np.float64), dy.astype(np.float64), w.astype(np.float64)
    r = 1 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6)
    xhat = x64 * r
    g = dy64 * w64
    np.testing.assert_allclose(dx, r * (g - xhat * (g * xhat).mean(-1, keepdims=True)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, (dy64 * xhat).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["matmul", "transpose", "softmax", "layernorm", "scale_3d", "spmd", "rms_rows"])
def test_official_style_kernels_batched_equal_per_program(case):
    if case == "matmul":
        a, b = rng.standard_normal((256, 384), dtype=np.float32), rng.standard_normal((384, 1024), dtype=np.float32)
        ref, got, _, n = both(C.matmul_kernel, (2, 2), np.ascontiguousarray(a.T), b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    elif case == "transpose":
        x = rng.standard_normal((256, 384), dtype=np.float32)
        ref, got, _, n = both(C.transpose_kernel, (2, 3), x)
        np.testing.assert_array_equal(got, x.T)
    elif case == "softmax":
        x = rng.standard_normal((384, 300), dtype=np.float32)
        ref, got, _, n = both(C.softmax_kernel, (3,), x)
        e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    elif case == "layernorm":
        x = rng.standard_normal((384, 640), dtype=np.float32)
        g, b = rng.standard_normal(640, dtype=np.float32), rng.standard_normal(640, dtype=np.float32)
        ref, got, _, n = both(C.layernorm_kernel, (3,), x, g, b, eps=1e-5)
        x64 = x.astype(np.float64)
        expect = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
        np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)
    elif case == "scale_3d":
        x = rng.standard_normal((3, 256, 1024), dtype=np.float32)
        ref, got, _, n = both(C.scale_3d_kernel, (3, 2, 2), x)
        np.testing.assert_array_equal(got, x * np.arange(1, 4, dtype=np.float32)[:, None, None])
    elif case == "spmd":
        a, b = rng.standard_normal((512, 512), dtype=np.float32), rng.standard_normal((512, 512), dtype=np.float32)
        ref, got, _, n = both(C.spmd_add_kernel, (nl.spmd_dim(2, nl.nc(2)),), a, b)
        np.testing.assert_array_equal(got, a + b)
    else:
        x = rng.standard_normal((384, 256), dtype=np.float32)
        ref, got, _, n = both(C.rms_rows_kernel, (3,), x)
    check_same(ref, got)
    if case == "scale_3d":
        assert n == 0  # float(program_id + 1) needs each program's value: one program at a time
    else:
        assert n > 0, "expected some programs to run batched"


@nki.jit
def _first_program_differs(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    j = nl.arange(64)[None, :]
    t = nl.load(a[i, j])
    if nl.program_id(0) == 0:  # Python control flow on the program id: one program at a time
        t = nl.multiply(t, 2.0)
    nl.store(out[i, j], value=t)
    return out


def test_control_flow_on_program_id_falls_back():
    a = rng.standard_normal((512, 64), dtype=np.float32)
    out, n = launch(_first_program_differs, (4,), a)
    expect = a.copy()
    expect[:128] *= 2
    np.testing.assert_array_equal(out, expect)
    assert n == 0


@nki.jit
def _tiny(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:4, 0:8]
    row = nl.program_id(0) * 4
    nl.store(c[row + ip, jf], value=nl.subtract(nl.load(a[row + ip, jf]), nl.load(b[ip + row, jf])))
    return c


def test_many_tiny_programs_batch():
    a = rng.standard_normal((4096 * 4, 8), dtype=np.float32)
    b = rng.standard_normal((4096 * 4, 8), dtype=np.float32)
    out, n = launch(_tiny, (4096,), a, b)
    np.testing.assert_array_equal(out, a - b)
    assert n == 4095


@nki.jit
def _row_blocks(a, step):
    """Program p copies rows [p*step, p*step + 128): with step < 128 neighbours overlap."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    j = nl.arange(a.shape[1])[None, :]
    i = nl.program_id(0) * step + nl.arange(128)[:, None]
    nl.store(out[i, j], value=nl.load(a[i, j]))
    return out


def test_races_between_programs_still_reported():
    a = rng.standard_normal((64 * 5 + 64, 32), dtype=np.float32)
    with pytest.raises(NKIError, match=r"\[race\].*programs \(0,\) and \(1,\).*\[64:128, 0:32\]"):
        _row_blocks[5](a, step=64)


def test_unwritten_output_still_reported_after_batches():
    a = rng.standard_normal((128 * 8, 16), dtype=np.float32)
    with pytest.warns(UserWarning, match=r"\[uninit\].*2048 of its 16384 elements were never stored"):
        got = _row_blocks[7](a, step=128)  # the last 128 rows are never stored
    np.testing.assert_array_equal(got[:896], a[:896])
    assert np.isnan(got[896:]).all()
    np.testing.assert_array_equal(_row_blocks[8](a, step=128), a)


@nki.jit
def _loop_carried(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    acc = nl.zeros((128, 64), dtype=nl.float32)
    for k in nl.affine_range(4):
        acc = nl.add(acc, nl.load(a[i, k * 64 + nl.arange(64)[None, :]]))  # carried across iterations
    nl.store(out[i, nl.arange(64)[None, :]], value=acc)
    return out


def test_tile_level_diagnostics_still_run():
    a = rng.standard_normal((512, 256), dtype=np.float32)
    with pytest.raises(NKIError, match="loop_carried"):
        _loop_carried[4](a)


def test_switch_off_gives_same_results():
    a = rng.standard_normal((640, 1536), dtype=np.float32)
    b = rng.standard_normal((640, 1536), dtype=np.float32)
    with vectorize(False):
        ref = K.tensor_add(a, b)
    np.testing.assert_array_equal(ref, a + b)
    np.testing.assert_array_equal(K.tensor_add(a, b), ref)


@nki.jit
def _write_through_view(a):
    out = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    acc = nl.zeros((128, 2), dtype=nl.float32)
    t = nl.load(a[i, nl.arange(64)[None, :]])
    nisa.activation(op=nl.exp, data=t, reduce_op=nl.add, reduce_res=acc[:, 1:2])  # writes into a view
    nl.store(out[i, nl.arange(2)[None, :]], value=acc)
    return out


def test_writes_through_tile_views_reach_the_tile():
    a = rng.standard_normal((512, 64), dtype=np.float32)
    out, n = launch(_write_through_view, (4,), np.ascontiguousarray(a))
    expect = np.zeros((512, 2))
    expect[:, 1] = np.exp(a.astype(np.float64)).sum(1)
    np.testing.assert_allclose(out, expect, rtol=1e-5)
    assert n == 3
