"""Calling @nki.jit kernels with torch tensors goes through torch_ops.nki_call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nki_kernels as K
import torch_ops
from nki_kernels.simulator import nki
from nki_kernels.simulator import language as nl
from torch_ops import backend


@nki.jit
def scale_and_shift(x, scale=2.0, shift=0.0):
    """Returns (x * scale + shift, x) for a (<=128, <=512) x."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    copy = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.add(nl.multiply(t, scale), shift))
    nl.store(copy, value=t)
    return out, copy


def test_kernel_called_with_tensors_returns_tensors():
    a, b = torch.randn(200, 600), torch.randn(200, 600)
    c = K.tensor_add_kernel[K.add_grid((200, 600))](a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


def test_public_numpy_level_callers_accept_tensors():
    x, w = torch.randn(3, 40, 64), torch.randn(64)
    y = K.rms_norm(x, w, 1e-6)
    assert isinstance(y, torch.Tensor)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def test_multi_output_and_static_arguments():
    x = torch.randn(64, 100, dtype=torch.bfloat16)
    out, copy = scale_and_shift[1](x, scale=3.0, shift=1.0)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, (x.float() * 3 + 1).to(torch.bfloat16))  # engines compute in fp32
    assert torch.equal(copy, x)
    out2, _ = torch_ops.nki_call(scale_and_shift, x, grid=(1,), scale=0.5)
    torch.testing.assert_close(out2, (x.float() * 0.5).to(torch.bfloat16))


def test_nki_call_with_a_bound_launch():
    a = torch.randn(10, 10)
    c = torch_ops.nki_call(K.tensor_add_kernel[(1, 1)], a, a)
    torch.testing.assert_close(c, 2 * a)


def test_locally_defined_kernel():
    @nki.jit
    def negate(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.negative(nl.load(x)))
        return out

    x = torch.randn(16, 32)
    assert torch.equal(negate(x), -x)


def test_meta_tensors_give_result_shapes_only():
    x = torch.empty(300, 700, device="meta", dtype=torch.float16)
    c = torch_ops.nki_call(K.tensor_add_kernel, x, x, grid=K.add_grid((300, 700)))
    assert c.device.type == "meta" and c.shape == (300, 700) and c.dtype == torch.float16
    y, rstd = torch_ops.nki_call(K.rms_norm_fwd_kernel, x[:, :64], torch.empty(64, device="meta", dtype=torch.float16),
                                 grid=(3,), eps=1e-6, return_rstd=True)
    assert y.shape == (300, 64) and rstd.shape == (300, 1) and rstd.dtype == torch.float32


def test_simulator_errors_surface():
    from nki_kernels.simulator import NKIError

    @nki.jit
    def too_tall(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))  # 256 partitions > 128
        return out

    with pytest.raises(NKIError):
        too_tall(torch.randn(256, 4))


def test_not_genuine_here_and_official_path_is_taken_when_routed_there(monkeypatch):
    assert torch_ops.genuine_neuron() is False
    assert backend.route(K.tensor_add_kernel, torch.device("cpu")) == "simulator"
    calls = []
    monkeypatch.setattr(backend, "route", lambda kernel, device: "xla")
    monkeypatch.setattr(backend, "official_launch", lambda *a: calls.append(a) or "official")
    a = torch.ones(2, 2)
    assert torch_ops.nki_call(K.tensor_add_kernel, a, a, grid=(1, 1)) == "official"
    path, kernel, grid, tensors, static = calls[0]
    assert path == "xla" and kernel is K.tensor_add_kernel and grid == (1, 1) and static == {}


def test_result_owns_fresh_memory():
    a = torch.randn(8, 8)
    c = torch_ops.add(a, a)
    assert c.data_ptr() != a.data_ptr()
    c.add_(1)  # writable
    np.testing.assert_allclose(c.numpy(), 2 * a.numpy() + 1, rtol=1e-6)


@nki.jit
def _first_half_rows(x):
    """Copies the first half of ``x``'s rows into a fresh output and never writes the rest."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = x.shape[0] // 2
    i = nl.arange(half)[:, None]
    j = nl.arange(x.shape[1])[None, :]
    nl.store(out[i, j], value=nl.load(x[i, j]))
    return out


def test_an_output_left_partly_unwritten_is_reported_and_nan():
    # Unwritten rows of a returned output are a warning and read NaN (the official simulator's
    # fill), whether the check warns or is off.
    from nki_kernels.simulator import config

    x = torch.randn(8, 16)
    with pytest.warns(UserWarning, match=r"\[uninit\].*never stored"):
        got = _first_half_rows[1](x)
    assert torch.isnan(got[4:]).all()
    with config.override(uninit="off"):
        got = _first_half_rows[1](x)
    np.testing.assert_array_equal(got[:4].numpy(), x[:4].numpy())
    assert torch.isnan(got[4:]).all()
