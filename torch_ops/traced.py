"""Kernel launches inside ``torch.compile``: one ``nki::call`` node per launch.

Dynamo cannot trace into the simulator (NumPy), so while compiling,
``nki_call`` records ``torch.ops.nki.call(payload, tensors)`` instead: the
payload is the same ``backend_config`` the XLA custom-call carries, computed
once at trace time (``assume_constant_result``: Dynamo calls the function
for real and bakes its result into the graph as a constant), and the op's
fake kernel reads the result shapes from it. At run time the op decodes the
payload, finds the kernel again and launches it with ``nki_call`` on the
tensors' device.

Shapes are specialised: each distinct input shape gives its own payload
(the payload records the concrete grid and shapes, as on the XLA path), so
with dynamic shapes a new size means a recompile rather than a symbolic graph.
Kernels must be importable by module and name (defined at module level).
"""

from __future__ import annotations

import importlib
import operator

import torch

from nki_kernels.custom_call import encode_payload
from nki_kernels.simulator.launch import ShapeDtype, eval_shape

from . import library  # noqa: F401 - registers torch.ops.nki.call
from .convert import numpy_dtype


def _find_kernel(module: str, qualname: str):
    if "<locals>" in qualname:
        raise ValueError(f"kernel {module}.{qualname} is defined inside a function; kernels launched inside "
                         "torch.compile are found again by name at run time, so define them at module level")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def launch_payload(module: str, qualname: str, grid: tuple, static_items: tuple, specs: tuple) -> tuple:
    """``(payload, is_tuple)`` for a launch described by plain constants (run by Dynamo at trace time)."""
    kernel = _find_kernel(module, qualname)
    static = dict(static_items)
    operands = [ShapeDtype(shape, numpy_dtype(getattr(torch, dtype))) for shape, dtype in specs]
    out = eval_shape(kernel, grid, *operands, **static)
    single = isinstance(out, ShapeDtype)
    results = [(tuple(r.shape), r.dtype) for r in ((out,) if single else out)]
    return encode_payload(kernel, grid, static, operands, results), not single


# What ``torch._dynamo.assume_constant_result`` does (torch 2.9 and 2.13: it sets this attribute and
# returns the function), without importing torch._dynamo when torch_ops is imported: that import
# doubles torch_ops' import time, and Dynamo is loaded anyway by the time it reads the mark.
# tests/test_torch_traced.py compiles through it, so a torch that changed the mark fails there.
launch_payload._dynamo_marked_constant = True


def traced_launch(kernel, grid: tuple, tensors, static: dict):
    """Record one launch as ``torch.ops.nki.call`` in the graph being compiled."""
    # Plain strings and ints only: Dynamo hands them to launch_payload as constants.
    # operator.index turns a symbolic size (dynamic shapes) into a concrete int under a
    # guard, so a new size recompiles with its own payload instead of failing.
    specs = tuple((tuple(operator.index(d) for d in t.shape), str(t.dtype).replace("torch.", ""))
                  for t in tensors)
    payload, is_tuple = launch_payload(kernel.__module__, kernel.__qualname__,
                                       tuple(operator.index(g) for g in grid), tuple(sorted(static.items())), specs)
    outs = torch.ops.nki.call(payload, list(tensors))
    return tuple(outs) if is_tuple else outs[0]
