"""nisa as documented: each generation's namespace lists exactly the names of its nki.isa page,
signatures follow the pages (positional order, unknown keywords are TypeErrors naming them), and
operators are accepted as the "Supported Math Operators" tables list them."""

import inspect

import numpy as np
import pytest

from nki_kernels.simulator import NKIError
from nki_kernels.simulator import isa as nisa1
from nki_kernels.simulator import language as nl1
from nki_kernels.simulator import nki as nki1
from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.instructions import target

nl = nki.language
nisa = nki.isa

# neuronxcc.nki.isa (v2.26 reference page): instructions, config enums, target.
GEN1_DOCUMENTED = {
    "nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_reduce", "tensor_partition_reduce",
    "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar", "tensor_scalar_reduce",
    "tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "tensor_copy_predicated", "reciprocal",
    "iota", "dropout", "affine_select", "range_select", "select_reduce", "sequence_bounds", "memset", "bn_stats",
    "bn_aggr", "local_gather", "dma_copy", "dma_transpose", "max8", "nc_find_index8", "nc_match_replace8",
    "nc_stream_shuffle", "engine", "reduce_cmd", "dge_mode", "nc_version", "get_nc_version",
    # the v2.26 nki.isa.dma_copy page: signature oob_mode=oob_mode.error, examples nisa.oob_mode.skip/.error
    "oob_mode",
    # its v2.27 page (dst= form); the documentation's example tests (aws-neuron-sdk 81ce03a) call
    # neuronxcc.nki.isa.tensor_scalar_cumulative
    "tensor_scalar_cumulative",
    # engine shorthands the pages use (engine=nisa.vector_engine; dma_engine listed v2.20 .. v2.22)
    "unknown_engine", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "dma_engine",
}
# nki.isa (current reference page, v2.29+; activate2 from v2.30, topk from v2.32), enums, target,
# VirtualRegister (its own page) and the engine shorthands.
CURRENT_DOCUMENTED = {
    "nc_matmul", "nc_matmul_mx", "nc_transpose", "activation", "activation_reduce", "activate2", "tensor_reduce",
    "tensor_partition_reduce", "tensor_tensor", "tensor_tensor_scan", "scalar_tensor_tensor", "tensor_scalar",
    "tensor_scalar_reduce", "tensor_scalar_cumulative", "tensor_copy", "tensor_copy_predicated", "exponential",
    "reciprocal", "quantize_mx", "iota", "dropout", "affine_select", "range_select", "select_reduce",
    "sequence_bounds", "memset", "bn_stats", "bn_aggr", "local_gather", "nc_n_gather", "dma_copy", "dma_transpose",
    "dma_compute", "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle", "register_alloc",
    "register_load", "register_move", "register_store", "core_barrier", "sendrecv", "sendrecv_compute", "rng",
    "rand2", "rand_set_state", "rand_get_state", "set_rng_seed", "nonzero_with_count", "topk",
    "engine", "dma_engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version",
    "get_nc_version", "get_nc_sub_version", "NkiValidationError", "NkiInstruction", "VirtualRegister",
    "unknown_engine", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine",
    # NKI 0.7.0 (Neuron 2.33): NkiScalar, "the future replacement for VirtualRegister", and its load / store
    "NkiScalar", "scalar_load", "scalar_store",
}
# Documented but not simulated yet (see the isa helper's report for why): they must not be
# half-present, and this list shrinks as they land.
GEN1_MISSING = set()
CURRENT_MISSING = set()


def _public(mod):
    return {n for n in dir(mod) if not n.startswith("_")}


def test_gen1_namespace_is_the_documented_list():
    assert set(nisa1.__all__) == GEN1_DOCUMENTED - GEN1_MISSING
    assert _public(nisa1) == set(nisa1.__all__)


def test_current_namespace_is_the_documented_list():
    assert set(nisa.__all__) == CURRENT_DOCUMENTED - CURRENT_MISSING
    # submodules of the package (nki.isa.constants) are documented modules, not leaks
    assert _public(nisa) - {"constants"} == set(nisa.__all__)


SIGNATURES = {  # current reference pages
    "nc_matmul": ["dst", "stationary", "moving", "is_stationary_onezero", "is_moving_onezero", "is_transpose",
                  "accumulate", "tile_position", "tile_size", "perf_mode", "name"],
    "nc_stream_shuffle": ["dst", "src", "shuffle_mask", "name"],
    "tensor_copy_predicated": ["dst", "src", "predicate", "reverse_pred", "name"],
    "max8": ["dst", "src", "name"],
    "nc_find_index8": ["dst", "data", "vals", "name"],
    "nc_match_replace8": ["dst", "data", "vals", "imm", "dst_idx", "name"],
    "range_select": ["dst", "on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1", "reduce_cmd",
                     "reduce_res", "reduce_op", "range_start", "on_false_value", "name"],
    "select_reduce": ["dst", "predicate", "on_true", "on_false", "reduce_res", "reduce_cmd", "reduce_op",
                      "reverse_pred", "name"],
    "sequence_bounds": ["dst", "segment_ids", "name"],
    "nc_n_gather": ["dst", "data", "indices", "name"],
    "nonzero_with_count": ["dst", "src", "index_offset", "padding_val", "name"],
    "tensor_scalar_cumulative": ["dst", "src", "op0", "op1", "imm0", "imm1", "reduce_cmd", "name"],
    "tensor_scalar_reduce": ["dst", "data", "op0", "operand0", "reduce_op", "reduce_res", "reverse0",
                             "reduce_cmd", "reduce_init", "reduce_res_negate", "name"],
    "dma_compute": ["dst", "srcs", "reduce_op", "scales", "unique_indices", "oob_mode", "name"],
    "dma_copy": ["dst", "src", "priority", "oob_mode", "dge_mode", "engine", "name", "dst_rmw_op", "unique_indices"],
    "dma_transpose": ["dst", "src", "axes", "priority", "dge_mode", "oob_mode", "name"],
    "rng": ["dst", "engine", "name"],
    "rand_get_state": ["dst", "engine", "name"],
    "dropout": ["dst", "data", "prob", "name"],
    "local_gather": ["dst", "src_buffer", "index", "num_elem_per_idx", "num_valid_indices", "name"],
    "quantize_mx": ["dst", "src", "dst_scale", "name"],
    "nc_matmul_mx": ["dst", "stationary", "moving", "stationary_scale", "moving_scale", "tile_position",
                     "tile_size", "accumulate", "name"],
    "register_alloc": ["x"],
    "register_move": ["dst", "src"],
    "register_load": ["dst", "src"],
    "register_store": ["dst", "src"],
    "rand_set_state": ["src_seeds", "engine", "name"],
    "set_rng_seed": ["src_seeds", "name"],
    "rand2": ["dst", "min", "max", "name"],
    "tensor_copy": ["dst", "src", "engine", "name"],
    "activation": ["dst", "op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd", "engine", "name"],
    "activation_reduce": ["dst", "op", "data", "reduce_op", "reduce_res", "bias", "scale", "name"],
    "exponential": ["dst", "src", "max_value", "reduce_res", "reduce_cmd", "reduce_init", "name"],
    "activate2": ["dst", "op", "data", "imm0", "imm1", "op0", "op1", "relu_param", "reverse0", "reverse1",
                  "reduce_op", "reduce_res", "reduce_cmd", "engine", "name"],
    "topk": ["val_dst", "idx_dst", "src", "n", "sorted", "name"],
}
GEN1_SIGNATURES = {  # v2.26 reference pages
    "nc_stream_shuffle": ["src", "dst", "shuffle_mask", "dtype", "mask", "name"],
    "max8": ["src", "mask", "dtype", "name"],
    "nc_find_index8": ["data", "vals", "mask", "dtype", "name"],
    "nc_match_replace8": ["data", "vals", "imm", "dst_idx", "mask", "dtype", "name"],
    "tensor_copy_predicated": ["src", "dst", "predicate", "reverse_pred", "mask", "dtype", "name"],
    "range_select": ["on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1", "reduce_cmd", "reduce_res",
                     "reduce_op", "range_start", "on_false_value", "mask", "dtype", "name"],
    "sequence_bounds": ["segment_ids", "dtype", "name"],
    "dropout": ["data", "prob", "mask", "dtype", "name"],
    "reciprocal": ["data", "dtype", "mask", "name"],
    "activation": ["op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd", "mask", "dtype", "name"],
    "nc_matmul": ["stationary", "moving", "is_stationary_onezero", "is_moving_onezero", "is_transpose",
                  "tile_position", "tile_size", "mask", "perf_mode", "name"],
}


# Keyword-only extras beyond a page's signature, each because an official kernel passes it.
LEGACY_KEYWORDS = {"tensor_copy": ["dtype"]}  # nki-samples' matmul tutorial (HEAD): tensor_copy(..., dtype=)


@pytest.mark.parametrize("mod,table", [(nisa, SIGNATURES), (nisa1, GEN1_SIGNATURES)], ids=["current", "gen1"])
def test_signatures_follow_the_pages(mod, table):
    for name, params in table.items():
        got = inspect.signature(getattr(mod, name)).parameters
        extra = [p for p in LEGACY_KEYWORDS.get(name, []) if p in got and got[p].kind is inspect.Parameter.KEYWORD_ONLY]
        assert list(got) == params + extra, name


def test_no_catch_all_keywords_in_nisa():
    for mod in (nisa, nisa1):
        for name in mod.__all__:
            fn = getattr(mod, name)
            if inspect.isfunction(fn):
                kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
                assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{mod.__name__}.{name} takes **kwargs"


def test_unknown_keyword_is_a_type_error_naming_it():
    x = np.ones((4, 8), np.float32)

    @nki1.jit
    def k1(a):
        t = nl1.load(a)
        nisa1.activation(op=nl1.exp, data=t, scael=2.0)
        return a

    with pytest.raises(TypeError, match="scael"):
        k1(x)

    @nki.jit
    def k2(a):
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        d = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.max8(dst=d, src=t, dtpye=nl.float32)
        return a

    with pytest.raises(TypeError, match="dtpye"):
        nki.simulate(k2)(x)


# ---------------------------------------------------------------------------
# operators as documented (np.* and nl.* names, reductions, identity)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("op,ref", [(np.max, np.max), (nl1.max, np.max), (np.min, np.min), (np.sum, np.sum),
                                    (np.amax, np.max), (nl1.maximum, np.max), (np.add, np.sum)])
def test_reduction_operators_as_documented(op, ref):
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)

    @nki1.jit
    def k(a):
        t = nl1.load(a)
        r = nisa1.tensor_reduce(op, t, axis=1, keepdims=True)
        res = nl1.ndarray((8, 1), dtype=nl1.float32, buffer=nl1.sbuf)
        nisa1.tensor_scalar_reduce(data=t, op0=np.multiply, operand0=1.0, reduce_op=op, reduce_res=res)
        outs = [nl1.ndarray((8, 1), dtype=nl1.float32, buffer=nl1.shared_hbm) for _ in range(2)]
        nl1.store(outs[0], r)
        nl1.store(outs[1], res)
        return tuple(outs)

    for got in k(x):
        np.testing.assert_allclose(got, ref(x.astype(np.float64), axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("op", [nl1.copy, np.copy])
def test_copy_is_the_identity_activation(op):
    x = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)

    @nki1.jit
    def k(a):
        t = nl1.load(a)
        r = nisa1.activation(op, t, scale=2.0, bias=1.0)
        out = nl1.ndarray(a.shape, dtype=nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, r)
        return out

    np.testing.assert_allclose(k(x), x.astype(np.float64) * 2.0 + 1.0, rtol=1e-6)


def test_activation_reduce_accepts_np_sum():
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)

    @nki1.jit
    def k(a):
        t = nl1.load(a)
        res = nl1.ndarray((8, 1), dtype=nl1.float32, buffer=nl1.sbuf)
        nisa1.activation_reduce(op=nl1.exp, data=t, reduce_op=np.sum, reduce_res=res)
        out = nl1.ndarray((8, 1), dtype=nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, res)
        return out

    np.testing.assert_allclose(k(x), np.exp(x.astype(np.float64)).sum(1, keepdims=True), rtol=1e-5)


# ---------------------------------------------------------------------------
# operand rules per NeuronCore version and memory
# ---------------------------------------------------------------------------
@nki.jit
def matmul_kernel(a, b, out_dtype=nl.float32, perf_mode=nisa.matmul_perf_mode.none, cast=None):
    ta = nl.ndarray(a.shape, dtype=cast or a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=cast or b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta, src=a)
    nisa.dma_copy(dst=tb, src=b)
    acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=out_dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=ta, moving=tb, perf_mode=perf_mode)
    res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def test_bf16_matmul_result_needs_neuroncore_v4():
    a = np.ones((32, 16), np.float32)
    with target.use("gen3"), pytest.raises(NKIError, match="NeuronCore-v4"):
        nki.simulate(matmul_kernel)(a, a, out_dtype=nl.bfloat16, cast=nl.bfloat16)
    with target.use("gen4"):
        got = nki.simulate(matmul_kernel)(a, a, out_dtype=nl.bfloat16, cast=nl.bfloat16)
    np.testing.assert_array_equal(got, np.full((16, 16), 32.0))


def test_double_row_perf_mode_is_fp8_on_v3_and_newer():
    a = np.ones((32, 16), np.float32)
    fp8 = nl.float8_e4m3fn
    got = nki.simulate(matmul_kernel)(a, a, perf_mode=nisa.matmul_perf_mode.double_row, cast=fp8)
    np.testing.assert_array_equal(got, np.full((16, 16), 32.0))
    with pytest.raises(NKIError, match="FP8 double"):
        nki.simulate(matmul_kernel)(a, a, perf_mode=nisa.matmul_perf_mode.double_row, cast=nl.bfloat16)
    with target.use("gen2"), pytest.raises(NKIError, match="NeuronCore-v3"):
        nki.simulate(matmul_kernel)(a, a, perf_mode=nisa.matmul_perf_mode.double_row, cast=fp8)


def test_gen1_dma_copy_rejects_psum_and_gpsimd_rejects_psum():
    x = np.ones((4, 8), np.float32)

    @nki1.jit
    def k(a, which):
        t = nl1.load(a)
        p = nl1.zeros((4, 8), dtype=nl1.float32, buffer=nl1.psum)
        if which == "dma":
            nisa1.dma_copy(dst=a, src=p)
        else:
            nisa1.tensor_copy(p, engine=nisa1.gpsimd_engine)
        return a

    with pytest.raises(NKIError, match="PSUM"):
        k(x, "dma")
    with pytest.raises(NKIError, match="GpSimd cannot access PSUM"):
        k(x, "gpsimd")


def test_nc_version_is_an_enum_with_names():
    assert nisa.get_nc_version() is nisa.nc_version.gen3
    assert nisa.nc_version.gen3.name == "gen3" and nisa1.nc_version is nisa.nc_version
    with target.use(nisa.nc_version.gen4):
        assert nisa1.get_nc_version() is nisa.nc_version.gen4


def test_gen1_tensor_partition_reduce_rejects_psum():
    # (gen-1 affine_select accepts PSUM: its compiler inserts the copy the official flash attention needs)
    x = np.ones((4, 8), np.float32)

    @nki1.jit
    def k(a):
        acc = nl1.zeros((4, 8), dtype=nl1.float32, buffer=nl1.psum)
        acc[...] = nl1.load(a)
        nisa1.tensor_partition_reduce(np.add, acc)
        return a

    with pytest.raises(NKIError, match="PSUM"):
        k(x)


def test_gen1_activation_reduce_op_is_add_only_on_v2():
    x = np.ones((4, 8), np.float32)

    @nki1.jit
    def k(a):
        res = nl1.ndarray((4, 1), dtype=nl1.float32, buffer=nl1.sbuf)
        nisa1.activation(np.exp, nl1.load(a), reduce_op=np.max, reduce_res=res)
        out = nl1.ndarray((4, 1), dtype=nl1.float32, buffer=nl1.shared_hbm)
        nl1.store(out, res)
        return out

    np.testing.assert_allclose(k(x), np.full((4, 1), np.e), rtol=1e-6)
    with target.use("gen2"), pytest.raises(NKIError, match="NeuronCore-v2"):
        k(x)
