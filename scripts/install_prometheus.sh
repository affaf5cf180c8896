#!/usr/bin/env bash
# Install Debian's Prometheus and Alertmanager for the tests that start real servers
# (tests/metrics, tests/deploy, the live controller's end-to-end tests).
#
# Idempotent: a fast no-op when prometheus, promtool, amtool and prometheus-alertmanager are all
# on PATH. Talks only to the Debian package mirrors through apt-get. Needs root or sudo.
# Debian's packages start no service here; the tests start their own on 127.0.0.1.
set -euo pipefail

tools=(prometheus promtool amtool prometheus-alertmanager)

missing=()
for t in "${tools[@]}"; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install_prometheus: already present ($(prometheus --version 2>&1 | head -n 1))"
    exit 0
fi

die() {
    echo "install_prometheus: ERROR: $*" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 \
    || die "apt-get not found; install ${missing[*]} by hand (Debian packages: prometheus prometheus-alertmanager)"

SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "must run as root (or have sudo) to install ${missing[*]}"
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive

# A fresh container has empty package lists: refresh them only then, so re-runs stay quick.
candidate="$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')"
if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
    echo "install_prometheus: running apt-get update"
    $SUDO apt-get update -q || die "apt-get update failed (no access to the Debian package mirrors?)"
fi

echo "install_prometheus: installing prometheus prometheus-alertmanager (missing: ${missing[*]})"
$SUDO apt-get install -y -q --no-install-recommends prometheus prometheus-alertmanager \
    || die "apt-get install prometheus prometheus-alertmanager failed"

for t in "${tools[@]}"; do
    command -v "$t" >/dev/null 2>&1 || die "packages installed but $t is not on PATH"
done
echo "install_prometheus: installed $(prometheus --version 2>&1 | head -n 1)"
