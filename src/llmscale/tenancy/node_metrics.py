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

import asyncio
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
    errors: list[str] | None = None,
) -> NodeSample:
    """One instant query per reading against Prometheus at ``base_url``; a missing reading is None.

    Each query ends within ``timeout_s`` (the whole request: :mod:`llmscale.metrics.promapi`); one
    that fails, times out, or is answered with anything but a single finite sample reads None,
    and the node check fails on it (no data, no scale-up). Unlike the PromQL of the fleet, the
    three are read concurrently on one client, so a node check takes one deadline, not three.
    ``errors``, when given, collects why a reading could not be had (Prometheus unreachable or
    answering malformed): a reading Prometheus answered with no sample is missing, not an error.
    """
    from llmscale.metrics.promapi import run_sync

    q = {**NODE_QUERIES, **(queries or {})}
    keys = ("free_memory_bytes", "cpu_throttled_ratio", "disk_io_util")
    exprs = [q[key].format(node=node_selector, window=window) for key in keys]

    async def read_all() -> list[float | None]:
        from llmscale.metrics.promapi import new_client

        async with new_client(timeout_s, connections=len(exprs)) as client:
            reads = (_scalar(client, base_url, e, timeout_s, at_s, errors) for e in exprs)
            return list(await asyncio.gather(*reads))

    values = dict(zip(keys, run_sync(read_all), strict=True))
    return NodeSample(values["free_memory_bytes"], values["cpu_throttled_ratio"], values["disk_io_util"])


async def _scalar(
    client: object, base_url: str, expr: str, timeout_s: float, at_s: float | None, errors: list[str] | None
) -> float | None:
    from llmscale.metrics.promapi import PrometheusError, fetch

    params = {"query": expr}
    if at_s is not None:
        params["time"] = f"{at_s:.3f}"
    try:
        answer = await fetch(
            client, base_url.rstrip("/"), "/api/v1/query", params, query=expr, timeout_s=timeout_s
        )
        answer.expect("vector", "scalar")
    except PrometheusError as e:
        if errors is not None:
            errors.append(str(e))
        return None
    if len(answer.series) != 1:
        return None
    v = answer.series[0].points[0][1]
    return v if math.isfinite(v) else None
