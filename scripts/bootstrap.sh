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
# setup.py compiles the simulator's hot modules with mypyc: a change to them must rebuild too.
hot="$("$py" -c 'import runpy; print(" ".join(runpy.run_path("src/llmscale/_source_first.py")["hot_module_paths"]()))')"
# shellcheck disable=SC2086  # the list is space-separated paths without blanks
want="$(cat pyproject.toml setup.py src/llmscale/_source_first.py $hot | sha256sum | cut -d' ' -f1)-${LLMSCALE_PURE_PYTHON:-0}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing llmscale${extras} into .venv (first time: a few minutes, the simulator is compiled with mypyc) ..." >&2
  if [ "${LLMSCALE_PURE_PYTHON:-0}" = "1" ]; then
    find src -name '*.so' -delete  # leave no stale compiled module shadowing the sources
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras}" >&2
  echo "$want" > "$stamp"
fi
