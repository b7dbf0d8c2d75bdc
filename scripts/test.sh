#!/usr/bin/env bash
# Quick start 2: set up both environments and run the whole test suite.
#   .venv      -> tests/ (simulator, kernels, JAX incl. 8 host devices, torch 2.13 CPU)
#   .venv-xla  -> tests/xla (torch-xla custom-call path, PJRT_DEVICE=CPU)
set -euo pipefail
source "$(dirname "$0")/env.sh"
ensure_main_env
ensure_xla_env
cd "$ROOT"
.venv/bin/python -m pytest -q -p no:cacheprovider tests --ignore=tests/xla "$@"
PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest -q -p no:cacheprovider tests/xla "$@"
