#!/usr/bin/env bash
# Set up flagperf in ./.venv: the driver (editable install) and torch for the benchmarks.
#   scripts/setup.sh          driver + torch
#   scripts/setup.sh --test   the same plus the test tools
# The venv sees the system's site-packages, so a torch that is already installed (GPU servers) is used as is.
# Otherwise torch==2.13.0 is installed (set FLAGPERF_TORCH_SPEC to choose another build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version 2>&1)"
  "$PY" -m venv --system-site-packages .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

stamp=.venv/.flagperf-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing flagperf and its dependencies"
  pip install -e . 2>&1 | grep -v "^WARNING: Location" || true
  touch "$stamp"
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  spec=${FLAGPERF_TORCH_SPEC:-torch==2.13.0}
  echo "setup: installing $spec and numpy for the benchmarks"
  pip install "$spec" numpy 2>&1 | grep -v "^WARNING: Location" || true
fi
if [ $want_test = 1 ] && [ ! -x /usr/sbin/sshd ]; then
  echo "setup: installing openssh-server (the SSH tests start their own sshd on 127.0.0.x)"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >/dev/null 2>&1 || {
    $sudo apt-get update -q >/dev/null && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >/dev/null; } || {
    echo "setup: could not install openssh-server" >&2; exit 1; }
fi
if [ $want_test = 1 ] && ! .venv/bin/python -c "import pytest" 2>/dev/null; then
  echo "setup: installing pytest"
  pip install "pytest>=7" 2>&1 | grep -v "^WARNING: Location" || true
fi
.venv/bin/python -c "import flagperf, torch, click, rich, yaml, psutil" || {
  echo "setup: the environment in .venv is incomplete (see the messages above)" >&2; exit 1; }
