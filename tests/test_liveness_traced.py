"""Direct allocation inside loops the compiler does not unroll.

The Neuron compiler traces an ``affine_range`` / ``sequential_range`` body once; only
``static_range`` (and plain Python loops) are unrolled at trace time (nki.language.static_range:
"Unlike affine_range or sequential_range, Neuron compiler will fully unroll the loop during NKI
kernel tracing"; "On-chip memory (SBUF) usage may also go up significantly"). So Python run in such
a body -- an allocation function, ``base_addr=cur_addr`` followed by ``cur_addr += ...`` -- gives
each allocation one address for all iterations, and the Direct Allocation guide's "correct way"
declares a ``mod_alloc`` tensor inside ``nl.affine_range`` whose tiles "are dead after iteration,
thus no error". Tensors of different iterations then share bytes: fine while their live ranges do
not overlap, a lifetime conflict when they do.
"""

import numpy as np
import pytest

from nki_kernels.simulator import compiler as ncc
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.errors import NKIError
from nki_kernels.simulator.launch import jit

A = np.random.default_rng(0).standard_normal((8, 128, 512)).astype(np.float32)
WIDE = 8192  # fp32 elements: 32 KiB per partition


def _address_arithmetic(loop):
    """Each iteration places a 32 KiB and a 2 KiB tile at a Python-computed ``cur`` that grows by
    34 KiB per iteration: 8 iterations would need 272 KiB if every iteration got its own bytes."""

    @jit
    def k(a):
        out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        cur = 0
        for i in loop(8):
            t = nl.ndarray((128, WIDE), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
            cur += WIDE * 4
            r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
            cur += 512 * 4
            t[:, 0:512] = nl.load(a[i])
            r[...] = nl.multiply(t[:, 0:512], 2.0)
            nl.store(out[i], r)
        return out

    return k


@pytest.mark.parametrize("loop", [nl.affine_range, nl.sequential_range])
def test_address_arithmetic_in_a_traced_loop_is_evaluated_once(loop):
    np.testing.assert_array_equal(_address_arithmetic(loop)(A), 2.0 * A.astype(np.float64))


def test_address_arithmetic_in_static_range_really_overflows():
    # unrolled: iteration 6 asks for bytes 208896.. + 32 KiB, beyond every NeuronCore's SBUF
    with pytest.raises(NKIError) as e:
        _address_arithmetic(nl.static_range)(A)
    assert e.value.rule == "placement" and "does not fit below" in str(e.value)


def test_allocation_function_is_evaluated_once_per_traced_allocation():
    calls = []

    def func(idx, pdim_size, fdim_size):
        calls.append(idx)
        return 0, 4096 + idx[0] * fdim_size

    @jit
    def k(a):
        out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.affine_range(4):
            t = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=ncc.sbuf.alloc(func))
            for j in nl.affine_range(2):
                t[j] = nl.load(a[2 * i + j])
                nl.store(out[2 * i + j], t[j])
        return out

    np.testing.assert_array_equal(k(A), A)
    # "the compiler will statically evaluate func over indices of all the logical tiles" -- once
    assert calls == [(0,), (1,)]


def _two_iterations_kept(iterations):
    """Iteration 0's tile is still read after iteration 1 wrote its own tile; ``iterations()``
    yields the two iteration indices."""

    @jit
    def k(a):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        cur = 0
        kept = []
        for i in iterations():
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
            cur += 512 * 4
            t[...] = nl.load(a[i])
            kept.append(t)
        r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=16384))
        r[...] = nl.add(kept[0], kept[1])
        nl.store(out, r)
        return out

    return k


def test_tiles_of_two_iterations_live_together_on_the_same_bytes_conflict():
    with pytest.raises(NKIError) as e:
        _two_iterations_kept(lambda: nl.affine_range(2))(A)
    msg = str(e.value)
    assert e.value.rule == "allocation conflict" and msg.count("bytes 0..2047") == 2


def test_unrolled_iterations_get_their_own_bytes():
    ref = A[0].astype(np.float64) + A[1]
    np.testing.assert_allclose(_two_iterations_kept(lambda: nl.static_range(2))(A), ref, rtol=1e-6)


def test_static_range_inside_a_traced_loop_keeps_one_placement_per_unrolled_copy():
    """Within one traced body, a static_range is unrolled: its copies are separate allocations
    (both live here), while the traced loop around it reuses them in every iteration."""

    @jit
    def k(a):
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        cur = 0
        for i in nl.affine_range(4):
            parts = []
            for j in nl.static_range(2):
                t = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
                cur += 512 * 4
                t[...] = nl.load(a[2 * i + j])
                parts.append(t)
            r = nl.ndarray((128, 512), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=cur))
            cur += 512 * 4
            r[...] = nl.subtract(parts[0], parts[1])
            nl.store(out[i], r)
        return out

    ref = A[0::2].astype(np.float64) - A[1::2]
    np.testing.assert_allclose(k(A), ref, rtol=1e-6)


def test_a_new_entry_of_a_traced_loop_is_traced_again():
    """Two loops (or one loop entered twice from an unrolled Python loop) are traced separately:
    the second does not reuse the first one's addresses."""

    def two_entries():
        for rep in range(2):  # Python loop: unrolled, each entry of the inner loop is traced anew
            for _ in nl.affine_range(1):
                yield rep

    ref = A[0].astype(np.float64) + A[1]
    np.testing.assert_allclose(_two_iterations_kept(two_entries)(A), ref, rtol=1e-6)


def test_standalone_api_ranges_are_python_ranges():
    """NKI 0.7+ (the standalone ``nki`` package): "affine_range(), sequential_range(), and
    static_range() are deprecated and default to Python range" (NKI Loops guide), so each
    iteration is traced and Python address arithmetic gives each its own bytes."""
    from nki_kernels.simulator import standalone as nki

    snl, sisa = nki.language, nki.isa

    @nki.jit
    def k(a):
        out = snl.ndarray((128, 512), dtype=snl.float32, buffer=snl.shared_hbm)
        cur = 0
        kept = []
        for i in snl.affine_range(2):
            t = snl.ndarray((128, 512), dtype=snl.float32, buffer=snl.sbuf, address=(0, cur))
            cur += 512 * 4
            sisa.dma_copy(dst=t, src=a[i])
            kept.append(t)
        r = snl.ndarray((128, 512), dtype=snl.float32, buffer=snl.sbuf, address=(0, 16384))
        sisa.tensor_tensor(dst=r, data1=kept[0], data2=kept[1], op=snl.add)
        sisa.dma_copy(dst=out, src=r)
        return out

    np.testing.assert_allclose(k(A), A[0].astype(np.float64) + A[1], rtol=1e-6)
