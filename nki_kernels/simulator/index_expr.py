"""Symbolic affine index expressions and masks: what ``nl.arange`` / ``nl.mgrid`` build.

NKI index expressions are affine in the iteration variables:
``program_id * 128 + nl.arange(128)[:, None]``. Keeping them symbolic
(``offset + sum(coef[axis] * i[axis])`` over a broadcast shape) lets the simulator
turn an access into a strided NumPy view without looking at index values, and
decide "this mask is all true" from the expression's range. Anything non-affine
(``i * j``, ``i // 2``, NumPy functions) materialises to an ordinary integer array,
which the gather path of :mod:`indexing` handles.
"""

from __future__ import annotations

import dis
import math
import operator
import sys
import warnings

import numpy as np

from .errors import NotBatchable
from .config import NKIWarning
from .errors import kernel_location


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class _Ordered:
    """``<``, ``<=``, ``>``, ``>=`` through the class's ``_cmp(other, op)`` (they build masks)."""

    __slots__ = ()

    def __lt__(self, o):
        return self._cmp(o, operator.lt)

    def __le__(self, o):
        return self._cmp(o, operator.le)

    def __gt__(self, o):
        return self._cmp(o, operator.gt)

    def __ge__(self, o):
        return self._cmp(o, operator.ge)


class AffineExpr(_Ordered):
    """``offset + sum(coefs[k] * i_k)`` for ``i`` ranging over ``shape`` (broadcastable: size-1 axes).

    ``own`` (a bit per axis) marks the axes the expression's index variables live on: an
    ``nl.arange`` owns its axis, ``[:, None]`` adds an axis it does not own, the k-th output
    of ``nl.mgrid`` owns axis k only. A tile keeps the size-1 axes some index owns and drops
    the others: ``ix, iw, iy = nl.mgrid[0:128, 0:1, 0:F]; a[ix, iy]`` is ``[128, F]`` and
    ``g[iw, iy]`` is ``[1, F]`` (as in the official RMSNorm tutorial). Default: all axes.
    """

    __array_ufunc__ = None  # NumPy defers to our operators, which materialise when needed
    __slots__ = ("shape", "offset", "coefs", "axis", "own")

    def __init__(self, shape, offset, coefs, own=None):
        self.shape = shape = tuple(shape)
        self.own = (1 << len(shape)) - 1 if own is None else own
        self.offset = int(offset)
        self.coefs = coefs = tuple(int(c) if s != 1 else 0 for c, s in zip(coefs, shape))
        # The one axis this expression walks forward along (-1: constant, -2: several/backward):
        # lets the resolver turn it into a slice without further analysis.
        nz = [ax for ax, c in enumerate(coefs) if c]
        self.axis = -1 if not nz else (nz[0] if len(nz) == 1 and coefs[nz[0]] > 0 else -2)

    # -- array protocol ------------------------------------------------------
    @property
    def ndim(self):
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self):
        """Number of elements."""
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def dtype(self):
        """Index expressions are int64."""
        return np.dtype(np.int64)

    def __len__(self):
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = np.full((1,) * len(self.shape), self.offset, dtype=np.int64)
        for ax, (n, c) in enumerate(zip(self.shape, self.coefs)):
            if n != 1 and c:
                shp = [1] * len(self.shape)
                shp[ax] = n
                out = out + (np.arange(n, dtype=np.int64) * c).reshape(shp)
        out = np.broadcast_to(out, self.shape)
        return out if dtype is None else out.astype(dtype)

    def bounds(self):
        """(min, max) of the expression over its shape."""
        lo = hi = self.offset
        for n, c in zip(self.shape, self.coefs):
            span = c * (n - 1)
            lo += min(0, span)
            hi += max(0, span)
        return lo, hi

    def right_aligned(self, rank):
        """(shape, coefs) padded on the left with size-1 axes to ``rank``."""
        pad = rank - len(self.shape)
        return (1,) * pad + self.shape, (0,) * pad + self.coefs

    def aligned(self, rank) -> "AffineExpr":
        """This expression padded on the left with (unowned) size-1 axes to ``rank``."""
        s, k = self.right_aligned(rank)
        return AffineExpr(s, self.offset, k, self.own)

    def without(self, axes, order=None) -> "AffineExpr":
        """This expression with the size-1 ``axes`` removed, the others then taken in ``order``."""
        keep = [ax for ax in range(len(self.shape)) if ax not in axes]
        if order is not None:
            keep = [keep[i] for i in order]
        own = sum(((self.own >> ax) & 1) << i for i, ax in enumerate(keep))
        return AffineExpr([self.shape[a] for a in keep], self.offset, [self.coefs[a] for a in keep], own)

    # -- structure -------------------------------------------------------------
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if all(k is None or (isinstance(k, slice) and k == slice(None)) for k in key):
            shape, coefs, own, it = [], [], 0, iter(enumerate(zip(self.shape, self.coefs)))
            for k in key:
                if k is None:
                    shape.append(1)
                    coefs.append(0)
                else:
                    ax, (n, c) = next(it)
                    own |= ((self.own >> ax) & 1) << len(shape)
                    shape.append(n)
                    coefs.append(c)
            for ax, (n, c) in it:
                own |= ((self.own >> ax) & 1) << len(shape)
                shape.append(n)
                coefs.append(c)
            return AffineExpr(shape, self.offset, coefs, own)
        if len(key) == 1 and isinstance(key[0], slice) and len(self.shape) == 1:
            r = range(self.shape[0])[key[0]]
            return AffineExpr((len(r),), self.offset + self.coefs[0] * r.start, (self.coefs[0] * r.step,),
                              self.own)
        return np.asarray(self)[key]

    def reshape(self, *shape):
        """Materialised reshape (index expressions are rarely reshaped)."""
        return np.asarray(self).reshape(*shape)

    # -- arithmetic ---------------------------------------------------------------
    def _combine(self, other, sign):
        if not _is_int(other):
            other = runtime_offset(other, other)
        if _is_int(other):
            return AffineExpr(self.shape, self.offset + sign * int(other), self.coefs, self.own)
        if isinstance(other, AffineExpr):
            rank = max(len(self.shape), len(other.shape))
            s1, c1 = self.right_aligned(rank)
            s2, c2 = other.right_aligned(rank)
            try:
                shape = np.broadcast_shapes(s1, s2)
            except ValueError:
                raise IndexError(f"index expressions of shapes {self.shape} and {other.shape} "
                                 "do not broadcast") from None
            return AffineExpr(shape, self.offset + sign * other.offset,
                              [a + sign * b for a, b in zip(c1, c2)],
                              (self.own << (rank - len(self.shape))) | (other.own << (rank - len(other.shape))))
        return None

    def __add__(self, other):
        res = self._combine(other, 1)
        if res is None and type(other) is BExpr:
            return other + self
        return res if res is not None else np.asarray(self) + np.asarray(other)

    __radd__ = __add__

    def __sub__(self, other):
        res = self._combine(other, -1)
        if res is None and type(other) is BExpr:
            return (-other) + self
        return res if res is not None else np.asarray(self) - np.asarray(other)

    def __rsub__(self, other):
        return (-self) + other

    def __neg__(self):
        return AffineExpr(self.shape, -self.offset, [-c for c in self.coefs], self.own)

    def __pos__(self):
        return self

    def __mul__(self, other):
        if _is_int(other):
            k = int(other)
            return AffineExpr(self.shape, self.offset * k, [c * k for c in self.coefs], self.own)
        return np.asarray(self) * np.asarray(other)

    __rmul__ = __mul__

    def _materialised(op, reflected=False):
        def fn(self, other):
            a, b = np.asarray(self), np.asarray(other)
            return op(b, a) if reflected else op(a, b)

        return fn

    __floordiv__ = _materialised(operator.floordiv)
    __rfloordiv__ = _materialised(operator.floordiv, True)
    __mod__ = _materialised(operator.mod)
    __rmod__ = _materialised(operator.mod, True)
    __truediv__ = _materialised(operator.truediv)
    __pow__ = _materialised(operator.pow)
    __and__ = _materialised(operator.and_)
    __or__ = _materialised(operator.or_)

    # -- comparisons build masks ------------------------------------------------------
    def _cmp(self, other, op):
        if _is_int(other) or isinstance(other, (float, np.floating)):
            return Mask(((self, op, other),))
        return Mask.dense(op(np.asarray(self), np.asarray(other)))

    def __eq__(self, o):
        return Mask.dense(np.asarray(self) == np.asarray(o))

    def __ne__(self, o):
        return Mask.dense(np.asarray(self) != np.asarray(o))

    __hash__ = object.__hash__

    def __repr__(self):
        return f"AffineExpr(shape={self.shape}, offset={self.offset}, coefs={self.coefs})"


class Mask:
    """A conjunction of ``expr <op> bound`` terms (kept symbolic), or a dense boolean array."""

    __array_ufunc__ = None
    __slots__ = ("terms", "array", "_all")

    def __init__(self, terms=(), array=None):
        self.terms = tuple(terms)
        self.array = array
        self._all = None

    @classmethod
    def dense(cls, array):
        """A mask given by explicit values."""
        return cls((), np.asarray(array, dtype=bool))

    def all_true(self) -> bool:
        """True when every element is selected (decided from the expressions' ranges).

        For terms on a batch of programs (:class:`BExpr`) this means every element
        of every program; otherwise the batch cannot run vectorised."""
        if self._all is None:
            self._all = (self.array is None or bool(self.array.all())) and all(
                op(lo, bound) and op(hi, bound) for lo, hi, op, bound in
                ((*expr.bounds(), op, bound) for expr, op, bound in self.terms))
            if not self._all and any(type(e) is BExpr for e, _, _ in self.terms):
                raise NotBatchable("a mask is not all-true for every program of the batch",
                                   hint=_mask_hint(self.terms))
        return self._all

    @property
    def shape(self):
        """Broadcast shape of the mask."""
        shapes = [e.shape for e, _, _ in self.terms] + ([self.array.shape] if self.array is not None else [])
        return np.broadcast_shapes(*shapes) if shapes else ()

    def __array__(self, dtype=None, copy=None):
        out = self.array if self.array is not None else np.ones((), bool)
        for expr, op, bound in self.terms:
            out = out & op(np.asarray(expr), bound)
        return out if dtype is None else out.astype(dtype)

    def without(self, rank, axes, order=None) -> "Mask":
        """The mask in a tile whose index space of ``rank`` axes lost the size-1 ``axes`` (the
        rest then taken in ``order``)."""
        if not axes:
            return self
        terms = tuple((e.aligned(rank).without(axes, order) if type(e) is AffineExpr else e, op, b)
                      for e, op, b in self.terms)
        arr = None
        if self.array is not None:
            a = self.array.reshape((1,) * (rank - self.array.ndim) + self.array.shape)
            arr = a.reshape([n for ax, n in enumerate(a.shape) if ax not in axes])
            if order is not None:
                arr = arr.transpose(order)
        return Mask(terms, arr)

    def fit(self, shape):
        """This mask laid onto a tile of ``shape`` when its axes do not broadcast as they are:
        its unowned size-1 axes dropped, then aligned partition-first (``[P]`` -> ``[P, 1]``)
        or else free-last. ``None`` when neither fits."""
        if self.array is not None or any(type(e) is not AffineExpr for e, _, _ in self.terms):
            return None
        rank = max(len(e.shape) for e, _, _ in self.terms)
        own = 0
        for e, _, _ in self.terms:
            own |= e.own << (rank - len(e.shape))
        full = self.shape
        drop = [ax for ax in range(rank) if full[ax] == 1 and not (own >> ax) & 1]
        m = self.without(rank, drop)
        mshape = m.shape
        for cand in (mshape + (1,) * (len(shape) - len(mshape)), mshape):
            if len(cand) <= len(shape):
                try:
                    if np.broadcast_shapes(cand, tuple(shape)) == tuple(shape):
                        pad = len(cand) - len(mshape)
                        return Mask(tuple((AffineExpr(e.shape + (1,) * pad, e.offset, e.coefs + (0,) * pad, e.own)
                                           if pad else e, op, b) for e, op, b in m.terms))
                except ValueError:
                    pass
        return None

    def __and__(self, other):
        if isinstance(other, Mask):
            arr = self.array if other.array is None else (
                other.array if self.array is None else self.array & other.array)
            return Mask(self.terms + other.terms, arr)
        return Mask.dense(np.asarray(self) & np.asarray(other))

    __rand__ = __and__

    def __or__(self, other):
        return Mask.dense(np.asarray(self) | np.asarray(other))

    __ror__ = __or__

    def __invert__(self):
        return Mask.dense(~np.asarray(self))

    def __bool__(self):
        # Python's `and` / `or` ask each operand for its truth: the compiler's tracer, like any Python
        # object without a truth rule, takes a mask as true, so `m1 and m2` is `m2` alone and
        # `m1 or m2` is `m1` (as an official nc_match_replace8 example writes it). Do the same, and
        # warn: the NKI Known Issues page asks to combine masks with `&`. An `if` / `not` on a mask
        # has no such meaning and stays an error.
        which = _boolean_operator(sys._getframe(1))
        if which is None:
            raise TypeError("an NKI mask is an element-wise condition; pass it as mask=, not to `if`")

        kept, op = ("second", "&") if which == "and" else ("first", "|")
        warnings.warn(NKIWarning(f"[mask conjunction] Python's `{which}` on two NKI masks keeps only the {kept} "
                                 f"condition (a mask object is true to Python), as the compiler does; the NKI "
                                 f"Known Issues page: combine masks with `{op}` (at {kernel_location()})"),
                      stacklevel=2)
        return True

    def __repr__(self):
        return f"Mask(terms={len(self.terms)}, dense={self.array is not None})"


_JUMPS = {"JUMP_IF_FALSE_OR_POP": "and", "JUMP_IF_TRUE_OR_POP": "or",  # Python 3.11
          "POP_JUMP_IF_FALSE": "and", "POP_JUMP_IF_TRUE": "or", "TO_BOOL": None}  # 3.12+: after COPY 1


def _boolean_operator(frame):
    """``"and"`` / ``"or"`` when ``frame`` is evaluating Python's ``and`` / ``or`` on the value being
    tested, else ``None`` (an ``if``, ``while``, ``not``, ``bool()``)."""
    code, at = frame.f_code, frame.f_lasti
    prev = None
    for ins in dis.get_instructions(code):
        if ins.offset == at:
            if ins.opname.endswith("_OR_POP"):
                return _JUMPS.get(ins.opname)
            if ins.opname in _JUMPS and prev is not None and prev.opname == "COPY" and prev.arg == 1:
                if ins.opname != "TO_BOOL":
                    return _JUMPS[ins.opname]
                nxt = next((i for i in dis.get_instructions(code) if i.offset > at), None)
                return _JUMPS.get(nxt.opname) if nxt is not None else None
            return None
        if ins.opname not in ("CACHE", "EXTENDED_ARG"):
            prev = ins
    return None


def runtime_offset(x, default=None):
    """The value of ``x`` as an index offset when ``x`` is a one-element integer tile (a scalar read
    from SBUF, ``nl.load(t)[0, 0]``), else ``default``. Added to an ``nl.arange`` expression it is a
    run-time offset, the register value the DMA reads when it runs; the simulator reads it now."""
    if not (hasattr(x, "buffer") and hasattr(x, "dtype") and hasattr(x, "shape")):
        return default
    if getattr(x.buffer, "name", None) not in ("sbuf", "psum") or not np.issubdtype(np.dtype(x.dtype), np.integer):
        return default
    if math.prod(x.shape) != 1:
        return default
    vals = np.asarray(x.data)
    if getattr(x, "nb", 0) and np.unique(vals).size > 1:
        raise NotBatchable("a run-time index offset that differs between the programs of a batch")
    return int(vals.reshape(-1)[0])


class BExpr(_Ordered):
    """An index expression of a *batch* of SPMD programs: ``tile(i) + sum(bcoefs[k] * g_k)``.

    ``nl.program_id(axis)`` returns one of these while a launch runs its
    programs vectorised (:mod:`.vectorize`): ``g`` ranges over the batch (a box
    of the launch grid, ``bshape``) and ``tile`` is the per-program
    :class:`AffineExpr` (its offset is that of the batch's first program). It
    supports the affine arithmetic NKI index expressions use; anything that needs
    one program's value (``int()``, ``if``, ``range``, non-affine math) raises
    :class:`NotBatchable` and the programs run one at a time instead.
    """

    __array_ufunc__ = None
    __slots__ = ("tile", "bcoefs", "bshape")

    def __init__(self, tile, bcoefs, bshape):
        self.tile = tile if isinstance(tile, AffineExpr) else AffineExpr((), int(tile), ())
        self.bcoefs = tuple(int(c) if n != 1 else 0 for c, n in zip(bcoefs, bshape))
        self.bshape = tuple(bshape)

    @classmethod
    def program_id(cls, axis, start, bshape):
        """Program ids along grid ``axis`` of the batch whose first program has id ``start``."""
        bcoefs = [0] * len(bshape)
        bcoefs[axis] = 1
        return cls(AffineExpr((), start, ()), bcoefs, bshape)

    @property
    def shape(self):
        """Per-program shape of the expression."""
        return self.tile.shape

    @property
    def ndim(self):
        """Per-program number of axes."""
        return len(self.tile.shape)

    def batch_span(self):
        """(min, max) of the batch part over the batch."""
        lo = hi = 0
        for n, c in zip(self.bshape, self.bcoefs):
            lo += min(0, c * (n - 1))
            hi += max(0, c * (n - 1))
        return lo, hi

    def bounds(self):
        """(min, max) over every element of every program of the batch."""
        lo, hi = self.tile.bounds()
        blo, bhi = self.batch_span()
        return lo + blo, hi + bhi

    def full(self) -> AffineExpr:
        """The expression over (batch axes + tile axes) as one AffineExpr."""
        return AffineExpr(self.bshape + self.tile.shape, self.tile.offset, self.bcoefs + self.tile.coefs)

    def batched_array(self) -> np.ndarray:
        """Values for every program: shape ``bshape + tile.shape``."""
        return np.asarray(self.full())

    # -- affine arithmetic ------------------------------------------------------
    def __add__(self, other):
        if type(other) is BExpr:
            return BExpr(self.tile + other.tile, [a + b for a, b in zip(self.bcoefs, other.bcoefs)], self.bshape)
        if _is_int(other) or type(other) is AffineExpr:
            t = self.tile + other
            if isinstance(t, AffineExpr):
                return BExpr(t, self.bcoefs, self.bshape)
        raise NotBatchable(f"program_id combined with {type(other).__name__}")

    __radd__ = __add__

    def __neg__(self):
        return BExpr(-self.tile, [-c for c in self.bcoefs], self.bshape)

    def __pos__(self):
        return self

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if _is_int(other):
            k = int(other)
            return BExpr(self.tile * k, [c * k for c in self.bcoefs], self.bshape)
        raise NotBatchable(f"program_id multiplied by {type(other).__name__}")

    __rmul__ = __mul__

    def __getitem__(self, key):
        t = self.tile[key]
        if not isinstance(t, AffineExpr):
            raise NotBatchable("non-affine indexing of a program_id expression")
        return BExpr(t, self.bcoefs, self.bshape)

    def _cmp(self, other, op):
        if _is_int(other) or isinstance(other, (float, np.floating)):
            return Mask(((self, op, other),))
        raise NotBatchable("program_id compared with a non-constant")

    # -- anything needing one program's value ------------------------------------
    def _per_program(self, *_):
        raise NotBatchable("a program_id value is used as a Python value")

    __index__ = __int__ = __float__ = __bool__ = __array__ = __len__ = __iter__ = _per_program
    __eq__ = __ne__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __truediv__ = _per_program
    __rtruediv__ = __pow__ = __and__ = __or__ = __lshift__ = __rshift__ = _per_program
    __hash__ = object.__hash__

    def __repr__(self):
        return f"BExpr(tile={self.tile!r}, bcoefs={self.bcoefs}, bshape={self.bshape})"


def batch_hint(conds):
    """Where a batch can stay vectorised: ``{grid_axis: (lo, hi)}``, the run of batch positions per
    axis for which every condition holds, or ``None``.

    ``conds`` are ``(tile_lo, tile_hi, bcoefs, bshape, ok)``: a value ranging over
    ``[tile_lo, tile_hi]`` plus ``bcoefs . g`` over the batch, and ``ok(lo, hi)`` telling (element-wise
    over arrays) whether a program with that range is fine. Each failing condition must depend on
    a single grid axis (ragged edges of a grid do).
    """
    runs = {}
    for tlo, thi, bcoefs, bshape, ok in conds:
        nz = [k for k, c in enumerate(bcoefs) if c]
        if not nz:
            if not ok(tlo, thi):
                return None
            continue
        if len(nz) != 1:
            lo, hi = tlo, thi
            for n, c in zip(bshape, bcoefs):
                lo, hi = lo + min(0, c * (n - 1)), hi + max(0, c * (n - 1))
            if ok(lo, hi):
                continue
            return None
        ax = nz[0]
        g = np.arange(bshape[ax]) * bcoefs[ax]
        good = np.asarray(ok(tlo + g, thi + g), dtype=bool)
        runs[ax] = good if ax not in runs else runs[ax] & good
    out = {}
    for ax, good in runs.items():
        idx = np.flatnonzero(good)
        if idx.size == 0 or not good[idx[0]:idx[-1] + 1].all():
            return None
        out[ax] = (int(idx[0]), int(idx[-1]) + 1)
    return out or None


def _mask_hint(terms):
    conds = []
    for expr, op, bound in terms:
        b = expr if type(expr) is BExpr else BExpr(expr, (), ())
        tlo, thi = b.tile.bounds()
        conds.append((tlo, thi, b.bcoefs, b.bshape,
                      lambda lo, hi, op=op, bound=bound: op(lo, bound) & op(hi, bound)))
    return batch_hint(conds)
