"""Write an op once: :func:`op` declares a differentiable framework op from NKI kernels.

One declaration gives a NumPy function (the simulator), a JAX op (``custom_vjp``
with ``jit`` / ``grad`` / ``vmap`` / ``checkpoint`` / ``shard_map`` and
``custom_partitioning``) and a PyTorch op (a ``torch.library`` custom op with a
fake kernel and autograd). The returned :class:`Op` dispatches on the type of
its array arguments. This module imports neither JAX nor torch: the framework
adapters (``jax_ops.op_builder``, ``torch_ops.op_builder``) register with
:func:`register_op_adapter` when they are imported, and are imported on first
sight of one of their arrays (or at declaration when the framework is already
loaded, so that the torch op exists before ``torch.compile`` traces a call).

Declaring an op::

    import nki_kernels
    from nki_kernels.backend import nki, nl

    @nki.jit
    def softplus_fwd(x):                       # tensor inputs first, static parameters with defaults
        ...
        return y

    @nki.jit
    def softplus_bwd(x, dy):                   # (*residuals, *grad_outputs, **static) -> grad per float input
        ...
        return dx

    softplus = nki_kernels.op(
        "mylib::softplus",
        forward=softplus_fwd,
        backward=softplus_bwd,
        residuals="inputs",                    # or "inputs+outputs", or lambda inputs, outputs: (...)
        grid=lambda x: nki_kernels.row_grid(x.shape[0]),   # launch grid from the inputs (fwd and bwd)
        batch="rows",                          # vmap folds leading dims into rows: one launch
        partition="rows",                      # rows are independent: shard along them
    )
    y = softplus(x)      # NumPy -> simulator, jax.Array -> JAX op, torch.Tensor -> torch.ops.mylib.softplus

Contract:

- ``forward`` and ``backward`` are ``@nki.jit`` kernels, launched as
  ``kernel[grid(...)](...)``, or plain functions that launch kernels themselves
  (written with array methods only, e.g. ``.reshape`` and ``.sum``, so the same
  function serves every framework). The forward's parameters without a default
  are its tensor inputs; those with a default are static (non-differentiable,
  hashable, part of the torch schema: annotate ones whose default is ``None``).
- ``backward(*residuals, *grads, **static)`` gets the residuals, then one
  gradient per forward output, and the static arguments it declares; it returns
  one gradient per floating-point input, in order (integer inputs get none). A
  gradient may come back in a wider dtype (e.g. a float32 sum): the op casts it
  to the input's dtype after any cross-shard sum.
- ``aux``: indices of forward outputs that are rarely differentiated (statistics
  saved for the backward, such as RMSNorm's ``rstd``). They stay differentiable,
  but when no gradient flowed into one the backward receives ``None`` for it
  and can skip that work (a kernel backward cannot take ``None``: use a function).
- ``partition``: ``None`` (the framework runs the launch unpartitioned),
  ``"rows"`` or :class:`Rows`, which says that the leading axis of every input
  except ``Rows.shared`` is a row axis and rows are independent: sharded inputs
  stay sharded along rows, shared inputs are replicated, their gradients (and
  the forward outputs listed in ``Rows.psum``) are sums over rows and get
  ``psum``-reduced. ``batch="rows"`` uses the same classification under vmap.
- Under ``vmap`` with ``batch="rows"`` an op whose outputs include such sums
  launches once only if the callable computing them declares a ``segments``
  parameter: it is then called on the folded rows with ``segments=B`` (``B``
  equal, contiguous row groups) and returns those outputs with a leading axis
  of ``B``; otherwise each example is launched on its own.
- Higher-order gradients are not supported and raise an error naming the op.
"""

from __future__ import annotations

import inspect
import itertools
import sys

import numpy as np

from .simulator.launch import Launch, array_handler, import_loaded_adapters, is_kernel

__all__ = ["Op", "Rows", "op", "register_op_adapter"]


class Rows:
    """Partitioning / batching hint: rows (leading axis of each input) are independent.

    ``shared``: names of forward inputs that are not split by rows (weights, replicated);
    their gradients are sums over rows. ``psum``: indices of forward outputs that are sums
    over rows (reduced with ``psum`` across row shards).
    """

    def __init__(self, shared=(), psum=()):
        self.shared = tuple(shared)
        self.psum = tuple(int(i) for i in psum)

    def __repr__(self):
        return f"Rows(shared={self.shared}, psum={self.psum})"


# (predicate, key) pairs and key -> build(op): the framework adapters (see module doc).
_OP_DISPATCH: list = []
_BUILDERS: dict = {}
_DECLARED: list = []


def register_op_adapter(key: str, predicate, build) -> None:
    """Make ops callable on arrays that ``predicate`` accepts through ``build(op)``'s callable.

    ``build`` runs for every op declared so far and every later one (a torch op must be
    registered before ``torch.compile`` meets a call of it).
    """
    _OP_DISPATCH.insert(0, (predicate, key))
    _BUILDERS[key] = build
    for declared in _DECLARED:
        declared._build(key)


def _params(fn):
    """The forward's signature: tensor parameter names and {static name: Parameter}."""
    func = fn.kernel if isinstance(fn, Launch) else fn
    sig = func.signature if hasattr(func, "signature") else inspect.signature(func)
    tensors, static = [], {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"forward {getattr(func, '__qualname__', func)!r}: *args/**kwargs parameters are not "
                            "supported; name every tensor input and static parameter")
        if p.default is p.empty and p.kind != p.KEYWORD_ONLY:
            if static:
                raise TypeError(f"forward parameter {p.name!r} has no default but follows static parameters "
                                f"{list(static)}; put tensor inputs first")
            tensors.append(p.name)
        else:
            static[p.name] = p
    return tensors, static


def accepted(fn) -> tuple | None:
    """Names of the keyword parameters ``fn`` (kernel or function) accepts; None = any (``**kw``)."""
    func = fn.kernel if isinstance(fn, Launch) else fn
    sig = func.signature if hasattr(func, "signature") else inspect.signature(func)
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return tuple(p.name for p in sig.parameters.values() if p.kind != p.VAR_POSITIONAL)


def _pick(names, static):
    return dict(static) if names is None else {k: v for k, v in static.items() if k in names}


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def is_float(x) -> bool:
    """True for floating-point arrays/tensors of any framework (the differentiable inputs)."""
    return "float" in str(x.dtype).rsplit(".", 1)[-1]


def freeze(value):
    """A static argument as a hashable value (lists become tuples); dicts are rejected."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        raise TypeError(f"static argument {value!r} is a dict; pass scalars, strings or tuples")
    if isinstance(value, np.generic):
        return value.item()
    return value


class _Source:
    """A placeholder for the k-th input or output, to see which ones a residuals callable picks."""

    def __init__(self, where, index):
        self.where, self.index = where, index


class Op:
    """A declared op (see the module docstring); call it with NumPy, JAX or torch arrays."""

    def __init__(self, name, forward, backward, residuals, grid, backward_grid, batch, partition, aux):
        if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
            raise ValueError(f"op name {name!r} must be 'namespace::name' (e.g. 'mylib::softplus')")
        if not (is_kernel(forward) or callable(forward)):
            raise TypeError(f"{name}: forward must be an @nki.jit kernel or a function, got {type(forward).__name__}")
        if backward is not None and not (is_kernel(backward) or callable(backward)):
            raise TypeError(f"{name}: backward must be an @nki.jit kernel, a function or None, "
                            f"got {type(backward).__name__}")
        if not (residuals in ("inputs", "inputs+outputs") or callable(residuals)):
            raise ValueError(f"{name}: residuals={residuals!r}; use 'inputs', 'inputs+outputs' or a callable "
                             "(inputs, outputs) -> residuals")
        if batch not in ("rows", "map"):
            raise ValueError(f"{name}: batch={batch!r}; use 'rows' (fold vmapped dims into rows) or 'map'")
        if partition == "rows":
            partition = Rows()
        if partition is not None and not isinstance(partition, Rows):
            raise TypeError(f"{name}: partition={partition!r}; use None, 'rows' or nki_kernels.Rows(...)")
        if is_kernel(forward) and grid is None:
            raise TypeError(f"{name}: forward is a kernel, so grid= (a function of the inputs) is required")
        self.name = name
        self.forward, self.backward = forward, backward
        self.residuals = residuals
        self.grid, self.backward_grid = grid, backward_grid
        self.batch, self.partition = batch, partition
        self.rows = partition or Rows()
        self.aux = tuple(int(i) for i in aux)
        self.inputs, self.static = _params(forward)
        unknown = [s for s in self.rows.shared if s not in self.inputs]
        if unknown:
            raise ValueError(f"{name}: Rows(shared={unknown}) names no tensor input of the forward "
                             f"(inputs: {self.inputs})")
        if is_kernel(backward) and backward_grid is None and callable(residuals):
            raise TypeError(f"{name}: a backward kernel with picked residuals needs backward_grid= "
                            "(a function of the residuals)")
        self._impls: dict = {}
        self._single: dict = {}
        _DECLARED.append(self)
        if not _imports_underway():  # adapters import nki-ops modules: not while one is half-built
            import_loaded_adapters()  # frameworks already imported: register the op with them now
        for key in list(_BUILDERS):
            self._build(key)

    def __repr__(self):
        return f"<nki op {self.name}>"

    def _build(self, key):
        if key not in self._impls:
            self._impls[key] = _BUILDERS[key](self)

    def adapted(self, key: str):
        """This op's implementation for the framework adapter ``key`` (``"jax"``, ``"torch"``)."""
        self._build(key)
        return self._impls[key]

    @property
    def row_inputs(self) -> tuple:
        """For each tensor input, True when its leading axis is a row axis (not ``Rows.shared``)."""
        return tuple(n not in self.rows.shared for n in self.inputs)

    def row_outputs(self, n_outputs: int) -> tuple:
        """For each forward output, True when it is per row (not a ``Rows.psum`` sum over rows)."""
        return tuple(j not in self.rows.psum for j in range(n_outputs))

    # --- arguments --------------------------------------------------------------------------------

    def bind(self, args, kwargs) -> tuple:
        """``(tensors, static)`` of a call: tensor inputs in order, every static value (defaults
        applied, frozen). Unknown or missing arguments are TypeErrors naming them."""
        names = self.inputs + list(self.static)
        if len(args) > len(names):
            raise TypeError(f"{self.name} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.name} got an unexpected keyword argument {k!r} "
                                f"(parameters: {', '.join(names)})")
            if k in given:
                raise TypeError(f"{self.name} got multiple values for argument {k!r}")
            given[k] = v
        missing = [n for n in self.inputs if n not in given]
        if missing:
            raise TypeError(f"{self.name} is missing tensor input(s) {missing}")
        static = {}
        for k, p in self.static.items():
            if k in given:
                static[k] = freeze(given[k])
            elif p.default is p.empty:
                raise TypeError(f"{self.name} is missing the keyword-only argument {k!r}")
            else:
                static[k] = freeze(p.default)
        return [given[n] for n in self.inputs], static

    def __call__(self, *args, **kwargs):
        """Run the op on NumPy arrays (simulator) or dispatch to the JAX / torch op."""
        key = array_handler(itertools.chain(args, kwargs.values()), _OP_DISPATCH)
        if key is not None:
            self._build(key)
            return self._impls[key](*args, **kwargs)
        tensors, static = self.bind(args, kwargs)
        outs = self.run_forward(tensors, static)
        return self.structure(outs, static)

    def structure(self, outs, static):
        """Outputs as the forward returned them: one array, or a tuple."""
        return outs[0] if self._single.get(tuple(sorted(static.items())), False) else tuple(outs)

    # --- running the kernels (any framework: launches dispatch on the array type) ------------------

    def _grid_of(self, fn, arrays, static):
        return fn(*arrays, **_pick(accepted(fn), static))

    def run_forward(self, arrays, static, segments=None) -> tuple:
        """The forward on ``arrays`` (any framework's): a tuple of outputs.

        ``segments``: number of equal row groups folded together (vmap); passed to a forward
        that declares it (its ``Rows.psum`` outputs then have a leading axis of that size).
        """
        fn = self.forward
        kw = dict(static)
        if segments is not None:
            kw["segments"] = segments
        if is_kernel(fn):
            launch = fn if isinstance(fn, Launch) else fn[self._grid_of(self.grid, arrays, kw)]
            out = launch(*arrays, **_pick(accepted(fn), kw))
        else:
            out = fn(*arrays, **_pick(accepted(fn), kw))
        self._single[tuple(sorted(static.items()))] = not isinstance(out, (tuple, list))
        return _as_tuple(out)

    def run_backward(self, residuals, grads, static, segments=None) -> tuple:
        """The backward on residuals and output gradients: one gradient per float input."""
        fn = self.backward
        if fn is None:
            raise TypeError(f"{self.name} has no backward: declare it with backward= to differentiate it")
        kw = dict(static)
        if segments is not None:
            kw["segments"] = segments
        arrays = list(residuals) + list(grads)
        if is_kernel(fn):
            if self.backward_grid is not None:
                grid = self._grid_of(self.backward_grid, residuals, kw)
            else:  # residuals start with the inputs: the forward's grid
                grid = self._grid_of(self.grid, residuals[:len(self.inputs)], kw)
            launch = fn if isinstance(fn, Launch) else fn[grid]
            out = launch(*arrays, **_pick(accepted(fn), kw))
        else:
            out = fn(*arrays, **_pick(accepted(fn), kw))
        return _as_tuple(out)

    def accepts_segments(self, role: str) -> bool:
        """Whether the forward / backward callable takes ``segments`` (one launch under vmap)."""
        fn = self.forward if role == "forward" else self.backward
        names = accepted(fn)
        return names is None or "segments" in names

    def residual_sources(self, n_outputs: int) -> tuple:
        """Where each residual comes from: ``("in", i)`` or ``("out", j)``."""
        n_in = len(self.inputs)
        if self.residuals == "inputs":
            return tuple(("in", i) for i in range(n_in))
        if self.residuals == "inputs+outputs":
            return tuple(("in", i) for i in range(n_in)) + tuple(("out", j) for j in range(n_outputs))
        picked = self.residuals(tuple(_Source("in", i) for i in range(n_in)),
                                tuple(_Source("out", j) for j in range(n_outputs)))
        if not isinstance(picked, (tuple, list)) or not all(isinstance(p, _Source) for p in picked):
            raise TypeError(f"{self.name}: the residuals callable must return a tuple chosen among its "
                            "(inputs, outputs) arguments")
        return tuple((p.where, p.index) for p in picked)

    def may_skip_grad(self, j: int) -> bool:
        """Whether output ``j``'s gradient reaches the backward as None when none flowed (``aux``)."""
        return j in self.aux

    def higher_order_error(self) -> TypeError:
        """The error raised when a gradient of the backward is requested."""
        return TypeError(f"{self.name}: higher-order gradients are not supported (its backward "
                         f"{getattr(self.backward, '__qualname__', self.backward)!r} has no derivative); "
                         "differentiate it once")


def _imports_underway() -> bool:
    """Whether a module of nki-ops (``nki_kernels``, ``jax_ops``, ``torch_ops``) is still being
    imported: an adapter imported now would import it again half-built. The adapters register
    every declared op when their own import completes, so nothing is lost by waiting."""
    return any(getattr(getattr(m, "__spec__", None), "_initializing", False)
               for name, m in list(sys.modules.items())
               if name.partition(".")[0] in ("nki_kernels", "jax_ops", "torch_ops"))


def op(name, *, forward, backward=None, residuals="inputs", grid=None, backward_grid=None, batch="rows",
       partition=None, aux=()) -> Op:
    """Declare the differentiable op ``name`` (``"namespace::name"``) from NKI kernels.

    See the module docstring for the contract of each argument and an example.
    ``backward_grid``: the backward kernel's grid as a function of the residuals (default:
    ``grid`` of the inputs, which must then lead the residuals).
    """
    return Op(name, forward, backward, residuals, grid, backward_grid, batch, partition, aux)
