"""Make the docs' pictures: the `llmscale tune` trials page and the `llmscale analyze` page,
each rendered by headless Chromium (Debian's, offline) and saved as a PNG under docs/images/.

    .venv/bin/python scripts/readme_pictures.py [--chromium /usr/bin/chromium]

What it runs (a few minutes on 2 cores; the commands are the docs' own):
  llmscale tune --workload flash-crowd --duration-s 900 --rate-scale 0.1 --trials 24 ...
  llmscale backtest --policy knative-kpa --duration-s 1800 --decisions d.jsonl --no-oracle
  llmscale analyze d.jsonl --policy knative-kpa --report analyze.html
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "images"


def _llmscale(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "llmscale.cli", *args], check=True, timeout=1800)


def _screenshot(chromium: str, page: Path, png: Path, size: str, profile: Path) -> None:
    """Headless Chromium in its own session, so that exactly its processes are ended."""
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        f"--window-size={size}",
        f"--screenshot={png}",
        page.as_uri(),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        proc.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode != 0 or not png.is_file():
        raise SystemExit(f"chromium failed on {page} (exit {proc.returncode})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--only", choices=("tune", "analyze"), help="make one picture")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.only in (None, "tune"):
            _llmscale(
                # the flash crowd: the defaults miss the target there, so the page shows both kinds
                "tune", "--workload", "flash-crowd", "--duration-s", "900", "--rate-scale", "0.1",
                "--trials", "24", "--jobs", "2", "--out", str(tmp / "tuned.yaml"),
            )  # fmt: skip
            page = tmp / "tuned-trials.html"
            _screenshot(args.chromium, page, OUT / "tune-trials.png", "1280,2300", tmp / "p1")
        if args.only in (None, "analyze"):
            _llmscale(
                "backtest", "--policy", "knative-kpa", "--duration-s", "1800", "--no-oracle",
                "--decisions", str(tmp / "d.jsonl"), "--json", str(tmp / "b.json"),
            )  # fmt: skip
            log, page = str(tmp / "d.jsonl"), tmp / "analyze.html"
            _llmscale("analyze", log, "--policy", "knative-kpa", "--report", str(page))
            _screenshot(args.chromium, page, OUT / "analyze.png", "1280,2600", tmp / "p2")
    for png in ("tune-trials.png", "analyze.png"):
        print(f"{OUT / png}: {(OUT / png).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
