"""The external metrics API server in process: TLS on 127.0.0.1, callers admitted by the front-proxy
certificate, the decision and the signals as ``ExternalMetricValueList`` items.

The aggregation layer itself is exercised in tests/kubernetes/test_hpa_external_metrics.py.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmscale.controller.external_metrics import (
    GROUP_VERSION,
    SIGNAL_METRIC,
    ExternalMetricsServer,
    MetricsSnapshot,
    format_quantity,
    parse_label_selector,
)
from llmscale.errors import ConfigError
from support.certs import Ca, Leaf, make_ca

NS = "serving"
BASE = f"/apis/{GROUP_VERSION}"


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
        "other_cn": front_ca.issue("other", cn="someone-else", client=True),
    }


class Published:
    def __init__(self) -> None:
        self.snap = MetricsSnapshot(None, {}, 0.0)

    def __call__(self) -> MetricsSnapshot:
        return self.snap


@pytest.fixture
def served(pki) -> Iterator[tuple[ExternalMetricsServer, Published]]:
    published = Published()
    server = ExternalMetricsServer(
        published,
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
    server.start()
    yield server, published
    server.stop()


def _client(pki, server: ExternalMetricsServer, leaf: str | None = "proxy") -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(pki["serving_ca"].cert))
    if leaf is not None:
        ctx.load_cert_chain(str(pki[leaf].cert), str(pki[leaf].key))
    return httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=ctx, timeout=5.0)


def test_the_decision_and_signals_are_served_to_the_front_proxy(pki, served) -> None:
    server, published = served
    with _client(pki, server) as c:
        # Before the first decision: 503, never a made-up 0 (the HPA then holds its replicas).
        r = c.get(f"{BASE}/namespaces/{NS}/llmscale-desired-replicas", headers={"X-Remote-User": "hpa"})
        assert r.status_code == 503 and r.json()["reason"] == "ServiceUnavailable", r.text
        published.snap = MetricsSnapshot(5, {"queue_depth": 12.0, "kv_usage": 0.875}, 1_700_000_000.0)
        r = c.get(f"{BASE}/namespaces/{NS}/llmscale-desired-replicas")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["kind"] == "ExternalMetricValueList" and body["apiVersion"] == GROUP_VERSION
        (item,) = body["items"]
        assert item == {
            "metricName": "llmscale-desired-replicas",
            "metricLabels": {"target": "serving/llm"},
            "timestamp": "2023-11-14T22:13:20Z",
            "value": "5",
        }
        r = c.get(f"{BASE}/namespaces/{NS}/{SIGNAL_METRIC}")
        assert {i["metricLabels"]["signal"]: i["value"] for i in r.json()["items"]} == {
            "kv_usage": "875m",
            "queue_depth": "12",
        }
        # An HPA's metric.selector.matchLabels arrives as labelSelector.
        r = c.get(f"{BASE}/namespaces/{NS}/{SIGNAL_METRIC}", params={"labelSelector": "signal=queue_depth"})
        assert [i["value"] for i in r.json()["items"]] == ["12"]
        discovery = c.get(BASE).json()
        assert {res["name"] for res in discovery["resources"]} == {"llmscale-desired-replicas", SIGNAL_METRIC}
        assert c.get(f"{BASE}/namespaces/other/llmscale-desired-replicas").status_code == 404
        assert c.get(f"{BASE}/namespaces/{NS}/no-such-metric").status_code == 404
        bad = c.get(f"{BASE}/namespaces/{NS}/{SIGNAL_METRIC}", params={"labelSelector": "signal!=x"})
        assert bad.status_code == 400


def test_a_caller_without_the_front_proxy_certificate_is_refused(pki, served) -> None:
    server, published = served
    published.snap = MetricsSnapshot(5, {}, 0.0)
    # A certificate of the right CA but another name: 401 before any metric is read.
    with _client(pki, server, "other_cn") as c:
        r = c.get(f"{BASE}/namespaces/{NS}/llmscale-desired-replicas", headers={"X-Remote-User": "admin"})
        assert r.status_code == 401, r.text
    # No certificate at all: the TLS handshake fails.
    with _client(pki, server, None) as c, pytest.raises(httpx.HTTPError):
        c.get(f"{BASE}/namespaces/{NS}/llmscale-desired-replicas")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(5.0, "5", id="integer"),
        pytest.param(0.875, "875m", id="fraction-in-milli"),
        pytest.param(12.3456, "12346m", id="rounded-to-milli"),
        pytest.param(0.0, "0", id="zero"),
    ],
)
def test_quantities(value: float, text: str) -> None:
    assert format_quantity(value) == text


def test_label_selector_terms() -> None:
    assert parse_label_selector("signal=queue_depth, target==a/b") == {
        "signal": "queue_depth",
        "target": "a/b",
    }
    assert parse_label_selector("") == {}
    with pytest.raises(ValueError, match="only key=value"):
        parse_label_selector("signal in (a,b)")


def test_unreadable_certificate_is_named(tmp_path: Path, pki) -> None:
    with pytest.raises(ConfigError, match=r"actuator\.hpa\.tls: cert_file .*missing\.crt"):
        ExternalMetricsServer(
            Published(),
            namespace=NS,
            target="serving/llm",
            metric_name="m",
            host="127.0.0.1",
            port=0,
            cert_file=str(tmp_path / "missing.crt"),
            key_file=str(pki["serving"].key),
        )
