"""pod_phase: the rule mapping a pod's state to a replica lifecycle phase (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from llmscale.cluster.kubernetes import KubeScaleTarget, RetryConfig, pod_phase
from llmscale.errors import ConfigError
from llmscale.types import Phase

CREATED = "2026-01-01T00:00:00Z"
T0 = 1767225600.0  # CREATED as epoch seconds


def pod(status: dict[str, Any] | None = None, **meta: Any) -> client.V1Pod:
    return client.V1Pod.from_dict(
        {"metadata": {"name": "p", "creationTimestamp": CREATED, **meta}, "status": status}
    )


#: what kube-scheduler writes on a pod no node fits, 5 s after CREATED
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    "lastTransitionTime": "2026-01-01T00:00:05Z",
}


def running(ready: bool, started: bool) -> dict[str, Any]:
    flag = "True" if ready else "False"
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": flag, "lastTransitionTime": "2026-01-01T00:01:40Z"}],
        "containerStatuses": [
            {
                "name": "c",
                "image": "i",
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "started": started,
                "state": {"running": {"startedAt": "2026-01-01T00:00:30Z"}},
            }
        ],
    }


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(pod(None), (Phase.PENDING, T0), id="no-status-yet"),
        pytest.param(pod({"phase": "Pending"}), (Phase.PENDING, T0), id="unscheduled"),
        pytest.param(
            pod(
                {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "name": "c",
                            "image": "i",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"waiting": {"reason": "ContainerCreating"}},
                        }
                    ],
                }
            ),
            (Phase.PENDING, T0),
            id="container-creating",
        ),
        pytest.param(
            pod({"phase": "Pending", "conditions": [UNSCHEDULABLE]}),
            (Phase.NODE_PENDING, T0 + 5),
            id="unschedulable-waits-for-a-node-since-the-condition",
        ),
        pytest.param(
            pod({"phase": "Pending", "nominatedNodeName": "gpu-node-7"}),
            (Phase.NODE_PENDING, T0),
            id="nominated-node-waits-for-a-node",
        ),
        pytest.param(
            pod(
                {"phase": "Pending", "conditions": [{**UNSCHEDULABLE, "reason": "SchedulerError"}]},
            ),
            (Phase.PENDING, T0),
            id="other-scheduling-failure-is-pending",
        ),
        pytest.param(
            client.V1Pod.from_dict(
                {
                    "metadata": {"name": "p", "creationTimestamp": CREATED},
                    "spec": {"nodeName": "gpu-node-7", "containers": [{"name": "c", "image": "i"}]},
                    "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]},
                }
            ),
            (Phase.PENDING, T0),
            id="bound-pod-has-its-node-whatever-a-stale-condition-says",
        ),
        pytest.param(
            pod(running(ready=False, started=False)), (Phase.LOADING, T0 + 30), id="startup-probe-pending"
        ),
        pytest.param(
            pod(running(ready=False, started=True)), (Phase.WARMUP, T0 + 30), id="started-not-ready"
        ),
        pytest.param(pod(running(ready=True, started=True)), (Phase.READY, T0 + 100), id="ready"),
        pytest.param(
            pod(
                running(ready=True, started=True),
                deletionTimestamp="2026-01-01T00:10:30Z",
                deletionGracePeriodSeconds=30,
            ),
            (Phase.DRAINING, T0 + 600),
            id="terminating-is-draining-even-if-ready",
        ),
        pytest.param(pod({"phase": "Succeeded"}), None, id="succeeded-is-gone"),
        pytest.param(pod({"phase": "Failed"}), None, id="failed-is-gone"),
    ],
)
def test_pod_phase(p: client.V1Pod, expected: tuple[Phase, float] | None) -> None:
    assert pod_phase(p) == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"kind": "ReplicaSet"}, id="kind"),
        pytest.param({"selector": " "}, id="empty-selector"),
        pytest.param({"name": ""}, id="empty-name"),
    ],
)
def test_target_validation(kwargs: dict[str, Any]) -> None:
    base = {"namespace": "ns", "kind": "Deployment", "name": "vllm", "selector": "app=vllm"}
    with pytest.raises(ConfigError):
        KubeScaleTarget(**{**base, **kwargs})


def test_retry_config_validation() -> None:
    with pytest.raises(ConfigError, match="conflict_retries = -1"):
        RetryConfig(conflict_retries=-1)
