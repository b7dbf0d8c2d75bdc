"""HLO inspection: NEURON_FRAMEWORK_DEBUG=1 writes .pbtxt files; jax_ops.neuron_hlo returns the text."""

import glob
import os
import textwrap

import jax
import jax.numpy as jnp
import pytest

import jax_ops
from jax_ops import cpu_target

from .jax_helpers import custom_calls, payloads, run_python, unmasked_rows_kernel

# The NKI guide's JAX example: the NKI add replaces `a + b` inside a plain jax.jit function.
GUIDE_EXAMPLE = textwrap.dedent("""
    import os
    import jax, jax.numpy as jnp
    import nki_kernels
    {before}

    @jax.jit
    def jax_customop_tutorial(a, b):
        c = nki_kernels.tensor_add(a, b)
        return a * b * c

    @jax.jit
    def no_nki(a):
        return a * 3

    a = jax.random.normal(jax.random.PRNGKey(0), (256, 1024), dtype=jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (256, 1024), dtype=jnp.float32)
    {after}
    out = jax_customop_tutorial(a, b)
    assert float(jnp.abs(out - a * b * (a + b)).max()) < 1e-4
    no_nki(a).block_until_ready()
    print("ok")
""")


def _run(tmp_path, env=None, before="", after=""):
    proc = run_python(GUIDE_EXAMPLE.format(before=before, after=after), env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
    return sorted(glob.glob(os.path.join(tmp_path, "*.pbtxt")))


def test_debug_env_writes_one_pbtxt_per_module_with_the_custom_call(tmp_path):
    files = _run(tmp_path, env={"NEURON_FRAMEWORK_DEBUG": "1"})
    assert len(files) == 1, files  # only the module with an NKI call; `no_nki` is not dumped
    assert os.path.basename(files[0]).startswith("jit_jax_customop_tutorial.")
    text = open(files[0]).read()
    assert text.startswith("HloModule jit_jax_customop_tutorial")
    (line,) = custom_calls(text)
    assert 'custom_call_target="AwsNeuronCustomNativeKernel"' in line
    assert "custom-call(f32[256,1024]" in line.replace("{1,0}", "")  # operand shapes, as in the guide
    (p,) = payloads(text)
    assert p["kernel"]["qualname"] == "tensor_add_kernel" and p["grid"] == [2, 2]


def test_debug_env_set_after_import_in_the_program(tmp_path):
    files = _run(tmp_path, before="import jax_ops", after="os.environ['NEURON_FRAMEWORK_DEBUG'] = '1'")
    assert len(files) == 1


@pytest.mark.parametrize("value", ["", "0"])
def test_no_files_without_the_env_var(tmp_path, value):
    assert _run(tmp_path, env={"NEURON_FRAMEWORK_DEBUG": value}) == []


def test_neuron_hlo_returns_the_compiled_text_without_running():
    before = cpu_target.calls()
    # This launch fails when executed (program 1 reads past row 200): neuron_hlo must not execute it.
    text = jax_ops.neuron_hlo(lambda a: jax_ops.nki_call(unmasked_rows_kernel, a, grid=(2,)) * 2,
                              jax.ShapeDtypeStruct((200, 8), jnp.float32))
    assert cpu_target.calls() == before
    assert text.startswith("HloModule")
    (line,) = custom_calls(text)
    assert "f32[200,8]" in line
    assert payloads(text)[0]["kernel"]["qualname"] == "unmasked_rows_kernel"


def test_neuron_hlo_accepts_arrays_and_jitted_functions():
    a = jnp.ones((4, 8))
    plain = jax_ops.neuron_hlo(jax_ops.add, a, a)
    jitted = jax_ops.neuron_hlo(jax.jit(jax_ops.add), a, a)
    assert len(custom_calls(plain)) == len(custom_calls(jitted)) == 1
