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


@pytest.mark.parametrize("load, threads", [(0.0, 2), (0.9, 2), (1.2, 1), (4.0, 1), (40.0, 1)])
def test_auto_takes_the_cores_the_load_leaves_idle_plus_its_own(monkeypatch, load, threads):
    monkeypatch.setattr(blas, "usable_cpus", lambda: 2)
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (load, load, load))
    inside, after = _launch(monkeypatch, "auto")
    assert inside and all(n == threads for n in inside)
    assert all(n == 2 for n in after)


def test_auto_never_raises_the_count_blas_has(monkeypatch):
    monkeypatch.setattr(blas, "usable_cpus", lambda: 8)
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    inside, after = _launch(monkeypatch, "auto")  # (BLAS holds 2 threads: auto's 8 leaves them)
    assert inside == after and all(n == 2 for n in inside)


@nki.jit
def _product(a, b):
    out = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.nc_matmul(nl.load(a), nl.load(b)))
    return out


def test_the_product_is_the_same_on_one_and_on_two_threads(monkeypatch):
    monkeypatch.setattr(config, "blas_threads", 0)  # (the launch keeps the count set around it)
    rng = np.random.default_rng(2)
    for k, m, n in ((128, 128, 512), (7, 100, 3), (128, 1, 512), (64, 128, 1)):
        a, b = rng.standard_normal((k, m), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        with threadpool_limits(limits=1, user_api="blas"):
            one = _product(a, b)
        with threadpool_limits(limits=2, user_api="blas"):
            two = _product(a, b)
        np.testing.assert_array_equal(one, two)
        np.testing.assert_allclose(one, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


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
