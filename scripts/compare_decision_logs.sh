#!/bin/bash
# Compare the backtest's decision logs of two source trees, byte for byte.
# Environment: PYTHON (default .venv/bin/python), TRACE (the Azure conversation trace).
#
#   scripts/compare_decision_logs.sh <base-commit> [<out-dir>]
#
# Writes the decision logs of the `default` preset (every policy, first 15 minutes) and of the
# Azure conversation trace x20 (every policy, first 5 minutes; ../shared/data) with the sources of
# <base-commit> and with this working tree's, then diffs them (about 5 minutes on 2 cores, pure
# Python). A refactor of the controller loop must print "identical" for both; an intended change
# lists its differences in the commit that makes it.
set -euo pipefail
BASE=$1
OUT=${2:-/tmp/decision-logs}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
# the shared data sit beside the main checkout (../shared/data); give TRACE from a worktree elsewhere
TRACE=${TRACE:-$ROOT/../shared/data/traces/azure_llm_2023_conv.csv}
[ -f "$TRACE" ] || { echo "no Azure conversation trace at $TRACE (set TRACE)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT/base-src" "$OUT/base" "$OUT/new"
git -C "$ROOT" archive "$BASE" src | tar -x -C "$OUT/base-src"

logs() {  # <src-dir> <out-dir>
  (cd "$2" && export PYTHONPATH=$1 LLMSCALE_PURE_PYTHON=1 &&
   "$PY" -m llmscale.cli backtest --workload default --policy all --duration-s 900 --no-oracle --jobs 1 \
      --decisions default.jsonl --report default.html > default.out 2>&1 &&
   "$PY" -m llmscale.cli backtest --trace "$TRACE" --rate-scale 20 --duration-s 300 --policy all \
      --no-oracle --jobs 1 --decisions azure20.jsonl --report azure20.html > azure20.out 2>&1)
}
logs "$OUT/base-src/src" "$OUT/base"
logs "$ROOT/src" "$OUT/new"
status=0
for f in default.jsonl azure20.jsonl; do
  if cmp -s "$OUT/base/$f" "$OUT/new/$f"; then
    echo "$f: identical ($(wc -l < "$OUT/base/$f") lines)"
  else
    echo "$f: DIFFERS"; diff "$OUT/base/$f" "$OUT/new/$f" | head -20; status=1
  fi
done
exit $status
