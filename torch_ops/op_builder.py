"""The PyTorch side of :func:`nki_kernels.op`: a ``torch.library`` custom op per declared op.

``nki_kernels.op("mylib::softplus", ...)`` defines ``torch.ops.mylib.softplus`` with the
schema ``softplus(Tensor x, <static parameters>) -> Tensor[]`` (one tensor per forward
output) and ``torch.ops.mylib.softplus_backward(Tensor[] residuals, Tensor[] grads, bool[] given,
<static parameters>) -> Tensor[]`` (one gradient per floating-point input; ``given`` has one
flag per forward output, False for an ``aux`` output that got no gradient, which the
backward callable receives as None; ``grads`` holds the others):

- the real kernels run the op's forward / backward callables on the tensors, whose kernel
  launches go through :func:`torch_ops.nki_call` (simulator on CPU, the
  ``AwsNeuronCustomNativeKernel`` custom-call on XLA devices, ...);
- the fake kernels run the same callables on ``meta`` tensors, where every launch is the
  simulator's shape inference (``eval_shape``) and nothing executes; symbolic sizes are
  specialised (as for any launch inside ``torch.compile``);
- autograd is registered (residuals saved, gradients cast to the inputs' dtypes); the
  backward op's own autograd raises the op's higher-order-gradient error.

Static parameters become schema arguments (always passed; the op applies the defaults)
typed from their annotation or default value (bool, int, float, str, sequences of int /
float; ``None`` defaults need an annotation).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from nki_kernels.op import freeze, register_op_adapter

_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}


def _type_from_annotation(ann):
    """``(schema type, optional)`` of a parameter annotation (a type or its string form)."""
    text = ann if isinstance(ann, str) else str(ann)
    optional = "None" in text or "Optional" in text
    seq = any(s in text for s in ("tuple[", "list[", "Sequence[", "Tuple[", "List["))
    for name in ("bool", "int", "float", "str"):
        if name in text:
            return name + ("[]" if seq else ""), optional
    return None, optional


def _type_from_default(value):
    if type(value) in _SCALARS:
        return _SCALARS[type(value)]
    if isinstance(value, (tuple, list)):
        inner = {type(v) for v in value}
        return ("float" if float in inner else "int") + "[]" if inner <= {int, float} else None
    return None


def static_schema(op) -> list:
    """Schema text of each static parameter of ``op``'s forward (``float eps``)."""
    out = []
    for name, p in op.static.items():
        kind, optional = (None, False) if p.annotation is p.empty else _type_from_annotation(p.annotation)
        if kind is None and p.default is not p.empty:
            kind = _type_from_default(p.default)
            optional = optional or p.default is None
        if kind is None:
            raise TypeError(f"{op.name}: static parameter {name!r} needs a type the torch schema can hold: "
                            "annotate it (bool, int, float, str, tuple[int, ...], ...) or give such a default")
        # No defaults in the schema: the dispatcher drops arguments equal to their default, and
        # register_autograd then expects one gradient fewer than the backward returns.
        out.append(f"{kind}{'?' if optional else ''} {name}")
    return out


def _storage(t):
    try:
        return t.untyped_storage().data_ptr() if t.numel() else None
    except (RuntimeError, NotImplementedError):  # tensors without host storage (XLA)
        return None


def _fresh(outs, inputs) -> list:
    """Outputs as new contiguous tensors: a custom op may not return (views of) its inputs or
    one tensor twice (e.g. a backward passing a gradient through to two inputs)."""
    seen = {p for p in map(_storage, inputs) if p is not None}
    fresh = []
    for o in outs:
        p = _storage(o)
        if (p is not None and p in seen) or not o.is_contiguous():
            o = o.clone(memory_format=torch.contiguous_format)
        elif p is not None:
            seen.add(p)
        fresh.append(o)
    return fresh


def _on_meta(fn, tensors):
    """``(shape, dtype)`` of each result of ``fn`` run on meta copies of ``tensors`` (no kernel runs)."""
    with unset_fake_temporarily():
        metas = [torch.empty(tuple(int(s) for s in t.shape), dtype=t.dtype, device="meta") for t in tensors]
        return [(tuple(o.shape), o.dtype) for o in fn(metas)]


class TorchOp:
    """A declared op as ``torch.ops.<namespace>.<name>`` (built by :func:`build`)."""

    def __init__(self, op):
        self.op = op
        self.namespace, self.opname = op.name.split("::")
        # Torch-side argument checks run before any kernel (also in the fake kernels), so direct
        # torch.ops calls fail with messages naming the argument: check_forward(*tensors,
        # *statics), check_backward(residuals, grads, *statics). Set by the op's torch wrappers.
        self.check_forward = None
        self.check_backward = None
        self.static_names = list(op.static)
        statics = static_schema(op)
        tensors = [f"Tensor {n}" for n in op.inputs]
        # Kept referenced: dropping a Library object removes its registrations.
        self.library = torch.library.Library(self.namespace, "FRAGMENT")
        self.library.define(f"{self.opname}({', '.join(tensors + statics)}) -> Tensor[]")
        self.library.define(f"{self.opname}_backward({', '.join(['Tensor[] residuals', 'Tensor[] grads', 'bool[] given'] + statics)})"
                            " -> Tensor[]")
        fwd, bwd = f"{op.name}", f"{op.name}_backward"
        self.library.impl(self.opname, self._forward, "CompositeExplicitAutograd")
        self.library.impl(f"{self.opname}_backward", self._backward, "CompositeExplicitAutograd")
        torch.library.register_fake(fwd, self._forward_fake, lib=self.library)
        torch.library.register_fake(bwd, self._backward_fake, lib=self.library)
        torch.library.register_autograd(fwd, self._grad, setup_context=self._setup, lib=self.library)
        torch.library.register_autograd(bwd, self._no_grad, setup_context=lambda ctx, inputs, output: None,
                                        lib=self.library)

    @property
    def forward_op(self):
        """``torch.ops.<namespace>.<name>``."""
        return getattr(getattr(torch.ops, self.namespace), self.opname)

    @property
    def backward_op(self):
        """``torch.ops.<namespace>.<name>_backward``."""
        return getattr(getattr(torch.ops, self.namespace), f"{self.opname}_backward")

    def __call__(self, *args, **kwargs):
        op = self.op
        tensors, static = op.bind(args, kwargs)
        for name, t in zip(op.inputs, tensors):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{op.name}: input {name!r} must be a torch.Tensor, got {type(t).__name__}")
        outs = self.forward_op(*tensors, *(static[k] for k in self.static_names))
        return op.structure(tuple(outs), static)

    # --- kernels ------------------------------------------------------------------------------------

    def _split(self, args, n):
        static = {k: freeze(v) for k, v in zip(self.static_names, args[n:])}
        return list(args[:n]), static

    def _forward(self, *args):
        tensors, static = self._split(args, len(self.op.inputs))
        if self.check_forward is not None:
            self.check_forward(*args)
        return _fresh(self.op.run_forward(tensors, static), tensors)

    def _forward_fake(self, *args):
        tensors, static = self._split(args, len(self.op.inputs))
        if self.check_forward is not None:
            self.check_forward(*args)
        specs = _on_meta(lambda ts: self.op.run_forward(ts, static), tensors)
        return [tensors[0].new_empty(s, dtype=d) for s, d in specs]

    def _backward_args(self, residuals, grads, given, statics):
        """``(static, grads with None where not given)``, after the torch-side check."""
        if len(grads) != sum(map(bool, given)):
            raise ValueError(f"{self.op.name}_backward: {len(grads)} gradient(s) given but {sum(map(bool, given))} "
                             f"flag(s) of given={list(given)} are True")
        it = iter(grads)
        full = [next(it) if g else None for g in given]
        if self.check_backward is not None:
            self.check_backward(list(residuals), full, *statics)
        return {k: freeze(v) for k, v in zip(self.static_names, statics)}, full

    def _backward(self, residuals, grads, given, *statics):
        static, full = self._backward_args(residuals, grads, given, statics)
        outs = self.op.run_backward(list(residuals), full, static)
        return _fresh(outs, list(residuals) + list(grads))

    def _backward_fake(self, residuals, grads, given, *statics):
        static, full = self._backward_args(residuals, grads, given, statics)
        n = len(residuals)

        def run(ts):
            it = iter(ts[n:])
            return self.op.run_backward(ts[:n], [None if g is None else next(it) for g in full], static)

        specs = _on_meta(run, list(residuals) + list(grads))
        like = residuals[0] if residuals else grads[0]
        return [like.new_empty(s, dtype=d) for s, d in specs]

    # --- autograd -----------------------------------------------------------------------------------

    def _setup(self, ctx, inputs, output):
        op = self.op
        n = len(op.inputs)
        tensors = inputs[:n]
        ctx.statics = tuple(inputs[n:])
        ctx.n_out = len(output)
        ctx.floats = [i for i, t in enumerate(tensors) if t.is_floating_point()]
        ctx.dtypes = [t.dtype for t in tensors]
        ctx.save_for_backward(*(tensors[i] if where == "in" else output[i]
                                for where, i in op.residual_sources(len(output))))
        ctx.out_specs = [(o.shape, o.dtype, o.device) for o in output]
        # Unused outputs' gradients arrive as None: aux ones are passed on as None (the backward
        # skips their work), the others become zeros.
        ctx.set_materialize_grads(False)

    def _grad(self, ctx, grads):
        op = self.op
        grads = [g if g is not None or op.may_skip_grad(j) else torch.zeros(s, dtype=d, device=v)
                 for j, (g, (s, d, v)) in enumerate(zip(grads, ctx.out_specs))]
        given = [g is not None for g in grads]
        gs = self.backward_op(list(ctx.saved_tensors), [g for g in grads if g is not None], given, *ctx.statics)
        if len(gs) != len(ctx.floats):
            raise TypeError(f"{op.name}: the backward returned {len(gs)} gradient(s); the op has "
                            f"{len(ctx.floats)} floating-point input(s)")
        out = [None] * (len(op.inputs) + len(ctx.statics))
        for i, g in zip(ctx.floats, gs):
            if ctx.needs_input_grad[i]:
                out[i] = g if g.dtype == ctx.dtypes[i] else g.to(ctx.dtypes[i])
        return tuple(out)

    def _no_grad(self, ctx, *grads):
        raise self.op.higher_order_error()


register_op_adapter("torch", lambda v: isinstance(v, torch.Tensor), TorchOp)
