#!/usr/bin/env bash
# Regenerate the Python modules of KEDA's external scaler protocol from
# src/llmscale/cluster/keda/externalscaler.proto with grpc_tools.protoc.
#
#   scripts/gen_proto.sh            # rewrite the committed modules in place
#   scripts/gen_proto.sh OUT_DIR    # write them to OUT_DIR instead (tests/keda compares the two)
#
# PYTHON selects the interpreter that has grpcio-tools (default: the checkout's .venv, else python3).
# protoc writes `import externalscaler_pb2` in the _grpc module, an absolute import that only works
# with the keda directory on sys.path; it is rewritten to a relative import so the modules work
# inside the llmscale.cluster.keda package.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
proto_dir="$repo/src/llmscale/cluster/keda"
out_dir="${1:-$proto_dir}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi

mkdir -p "$out_dir"
# -I is the proto's own directory so the descriptor is registered as "externalscaler.proto",
# the file name KEDA uses.
(cd "$proto_dir" && "$PYTHON" -m grpc_tools.protoc -I. \
    --python_out="$out_dir" --pyi_out="$out_dir" --grpc_python_out="$out_dir" \
    externalscaler.proto)

grpc_mod="$out_dir/externalscaler_pb2_grpc.py"
sed -i 's/^import externalscaler_pb2 as externalscaler__pb2$/from . import externalscaler_pb2 as externalscaler__pb2/' "$grpc_mod"
grep -q '^from \. import externalscaler_pb2 as externalscaler__pb2$' "$grpc_mod" || {
    echo "gen_proto.sh: the import in $grpc_mod was not rewritten; has protoc's output changed?" >&2
    exit 1
}
