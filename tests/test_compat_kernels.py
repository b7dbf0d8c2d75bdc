"""Official-style kernels (tests/compat_kernels) run unmodified through install() and match NumPy."""

import importlib
import math
import os
import sys

import numpy as np
import pytest

from nki_kernels import simulator

simulator.install()
K = importlib.import_module("tests.compat_kernels.kernels")
nl = importlib.import_module("neuronxcc.nki.language")
rng = np.random.default_rng(0)


def test_tiled_matmul_psum_accumulation():
    a = rng.standard_normal((256, 384), dtype=np.float32)
    b = rng.standard_normal((384, 1024), dtype=np.float32)
    c = K.matmul_kernel[2, 2](np.ascontiguousarray(a.T), b)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_transpose_2d():
    x = rng.standard_normal((256, 384), dtype=np.float32)
    np.testing.assert_array_equal(K.transpose_kernel[2, 3](x), x.T)


def test_row_softmax_ragged():
    x = rng.standard_normal((200, 300), dtype=np.float32)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(K.softmax_kernel[2](x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layernorm():
    x = rng.standard_normal((256, 640), dtype=np.float32)
    g = rng.standard_normal(640, dtype=np.float32)
    b = rng.standard_normal(640, dtype=np.float32)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(K.layernorm_kernel[2](x, g, b, eps=1e-5), ref, rtol=1e-4, atol=1e-4)


def test_avgpool_2d_mgrid():
    x = rng.standard_normal((16, 12, 20), dtype=np.float32)
    ref = x.reshape(16, 6, 2, 10, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(K.avgpool_kernel(x, pool=2), ref, rtol=1e-6, atol=1e-6)


def test_3d_grid():
    x = rng.standard_normal((3, 256, 1024), dtype=np.float32)
    ref = x * np.arange(1, 4, dtype=np.float32)[:, None, None]
    np.testing.assert_array_equal(K.scale_3d_kernel[3, 2, 2](x), ref)


def test_sequential_range_running_sum():
    x = rng.standard_normal((128, 512), dtype=np.float32)
    ref = np.cumsum(x.reshape(128, 4, 128).astype(np.float64), axis=1).reshape(128, 512)
    np.testing.assert_allclose(K.cumsum_blocks_kernel(x), ref, rtol=1e-5, atol=1e-5)


def test_activation_scale_and_bias():
    x = rng.standard_normal((128, 256), dtype=np.float32)
    bias = rng.standard_normal((128, 1), dtype=np.float32)
    np.testing.assert_allclose(K.activation_kernel(x, bias), np.tanh(x * 0.5 + bias), rtol=1e-5, atol=1e-6)


def test_spmd_dim_across_neuron_cores():
    a = rng.standard_normal((512, 64), dtype=np.float32)
    b = rng.standard_normal((512, 64), dtype=np.float32)
    c = K.spmd_add_kernel[nl.spmd_dim(2, nl.nc(2))](a, b)  # 4 programs over 2 cores
    np.testing.assert_array_equal(c, a + b)


def test_reduction_without_keepdims_broadcasts_partition_aligned():
    x = rng.standard_normal((256, 96), dtype=np.float32)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True))
    np.testing.assert_allclose(K.rms_rows_kernel[2](x), ref, rtol=1e-5, atol=1e-6)
