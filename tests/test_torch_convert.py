"""Zero-copy hand-over between torch CPU tensors and the simulator (bf16 included)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import torch_ops
from torch_ops import launcher
from torch_ops.convert import from_numpy, numpy_dtype, to_numpy, torch_dtype

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8, torch.uint8,
          torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32, torch.uint64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_shares_memory(dtype):
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6).to(dtype)
    a = to_numpy(t)
    assert a.dtype == numpy_dtype(dtype)
    assert a.ctypes.data == t.data_ptr()
    back = from_numpy(a)
    assert back.dtype == dtype and back.data_ptr() == t.data_ptr()
    assert torch.equal(back.float(), t.float())


def test_bf16_values_are_reinterpreted_not_converted():
    t = torch.tensor([1.0, -2.5, 3.140625, 1e-3], dtype=torch.bfloat16)
    a = to_numpy(t)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(a.astype(np.float32), t.float().numpy())


def test_strided_views_stay_views():
    base = torch.randn(8, 10)
    for t in (base.t(), base[:, ::3], base[2:5], torch.randn(3, 1).expand(3, 7)):
        a = to_numpy(t)
        assert a.ctypes.data == t.data_ptr()
        assert tuple(s // a.itemsize for s in a.strides) == t.stride()
        np.testing.assert_array_equal(a, t.numpy())


def test_requires_grad_tensor_can_be_viewed():
    t = torch.randn(3, 4, requires_grad=True)
    assert to_numpy(t).ctypes.data == t.data_ptr()


def test_from_numpy_read_only_copies():
    a = np.broadcast_to(np.ones((1, 4), np.float32), (3, 4))
    t = from_numpy(a)
    assert torch.equal(t, torch.ones(3, 4))


def test_dtype_maps():
    assert torch_dtype(np.float32) is torch.float32
    assert torch_dtype(ml_dtypes.bfloat16) is torch.bfloat16
    with pytest.raises(TypeError, match="complex64"):
        numpy_dtype(torch.complex64)
    with pytest.raises(ValueError, match="CPU tensor"):
        to_numpy(torch.ones(2, device="meta"))


def _spy(monkeypatch):
    seen = []
    real = launcher.simulate_into

    def spy(outputs, kernel, grid, *arrays, **static):
        seen.append(arrays)
        return real(outputs, kernel, grid, *arrays, **static)

    monkeypatch.setattr(launcher, "simulate_into", spy)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_kernels_read_the_tensors_memory(monkeypatch, dtype):
    """The CPU path hands the kernel views of the caller's tensors: no copy, no dtype conversion."""
    seen = _spy(monkeypatch)
    x = torch.randn(300, 64).to(dtype)
    xt = torch.randn(64, 300).to(dtype).t()  # non-contiguous 2-D: still a view
    w = torch.randn(64).to(dtype)
    for inp in (x, xt):
        torch_ops.rms_norm(inp, w)
        arrays = seen.pop()
        assert arrays[0].ctypes.data == inp.data_ptr() and arrays[0].dtype == numpy_dtype(dtype)
        assert arrays[1].ctypes.data == w.data_ptr()
    a, b = torch.randn(130, 700).to(dtype), torch.randn(700, 130).to(dtype).t()
    torch_ops.add(a, b)
    arrays = seen.pop()
    assert arrays[0].ctypes.data == a.data_ptr() and arrays[1].ctypes.data == b.data_ptr()
