"""NumPy's BLAS runs on ``config.blas_threads`` threads while a launch runs, and is restored after."""

import os
import subprocess
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from nki_kernels.simulator import blas, config, nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl


def _blas_threads():
    """Thread counts of NumPy's own BLAS (wheels bundle it under numpy.libs; other BLAS libraries a
    framework loads later are not NumPy's)."""
    return [lib["num_threads"] for lib in threadpool_info()
            if lib["user_api"] == "blas" and "numpy" in lib["filepath"]]


seen = []


@nki.jit
def matmul_recording_threads(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    seen.append(_blas_threads())
    nl.store(out, value=nisa.nc_matmul(nl.load(a), nl.load(b)))
    return out


def _launch(monkeypatch, limit):
    monkeypatch.setattr(config, "blas_threads", limit)
    seen.clear()
    a = np.random.default_rng(0).standard_normal((128, 128), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((128, 512), dtype=np.float32)
    with threadpool_limits(limits=2, user_api="blas"):
        got = matmul_recording_threads(a, b)
        after = _blas_threads()
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    return seen[0], after


def test_a_launch_runs_blas_on_one_thread_and_restores_the_count(monkeypatch):
    inside, after = _launch(monkeypatch, 1)
    assert inside and all(n == 1 for n in inside)
    assert all(n == 2 for n in after)


def test_zero_leaves_blas_as_it_is(monkeypatch):
    inside, after = _launch(monkeypatch, 0)
    assert inside == after and all(n == 2 for n in inside)


@pytest.mark.parametrize("cpus, workers, threads", [(2, None, 2), (16, "8", 2), (16, "16", 1), (2, "4", 1)])
def test_auto_shares_the_cpus_among_xdist_workers_whatever_the_load(monkeypatch, cpus, workers, threads):
    monkeypatch.setattr(blas, "usable_cpus", lambda: cpus)
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    for load in (0.0, 40.0):  # (the count, and so the bits of a product, never follow the load)
        monkeypatch.setattr(blas.os, "getloadavg", lambda load=load: (load, load, load))
        inside, after = _launch(monkeypatch, "auto")
        assert inside and all(n == min(threads, 2) for n in inside)  # (BLAS holds 2 threads here)
        assert all(n == 2 for n in after)


def test_auto_never_raises_the_count_blas_has(monkeypatch):
    monkeypatch.setattr(blas, "usable_cpus", lambda: 8)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    inside, after = _launch(monkeypatch, "auto")  # (BLAS holds 2 threads: auto's 8 leaves them)
    assert inside == after and all(n == 2 for n in inside)


@nki.jit
def _product(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.nc_matmul(nl.load(a), nl.load(b)))
    return out


def test_a_launchs_product_is_the_same_whatever_the_machine_load(monkeypatch):
    # OpenBLAS may round differently on another thread count, so the count must not follow the load:
    # two launches at load 0 and 40 give the same bits, and NumPy's product at that count.
    monkeypatch.setattr(config, "blas_threads", "auto")
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    rng = np.random.default_rng(2)
    for k, m, n in ((128, 128, 512), (7, 100, 3), (128, 1, 512), (64, 128, 1)):
        a, b = rng.standard_normal((k, m), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        got = []
        for load in (0.0, 40.0):
            monkeypatch.setattr(blas.os, "getloadavg", lambda load=load: (load, load, load))
            with threadpool_limits(limits=2, user_api="blas"):
                got.append(_product(a, b))
        np.testing.assert_array_equal(got[0], got[1])
        np.testing.assert_allclose(got[0], a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_auto_is_the_default_and_a_value_of_the_environment():
    code = "from nki_kernels.simulator import config; print(config.blas_threads)"
    for env_value, expected in ((None, "auto"), ("AUTO", "auto"), ("3", "3")):
        env = {k: v for k, v in os.environ.items() if k != "NKI_SIM_BLAS_THREADS"}
        if env_value is not None:
            env["NKI_SIM_BLAS_THREADS"] = env_value
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert r.stdout.strip() == expected


@pytest.mark.parametrize("value", ["abc", "-1"])
def test_a_bad_thread_count_in_the_environment_names_the_variable(value):
    env = dict(os.environ, NKI_SIM_BLAS_THREADS=value)
    r = subprocess.run([sys.executable, "-c", "import nki_kernels.simulator"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "NKI_SIM_BLAS_THREADS" in r.stderr and repr(value) in r.stderr
