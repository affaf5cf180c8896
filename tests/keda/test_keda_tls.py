"""The KEDA external scaler over TLS and mTLS, with real grpcio and the stubs of KEDA's own proto,
and ``llmscale run`` serving it without Kubernetes credentials (replicas from the metrics).

KEDA's ``external`` trigger (``enableTLS``) verifies the scaler with ``caCert`` and, for mTLS, presents
``tlsClientCert``/``tlsClientKey``; the clients here do the same with grpcio's SSL credentials.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from llmscale.cluster.keda import KedaScaler, ServerTls, serve
from llmscale.cluster.keda import externalscaler_pb2 as pb
from llmscale.cluster.keda import externalscaler_pb2_grpc as pb_grpc
from llmscale.errors import ConfigError
from llmscale.types import FleetView, Observation, Phase, ReplicaSample
from llmscale.wiring import ObservedReplicas
from support.certs import Ca, Leaf, make_ca

RPC_TIMEOUT_S = 5.0
LLMSCALE = Path(sys.executable).with_name("llmscale")


def ref(name: str = "llm", namespace: str = "serving") -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ca, Leaf, Ca, Leaf]:
    """(server CA, server cert for 127.0.0.1/localhost, client CA, a client cert it signed)."""
    d = tmp_path_factory.mktemp("pki")
    server_ca = make_ca(d / "server", "server-ca")
    server = server_ca.issue("scaler", cn="llmscale", sans=("DNS:localhost", "IP:127.0.0.1"))
    client_ca = make_ca(d / "client", "client-ca")
    keda = client_ca.issue("keda", cn="keda-operator", client=True)
    return server_ca, server, client_ca, keda


def _metrics(channel: grpc.Channel) -> float:
    stub = pb_grpc.ExternalScalerStub(channel)
    resp = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()), timeout=RPC_TIMEOUT_S)
    return float(resp.metricValues[0].metricValueFloat)


@pytest.fixture
def scaler() -> Iterator[KedaScaler]:
    s = KedaScaler("llm", "serving")
    s.scale_to(7, now_s=0.0)
    yield s


def test_tls_serves_the_decision_to_a_client_that_trusts_the_ca(pki, scaler) -> None:
    server_ca, server_leaf, _, _ = pki
    tls = ServerTls.from_files(str(server_leaf.cert), str(server_leaf.key))
    server, port = serve(scaler, tls=tls)
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=server_ca.cert.read_bytes())
        with grpc.secure_channel(f"localhost:{port}", creds) as ch:
            assert _metrics(ch) == 7.0
        # A plain-text client gets no answer from a TLS port.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch, pytest.raises(grpc.RpcError) as e:
            _metrics(ch)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # Nor does a client that trusts another CA (the certificate does not verify).
        other = make_ca(server_leaf.cert.parent / "other", "other-ca")
        creds = grpc.ssl_channel_credentials(root_certificates=other.cert.read_bytes())
        with grpc.secure_channel(f"localhost:{port}", creds) as ch, pytest.raises(grpc.RpcError) as e:
            _metrics(ch)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)


def test_mtls_refuses_a_client_without_a_certificate(pki, scaler) -> None:
    server_ca, server_leaf, client_ca, keda_leaf = pki
    tls = ServerTls.from_files(str(server_leaf.cert), str(server_leaf.key), str(client_ca.cert))
    server, port = serve(scaler, tls=tls)
    root = server_ca.cert.read_bytes()
    try:
        with_cert = grpc.ssl_channel_credentials(
            root_certificates=root,
            private_key=keda_leaf.key.read_bytes(),
            certificate_chain=keda_leaf.cert.read_bytes(),
        )
        with grpc.secure_channel(f"localhost:{port}", with_cert) as ch:
            assert _metrics(ch) == 7.0
        without = grpc.ssl_channel_credentials(root_certificates=root)
        with grpc.secure_channel(f"localhost:{port}", without) as ch, pytest.raises(grpc.RpcError) as e:
            _metrics(ch)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # A certificate from a CA the server does not name is refused too.
        stranger_ca = make_ca(client_ca.workdir / "stranger", "stranger-ca")
        stranger = stranger_ca.issue("stranger", cn="keda-operator", client=True)
        wrong = grpc.ssl_channel_credentials(
            root_certificates=root,
            private_key=stranger.key.read_bytes(),
            certificate_chain=stranger.cert.read_bytes(),
        )
        with grpc.secure_channel(f"localhost:{port}", wrong) as ch, pytest.raises(grpc.RpcError) as e:
            _metrics(ch)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)


def test_tls_files_are_checked_with_their_field_names(tmp_path: Path, pki) -> None:
    _, server_leaf, _, _ = pki
    with pytest.raises(ConfigError, match=r"actuator\.keda\.tls\.key_file '.*missing.key' cannot be read"):
        ServerTls.from_files(str(server_leaf.cert), str(tmp_path / "missing.key"))
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello\n")
    with pytest.raises(ConfigError, match=r"actuator\.keda\.tls\.client_ca_file .* is not PEM"):
        ServerTls.from_files(str(server_leaf.cert), str(server_leaf.key), str(not_pem))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_with_keda_needs_no_kubernetes_when_replicas_come_from_the_metrics(tmp_path: Path, pki) -> None:
    """``run`` with ``actuator.kind: keda`` and ``replicas_from: metrics`` starts with no kubeconfig
    and no in-cluster account, and KEDA's client reads its decision over mTLS."""
    server_ca, server_leaf, client_ca, keda_leaf = pki
    port = _free_port()
    doc = {
        "target": {"namespace": "serving", "name": "llm"},
        "metrics": {
            "source": "scrape",
            # one replica whose page cannot be read: unknown load; the static policy needs none
            "scrape": {
                "static_targets": [{"name": "vllm-0", "url": f"http://127.0.0.1:{_free_port()}/metrics"}],
                "timeout_s": 0.5,
            },
        },
        "policy": {"name": "static", "params": {"replicas": 4}},
        "guards": {"min_replicas": 1, "max_replicas": 8},
        "tick_s": 1,
        "mode": "apply",
        "actuator": {
            "kind": "keda",
            "keda": {
                "listen": f"127.0.0.1:{port}",
                "replicas_from": "metrics",
                "tls": {
                    "cert_file": str(server_leaf.cert),
                    "key_file": str(server_leaf.key),
                    "client_ca_file": str(client_ca.cert),
                },
            },
        },
        "server": {"listen": "127.0.0.1:0"},
        "decision_log": {"path": str(tmp_path / "decisions.jsonl")},
    }
    config = tmp_path / "llmscale.yaml"
    config.write_text(yaml.safe_dump(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
    proc = subprocess.Popen(
        [str(LLMSCALE), "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    creds = grpc.ssl_channel_credentials(
        root_certificates=server_ca.cert.read_bytes(),
        private_key=keda_leaf.key.read_bytes(),
        certificate_chain=keda_leaf.cert.read_bytes(),
    )
    got: float | None = None
    try:
        with grpc.secure_channel(f"localhost:{port}", creds) as ch:
            deadline = time.monotonic() + 90.0  # the CLI's imports on a busy 2-core machine
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    got = _metrics(ch)
                    break
                except grpc.RpcError:  # not listening yet, or no decision yet (UNAVAILABLE)
                    time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert got == 4.0, err[-3000:]
    assert proc.returncode == 0, err[-3000:]
    assert "KEDA external scaler on 127.0.0.1" in err and "client certificates required" in err, err[-3000:]


class _ThreeReplicas:
    """A metric source that sees three replicas (one of them unknown)."""

    def observe(self, now_s: float) -> Observation:
        samples = tuple(ReplicaSample(f"vllm-{i}", Phase.READY, ok=i < 2) for i in range(3))
        return Observation(now_s, FleetView(spec_replicas=0), samples)


def test_without_kubernetes_the_spec_before_a_decision_is_what_the_source_saw() -> None:
    """3 replicas in the metrics -> spec 3 before the first decision, so the guards compare a
    first decision with 3, not with 0 (a first 3 publishes nothing new; 5 is a scale-up of 2)."""
    observed = ObservedReplicas()
    scaler = KedaScaler("llm", "serving", initial_replicas=observed)
    source = observed.wrap(_ThreeReplicas())
    assert scaler.spec_replicas == 0  # nothing observed yet
    source.observe(10.0)
    assert scaler.spec_replicas == 3
    assert scaler.decision is None and not scaler.has_decision
    scaler.scale_to(5, now_s=11.0)
    assert scaler.spec_replicas == 5 and scaler.decision == (5, 11.0)
