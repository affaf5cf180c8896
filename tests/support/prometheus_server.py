"""A real Prometheus (Debian's ``/usr/bin/prometheus``) for tests: temp config and TSDB, 127.0.0.1 only.

Use the ``prometheus_server`` fixture factory (import it into a conftest)::

    def test_x(prometheus_server):
        prom = prometheus_server(static_targets=[TargetGroup(["127.0.0.1:8000"], {"pod": "a"})])
        prom.wait_for("up", lambda r: len(r) == 1)

Targets come from ``static_configs``, a ``file_sd`` file the test rewrites
(:meth:`PrometheusServer.write_file_sd`), or an ``http_sd`` URL. A target
group's labels may set ``__metrics_path__``, so one test HTTP server can serve
many replicas' pages. :meth:`stop` sends SIGTERM to the process group, waits,
then kills it; :meth:`restart` keeps the port and the TSDB (for outage tests).
Skips with a clear reason only when the binary is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = ["PrometheusServer", "TargetGroup", "free_port", "prometheus_binary", "prometheus_server"]


def prometheus_binary() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None
    )


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the kernel's pick; a small race with other processes remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class TargetGroup:
    """One static or file_sd target group: ``host:port`` addresses and the labels they share."""

    targets: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"targets": list(self.targets), "labels": dict(self.labels)}


class PrometheusServer:
    """One Prometheus process; :meth:`start` waits until ``/-/ready`` answers 200."""

    def __init__(
        self,
        workdir: Path,
        *,
        scrape_interval_s: float = 1.0,
        static_targets: Sequence[TargetGroup] = (),
        file_sd: bool = False,
        http_sd_url: str | None = None,
        http_sd_token: str | None = None,
        job: str = "llm",
        honor_labels: bool = True,
        extra_args: Sequence[str] = (),
    ) -> None:
        binary = prometheus_binary()
        if binary is None:
            pytest.skip("prometheus not installed: run scripts/install_prometheus.sh (Debian package)")
        self.binary = binary
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tsdb = workdir / "tsdb"
        self.config_path = workdir / "prometheus.yml"
        self.file_sd_path = workdir / "targets.json"
        self.log_path = workdir / "prometheus.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        interval = f"{max(1, round(scrape_interval_s * 1000))}ms"
        job_cfg: dict[str, Any] = {
            "job_name": job,
            "scrape_interval": interval,
            # Prometheus refuses a scrape time-out longer than the interval (its default is 10 s).
            "scrape_timeout": interval,
            "honor_labels": honor_labels,
        }
        if static_targets:
            job_cfg["static_configs"] = [g.as_json() for g in static_targets]
        if file_sd:
            self.write_file_sd([])
            job_cfg["file_sd_configs"] = [{"files": [str(self.file_sd_path)], "refresh_interval": "1s"}]
        if http_sd_url is not None:
            sd: dict[str, Any] = {"url": http_sd_url, "refresh_interval": "1s"}
            if http_sd_token is not None:  # sent as "Authorization: Bearer <token>"
                sd["authorization"] = {"type": "Bearer", "credentials": http_sd_token}
            job_cfg["http_sd_configs"] = [sd]
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [job_cfg],
        }
        # JSON is YAML: no YAML writer needed.
        self.config_path.write_text(json.dumps(config, indent=2))

    def write_file_sd(self, groups: Sequence[TargetGroup]) -> None:
        """Replace the file_sd targets atomically (Prometheus may read the file at any moment)."""
        tmp = self.file_sd_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([g.as_json() for g in groups]))
        os.replace(tmp, self.file_sd_path)

    def start(self, timeout_s: float = 30.0) -> None:
        if self.proc is not None:
            raise RuntimeError("already running")
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child writes it until stop)
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self.tsdb}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.enable-lifecycle",
                    "--log.level=warn",
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() signals the whole group
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.proc = None
                raise RuntimeError(f"prometheus exited at start-up:\n{tail}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready within {timeout_s} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout_s)

    def restart(self, timeout_s: float = 30.0) -> None:
        """Stop, then start again on the same port with the same TSDB."""
        self.stop()
        self.start(timeout_s)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (raises on any error: a test helper)."""
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5.0)
        resp.raise_for_status()
        doc = resp.json()
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def wait_for(
        self, expr: str, ready: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 20.0
    ) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``ready(result)``; fails the test with the last result on time-out."""
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if ready(result):
                return result
            time.sleep(0.2)
        pytest.fail(f"{expr!r} not ready within {timeout_s} s; last result {result}\n{self.log_tail()}")


@pytest.fixture
def prometheus_server() -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: ``prometheus_server(**kwargs of PrometheusServer)`` -> a started server, stopped after."""
    servers: list[PrometheusServer] = []
    root = Path(tempfile.mkdtemp(prefix="llmscale-prom-"))

    def make(**kwargs: Any) -> PrometheusServer:
        server = PrometheusServer(root / f"prom{len(servers)}", **kwargs)
        servers.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(root, ignore_errors=True)
