"""Wall time of one batch-sharded JAX training step on 8 host devices, the NKI ops on the simulator.

    python scripts/bench_jax_sharded.py [--steps 5] [--repeat 5] [--size 128] [--batch 16] [--single]

What it measures: the decoder block of ``scripts/train_decoder_jax.py`` (RMSNorm ->
causal GQA ``jax_ops.flash_attention`` -> ``jax_ops.residual_rms_norm`` -> GELU MLP
-> ``jax_ops.residual_rms_norm`` -> vocabulary head -> ``jax_ops.cross_entropy``),
one step being ``jax.jit(value_and_grad(loss))`` plus an Adam update (``make_step``
of ``scripts/jax_train.py``). The batch (``--batch`` sequences of ``--size`` tokens)
is sharded over a ``Mesh`` of 8 CPU devices with ``NamedSharding(mesh, P("batch"))``;
``custom_partitioning`` keeps every NKI custom-call on its shard (the compiled step
holds about a dozen per device, no all-gather, one all-reduce). After a warm-up
(which also compiles), ``--repeat`` times: ``--steps`` steps chained as a training
loop (each step's parameters feed the next), then ``block_until_ready``; the figure
is seconds per step, median and spread (min, max) over the repeats, and
``cores_busy``, the process's CPU seconds (all threads) per wall second while
timing: near 1 when the shards' work is serialised (a lock, or the GIL).

Why: XLA's CPU runtime runs the 8 devices' programs on separate threads, so the 8
shards' custom-calls can run at once, unless the simulator serialises launches
(issue 29: one lock around every launch). Run the same command at two versions of
the code, alternating, in the same minutes, and compare the medians; a lone figure
depends on the machine and its load, so the JSON line also records the CPU count,
the process's CPU affinity, the load average before and after, and where
``nki_kernels`` was imported from (``PYTHONPATH=<other checkout>`` selects the code
under test: the repository root is only appended to ``sys.path``).

Correctness: the sharded step's loss and updated parameters and optimiser state
are compared with the same step run unsharded (one device) and with the same
model in plain ``jnp``; the script exits 1 if either differs by more than ``--tol``
(relative to each leaf's largest magnitude). ``--single`` also times the
unsharded step, for the sharded / single ratio within one process.

Output: a human line, then one JSON line (``{"bench": "jax_sharded", ...}``).
NumPy's BLAS runs one thread unless ``OPENBLAS_NUM_THREADS`` is set (as in
``train_decoder_jax.py``: the simulator's matmuls are small), so the parallelism
measured is XLA's device threads. ``JAX_PLATFORMS`` defaults to ``cpu``: the 8
devices are host devices even on a machine with a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEVICES = 8


def parse_args(argv=None):
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="training steps per timed run")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs (median and spread over these)")
    ap.add_argument("--size", type=int, default=128, help="tokens per sequence")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step (a multiple of 8: sharded over 8)")
    ap.add_argument("--single", action="store_true", help="also time the same step unsharded on one device")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed relative difference")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.repeat < 1 or args.size < 1:
        ap.error("--steps, --repeat and --size must be positive")
    if args.batch < DEVICES or args.batch % DEVICES:
        ap.error(f"--batch must be a positive multiple of {DEVICES}")
    return args


if __name__ == "__main__":
    parse_args()  # --help / bad options before JAX starts
    # XLA fixes the host device count when JAX initialises.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={DEVICES}").strip()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # XLA's CPU runtime, also where a GPU is present
    # Appended, not prepended: a PYTHONPATH naming another checkout's packages wins.
    sys.path.append(ROOT)
sys.path.insert(0, HERE)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec  # noqa: E402

import train_decoder_jax as decoder  # noqa: E402
from jax_train import adam, make_step, max_rel_diff  # noqa: E402

import jax_ops  # noqa: E402
import nki_kernels  # noqa: E402


def launch_lock_present():
    """Whether the simulator under test still has the module-level lock around every launch (issue 29)."""
    try:
        from nki_kernels.simulator import launch
    except ImportError:
        return None
    return hasattr(launch, "_one_launch_at_a_time")


def seconds_per_step(step, params, state, tokens, targets, steps):
    """(wall, process CPU) seconds per step of ``steps`` chained steps, ending with ``block_until_ready``."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        params, state, loss = step(params, state, tokens, targets)
    jax.block_until_ready((params, state, loss))
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def spread(times):
    """Median, min and max of a list of seconds."""
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def main(argv=None) -> int:
    """Check the sharded step against the unsharded and plain-jnp ones, time it; 0 if they agree."""
    args = parse_args(argv)
    if len(jax.devices()) < DEVICES:
        print(f"FAIL: {len(jax.devices())} devices; run as a script (it sets "
              f"--xla_force_host_platform_device_count={DEVICES} before JAX starts)")
        return 2
    load_before = os.getloadavg()
    model = decoder.parse_args(["--batch", str(args.batch), "--seq", str(args.size), "--steps", "1"])
    params = decoder.init_params(jax.random.PRNGKey(0), model)
    opt_init, opt_update = adam(model.lr)
    state = opt_init(params)
    lib_step = make_step(decoder.make_loss(decoder.LibraryOps, model), opt_update)
    ref_step = make_step(decoder.make_loss(decoder.PlainOps, model), opt_update)

    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("batch",))
    shard = NamedSharding(mesh, PartitionSpec("batch"))
    replicated = NamedSharding(mesh, PartitionSpec())
    tokens, targets = next(decoder.batches(1, model))
    s_tokens, s_targets = jax.device_put(tokens, shard), jax.device_put(targets, shard)
    s_params, s_state = jax.device_put(params, replicated), jax.device_put(state, replicated)
    summary = decoder.compiled_summary(lib_step, s_params, s_state, s_tokens, s_targets)

    # Correctness first (this also compiles both versions of the step).
    sharded = jax.block_until_ready(lib_step(s_params, s_state, s_tokens, s_targets))
    single = lib_step(params, state, tokens, targets)
    plain = ref_step(params, state, tokens, targets)
    diff_single, diff_plain = max_rel_diff(sharded, single), max_rel_diff(sharded, plain)
    ok = diff_single <= args.tol and diff_plain <= args.tol

    # Warm-up of the chained loop: a step's outputs may carry other shardings than its first
    # inputs, which compiles the step once more.
    seconds_per_step(lib_step, s_params, s_state, s_tokens, s_targets, 2)
    if args.single:
        seconds_per_step(lib_step, params, state, tokens, targets, 2)
    compiled_versions = lib_step._cache_size() if hasattr(lib_step, "_cache_size") else None
    times, single_times, cpu, single_cpu = [], [], [], []
    for _ in range(args.repeat):
        wall, busy = seconds_per_step(lib_step, s_params, s_state, s_tokens, s_targets, args.steps)
        times.append(wall)
        cpu.append(busy)
        if args.single:  # interleaved, so both see the same load
            wall, busy = seconds_per_step(lib_step, params, state, tokens, targets, args.steps)
            single_times.append(wall)
            single_cpu.append(busy)

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    result = {
        "bench": "jax_sharded", "devices": DEVICES, "batch": args.batch, "size": args.size,
        "steps": args.steps, "repeat": args.repeat,
        "sec_per_step": spread(times), "runs": times,
        # process CPU seconds (all threads) per wall second while timing: about 1 when the step is serialised
        "cores_busy": sum(cpu) / sum(times),
        "single_sec_per_step": spread(single_times) if single_times else None,
        "single_cores_busy": sum(single_cpu) / sum(single_times) if single_times else None,
        "sharded_over_single": (statistics.median(times) / statistics.median(single_times)) if single_times else None,
        "max_rel_diff_vs_unsharded": diff_single, "max_rel_diff_vs_jnp": diff_plain, "tol": args.tol, "ok": ok,
        "compiled": summary, "recompiled_while_timing": (lib_step._cache_size() != compiled_versions
                                                         if compiled_versions is not None else None),
        "launch_lock": launch_lock_present(),
        "cpu_count": os.cpu_count(), "cpu_affinity": affinity,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "nki_kernels": os.path.dirname(os.path.abspath(nki_kernels.__file__)),
        "jax_ops": os.path.dirname(os.path.abspath(jax_ops.__file__)),
        "jax": jax.__version__,
    }
    med = result["sec_per_step"]
    line = (f"sharded step ({DEVICES} devices, batch {args.batch} x {args.size} tokens): "
            f"{med['median'] * 1e3:.1f} ms/step median [{med['min'] * 1e3:.1f}, {med['max'] * 1e3:.1f}] "
            f"over {args.repeat} x {args.steps} steps, {result['cores_busy']:.2f} cores busy")
    if single_times:
        line += (f"; unsharded {statistics.median(single_times) * 1e3:.1f} ms/step, "
                 f"ratio {result['sharded_over_single']:.2f}")
    line += (f"; vs unsharded {diff_single:.1e}, vs jnp {diff_plain:.1e}; launch lock: {result['launch_lock']}; "
             f"{os.cpu_count()} CPUs, load {load_before[0]:.2f}; nki_kernels from {result['nki_kernels']}")
    print(line)
    print(json.dumps(result), flush=True)
    if not ok:
        print(f"FAIL: the sharded step differs from the unsharded / jnp one by more than {args.tol}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
