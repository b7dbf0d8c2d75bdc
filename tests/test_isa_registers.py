"""Registers (register_alloc / move / load / store) and dynamic control flow (nl.dynamic_range,
nl.fori_loop, nl.while_loop) whose bounds are read from registers at run time; and the
accumulation registers behind reduce_cmd in the first generation's activation."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa1
from nki_kernels.simulator import language as nl1
from nki_kernels.simulator import nki as nki1
from nki_kernels.simulator import standalone as nki

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(16)


@nki.jit
def count_rows_kernel(x, n):
    """Adds 1.0 to rows 0..n-1 of x, n read from HBM into a register: three loop forms."""
    R, F = x.shape
    outs = []
    for form in ("dynamic_range", "fori_loop", "while_loop"):
        out = nl.ndarray((R, F), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=n)
        reg = nisa.register_alloc()
        nisa.register_load(reg, n_sb)

        def body(i):
            row = nl.ndarray((1, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=out[int(i):int(i) + 1, :])
            nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out[int(i):int(i) + 1, :], src=row)

        if form == "dynamic_range":
            for i in nl.dynamic_range(reg):
                body(i)
        elif form == "fori_loop":
            nl.fori_loop(0, reg, body)
        else:
            # Count down from n: the body works on row (r - 1), then returns r - 1 as the condition.
            def wbody(r):
                body(int(r) - 1)
                nxt = nisa.register_alloc()
                nisa.register_move(nxt, int(r) - 1)
                return nxt

            nl.while_loop(reg, wbody)
        outs.append(out)
    return tuple(outs)


@pytest.mark.parametrize("n", [0, 3, 8])
def test_loop_bounds_come_from_registers(n, monkeypatch):
    # the kernel's nl.dynamic_range form needs the previous specialization since NKI 0.7.0 (the other two
    # forms run the same under both)
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    want = x.copy()
    want[:n] += 1.0
    for got in nki.simulate(count_rows_kernel)(x, np.array([[n]], np.int32)):
        np.testing.assert_array_equal(got, want)


def test_register_store_and_move():
    @nki.jit
    def k(a):
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        r = nisa.register_alloc(5)
        r2 = nisa.register_alloc()
        nisa.register_move(r2, r)
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(t, r2)
        nisa.dma_copy(dst=out, src=t)
        return out

    assert nki.simulate(k)(np.zeros(1, np.float32))[0, 0] == 5


def test_register_read_before_write_and_wide_source_are_rejected():
    @nki.jit
    def k(a, wide=False):
        r = nisa.register_alloc()
        if wide:
            t = nl.zeros((1, 2), dtype=nl.int32, buffer=nl.sbuf)
            nisa.register_load(r, t)
        nl.fori_loop(0, r, lambda i: None)  # (nl.dynamic_range before NKI 0.7.0 removed it)
        return a

    with pytest.raises(NKIError, match="read before"):
        nki.simulate(k)(np.zeros((1, 1), np.float32))
    with pytest.raises(NKIError, match="exactly one element"):
        nki.simulate(k)(np.zeros((1, 1), np.float32), wide=True)


def test_fori_loop_rejects_register_step():
    @nki.jit
    def k(a):
        nl.fori_loop(0, 4, lambda i: None, step=nisa.register_alloc(1))
        return a

    with pytest.raises(NKIError, match="step"):
        nki.simulate(k)(np.zeros((1, 1), np.float32))


def test_gen1_activation_reduce_cmd_accumulates_across_instructions():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    y = RNG.standard_normal((16, 32)).astype(np.float32)

    @nki1.jit
    def k(a, b):
        ta, tb = nl1.load(a), nl1.load(b)
        res = nl1.ndarray((16, 1), dtype=nl1.float32, buffer=nl1.sbuf)
        nisa1.activation(op=nl1.exp, data=ta, reduce_op=np.add, reduce_cmd=nisa1.reduce_cmd.reset_reduce)
        nisa1.activation(op=nl1.copy, data=tb, reduce_op=np.add, reduce_res=res, reduce_cmd=nisa1.reduce_cmd.reduce)
        out = nl1.ndarray((16, 1), dtype=nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, res)
        return out

    want = np.exp(x.astype(np.float64)).sum(1, keepdims=True) + y.sum(1, keepdims=True)
    np.testing.assert_allclose(k(x, y), want, rtol=1e-5)


@nki.jit
def activation_kernel(a, reduce_op=nl.add, engine=nisa.scalar_engine, chain=False):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=d, op=nl.exp, data=t, reduce_op=reduce_op, reduce_res=r, engine=engine,
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    if chain:
        nisa.activation(dst=d, op=nl.copy, data=t, scale=2.0, reduce_op=reduce_op, reduce_res=r,
                        reduce_cmd=nisa.reduce_cmd.reduce)
    o = nl.ndarray(r.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=r)
    return o


def test_standalone_activation_registers_accumulate_and_rules():
    from nki_kernels.simulator.instructions import target

    x = RNG.standard_normal((8, 16)).astype(np.float32)
    got = nki.simulate(activation_kernel)(x, chain=True)
    want = np.exp(x.astype(np.float64)).sum(1, keepdims=True) + 2 * x.astype(np.float64).sum(1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(NKIError, match="only sum"):
        nki.simulate(activation_kernel)(x, reduce_op=nl.maximum)
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):
        nki.simulate(activation_kernel)(x, engine=nisa.gpsimd_engine)
    with target.use("gen4"), pytest.raises(NKIError, match="Scalar engine only"):
        nki.simulate(activation_kernel)(x, engine=nisa.gpsimd_engine)


def test_new_instructions_under_the_vectorised_launcher_match_per_program():
    """A grid kernel mixing batchable ops with instructions that run one program at a time (max8,
    activation with reduce_cmd): the vectorised launcher falls back and results do not change."""
    from nki_kernels.simulator import config
    from nki_kernels.simulator.launch import _bind, _unwrap, normalize_grid, run_programs

    @nki1.jit
    def k(a):
        out = nl1.ndarray((64, 8), dtype=nl1.float32, buffer=nl1.shared_hbm)
        sums = nl1.ndarray((64, 1), dtype=nl1.float32, buffer=nl1.shared_hbm)
        rows = nl1.program_id(0) * 16 + nl1.arange(16)[:, None]
        t = nl1.load(a[rows, nl1.arange(32)[None, :]])
        nl1.store(out[rows, nl1.arange(8)[None, :]], nisa1.max8(src=t))
        res = nl1.ndarray((16, 1), dtype=nl1.float32, buffer=nl1.sbuf)
        nisa1.activation(np.exp, t, reduce_op=np.add, reduce_res=res, reduce_cmd=nisa1.reduce_cmd.reset_reduce)
        nl1.store(sums[rows, nl1.arange(1)[None, :]], res)
        return out, sums

    x = RNG.standard_normal((64, 32)).astype(np.float32)
    results = []
    for on in (False, True):
        saved = config.vectorize
        config.vectorize = on
        try:
            args, kw = _bind(k, (x,), {})
            result, _ = run_programs(k, normalize_grid((4,)), args, kw)
        finally:
            config.vectorize = saved
        results.append(_unwrap(result))
    for out, sums in results:
        np.testing.assert_array_equal(out, -np.sort(-x, axis=1)[:, :8])
        np.testing.assert_allclose(sums, np.exp(x.astype(np.float64)).sum(1, keepdims=True), rtol=1e-5)
