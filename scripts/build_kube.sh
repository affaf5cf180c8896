#!/usr/bin/env bash
# Build kube-apiserver and kube-controller-manager v1.20.2 from Debian's
# `kubernetes` source package and cache the two binaries outside the checkout.
#
# Why from source: no registry reachable from CI ships these binaries and no
# container engine is available, so this is the only way to run a real API
# server in tests. The build takes minutes, hence the cache: a second run
# returns at once.
#
# Environment:
#   LLMSCALE_CACHE   cache root (default: $HOME/.cache/llmscale)
#   KUBE_BUILD_DIR   scratch parent dir (default: a mktemp dir under /tmp)
set -euo pipefail

log() { printf '[build_kube] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

KUBE_VERSION=v1.20.2
CACHE_ROOT="${LLMSCALE_CACHE:-$HOME/.cache/llmscale}"
DEST="$CACHE_ROOT/kube-$KUBE_VERSION"
BINARIES=(kube-apiserver kube-controller-manager)

have_all() {
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "$DEST/$b" ]] || return 1
    done
}

if have_all; then
    log "cached binaries present in $DEST; nothing to do"
    exit 0
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || die "need root or sudo to install build dependencies"
    SUDO=(sudo)
fi

# 1. Build dependencies (Debian packages), installed only when missing.
PKGS=(golang-go golang-github-modern-go-reflect2-dev rsync etcd-server openssl make ca-certificates)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing missing packages: ${missing[*]}"
    "${SUDO[@]}" apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

SCRATCH_PARENT="${KUBE_BUILD_DIR:-/tmp}"
mkdir -p "$SCRATCH_PARENT"
SCRATCH="$(mktemp -d "$SCRATCH_PARENT/llmscale-kube-build.XXXXXX")"
# The scratch tree is ~2 GB; never leave it behind, success or failure.
trap 'log "removing scratch dir $SCRATCH"; chmod -R u+w "$SCRATCH" 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT

# 2. Fetch the source package through a private deb-src list so the system's
#    apt configuration and package cache stay untouched.
APTDIR="$SCRATCH/apt"
mkdir -p "$APTDIR/sources.d" "$APTDIR/lists/partial"
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    # Same mirrors and keyrings as the machine's binary entries, as deb-src.
    sed -e 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        > "$APTDIR/sources.d/src.sources"
else
    cat > "$APTDIR/sources.d/src.sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
APT_OPTS=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$APTDIR/sources.d"
    -o "Dir::State::Lists=$APTDIR/lists"
    -o "Dir::Cache::pkgcache="
    -o "Dir::Cache::srcpkgcache="
)
log "fetching deb-src indexes"
apt-get "${APT_OPTS[@]}" update -q >&2 || die "apt-get update with the private deb-src list failed"
mkdir -p "$SCRATCH/src"
log "downloading the kubernetes source package (~34 MB)"
(cd "$SCRATCH/src" && apt-get "${APT_OPTS[@]}" source --download-only kubernetes >&2) \
    || die "apt-get source kubernetes failed"

ORIG="$(ls "$SCRATCH"/src/kubernetes_*.orig.tar.gz 2>/dev/null | head -n1 || true)"
[[ -n "$ORIG" ]] || die "no kubernetes_*.orig.tar.gz in the downloaded source package"
log "unpacking $(basename "$ORIG")"
mkdir -p "$SCRATCH/tree"
tar -xzf "$ORIG" -C "$SCRATCH/tree"
TREE="$(find "$SCRATCH/tree" -mindepth 1 -maxdepth 2 -name Makefile -printf '%h\n' | head -n1)"
[[ -n "$TREE" && -d "$TREE/vendor" ]] || die "unpacked tree has no Makefile/vendor directory"

# 3. The vendored reflect2 1.0.1 breaks at run time on Go >= 1.18; Debian's
#    packaged copy is fixed. Vendored packages must not carry a go.mod.
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -d "$REFLECT2_SRC" ]] || die "$REFLECT2_SRC missing (golang-github-modern-go-reflect2-dev)"
log "replacing vendor/github.com/modern-go/reflect2 with Debian's copy"
rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
cp -r "$REFLECT2_SRC" "$TREE/vendor/github.com/modern-go/reflect2"
rm -f "$TREE/vendor/github.com/modern-go/reflect2/go.mod"

# 4. Build. `make` runs the code generators that a plain `go build` skips.
#    HOME points into scratch so Go's module/build caches go away with it.
log "building ${BINARIES[*]} (several minutes)"
start=$(date +%s)
(
    cd "$TREE"
    CGO_ENABLED=0 GOFLAGS= HOME="$SCRATCH/home" GOCACHE="$SCRATCH/gocache" \
        make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >&2
) || die "make failed (see output above)"
log "build took $(( $(date +%s) - start )) s"

# 5. Cache: copy to a temp name then rename so a half-copied binary is never
#    mistaken for a finished one.
mkdir -p "$DEST"
for b in "${BINARIES[@]}"; do
    built="$(find "$TREE/_output" -type f -name "$b" -perm -u+x | head -n1 || true)"
    [[ -n "$built" ]] || die "built binary $b not found under _output"
    cp "$built" "$DEST/.$b.tmp"
    chmod 0755 "$DEST/.$b.tmp"
    mv -f "$DEST/.$b.tmp" "$DEST/$b"
done
have_all || die "binaries missing from $DEST after copy"
"$DEST/kube-apiserver" --version >&2 || die "built kube-apiserver does not run"
log "done: $DEST"
