"""The simulated NeuronCore when nothing selects one: the official simulator "defaults to trn3" when
no Neuron chip is found (NKI CPU Simulator page: NEURON_PLATFORM_TARGET_OVERRIDE unset), so a kernel
of the current ``nki`` API runs on NeuronCore-v4; the first generation keeps Trn2 (NeuronCore-v3).
The environment and ``target.use`` still select; ``profile`` times on the target a plain call runs."""

import numpy as np
import pytest

from nki_kernels.simulator import NKIError, install, profile
from nki_kernels.simulator.instructions import target

install()
import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.isa as nisa1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


@pytest.fixture(autouse=True)
def _no_target_selected(monkeypatch):
    for var in ("NKI_SIM_NC_VERSION", "NEURON_PLATFORM_TARGET_OVERRIDE"):
        monkeypatch.delenv(var, raising=False)


SEEN = []


@nki.jit
def current(x):
    SEEN.append(nisa.get_nc_version())
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki1.jit
def first(x):
    SEEN.append(nisa1.get_nc_version())
    out = nl1.ndarray(x.shape, dtype=x.dtype, buffer=nl1.shared_hbm)
    nl1.store(out, value=nl1.load(x))
    return out


X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.mark.parametrize("kernel,want", [(current, 4), (first, 3)])
def test_each_api_has_its_default(kernel, want):
    SEEN.clear()
    np.testing.assert_array_equal(kernel(X), X)
    np.testing.assert_array_equal(nki.simulate(kernel)(X) if kernel is current else kernel(X), X)
    assert {v.value for v in SEEN} == {want}  # (a set: shadow mode runs each launch twice)
    assert profile(kernel, X).version == want  # the timing model's NeuronCore follows
    assert target.get_nc_version().value == 3  # outside a kernel


@pytest.mark.parametrize("var,value,want", [("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2", 3),
                                            ("NKI_SIM_NC_VERSION", "gen2", 2)])
def test_the_environment_selects(monkeypatch, var, value, want):
    monkeypatch.setenv(var, value)
    SEEN.clear()
    current(X)
    assert {v.value for v in SEEN} == {want} and profile(current, X).version == want


def test_use_selects():
    SEEN.clear()
    with target.use("gen3"):
        current(X)
        rep = profile(current, X)
    assert {v.value for v in SEEN} == {3} and rep.version == 3


@pytest.mark.parametrize("kib,fits", [(230, ("gen4",)), (200, ("gen3", "gen4"))])
def test_one_tile_fits_its_targets_sbuf(kib, fits):
    """SBUF per partition: 192 KiB on NeuronCore-v2, 224 KiB on v3, 256 KiB on v4 (architecture
    guides); one tile of ``kib`` KiB per partition fits the targets ``fits`` and is refused on the others
    (before, every target refused anything over 192 KiB)."""
    @nki.jit
    def big(x):
        t = nl.ndarray((128, kib * 256), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1.0)
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.hbm)
        nisa.dma_copy(dst=out, src=t[:, 0:4])
        return out

    for version in ("gen2", "gen3", "gen4"):
        with target.use(version):
            if version in fits:
                np.testing.assert_array_equal(big(X), np.ones((128, 4), np.float32))
            else:
                with pytest.raises(NKIError, match=r"\[SBUF capacity\].*more than the"):
                    big(X)
    if "gen4" in fits:
        np.testing.assert_array_equal(big(X), np.ones((128, 4), np.float32))  # the default target
