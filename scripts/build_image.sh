#!/usr/bin/env bash
# Build the llmscale container image from ./Containerfile with Debian's buildah, no Docker engine
# and no image registry needed, and print its name.
#
#   scripts/build_image.sh                 build (or find already built) and print the image name
#   scripts/build_image.sh --push REF      then push it, e.g. docker://registry.example/llmscale:0.1.0
#
# Steps, each done once and kept:
#   1. buildah and mmdebstrap from Debian's packages (root: apt-get);
#   2. two Debian 12 bases made with mmdebstrap and imported into buildah's storage:
#      localhost/llmscale-base:bookworm (python3) and localhost/llmscale-builder:bookworm
#      (python3, venv, headers and gcc for the mypyc build);
#   3. the wheels llmscale needs, downloaded by the host's pip (its index settings and
#      certificates apply) into $LLMSCALE_CACHE/image-wheels/<hash of pyproject.toml>;
#   4. the image, tagged localhost/llmscale:build-<hash of the build context> and with the name
#      the manifests use (ghcr.io/llmscale/llmscale:<version>): a context already built is not
#      built again.
# Storage is buildah's vfs driver and builds use chroot isolation, the two that work without
# a container runtime's kernel features (measured in the recipes of this machine kind).
#
# Environment: LLMSCALE_CACHE (default $HOME/.cache/llmscale), PYTHON (the pip used to download
# wheels; default .venv/bin/python).
set -euo pipefail

log() { printf '[build_image] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
push_ref=""
if [[ "${1:-}" == "--push" ]]; then
    [[ -n "${2:-}" ]] || die "--push needs a destination, e.g. docker://registry.example/llmscale:0.1.0"
    push_ref="$2"
elif [[ -n "${1:-}" ]]; then
    die "unknown argument $1 (usage: scripts/build_image.sh [--push REF])"
fi

[[ "$(id -u)" == 0 ]] || die "buildah's vfs storage and chroot builds need root (run as root or with sudo)"
CACHE_ROOT="${LLMSCALE_CACHE:-$HOME/.cache/llmscale}"
PY="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$PY" ]] || die "no Python with pip at $PY: run scripts/bootstrap.sh first, or set PYTHON"
export STORAGE_DRIVER=vfs
BUILDAH=(buildah --storage-driver vfs)

# 1. Tools.
missing=()
for p in buildah mmdebstrap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]} (Debian packages)"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

have_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# 2. Bases.
make_base() {
    local name="$1" include="$2" tmp ctr
    if have_image "$name"; then
        return
    fi
    log "making $name with mmdebstrap (packages: $include; about a minute)"
    tmp="$(mktemp -d)"
    if ! mmdebstrap --quiet --variant=minbase --include="$include" bookworm "$tmp/rootfs.tar" >&2; then
        rm -rf "$tmp"
        die "mmdebstrap failed for $name (are Debian's package mirrors reachable?)"
    fi
    ctr="$("${BUILDAH[@]}" from scratch)"
    "${BUILDAH[@]}" add "$ctr" "$tmp/rootfs.tar" / >&2
    "${BUILDAH[@]}" commit --quiet "$ctr" "$name" >/dev/null
    "${BUILDAH[@]}" rm "$ctr" >/dev/null
    rm -rf "$tmp"
}
make_base localhost/llmscale-base:bookworm python3,ca-certificates
make_base localhost/llmscale-builder:bookworm python3,python3-venv,python3-dev,gcc,libc6-dev

# 3. Wheels: the build system's and the runtime's requirements, as pyproject.toml states them.
reqs="$("$PY" - <<'PY'
import tomllib
doc = tomllib.load(open("pyproject.toml", "rb"))
print("\n".join(doc["build-system"]["requires"] + doc["project"]["dependencies"]))
PY
)"
wheels="$CACHE_ROOT/image-wheels/$(sha256sum pyproject.toml | cut -c1-16)"
if [[ ! -f "$wheels/.complete" ]]; then
    log "downloading wheels into $wheels"
    rm -rf "$wheels"
    mkdir -p "$wheels"
    printf '%s\n' "$reqs" > "$wheels/requirements.txt"
    "$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --dest "$wheels" -r "$wheels/requirements.txt" >&2 \
        || die "pip download failed (the package index unreachable, or a requirement without a wheel)"
    touch "$wheels/.complete"
fi

# 4. The context: the sources as committed or edited, no virtual environment, caches or builds.
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/wheels"
cp Containerfile pyproject.toml setup.py README.md "$ctx/"
tar -C "$root" --exclude='__pycache__' --exclude='*.so' --exclude='*.pyc' -cf - src | tar -C "$ctx" -xf -
cp "$wheels"/*.whl "$ctx/wheels/"
hash="$(cd "$ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
version="$("$PY" -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open("src/llmscale/__init__.py").read()).group(1))')"
name="localhost/llmscale:build-$hash"
if have_image "$name"; then
    log "$name already built from this context"
else
    log "building $name (the simulator is compiled with mypyc: a few minutes)"
    "${BUILDAH[@]}" bud --quiet --pull=never --isolation chroot --file "$ctx/Containerfile" --tag "$name" "$ctx" >&2 \
        || die "buildah bud failed"
fi
"${BUILDAH[@]}" tag "$name" "ghcr.io/llmscale/llmscale:$version" "localhost/llmscale:latest" >/dev/null
# Images of older contexts go: vfs storage keeps a full copy (~1 GB) of each. (awk, not grep:
# a grep that matches nothing exits 1, which pipefail turns into a failed build when this is the
# only image.)
"${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' 2>/dev/null \
    | awk -v keep="$name" 'index($0, "localhost/llmscale:build-") == 1 && $0 != keep' \
    | while read -r old; do "${BUILDAH[@]}" rmi "$old" >/dev/null 2>&1 || true; done
if [[ -n "$push_ref" ]]; then
    log "pushing $name to $push_ref"
    "${BUILDAH[@]}" push "$name" "$push_ref" >&2
fi
echo "$name"
