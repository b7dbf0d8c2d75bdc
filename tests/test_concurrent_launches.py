"""Launches in different threads run at the same time and give the answers and verdicts each gives alone.

XLA's CPU runtime runs the custom-calls of a sharded program on several threads; each is a kernel
launch. Here launches of both generations (affine loops with their checks, grids, PSUM
accumulation, a placed tensor, and kernels with planted bugs) run alone first, then many at once
from a thread pool in a shuffled order: every output bit and every verdict must be the same.
A kernel waiting on a barrier inside its body shows that two launches really are in flight at once.
"""

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install
from nki_kernels.simulator import config

install()
import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(11)
A = RNG.standard_normal((512, 128), dtype=np.float32)
B = RNG.standard_normal((512, 64), dtype=np.float32)


@nki1.jit
def gen1_rows(a, b):
    out = nl1.ndarray(a.shape, a.dtype, buffer=nl1.shared_hbm)
    for i in nl1.affine_range(a.shape[0] // 128):
        x = nl1.load(a[i * 128:(i + 1) * 128, :])
        y = nl1.load(b[i * 128:(i + 1) * 128, :])
        nl1.store(out[i * 128:(i + 1) * 128, :], nl1.exp(nl1.multiply(x, 0.5)) + y)
    return out


@nki1.jit
def gen1_grid(a):
    out = nl1.ndarray(a.shape, a.dtype, buffer=nl1.shared_hbm)
    i = nl1.program_id(0)
    t = nl1.load(a[i * 128:(i + 1) * 128, :])
    nl1.store(out[i * 128:(i + 1) * 128, :], nl1.maximum(t, 0.0))
    return out


@nki1.jit
def gen1_matmul(a):
    out = nl1.ndarray((128, 128), nl1.float32, buffer=nl1.shared_hbm)
    acc = nl1.zeros((128, 128), nl1.float32, buffer=nl1.psum)
    for k in nl1.affine_range(4):
        t = nl1.load(a[k * 128:(k + 1) * 128, :])
        acc += nl1.matmul(t, t, transpose_x=True)
    nl1.store(out, nl1.copy(acc))
    return out


@nki.jit
def standalone_scale(b):
    out = nl.ndarray(b.shape, b.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(b.shape[0] // 128):
        t = nl.ndarray((128, b.shape[1]), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=b[i * 128:(i + 1) * 128, :])
        r = nl.ndarray((128, b.shape[1]), b.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=r, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=r)
    return out


@nki1.jit
def racy(a):
    out = nl1.ndarray((128, 64), a.dtype, buffer=nl1.shared_hbm)
    i = nl1.program_id(0)
    nl1.store(out, nl1.load(a[i * 128:(i + 1) * 128, :]))  # planted bug: every program writes the same rows
    return out


@nki1.jit
def loop_carried(a):
    out = nl1.ndarray((128, 64), a.dtype, buffer=nl1.shared_hbm)
    acc = nl1.zeros((128, 64), nl1.float32, buffer=nl1.sbuf)
    for i in nl1.affine_range(4):  # planted bug: a sum carried across affine_range iterations
        acc = nl1.add(acc, nl1.load(a[i * 128:(i + 1) * 128, :]))
    nl1.store(out, acc)
    return out


@nki1.jit
def reads_unwritten(a):
    out = nl1.ndarray((128, 64), a.dtype, buffer=nl1.shared_hbm)
    t = nl1.ndarray((128, 64), a.dtype, buffer=nl1.sbuf)
    nl1.store(out, nl1.add(t, 1.0))  # planted bug: t is never written
    return out


CASES = {
    "gen1_rows": lambda: gen1_rows(A[:, :64], B),
    "gen1_grid": lambda: gen1_grid[4](A),
    "gen1_matmul": lambda: gen1_matmul(A),
    "standalone_scale": lambda: standalone_scale(B),
    "racy": lambda: racy[2](B),
    "loop_carried": lambda: loop_carried(B),
    "reads_unwritten": lambda: reads_unwritten(B),
}
EXPECTED = {  # independent references (NumPy) and the rules the planted bugs break
    "gen1_rows": lambda got: np.testing.assert_allclose(got, np.exp(A[:, :64] * 0.5) + B, rtol=1e-5),
    "gen1_grid": lambda got: np.testing.assert_array_equal(got, np.maximum(A, 0)),
    "gen1_matmul": lambda got: np.testing.assert_allclose(
        got, sum(A[k * 128:(k + 1) * 128].T @ A[k * 128:(k + 1) * 128] for k in range(4)), rtol=1e-4, atol=1e-3),
    "standalone_scale": lambda got: np.testing.assert_array_equal(got, B * np.float32(3)),
    "racy": "race",
    "loop_carried": "loop_carried",
    "reads_unwritten": "uninit",
}


def _verdict(name):
    try:
        got = CASES[name]()
    except NKIError as e:
        return e.rule
    return "ok", np.asarray(got).tobytes()


def test_each_alone_matches_its_reference():
    for name, want in EXPECTED.items():
        if isinstance(want, str):
            assert _verdict(name) == want, name
        else:
            want(CASES[name]())


@pytest.mark.parametrize("workers", [2, 8])
def test_many_at_once_give_what_each_gives_alone(workers):
    alone = {name: _verdict(name) for name in CASES}
    order = list(CASES) * 4
    random.Random(workers).shuffle(order)
    with ThreadPoolExecutor(workers) as pool:
        got = list(pool.map(_verdict, order))
    for name, verdict in zip(order, got):
        assert verdict == alone[name], name


def test_two_launches_are_in_flight_at_once(monkeypatch):
    monkeypatch.setattr(config, "shadow", False)  # (shadow mode compares process-wide warnings: it takes turns)
    meet = threading.Barrier(2, timeout=20)

    @nki1.jit
    def waits(a):
        out = nl1.ndarray(a.shape, a.dtype, buffer=nl1.shared_hbm)
        t = nl1.load(a)
        meet.wait()  # both launches must have started their kernels before either goes on
        nl1.store(out, nl1.add(t, 1.0))
        return out

    x = RNG.standard_normal((128, 32), dtype=np.float32)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: waits(x), range(2)))
    for r in results:
        np.testing.assert_array_equal(r, x + 1)


def test_a_shadowed_launch_beside_a_plain_one():
    # shadow mode's reference run must not switch the other threads' launches to its path, or back
    saved = config.shadow
    try:
        config.shadow = True
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(_verdict, ["gen1_rows", "gen1_grid", "standalone_scale", "racy"] * 2))
    finally:
        config.shadow = saved
    assert [g if isinstance(g, str) else g[0] for g in got] == ["ok", "ok", "ok", "race"] * 2


def test_a_profile_counts_only_its_own_launch():
    from nki_kernels.simulator import profile

    alone = profile(standalone_scale, B)
    stop = threading.Event()

    def others():
        while not stop.is_set():
            gen1_grid[4](A)

    with ThreadPoolExecutor(2) as pool:
        busy = [pool.submit(others) for _ in range(2)]
        try:
            beside = profile(standalone_scale, B)
        finally:
            stop.set()
        for f in busy:
            f.result()
    assert beside.instructions == alone.instructions
    np.testing.assert_array_equal(beside.outputs, B * np.float32(3))
