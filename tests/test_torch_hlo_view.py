"""torch_ops.hlo_view: removing the simulator shims from torch-xla HLO text (no torch-xla needed).

The inputs are HLO texts printed by torch-xla 2.9 (``_get_xla_tensors_hlo``)
for graphs using torch_ops on PJRT_DEVICE=CPU, payloads shortened.
"""

from __future__ import annotations

from torch_ops.hlo_view import custom_calls, neuron_view, parse_instruction

CHAIN = """HloModule IrToHlo.24, entry_computation_layout={(f32[8]{0}, f32[], f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, /*index=5*/f32[4,8]{1,0})->(f32[4,8]{1,0})}

ENTRY %IrToHlo.24 (p0.2: f32[8], p1.3: f32[], p2.4: f32[4,8], p3.5: f32[4,8], p4.7: f32[4,8], p5.15: f32[4,8]) -> (f32[4,8]) {
  %p4.7 = f32[4,8]{1,0} parameter(4)
  %p3.5 = f32[4,8]{1,0} parameter(3)
  %p2.4 = f32[4,8]{1,0} parameter(2)
  %custom-call.6 = f32[4,8]{1,0} custom-call(f32[4,8]{1,0} %p3.5, f32[4,8]{1,0} %p2.4), custom_call_target="AwsNeuronCustomNativeKernel", api_version=API_VERSION_UNSPECIFIED, backend_config="ADD"
  %concatenate.8 = f32[8,8]{1,0} concatenate(f32[4,8]{1,0} %p4.7, f32[4,8]{1,0} %custom-call.6), dimensions={0}
  %slice.9 = f32[4,8]{1,0} slice(f32[8,8]{1,0} %concatenate.8), slice={[0:4], [0:8]}
  %p1.3 = f32[] parameter(1)
  %broadcast.10 = f32[4,8]{1,0} broadcast(f32[] %p1.3), dimensions={}
  %multiply.11 = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %slice.9, f32[4,8]{1,0} %broadcast.10)
  %p0.2 = f32[8]{0} parameter(0)
  %custom-call.12 = (f32[4,8]{1,0}, f32[4,1]{1,0}) custom-call(f32[4,8]{1,0} %multiply.11, f32[8]{0} %p0.2), custom_call_target="AwsNeuronCustomNativeKernel", api_version=API_VERSION_UNSPECIFIED, backend_config="RMS"
  %get-tuple-element.14 = f32[4,1]{1,0} get-tuple-element((f32[4,8]{1,0}, f32[4,1]{1,0}) %custom-call.12), index=1
  %concatenate.18 = f32[8,8]{1,0} concatenate(f32[4,8]{1,0} %p3.5, f32[4,8]{1,0} %slice.9), dimensions={0}
  %slice.19 = f32[4,8]{1,0} slice(f32[8,8]{1,0} %concatenate.18), slice={[0:4], [0:8]}
  %p5.15 = f32[4,8]{1,0} parameter(5)
  %get-tuple-element.13 = f32[4,8]{1,0} get-tuple-element((f32[4,8]{1,0}, f32[4,1]{1,0}) %custom-call.12), index=0
  %concatenate.16 = f32[8,8]{1,0} concatenate(f32[4,8]{1,0} %p5.15, f32[4,8]{1,0} %get-tuple-element.13), dimensions={0}
  %slice.17 = f32[4,8]{1,0} slice(f32[8,8]{1,0} %concatenate.16), slice={[0:4], [0:8]}
  %constant.1 = f32[] constant(1)
  %broadcast.20 = f32[4,8]{1,0} broadcast(f32[] %constant.1), dimensions={}
  %multiply.21 = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %slice.17, f32[4,8]{1,0} %broadcast.20)
  %add.22 = f32[4,8]{1,0} add(f32[4,8]{1,0} %slice.19, f32[4,8]{1,0} %multiply.21)
  ROOT %tuple.23 = (f32[4,8]{1,0}) tuple(f32[4,8]{1,0} %add.22)
}
"""

# The simulator parameter comes first, so every later parameter is renumbered.
FIRST_PARAM = """HloModule IrToHlo.9, entry_computation_layout={(bf16[2,3]{1,0}, bf16[2,3]{1,0}, bf16[2,3]{1,0})->(bf16[2,3]{1,0})}

ENTRY %IrToHlo.9 (p0.1: bf16[2,3], p1.2: bf16[2,3], p2.3: bf16[2,3]) -> (bf16[2,3]) {
  %p0.1 = bf16[2,3]{1,0} parameter(0)
  %p1.2 = bf16[2,3]{1,0} parameter(1)
  %p2.3 = bf16[2,3]{1,0} parameter(2)
  %custom-call.4 = bf16[2,3]{1,0} custom-call(bf16[2,3]{1,0} %p1.2, bf16[2,3]{1,0} %p2.3), custom_call_target="AwsNeuronCustomNativeKernel", api_version=API_VERSION_UNSPECIFIED, backend_config="X"
  %concatenate.5 = bf16[4,3]{1,0} concatenate(bf16[2,3]{1,0} %p0.1, bf16[2,3]{1,0} %custom-call.4), dimensions={0}
  %slice.6 = bf16[2,3]{1,0} slice(bf16[4,3]{1,0} %concatenate.5), slice={[0:2], [0:3]}
  %multiply.7 = bf16[2,3]{1,0} multiply(bf16[2,3]{1,0} %slice.6, bf16[2,3]{1,0} %p2.3)
  ROOT %tuple.8 = (bf16[2,3]{1,0}) tuple(bf16[2,3]{1,0} %multiply.7)
}
"""

# bf16: the shim is built in float32 (XLA:CPU would otherwise hide it behind converts).
BF16_CHAIN = """HloModule IrToHlo.22, entry_computation_layout={(bf16[4,8]{1,0}, bf16[8]{0}, f32[4,8]{1,0}, f32[4,8]{1,0})->(bf16[4,8]{1,0})}

ENTRY %IrToHlo.22 (p0.1: bf16[4,8], p1.3: bf16[8], p2.6: f32[4,8], p3.14: f32[4,8]) -> (bf16[4,8]) {
  %p2.6 = f32[4,8]{1,0} parameter(2)
  %p0.1 = bf16[4,8]{1,0} parameter(0)
  %custom-call.4 = bf16[4,8]{1,0} custom-call(bf16[4,8]{1,0} %p0.1, bf16[4,8]{1,0} %p0.1), custom_call_target="AwsNeuronCustomNativeKernel", api_version=API_VERSION_UNSPECIFIED, backend_config="ADD"
  %convert.5 = f32[4,8]{1,0} convert(bf16[4,8]{1,0} %custom-call.4)
  %concatenate.7 = f32[8,8]{1,0} concatenate(f32[4,8]{1,0} %p2.6, f32[4,8]{1,0} %convert.5), dimensions={0}
  %slice.8 = f32[4,8]{1,0} slice(f32[8,8]{1,0} %concatenate.7), slice={[0:4], [0:8]}
  %convert.9 = bf16[4,8]{1,0} convert(f32[4,8]{1,0} %slice.8)
  %p1.3 = bf16[8]{0} parameter(1)
  %custom-call.10 = (bf16[4,8]{1,0}, f32[4,1]{1,0}) custom-call(bf16[4,8]{1,0} %convert.9, bf16[8]{0} %p1.3), custom_call_target="AwsNeuronCustomNativeKernel", api_version=API_VERSION_UNSPECIFIED, backend_config="RMS"
  %get-tuple-element.12 = f32[4,1]{1,0} get-tuple-element((bf16[4,8]{1,0}, f32[4,1]{1,0}) %custom-call.10), index=1
  %p3.14 = f32[4,8]{1,0} parameter(3)
  %get-tuple-element.11 = bf16[4,8]{1,0} get-tuple-element((bf16[4,8]{1,0}, f32[4,1]{1,0}) %custom-call.10), index=0
  %convert.13 = f32[4,8]{1,0} convert(bf16[4,8]{1,0} %get-tuple-element.11)
  %concatenate.15 = f32[8,8]{1,0} concatenate(f32[4,8]{1,0} %p3.14, f32[4,8]{1,0} %convert.13), dimensions={0}
  %slice.16 = f32[4,8]{1,0} slice(f32[8,8]{1,0} %concatenate.15), slice={[0:4], [0:8]}
  %convert.17 = bf16[4,8]{1,0} convert(f32[4,8]{1,0} %slice.16)
  %convert.18 = f32[4,8]{1,0} convert(bf16[4,8]{1,0} %convert.17)
  %convert.2 = f32[4,8]{1,0} convert(bf16[4,8]{1,0} %p0.1)
  %multiply.19 = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %convert.18, f32[4,8]{1,0} %convert.2)
  %convert.20 = bf16[4,8]{1,0} convert(f32[4,8]{1,0} %multiply.19)
  ROOT %tuple.21 = (bf16[4,8]{1,0}) tuple(bf16[4,8]{1,0} %convert.20)
}
"""


def _instructions(text):
    return [i for i in (parse_instruction(ln) for ln in text.splitlines()) if i is not None]


def test_chain_of_two_kernels():
    view = neuron_view(CHAIN)
    ops = {i.name: i for i in _instructions(view)}
    # The shims are gone; the kernels feed the ops that used their results.
    assert not any(i.opcode == "slice" and i.operands == ["concatenate.8"] for i in ops.values())
    assert "concatenate.8" not in ops and "concatenate.16" not in ops and "slice.17" not in ops
    assert ops["multiply.11"].operands == ["custom-call.6", "broadcast.10"]
    assert ops["multiply.21"].operands == ["get-tuple-element.13", "broadcast.20"]
    assert ops["custom-call.12"].operands == ["multiply.11", "p0.2"]
    # A concatenate of the user's own is kept, now reading the kernel result directly.
    assert ops["concatenate.18"].operands == ["p3.5", "custom-call.6"] and "slice.19" in ops
    # The two simulator parameters are dropped; the others keep their numbers.
    params = sorted((i for i in ops.values() if i.opcode == "parameter"), key=lambda i: int(i.args))
    assert [(p.name, p.args) for p in params] == [("p0.2", "0"), ("p1.3", "1"), ("p2.4", "2"), ("p3.5", "3")]
    assert "ENTRY %IrToHlo.24 (p0.2: f32[8], p1.3: f32[], p2.4: f32[4,8], p3.5: f32[4,8]) -> (f32[4,8]) {" in view
    assert "entry_computation_layout={(f32[8]{0}, f32[], f32[4,8]{1,0}, f32[4,8]{1,0})->(f32[4,8]{1,0})}" in view


def test_parameters_renumbered_after_removal():
    view = neuron_view(FIRST_PARAM)
    lines = view.splitlines()
    assert lines[0] == ("HloModule IrToHlo.9, entry_computation_layout="
                        "{(bf16[2,3]{1,0}, bf16[2,3]{1,0})->(bf16[2,3]{1,0})}")
    assert "ENTRY %IrToHlo.9 (p0.2: bf16[2,3], p1.3: bf16[2,3]) -> (bf16[2,3]) {" in lines
    assert "  %p0.2 = bf16[2,3]{1,0} parameter(0)" in lines
    assert "  %p1.3 = bf16[2,3]{1,0} parameter(1)" in lines
    assert "  %multiply.7 = bf16[2,3]{1,0} multiply(bf16[2,3]{1,0} %custom-call.4, bf16[2,3]{1,0} %p1.3)" in lines
    assert ("custom-call(bf16[2,3]{1,0} %p0.2, bf16[2,3]{1,0} %p1.3), custom_call_target="
            '"AwsNeuronCustomNativeKernel"') in view
    assert "%p0.1" not in view and "concatenate" not in view and "slice" not in view


def test_text_without_shims_is_unchanged():
    plain = FIRST_PARAM.replace('custom_call_target="AwsNeuronCustomNativeKernel"', 'custom_call_target="Other"')
    assert neuron_view(plain) == plain
    assert neuron_view("not hlo at all") == "not hlo at all"
    once = neuron_view(CHAIN, sim_parameters={4, 5})
    assert once == neuron_view(CHAIN)
    # Applied again, nothing is a simulator parameter any more: the user's own
    # concatenate-then-slice of p3.5 and the kernel result stays.
    assert neuron_view(once, sim_parameters=set()) == once


def test_only_known_simulator_parameters_are_removed():
    partial = neuron_view(CHAIN, sim_parameters={5})
    assert "%concatenate.8" in partial and "%concatenate.16" not in partial
    assert "p4.7: f32[4,8]" in partial


def test_custom_calls_lists_target_payload_and_types():
    calls = custom_calls(CHAIN)
    assert [c["name"] for c in calls] == ["custom-call.6", "custom-call.12"]
    assert calls[0]["backend_config"] == "ADD" and calls[1]["backend_config"] == "RMS"
    assert calls[1]["result_type"] == "(f32[4,8]{1,0}, f32[4,1]{1,0})"
    assert calls[1]["operand_types"] == ["f32[4,8]{1,0}", "f32[8]{0}"]
    assert calls[0]["api_version"] == "API_VERSION_UNSPECIFIED"


def test_parse_instruction_tuple_types_and_root():
    ins = parse_instruction("  ROOT %tuple.23 = (f32[4,8]{1,0}, f32[]) tuple(f32[4,8]{1,0} %add.22, f32[] %c.1)")
    assert ins.name == "tuple.23" and ins.opcode == "tuple" and ins.type == "(f32[4,8]{1,0}, f32[])"
    assert ins.operands == ["add.22", "c.1"]
    assert parse_instruction("ENTRY %e (p: f32[]) -> f32[] {") is None


def test_widened_bf16_shims():
    view = neuron_view(BF16_CHAIN, sim_parameters={2, 3})
    ops = {i.name: i for i in _instructions(view)}
    assert ops["custom-call.10"].operands == ["custom-call.4", "p1.3"]
    assert ops["convert.18"].operands == ["get-tuple-element.11"]
    for gone in ("convert.5", "concatenate.7", "slice.8", "convert.9", "p2.6", "convert.13", "concatenate.15",
                 "slice.16", "convert.17", "p3.14"):
        assert gone not in ops, gone
    assert "entry_computation_layout={(bf16[4,8]{1,0}, bf16[8]{0})->(bf16[4,8]{1,0})}" in view
    assert neuron_view(BF16_CHAIN) == view
