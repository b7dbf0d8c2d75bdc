"""install() makes unmodified kernels with the official `neuronxcc.nki` imports run."""

import importlib
import math
import sys

import numpy as np

from nki_kernels import simulator


def test_install_registers_modules_and_is_idempotent():
    assert simulator.install() is True
    first = sys.modules["neuronxcc.nki.language"]
    assert simulator.install() is True
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing  # noqa: F401

    assert nl is first and nisa is simulator.isa
    # The registered nl is the documented namespace of the implementation module: same objects,
    # none of its helpers or imports.
    assert nl.add is simulator.language.add and nl.__all__ == simulator.language.__all__
    assert not any(hasattr(nl, n) for n in ("Tile", "np", "Access", "HBMTensor", "current"))
    assert nki.jit is simulator.nki.jit


def test_official_kernel_runs_unmodified():
    simulator.install()
    mod = importlib.import_module("tests.official.layer_scale_kernel")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 384)).astype(np.float32)
    w = (rng.standard_normal((384, 96)) / 20).astype(np.float32)
    y = mod.matmul_gelu_kernel[2](x, w, 0.5)
    h = x.astype(np.float64) @ w
    erf = np.vectorize(math.erf)(h / math.sqrt(2))
    np.testing.assert_allclose(y, 0.5 * h * (1 + erf) * 0.5, rtol=1e-4, atol=1e-5)


def test_backend_uses_simulator_without_neuron_sdk():
    from nki_kernels import backend

    assert backend.GENUINE is False
    assert backend.nl is simulator.language
