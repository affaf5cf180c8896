#!/usr/bin/env bash
# Create .venv and install llmscale into it (with test extras when asked), once per change of pyproject.toml.
# Usage: scripts/bootstrap.sh [--test]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "llmscale needs Python >= 3.11 (found: $("$py" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=".venv/.llmscale-installed${extras}"
dynamo_wheel="ai-dynamo==1.6.1"
# setup.py compiles the simulator's hot modules with mypyc: a change to them must rebuild too.
want="$(cat pyproject.toml setup.py src/llmscale/perf/kernel.py src/llmscale/sim/request.py \
  src/llmscale/sim/histogram.py src/llmscale/sim/replica.py src/llmscale/sim/fleet.py \
  | sha256sum | cut -d' ' -f1)-${LLMSCALE_PURE_PYTHON:-0}-${dynamo_wheel}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing llmscale${extras} into .venv (first time: a few minutes, the simulator is compiled with mypyc) ..." >&2
  if [ "${LLMSCALE_PURE_PYTHON:-0}" = "1" ]; then
    find src -name '*.so' -delete  # leave no stale compiled module shadowing the sources
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras}" >&2
  if [ -n "$extras" ]; then
    # NVIDIA Dynamo's planner, whose capacity search tests/peers runs beside llmscale's port. Its
    # declared dependencies are the Rust runtime and GPU stack, none of which that module needs.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "$dynamo_wheel" >&2
  fi
  echo "$want" > "$stamp"
fi
