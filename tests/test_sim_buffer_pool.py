"""The simulator's pool of large result buffers (nki_kernels.simulator.buffer_pool).

A buffer may be handed out again only when no array, view or buffer export made from it
is alive; kernels whose large temporaries come from the pool must give NumPy's answers.
"""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from nki_kernels.simulator import buffer_pool, nki
from nki_kernels.simulator import language as nl

BIG = (1024, 2048)  # 8 MiB of fp32: above buffer_pool.MIN_BYTES


@pytest.fixture(autouse=True)
def _empty_pool():
    gc.collect()  # (an earlier test's launch may leave a placed SBUF in cyclic garbage: in use until collected)
    buffer_pool.release()
    yield
    buffer_pool.release()


def test_a_dropped_buffer_is_reused():
    a = buffer_pool.empty(BIG, np.float32)
    addr = a.ctypes.data
    del a
    b = buffer_pool.empty(BIG, np.float32)
    assert b.ctypes.data == addr
    c = buffer_pool.empty((2048, 1024), np.int32)  # the same bytes, another shape and dtype: b is in use
    assert c.ctypes.data != addr


def _holders(a):
    return {
        "slice": lambda: a[3:5],
        "reshape": lambda: a.reshape(-1),
        "view of a view": lambda: a[1:][::2].T,
        "dtype view": lambda: a.view(np.uint32),
        "memoryview": lambda: memoryview(a[7]),
        "broadcast": lambda: np.broadcast_to(a[0], (4,) + a.shape[1:]),
    }


@pytest.mark.parametrize("kind", list(_holders(np.zeros(1))))
def test_a_buffer_is_not_reused_while_anything_made_from_it_lives(kind):
    a = buffer_pool.empty(BIG, np.float32)
    a[...] = 1.0
    keep = _holders(a)[kind]()
    before = np.array(keep, copy=True)
    del a
    b = buffer_pool.empty(BIG, np.float32)
    b[...] = -5.0
    np.testing.assert_array_equal(np.asarray(keep), before)
    del keep
    c = buffer_pool.empty(BIG, np.float32)  # now the first buffer is free again
    assert not np.shares_memory(b, c)


def test_small_arrays_bypass_the_pool():
    a = buffer_pool.empty((16, 16), np.float32)
    assert a.shape == (16, 16) and buffer_pool.held_bytes() == (0, 0)


def test_the_pool_holds_at_most_its_limit(monkeypatch):
    monkeypatch.setattr(buffer_pool, "limit", 3 * 8 << 20)
    arrays = [buffer_pool.empty(BIG, np.float32) for _ in range(5)]
    for a in arrays:
        a[...] = 2.0
    held, _ = buffer_pool.held_bytes()
    assert held <= buffer_pool.limit
    del arrays, a
    assert buffer_pool.held_bytes()[1] <= buffer_pool.limit
    buffer_pool.release()
    assert buffer_pool.held_bytes() == (0, 0)


def test_copy_is_a_private_contiguous_copy():
    src = np.arange(2 * 4096 * 1024, dtype=np.float32).reshape(4096, 2048)[::2]
    c = buffer_pool.copy(src)
    np.testing.assert_array_equal(c, src)
    assert c.flags.c_contiguous and not np.shares_memory(c, src)


@nki.jit
def _chain(x, w):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    j = nl.arange(x.shape[1])[None, :]
    t = nl.load(x[i, j])
    sq = nl.multiply(t, t)  # large deferred temporaries, forced into pooled buffers
    s = nl.sum(sq, axis=[1], keepdims=True)
    u = nl.multiply(t, w)
    t[...] = nl.add(u, s)  # a write into the loaded tile: its private copy comes from the pool too
    nl.store(out[i, j], value=nl.multiply(t, sq))
    return out


def test_kernels_with_pooled_temporaries_match_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128 * 64, 1024)).astype(np.float32)
    w = np.float32(0.5)
    for _ in range(3):  # later launches run on buffers the earlier ones returned
        got = _chain[64](x, w)
        sq = x * x
        want = (x * w + sq.sum(axis=1, keepdims=True)) * sq
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert buffer_pool.held_bytes()[0] > 0


def _env_run(value):
    code = "from nki_kernels.simulator import buffer_pool as p; print(p.limit)"
    env = dict(os.environ, NKI_SIM_BUFFER_POOL_MB=value)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_the_environment_sets_the_limit():
    assert _env_run("0").stdout.strip() == "0"
    assert _env_run("16").stdout.strip() == str(16 << 20)
    bad = _env_run("lots")
    assert bad.returncode != 0 and "NKI_SIM_BUFFER_POOL_MB='lots'" in bad.stderr


def test_a_limit_of_zero_turns_the_pool_off(monkeypatch):
    monkeypatch.setattr(buffer_pool, "limit", 0)
    a = buffer_pool.empty(BIG, np.float32)
    assert a.base is None and buffer_pool.held_bytes() == (0, 0)


@nki.jit
def _int_divide(a, b, dtype=None):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.divide(nl.load(a), nl.load(b), dtype=dtype))
    return out


def test_an_op_whose_numpy_result_dtype_is_not_its_operands_is_computed_right():
    # np.divide of int32 arrays is float64 (an int32 pooled buffer must not receive it): the
    # result is the page's dtype, the inputs' int32 unless given (the quotient truncated), or
    # float32 when asked for
    a = np.arange(1, 128 * 16384 + 1, dtype=np.int32).reshape(128, 16384)
    b = np.full_like(a, 3)
    np.testing.assert_array_equal(_int_divide(a, b), np.trunc(a / 3).astype(np.float32))
    np.testing.assert_allclose(_int_divide(a, b, dtype=nl.float32), a / 3, rtol=1e-6)
