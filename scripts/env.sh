# Shared by demo.sh and test.sh: create the virtual environments this project runs in.
#   .venv      numpy, ml_dtypes, JAX (CPU), torch 2.13.0 (CPU build), test tools
#   .venv-xla  torch 2.9.0 + torch-xla 2.9.0 (PJRT_DEVICE=CPU), test tools
# Each is rebuilt only when pyproject.toml or this file changes (a stamp records their hash).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
STAMP_KEY="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/env.sh" | sha256sum | cut -c1-16)"

# Setting up takes minutes (torch alone is ~200 MB): pip shows what it fetches, and each step
# says what it does and how long it took, instead of a silent `pip -q`.
_step() {  # _step MESSAGE CMD...: run CMD with a heading and its duration
  local msg="$1" t0=$SECONDS; shift
  echo ">> $msg"
  "$@"
  echo ">> done in $((SECONDS - t0)) s: $msg"
}

_pip() {  # _pip VENV ARGS...: pip install, showing each package it fetches and installs
  "$1/bin/pip" install --disable-pip-version-check "${@:2}"
}

_fresh() {  # _fresh DIR: true when DIR's stamp matches
  [ -x "$1/bin/python" ] && [ "$(cat "$1/.stamp" 2>/dev/null)" = "$STAMP_KEY" ]
}

ensure_main_env() {
  local venv="$ROOT/.venv"
  _fresh "$venv" && return 0
  echo ">> setting up $venv (numpy, JAX, torch 2.13.0 CPU, test tools): a few minutes the first time"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  # torch by exact version first: the CPU build; a looser spec pulls a CUDA build.
  _step "torch 2.13.0 (CPU build) into $venv" _pip "$venv" "torch==2.13.0"
  _step "nki-ops (editable) with JAX and the test tools into $venv" _pip "$venv" -e "$ROOT[jax,torch,test]"
  echo "$STAMP_KEY" > "$venv/.stamp"
}

ensure_xla_env() {
  local venv="$ROOT/.venv-xla"
  _fresh "$venv" && return 0
  echo ">> setting up $venv (torch 2.9.0 + torch-xla 2.9.0 on PJRT_DEVICE=CPU): a few minutes the first time"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  _step "torch 2.9.0 + torch-xla 2.9.0 into $venv" _pip "$venv" "torch==2.9.0" "torch-xla==2.9.0"
  _step "nki-ops (editable) with the test tools into $venv" _pip "$venv" -e "$ROOT[test]"
  echo "$STAMP_KEY" > "$venv/.stamp"
}
