"""hpa-gpu-util's and keda-queue's replica calculations beside the HPA controller's own.

``tests/peers/tables/kube_hpa.json`` holds what Kubernetes' ``ReplicaCalculator`` (run in its own
source tree with its vendored dependencies by ``tests/peers/recorders/record_kube_hpa.py``)
computed for:

* a Pods metric with an AverageValue target, on fleets of running pods with and without a sample,
  Pending pods (a replica waiting for its node or pulling its image) and Failed pods: llmscale's
  :func:`~llmscale.policies.hpa.hpa_replicas_for_metric` given the running pods' samples and the
  number of Pending pods, as ``hpa-gpu-util`` gives it;
* an External metric with an AverageValue target, KEDA's ScaledObject: llmscale's
  :func:`~llmscale.policies.keda.external_average_value_replicas`.

Every case must give the HPA's replicas; where the HPA could not compute (no pod with a sample),
llmscale holds the current count under ``no-metrics``, as the HPA leaves the scale alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.policies.hpa import hpa_replicas_for_metric
from llmscale.policies.keda import external_average_value_replicas

pytestmark = pytest.mark.peers

TABLE = json.loads((Path(__file__).parent / "tables" / "kube_hpa.json").read_text())


def test_the_table_is_the_hpa_controllers_code():
    assert TABLE["files"] == ["pkg/controller/podautoscaler/replica_calculator.go"]
    kinds = {c["kind"] for c in TABLE["cases"]}
    assert kinds == {"pods", "external-per-pod"} and len(TABLE["cases"]) > 300


def test_pods_metric_replicas_are_the_hpas():
    wrong = []
    for c in (c for c in TABLE["cases"] if c["kind"] == "pods"):
        running = [p for p in c["pods"] if p["phase"] == "Running"]
        values = {p["name"]: (p["milli_value"] / 1000.0 if "milli_value" in p else None) for p in running}
        pending = sum(p["phase"] == "Pending" for p in c["pods"])
        replicas, _, rule = hpa_replicas_for_metric(
            values, c["target_milli"] / 1000.0, c["tolerance"], c["current"], pending_pods=pending
        )
        expected = c["current"] if c.get("error") else c["replicas"]
        if replicas != expected or (rule == "no-metrics") != bool(c.get("error")):
            pods = [p["phase"][0] + str(p.get("milli_value", "-")) for p in c["pods"]]
            wrong.append((c["level"], c["current"], pods, c["replicas"], c.get("error"), replicas, rule))
    assert not wrong, f"{len(wrong)} cases differ, e.g. {wrong[:4]}"


def test_external_average_value_replicas_are_the_hpas():
    wrong = []
    for c in (c for c in TABLE["cases"] if c["kind"] == "external-per-pod"):
        value = sum(c["external_milli"]) / 1000.0
        target = c["target_milli"] / 1000.0
        replicas, _, _ = external_average_value_replicas(value, target, c["current"], c["tolerance"])
        if replicas != c["replicas"]:
            wrong.append((value, c["current"], c["replicas"], replicas))
    assert not wrong, f"{len(wrong)} cases differ, e.g. {wrong[:4]}"
