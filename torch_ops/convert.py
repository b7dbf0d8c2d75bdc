"""Zero-copy hand-over between torch CPU tensors and the simulator's NumPy arrays.

The simulator reads and writes NumPy arrays; torch tensors on the CPU share
their memory with them. bfloat16 and the fp8 types have no NumPy dtype of
their own, so they cross as same-width integer views and are relabelled with
the matching ``ml_dtypes`` type on the other side: no element is copied or
converted. Strided (non-contiguous) tensors stay strided views; the simulator
indexes them like any array.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from nki_kernels.simulator.launch import ShapeDtype

# dtype -> (same-width carrier torch dtype, ml_dtypes type) for types NumPy lacks.
_VIA_BITS = {
    torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
    torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
}

_TORCH_TO_NUMPY = {
    torch.float32: np.dtype(np.float32),
    torch.float16: np.dtype(np.float16),
    torch.float64: np.dtype(np.float64),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16),  # (torch's "limited support" unsigned types: MX kernels pass packed
    torch.uint32: np.dtype(np.uint32),  # fp8 / fp4 data as uint32 words; they cross zero-copy like the rest)
    torch.uint64: np.dtype(np.uint64),
    torch.bool: np.dtype(np.bool_),
    **{t: np.dtype(m) for t, (_, m) in _VIA_BITS.items()},
}
_NUMPY_TO_TORCH = {v: k for k, v in _TORCH_TO_NUMPY.items()}
_NUMPY_TO_CARRIER = {np.dtype(m): (c, t) for t, (c, m) in _VIA_BITS.items()}


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy (or ml_dtypes) dtype holding elements of the torch ``dtype``."""
    try:
        return _TORCH_TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} has no NumPy counterpart the NKI simulator can use") from None


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype for a NumPy / ml_dtypes ``dtype``."""
    try:
        return _NUMPY_TO_TORCH[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"NumPy dtype {np.dtype(dtype)} has no torch counterpart") from None


def operand_specs(tensors) -> list:
    """``ShapeDtype`` (shape, NumPy dtype) of each tensor, as ``eval_shape`` and the payload want them."""
    return [ShapeDtype(tuple(t.shape), numpy_dtype(t.dtype)) for t in tensors]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of the CPU tensor ``t`` sharing its memory (strides kept, no copy).

    ``detach`` is free and lets tensors that require grad be viewed.
    """
    if t.device.type != "cpu":
        raise ValueError(f"to_numpy needs a CPU tensor, got one on {t.device}")
    t = t.detach()
    via = _VIA_BITS.get(t.dtype)
    if via is None:
        return t.numpy()
    carrier, np_type = via
    return t.view(carrier).numpy().view(np_type)


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing the memory of ``a`` (the simulator's output buffers)."""
    a = np.asarray(a)
    if not a.flags.writeable or not a.dtype.isnative:
        # torch refuses read-only or byte-swapped memory; only then is a copy made.
        a = np.array(a, dtype=a.dtype.newbyteorder("="))
    via = _NUMPY_TO_CARRIER.get(a.dtype)
    if via is None:
        return torch.from_numpy(a)
    carrier, t_type = via
    return torch.from_numpy(a.view(numpy_dtype(carrier))).view(t_type)
