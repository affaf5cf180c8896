"""Hostile callers of the servers llmscale runs: the KEDA external scaler (gRPC), the external
metrics API (HTTPS) and the controller's own ``/metrics`` (HTTP), each on 127.0.0.1.

Each attack is one request or connection a caller outside llmscale's control may send; after
each, the honest caller (KEDA, the API server's front proxy, the kubelet's probe) is still
answered, and the attack got a clear error, not a dropped stream (docs/hostile-servers.md):

* KEDA: unknown ScaledObjects with names of 1 to 3 MB (the status must still say NOT_FOUND: a
  name echoed whole made the trailer too large, and the caller read RESOURCE_EXHAUSTED), a
  ``metricName`` that is a path, 1 MB long, or holds control characters (INVALID_ARGUMENT: it
  was served back as given, into the HPA's metric name and the metrics API's URL), a metadata
  map of 10,000 keys, bytes that are not the message, a flood of streams that never read;
* the external metrics API: connections that never start their TLS handshake (one used to hold
  the server's only accepting thread, and every request of the HPA timed out behind it), plain
  HTTP on the TLS port, paths that climb out of the API, malformed label selectors;
* ``/metrics``: a connection that sends nothing is dropped after the caller time-out instead of
  holding its thread for the life of the process.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from llmscale.cluster.keda import externalscaler_pb2 as pb
from llmscale.cluster.keda import externalscaler_pb2_grpc as pb_grpc
from llmscale.cluster.keda.server import KedaScaler, serve
from llmscale.controller import external_metrics, server
from llmscale.controller.external_metrics import GROUP_VERSION, ExternalMetricsServer, MetricsSnapshot
from llmscale.controller.server import ControllerMetrics, ControllerServer
from support.certs import Ca, Leaf, make_ca

RPC_S = 5.0
NS = "serving"


# -------------------------------------------------------------------------------------------------
# KEDA external scaler


@pytest.fixture(scope="module")
def keda() -> Iterator[tuple[Any, pb_grpc.ExternalScalerStub, grpc.Channel]]:
    scaler = KedaScaler("llm", NS)
    scaler.scale_to(3, 0.0)
    srv, port = serve(scaler, "127.0.0.1:0", max_streams=4, max_workers=8)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield srv, pb_grpc.ExternalScalerStub(channel), channel
    channel.close()
    srv.stop(grace_s=0.5)


def ref(name: str = "llm", namespace: str = NS, **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)


def _honest_keda_is_answered(stub: pb_grpc.ExternalScalerStub) -> None:
    assert stub.IsActive(ref(), timeout=RPC_S).result is True
    got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref()), timeout=RPC_S)
    assert [v.metricValue for v in got.metricValues] == [3]


BIG = "x" * 1_000_000
KEDA_ATTACKS = [
    pytest.param("IsActive", ref(name=BIG), grpc.StatusCode.NOT_FOUND, "1000000 characters", id="name-1MB"),
    pytest.param("IsActive", ref(name="y" * 3_000_000), grpc.StatusCode.NOT_FOUND, "3000000", id="name-3MB"),
    pytest.param(
        "GetMetricSpec", ref(namespace=BIG), grpc.StatusCode.NOT_FOUND, "is not served", id="namespace-1MB"
    ),
    pytest.param("IsActive", ref(name="../llm"), grpc.StatusCode.NOT_FOUND, "../llm", id="name-traversal"),
    pytest.param("IsActive", ref(name="", namespace=""), grpc.StatusCode.NOT_FOUND, "not served", id="empty"),
    pytest.param(
        "GetMetricSpec",
        ref(metricName="../../namespaces/kube-system/pods"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "metricName",
        id="metric-name-path",
    ),
    pytest.param(
        "GetMetricSpec",
        ref(metricName=BIG),
        grpc.StatusCode.INVALID_ARGUMENT,
        "1000000",
        id="metric-name-1MB",
    ),
    pytest.param(
        "GetMetricSpec",
        ref(metricName="a\x00b\nc"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "\\x00",
        id="metric-nul",
    ),
    pytest.param(
        "GetMetrics",
        pb.GetMetricsRequest(scaledObjectRef=ref(metricName="m/../x"), metricName="m/../x"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "metricName",
        id="get-metrics-name-path",
    ),
    pytest.param(
        "GetMetrics",
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="q" * 500_000),
        grpc.StatusCode.NOT_FOUND,
        "500000 characters",
        id="get-metrics-unknown-500KB",
    ),
    pytest.param(
        "GetMetricSpec",
        ref(**{f"k{i}": "v" * 100 for i in range(10_000)}),
        None,
        "",
        id="metadata-10000-keys",
    ),
    pytest.param("GetMetricSpec", ref(metricName=""), None, "", id="metric-name-empty-means-default"),
]


@pytest.mark.parametrize(("method", "request_", "code", "says"), KEDA_ATTACKS)
def test_keda_answers_a_clear_status_and_keeps_serving(keda, method, request_, code, says) -> None:
    _, stub, _ = keda
    try:
        getattr(stub, method)(request_, timeout=RPC_S)
        got, details = None, ""
    except grpc.RpcError as e:
        got, details = e.code(), e.details() or ""
    assert got == code, details[:300]
    assert says in details and len(details) < 1000, details[:300]
    _honest_keda_is_answered(stub)


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"\xff\xff\xff\xff", id="not-protobuf"),
        pytest.param(b"\x0a\x05\x08\x01\x10\x02", id="wrong-field-types"),
        pytest.param(b"\x1a\xff\xff\xff\x0f", id="map-entry-longer-than-the-message"),
    ],
)
def test_keda_refuses_bytes_that_are_not_the_message(keda, wire: bytes) -> None:
    _, stub, channel = keda
    raw = channel.unary_unary(
        "/externalscaler.ExternalScaler/IsActive",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as e:
        raw(wire, timeout=RPC_S)
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.NOT_FOUND)
    _honest_keda_is_answered(stub)


def test_a_flood_of_streams_that_never_read_leaves_keda_answered(keda) -> None:
    srv, stub, _ = keda
    streams = [stub.StreamIsActive(ref(), timeout=20.0) for _ in range(40)]
    try:
        deadline = time.monotonic() + 5.0
        while srv.servicer.open_streams < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # one client address holds at most its share (2), whatever it opens: KEDA's own stream and
        # every unary call still find a worker
        assert srv.servicer.open_streams == 2
        for _ in range(20):
            _honest_keda_is_answered(stub)
    finally:
        for s in streams:
            s.cancel()


# -------------------------------------------------------------------------------------------------
# the external metrics API


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ca | Leaf]:
    d = tmp_path_factory.mktemp("pki")
    serving_ca = make_ca(d / "serving", "serving-ca")
    front_ca = make_ca(d / "front", "front-proxy-ca")
    return {
        "serving_ca": serving_ca,
        "serving": serving_ca.issue("serving", cn="llmscale", sans=("IP:127.0.0.1",)),
        "front_ca": front_ca,
        "proxy": front_ca.issue("proxy", cn="front-proxy-client", client=True),
    }


@pytest.fixture
def metrics_api(pki, monkeypatch) -> Iterator[ExternalMetricsServer]:
    monkeypatch.setattr(external_metrics, "CALLER_TIMEOUT_S", 1.0, raising=False)
    srv = ExternalMetricsServer(
        lambda: MetricsSnapshot(4, {"queue_depth": 12.0}, 1_700_000_000.0),
        namespace=NS,
        target="serving/llm",
        metric_name="llmscale-desired-replicas",
        host="127.0.0.1",
        port=0,
        cert_file=str(pki["serving"].cert),
        key_file=str(pki["serving"].key),
        client_ca_file=str(pki["front_ca"].cert),
        allowed_names=("front-proxy-client",),
    )
    srv.start()
    yield srv
    srv.stop()


BASE = f"/apis/{GROUP_VERSION}"


def _proxy(pki: dict[str, Any], srv: ExternalMetricsServer, timeout_s: float = 3.0) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(pki["serving_ca"].cert))
    ctx.load_cert_chain(str(pki["proxy"].cert), str(pki["proxy"].key))
    return httpx.Client(base_url=f"https://127.0.0.1:{srv.port}", verify=ctx, timeout=timeout_s)


def _hpa_reads_the_decision(pki: dict[str, Any], srv: ExternalMetricsServer) -> None:
    with _proxy(pki, srv) as c:
        r = c.get(f"{BASE}/namespaces/{NS}/llmscale-desired-replicas")
    assert r.status_code == 200 and r.json()["items"][0]["value"] == "4", r.text


def test_connections_that_never_handshake_do_not_hold_the_hpa(pki, metrics_api) -> None:
    # Five callers that connect and say nothing: each waits in its own thread now, and the
    # front proxy's request is answered at once rather than after the first one gives up.
    idle = [socket.create_connection(("127.0.0.1", metrics_api.port)) for _ in range(5)]
    try:
        t0 = time.monotonic()
        _hpa_reads_the_decision(pki, metrics_api)
        assert time.monotonic() - t0 < 1.0
        # and each silent caller is dropped after the caller time-out (1 s here)
        for s in idle:
            s.settimeout(5.0)
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", id="plain-http-on-the-tls-port"),
        pytest.param(b"\x16\x03\x01\x00\x05hello", id="truncated-client-hello"),
        pytest.param(b"\x00" * 10_000, id="zeros"),
    ],
)
def test_garbage_instead_of_a_handshake_is_dropped(pki, metrics_api, wire: bytes) -> None:
    with socket.create_connection(("127.0.0.1", metrics_api.port), timeout=5.0) as s:
        s.sendall(wire)
        _hpa_reads_the_decision(pki, metrics_api)
        try:
            rest = s.recv(65536)
        except ConnectionResetError:
            rest = b""
        assert b"200" not in rest


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param(f"{BASE}/namespaces/{NS}/../../../../api/v1/secrets", 404, id="dot-dot"),
        pytest.param(f"{BASE}/namespaces/{NS}/%2e%2e%2fsecrets", 404, id="encoded-dot-dot"),
        pytest.param(f"{BASE}/namespaces/kube-system/llmscale-desired-replicas", 404, id="other-namespace"),
        pytest.param(
            f"{BASE}/namespaces/{NS}/llmscale-signal?labelSelector=signal!%3Dx", 400, id="not-equal"
        ),
        pytest.param(f"{BASE}/namespaces/{NS}/llmscale-signal?labelSelector=%3Dx", 400, id="no-key"),
        pytest.param(f"{BASE}/namespaces/{NS}/llmscale-signal?labelSelector=a+in+(b)", 400, id="set-based"),
        pytest.param(
            f"{BASE}/namespaces/{NS}/llmscale-signal?labelSelector=" + "a%3Db," * 5000, 200, id="5000-terms"
        ),
        pytest.param(f"{BASE}/namespaces/{NS}/llmscale-signal?labelSelector=%00%3D%ff", 200, id="nul-key"),
        pytest.param(f"{BASE}/namespaces/{NS}/" + "m" * 30_000, 404, id="name-30KB"),
    ],
)
def test_hostile_paths_and_selectors_get_a_status(pki, metrics_api, path: str, status: int) -> None:
    with _proxy(pki, metrics_api) as c:
        r = c.get(path)
    assert r.status_code == status, r.text[:300]
    doc = r.json()
    if status != 200:
        assert doc["kind"] == "Status" and doc["code"] == status
    else:
        assert doc["items"] == []  # no item carries those labels
    _hpa_reads_the_decision(pki, metrics_api)


# -------------------------------------------------------------------------------------------------
# the controller's own /metrics


def test_a_silent_connection_to_metrics_is_dropped_and_others_served(monkeypatch) -> None:
    monkeypatch.setattr(server, "CALLER_TIMEOUT_S", 0.5, raising=False)
    with ControllerServer(
        "127.0.0.1", 0, ControllerMetrics("serving/llm", "scrape"), ready=lambda: True
    ) as s:
        host, port = s.address
        before = threading.active_count()
        idle = [socket.create_connection((host, port)) for _ in range(5)]
        try:
            r = httpx.get(f"http://{host}:{port}/metrics", timeout=3.0)
            assert r.status_code == 200 and b"llmscale_desired_replicas" in r.content
            for c in idle:
                c.settimeout(5.0)
                assert c.recv(1) == b""  # closed by the server after its caller time-out
        finally:
            for c in idle:
                c.close()
        deadline = time.monotonic() + 5.0
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= before  # their threads ended with them


def test_the_caller_time_outs_are_the_documented_ones() -> None:
    # docs/hostile-servers.md states both
    assert server.CALLER_TIMEOUT_S == external_metrics.CALLER_TIMEOUT_S == 10.0
