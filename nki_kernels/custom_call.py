"""The `AwsNeuronCustomNativeKernel` custom-call payload, shared by jax_ops and torch_ops.

One custom-call stands for one kernel launch. Its ``backend_config`` is a
versioned, self-describing payload: base64 of a JSON object that names the
kernel (module + qualname), a hash of its source, the SPMD grid, the static
(non-tensor) arguments and the operand/result shapes and dtypes. It is enough
to find the kernel again and re-run it, which is exactly what the CPU executor
behind the custom-call does (:func:`run_payload`).

On Trainium the official ``jax_neuronx`` / ``torch_neuronx`` lowering is used
instead, so this payload never reaches the Neuron compiler.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import inspect
import json
from typing import Any, Sequence

import numpy as np

TARGET = "AwsNeuronCustomNativeKernel"
PAYLOAD_VERSION = 1
_MAGIC = "nki-ops"


def source_hash(func) -> str:
    """SHA-256 (first 16 hex digits) of a kernel function's source text."""
    try:
        src = inspect.getsource(func)
    except (OSError, TypeError):
        src = getattr(func, "__qualname__", repr(func))
    return hashlib.sha256(src.encode()).hexdigest()[:16]


_DTYPE_KEY = "__nki_dtype__"  # a static dtype argument (nl.bfloat16, nl.float8_e5m2_x4 ...) by name


def _dtype_name(value: Any) -> str | None:
    """The name of a dtype given as a static argument (``as_dtype`` reads it back), else None."""
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        d = np.dtype(value)
        return d.names[0] if d.names else d.name  # (packed MX types are named structured dtypes)
    return None


def _plain(value: Any) -> Any:
    """Turn a static argument into JSON (tuples become lists, numpy scalars Python, dtypes their names)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    name = _dtype_name(value)
    if name is not None:
        return {_DTYPE_KEY: name}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    raise TypeError(
        f"static kernel argument {value!r} of type {type(value).__name__} cannot be put in "
        "the custom-call payload: use bool, int, float, str, None or tuples/lists/dicts of them"
    )


def _spec(shape: Sequence[int], dtype: Any) -> dict:
    return {"shape": [int(d) for d in shape], "dtype": np.dtype(dtype).name}


def encode_payload(kernel, grid, static: dict, operands, results) -> str:
    """Build the ``backend_config`` string for one launch of ``kernel``.

    ``operands`` and ``results`` are sequences of ``(shape, dtype)`` pairs;
    dtypes are anything :class:`numpy.dtype` accepts (ml_dtypes included).
    """
    func = getattr(kernel, "func", kernel)
    body = {
        "magic": _MAGIC,
        "version": PAYLOAD_VERSION,
        "kernel": {
            "module": func.__module__,
            "qualname": func.__qualname__,
            "source_sha256": source_hash(func),
        },
        "grid": [int(g) for g in (grid or ())],
        "static": _plain(dict(static)),
        "operands": [_spec(s, d) for s, d in operands],
        "results": [_spec(s, d) for s, d in results],
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return base64.b64encode(raw).decode("ascii")


@functools.lru_cache(maxsize=256)
def decode_payload(config: str | bytes) -> dict:
    """Decode and validate a ``backend_config`` produced by :func:`encode_payload`."""
    if isinstance(config, bytes):
        config = config.decode("ascii")
    try:
        body = json.loads(base64.b64decode(config, validate=True))
    except Exception as exc:  # noqa: BLE001 - any decoding failure means "not ours"
        raise ValueError(f"backend_config is not an nki-ops payload: {exc}") from None
    if not isinstance(body, dict) or body.get("magic") != _MAGIC:
        raise ValueError("backend_config is not an nki-ops payload (missing magic)")
    if body.get("version") != PAYLOAD_VERSION:
        raise ValueError(
            f"backend_config payload version {body.get('version')} is not supported "
            f"(this nki-ops reads version {PAYLOAD_VERSION})"
        )
    return body


@functools.lru_cache(maxsize=256)
def _resolve(module: str, qualname: str, digest: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        if part == "<locals>":
            raise ValueError(
                f"kernel {module}.{qualname} is defined inside a function; the custom-call "
                "payload can only name module-level kernels (or register it with "
                "nki_kernels.custom_call.register_kernel)"
            )
        obj = getattr(obj, part)
    kernel = obj
    func = getattr(kernel, "func", kernel)
    if source_hash(func) != digest:
        raise ValueError(
            f"kernel {module}.{qualname} changed since the program was traced "
            f"(source hash {source_hash(func)} != payload's {digest})"
        )
    return kernel


_REGISTRY: dict[tuple[str, str], Any] = {}


def register_kernel(kernel) -> None:
    """Make a kernel findable from a payload even if it is not importable by name."""
    func = getattr(kernel, "func", kernel)
    _REGISTRY[(func.__module__, func.__qualname__)] = kernel


def resolve_kernel(payload: dict):
    """Find the kernel object a decoded payload names, checking its source hash."""
    k = payload["kernel"]
    hit = _REGISTRY.get((k["module"], k["qualname"]))
    if hit is not None:
        return hit
    return _resolve(k["module"], k["qualname"], k["source_sha256"])


def _unplain(value: Any) -> Any:
    """The static arguments :func:`_plain` encoded, with dtypes made dtypes again."""
    if isinstance(value, dict):
        if set(value) == {_DTYPE_KEY}:
            from nki_kernels.simulator import dtypes

            return dtypes.as_dtype(value[_DTYPE_KEY])
        return {k: _unplain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    return value


def run_payload(payload: dict, arrays: Sequence[np.ndarray], outputs: Sequence[np.ndarray] = ()) -> list:
    """Run the launch a payload describes on the simulator; returns the results as a list.

    ``outputs`` are the caller's result buffers, offered to the kernel's output allocations
    (see :func:`~nki_kernels.simulator.launch.simulate_into`)."""
    from nki_kernels.simulator.launch import simulate_into

    kernel = resolve_kernel(payload)
    out = simulate_into(outputs, kernel, tuple(payload["grid"]), *arrays, **_unplain(payload["static"]))
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    want = payload["results"]
    if len(outs) != len(want):
        raise ValueError(f"kernel returned {len(outs)} outputs, the payload declares {len(want)}")
    return outs
