#!/usr/bin/env bash
# Create .venv and install llmscale into it (with test extras when asked), once per change of pyproject.toml.
# Usage: scripts/bootstrap.sh [--test]
# Needs: Python >= 3.11 with python3-venv; gcc and python3-dev unless LLMSCALE_PURE_PYTHON=1 (scripts/prereqs.sh
# installs them with apt-get as root or through sudo; LLMSCALE_BOOTSTRAP_INSTALL=no only names them);
# PyPI (pip) for the Python packages.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
py="${PYTHON:-python3}"
# shellcheck source=scripts/prereqs.sh
. scripts/prereqs.sh
stamp=".venv/.llmscale-installed${extras}"
dynamo_wheel="ai-dynamo==1.6.1"
# guidellm without PyTorch for tests/emulate/test_guidellm.py (why that version, and each pin: the file)
guidellm_pins="scripts/guidellm-no-torch.txt"
# AIBrix's GPU optimizer (tests/peers/test_aibrix_gpu_optimizer.py): its solver needs PuLP only
aibrix_wheels="aibrix==0.8.0 pulp==2.8.0"
# setup.py compiles the simulator's hot modules with mypyc (and builds the C page scan): a change to
# them must rebuild too.
# (the list of compiled modules is _source_first.py's; an interpreter that cannot run gives none,
# and ensure_prereqs below says why)
hot="$("$py" -c 'import runpy; m = runpy.run_path("src/llmscale/_source_first.py"); print(" ".join(m["hot_module_paths"]() + sorted(m["NATIVE_SOURCES"].values())))' 2>/dev/null || true)"
# shellcheck disable=SC2086  # the list is space-separated paths without blanks
want="$(cat pyproject.toml setup.py src/llmscale/_source_first.py "$guidellm_pins" $hot | sha256sum | cut -d' ' -f1)-${LLMSCALE_PURE_PYTHON:-0}-${dynamo_wheel}-${aibrix_wheels}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # Only when something must be built: python3-venv, gcc, python3-dev (installed with apt-get as root
  # or through sudo, else each one named with the command that installs it).
  ensure_prereqs "$py" || exit 1
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
  fi
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
    # guidellm's declared dependencies would bring torch (see the file); its imports need only these.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r "$guidellm_pins" >&2
    # AIBrix's released package, whose GPU optimizer tests/peers runs beside llmscale's port. Its
    # declared dependencies pin httpx, kubernetes and prometheus-client below llmscale's; the
    # optimizer's solver needs PuLP (and its bundled CBC) alone.
    # shellcheck disable=SC2086  # two requirement specifiers, no blanks inside either
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $aibrix_wheels >&2
  fi
  echo "$want" > "$stamp"
fi
