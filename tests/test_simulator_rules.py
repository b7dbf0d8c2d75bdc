"""Each rule the Neuron compiler / hardware enforces raises NKIError naming the rule, the shape
and the kernel source line."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, nki
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator.instructions import target

A = np.zeros((256, 1024), np.float32)


def raises(kernel, *args, rule, words=(), grid=()):
    with pytest.raises(NKIError) as info:
        kernel[grid](*args)
    msg = str(info.value)
    assert f"[{rule}]" in msg
    assert __file__.split("/")[-1] in msg, "message must name the kernel source line"
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert isinstance(info.value, ValueError)
    return msg


def test_partition_dimension_over_128():
    @nki.jit
    def k(a):
        t = nl.load(a[0:256, 0:512])
        return a

    raises(k, A, rule="partition dimension", words=["(256, 512)", "256 > 128"])

    @nki.jit
    def k2(a):
        nl.zeros((129, 4), dtype=nl.float32)
        return a

    raises(k2, A, rule="partition dimension", words=["129"])


def test_psum_tile_wider_than_a_bank():
    @nki.jit
    def k(a):
        nl.zeros((128, 1024), dtype=nl.float32, buffer=nl.psum)
        return a

    raises(k, A, rule="PSUM bank", words=["(128, 1024)", "4096 B", "2048 B"])


@pytest.mark.parametrize(
    "s_shape,m_shape,words",
    [((128, 129), (128, 64), ["stationary free size 129"]), ((128, 64), (128, 513), ["moving free size 513"]),
     ((128, 64), (64, 64), ["(128, 64)", "(64, 64)"])],
)
def test_matmul_operand_limits(s_shape, m_shape, words):
    # K > 128 cannot be expressed: such an operand already breaks the partition rule.
    @nki.jit
    def k(a):
        nisa.nc_matmul(nl.zeros(s_shape, dtype=nl.float32), nl.zeros(m_shape, dtype=nl.float32))
        return a

    raises(k, A, rule="matmul operands", words=words)


def test_matmul_contraction_over_128_via_nl_matmul():
    @nki.jit
    def k(a):
        x = nl.zeros((64, 128), dtype=nl.float32)
        y = nl.zeros((128, 64), dtype=nl.float32)
        nl.matmul(x, nl.zeros((64, 64), dtype=nl.float32))  # x's free 128 must equal y's partition 64
        return a

    raises(k, A, rule="matmul operands", words=["(128, 64)", "(64, 64)"])


def test_out_of_bounds_unmasked_load_and_store():
    @nki.jit
    def k(a):
        i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
        t = nl.load(a[i, nl.arange(512)[None, :]])
        return a

    raises(k, A, grid=3, rule="out-of-bounds access", words=["256", "axis 0", "(256, 1024)", "mask"])

    @nki.jit
    def k2(a):
        out = nl.ndarray((100, 10), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out[0:128, 0:10], value=nl.zeros((128, 10), dtype=nl.float32))
        return out

    raises(k2, A, rule="out-of-bounds access", words=["(100, 10)"])


def test_masked_out_of_bounds_is_fine():
    @nki.jit
    def k(a):
        out = nl.ndarray((300, 10), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0) * 128 + nl.arange(128)[:, None]
        j = nl.arange(10)[None, :]
        nl.store(out[i, j], value=nl.load(a[i, j], mask=i < 300) + 1.0, mask=i < 300)
        return out

    np.testing.assert_array_equal(k[3](np.ones((300, 10), np.float32)), 2.0)


def test_compute_on_hbm_tensor():
    @nki.jit
    def k(a):
        return nl.exp(a)

    raises(k, A, rule="compute on HBM", words=["(256, 1024)", "nl.load"])

    @nki.jit
    def k2(a):
        t = nl.load(a[0:128, 0:512])
        return t + a[0:128, 0:512]

    raises(k2, A, rule="compute on HBM", words=["(128, 512)"])


def test_store_to_non_hbm_destination():
    @nki.jit
    def k(a):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nl.store(t, value=nl.load(a[0:128, 0:512]))
        return a

    raises(k, A, rule="store destination", words=["sbuf", "(128, 512)"])


def test_sbuf_over_192kib_per_partition():
    @nki.jit
    def k(a):
        t1 = nl.zeros((128, 32 * 1024), dtype=nl.float32)  # 128 KiB per partition
        t2 = nl.zeros((128, 20 * 1024), dtype=nl.float32)  # +80 KiB: over 192 KiB
        # One instruction reads both: they must be resident at once (tiles that are merely
        # allocated together may be spilled by the compiler's allocator; see test_sim_memory.py).
        nl.add(t1[:, 0:20 * 1024], t2)
        return a

    with target.use("gen2"):  # (trn1's 192 KiB per partition; trn2 has 224 KiB, trn3 256 KiB)
        raises(k, A, rule="SBUF capacity", words=["(128, 20480)", "81920", "212992", "196608"])

    @nki.jit
    def ok(a):
        # Rebinding `t` frees the previous tile only after the new one exists, so at most
        # two 64 KiB tiles are live at once.
        for _ in range(4):
            t = nl.zeros((128, 16 * 1024), dtype=nl.float32)
        return a

    ok(A)


def test_reducing_the_partition_axis():
    @nki.jit
    def k(a):
        nl.sum(nl.load(a[0:128, 0:8]), axis=0)
        return a

    raises(k, A, rule="partition reduction", words=["axis 0", "(128, 8)"])


def test_error_is_valueerror_subclass_and_exported():
    import nki_kernels.simulator as sim

    assert issubclass(sim.NKIError, ValueError)


def test_psum_bank_rule_holds_while_another_thread_allocates_standalone_psum_tensors():
    # The cores of a multi-core launch run as threads; the standalone API's allocators let a PSUM tensor
    # span banks for the duration of the call. That allowance was process-wide, so a core leaving it
    # could leave it raised for everyone (an intermittent CI failure of the test above).
    import threading

    from nki_kernels.simulator import core

    entered, release = threading.Event(), threading.Event()

    def standalone_allocation():
        with core.psum_tensors_span_banks():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=standalone_allocation)
    t.start()
    try:
        assert entered.wait(10)
        test_psum_tile_wider_than_a_bank()
    finally:
        release.set()
        t.join()
