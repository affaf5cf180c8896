"""The kustomize install (deploy/install) against the real kube-apiserver: every object of each
overlay passes ``kubectl apply --dry-run=server --validate=strict`` with KEDA's and
prometheus-operator's CRDs installed (tests/deploy/crds: upstream's files as released).

kubectl validates each object against the server's OpenAPI schemas, CRDs' included (an unknown or
mistyped field is an error, not silently pruned); the API server's dry run then applies its own
validation and admission without storing anything. A broken object is refused by the same command.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.kube_cluster import KubeCluster
from support.kustomize import OVERLAYS, docs, kubectl, rendered

CRDS = Path(__file__).resolve().parents[1] / "deploy" / "crds"
#: namespaces the rendered objects live in (the DCGM ServiceMonitor is the GPU Operator's)
NAMESPACES = ("llmscale", "gpu-operator")


def _kubectl(cluster: KubeCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl(), f"--kubeconfig={cluster.workdir / 'kubeconfig'}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _for_v1_20(node: Any) -> tuple[Any, int]:
    """A CRD schema without its empty-string defaults, and how many were dropped.

    controller-gen writes ``default: ""`` on every Secret/ConfigMap key selector's ``name``
    (prometheus-operator 0.93's ServiceMonitor CRD has 18 of them); the v1.20 API server reads
    that default as null and refuses the whole CRD. A default is a value the server fills in,
    not a rule an object must pass, so dropping it leaves every check this test relies on
    (types, enums, required fields, unknown fields) as upstream wrote it. KEDA's CEL rules
    (``x-kubernetes-validations``) are unknown to v1.20 as well: the server drops them on
    create, which is why the CRDs go in with kubectl's client-side validation off.
    """
    if isinstance(node, dict):
        dropped = 0
        out = {}
        for k, v in node.items():
            if k == "default" and v == "":
                dropped += 1
                continue
            out[k], n = _for_v1_20(v)
            dropped += n
        return out, dropped
    if isinstance(node, list):
        pairs = [_for_v1_20(v) for v in node]
        return [p[0] for p in pairs], sum(p[1] for p in pairs)
    return node, 0


@pytest.fixture(scope="module")
def with_crds(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """The session cluster with the CRDs installed (established) and the namespaces present;
    both removed afterwards, so the other modules of the session see the cluster as it was
    (test_kube_ownership.py installs a schema-less ScaledObject CRD of its own)."""
    crds = [_for_v1_20(yaml.safe_load(p.read_text()))[0] for p in sorted(CRDS.glob("*.yaml"))]
    text = yaml.safe_dump_all(crds)
    r = _kubectl(kube_cluster, "apply", "--validate=false", "-f", "-", stdin=text)
    assert r.returncode == 0, r.stderr
    names = [f"crd/{yaml.safe_load(p.read_text())['metadata']['name']}" for p in sorted(CRDS.glob("*.yaml"))]
    r = _kubectl(kube_cluster, "wait", "--for=condition=Established", "--timeout=60s", *names)
    assert r.returncode == 0, r.stderr
    for ns in NAMESPACES:
        _kubectl(kube_cluster, "create", "namespace", ns)
    try:
        yield kube_cluster
    finally:
        _kubectl(kube_cluster, "delete", "--wait=true", "--timeout=60s", *names)
        _kubectl(kube_cluster, "delete", "namespace", "--wait=false", *NAMESPACES)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_a_server_side_dry_run(with_crds: KubeCluster, overlay: str) -> None:
    text = rendered(overlay)
    r = _kubectl(with_crds, "apply", "--dry-run=server", "--validate=strict", "-f", "-", stdin=text)
    assert r.returncode == 0, r.stderr
    # Every object was seen by the server (kubectl prints one line per object).
    assert len([line for line in r.stdout.splitlines() if "(server dry run)" in line]) == len(
        docs(overlay)
    ), r.stdout


@pytest.mark.parametrize(
    ("kind", "path", "value", "expected"),
    [
        pytest.param(
            "ScaledObject", ("spec", "pollingIntervall"), 15, "pollingIntervall", id="keda-unknown-field"
        ),
        pytest.param(
            "ScaledObject", ("spec", "minReplicaCount"), "two", "minReplicaCount", id="keda-wrong-type"
        ),
        pytest.param(
            "PodMonitor", ("spec", "podMetricsEndpoints"), "http", "podMetricsEndpoints", id="podmonitor-type"
        ),
        pytest.param("Deployment", ("spec", "replica"), 2, "replica", id="core-unknown-field"),
    ],
)
def test_a_broken_object_is_refused(
    with_crds: KubeCluster, kind: str, path: tuple[str, ...], value: Any, expected: str
) -> None:
    """The dry run is a real check: the same command refuses an object the schemas do not allow."""
    (doc,) = [d for d in docs("keda") if d["kind"] == kind][:1]
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    r = _kubectl(
        with_crds, "apply", "--dry-run=server", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(doc)
    )
    assert r.returncode != 0, r.stdout
    assert expected in r.stderr, r.stderr
