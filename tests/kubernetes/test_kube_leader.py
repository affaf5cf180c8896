"""Leader election on the real kube-apiserver: two controllers, one actor (cluster/leader.py).

The elector tests run two LeaseElectors in this process (one of them behind a FaultProxy that
can cut it off) and sample both every 10 ms: never may both say they lead. The `run` test starts
two `llmscale run` processes against one Deployment, kills the leader with SIGKILL and checks the
standby's takeover, its respect of the saved cooldown, and that only leaders ever scaled, each
in its own term, against the Deployment's own history (a watch of its spec generations).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kube_workloads import create_deployment
from kubernetes import client, watch

from llmscale.cluster.leader import LeaseElector, LeaseSettings
from support.fault_proxy import FaultProxy
from support.kube_cluster import ADMIN_TOKEN
from support.wait import wait_for

LLMSCALE = Path(sys.executable).with_name("llmscale")

# Short times so a failover takes seconds; the ratios are client-go's defaults (15 / 10 / 2 s).
LEASE_S, RENEW_S, RETRY_S = 3.0, 2.0, 0.3


def _settings(namespace: str, identity: str) -> LeaseSettings:
    return LeaseSettings(
        namespace=namespace,
        name="llmscale-leader-vllm",
        identity=identity,
        lease_duration_s=LEASE_S,
        renew_deadline_s=RENEW_S,
        retry_period_s=RETRY_S,
        request_timeout_s=1.0,
    )


class _Sampler:
    """Samples ``is_leader`` of each elector every 10 ms in a thread; remembers any overlap."""

    def __init__(self, electors: dict[str, LeaseElector]) -> None:
        self.electors = electors
        self.overlaps: list[float] = []
        self.first_leading: dict[str, float] = {}
        self.last_leading: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            now = time.monotonic()
            leading = [name for name, e in self.electors.items() if e.is_leader()]
            for name in leading:
                self.first_leading.setdefault(name, now)
                self.last_leading[name] = now
            if len(leading) > 1:
                self.overlaps.append(now)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_cut_off_leader_fences_itself_before_the_standby_takes_over(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    with FaultProxy(kube_cluster.host, kube_cluster.ca_file) as proxy:
        a = LeaseElector(
            kube_cluster.token_client(ADMIN_TOKEN, host=proxy.url), _settings(kube_namespace, "a")
        )
        b = LeaseElector(admin, _settings(kube_namespace, "b"))
        a.start()
        b.start()
        try:
            with _Sampler({"a": a, "b": b}) as sampler:
                assert a.is_leader() and not b.is_leader()
                assert a.term == 0
                # b stays a standby while a renews: several lease durations' worth of retries.
                wait_for("b to retry a few times", lambda: b.errors == 0 and proxy.forwarded > 12, 20.0)
                assert not b.is_leader()
                cut_s = time.monotonic()
                proxy.fail_always = True  # a can no longer reach the API server
                wait_for("a to stop leading", lambda: not a.is_leader(), RENEW_S + 2.0)
                a_stopped_s = time.monotonic() - cut_s
                wait_for("b to take over", b.is_leader, LEASE_S + RENEW_S + 2.0)
                b_took_s = time.monotonic() - cut_s
            assert sampler.overlaps == [], "both electors led at once"
            # a renewed at most one retry before the cut, so it stops within the renew deadline of it.
            assert a_stopped_s <= RENEW_S + 0.5, a_stopped_s
            # b needs the lease unchanged for LEASE_S from when it saw the last renewal.
            assert b_took_s >= LEASE_S - RETRY_S - 0.2, b_took_s
            assert b.term == 1
            lease = client.CoordinationV1Api(admin).read_namespaced_lease(
                "llmscale-leader-vllm", kube_namespace
            )
            assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
            # Healed, a must not take the lease back from a live leader.
            proxy.fail_always = False
            wait_for("a to read the lease again", lambda: a.try_once() is False, 5.0)
            assert b.is_leader() and not a.is_leader()
        finally:
            a.stop()
            b.stop()


def test_a_clean_stop_releases_the_lease_for_the_standby(kube_cluster, kube_namespace):
    admin = kube_cluster.admin_client()
    a = LeaseElector(admin, _settings(kube_namespace, "a"))
    b = LeaseElector(admin, _settings(kube_namespace, "b"))
    a.start()
    b.start()
    try:
        assert a.is_leader() and not b.is_leader()
        a.stop()
        t0 = time.monotonic()
        wait_for("b to take the released lease", b.is_leader, LEASE_S)
        # A released lease is free at the standby's next retry, not after a lease duration.
        assert time.monotonic() - t0 < LEASE_S - RETRY_S, time.monotonic() - t0
    finally:
        a.stop()
        b.stop()


# -- two `llmscale run` processes -------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, kubeconfig: Path, namespace: str, identity: str, cooldown_up_s: float) -> Path:
    doc = {
        "target": {"namespace": namespace, "name": "vllm", "selector": {"app": "vllm"}},
        # A closed port: every replica is unknown, which holds scale-downs only; the static
        # policy's scale-up goes through (see test_kube_run_cli.py).
        "metrics": {
            "source": "scrape",
            "scrape": {
                "static_targets": [{"name": "nowhere", "url": f"http://127.0.0.1:{_closed_port()}/metrics"}],
                "timeout_s": 0.3,
            },
        },
        "policy": {"name": "static", "params": {"replicas": 3}},
        "guards": {"min_replicas": 1, "max_replicas": 5, "cooldown_up_s": cooldown_up_s},
        "tick_s": 0.5,
        "mode": "apply",
        "actuator": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}},
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / f"decisions-{identity}.jsonl")},
        "state": {"store": "configmap"},
        "leader_election": {
            "enabled": True,
            "identity": identity,
            "lease_duration_s": LEASE_S,
            "renew_deadline_s": RENEW_S,
            "retry_period_s": RETRY_S,
        },
    }
    path = tmp_path / f"llmscale-{identity}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _start(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(LLMSCALE), "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    # The last line may be half-written by a process killed mid-write.
    return [json.loads(line) for line in lines if line.endswith("}")]


class _ScaleHistory:
    """Every spec change of the Deployment, from a watch: (resourceVersion, generation, replicas).

    A Deployment's ``metadata.generation`` grows by one with every change of its spec, so the
    generations recorded are consecutive exactly when no change was missed; :meth:`check` holds
    them to that and to a fresh read of the Deployment at the end.

    The API server ends each stream after ``timeoutSeconds``; the next one resumes from the last
    resourceVersion the client saw, bookmarks included (sent shortly before each stream's end), so
    the version it resumes from is never older than that stream. Should the server still answer
    410 Gone, a fresh list restarts the watch, and a change lost in between shows as a gap.
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.apps = client.AppsV1Api(api)
        self.namespace = namespace
        self.changes: list[tuple[int, int, int]] = []
        self.streams = 0
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _see(self, dep: client.V1Deployment) -> None:
        generation = dep.metadata.generation
        if not self.changes or generation != self.changes[-1][1]:
            self.changes.append((int(dep.metadata.resource_version), generation, dep.spec.replicas))

    def _relist(self) -> str:
        deps = self.apps.list_namespaced_deployment(self.namespace, field_selector="metadata.name=vllm")
        for dep in deps.items:
            self._see(dep)
        return str(deps.metadata.resource_version)

    def _run(self) -> None:
        try:
            version = self._relist()
            while not self._stopped.is_set():
                self.streams += 1
                try:
                    for event in self._watch.stream(
                        self.apps.list_namespaced_deployment,
                        self.namespace,
                        field_selector="metadata.name=vllm",
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=30,
                    ):
                        if event["type"] != "BOOKMARK":
                            self._see(event["object"])
                except client.ApiException as e:
                    if e.status != 410:
                        raise
                    self._watch.resource_version = self._relist()
                version = self._watch.resource_version or version
        except Exception as e:  # a stopped watch may end its stream mid-chunk; a live one must not
            if not self._stopped.is_set():
                self.error = e

    def replicas(self) -> list[int]:
        return [n for _, _, n in self.changes]

    def describe(self) -> str:
        return (
            f"changes {self.changes}, watch error {self.error!r}, alive {self._thread.is_alive()}, "
            f"{self.streams} stream(s)"
        )

    def check(self) -> None:
        """No change missed: consecutive generations, the last one the Deployment's own now."""
        assert self.error is None, self.describe()
        generations = [g for _, g, _ in self.changes]
        assert generations == list(range(generations[0], generations[0] + len(generations))), self.describe()
        versions = [v for v, _, _ in self.changes]
        assert versions == sorted(versions), self.describe()
        dep = self.apps.read_namespaced_deployment("vllm", self.namespace)
        assert (dep.metadata.generation, dep.spec.replicas) == self.changes[-1][1:], self.describe()

    def __enter__(self) -> _ScaleHistory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._watch.stop()


def test_two_run_processes_one_actor_and_a_failover_that_keeps_the_cooldown(
    kube_cluster, kube_namespace, tmp_path
):
    admin = kube_cluster.admin_client()
    apps = client.AppsV1Api(admin)
    create_deployment(admin, kube_namespace, "vllm", replicas=3, pending=600.0)
    kubeconfig = kube_cluster.workdir / "kubeconfig"
    cooldown_up_s = 20.0
    log_a, log_b = tmp_path / "decisions-a.jsonl", tmp_path / "decisions-b.jsonl"
    procs: list[subprocess.Popen[str]] = []
    try:
        with _ScaleHistory(admin, kube_namespace) as history:
            wait_for("the watch to see the Deployment", lambda: history.changes, 10.0)
            # Both run before anything needs a scale, so b's state at start knows no cooldown:
            # only the saved state can tell it about the one a's scale-up below starts.
            a = _start(_config(tmp_path, kubeconfig, kube_namespace, "a", cooldown_up_s))
            procs.append(a)
            wait_for(
                "a to lead", lambda: any(r["leader"] for r in _records(log_a)) or a.poll() is not None, 60.0
            )
            assert a.poll() is None, a.communicate()[1][-3000:]
            b = _start(_config(tmp_path, kubeconfig, kube_namespace, "b", cooldown_up_s))
            procs.append(b)
            wait_for(
                "b to observe as a standby", lambda: len(_records(log_b)) >= 2 or b.poll() is not None, 60.0
            )
            assert b.poll() is None, b.communicate()[1][-3000:]
            apps.patch_namespaced_deployment_scale("vllm", kube_namespace, {"spec": {"replicas": 2}})
            wait_for(
                "a to scale back to 3",
                lambda: any(r["leader"] and r["applied"] and r["desired"] == 3 for r in _records(log_a)),
                30.0,
            )
            # That line is written ahead of the scale (decision_log.py): a kill right after it can
            # cut a's write off (seen on a loaded machine: the API server got half a PUT, "unexpected
            # EOF", and the Deployment stayed at 2). The failover starts once the scale has landed.
            wait_for(
                "a's scale to reach the Deployment",
                lambda: apps.read_namespaced_deployment_scale("vllm", kube_namespace).spec.replicas == 3,
                10.0,
                context=history.describe,
            )

            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
            killed_s = time.time()
            took = wait_for(
                "b to take over",
                lambda: next((r for r in _records(log_b) if r["leader"]), None),
                LEASE_S + 15.0,
            )
            # Someone shrinks the fleet once b leads: a new leader that forgot the cooldown a's
            # scale-up started would scale straight back to 3. (Shrunk earlier, b's standby state
            # would hold on its own as-if-applied clock and the test would prove nothing.)
            apps.patch_namespaced_deployment_scale("vllm", kube_namespace, {"spec": {"replicas": 2}})
            scaled = wait_for(
                "b to scale back to 3 once the cooldown is over",
                lambda: next((r for r in _records(log_b) if r["applied"]), None),
                cooldown_up_s + 30.0,
            )
            # the admin's 2 and b's 3 after a's: the last 3 alone was already there before b acted
            wait_for(
                "the watch to see b's scale",
                lambda: len(history.changes) >= 5 or history.error,
                10.0,
                context=lambda: (
                    f"{history.describe()}; b's applied {[r for r in _records(log_b) if r['applied']]}"
                ),
            )
        b.send_signal(signal.SIGTERM)
        _, err_b = b.communicate(timeout=30)
        assert b.returncode == 0, err_b[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    recs_a, recs_b = _records(log_a), _records(log_b)
    applied_a = [r for r in recs_a if r["applied"]]
    (a_scale,) = applied_a
    # b took over within a lease duration (plus its retry and a tick, and process scheduling).
    assert took["time_s"] - killed_s < LEASE_S + RETRY_S + 0.5 + 3.0, took["time_s"] - killed_s
    # The cooldown a started held b's scale-up, and b did hold while leading (a real test of it).
    assert scaled["time_s"] - a_scale["time_s"] >= cooldown_up_s
    before = [r for r in recs_b if r["leader"] and r["time_s"] < scaled["time_s"]]
    assert any(r["guard"] == "cooldown" and r["desired"] == 2 for r in before), before[-3:]
    assert not any(r["applied"] for r in before)
    # Only leaders act, each in its own term; a's leadership ended before b's began.
    for r in recs_a + recs_b:
        assert r["leader"] or not r["applied"], r
    assert {r["lease_term"] for r in recs_a if r["leader"]} == {a_scale["lease_term"]}
    terms_b = {r["lease_term"] for r in recs_b if r["leader"]}
    assert terms_b == {scaled["lease_term"]} and scaled["lease_term"] > a_scale["lease_term"]
    assert max(r["time_s"] for r in recs_a if r["leader"]) < took["time_s"]
    standby = [r for r in recs_b if not r["leader"]]
    assert standby and all(r["time_s"] < took["time_s"] for r in standby)
    # The Deployment's own history: the admin's 2, a's 3, the admin's 2, b's 3, nothing else,
    # and no change missed (consecutive generations, the last one what the server has now).
    history.check()
    assert history.replicas() == [3, 2, 3, 2, 3], history.describe()
