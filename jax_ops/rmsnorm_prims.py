"""RMSNorm forward/backward as outer primitives: shapes, vmap folding and sharding.

``rms_norm_fwd_p(x, w; eps, with_rstd)`` -> ``(y,)`` or ``(y, rstd)`` with
``x`` of any rank ``(..., D)``, ``rstd`` ``(..., 1)`` float32.
``rms_norm_bwd_p(dy, x, w, rstd; batch_dims)`` -> ``(dx, dw)`` where ``dw``
is summed over every row axis except the first ``batch_dims`` (which vmap
adds): shape ``x.shape[:batch_dims] + (D,)``.

Both flatten the row axes into the kernels' 2-D layout, so a vmapped call is
still a single kernel launch (per-example ``dw`` comes from padding each
example's rows to whole 128-row programs and summing their partials).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from nki_kernels.rmsnorm import P as ROWS_PER_PROGRAM
from nki_kernels.rmsnorm import rms_norm_bwd_kernel, rms_norm_fwd_kernel, row_grid

from . import sharding as sh
from .primitive import nki_call, out_aval


# --- implementations (global or per-shard shapes) --------------------------------------------

def _fwd_impl(x, w, eps, with_rstd):
    lead, d = x.shape[:-1], x.shape[-1]
    n = math.prod(lead)
    if n == 0:
        y, rstd = jnp.zeros_like(x), jnp.zeros((*lead, 1), jnp.float32)
    else:
        out = nki_call(rms_norm_fwd_kernel, x.reshape(n, d), w, grid=row_grid(n), eps=eps, return_rstd=with_rstd)
        y, rstd = out if with_rstd else (out, None)
        y = y.reshape(x.shape)
        rstd = None if rstd is None else rstd.reshape(*lead, 1)
    return (y, rstd) if with_rstd else (y,)


def _bwd_impl(dy, x, w, rstd, batch_dims):
    dx, dw = _bwd_f32(dy, x, w, rstd, batch_dims)
    return dx, dw.astype(w.dtype)


def _bwd_f32(dy, x, w, rstd, batch_dims):
    """``(dx, dw)`` with ``dw`` still in float32, so shards can be summed before rounding."""
    shape, d = x.shape, x.shape[-1]
    b = math.prod(shape[:batch_dims])
    r = math.prod(shape[batch_dims:-1])
    dw_shape = (*shape[:batch_dims], d)
    if b * r == 0:
        return jnp.zeros_like(x), jnp.zeros(dw_shape, jnp.float32)
    # Programs own 128 rows; when several examples share a launch, pad each to whole programs
    # so every dw partial belongs to exactly one example (padded rows have dy = 0).
    rp = r if b == 1 else -(-r // ROWS_PER_PROGRAM) * ROWS_PER_PROGRAM
    dy3, x3, rs3 = dy.reshape(b, r, d), x.reshape(b, r, d), rstd.reshape(b, r, 1)
    if rp > 2 * r:  # padding would more than double the work (few rows per example): one launch each
        dx, dw = lax.map(lambda a: _bwd_f32(*a[:2], w, a[2], 0), (dy3, x3, rs3))
        return dx.reshape(shape), dw.reshape(dw_shape)
    if rp != r:
        pad = ((0, 0), (0, rp - r), (0, 0))
        dy3, x3, rs3 = jnp.pad(dy3, pad), jnp.pad(x3, pad), jnp.pad(rs3, pad, constant_values=1.0)
    dx2, dw_part = nki_call(rms_norm_bwd_kernel, dy3.reshape(b * rp, d), x3.reshape(b * rp, d), w,
                            rs3.reshape(b * rp, 1), grid=row_grid(b * rp))
    dx = dx2.reshape(b, rp, d)[:, :r].reshape(shape)
    dw = dw_part.reshape(b, -1, d).sum(1) if b > 1 else dw_part.sum(0, keepdims=True)
    return dx, dw.reshape(dw_shape)


# --- abstract evaluation -----------------------------------------------------------------------

def _rows(x):
    return tuple(x.sharding.spec)[:-1] if len(tuple(x.sharding.spec)) == x.ndim else None


def _fwd_abstract(x, w, *, eps, with_rstd):
    y = out_aval(x, x.shape, x.dtype, tuple(x.sharding.spec))
    if not with_rstd:
        return [y]
    rows = _rows(x)
    return [y, out_aval(x, (*x.shape[:-1], 1), np.float32, None if rows is None else (*rows, None))]


def _bwd_abstract(dy, x, w, rstd, *, batch_dims):
    rows = _rows(x)
    dw_spec = None if rows is None else (*rows[:batch_dims], None)
    return [out_aval(x, x.shape, x.dtype, tuple(x.sharding.spec)),
            out_aval(x, (*x.shape[:batch_dims], x.shape[-1]), w.dtype, dw_spec)]


# --- vmap ----------------------------------------------------------------------------------------

def _front(args, dims, size):
    """Batch axis of every argument moved (or broadcast) to the front."""
    return [jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size, *a.shape))
            for a, d in zip(args, dims)]


def _size(args, dims):
    return next(a.shape[d] for a, d in zip(args, dims) if d is not None)


def _fwd_batch(args, dims, *, eps, with_rstd):
    x, w = args
    size = _size(args, dims)
    if dims[1] is None:  # shared weight: the batch is just more rows
        outs = rms_norm_fwd_p.bind(_front([x], [dims[0]], size)[0], w, eps=eps, with_rstd=with_rstd)
    else:  # per-example weights: the kernel takes one weight vector, so one launch each
        xs, ws = _front(args, dims, size)
        outs = lax.map(lambda a: tuple(rms_norm_fwd_p.bind(*a, eps=eps, with_rstd=with_rstd)), (xs, ws))
    return list(outs), [0] * len(outs)


def _bwd_batch(args, dims, *, batch_dims):
    size = _size(args, dims)
    dy, x, w, rstd = args
    if dims[2] is None:
        dy, x, rstd = _front([dy, x, rstd], [dims[0], dims[1], dims[3]], size)
        outs = rms_norm_bwd_p.bind(dy, x, w, rstd, batch_dims=batch_dims + 1)
    else:
        front = _front(args, dims, size)
        outs = lax.map(lambda a: tuple(rms_norm_bwd_p.bind(*a, batch_dims=batch_dims)), tuple(front))
    return list(outs), [0, 0]


# --- sharding ------------------------------------------------------------------------------------
# Rows follow x's sharding; the hidden axis and the weight are replicated.

def _fwd_infer(eps, with_rstd, mesh, arg_infos, result_infos):
    rows = sh.spec_of(arg_infos[0], arg_infos[0].ndim)[:-1]
    y = sh.named(mesh, *rows, None)
    return (y, sh.named(mesh, *rows, None)) if with_rstd else (y,)


def _fwd_partition(eps, with_rstd, mesh, arg_infos, result_infos):
    rows = sh.spec_of(arg_infos[0], arg_infos[0].ndim)[:-1]
    args = (sh.named(mesh, *rows, None), sh.named(mesh, None))
    outs = _fwd_infer(eps, with_rstd, mesh, arg_infos, result_infos)

    def lower(x, w):
        return _fwd_impl(x, w, eps, with_rstd)

    return mesh, lower, outs, args


def _fwd_rule(eps, with_rstd, mesh, operand_types, result_types):
    rows = " ".join(sh.factors("r", len(operand_types[0].shape) - 1))
    rule = f"{rows} d, d -> {rows} d" + (f", {rows} k" if with_rstd else "")
    return rule, {"need_replication_factors": ("d",)}


def _bwd_infer(batch_dims, mesh, arg_infos, result_infos):
    rows = sh.spec_of(arg_infos[1], arg_infos[1].ndim)[:-1]
    return sh.named(mesh, *rows, None), sh.named(mesh, *rows[:batch_dims], None)


def _bwd_partition(batch_dims, mesh, arg_infos, result_infos):
    rows = sh.spec_of(arg_infos[1], arg_infos[1].ndim)[:-1]
    x_like = sh.named(mesh, *rows, None)
    args = (x_like, x_like, sh.named(mesh, None), x_like)
    outs = _bwd_infer(batch_dims, mesh, arg_infos, result_infos)
    reduced = sh.axis_names(rows[batch_dims:])  # each shard summed dw over its own rows only

    def lower(dy, x, w, rstd):
        dx, dw = _bwd_f32(dy, x, w, rstd, batch_dims)
        if reduced:
            dw = lax.psum(dw, reduced)
        return dx, dw.astype(w.dtype)

    return mesh, lower, outs, args


def _bwd_rule(batch_dims, mesh, operand_types, result_types):
    nrows = len(operand_types[1].shape) - 1
    batch = sh.factors("b", batch_dims)
    summed = sh.factors("r", nrows - batch_dims)
    rows = " ".join(batch + summed)
    rule = f"{rows} d, {rows} d, d, {rows} k -> {rows} d, {' '.join(batch + ['d'])}"
    # dw's sum over the row factors is done (psum) inside partition(), not declared as a
    # reduction: those factors also map to dx, where they pass through.
    return rule, {"need_replication_factors": ("d",)}


rms_norm_fwd_p = sh.define_op(
    "nki_rms_norm_fwd", impl=_fwd_impl, n_arrays=2, static=("eps", "with_rstd"), abstract=_fwd_abstract,
    batch=_fwd_batch, infer=_fwd_infer, partition=_fwd_partition, rule=_fwd_rule)

rms_norm_bwd_p = sh.define_op(
    "nki_rms_norm_bwd", impl=_bwd_impl, n_arrays=4, static=("batch_dims",), abstract=_bwd_abstract,
    batch=_bwd_batch, infer=_bwd_infer, partition=_bwd_partition, rule=_bwd_rule)
