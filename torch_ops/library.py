"""``torch.library`` custom op ``nki::call``: the generic launch of any kernel inside ``torch.compile``.

``nki::call(payload, operands)`` launches the kernel a custom-call payload names;
``torch_ops.nki_call`` records it while compiling (see :mod:`torch_ops.traced`).
Custom ops are opaque to ``torch.compile``: Dynamo puts one node per call in the
graph (no graph break) and the fake kernel reads the result shapes from the payload.

The differentiable ops (``nki::tensor_add``, ``nki::rms_norm`` and the library's)
are declared with :func:`nki_kernels.op` and registered by :mod:`torch_ops.op_builder`.
"""

from __future__ import annotations

import torch

from nki_kernels.custom_call import decode_payload, resolve_kernel

from .launcher import launch


@torch.library.custom_op("nki::call", mutates_args=())
def call(payload: str, operands: list[torch.Tensor]) -> list[torch.Tensor]:
    """Launch the kernel a custom-call ``payload`` names on ``operands`` (not differentiable)."""
    p = decode_payload(payload)
    out = launch(resolve_kernel(p), tuple(operands), tuple(p["grid"]), p["static"])
    return list(out) if isinstance(out, tuple) else [out]


@call.register_fake
def _call_fake(payload, operands):
    # Payload dtype names are NumPy/ml_dtypes names, which torch shares (bfloat16, float8_e4m3fn, ...).
    return [torch.empty(r["shape"], dtype=getattr(torch, r["dtype"]), device=operands[0].device)
            for r in decode_payload(payload)["results"]]
