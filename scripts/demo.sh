#!/usr/bin/env bash
# Quick start 1: set up .venv and run the demo (kernels on the simulator vs NumPy, then JAX and torch).
set -euo pipefail
source "$(dirname "$0")/env.sh"
ensure_main_env
cd "$ROOT"
exec .venv/bin/python scripts/demo.py "$@"
