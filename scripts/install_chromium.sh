#!/usr/bin/env bash
# Install Debian's Chromium for the headless report-rendering tests (tests/report, marker `browser`).
#
# Idempotent: does nothing when /usr/bin/chromium already exists. Only talks to the Debian package
# mirrors through apt-get (no browser downloads of its own). Must run as root (or via sudo).
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [[ -x "$CHROMIUM" ]]; then
    echo "install_chromium: $CHROMIUM already present ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

die() {
    echo "install_chromium: ERROR: $*" >&2
    exit 1
}

command -v apt-get >/dev/null 2>&1 || die "apt-get not found; this script supports Debian/Ubuntu only (need the 'chromium' package)"

SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "must run as root (or have sudo) to apt-get install chromium"
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive

# Refresh the package lists only when apt doesn't know a chromium candidate yet (fresh containers
# ship with empty lists); skipping it otherwise keeps re-runs fast.
candidate="$(apt-cache policy chromium 2>/dev/null | awk '/Candidate:/ {print $2}')"
if [[ -z "$candidate" || "$candidate" == "(none)" ]]; then
    echo "install_chromium: running apt-get update"
    $SUDO apt-get update -q || die "apt-get update failed (no access to the Debian package mirrors?)"
fi

echo "install_chromium: installing chromium"
$SUDO apt-get install -y -q --no-install-recommends chromium \
    || die "apt-get install chromium failed"

[[ -x "$CHROMIUM" ]] || die "chromium package installed but $CHROMIUM is missing"
echo "install_chromium: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
