#!/usr/bin/env bash
# Quick start 2: set up both environments and run the whole test suite.
#   .venv      -> tests/ (simulator, kernels, JAX incl. 8 host devices, torch 2.13 CPU)
#   .venv-xla  -> tests/xla (torch-xla custom-call path, PJRT_DEVICE=CPU)
set -euo pipefail
source "$(dirname "$0")/env.sh"
ensure_main_env
ensure_xla_env
cd "$ROOT"
# One BLAS thread: the simulator issues many small matmuls, and OpenBLAS threads fighting over a
# loaded machine made each ~100x slower (the tests check behaviour, not BLAS throughput).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# -n auto: pytest-xdist spreads the suite over the cores (every test is independent of the others'
# order and process; tests that measure time do so against a baseline in the same process).
.venv/bin/python -m pytest -q -p no:cacheprovider -n auto tests --ignore=tests/xla "$@"
# Shadow mode (issue 28): the simulator-level files of tests/shadow_suite.txt again, every launch
# run on its fast path and on the reference path, which must agree bit for bit and on the verdict.
mapfile -t SHADOW < <(grep -v '^#' tests/shadow_suite.txt)
.venv/bin/python -m pytest -q -p no:cacheprovider -n auto --nki-shadow "${SHADOW[@]}" "$@"
# torch-xla shares one XLA CPU device per process: these run in one process. NKI_OPS_REQUIRE_XLA=1
# makes a missing torch-xla an error, and pytest exits non-zero when it collected nothing, so
# this line fails unless the torch-xla tests really ran.
NKI_OPS_REQUIRE_XLA=1 PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest -q -p no:cacheprovider tests/xla "$@"
