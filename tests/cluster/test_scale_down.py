"""The pure rules of a Kubernetes scale-down: a pod's load and cost, the victims, the order by version."""

from __future__ import annotations

import pytest

from llmscale.cluster.scale_down import (
    INT32_MAX,
    PodCandidate,
    PodLoad,
    choose_victims,
    deletion_cost,
    pod_load_of,
    scale_down_order,
    server_minor,
)
from llmscale.metrics.exposition import parse_exposition
from llmscale.types import Phase

LABELS = 'model_name="llama",engine="0"'


def page(running: float, waiting: float, gen_sum: float | None = None, gen_count: float = 0) -> str:
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{LABELS}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{LABELS}}} {waiting}",
    ]
    if gen_sum is not None:
        lines += [
            "# TYPE vllm:request_generation_tokens histogram",
            f'vllm:request_generation_tokens_bucket{{{LABELS},le="+Inf"}} {gen_count}',
            f"vllm:request_generation_tokens_sum{{{LABELS}}} {gen_sum}",
            f"vllm:request_generation_tokens_count{{{LABELS}}} {gen_count}",
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(page(3, 1, gen_sum=2120, gen_count=10), PodLoad(3, 1, 848.0), id="own-mean-212"),
        pytest.param(page(2, 0), PodLoad(2, 0, 512.0), id="no-finished-request-default-256"),
        pytest.param(page(0, 0, gen_sum=500, gen_count=5), PodLoad(0, 0, 0.0), id="idle"),
        pytest.param("# TYPE up gauge\nup 1\n", None, id="no-vllm-gauges"),
    ],
)
def test_pod_load_from_a_page(text: str, expected: PodLoad | None) -> None:
    assert pod_load_of(parse_exposition(text)) == expected


@pytest.mark.parametrize(
    ("load", "cost"),
    [
        pytest.param(PodLoad(3, 1, 848.0), 852, id="worked-example"),
        pytest.param(PodLoad(0, 0, 0.0), 0, id="idle-is-zero"),
        pytest.param(PodLoad(1, 0, 0.0), 1, id="a-request-costs-more-than-idle"),
        pytest.param(PodLoad(10**6, 0, 1e12), INT32_MAX, id="clamped-to-int32"),
        pytest.param(None, INT32_MAX, id="unknown-is-never-idle"),
    ],
)
def test_deletion_cost(load: PodLoad | None, cost: int) -> None:
    assert deletion_cost(load) == cost


def pod(name: str, phase: Phase, in_flight: int | None, created_s: float = 0.0) -> PodCandidate:
    load = None if in_flight is None else PodLoad(in_flight, 0, in_flight * 100.0)
    return PodCandidate(name, phase, created_s, load)


@pytest.mark.parametrize(
    ("pods", "k", "victims"),
    [
        pytest.param(
            [pod("a", Phase.READY, 5), pod("b", Phase.READY, 1), pod("c", Phase.READY, 3)],
            1,
            ["b"],
            id="least-loaded-ready",
        ),
        pytest.param(
            [pod("a", Phase.READY, 0), pod("b", Phase.WARMUP, None), pod("c", Phase.READY, 3)],
            2,
            ["b", "a"],
            id="not-ready-first-as-the-replicaset",
        ),
        pytest.param(
            [pod("a", Phase.READY, None), pod("b", Phase.READY, 9)],
            1,
            ["b"],
            id="unknown-load-kept",
        ),
        pytest.param(
            [pod("old", Phase.READY, 2, created_s=1.0), pod("new", Phase.READY, 2, created_s=5.0)],
            1,
            ["new"],
            id="tie-youngest-first",
        ),
        pytest.param([pod("a", Phase.READY, 1)], 0, [], id="none"),
    ],
)
def test_choose_victims(pods: list[PodCandidate], k: int, victims: list[str]) -> None:
    assert [p.name for p in choose_victims(pods, k)] == victims


@pytest.mark.parametrize(
    ("major", "minor", "expected"),
    [("1", "20", 20), ("1", "27+", 27), ("1", "", None), ("2", "0", None), (None, None, None)],
)
def test_server_minor(major: str | None, minor: str | None, expected: int | None) -> None:
    assert server_minor(major, minor) == expected


@pytest.mark.parametrize(
    ("kind", "minor", "via_keda", "override", "order", "warns"),
    [
        pytest.param("Deployment", 22, False, "auto", "deletion-cost", None, id="1.22-honours"),
        pytest.param("Deployment", 30, True, "auto", "deletion-cost", None, id="keda-1.30-honours"),
        pytest.param("Deployment", 20, False, "auto", "explicit", "v1.20", id="1.20-explicit"),
        pytest.param("Deployment", 21, False, "auto", "explicit", "alpha", id="1.21-gate-off-by-default"),
        pytest.param("Deployment", 20, True, "auto", "annotate-only", "KEDA", id="keda-1.20-cannot-choose"),
        pytest.param("Deployment", None, False, "auto", "annotate-only", "unknown", id="unknown-version"),
        pytest.param("StatefulSet", 30, False, "auto", "off", "highest ordinal", id="statefulset"),
        pytest.param("Deployment", 21, False, "deletion-cost", "deletion-cost", None, id="gate-turned-on"),
    ],
)
def test_scale_down_order(
    kind: str, minor: int | None, via_keda: bool, override: str, order: str, warns: str | None
) -> None:
    got, warning = scale_down_order(kind, minor, via_keda=via_keda, override=override)
    assert got == order
    if warns is None:
        assert warning is None
    else:
        assert warning is not None and warns in warning
