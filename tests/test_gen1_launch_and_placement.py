"""First-generation launch grids and hand-placed rotating SBUF blocks, as the contributed kernels use
them (nki-samples ``contributed/pipelined_attention.py``), against NumPy, with planted bugs."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa
from nki_kernels.simulator import language as nl
from nki_kernels.simulator import nki
from nki_kernels.simulator.nki import compiler as ncc

RNG = np.random.default_rng(3)


@nki.jit
def copy_rows(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i], nl.load(x[i]))
    return out


def test_a_grid_of_one_runs_one_instance():
    x = RNG.standard_normal((1, 128, 16)).astype(np.float32)
    np.testing.assert_array_equal(copy_rows[1](x), x)


def test_a_grid_dimension_of_size_zero_launches_nothing_and_is_an_error():
    # The SPMD grid is one kernel instance per grid point (programming model): [0] runs none,
    # which would leave the output unwritten; the contributed pipelined attention's driver does this.
    with pytest.raises(NKIError, match=r"grid.*size 0.*one kernel instance per grid point.*kernel\[1\]"):
        copy_rows[0](np.zeros((1, 128, 16), np.float32))


def _rotating(n, free, base):
    """``n`` blocks of [128, free] fp32 on two rotating SBUF slots from byte ``base`` (block i and i + 2 alias)."""
    return nl.ndarray((n, nl.par_dim(128), free), nl.float32,
                      buffer=ncc.sbuf.mod_alloc(base_addr=base, num_free_tiles=(2,)))


def _running_rescale(x, scale_only_after_first):
    """Blocks of ``x`` through a 2-slot rotating SBUF tensor ``f`` (``mod_alloc(num_free_tiles=(2,))``),
    as a pipelined kernel keeps per-group state: ``out[g] = x[g] * f[g]`` with ``f[g] = 2 * x[g]``
    written only when ``scale_only_after_first`` is false or ``g > 0``."""
    n = x.shape[0]

    @nki.jit
    def k(a):
        f, t, r = (_rotating(n, 1, base) for base in (0, 8, 16))
        out = nl.ndarray((n, 128, 1), nl.float32, buffer=nl.shared_hbm)
        for g in nl.sequential_range(n):
            t[g] = nl.load(a[g])
            if not scale_only_after_first or g > 0:
                f[g] = nisa.tensor_scalar(t[g], np.multiply, 2.0)
            r[g] = nisa.tensor_tensor(t[g], f[g], op=np.multiply)
            nl.store(out[g], r[g])
        return out

    return k(x)


def test_rotating_blocks_written_before_each_read_give_the_numpy_result():
    x = RNG.standard_normal((5, 128, 1)).astype(np.float32)
    np.testing.assert_allclose(_running_rescale(x, False), 2 * x.astype(np.float64) ** 2, rtol=1e-6)


def test_reading_a_rotating_block_that_nothing_wrote_is_reported():
    # planted bug: the first group's factor is never written (the pipelined attention at one 8192
    # section reads scaling_factor[grp_i], which only later sections write)
    x = RNG.standard_normal((5, 128, 1)).astype(np.float32)
    with pytest.raises(NKIError, match=r"uninit.*\(128, 1\)"):
        _running_rescale(x, True)


def _pipelined(x, precise_schedule):
    """A software-pipelined loop, as the contributed pipelined attention writes it: iteration ``g``
    produces stage 1 of group ``g + 1`` into a 2-slot rotating buffer and finishes group ``g`` from
    what iteration ``g - 1`` produced; ``out[g] = 3 * x[g] + 1``."""
    n = x.shape[0]

    @nki.jit
    def k(a):
        stage, res, inp = (_rotating(n, 4, base) for base in (0, 32, 64))
        out = nl.ndarray((n, 128, 4), nl.float32, buffer=nl.shared_hbm)
        inp[0] = nl.load(a[0])
        stage[0] = nisa.tensor_scalar(inp[0], np.multiply, 3.0)
        loop = nl.affine_range(n - 1, precise_schedule=True) if precise_schedule else nl.affine_range(n - 1)
        for g in loop:
            inp[g + 1] = nl.load(a[g + 1])
            stage[g + 1] = nisa.tensor_scalar(inp[g + 1], np.multiply, 3.0)
            res[g] = nisa.tensor_scalar(stage[g], np.add, 1.0)
            nl.store(out[g], res[g])
        res[n - 1] = nisa.tensor_scalar(stage[n - 1], np.add, 1.0)
        nl.store(out[n - 1], res[n - 1])
        return out

    return k(x)


def test_precise_schedule_keeps_a_software_pipelined_affine_range_in_order():
    x = RNG.standard_normal((6, 128, 4)).astype(np.float32)
    np.testing.assert_allclose(_pipelined(x, True), 3 * x.astype(np.float64) + 1, rtol=1e-6, atol=1e-6)


def test_the_same_pipeline_without_precise_schedule_is_a_loop_carried_dependency():
    x = RNG.standard_normal((6, 128, 4)).astype(np.float32)
    with pytest.raises(NKIError, match="loop_carried"):  # planted bug: plain affine_range iterations are independent
        _pipelined(x, False)


def test_loop_reduce_into_a_placed_sbuf_tensor_needs_no_tile_of_its_own():
    # The contributed pipelined attention: mm2_sbuf[g] = nl.loop_reduce(mm2_psum[g, i], np.add, [i]) in a
    # kernel whose SBUF tensors are all placed by hand (no automatically allocated result tile allowed).
    a = RNG.standard_normal((128, 3 * 128)).astype(np.float32)
    b = RNG.standard_normal((128, 3 * 64)).astype(np.float32)

    @nki.jit
    def k(x, y):
        xs = nl.ndarray((3, nl.par_dim(128), 128), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        ys = nl.ndarray((3, nl.par_dim(128), 64), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
        acc = nl.ndarray((nl.par_dim(128), 64), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2048))
        ps = nl.ndarray((3, nl.par_dim(128), 64), nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2,)))
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        acc[...] = 0.0
        for i in nl.affine_range(3):
            xs[i] = nl.load(x[:, i * 128:(i + 1) * 128])
            ys[i] = nl.load(y[:, i * 64:(i + 1) * 64])
            ps[i] = nisa.nc_matmul(xs[i], ys[i])
            acc[...] = nl.loop_reduce(ps[i], np.add, loop_indices=[i], name="acc")
        nl.store(out, acc)
        return out

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = sum(a64[:, i * 128:(i + 1) * 128].T @ b64[:, i * 64:(i + 1) * 64] for i in range(3))
    np.testing.assert_allclose(k(a, b), want, rtol=1e-4, atol=1e-4)


def test_a_load_after_a_functional_op_in_a_placed_kernel_is_the_loads_own_result():
    # The contributed pipelined attention's write_back: d[ip, g] = nisa.reciprocal(...), then
    # prev[g] = nl.load(o[...]) (the load's tile moves into prev[g], it is no automatic tile), then
    # res[g] = nisa.scalar_tensor_tensor(...).
    n = 3
    x = RNG.uniform(0.5, 2.0, (n * 128, 16)).astype(np.float32)

    @nki.jit
    def k(a):
        o = nl.ndarray((n * 128, 16), nl.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, n), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        inv = nl.ndarray((128, n), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=16))
        xs, prev, res = (_rotating(n, 16, base) for base in (32, 160, 288))
        ip, _ = nl.mgrid[0:128, 0:1]
        for g in nl.sequential_range(n):
            xs[g] = nl.load(a[g * 128:(g + 1) * 128])
            nl.store(o[g * 128:(g + 1) * 128], value=xs[g])
            sums[ip, g] = nisa.tensor_reduce(np.add, xs[g], axis=(1,))
            inv[ip, g] = nisa.reciprocal(sums[ip, g])
            prev[g] = nl.load(o[g * 128:(g + 1) * 128])
            res[g] = nisa.scalar_tensor_tensor(data=prev[g], op0=np.multiply, operand0=inv[ip, g], op1=np.add,
                                               operand1=xs[g])
            nl.store(o[g * 128:(g + 1) * 128], value=res[g])
        return o

    x64 = x.astype(np.float64).reshape(n, 128, 16)
    want = (x64 / x64.sum(2, keepdims=True) + x64).reshape(n * 128, 16)
    np.testing.assert_allclose(k(x), want, rtol=1e-5)
