"""The HLO the Neuron compiler would get: custom-calls with decodable payloads, in the user's graph."""

from __future__ import annotations

import torch
import torch_xla

import torch_ops
from nki_kernels.custom_call import TARGET, decode_payload, run_payload
from torch_ops.hlo_view import custom_calls, parse_instruction


def _instructions(text):
    return {i.name: i for i in (parse_instruction(ln) for ln in text.splitlines()) if i is not None}


def _entry_params(text):
    return sorted((i for i in _instructions(text).values() if i.opcode == "parameter"), key=lambda i: int(i.args))


def test_seed_example_graph(xla_device):
    """The NKI guide's (a + b) * a * b: two parameters, the custom-call, two multiplies."""
    a = torch.randn(256, 1024).to(xla_device)
    b = torch.randn(256, 1024).to(xla_device)
    out = a * b * torch_ops.add(a, b)
    hlo = torch_ops.neuron_hlo([out])
    ops = _instructions(hlo)
    assert sorted(i.opcode for i in ops.values()) == ["custom-call", "multiply", "multiply", "parameter",
                                                      "parameter", "tuple"]
    (cc,) = custom_calls(hlo)
    assert cc["result_type"] == "f32[256,1024]{1,0}" and cc["operand_types"] == ["f32[256,1024]{1,0}"] * 2
    assert cc["api_version"] == "API_VERSION_UNSPECIFIED"
    assert f'custom_call_target="{TARGET}"' in hlo
    last = next(i for i in ops.values() if i.opcode == "multiply" and cc["name"] in i.operands)
    assert ops["tuple" + hlo.split("ROOT %tuple")[1].split(" ")[0]].operands == [last.name]
    payload = decode_payload(cc["backend_config"])
    assert payload["kernel"]["qualname"] == "tensor_add_kernel"
    assert payload["kernel"]["module"] == "nki_kernels.add"
    assert payload["grid"] == [2, 2]
    assert payload["operands"] == [{"shape": [256, 1024], "dtype": "float32"}] * 2
    assert payload["results"] == [{"shape": [256, 1024], "dtype": "float32"}]


def test_payload_reruns_to_the_same_values(xla_device):
    x, w = torch.randn(130, 96), torch.randn(96)
    y = torch_ops.rms_norm(x.to(xla_device), w.to(xla_device), eps=1e-5)
    (cc,) = custom_calls(torch_ops.neuron_hlo([y]))
    payload = decode_payload(cc["backend_config"])
    assert payload["kernel"]["qualname"] == "rms_norm_fwd_kernel"
    assert payload["static"] == {"eps": 1e-5, "return_rstd": True} and payload["grid"] == [2]
    assert payload["results"] == [{"shape": [130, 96], "dtype": "float32"}, {"shape": [130, 1], "dtype": "float32"}]
    out, _ = run_payload(payload, [x.numpy(), w.numpy()])
    torch.testing.assert_close(y.cpu(), torch.from_numpy(out), rtol=0, atol=0)


def test_upstream_and_downstream_ops_stay_connected(xla_device):
    x = torch.randn(3, 70, 300).to(xla_device)
    w = torch.randn(300).to(xla_device)
    h = x * 3
    y = torch_ops.rms_norm(h, w) + h
    hlo = torch_ops.neuron_hlo([y])
    ops = _instructions(hlo)
    (cc,) = custom_calls(hlo)
    producer = ops[ops[cc["name"]].operands[0]]
    assert producer.opcode == "reshape" and ops[producer.operands[0]].opcode == "multiply"
    consumers = [i for i in ops.values() if cc["name"] in i.operands]
    assert {c.opcode for c in consumers} == {"get-tuple-element"}
    # No shim left: no concatenate, no slice, and only the user's three inputs as parameters.
    assert not any(i.opcode in ("concatenate", "slice") for i in ops.values())
    assert sorted(p.type for p in _entry_params(hlo)) == ["f32[3,70,300]{2,1,0}", "f32[300]{0}", "f32[]"]
    assert [int(p.args) for p in _entry_params(hlo)] == [0, 1, 2]


def test_executed_graph_holds_the_shim_and_runs(xla_device):
    """What torch-xla executes: the simulator's values spliced in, the custom-call folded away."""
    a = torch.randn(64, 64).to(xla_device)
    c = torch_ops.add(a, a)
    raw = torch_xla._XLAC._get_xla_tensors_hlo([c])
    assert "concatenate" in raw and f'custom_call_target="{TARGET}"' in raw
    torch_xla.sync()  # compiles and runs on XLA:CPU, which cannot run the custom-call itself
    torch.testing.assert_close(c.cpu(), 2 * a.cpu(), rtol=0, atol=0)
    assert "custom-call" not in torch_xla._XLAC._get_xla_tensors_hlo([c])  # now plain device data


def test_backward_graph_has_the_backward_kernel(xla_device):
    x = torch.randn(130, 64).to(xla_device).requires_grad_()
    w = torch.randn(64).to(xla_device).requires_grad_()
    torch_ops.rms_norm(x, w).sum().backward()
    hlo = torch_ops.neuron_hlo([x.grad, w.grad])
    calls = {decode_payload(c["backend_config"])["kernel"]["qualname"]: c for c in custom_calls(hlo)}
    # The step computing the gradients holds the forward launch (for rstd) and the backward one.
    assert sorted(calls) == ["rms_norm_bwd_kernel", "rms_norm_fwd_kernel"]
    bwd = calls["rms_norm_bwd_kernel"]
    assert bwd["result_type"] == "(f32[130,64]{1,0}, f32[2,64]{1,0})"
    assert bwd["operand_types"] == ["f32[130,64]{1,0}", "f32[130,64]{1,0}", "f32[64]{0}", "f32[130,1]{1,0}"]


def test_chained_kernels_each_appear_once(xla_device):
    a = torch.randn(4, 8).to(xla_device)
    b = torch.randn(4, 8).to(xla_device)
    w = torch.randn(8).to(xla_device)
    c = torch_ops.add(a, b)
    y = torch_ops.rms_norm(c * 2, w)
    z = torch.cat([a, c])[:4] + y          # a concatenate-and-slice of the user's own stays
    hlo = torch_ops.neuron_hlo([z])
    calls = custom_calls(hlo)
    assert [decode_payload(cc["backend_config"])["kernel"]["qualname"] for cc in calls] == \
        ["tensor_add_kernel", "rms_norm_fwd_kernel"]
    ops = _instructions(hlo)
    assert sum(i.opcode == "concatenate" for i in ops.values()) == 1
    assert len(_entry_params(hlo)) == 4  # w, the scalar 2, a, b
    torch.testing.assert_close(z.cpu(), torch.cat([a.cpu(), a.cpu() + b.cpu()])[:4] + y.cpu())


def test_bf16_custom_call_types(xla_device):
    a = torch.randn(8, 16, dtype=torch.bfloat16).to(xla_device)
    w = torch.randn(16, dtype=torch.bfloat16).to(xla_device)
    y = torch_ops.rms_norm(torch_ops.add(a, a), w) * a
    hlo = torch_ops.neuron_hlo(y)
    add, rms = custom_calls(hlo)
    assert add["result_type"] == "bf16[8,16]{1,0}" and rms["result_type"] == "(bf16[8,16]{1,0}, f32[8,1]{1,0})"
    assert rms["operand_types"] == ["bf16[8,16]{1,0}", "bf16[16]{0}"]
    assert decode_payload(add["backend_config"])["operands"][0]["dtype"] == "bfloat16"
    assert [p.type for p in _entry_params(hlo)] == ["bf16[8,16]{1,0}", "bf16[16]{0}"]
    assert not any(i.opcode in ("concatenate", "slice") for i in _instructions(hlo).values())
    torch_xla.sync()  # the widened shim runs on XLA:CPU
    ac, wc = a.cpu(), w.cpu()
    torch.testing.assert_close(y.cpu(), torch_ops.rms_norm(ac + ac, wc) * ac, rtol=0, atol=0)
