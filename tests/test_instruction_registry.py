"""The instruction registry: an instruction declared once appears in both namespaces, batches, is profiled once,
and is costed by the timing model as it declares.

A toy instruction (``dst = 2 * data + 1``, not an NKI instruction) is declared in this file with
one decorator and nothing else; the checks compare its results with NumPy, and its schedule with
the cost it declares (``7 N`` Vector cycles, a made-up figure: what is checked is that the model
reads the declaration).
"""

import numpy as np
import pytest

from nki_kernels.simulator import config, install
from nki_kernels.simulator import profile as sim_profile
from nki_kernels.simulator import recording as _prof
from nki_kernels.simulator.instructions import registry
from nki_kernels.simulator.instructions.operands import check_dst, instruction, tile_operand, write
from nki_kernels.simulator.instructions.registry import Gen1
from nki_kernels.simulator.timing import Instr, costs, simulate
from nki_kernels.simulator.launch import _bind, _unwrap, normalize_grid, run_programs

install()
import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.isa as nisa1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def toy_cost(ins, hw):
    """The toy's declared cost: 7 cycles per element per partition (made up for the test)."""
    return 7 * ins.free_elems


def toy_affine(dst, data, name=None):
    """``dst = 2 * data + 1`` element-wise (a test instruction), fp32 compute rounded to ``dst.dtype``."""
    d = check_dst(dst, "toy_affine")
    x = tile_operand(data, "data", "toy_affine")
    out = np.asarray(x.data, np.float32) * np.float32(2) + np.float32(1)
    _prof.instruction("Vector", out)
    write(d, out, "toy_affine")


@pytest.fixture(scope="module", autouse=True)
def _declare_toy():
    """Declare the toy for this module's tests (one decorator, nothing else); withdrawn afterwards, so
    the namespaces are as documented for every other test (a declaration at import would reach them:
    collection imports every test module first)."""
    instruction(engine="Vector", cost=toy_cost, batched=True, gen1=Gen1(like="data", batched=True))(toy_affine)
    yield
    registry.withdraw("toy_affine")
    assert not hasattr(nisa, "toy_affine") and not hasattr(nisa1, "toy_affine")


def test_declared_once_is_in_both_namespaces():
    spec = registry.REGISTRY["toy_affine"]
    assert spec.engine == "Vector" and spec.batched and spec.module == __name__ and spec.cost is toy_cost
    assert nisa.toy_affine is spec.run  # the standalone nki.isa
    assert callable(nisa1.toy_affine) and nisa1.toy_affine is not spec.run  # the first generation's functional form
    assert "toy_affine" in registry.batch_safe("standalone") and "toy_affine" in registry.batch_safe("gen1")


def test_the_first_generation_batch_set_is_the_declared_one():
    import nki_kernels.simulator.isa as gen1_isa

    assert gen1_isa._BATCH_SAFE == registry.batch_safe("gen1") - {"toy_affine"}
    assert {"nc_matmul", "activation", "tensor_tensor", "iota", "memset"} <= gen1_isa._BATCH_SAFE


def test_a_second_declaration_elsewhere_is_refused():
    def toy_affine(dst, data):
        """A clash."""

    toy_affine.__module__ = "somewhere.else"
    with pytest.raises(ValueError, match="declared twice"):
        instruction(engine="Vector")(toy_affine)
    with pytest.raises(ValueError, match="engine"):
        instruction(engine="Matrix")(lambda dst: None)


@nki.jit
def standalone_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, :])
    r = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.toy_affine(dst=r, data=t)
    nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=r)
    return out


@nki1.jit
def gen1_kernel(a):
    out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
    i = nl1.program_id(0)
    t = nl1.load(a[i * 128:(i + 1) * 128, :])
    nl1.store(out[i * 128:(i + 1) * 128, :], value=nisa1.toy_affine(t))
    return out


def _run(kernel, grid, a, vectorise):
    saved = config.vectorize
    config.vectorize = vectorise
    try:
        args, kw = _bind(kernel, (a,), {})
        result, state = run_programs(kernel, normalize_grid(grid), args, kw)
    finally:
        config.vectorize = saved
    return _unwrap(result), state.batched


@pytest.mark.parametrize("kernel", [standalone_kernel, gen1_kernel], ids=["standalone", "gen1"])
def test_toy_batches_and_matches_numpy(kernel):
    a = np.random.default_rng(0).standard_normal((8 * 128, 64)).astype(np.float32)
    want = a * np.float32(2) + np.float32(1)
    ref, n_ref = _run(kernel, (8,), a, vectorise=False)
    got, n = _run(kernel, (8,), a, vectorise=True)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)
    assert n_ref == 0 and n >= 6  # every program but the reference one (and the ragged rest) ran batched


def test_gen1_form_allocates_like_its_operand_and_honours_dtype():
    a = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)

    @nki1.jit
    def k(a):
        out = nl1.ndarray(a.shape, dtype=nl1.bfloat16, buffer=nl1.shared_hbm)
        nl1.store(out, value=nisa1.toy_affine(nl1.load(a), dtype=nl1.bfloat16))
        return out

    got = k(a)
    assert got.dtype == nl1.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), (a * 2 + 1).astype(nl1.bfloat16).astype(np.float32))


@pytest.mark.parametrize("kernel", [standalone_kernel, gen1_kernel], ids=["standalone", "gen1"])
def test_toy_is_profiled_once_per_call(kernel):
    a = np.ones((3 * 128, 32), np.float32)
    report = sim_profile(kernel, a, grid=(3,))
    assert report.instructions["Vector"] == 3  # one toy_affine per program, nothing counted twice
    np.testing.assert_array_equal(report.outputs, a * 2 + 1)


def test_every_instruction_declares_its_cost():
    # (the timing model would otherwise give it its engine's default without saying so)
    assert registry.without_cost() == []
    for name, spec in registry.REGISTRY.items():
        assert callable(spec.cost), name
        if spec.engine == "DMA":  # a DMA's cost is its split into transfers on the DMA engines
            assert spec.cost is costs.dma_transfers, name
        if spec.sync:  # the model times one core: a wait for another core is not scheduled
            assert spec.cost is costs.not_scheduled, name


def test_the_model_reads_the_declared_cost():
    # one toy instruction of 512 elements per partition on trn1's Vector engine (1.12 GHz, architecture
    # guide): 7 * 512 cycles as declared, no dependency so no static overhead
    r = simulate([Instr("toy_affine", "Vector", free_elems=512)], version=2)
    assert r.busy_s["Vector"] == pytest.approx(7 * 512 / 1.12e9)
    assert r.default_costed == {}
    # an undeclared name: the documented Vector default max(64, N) cycles, and it is counted
    r = simulate([Instr("not_an_instruction", "Vector", free_elems=512)], version=2)
    assert r.busy_s["Vector"] == pytest.approx(512 / 1.12e9)
    assert r.default_costed == {"not_an_instruction": 1}
    assert "engine's default" in r.summary() and "not_an_instruction x1" in r.summary()


@pytest.mark.parametrize("kernel", [standalone_kernel, gen1_kernel], ids=["standalone", "gen1"])
def test_profile_costs_the_toy_as_declared(kernel):
    a = np.ones((128, 32), np.float32)
    report = sim_profile(kernel, a, grid=(1,), version=2)
    # one toy over 32 elements per partition after its load (a wait for another engine, no static
    # overhead): 7 * 32 cycles at 1.12 GHz
    assert report.busy_s["Vector"] == pytest.approx(7 * 32 / 1.12e9)
    assert report.timing.default_costed == {}
