"""Shadow mode: a launch's fast path (grid vectorising) against the reference path, and launches
that do not leak into each other.

Planted fast-path bugs (a wrong batched load, a false error, a missed error) must be caught and
named; agreeing paths must give the fast path's answer (or error) unchanged; an in-place kernel
must update the caller's array once. Results are checked against NumPy."""

import os
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, config, nki, vectorize
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.nki import compiler as ncc
from nki_kernels.simulator.shadow import ShadowMismatch

RNG = np.random.default_rng(7)


@pytest.fixture
def shadow(monkeypatch):
    monkeypatch.setattr(config, "shadow", True)


@nki.jit
def row_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = slice(i * 128, (i + 1) * 128)
    nl.store(out[rows, :], nl.add(nl.load(a[rows, :]), nl.load(b[rows, :])))
    return out


@nki.jit
def row_add_oob(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = slice(i * 128 + 64, (i + 1) * 128 + 64)  # planted bug: the last program reads past the end
    nl.store(out[i * 128:(i + 1) * 128, :], nl.load(a[rows, :]))
    return out


@nki.jit
def add_one_in_place(a):
    i = nl.program_id(0)
    rows = slice(i * 128, (i + 1) * 128)
    nl.store(a[rows, :], nl.add(nl.load(a[rows, :]), 1.0))
    return a


def test_agreeing_paths_return_the_fast_paths_answer(shadow):
    a, b = RNG.standard_normal((2, 512, 64), dtype=np.float32)
    np.testing.assert_array_equal(row_add[4](a, b), a + b)


def test_a_wrong_batched_load_is_caught_and_named(shadow, monkeypatch):
    real = vectorize.load_batched

    def off_by_one(prog, acc, mask, dtype):  # planted fast-path bug: batched loads read +1
        t = real(prog, acc, mask, dtype)
        t.data  # noqa: B018 - (forces the load)
        return nl.add(t, 1.0)

    monkeypatch.setattr(vectorize, "load_batched", off_by_one)
    a, b = RNG.standard_normal((2, 512, 64), dtype=np.float32)
    with pytest.raises(ShadowMismatch, match=r"\[shadow\] output 0 of row_add differs in \d+ of 32768 elements") as e:
        row_add[4](a, b)
    assert "test_shadow.py" in e.value.where


def test_a_false_error_of_the_fast_path_names_both_verdicts(shadow, monkeypatch):
    def false_alarm(self):  # planted fast-path bug: the batched grid rejects a valid kernel
        raise NKIError("SBUF capacity", "planted")

    monkeypatch.setattr(vectorize.GridRunner, "run", false_alarm)
    a, b = RNG.standard_normal((2, 512, 64), dtype=np.float32)
    with pytest.raises(ShadowMismatch, match=r"fast path: NKIError: \[SBUF capacity\] planted.*reference path "
                                             r"\(no vectorising, fresh state\): no error"):
        row_add[4](a, b)


def test_a_missed_error_of_the_fast_path_is_caught(shadow, monkeypatch):
    a = RNG.standard_normal((512, 64), dtype=np.float32)
    real_run = vectorize.GridRunner.run

    def lenient(self):  # planted fast-path bug: the batched grid runs without the bounds check
        self.kernel = row_add  # (the same launch minus the out-of-bounds read)
        return real_run(self)

    monkeypatch.setattr(vectorize.GridRunner, "run", lenient)
    with pytest.raises(ShadowMismatch, match=r"fast path: no error; reference path .*: \w*NKI\w*Error: \[out-of-bounds access\] index 512"):
        row_add_oob[4](a, a)


def test_the_same_error_on_both_paths_is_the_error_itself(shadow):
    a = RNG.standard_normal((512, 64), dtype=np.float32)
    with pytest.raises(NKIError, match=r"\[out-of-bounds access\]") as e:
        row_add_oob[4](a, a)
    assert not isinstance(e.value, ShadowMismatch)


def test_an_in_place_kernel_updates_the_callers_array_once(shadow):
    a = RNG.standard_normal((256, 32), dtype=np.float32)
    want = a + 1
    add_one_in_place[2](a)
    np.testing.assert_array_equal(a, want)


def test_warnings_are_reported_once(shadow):
    @nki.jit
    def half(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out[0:128, :], nl.load(a[0:128, :]))
        return out

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = half(RNG.standard_normal((256, 8), dtype=np.float32))
    assert len([w for w in caught if "[uninit]" in str(w.message)]) == 1
    assert np.isnan(got[128:]).all()


def test_a_warning_repeated_in_one_launch_shows_as_often_as_without_shadowing(monkeypatch):
    @nki.jit
    def repeat_uninit(a):
        t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)  # never written
        acc = nl.load(a)
        for _ in nl.sequential_range(4):  # the same uninit read, four times at one line
            acc = nl.add(acc, t)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out

    monkeypatch.setitem(config._modes, "uninit", "warn")
    counts = []
    for on in (False, True):
        monkeypatch.setattr(config, "shadow", on)
        with warnings.catch_warnings(record=True) as caught:  # Python's default action: once per location
            repeat_uninit(np.ones((128, 64), np.float32))
        counts.append(len([w for w in caught if "[uninit]" in str(w.message)]))
    assert counts[0] >= 1 and counts == [counts[0], counts[0]]


class _StackAllocator:
    """A kernel file's own module-level allocator, as the nki-samples attention tutorial keeps one:
    each launch takes the next addresses and never gives them back."""

    def __init__(self):
        self.offset = 0

    def take(self, nbytes):
        addr, self.offset = self.offset, self.offset + nbytes
        return ncc.sbuf.mod_alloc(base_addr=addr)


_ALLOCATOR = _StackAllocator()


@nki.jit
def copy_through_placed_tile(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=_ALLOCATOR.take(a.shape[1] * 4))
    t[...] = nl.load(a)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


def test_the_reference_run_starts_from_the_kernels_own_python_state(shadow):
    a = RNG.standard_normal((128, 16384), dtype=np.float32)  # 64 KiB per partition: three launches fit, four do not
    _ALLOCATOR.offset = 0
    np.testing.assert_array_equal(copy_through_placed_tile(a), a)  # the reference run took the same addresses
    assert _ALLOCATOR.offset == 65536  # and the process goes on as after one launch
    np.testing.assert_array_equal(copy_through_placed_tile(a), a)
    np.testing.assert_array_equal(copy_through_placed_tile(a), a)
    with pytest.raises(NKIError, match=r"\[placement\]"):  # the fourth launch fails, shadowed or not
        copy_through_placed_tile(a)
    _ALLOCATOR.offset = 0


def test_state_a_kernel_reaches_through_its_closure_is_restored_too(shadow):
    class Calls:
        def __init__(self):
            self.n = 0

    calls = Calls()

    @nki.jit
    def counted_copy(a):
        calls.n += 1  # Python state outside the kernel, reached through a closure cell
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    a = RNG.standard_normal((128, 8), dtype=np.float32)
    for launches in (1, 2):
        np.testing.assert_array_equal(counted_copy(a), a)
        assert calls.n == launches  # the reference run counted from the same state, then was undone


def test_the_environment_variable_turns_it_on():
    code = "from nki_kernels.simulator import config; print(config.shadow)"
    env = dict(os.environ, NKI_SIM_SHADOW="1")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
    env["NKI_SIM_SHADOW"] = "0"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


# ------------------------------------------------------------------ launches do not leak
@nki.jit
def placed_scale(a):
    # Direct allocation at fixed addresses: what one launch places must not be taken by the next.
    t = nl.ndarray((128, 512), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    u = nl.ndarray((128, 512), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    t[...] = nl.load(a)
    u[...] = nl.multiply(t, 3.0)
    nl.store(out, u)
    return out


@nki.jit
def psum_accumulate(a, b):
    out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(4):
        acc += nl.matmul(nl.load(a[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]), transpose_x=True)
    nl.store(out, nl.copy(acc))
    return out


@nki.jit
def racy(a):
    out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out, nl.load(a[i * 128:(i + 1) * 128, :]))  # planted bug: every program writes the same rows
    return out


@nki.jit
def too_big(a):
    t = nl.ndarray((128, 60000), nl.float32, buffer=nl.sbuf)  # planted bug: 240000 B per partition
    t[...] = 0.0
    out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
    nl.store(out, t[:, 0:8])
    return out


@nki.jit
def reads_unwritten(a):
    out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), a.dtype, buffer=nl.sbuf)
    nl.store(out, nl.add(t, 1.0))  # planted bug: t is never written
    return out


A512 = RNG.standard_normal((512, 128), dtype=np.float32)
A128 = RNG.standard_normal((128, 512), dtype=np.float32)
B = RNG.standard_normal((512, 64), dtype=np.float32)
CASES = {
    "row_add": (lambda: row_add[4](B, B), lambda got: np.testing.assert_array_equal(got, B + B)),
    "placed_scale": (lambda: placed_scale(A128), lambda got: np.testing.assert_allclose(got, 3 * A128, rtol=1e-6)),
    "psum_accumulate": (lambda: psum_accumulate(A512, A512),
                        lambda got: np.testing.assert_allclose(got, A512.T @ A512, rtol=1e-4, atol=1e-3)),
    "racy": (lambda: racy[2](B), None),
    "too_big": (lambda: too_big(B), None),
    "reads_unwritten": (lambda: reads_unwritten(B), None),
    "oob": (lambda: row_add_oob[4](B, B), None),
}


def _verdict(name):
    run, check = CASES[name]
    try:
        got = run()
    except NKIError as e:
        return e.rule
    check(got)
    return "ok", got.tobytes()


def test_launches_in_random_order_give_the_verdicts_each_gives_alone():
    alone = {}
    for name in CASES:
        vectorize._plans.clear()  # (as a fresh process: no split plan remembered)
        alone[name] = _verdict(name)
    assert [alone[n] if isinstance(alone[n], str) else alone[n][0] for n in CASES] == \
        ["ok", "ok", "ok", "race", "SBUF capacity", "uninit", "out-of-bounds access"]
    order = list(CASES) * 3
    random.Random(0).shuffle(order)
    for name in order:
        assert _verdict(name) == alone[name], name


# ------------------------------------------------------------------ outputs returned through a view
@nki.jit
def half_written_reshaped(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:64, :], nl.load(a[0:64, :]))
    return out.reshape((64, 128))


@pytest.mark.parametrize("mode", ["error", "warn", "off"])
def test_an_output_returned_through_a_reshape_is_checked_and_filled_like_the_output(mode):
    # It returned np.empty's garbage (values like -3.3e16) with no report: a silent wrong answer.
    a = RNG.standard_normal((128, 64), dtype=np.float32)
    with config.override(uninit=mode), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = half_written_reshaped(a)
    assert got.shape == (64, 128)
    np.testing.assert_array_equal(got.reshape(128, 64)[:64], a[:64])
    assert np.isnan(got.reshape(128, 64)[64:]).all()
    reports = [str(w.message) for w in caught if "[uninit]" in str(w.message)]
    assert len(reports) == (0 if mode == "off" else 1)
    if reports:
        assert "4096 of its 8192 elements were never stored (first at (32, 0))" in reports[0]


@nki.jit
def noisy(a):
    out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
    r = nl.rand((128, 64), dtype=nl.float32)
    nl.device_print("first row", nl.load(a[0:1, :]))
    nl.store(out, nl.add(nl.load(a), r))
    return out


def test_unseeded_random_numbers_and_prints_agree_and_print_once(shadow, capsys):
    a = RNG.standard_normal((128, 64), dtype=np.float32)
    first, second = noisy(a), noisy(a)
    assert not np.array_equal(first, second)  # (unseeded: each launch draws anew)
    for got in (first, second):
        assert ((got - a) >= 0).all() and ((got - a) < 1).all()
    assert capsys.readouterr().out.count("first row") == 2  # (one print per launch, not per run)


def test_an_array_passed_twice_stays_one_array_in_the_reference_run(shadow):
    # NumPy multiplies a.T @ a of one buffer by another BLAS routine: the reference run's copy of the
    # inputs must keep them one array, or its last bits differ.
    a = RNG.standard_normal((512, 128), dtype=np.float32)
    np.testing.assert_allclose(psum_accumulate(a, a), a.T.astype(np.float64) @ a, rtol=1e-4, atol=1e-3)


def test_the_ci_shadow_list_names_existing_test_files():
    # scripts/test.sh runs these with --nki-shadow: a renamed file must not drop out silently
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "tests", "shadow_suite.txt")) as f:
        files = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert len(files) >= 30 and "tests/test_shadow.py" in files
    assert [f for f in files if not os.path.isfile(os.path.join(root, f))] == []
