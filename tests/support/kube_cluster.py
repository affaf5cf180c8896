"""A real, small Kubernetes control plane for tests: etcd + kube-apiserver + kube-controller-manager.

No kubelet or scheduler runs; :class:`FakeKubelet` stands in for both: it
registers a Node, binds Pending pods to it and patches their status through
Pending -> Running (not ready) -> Ready, and finishes graceful deletions, so
Deployments report ``readyReplicas`` and scale-downs complete.

Everything listens on 127.0.0.1 on ports free at start; state lives in one
temp dir. Each process runs in its own process group and is stopped with
SIGTERM then SIGKILL, kube-apiserver before etcd (an API server whose etcd is
gone can hang on SIGTERM).

Use the session fixture (import it into a conftest)::

    from support.kube_cluster import kube_cluster, kube_namespace

    def test_x(kube_cluster, kube_namespace):
        apps = kubernetes.client.AppsV1Api(kube_cluster.admin_client())

The binaries come from ``scripts/build_kube.sh`` (cached under
``${LLMSCALE_CACHE:-~/.cache/llmscale}/kube-v1.20.2``); without them the
fixture skips with that reason.

Per-pod timing: a pod (template) annotation ``fake-kubelet/pending-s``,
``fake-kubelet/loading-s`` (running, startup probe not passed),
``fake-kubelet/warmup-s`` (running, not ready) or ``fake-kubelet/drain-s``
(terminating) holds the pod in that state for so many seconds (default 0), so
lifecycle phases can be observed. ``fake-kubelet/max-bound: N`` plays a full GPU node
pool: at most N pods of the namespace carrying it are bound at once; the rest stay
unbound with PodScheduled=False, reason Unschedulable, as kube-scheduler leaves a pod
no node fits (the state the cluster autoscaler acts on), until a bound one is gone.
A test that runs a terminating pod's preStop for real sets
``FakeKubelet.on_terminate``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from support.certs import make_ca

__all__ = [
    "FRONT_PROXY_CN",
    "FakeKubelet",
    "KubeCluster",
    "kube_binaries",
    "kube_cluster",
    "kube_namespace",
    "make_client",
    "start_process",
]

KUBE_VERSION = "v1.20.2"
NODE_NAME = "fake-node"
ADMIN_TOKEN = "llmscale-test-admin-token"
FRONT_PROXY_CN = "front-proxy-client"
STARTUP_TIMEOUT_S = 90.0  # a busy 2-core machine: the API server alone is ~4 s when idle


def cache_dir() -> Path:
    root = os.environ.get("LLMSCALE_CACHE") or str(Path.home() / ".cache" / "llmscale")
    return Path(root) / f"kube-{KUBE_VERSION}"


def kube_binaries() -> tuple[Path, Path] | None:
    """(kube-apiserver, kube-controller-manager) from the build cache, or None."""
    d = cache_dir()
    paths = (d / "kube-apiserver", d / "kube-controller-manager")
    return paths if all(os.access(p, os.X_OK) for p in paths) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_client(host: str, token: str, ca_file: str | None) -> client.ApiClient:
    """An ApiClient that authenticates with a bearer token; TLS verified against ``ca_file``."""
    cfg = client.Configuration(host=host)
    cfg.api_key = {"BearerToken": token}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    if ca_file is not None:
        cfg.ssl_ca_cert = ca_file
    # No retries inside urllib3: the code under test owns its retry policy, and a test
    # of that policy must see every failure.
    cfg.retries = False
    return client.ApiClient(cfg)


class _Process:
    """One server process in its own process group, output to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n_bytes: int = 3000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n_bytes:].decode(errors="replace")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout_s)
        self._log.close()


def start_process(name: str, argv: list[str], log_path: Path) -> _Process:
    """A server process in its own process group (``.stop()`` ends it, ``.alive()``, ``.log_tail()``)."""
    return _Process(name, argv, log_path)


def _wait(what: str, check: Callable[[], bool], timeout_s: float, procs: list[_Process]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise RuntimeError(
                    f"{p.name} exited with {p.proc.returncode} while waiting for {what}:\n{p.log_tail()}"
                )
        try:
            if check():
                return
        except Exception:  # not up yet: connection refused, 5xx, ...
            pass
        time.sleep(0.2)
    tails = "\n".join(f"--- {p.name} ---\n{p.log_tail()}" for p in procs)
    raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")


def _annotation_s(pod: client.V1Pod, key: str, default: float) -> float:
    annotations = (pod.metadata.annotations if pod.metadata else None) or {}
    try:
        return float(annotations.get(f"fake-kubelet/{key}", default))
    except ValueError:
        return default


@dataclass
class _PodTrack:
    first_seen_s: float
    ip: str
    stage: str = ""  # last status written: pending, warmup, ready
    deleting_since_s: float | None = None


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubelet:
    """Node registration, scheduling and pod status, polled every ``interval_s``."""

    def __init__(self, api: client.ApiClient, *, interval_s: float = 0.1) -> None:
        self.core = client.CoreV1Api(api)
        self.interval_s = interval_s
        self._tracks: dict[str, _PodTrack] = {}
        self._next_ip = 2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)
        self.errors: list[str] = []
        #: a test's stand-in for a terminating pod's containers: called each tick while the pod
        #: terminates, True once they exited (preStop done, process stopped), None for a pod it
        #: does not run (the ``drain-s`` annotation then decides); must not block
        self.on_terminate: Callable[[client.V1Pod], bool | None] | None = None

    def start(self) -> None:
        node = client.V1Node(
            metadata=client.V1ObjectMeta(name=NODE_NAME, labels={"kubernetes.io/hostname": NODE_NAME})
        )
        with contextlib.suppress(ApiException):
            self.core.create_node(node)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick(time.monotonic())
            except Exception as e:  # keep serving: a test asserting on pods will show the effect
                self.errors.append(repr(e))
            self._stop.wait(self.interval_s)

    def _track(self, pod: client.V1Pod, now_s: float) -> _PodTrack:
        uid = pod.metadata.uid
        if uid not in self._tracks:
            self._tracks[uid] = _PodTrack(
                first_seen_s=now_s, ip=f"10.244.{self._next_ip // 250}.{self._next_ip % 250 + 2}"
            )
            self._next_ip += 1
        return self._tracks[uid]

    def _tick(self, now_s: float) -> None:
        pods = self.core.list_pod_for_all_namespaces(_request_timeout=5).items or []
        live = set()
        # Pods bound per namespace among those capped by fake-kubelet/max-bound (a full node pool).
        bound: dict[str, int] = {}
        for pod in pods:
            if pod.spec.node_name and _annotation_s(pod, "max-bound", -1.0) >= 0:
                bound[pod.metadata.namespace] = bound.get(pod.metadata.namespace, 0) + 1
        for pod in pods:
            live.add(pod.metadata.uid)
            track = self._track(pod, now_s)
            try:
                self._step(pod, track, now_s, bound)
            except ApiException as e:
                if e.status not in (404, 409):  # the pod went away or changed: next tick sees it
                    raise
        for uid in set(self._tracks) - live:
            del self._tracks[uid]

    def _step(self, pod: client.V1Pod, track: _PodTrack, now_s: float, bound: dict[str, int]) -> None:
        name, ns = pod.metadata.name, pod.metadata.namespace
        if pod.metadata.deletion_timestamp is not None:
            if track.deleting_since_s is None:
                track.deleting_since_s = now_s
            hook = self.on_terminate
            exited = hook(pod) if hook is not None else None
            if exited is None:
                exited = now_s - track.deleting_since_s >= _annotation_s(pod, "drain-s", 0.0)
            if exited:
                # What a kubelet does once the containers have exited.
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0, _request_timeout=5)
            return
        if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
            return
        if not pod.spec.node_name:
            cap = _annotation_s(pod, "max-bound", -1.0)
            if 0 <= cap <= bound.get(ns, 0):
                if track.stage != "unschedulable":
                    self.core.patch_namespaced_pod_status(
                        name,
                        ns,
                        self._unschedulable(),
                        _request_timeout=5,
                        _content_type="application/strategic-merge-patch+json",
                    )
                    track.stage = "unschedulable"
                return
            if cap >= 0:
                bound[ns] = bound.get(ns, 0) + 1
            binding = client.V1Binding(
                metadata=client.V1ObjectMeta(name=name),
                target=client.V1ObjectReference(api_version="v1", kind="Node", name=NODE_NAME),
            )
            # The server's answer is a bare Status; skip decoding it into a model.
            self.core.create_namespaced_pod_binding(
                name, ns, binding, _preload_content=False, _request_timeout=5
            )
        age_s = now_s - track.first_seen_s
        stage = "ready"
        elapsed_s = 0.0
        for name_s in ("pending", "loading", "warmup"):
            elapsed_s += _annotation_s(pod, f"{name_s}-s", 0.0)
            if age_s < elapsed_s:
                stage = name_s
                break
        if stage == track.stage:
            return
        self.core.patch_namespaced_pod_status(
            name,
            ns,
            self._status(pod, stage, track.ip),
            _request_timeout=5,
            _content_type="application/strategic-merge-patch+json",
        )
        track.stage = stage

    @staticmethod
    def _unschedulable() -> dict[str, Any]:
        """What kube-scheduler writes on a pod no node fits (the cluster autoscaler's trigger)."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
            "lastTransitionTime": _now_iso(),
        }
        return {"status": {"phase": "Pending", "conditions": [condition]}}

    @staticmethod
    def _status(pod: client.V1Pod, stage: str, ip: str) -> dict[str, Any]:
        now = _now_iso()
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
        if stage == "pending":
            waiting = {"waiting": {"reason": "ContainerCreating"}}
            return {
                "status": {
                    "phase": "Pending",
                    "conditions": [scheduled],
                    "containerStatuses": [
                        {
                            "name": c.name,
                            "image": c.image,
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "started": False,
                            "state": waiting,
                        }
                        for c in pod.spec.containers
                    ],
                }
            }
        ready = stage == "ready"
        flag = "True" if ready else "False"
        # "loading": the container runs but its startup probe has not passed (started False).
        started = stage != "loading"
        return {
            "status": {
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": now,
                "conditions": [
                    scheduled,
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                    {"type": "Ready", "status": flag, "lastTransitionTime": now},
                ],
                "containerStatuses": [
                    {
                        "name": c.name,
                        "image": c.image,
                        "imageID": "",
                        "ready": ready,
                        "restartCount": 0,
                        "started": started,
                        "state": {"running": {"startedAt": now}},
                    }
                    for c in pod.spec.containers
                ],
            }
        }


@dataclass
class KubeCluster:
    """A running control plane; ``host`` is the API server's https URL."""

    workdir: Path
    host: str
    ca_file: str
    #: the request-header CA that signed the API server's front-proxy client certificate
    #: (CN ``FRONT_PROXY_CN``): what an aggregated API server verifies its callers with
    front_proxy_ca_file: str = ""
    processes: list[_Process] = field(default_factory=list)
    kubelet: FakeKubelet | None = None

    def admin_client(self) -> client.ApiClient:
        return make_client(self.host, ADMIN_TOKEN, self.ca_file)

    def token_client(self, token: str, host: str | None = None) -> client.ApiClient:
        """A client for ``token``; ``host`` overrides the URL (a proxy in front; plain http: no TLS)."""
        h = host or self.host
        return make_client(h, token, self.ca_file if h.startswith("https") else None)

    def service_account_token(self, namespace: str, name: str, timeout_s: float = 30.0) -> str:
        """The token of ServiceAccount ``namespace/name``, creating the account if needed.

        v1.20's serviceaccount-token controller writes a token Secret for every account
        and lists it in ``secrets``; wait for that and decode it.
        """
        core = client.CoreV1Api(self.admin_client())
        with contextlib.suppress(ApiException):
            core.create_namespaced_service_account(
                namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            sa = core.read_namespaced_service_account(name, namespace)
            for ref in sa.secrets or ():
                secret = core.read_namespaced_secret(ref.name, namespace)
                token = (secret.data or {}).get("token")
                if secret.type == "kubernetes.io/service-account-token" and token:
                    return base64.b64decode(token).decode()
            time.sleep(0.2)
        raise RuntimeError(
            f"no token secret appeared for ServiceAccount {namespace}/{name} in {timeout_s:.0f} s"
        )

    def service_account_client(self, namespace: str, name: str) -> client.ApiClient:
        return self.token_client(self.service_account_token(namespace, name))

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        # Reverse start order: controller-manager, then kube-apiserver, and etcd last.
        for p in reversed(self.processes):
            p.stop()


def _write_kubeconfig(path: Path, host: str, ca_file: str) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: test\n  cluster:\n    server: {host}\n    certificate-authority: {ca_file}\n"
        f"users:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\n"
        "contexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n"
        "current-context: test\n"
    )


def start_cluster(workdir: Path) -> KubeCluster:
    """Start etcd, kube-apiserver, kube-controller-manager and the fake kubelet under ``workdir``."""
    bins = kube_binaries()
    if bins is None:
        raise RuntimeError(f"kube binaries missing in {cache_dir()}; run scripts/build_kube.sh")
    apiserver_bin, kcm_bin = bins
    etcd_bin = "/usr/bin/etcd"
    cert_dir = workdir / "certs"
    cert_dir.mkdir()
    sa_key, sa_pub = workdir / "sa.key", workdir / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
        check=True,
        capture_output=True,
    )
    # The aggregation layer's front proxy (APIServices such as llmscale's external metrics API):
    # the API server presents this client certificate, signed by the request-header CA, to the
    # servers it proxies to.
    front_ca = make_ca(workdir / "front-proxy", "front-proxy-ca")
    front_client = front_ca.issue("front-proxy-client", cn=FRONT_PROXY_CN, client=True)
    tokens = workdir / "tokens.csv"
    tokens.write_text(f"{ADMIN_TOKEN},admin,admin,system:masters\n")

    etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
    host = f"https://127.0.0.1:{api_port}"
    ca_file = str(cert_dir / "apiserver.crt")
    cluster = KubeCluster(workdir=workdir, host=host, ca_file=ca_file, front_proxy_ca_file=str(front_ca.cert))
    try:
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{etcd_peer}"
        etcd = _Process(
            "etcd",
            [
                etcd_bin,
                "--name",
                "test",
                "--data-dir",
                str(workdir / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"test={peer_url}",
                "--log-level",
                "warn",
            ],
            workdir / "etcd.log",
        )
        cluster.processes.append(etcd)
        import httpx

        _wait("etcd", lambda: httpx.get(f"{etcd_url}/health", timeout=1).status_code == 200, 30, [etcd])

        apiserver = _Process(
            "kube-apiserver",
            [
                str(apiserver_bin),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={cert_dir}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                f"--requestheader-client-ca-file={front_ca.cert}",
                f"--requestheader-allowed-names={FRONT_PROXY_CN}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={front_client.cert}",
                f"--proxy-client-key-file={front_client.key}",
                "--v=0",
            ],
            workdir / "kube-apiserver.log",
        )
        cluster.processes.append(apiserver)

        def ready() -> bool:
            r = httpx.get(
                f"{host}/readyz",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                verify=ssl.create_default_context(cafile=ca_file),
                timeout=2,
            )
            return r.status_code == 200

        _wait("kube-apiserver /readyz", ready, STARTUP_TIMEOUT_S, [etcd, apiserver])

        kubeconfig = workdir / "kubeconfig"
        _write_kubeconfig(kubeconfig, host, ca_file)
        kcm = _Process(
            "kube-controller-manager",
            [
                str(kcm_bin),
                f"--kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--port=0",
                "--leader-elect=false",
                "--controllers=deployment,replicaset,statefulset,garbagecollector,namespace,serviceaccount-token",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca_file}",
                "--concurrent-deployment-syncs=2",
                "--concurrent-replicaset-syncs=2",
            ],
            workdir / "kube-controller-manager.log",
        )
        cluster.processes.append(kcm)
        cluster.kubelet = FakeKubelet(cluster.admin_client())
        cluster.kubelet.start()
        # The controller-manager is up once it has written the token Secret of an account.
        token_probe = cluster.service_account_token(
            "default", "llmscale-startup-probe", timeout_s=STARTUP_TIMEOUT_S
        )
        assert token_probe
        return cluster
    except BaseException:
        cluster.stop()
        raise


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """One control plane for the test session; skipped when the binaries were never built."""
    if kube_binaries() is None:
        pytest.skip(
            f"kube-apiserver {KUBE_VERSION} not built: run scripts/build_kube.sh (caches to {cache_dir()})"
        )
    with tempfile.TemporaryDirectory(prefix="llmscale-kube-") as tmp:
        cluster = start_cluster(Path(tmp))
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting for the namespace controller)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(kube_cluster.admin_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)
