"""``nki.jit(compile_config=..., specialization_config=...)`` and ``nki.compiler.CompileConfig`` /
``SpecializationConfig`` / ``AddressRotation`` (NKI 0.7.0, Neuron 2.33:
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/generated/nki.jit.html,
https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.1/nki/api/nki.compiler.html)."""

import inspect
import warnings

import numpy as np
import pytest

from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.config import NKIWarning
from nki_kernels.simulator.errors import NKIError
from tests.isa_helpers import to_hbm, to_sbuf

nl = nki.language
nisa = nki.isa
CompileConfig = nki.compiler.CompileConfig
SpecializationConfig = nki.compiler.SpecializationConfig
AddressRotation = nki.compiler.AddressRotation


def test_jit_signature_names_the_two_configs():
    params = inspect.signature(nki.jit).parameters
    assert params["compile_config"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["specialization_config"].kind is inspect.Parameter.KEYWORD_ONLY


def _scale_kernel(**jit_kwargs):
    @nki.jit(**jit_kwargs)
    def kernel(a):
        x = to_sbuf(a)
        o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=x, op0=nl.multiply, operand0=3.0)
        return to_hbm(o)
    return kernel


@pytest.mark.parametrize("cfg", [CompileConfig(), CompileConfig(non_ssa_legalization=True, prefetch_auto=False,
                                                                address_rotation=AddressRotation.DISABLE)])
def test_a_compile_config_leaves_results_alone(cfg):
    a = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    np.testing.assert_array_equal(_scale_kernel(compile_config=cfg)(a), a * np.float32(3))


def test_config_arguments_are_typed():
    with pytest.raises(TypeError, match="compile_config must be an nki.compiler.CompileConfig"):
        nki.jit(compile_config={"non_ssa_legalization": True})
    with pytest.raises(TypeError, match="specialization_config must be an nki.compiler.SpecializationConfig"):
        nki.jit(specialization_config=CompileConfig())
    with pytest.raises(TypeError):
        CompileConfig(non_ssa_legalisation=True)  # a misspelt option is an error, not ignored
    with pytest.raises(TypeError, match="barrier_check must be a bool"):
        CompileConfig(barrier_check="yes")
    with pytest.raises(TypeError, match="address_rotation must be an nki.compiler.AddressRotation"):
        CompileConfig(address_rotation="auto")


def _outer_inner(outer_kwargs, inner_kwargs):
    @nki.jit(**inner_kwargs)
    def inner(x, o):
        nisa.tensor_scalar(dst=o, data=x, op0=nl.add, operand0=1.0)

    @nki.jit(**outer_kwargs)
    def outer(a):
        x = to_sbuf(a)
        o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        inner(x, o)
        return to_hbm(o)
    return outer


A = np.arange(32, dtype=np.float32).reshape(4, 8)


def test_nested_kernel_with_the_same_or_no_config_inlines():
    same = CompileConfig(dead_code_elim=False)
    for inner in ({"compile_config": same}, {}):
        got = _outer_inner({"compile_config": same}, inner)(A)
        np.testing.assert_array_equal(got, A + 1)


def test_nested_kernel_whose_config_disagrees_is_refused():
    kernel = _outer_inner({"compile_config": CompileConfig(dead_code_elim=False)},
                          {"compile_config": CompileConfig(dead_code_elim=True)})
    with pytest.raises(NKIError, match="disagree"):
        kernel(A)


def test_allow_nested_config_override_warns_and_runs():
    kernel = _outer_inner({"compile_config": CompileConfig(dead_code_elim=False),
                           "specialization_config": SpecializationConfig(allow_nested_config_override=True)},
                          {"compile_config": CompileConfig(dead_code_elim=True)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = kernel(A)
    np.testing.assert_array_equal(got, A + 1)
    assert any(issubclass(w.category, NKIWarning) and "allow_nested_config_override" in str(w.message)
               for w in caught)


def test_configs_are_in_the_current_namespace_only():
    # the 2.33.1 nki.compiler page lists them; the first generation's neuronxcc.nki.compiler pages do not
    from nki_kernels.simulator import compiler as gen1_compiler

    assert {"CompileConfig", "SpecializationConfig", "AddressRotation"} <= set(nki.compiler.__all__)
    assert not {"CompileConfig", "SpecializationConfig", "AddressRotation"} & set(dir(gen1_compiler))
    assert nki.compiler.sbuf is gen1_compiler.sbuf  # (the allocation API both share)
