"""torch_ops forward/backward on CPU against independent plain-torch references.

References are written out in float64 from the formula (not torch.nn.RMSNorm),
over ragged shapes (not multiples of 128 / 512), hidden sizes spanning several
kernel chunks, fp32 / bf16 / fp16 and non-contiguous inputs. Every test runs
both the functional (torch.library) path and the autograd.Function path.
"""

from __future__ import annotations

import pytest
import torch

import torch_ops

RMS_SHAPES = [(1, 1), (7, 33), (128, 512), (130, 513), (3, 50, 100), (2, 3, 4, 40), (300, 2050), (64,)]
ADD_SHAPES = [(1,), (5,), (1, 1), (129, 515), (128, 512), (2, 3, 700), (4, 8, 16), (1000,), ()]
TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
DTYPES = list(TOL)


def rms_ref(x, w, eps):
    """RMSNorm in float64 straight from the formula."""
    x64, w64 = x.detach().double(), w.detach().double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64


def rms_grads_ref(x, w, eps, dy):
    """(dx, dw) of the float64 reference via autograd."""
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64
    return torch.autograd.grad(y, (x64, w64), dy.detach().double())


def close(got, ref, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), ref.double(), rtol=rtol, atol=atol * scale)


RMS_IMPLS = {
    "functional": lambda x, w, eps: torch_ops.rms_norm(x, w, eps),
    "Function": lambda x, w, eps: torch_ops.NkiRMSNormFunc.apply(x, w, eps),
}
ADD_IMPLS = {
    "functional": torch_ops.add,
    "Function": torch_ops.NkiAddFunc.apply,
}


@pytest.mark.parametrize("impl", list(RMS_IMPLS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RMS_SHAPES, ids=str)
def test_rms_norm_forward_backward(shape, dtype, impl):
    g = torch.Generator().manual_seed(hash((shape, str(dtype))) % 2**31)
    x = torch.randn(shape, generator=g).to(dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(dtype).requires_grad_()
    y = RMS_IMPLS[impl](x, w, 1e-6)
    assert y.dtype == dtype and y.shape == x.shape
    close(y, rms_ref(x, w, 1e-6), dtype)

    dy = torch.randn(shape, generator=g).to(dtype)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    rdx, rdw = rms_grads_ref(x, w, 1e-6, dy)
    assert dx.dtype == dtype and dw.dtype == dtype
    close(dx, rdx, dtype, scale=4)
    # dw sums over all rows: compare relative to the size of the sum.
    close(dw, rdw, dtype, scale=max(1.0, rdw.abs().max().item()))


@pytest.mark.parametrize("impl", list(ADD_IMPLS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ADD_SHAPES, ids=str)
def test_add_forward_backward(shape, dtype, impl):
    a = torch.randn(shape).to(dtype).requires_grad_()
    b = torch.randn(shape).to(dtype).requires_grad_()
    c = ADD_IMPLS[impl](a, b)
    assert c.dtype == dtype and c.shape == a.shape
    torch.testing.assert_close(c, a.detach() + b.detach(), rtol=0, atol=0)  # one rounding, like torch
    dy = torch.randn(shape).to(dtype)
    da, db = torch.autograd.grad(c, (a, b), dy)
    assert torch.equal(da, dy) and torch.equal(db, dy)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_add_integers_exact(dtype):
    a = torch.randint(0, 50, (129, 520)).to(dtype)
    b = torch.randint(0, 50, (129, 520)).to(dtype)
    assert torch.equal(torch_ops.add(a, b), a + b)


@pytest.mark.parametrize("impl", list(RMS_IMPLS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_non_contiguous(dtype, impl):
    base = torch.randn(300, 140).to(dtype)
    cases = {
        "transposed": base.t(),                      # (140, 300), strides (1, 140)
        "column slice": base[:, ::2],                # every other hidden element
        "row slice": base[::3],
        "3-d permuted": torch.randn(5, 70, 12).to(dtype).permute(1, 0, 2),
    }
    for name, x in cases.items():
        assert not x.is_contiguous(), name
        x = x.requires_grad_()
        wfull = torch.randn(2 * x.shape[-1]).to(dtype)
        w = wfull[::2].requires_grad_()              # non-contiguous weight too
        y = RMS_IMPLS[impl](x, w, 1e-5)
        close(y, rms_ref(x, w, 1e-5), dtype)
        dy = torch.randn(x.shape).to(dtype).expand(x.shape)  # arbitrary strides for dy as well
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        rdx, rdw = rms_grads_ref(x, w, 1e-5, dy)
        close(dx, rdx, dtype, scale=4)
        close(dw, rdw, dtype, scale=max(1.0, rdw.abs().max().item()))


def test_rms_norm_backward_of_sum_gets_expanded_gradient():
    # y.sum().backward() hands the backward a stride-0 expanded dy.
    x = torch.randn(4, 130, 96, requires_grad=True)
    w = torch.randn(96, requires_grad=True)
    torch_ops.rms_norm(x, w).sum().backward()
    rdx, rdw = rms_grads_ref(x, w, 1e-6, torch.ones(x.shape))
    torch.testing.assert_close(x.grad.double(), rdx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), rdw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("impl", list(ADD_IMPLS))
def test_add_non_contiguous(impl):
    a = torch.randn(700, 300).t()
    b = torch.randn(300, 1400)[:, ::2]
    torch.testing.assert_close(ADD_IMPLS[impl](a, b), a + b, rtol=0, atol=0)
    a3 = torch.randn(6, 5, 130).transpose(0, 1)
    b3 = torch.randn(5, 6, 130)
    torch.testing.assert_close(ADD_IMPLS[impl](a3, b3), a3 + b3, rtol=0, atol=0)


def test_empty_tensors():
    x = torch.randn(0, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    y = torch_ops.rms_norm(x, w)
    assert y.shape == (0, 16)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros(16))
    assert torch_ops.add(torch.zeros(0, 3), torch.zeros(0, 3)).shape == (0, 3)


def test_only_weight_or_only_input_requires_grad():
    x = torch.randn(10, 20)
    w = torch.randn(20, requires_grad=True)
    for impl in RMS_IMPLS.values():
        (dw,) = torch.autograd.grad(impl(x, w, 1e-6).sum(), (w,))
        torch.testing.assert_close(dw.double(), rms_grads_ref(x, w, 1e-6, torch.ones(10, 20))[1], rtol=1e-5, atol=1e-5)
        xg = x.clone().requires_grad_()
        (dx,) = torch.autograd.grad(impl(xg, w.detach(), 1e-6).sum(), (xg,))
        torch.testing.assert_close(dx.double(), rms_grads_ref(x, w, 1e-6, torch.ones(10, 20))[0], rtol=1e-5, atol=1e-5)


def test_no_grad_forward_does_not_save_state():
    x = torch.randn(10, 20)
    w = torch.randn(20)
    with torch.no_grad():
        y = torch_ops.NkiRMSNormFunc.apply(x, w, 1e-6)
    assert y.grad_fn is None
    close(y, rms_ref(x, w, 1e-6), torch.float32)


def test_eps_matters():
    x = torch.full((3, 8), 1e-3)
    w = torch.ones(8)
    big = torch_ops.rms_norm(x, w, eps=1.0)
    close(big, rms_ref(x, w, 1.0), torch.float32)
    assert not torch.allclose(big, torch_ops.rms_norm(x, w, eps=1e-12))


def test_rstd_output_of_library_op_and_its_gradient():
    x = torch.randn(6, 5, 33, dtype=torch.float32, requires_grad=True)
    w = torch.randn(33, requires_grad=True)
    y, rstd = torch.ops.nki.rms_norm(x, w, 1e-6)
    assert rstd.shape == (6, 5, 1) and rstd.dtype == torch.float32
    x64 = x.detach().double().requires_grad_()
    ref_rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rstd.double(), ref_rstd.detach(), rtol=1e-5, atol=1e-6)
    # A gradient through rstd is still the true derivative.
    (dx,) = torch.autograd.grad((y.sum() + 3 * rstd.sum()), (x,))
    ry = x64 * ref_rstd * w.detach().double()
    (rdx,) = torch.autograd.grad(ry.sum() + 3 * ref_rstd.sum(), (x64,))
    torch.testing.assert_close(dx.double(), rdx, rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("ignore:Input #.*double precision")
def test_gradcheck_float32():
    # float32 finite differences: eps large enough to beat rounding, tolerances to match.
    x = torch.randn(3, 130, 7, requires_grad=True)
    w = torch.randn(7, requires_grad=True)
    for fn in (lambda x, w: torch_ops.rms_norm(x, w, 1e-6),
               lambda x, w: torch_ops.NkiRMSNormFunc.apply(x, w, 1e-6)):
        assert torch.autograd.gradcheck(fn, (x, w), eps=1e-2, atol=2e-2, rtol=2e-2, fast_mode=True)
    a = torch.randn(9, 600, requires_grad=True)
    b = torch.randn(9, 600, requires_grad=True)
    assert torch.autograd.gradcheck(torch_ops.add, (a, b), eps=1e-2, atol=1e-2, rtol=1e-2, fast_mode=True)


@pytest.mark.filterwarnings("ignore:Input #.*double precision")
def test_gradcheck_float32_small_full():
    x = torch.randn(5, 6, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: torch_ops.rms_norm(x, w, 1e-6), (x, w),
                                    eps=1e-2, atol=2e-2, rtol=2e-2)


def test_seed_example_a_times_b_times_a_plus_b():
    # The NKI guide's training example: out = a * b * NkiAddFunc(a, b).
    a = torch.randn(256, 1024, requires_grad=True)
    b = torch.randn(256, 1024, requires_grad=True)
    out = a * b * torch_ops.NkiAddFunc.apply(a, b)
    out.sum().backward()
    a0, b0 = a.detach(), b.detach()
    torch.testing.assert_close(a.grad, b0 * (a0 + b0) + a0 * b0)
    torch.testing.assert_close(b.grad, a0 * (a0 + b0) + a0 * b0)


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    given = None

if given is not None:

    @settings(max_examples=30, deadline=None)
    @given(lead=st.lists(st.integers(1, 140), min_size=0, max_size=2), d=st.integers(1, 1100),
           dtype=st.sampled_from(DTYPES), eps=st.sampled_from([1e-6, 1e-5, 0.1]))
    def test_rms_norm_any_shape(lead, d, dtype, eps):
        shape = (*lead, d)
        x = torch.randn(shape).to(dtype).requires_grad_()
        w = torch.randn(d).to(dtype).requires_grad_()
        y = torch_ops.rms_norm(x, w, eps)
        close(y, rms_ref(x, w, eps), dtype)
        dy = torch.randn(shape).to(dtype)
        dx, dw = torch.autograd.grad(y, (x, w), dy)
        rdx, rdw = rms_grads_ref(x, w, eps, dy)
        close(dx, rdx, dtype, scale=4)
        close(dw, rdw, dtype, scale=max(1.0, rdw.abs().max().item()))

    small = st.lists(st.integers(1, 700), min_size=1, max_size=3).filter(
        lambda s: len(s) < 3 or s[0] * s[1] * s[2] < 2e6)

    @settings(max_examples=30, deadline=None)
    @given(shape=small,
           dtype=st.sampled_from(DTYPES + [torch.int32, torch.int8]))
    def test_add_any_shape(shape, dtype):
        scale = 5 if dtype == torch.int8 else 20  # int8 sums stay in range: overflow is not under test
        a = (torch.randn(shape) * scale).to(dtype)
        b = (torch.randn(shape) * scale).to(dtype)
        assert torch.equal(torch_ops.add(a, b), a + b)
