"""scripts/jax_train.py: the NKI-op model trains and tracks the plain-jnp model."""

import importlib.util
import os

from .jax_helpers import ROOT, run_python


def _script():
    spec = importlib.util.spec_from_file_location("jax_train", os.path.join(ROOT, "scripts", "jax_train.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_training_tracks_jnp_and_the_loss_falls(capsys):
    assert _script().main(["--steps", "12", "--batch", "8"]) == 0
    out = capsys.readouterr().out
    losses = [float(line.split()[1]) for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(losses) == 12 and losses[-1] < 0.8 * losses[0]
    assert "OK: the NKI-op model tracks the jnp model" in out


def test_training_with_the_batch_sharded_over_eight_devices():
    proc = run_python("import runpy, sys; sys.argv = ['jax_train.py', '--steps', '3', '--shard', '8']; "
                      f"runpy.run_path({os.path.join(ROOT, 'scripts', 'jax_train.py')!r}, run_name='__main__')")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "batch sharded over 8 devices" in proc.stdout and "OK:" in proc.stdout
