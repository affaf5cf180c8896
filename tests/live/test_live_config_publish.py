"""llmscale.yaml for the actuators that publish a decision (keda, hpa): what each needs of the
Kubernetes API, checked at load with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from llmscale.config import parse_config, replicas_from_metrics
from llmscale.errors import ConfigError

TLS = {"cert_file": "/etc/llmscale/tls/tls.crt", "key_file": "/etc/llmscale/tls/tls.key"}
STATIC = {
    "source": "scrape",
    "scrape": {"static_targets": [{"name": "a", "url": "http://127.0.0.1:8000/metrics"}]},
}
PODS = {"source": "scrape"}


def _doc(actuator: dict[str, Any], metrics: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "target": {"namespace": "serving", "name": "llm"},
        "metrics": metrics,
        "policy": {"name": "static", "params": {"replicas": 2}},
        "actuator": actuator,
        **extra,
    }


@pytest.mark.parametrize(
    ("actuator", "metrics", "extra", "error"),
    [
        pytest.param(
            {"kind": "hpa"},
            STATIC,
            {},
            r"actuator\.hpa: required when actuator\.kind is hpa",
            id="hpa-needs-tls",
        ),
        pytest.param(
            {"kind": "keda", "keda": {"replicas_from": "metrics"}},
            PODS,
            {},
            r"actuator\.keda\.replicas_from: metrics needs a source that finds replicas without Kubernetes",
            id="keda-standalone-cannot-list-pods",
        ),
        pytest.param(
            {"kind": "hpa", "hpa": {"tls": TLS, "replicas_from": "metrics"}},
            STATIC,
            {"state": {"store": "configmap"}},
            r"state\.store: configmap needs the Kubernetes API",
            id="standalone-has-no-configmap",
        ),
        pytest.param(
            {"kind": "hpa", "hpa": {"tls": TLS}},
            STATIC,
            {},
            r"target\.selector: required",
            id="hpa-with-kubernetes-needs-a-selector",
        ),
        pytest.param(
            {"kind": "keda", "keda": {"tls": {"cert_file": "c"}}},
            STATIC,
            {},
            r"actuator\.keda\.tls\.key_file: Field required",
            id="keda-tls-needs-a-key",
        ),
    ],
)
def test_refused(
    actuator: dict[str, Any], metrics: dict[str, Any], extra: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config(_doc(actuator, metrics, **extra), source="llmscale.yaml")


@pytest.mark.parametrize(
    ("actuator", "standalone"),
    [
        pytest.param({"kind": "keda", "keda": {"replicas_from": "metrics", "tls": TLS}}, True, id="keda"),
        pytest.param({"kind": "hpa", "hpa": {"tls": TLS, "replicas_from": "metrics"}}, True, id="hpa"),
    ],
)
def test_accepted_without_kubernetes(actuator: dict[str, Any], standalone: bool) -> None:
    cfg = parse_config(_doc(actuator, STATIC), source="llmscale.yaml")
    assert replicas_from_metrics(cfg) is standalone
