"""``profile()`` of a launch computes what a plain call of it computes (issue 28).

A plain call defers element-wise ops (computing them later, maybe straight into a store);
profiling used to compute every op at once. The two disagreed on an integer tile divided by a
Python int (``iota_int32 / W``): the deferred op kept NumPy's float64 quotient in a tile typed
int32, while the op computed at once converted it to int32 as the documented dtype rule asks
(the output gets the promoted type of an int32 tile and a weak int, int32; the engine computes
in fp32 and writes that type). nki-samples' ``resize_nearest_fixed_dma_kernel`` turned on it:
called, it ran; profiled, its masked gather read row 610 of 600.
"""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, nki, profile
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl

# A nearest-neighbour resize written from the nl / nisa pages: a flattened (IN_H x IN_W) image
# read by a masked gather whose row indices come from iota, floor, mod and multiply.
IN_H, IN_W, OUT_H, OUT_W, C = 6, 5, 11, 7, 64
OUT_SEQ = OUT_H * OUT_W  # 77 valid partitions of the 128 of the one tile
H_SCALE, W_SCALE = IN_H / OUT_H, IN_W / OUT_W
# One spare image row: `pos / OUT_W` rounded to int32 reaches row OUT_H in the last output row,
# which the spare row keeps in bounds (so this kernel is valid under either reading of the divide,
# and the test sees the values, not an error).
DATA_ROWS = (IN_H + 1) * IN_W


@nki.jit
def gather_resize(data, exact_divide=False):
    """``out[pos, c] = data[src(pos), c]`` for the first ``OUT_SEQ`` positions of one 128-row tile.

    ``exact_divide`` asks the divide for an fp32 result (``dtype=nl.float32``), so ``floor`` sees
    the true quotient; without it the quotient is int32, as the promotion rule gives."""
    out = nl.ndarray((OUT_SEQ, C), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_c = nl.arange(C)[None, :]
    pos = nisa.iota(i_p, dtype=nl.int32)
    if exact_divide:
        row = nl.floor(nl.divide(pos, OUT_W, dtype=nl.float32), dtype=nl.int32)
    else:
        row = nl.floor(pos / OUT_W, dtype=nl.int32)
    col = nl.mod(pos, OUT_W, dtype=nl.int32)
    src_row = nl.floor(nl.multiply(row, H_SCALE, dtype=nl.float32), dtype=nl.int32)
    src_col = nl.floor(nl.multiply(col, W_SCALE, dtype=nl.float32), dtype=nl.int32)
    src = src_row * IN_W + src_col
    valid = i_p < OUT_SEQ  # the partitions past OUT_SEQ index past the data: the mask must hold
    tile = nl.load(data[src, i_c], mask=valid)
    nl.store(out[i_p, i_c], value=tile, mask=valid)
    return out


def _expected(data, exact_divide):
    """NumPy's answer: the engine computes in fp32 and writes int32 truncated toward zero (the
    simulator's float -> int rule, as ``test_integer_divide_is_computed_in_float_and_truncated``
    pins); with ``dtype=nl.float32`` the quotient stays fp32."""
    pos = np.arange(OUT_SEQ)
    quotient = (pos / OUT_W).astype(np.float32)
    row = np.floor(quotient if exact_divide else np.trunc(quotient)).astype(np.int32)
    col = pos % OUT_W
    src_row = np.floor((row * H_SCALE).astype(np.float32)).astype(np.int32)
    src_col = np.floor((col * W_SCALE).astype(np.float32)).astype(np.int32)
    return data[src_row * IN_W + src_col]


@pytest.mark.parametrize("exact_divide", [False, True], ids=["int32-quotient", "fp32-quotient"])
def test_profile_and_call_give_the_same_bits_and_numpy_s_answer(exact_divide):
    data = np.random.default_rng(28).standard_normal((DATA_ROWS, C)).astype(np.float32)
    called = gather_resize(data, exact_divide=exact_divide)
    report = profile(gather_resize, data, exact_divide=exact_divide)
    # bit-identical, not close: the two paths must run the same arithmetic
    assert called.dtype == report.outputs.dtype
    np.testing.assert_array_equal(called.view(np.uint32), report.outputs.view(np.uint32))
    np.testing.assert_array_equal(called, _expected(data, exact_divide))


def test_an_int32_quotient_stays_integer_in_later_arithmetic_on_both_paths():
    # The old deferred path kept NumPy's float64 quotient in a tile typed int32: (i / W) * W then
    # gave i back instead of the int32 quotient times W.
    @nki.jit
    def round_trip(dummy):
        out = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        q = nisa.iota(nl.arange(128)[:, None], dtype=nl.int32) / OUT_W
        nl.store(out, value=q * OUT_W)
        return out

    want = (np.arange(128) // OUT_W * OUT_W).astype(np.int32)[:, None]
    assert not np.array_equal(want[:, 0], np.arange(128))  # (the two readings differ here)
    np.testing.assert_array_equal(round_trip(np.zeros(1, np.float32)), want)
    np.testing.assert_array_equal(profile(round_trip, np.zeros(1, np.float32)).outputs, want)


def test_integer_tile_divided_by_a_python_int_is_an_int32_tile_on_both_paths():
    # The op on its own: its dtype and values, called and profiled.
    @nki.jit
    def quotient(dummy):
        out = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        q = nisa.iota(nl.arange(128)[:, None], dtype=nl.int32) / OUT_W
        assert q.dtype == nl.int32  # the promoted type of (int32 tile, weak int)
        nl.store(out, value=nl.floor(q, dtype=nl.int32))
        return out

    want = np.trunc(np.arange(128) / OUT_W).astype(np.int32)[:, None]
    np.testing.assert_array_equal(quotient(np.zeros(1, np.float32)), want)
    np.testing.assert_array_equal(profile(quotient, np.zeros(1, np.float32)).outputs, want)


def test_profile_records_deferred_ops_with_their_output_shape():
    # Profiling now defers ops as a call does; the recorder still sees each one, with the
    # shape of its result (a broadcast add: the result is wider than its first operand's view).
    @nki.jit
    def bias_add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
        return out

    a = np.ones((128, 256), np.float32)
    b = np.full((128, 1), 2.0, np.float32)
    rep = profile(bias_add, a, b, version=2)
    np.testing.assert_array_equal(rep.outputs, a + b)
    assert rep.instructions["Vector"] == 1 and rep.instructions["DMA"] == 3
    assert [e[2] for e in rep.events if e[0] == "Vector"] == ["add (128, 256)"]
    # NeuronCore-v2's Vector engine: 1.12 GHz, N cycles for N elements per partition of a [P, 1]
    # column operand (tensor_scalar); it waited for its loads on another engine, which adds no static
    # overhead (docs/timing_model.md)
    assert np.isclose(rep.busy_s["Vector"], 256 / 1.12e9)


@nki.jit
def unmasked_gather(data):
    """Gathers rows ``iota`` (0..127) of ``data`` with no mask."""
    out = nl.ndarray((128, C), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_c = nl.arange(C)[None, :]
    rows = nl.multiply(nisa.iota(i_p, dtype=nl.int32), 1)  # an element-wise op, deferred on a call
    nl.store(out[i_p, i_c], value=nl.load(data[rows, i_c]))
    return out


def test_an_unmasked_out_of_bounds_gather_is_rejected_on_both_paths():
    # 100 rows, indices up to 127 and no mask: a real out-of-bounds read, whichever path runs
    data = np.zeros((100, C), np.float32)
    with pytest.raises(NKIError, match=r"out-of-bounds access.*index 100 on axis 0"):
        unmasked_gather(data)
    with pytest.raises(NKIError, match=r"out-of-bounds access.*index 100 on axis 0"):
        profile(unmasked_gather, data)
    # and in bounds it runs on both, with the same rows
    ok = np.random.default_rng(1).standard_normal((128, C)).astype(np.float32)
    np.testing.assert_array_equal(unmasked_gather(ok), ok)
    np.testing.assert_array_equal(profile(unmasked_gather, ok).outputs, ok)


def test_profile_pauses_the_collector_and_restores_it():
    """``profile()`` pauses Python's cyclic collector while it records and schedules, and leaves it as it
    found it: on, off, or after the kernel raised."""
    import gc

    seen = []

    @nki.jit
    def k(x, fail=False):
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("planted")
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    x = np.ones((4, 4), np.float32)
    assert gc.isenabled()
    np.testing.assert_array_equal(profile(k, x).outputs, x)
    assert gc.isenabled() and seen == [False]
    with pytest.raises(ValueError, match="planted"):
        profile(k, x, fail=True)
    assert gc.isenabled()
    gc.disable()
    try:
        profile(k, x)
        assert not gc.isenabled()
    finally:
        gc.enable()
