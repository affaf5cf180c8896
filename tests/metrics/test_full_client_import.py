"""The first fetch that needs aiohttp (a redirect, https, a compressed answer) imports it outside
its own time-out: importing is the controller's cost, not the target's.

A fresh scrape worker on a loaded machine once took over a second to import aiohttp inside the
first redirect's 2 s time-out, and reported that replica unknown. Here a child process (so this
process's own aiohttp is untouched) is given an import hook that makes ``import aiohttp`` take
1.5 s, and scrapes a same-host redirect with a 1 s time-out: the page must be read. A target that
never answers must still time out, one whole time-out after the import.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from metrics_pages import VLLM_NEW

SRC = Path(__file__).resolve().parents[2] / "src"

CHILD = r"""
import importlib.abc, json, sys, time

class SlowAiohttp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "aiohttp":
            time.sleep(1.5)  # a cold, loaded machine's import
        return None  # then the usual finders import it

sys.meta_path.insert(0, SlowAiohttp())
from llmscale.metrics.scrape import PodScrapeSource

targets = json.loads(sys.argv[1])
with PodScrapeSource(targets, timeout_s=1.0, follow_redirects="same-host") as src:
    t0 = time.monotonic()
    obs = src.observe(0.0)
    took = time.monotonic() - t0
print(json.dumps({"ok": {s.replica: s.ok for s in obs.replicas}, "errors": src.last_errors, "took_s": took}))
"""


def _scrape(targets: list[tuple[str, str]]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(targets)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_slow_aiohttp_import_does_not_time_out_the_first_redirect(page_server) -> None:
    page_server.set("/real", VLLM_NEW)
    page_server.set("/moved", status=302, headers={"Location": "/real"})
    got = _scrape([("moved", page_server.url("/moved"))])
    assert got["ok"] == {"moved": True}, got
    assert got["took_s"] >= 1.5  # the import did take its 1.5 s, beyond the 1 s time-out


def test_a_target_that_never_answers_still_times_out_after_the_import() -> None:
    """https goes to aiohttp at once; a listener that never completes the handshake times out one
    time-out after the import, not never and not within it."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        port = silent.getsockname()[1]
        got = _scrape([("silent", f"https://127.0.0.1:{port}/metrics")])
    finally:
        silent.close()
    assert got["ok"] == {"silent": False}, got
    assert "no answer within 1 s" in got["errors"]["silent"], got
    assert 2.4 <= got["took_s"] < 10.0, got  # 1.5 s of import, then the whole 1 s time-out
