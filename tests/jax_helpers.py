"""Shared pieces of the JAX tests: pure-jnp references, tolerances, small test kernels.

The references are written independently of jax_ops and nki_kernels (plain
jnp in float32), so the tests never compare the code under test with itself.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from nki_kernels.backend import nki, nl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
# Max error relative to the reference's magnitude: a few ulps of the output dtype.
TOL = {"float32": 2e-5, "bfloat16": 2e-2, "float16": 3e-3}
GRAD_TOL = {"float32": 2e-5, "bfloat16": 4e-2, "float16": 5e-3}


def rms_norm_ref(x, w, eps=1e-6):
    """RMSNorm in float32 jnp, rounded once to x's dtype."""
    xf, wf = x.astype(jnp.float32), w.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps) * wf
    return y.astype(x.dtype)


def rms_norm_grads_ref(x, w, cot, eps=1e-6):
    """(dx, dw) of ``sum(rms_norm(x, w) * cot)`` by autodiff of the float32 reference."""
    def loss(x, w):
        xf, wf = x.astype(jnp.float32), w.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps) * wf
        return jnp.sum(y * cot.astype(jnp.float32))
    dx, dw = jax.grad(loss, argnums=(0, 1))(x, w)
    return dx, dw


def max_rel_err(got, ref) -> float:
    """max |got - ref| / max |ref| in float64."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(got - ref).max() / (np.abs(ref).max() + 1e-30)) if ref.size else 0.0


def assert_close(got, ref, tol):
    """Assert shapes match and the relative error is within ``tol``."""
    assert tuple(got.shape) == tuple(ref.shape), (got.shape, ref.shape)
    err = max_rel_err(got, ref)
    assert err <= tol, f"max relative error {err:.3g} > {tol}"


def random(shape, dtype, seed=0):
    """Standard-normal array of ``shape`` and ``dtype`` (a numpy-generated, jnp-held array)."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)


def custom_calls(hlo_text: str) -> list:
    """The ``AwsNeuronCustomNativeKernel`` custom-call lines of an HLO text."""
    return [line for line in hlo_text.splitlines() if 'custom_call_target="AwsNeuronCustomNativeKernel"' in line]


def payloads(hlo_text: str) -> list:
    """Decoded ``backend_config`` JSON of every NKI custom-call in an HLO text (independent decoder)."""
    out = []
    for line in custom_calls(hlo_text):
        m = re.search(r'backend_config="([A-Za-z0-9+/=]+)"', line)
        assert m, line
        out.append(json.loads(base64.b64decode(m.group(1))))
    return out


def run_python(code: str, *, env=None, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the repo importable; returns the finished process."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


# --- test kernels ---------------------------------------------------------------------------------

@nki.jit
def scale_rows_kernel(a, scale=2.0):
    """out = a * scale for 2-D ``a`` with up to 512 columns; grid ``(ceil(rows / 128),)``."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iw = nl.arange(a.shape[1])[None, :]
    rows = ip < a.shape[0]
    nl.store(out[ip, iw], value=nl.multiply(nl.load(a[ip, iw], mask=rows), scale, dtype=a.dtype), mask=rows)
    return out


@nki.jit
def cast_kernel(a, dtype):
    """``a`` (one tile of at most 128 x 512) cast to the static argument ``dtype`` (an ``nl`` dtype)."""
    out = nl.ndarray(a.shape, dtype=dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.load(a), dtype=dtype))
    return out


@nki.jit
def sum_diff_kernel(a, b):
    """(a + b, a - b) for 2-D tiles of at most 128 x 512; one program."""
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    nl.store(s, value=nl.add(ta, tb))
    nl.store(d, value=nl.subtract(ta, tb))
    return s, d


@nki.jit
def unmasked_rows_kernel(a):
    """Copies 128-row tiles without a mask: reads past the end on a ragged last program."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ip = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iw = nl.arange(a.shape[1])[None, :]
    nl.store(out[ip, iw], value=nl.load(a[ip, iw]))
    return out
