"""Bad arguments fail with a message naming the argument, before any kernel runs."""

from __future__ import annotations

import pytest
import torch

import torch_ops
from torch_ops import launcher


@pytest.fixture(autouse=True)
def no_kernel_may_run(monkeypatch):
    """Any simulator launch during these tests is a failure: the checks must come first."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a kernel ran before the argument check")

    monkeypatch.setattr(launcher, "simulate_into", forbidden)


F32 = torch.float32

ADD_CASES = [
    ("shape", (torch.ones(2, 3), torch.ones(3, 2)), ValueError, r"a has shape \(2, 3\) but b has shape \(3, 2\)"),
    ("broadcast", (torch.ones(4, 3), torch.ones(3)), ValueError, "no broadcasting"),
    ("dtype", (torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float16)), TypeError,
     "a has dtype float32 but b has dtype float16"),
    ("device", (torch.ones(2, 3), torch.ones(2, 3, device="meta")), ValueError, "a is on cpu but b is on meta"),
    ("float64", (torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)), TypeError,
     "a is a tensor of dtype float64; add supports float32, bfloat16, float16, int32"),
    ("bool", (torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)), TypeError,
     "a is an integer tensor of dtype bool"),
    ("int64", (torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.int64)), TypeError,
     "a is an integer tensor of dtype int64"),
    ("not a tensor", (torch.ones(2), [1.0, 2.0]), TypeError, "b must be a torch.Tensor, got list"),
    ("grad float64", (torch.ones(2, 3, dtype=torch.float64, requires_grad=True),
                      torch.ones(2, 3, dtype=torch.float64)), TypeError, "a is a tensor of dtype float64"),
]


@pytest.mark.parametrize("fn", [torch_ops.add, torch_ops.NkiAddFunc.apply, torch.ops.nki.tensor_add],
                         ids=["add", "NkiAddFunc", "torch.ops.nki.tensor_add"])
@pytest.mark.parametrize("case", ADD_CASES, ids=[c[0] for c in ADD_CASES])
def test_add_errors(case, fn):
    _, args, exc, words = case
    if fn is torch.ops.nki.tensor_add and case[0] == "not a tensor":
        exc, words = (TypeError, RuntimeError), "Tensor"  # the op schema rejects it first, in torch's words
    with pytest.raises(exc, match=words):
        fn(*args)


RMS_CASES = [
    ("weight length", (torch.ones(4, 8), torch.ones(7)), ValueError,
     r"weight has shape \(7,\) but x has shape \(4, 8\); weight must be 1-D of length x.shape\[-1\] = 8"),
    ("weight 2-d", (torch.ones(4, 8), torch.ones(1, 8)), ValueError, r"weight has shape \(1, 8\)"),
    ("integer x", (torch.ones(4, 8, dtype=torch.int32), torch.ones(8, dtype=torch.int32)), TypeError,
     "x is an integer tensor of dtype int32; rms_norm supports float32, bfloat16, float16"),
    ("integer weight", (torch.ones(4, 8), torch.ones(8, dtype=torch.int64)), TypeError,
     "weight is an integer tensor of dtype int64"),
    ("dtype mismatch", (torch.ones(4, 8, dtype=torch.bfloat16), torch.ones(8)), TypeError,
     "weight has dtype float32 but x has dtype bfloat16"),
    ("device", (torch.ones(4, 8), torch.ones(8, device="meta")), ValueError, "x is on cpu but weight is on meta"),
    ("scalar x", (torch.tensor(1.0), torch.ones(1)), ValueError, "at least 1 dimension"),
    ("empty axis", (torch.ones(3, 0), torch.ones(0)), ValueError, "last\\) axis must not be empty"),
    ("float64 requiring grad", (torch.ones(4, 8, dtype=torch.float64, requires_grad=True),
                                torch.ones(8, dtype=torch.float64)), TypeError, "x is a tensor of dtype float64"),
]


@pytest.mark.parametrize("fn", [lambda x, w: torch_ops.rms_norm(x, w),
                                lambda x, w: torch_ops.NkiRMSNormFunc.apply(x, w, 1e-6),
                                lambda x, w: torch.ops.nki.rms_norm(x, w, 1e-6)],
                         ids=["rms_norm", "NkiRMSNormFunc", "torch.ops.nki.rms_norm"])
@pytest.mark.parametrize("case", RMS_CASES, ids=[c[0] for c in RMS_CASES])
def test_rms_norm_errors(case, fn):
    _, args, exc, words = case
    with pytest.raises(exc, match=words):
        fn(*args)


@pytest.mark.parametrize("eps", [-1.0, float("nan"), float("inf"), "1e-6", True])
def test_rms_norm_bad_eps(eps):
    with pytest.raises(ValueError, match="eps must be a finite non-negative Python float"):
        torch_ops.rms_norm(torch.ones(2, 4), torch.ones(4), eps)


def test_rms_norm_backward_op_checks_rstd():
    x, w = torch.ones(4, 8), torch.ones(8)
    # (residuals, output gradients, which outputs got one, static arguments): nki_kernels.op backward ops
    with pytest.raises(ValueError, match=r"rstd has shape \(4,\).*float32 rstd of shape \(4, 1\)"):
        torch.ops.nki.rms_norm_backward([x, w, torch.ones(4)], [torch.ones(4, 8)], [True, False], 1e-6)
    with pytest.raises(ValueError, match=r"dy has shape \(4, 9\) but x has shape \(4, 8\)"):
        torch.ops.nki.rms_norm_backward([x, w, torch.ones(4, 1)], [torch.ones(4, 9)], [True, False], 1e-6)


def test_gradient_dtype_rule():
    from torch_ops import checks

    # No floating kernel dtype fails this; the rule guards dtypes the forward accepts but the backward does not.
    t = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match="t requires grad but has dtype float64; gradients are supported for "
                                        "float32, bfloat16, float16"):
        checks.require_grad_dtype({"t": t})
    checks.require_grad_dtype({"t": torch.ones(3, requires_grad=True)})


def test_module_errors():
    with pytest.raises(ValueError, match="last dimension only"):
        torch_ops.RMSNorm((4, 8))
    norm = torch_ops.RMSNorm(8)
    with pytest.raises(ValueError, match=r"x has shape \(4, 7\) but this RMSNorm normalises a last dimension "
                                         r"of size 8"):
        norm(torch.ones(4, 7))
    with pytest.raises(TypeError, match="weight has dtype float32 but x has dtype bfloat16"):
        norm(torch.ones(4, 8, dtype=torch.bfloat16))


def test_nki_call_errors():
    from nki_kernels import tensor_add_kernel

    with pytest.raises(ValueError, match="tensor argument 0 is on cpu but argument 1 is on meta"):
        torch_ops.nki_call(tensor_add_kernel, torch.ones(2, 2), torch.ones(2, 2, device="meta"), grid=(1, 1))
    with pytest.raises(TypeError, match="tensor argument 1 is a float"):
        torch_ops.nki_call(tensor_add_kernel, torch.ones(2, 2), 1.0, grid=(1, 1))
    with pytest.raises(ValueError, match="needs at least one tensor"):
        torch_ops.nki_call(tensor_add_kernel, grid=(1, 1))
