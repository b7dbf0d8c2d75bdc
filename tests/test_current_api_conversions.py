"""What the NKI 0.6.0 release notes (Neuron 2.32) state about the current ``nki`` API, against NumPy:
fp32-to-integer casts "round to nearest, ties to even; saturate to the destination range" (the first
generation keeps its own simulator's truncation), and ``for i in nl.dynamic_range(...)`` / ``while reg:``
loops give a deprecation warning (``nl.fori_loop`` / ``nl.while_loop`` do not) -- since NKI 0.7.0 only under
``NKI_COMPILER_FRONTEND=custom`` (the default refuses them: tests/test_release_notes_0_7.py)."""

import warnings

import numpy as np
import pytest

from nki_kernels.simulator import install
from nki_kernels.simulator.instructions import target

install()
import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

# ties both ways, saturation both ways, and plain fractions
VALUES = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.6, -2.6, 127.4, 127.5, 300.0, -128.6, -300.0, 0.49, 3.5, 4.5]],
                  np.float32)


@nki.jit
def to_int(x, dtype, how):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    i = nl.ndarray(x.shape, dtype, buffer=nl.sbuf)
    if how == "tensor_copy":
        nisa.tensor_copy(dst=i, src=t)
    elif how == "activation":
        nisa.activation(dst=i, data=t, op=nl.copy)
    else:  # a DMA that converts
        nisa.dma_copy(dst=i, src=x)
    out = nl.ndarray(x.shape, dtype, buffer=nl.hbm)
    nisa.dma_copy(dst=out, src=i)
    return out


@pytest.mark.parametrize("how", ["tensor_copy", "activation", "dma_copy"])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8])
def test_current_api_rounds_to_nearest_even_and_saturates(how, dtype):
    info = np.iinfo(dtype)
    want = np.clip(np.rint(VALUES.astype(np.float64)), info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(to_int(VALUES, dtype, how), want)


def test_first_generation_still_truncates():
    @nki1.jit
    def k(x):
        out = nl1.ndarray(x.shape, dtype=nl1.int8, buffer=nl1.shared_hbm)
        t = nl1.load(x)
        nl1.store(out, value=nl1.copy(t, dtype=nl1.int8))
        return out

    want = np.clip(np.trunc(VALUES.astype(np.float64)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(k(VALUES), want)


@nki.jit
def counted(x, form):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    n = nisa.register_alloc(3)

    def add(i=None):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)

    if form == "dynamic_range":
        for _ in nl.dynamic_range(n):
            add()
    elif form == "while reg":
        c = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=c, value=3)
        one = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1)
        while n:
            add()
            nisa.tensor_tensor(dst=c, data1=c, data2=one, op=nl.subtract)
            nisa.register_load(n, c)
    elif form == "fori_loop":
        nl.fori_loop(0, n, add)
    else:  # while_loop
        c = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=c, value=3)
        one = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1)

        def body(r):
            add()
            nisa.tensor_tensor(dst=c, data1=c, data2=one, op=nl.subtract)
            nisa.register_load(r, c)
            return r

        nl.while_loop(n, body)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("form,deprecated", [("dynamic_range", True), ("while reg", True), ("fori_loop", False),
                                             ("while_loop", False)])
def test_dynamic_loop_forms_and_their_deprecation(form, deprecated, monkeypatch):
    # NKI 0.7.0 removed the two deprecated forms from the default (tracing) specialization
    # (tests/test_release_notes_0_7.py); NKI_COMPILER_FRONTEND=custom keeps NKI 0.6.0's behaviour tested here.
    monkeypatch.setenv("NKI_COMPILER_FRONTEND", "custom")
    x = np.zeros((1, 4), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = counted(x, form)
    np.testing.assert_array_equal(got, x + 3)
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning) and "deprecated" in str(w.message)]
    assert bool(dep) == deprecated
    if deprecated:  # pointed at the kernel's own line
        assert all(w.filename == __file__ for w in dep)


# --------------------------------------------------------------------------------------------------------
# "On NeuronCore-v2 and NeuronCore-v3, matmul accumulating into a PSUM location that was value-initialized
# by a non-matmul instruction (e.g., memset, tensor_copy) is not supported and is undefined behavior on
# hardware" (nki.isa.nc_matmul page); NKI 0.6.0's simulator "warns on PSUM accumulation patterns that
# produce incorrect results on hardware": a warning here too, the sum computed as NeuronCore-v4 gives it.
# --------------------------------------------------------------------------------------------------------
@nki.jit
def psum_start(a, b, start, accumulate, region):
    x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    y = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=y, src=b)
    acc = nl.ndarray((a.shape[1], 2 * b.shape[1]), nl.float32, buffer=nl.psum)
    n = b.shape[1]
    first, second = acc[:, 0:n], acc[:, n:2 * n]
    nisa.nc_matmul(dst=second, stationary=x, moving=y, accumulate=False)  # the other half: a matmul's value
    if start == "memset":
        nisa.memset(dst=first, value=1.0)
    elif start == "tensor_copy":
        ones = nl.ndarray(first.shape, nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        nisa.tensor_copy(dst=first, src=ones)
    elif start == "memset then overwrite":
        nisa.memset(dst=first, value=1.0)
        nisa.nc_matmul(dst=first, stationary=x, moving=y, accumulate=False)
    else:  # a matmul starts it
        nisa.nc_matmul(dst=first, stationary=x, moving=y, accumulate=False)
    nisa.nc_matmul(dst=first if region == "first" else second, stationary=x, moving=y, accumulate=accumulate)
    r = nl.ndarray(acc.shape, nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=acc)
    o = nl.ndarray(acc.shape, nl.float32, buffer=nl.hbm)
    nisa.dma_copy(dst=o, src=r)
    return o


@pytest.mark.parametrize("version,start,accumulate,region,warns", [
    ("gen3", "memset", True, "first", True),
    ("gen3", "tensor_copy", None, "first", True),
    ("gen2", "memset", None, "first", True),
    ("gen4", "memset", True, "first", False),                    # supported from NeuronCore-v4
    ("gen3", "matmul", True, "first", False),                    # a matmul started it
    ("gen3", "memset then overwrite", True, "first", False),     # a matmul overwrote the memset values
    ("gen3", "memset", True, "second", False),                   # the memset half is not accumulated onto
])
def test_matmul_accumulating_onto_values_a_non_matmul_wrote(version, start, accumulate, region, warns):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal((16, 6)).astype(np.float32)
    prod = a.astype(np.float64).T @ b.astype(np.float64)
    first = np.ones_like(prod) if start in ("memset", "tensor_copy") else prod.copy()
    second = prod.copy()
    if region == "first":
        first = first + prod
    else:
        second = second + prod
    with target.use(version), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = psum_start(a, b, start, accumulate, region)
    np.testing.assert_allclose(got, np.concatenate([first, second], axis=1), rtol=1e-5, atol=1e-5)
    hits = [w for w in caught if "[psum accumulate]" in str(w.message)]
    assert bool(hits) == warns
    if warns:
        assert "NeuronCore-v2 / v3" in str(hits[0].message) and "test_current_api_conversions.py" in str(hits[0].message)
