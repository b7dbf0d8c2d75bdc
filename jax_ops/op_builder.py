"""The JAX side of :func:`nki_kernels.op`: a ``custom_vjp`` over two outer primitives.

Each declared op gets a forward and a backward primitive (:func:`jax_ops.sharding.define_op`)
whose implementation runs the op's forward / backward callables; their kernel launches are
``nki_call``\\ s (so every launch is one ``AwsNeuronCustomNativeKernel`` custom-call and
whatever hooks ``nki_call`` has apply). The primitives carry one parameter, a :class:`Call`,
that says which operands are row arrays and how many vmapped axes lead them:

- ``vmap`` with ``batch="rows"``: vmapped axes are folded into the rows of the row operands
  (one launch); sums over rows (gradients of shared inputs, ``Rows.psum`` outputs) stay per
  example through the callable's ``segments`` parameter, or by one launch per example when it
  has none. A vmapped shared operand (or ``batch="map"``) means one launch per example.
- sharding (``partition`` hint): ``custom_partitioning`` keeps the row operands' sharding on
  their vmapped and row axes, replicates everything else, runs the implementation on each
  shard and ``psum``\\ s the sums over rows across the row axis's mesh axes. Without a hint
  every operand is replicated (each device runs the whole launch).
- :meth:`JaxOp.call` with ``row_dims``: row inputs with several leading row axes (what
  ``jax_ops.rms_norm`` passes for ``(..., D)`` inputs), each keeping its own sharding.
- the ``custom_vjp`` has the static arguments closed over (never differentiated); gradients
  come back cast to each input's dtype, none for integer inputs; a derivative of the backward
  primitive (a higher-order gradient) is an error naming the op.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad

from nki_kernels.op import register_op_adapter

from . import sharding as sh
from .primitive import match_vma, out_aval


@dataclasses.dataclass(frozen=True)
class Call:
    """The primitive parameter: what one bind of a forward / backward primitive computes.

    ``rows``: per operand, True when it is a row array: ``batch_dims`` vmapped axes, then
    ``row_dims`` row axes, folded into the kernel's rows. ``out_rows``: per output of a
    backward, True for per-row gradients, False for sums over rows (a forward's come from the
    op's ``Rows.psum``). ``n_res``: residual operands of a backward (the rest are output
    gradients, one per True of ``grads``; a False is an ``aux`` output that got none).
    """

    role: str
    static: tuple
    batch_dims: int
    rows: tuple
    out_rows: tuple | None = None
    n_res: int = 0
    row_dims: int = 1
    grads: tuple = ()


def _out_spec(lead, call, rank, per_row):
    """An output's partition spec: the lead (vmapped + row axes) spec for per-row arrays, the
    vmapped axes' spec for sums over rows; the other axes replicated."""
    k = call.batch_dims
    base = tuple(lead[:k + call.row_dims] if per_row else lead[:k])
    return (base + (None,) * rank)[:rank]


class JaxOp:
    """A declared op on JAX arrays (built by :func:`build`)."""

    def __init__(self, op):
        self.op = op
        base = re.sub(r"\W+", "_", op.name)
        self.prims = {}
        for role in ("forward", "backward"):
            prim = sh.define_op(f"nki_op_{base}_{role}", impl=self._impl, abstract=self._abstract,
                                batch=self._batch, infer=self._infer, partition=self._partition, rule=self._rule)
            ad.primitive_jvps[prim] = self._no_jvp
            self.prims[role] = prim
        self._vjps: dict = {}

    # --- the call ---------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        return self.call(args, kwargs)

    def call(self, args, kwargs, row_dims=1):
        """The op on ``args``/``kwargs``, whose row inputs have ``row_dims`` leading row axes.

        The op's kernels see one row axis; wrappers with any-rank inputs pass them unreshaped
        with ``row_dims = ndim - 1``, so each leading axis keeps its own sharding (a reshape
        merging two sharded axes would make the partitioner gather one of them).
        """
        op = self.op
        tensors, static = op.bind(args, kwargs)
        for name, t in zip(op.inputs, tensors):
            if not (hasattr(t, "shape") and hasattr(t, "dtype")):
                raise TypeError(f"{op.name}: input {name!r} must be an array, got {type(t).__name__}")
        for k, v in static.items():
            if isinstance(v, jax.Array):
                raise TypeError(f"{op.name}: static argument {k!r} is a JAX array (traced?); pass a Python "
                                "value, e.g. mark it static in jax.jit")
        xs = match_vma(*[jnp.asarray(t) for t in tensors])
        frozen = tuple(sorted(static.items()))
        specs = tuple((tuple(x.shape), jnp.dtype(x.dtype)) for x in xs)
        key = (frozen, specs, row_dims)
        fn = self._vjps.get(key)
        if fn is None:
            fn = self._vjps[key] = self._make_vjp(frozen, specs, row_dims)
        return op.structure(fn(*xs), static)

    def _make_vjp(self, frozen, specs, row_dims):
        op = self.op
        rows = op.row_inputs
        fwd_p, bwd_p = self.prims["forward"], self.prims["backward"]
        fwd_call = Call("forward", frozen, 0, rows, row_dims=row_dims)
        floats = tuple(i for i, (_, d) in enumerate(specs) if jnp.issubdtype(d, jnp.floating))

        @jax.custom_vjp
        def f(*xs):
            return tuple(fwd_p.bind(*xs, call=fwd_call))

        def f_fwd(*primals):
            xs = [p.value for p in primals]  # symbolic_zeros: primals come wrapped
            outs = tuple(fwd_p.bind(*xs, call=fwd_call))
            res = tuple(xs[i] if where == "in" else outs[i] for where, i in op.residual_sources(len(outs)))
            return outs, res

        def f_bwd(res, cts):
            n_out = len(cts)
            out_rows = op.row_outputs(n_out)
            res_rows = tuple(rows[i] if where == "in" else out_rows[i] for where, i in op.residual_sources(n_out))
            # An aux output nothing flowed into reaches the backward as None; others as arrays.
            given = tuple(not (isinstance(ct, SymbolicZero) and op.may_skip_grad(j)) for j, ct in enumerate(cts))
            cts = [jnp.zeros(ct.shape, ct.dtype) if isinstance(ct, SymbolicZero) else ct
                   for ct, g in zip(cts, given) if g]
            call = Call("backward", frozen, 0, res_rows + tuple(r for r, g in zip(out_rows, given) if g),
                        tuple(rows[i] for i in floats), len(res), row_dims, given)
            grads = bwd_p.bind(*res, *cts, call=call)
            out = [None] * len(specs)
            for i, g in zip(floats, grads):
                out[i] = g.astype(specs[i][1])
            return tuple(out)

        f.defvjp(f_fwd, f_bwd, symbolic_zeros=True)
        return f

    def _no_jvp(self, primals, tangents, **params):
        raise self.op.higher_order_error()

    # --- implementation (global or per-shard shapes) -----------------------------------------------

    def _run(self, call, arrays, segments):
        static = dict(call.static)
        if call.role == "forward":
            return self.op.run_forward(list(arrays), static, segments)
        given = iter(arrays[call.n_res:])
        cts = [next(given) if g else None for g in call.grads]
        grads = self.op.run_backward(list(arrays[:call.n_res]), cts, static, segments)
        if len(grads) != len(call.out_rows):
            raise TypeError(f"{self.op.name}: the backward returned {len(grads)} gradient(s); the op has "
                            f"{len(call.out_rows)} floating-point input(s)")
        return grads

    def _out_rows(self, call, n):
        return call.out_rows if call.role == "backward" else self.op.row_outputs(n)

    def _impl(self, call, *arrays):
        k, m = call.batch_dims, call.row_dims
        if k == 0 and m == 1:
            return tuple(self._run(call, arrays, None))
        first = arrays[call.rows.index(True)]
        lead, row_shape = tuple(first.shape[:k]), tuple(first.shape[k:k + m])
        b, n_rows = math.prod(lead), math.prod(row_shape)
        # Row arrays as (examples, rows, *rest); the kernels get (examples * rows, *rest).
        per_example = [a.reshape((b, n_rows) + a.shape[k + m:]) if r else a for a, r in zip(arrays, call.rows)]
        one = dataclasses.replace(call, batch_dims=0, row_dims=1)
        probe = jax.eval_shape(lambda *xs: self._impl(one, *xs),
                               *[jax.ShapeDtypeStruct(a.shape[1:] if r else a.shape, a.dtype)
                                 for a, r in zip(per_example, call.rows)])
        out_rows = self._out_rows(call, len(probe))

        def unfold(o, per_row):
            return o.reshape(lead + row_shape + o.shape[1:]) if per_row else o.reshape(lead + o.shape[1:])

        if b * n_rows == 0:  # nothing to launch: empty rows, zero sums
            return tuple(jnp.zeros(lead + row_shape + o.shape[1:] if r else lead + o.shape, o.dtype)
                         for o, r in zip(probe, out_rows))
        folded = [a.reshape((b * n_rows,) + a.shape[2:]) if r else a for a, r in zip(per_example, call.rows)]
        if k == 0 or all(out_rows):
            outs = self._run(call, folded, None)
            return tuple(o.reshape(lead + row_shape + o.shape[1:]) if r else o for o, r in zip(outs, out_rows))
        if self.op.accepts_segments(call.role):  # per-example sums over rows, one launch
            return tuple(unfold(o, r) for o, r in zip(self._run(call, folded, b), out_rows))
        # Per-example sums over rows, and the callable cannot split them: one launch per example.
        mapped = [i for i, r in enumerate(call.rows) if r]

        def example(xs):
            full = list(arrays)
            for i, x in zip(mapped, xs):
                full[i] = x
            return tuple(self._run(call, full, None))

        outs = lax.map(example, tuple(per_example[i] for i in mapped))
        return tuple(unfold(o.reshape((b * n_rows,) + o.shape[2:]), True) if r else unfold(o, False)
                     for o, r in zip(outs, out_rows))

    def _abstract(self, *avals, call):
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
        outs = jax.eval_shape(functools.partial(self._impl, call), *structs)
        out_rows = self._out_rows(call, len(outs))
        like = avals[call.rows.index(True)] if True in call.rows else (avals[0] if avals else None)
        width = call.batch_dims + call.row_dims
        lead = tuple(sh.spec_of(like, len(like.shape))[:width]) if like is not None else ()
        lead = lead + (None,) * (width - len(lead))
        return [out_aval(like, o.shape, o.dtype, _out_spec(lead, call, len(o.shape), r))
                for o, r in zip(outs, out_rows)]

    # --- vmap -------------------------------------------------------------------------------------

    def _batch(self, args, dims, *, call):
        prim = self.prims[call.role]
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        if self.op.batch == "rows" and all(r or d is None for r, d in zip(call.rows, dims)):
            front = [jnp.moveaxis(a, d, 0) if d is not None else (jnp.broadcast_to(a, (size,) + a.shape) if r else a)
                     for a, d, r in zip(args, dims, call.rows)]
            outs = prim.bind(*front, call=dataclasses.replace(call, batch_dims=call.batch_dims + 1))
            return list(outs), [0] * len(outs)
        # A vmapped shared operand (e.g. per-example weights) or batch="map": one launch each.
        mapped = [i for i, d in enumerate(dims) if d is not None]
        xs = tuple(jnp.moveaxis(args[i], dims[i], 0) for i in mapped)

        def one(slices):
            full = list(args)
            for i, s in zip(mapped, slices):
                full[i] = s
            return tuple(prim.bind(*full, call=call))

        outs = lax.map(one, xs)
        return list(outs), [0] * len(outs)

    # --- sharding ---------------------------------------------------------------------------------

    def _lead(self, call, arg_infos):
        width = call.batch_dims + call.row_dims
        if self.op.partition is None:  # no hint: each device runs the whole launch (inputs gathered)
            return (None,) * width
        for info, r in zip(arg_infos, call.rows):
            if r:
                return tuple(sh.spec_of(info, len(info.shape))[:width])
        return (None,) * width

    def _shardings(self, call, mesh, arg_infos, result_infos):
        lead = self._lead(call, arg_infos)
        results = result_infos if isinstance(result_infos, (tuple, list)) else (result_infos,)
        out_rows = self._out_rows(call, len(results))
        outs = tuple(sh.named(mesh, *_out_spec(lead, call, len(r.shape), row)) for r, row in zip(results, out_rows))
        args = tuple(sh.named(mesh, *(_out_spec(lead, call, len(a.shape), True) if r else (None,) * len(a.shape)))
                     for a, r in zip(arg_infos, call.rows))
        return lead, args, outs, out_rows

    def _infer(self, call, mesh, arg_infos, result_infos):
        return self._shardings(call, mesh, arg_infos, result_infos)[2]

    def _partition(self, call, mesh, arg_infos, result_infos):
        lead, args, outs, out_rows = self._shardings(call, mesh, arg_infos, result_infos)
        summed = sh.axis_names(lead[call.batch_dims:])  # each shard summed its own rows only

        def lower(*arrays):
            res = self._impl(call, *arrays)
            return tuple(o if r or not summed else lax.psum(o, summed) for o, r in zip(res, out_rows))

        return mesh, lower, outs, args

    def _rule(self, call, mesh, operand_types, result_types):
        k = call.batch_dims
        lead = sh.factors("b", k) + sh.factors("r", call.row_dims)
        own = []

        def dims(rank, base):
            base = base[:rank]
            extra = [f"u{len(own) + i}" for i in range(rank - len(base))]
            own.extend(extra)
            return " ".join(base + extra)

        out_rows = self._out_rows(call, len(result_types))
        operands = [dims(len(t.shape), lead if r else []) for t, r in zip(operand_types, call.rows)]
        results = [dims(len(t.shape), lead if r else lead[:k]) for t, r in zip(result_types, out_rows)]
        # Sums over rows are psum-reduced inside partition(), not declared as reductions: the row
        # factor also maps to per-row results, where it passes through.
        return ", ".join(operands) + " -> " + ", ".join(results), {"need_replication_factors": tuple(own)}


register_op_adapter("jax", lambda v: isinstance(v, jax.Array), JaxOp)
