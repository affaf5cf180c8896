"""Seed 003 3.1's node readings, live: node-exporter and cAdvisor through Prometheus.

The metric names are the exporters' own (node-exporter's ``meminfo`` and
``diskstats`` collectors, cAdvisor's CFS counters as the kubelet exports them):

* free memory: ``node_memory_MemAvailable_bytes`` (the kernel's MemAvailable:
  free memory plus what page cache and slabs could give back, what a new pod
  can actually get; MemFree would count a node full of page cache as full);
* CPU throttling: throttled CFS periods over all CFS periods of the node's
  containers, ``container_cpu_cfs_throttled_periods_total`` /
  ``container_cpu_cfs_periods_total``, both as rates over ``window``;
* disk IO: ``rate(node_disk_io_time_seconds_total[window])``, the seconds per
  second a device had I/O in flight (iostat's %util), of the busiest device.

Each query is a template with ``{node}`` (the node's selector, e.g.
``instance="10.0.0.5:9100"``) and ``{window}``; deployments whose exporters
label nodes differently override them (``queries=``). A query that fails or
returns nothing reads as None, which :func:`~llmscale.tenancy.node_checks.check_node`
fails: no data, no scale-up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from llmscale.tenancy.node_checks import NodeSample

__all__ = ["NODE_QUERIES", "read_node_sample"]

#: reading -> PromQL template; ``{node}`` is a label selector body, ``{window}`` a range like ``1m``
NODE_QUERIES: Final[Mapping[str, str]] = {
    "free_memory_bytes": "min(node_memory_MemAvailable_bytes{{{node}}})",
    "cpu_throttled_ratio": (
        "sum(rate(container_cpu_cfs_throttled_periods_total{{{node}}}[{window}]))"
        " / sum(rate(container_cpu_cfs_periods_total{{{node}}}[{window}]))"
    ),
    "disk_io_util": "max(rate(node_disk_io_time_seconds_total{{{node}}}[{window}]))",
}


def read_node_sample(
    base_url: str,
    node_selector: str,
    *,
    window: str = "1m",
    queries: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
    at_s: float | None = None,
) -> NodeSample:
    """One instant query per reading against Prometheus at ``base_url``; a missing reading is None."""
    import httpx

    q = {**NODE_QUERIES, **(queries or {})}
    values: dict[str, float | None] = {}
    with httpx.Client(timeout=timeout_s) as client:
        for key in ("free_memory_bytes", "cpu_throttled_ratio", "disk_io_util"):
            expr = q[key].format(node=node_selector, window=window)
            params = {"query": expr}
            if at_s is not None:
                params["time"] = f"{at_s:.3f}"
            values[key] = _scalar(client, base_url.rstrip("/") + "/api/v1/query", params)
    return NodeSample(values["free_memory_bytes"], values["cpu_throttled_ratio"], values["disk_io_util"])


def _scalar(client: object, url: str, params: Mapping[str, str]) -> float | None:
    import httpx

    assert isinstance(client, httpx.Client)
    try:
        resp = client.get(url, params=dict(params))
        doc = resp.json()
    except (httpx.HTTPError, ValueError):
        return None
    if resp.status_code != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        return None
    result = (doc.get("data") or {}).get("result") or []
    if len(result) != 1:
        return None
    try:
        v = float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
