"""Instruction rules and parameters of the Neuron 2.33 (NKI 0.7.0) ISA pages, against NumPy.

- ``nki.isa.scalar_tensor_tensor`` gains ``reduce_cmd`` / ``reduce_op`` / ``reduce_res``
  (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.scalar_tensor_tensor.html);
- ``nki.isa.tensor_copy_predicated``: "reverse_pred can only be set to true if src is a scalar", rank <= 4,
  a scalar src of dst's kind
  (https://awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/nki.isa.tensor_copy_predicated.html).
"""

import numpy as np
import pytest

from nki_kernels.simulator import standalone as nki
from nki_kernels.simulator.errors import NKIError
from tests.isa_helpers import to_hbm, to_sbuf

nl = nki.language
nisa = nki.isa
RNG = np.random.default_rng(233)


def _stt(a, b, reduce_op=..., with_res=True, reduce_cmd=None, then=None):
    """``(a * 2) + b`` by scalar_tensor_tensor with an optional reduction; returns (result, reduce_res).
    ``then``: a second instruction reading the Vector registers (tensor_scalar_reduce, reduce_cmd=reduce)."""

    @nki.jit
    def kernel(a, b):
        x, y = to_sbuf(a), to_sbuf(b)
        r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        rr = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=rr, value=0.0)
        extra = {} if reduce_cmd is None else {"reduce_cmd": reduce_cmd}
        nisa.scalar_tensor_tensor(dst=r, data=x, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=y,
                                  reduce_op=reduce_op, reduce_res=rr if with_res else None, **extra)
        if then is not None:
            r2 = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar_reduce(dst=r2, data=x, op0=nl.add, operand0=0.0, reduce_op=then,
                                      reduce_res=rr, reduce_cmd=nisa.reduce_cmd.reduce)
        return to_hbm(r), to_hbm(rr)

    return kernel(a, b)


@pytest.mark.parametrize("op,ref", [(nl.add, np.sum), (nl.max, np.max), (nl.min, np.min)])
def test_scalar_tensor_tensor_reduces_its_result(op, ref):
    a = RNG.standard_normal((64, 48)).astype(np.float32)
    b = RNG.standard_normal((64, 48)).astype(np.float32)
    out, red = _stt(a, b, reduce_op=op)
    want = a * np.float32(2) + b
    np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(red[:, 0], ref(want, axis=1), rtol=1e-5, atol=1e-5)


def test_scalar_tensor_tensor_without_reduce_op_leaves_reduce_res_alone():
    a = RNG.standard_normal((32, 16)).astype(np.float32)
    b = RNG.standard_normal((32, 16)).astype(np.float32)
    out, red = _stt(a, b, with_res=False)
    np.testing.assert_array_equal(out, a * np.float32(2) + b)
    np.testing.assert_array_equal(red, np.zeros((32, 1), np.float32))  # only the memset wrote it


def test_scalar_tensor_tensor_registers_carry_into_the_next_reduction():
    # reset_reduce (the default) leaves the row sums in the Vector registers; a following
    # tensor_scalar_reduce with reduce_cmd=reduce adds its own rows onto them
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((16, 8)).astype(np.float32)
    _, red = _stt(a, b, reduce_op=nl.add, then=nl.add)
    want = (a * np.float32(2) + b).sum(axis=1) + a.sum(axis=1)
    np.testing.assert_allclose(red[:, 0], want, rtol=1e-5, atol=1e-5)


def test_scalar_tensor_tensor_reduce_res_needs_reduce_op():
    a = np.ones((8, 8), np.float32)
    with pytest.raises(NKIError, match="reduce_res is given but reduce_op is not"):
        _stt(a, a)


def test_scalar_tensor_tensor_refuses_a_non_reduction_op():
    a = np.ones((8, 8), np.float32)
    with pytest.raises(NKIError, match="the reduce_op can be nl.add, nl.multiply, nl.max or nl.min"):
        _stt(a, a, reduce_op=nl.subtract)


@nki.jit
def _predicated(src, pred, init, reverse=False, scalar=None):
    s, p, d = to_sbuf(src), to_sbuf(pred), to_sbuf(init)
    nisa.tensor_copy_predicated(dst=d, src=s if scalar is None else scalar, predicate=p, reverse_pred=reverse)
    return to_hbm(d)


def test_copy_predicated_rank_four_is_accepted_rank_five_refused():
    shape4 = (8, 2, 3, 4)
    x = RNG.standard_normal(shape4).astype(np.float32)
    init = RNG.standard_normal(shape4).astype(np.float32)
    pred = (RNG.random(shape4) > 0.5).astype(np.uint8)
    np.testing.assert_array_equal(_predicated(x, pred, init), np.where(pred != 0, x, init))
    shape5 = (8, 2, 3, 2, 2)
    x5 = RNG.standard_normal(shape5).astype(np.float32)
    with pytest.raises(NKIError, match="maximum rank 4"):
        _predicated(x5, (RNG.random(shape5) > 0.5).astype(np.uint8), x5)


def test_copy_predicated_int_scalar_into_integer_dst():
    init = RNG.integers(-50, 50, (16, 8)).astype(np.int32)
    pred = (RNG.random((16, 8)) > 0.5).astype(np.uint16)
    got = _predicated(init, pred, init, True, scalar=7)
    np.testing.assert_array_equal(got, np.where(pred == 0, np.int32(7), init))


# ---------------------------------------------------------------------------
# Rank limits the 2.33 pages state ("at most N free dimensions (maximum rank N+1 ...)"): the largest
# rank runs and matches NumPy, one more is refused
# ---------------------------------------------------------------------------
def _shape(rank):
    return (8,) + (2,) * (rank - 1)


def _unary(op_body):
    @nki.jit
    def kernel(a):
        x = to_sbuf(a)
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        op_body(o, x)
        return to_hbm(o)
    return kernel


_UNARY = {
    # name: (limit, body, NumPy reference)
    "memset": (5, lambda o, x: nisa.memset(dst=o, value=1.5), lambda a: np.full_like(a, 1.5)),
    "reciprocal": (5, lambda o, x: nisa.reciprocal(dst=o, data=x), lambda a: np.float32(1) / a),
    "exponential": (4, lambda o, x: nisa.exponential(dst=o, src=x), np.exp),
    "tensor_scalar_reduce": (4, lambda o, x: nisa.tensor_scalar_reduce(dst=o, data=x, op0=nl.multiply, operand0=3.0,
                                                                        reduce_op=nl.add),
                             lambda a: a * np.float32(3)),
}


@pytest.mark.parametrize("name", sorted(_UNARY))
def test_rank_limit(name):
    limit, body, ref = _UNARY[name]
    kernel = _unary(body)
    a = RNG.uniform(0.5, 2.0, _shape(limit)).astype(np.float32)
    np.testing.assert_allclose(kernel(a), ref(a), rtol=1e-6)
    with pytest.raises(NKIError, match=f"maximum rank {limit}"):
        kernel(RNG.uniform(0.5, 2.0, _shape(limit + 1)).astype(np.float32))


def test_tensor_partition_reduce_rank_limit():
    @nki.jit
    def kernel(a):
        x = to_sbuf(a)
        o = nl.ndarray((1,) + a.shape[1:], dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(dst=o, op=nl.add, data=x)
        return to_hbm(o)

    a = RNG.standard_normal(_shape(5)).astype(np.float32)
    np.testing.assert_allclose(kernel(a), a.sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(NKIError, match="maximum rank 5"):
        kernel(RNG.standard_normal(_shape(6)).astype(np.float32))


# ---------------------------------------------------------------------------
# register_load / register_store: any dtype "except the packed MX x4 types" (2.33 pages)
# ---------------------------------------------------------------------------
def test_register_round_trip_and_packed_dtypes_refused():
    @nki.jit
    def kernel(a):
        x = to_sbuf(a)
        reg = nisa.register_alloc(0)
        nisa.register_load(reg, x)
        o = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(o, reg)
        return to_hbm(o)

    np.testing.assert_array_equal(kernel(np.array([[41]], np.int32)), [[41]])

    @nki.jit
    def packed(a):
        x = nl.ndarray((1, 1), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.memset(dst=x, value=0)
        reg = nisa.register_alloc(0)
        nisa.register_load(reg, x)
        return to_hbm(to_sbuf(a))

    with pytest.raises(NKIError, match="packed MX dtype float8_e4m3fn_x4"):
        packed(np.zeros((1, 1), np.float32))


# ---------------------------------------------------------------------------
# nl.ndarray(address=) in HBM: "for HBM it is a 1-tuple (free_offset,)" (nki.language.ndarray, 2.33.0)
# ---------------------------------------------------------------------------
def _hbm_round_trip(addr_a, addr_b, buffer=None):
    @nki.jit
    def kernel(a, b):
        buf = nl.hbm if buffer is None else buffer
        ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=buf, address=addr_a, name="ta")
        tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=buf, address=addr_b, name="tb")
        nisa.dma_copy(dst=ta, src=to_sbuf(a))
        nisa.dma_copy(dst=tb, src=to_sbuf(b))
        x = to_sbuf(ta)
        y = to_sbuf(tb)
        o = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=x, data2=y, op=nl.subtract)
        return to_hbm(o)
    return kernel


def test_hbm_tensors_placed_apart_keep_their_values():
    a = RNG.standard_normal((8, 16)).astype(np.float32)
    b = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_array_equal(_hbm_round_trip((0,), (a.nbytes,))(a, b), a - b)  # adjacent: no overlap


def test_hbm_placements_that_overlap_or_are_malformed_are_refused():
    a = np.ones((8, 16), np.float32)
    with pytest.raises(NKIError, match="overlaps ta"):
        _hbm_round_trip((0,), (a.nbytes - 4,))(a, a)
    with pytest.raises(TypeError, match="an HBM address is a 1-tuple"):
        _hbm_round_trip((0, 0), (4096,))(a, a)
    with pytest.raises(TypeError, match="non-negative int"):
        _hbm_round_trip((-4,), (4096,))(a, a)
