"""The quantities of a decision log, read from Prometheus over a time range (``--prometheus``).

One range query per quantity (:func:`llmscale.metrics.prometheus.query_ranges`), each
aggregated to one series: the fleet's rates and latencies from vLLM's own metrics (``selector``
picks its series, e.g. ``job="vllm"``), the signals only llmscale computes (queue entropy,
bandwidth P95, ghost replicas, tenant drift) from the controller's ``llmscale_signal_value``,
and the replica counts from its ``llmscale_spec_replicas`` / ``llmscale_desired_replicas``
(``controller/server.py``). A query with no data leaves its column out, as a decision log
that never logged it would; each step of the range is one tick. Each query ends within
``timeout_s``; an answer that is not Prometheus's, or none in time, is a one-line
:class:`~llmscale.metrics.promapi.PrometheusError` (exit code 2) naming the server and the query.
"""

from __future__ import annotations

import math

from llmscale.analyze.log import TickTable, check_tick_number, table_from_rows
from llmscale.errors import ConfigError
from llmscale.metrics.names import VllmMetric as V

__all__ = ["range_queries", "read_prometheus_range"]

#: the signals only the controller computes, read from its /metrics
_CONTROLLER_SIGNALS = ("queue_entropy", "bw_saturation_p95", "ghost_replicas", "tenant_drift")


def range_queries(selector: str = "", window: str = "1m") -> dict[str, str]:
    """Column name -> PromQL; the names are the catalogue's, so the log's aliases apply."""
    sel = "{" + selector + "}" if selector else ""

    def rate(name: str) -> str:
        return f"sum(rate({name}{sel}[{window}]))"

    def p99(family: str) -> str:
        return f"histogram_quantile(0.99, sum by (le) (rate({family}_bucket{sel}[{window}])))"

    queries = {
        "request_rate_rps": rate(V.E2E + "_count"),
        "generation_tps": rate(V.GENERATION_TOKENS),
        "ttft_p99_s": p99(V.TTFT),
        "e2e_p99_s": p99(V.E2E),
        "queue_waiting": f"sum({V.WAITING}{sel})",
        "running": f"sum({V.RUNNING}{sel})",
        "serving_replicas": f"count({V.RUNNING}{sel})",
        "prompt_len_mean_tokens": f"{rate(V.PROMPT_TOKENS)} / {rate(V.E2E + '_count')}",
        "__spec": "max(llmscale_spec_replicas)",
        "__final": "max(llmscale_desired_replicas)",
    }
    for name in _CONTROLLER_SIGNALS:
        queries[name] = f'max(llmscale_signal_value{{signal="{name}"}})'
    return queries


def read_prometheus_range(
    url: str,
    *,
    start_s: float,
    end_s: float,
    step_s: float = 15.0,
    selector: str = "",
    window: str = "1m",
    timeout_s: float = 30.0,
) -> TickTable:
    """A :class:`TickTable` with one row per step of ``[start_s, end_s]``. Raises ConfigError
    when no query has any data, a PrometheusError when Prometheus gives no usable answer."""
    from llmscale.metrics.prometheus import query_ranges

    queries = range_queries(selector, window)
    series = query_ranges(url, queries, start_s, end_s, step_s, timeout_s=timeout_s)
    # The log's edge, here: an answer of -3 serving replicas or 1e308 req/s is no fleet's
    for name, values in series.items():
        count = name in ("serving_replicas", "__spec", "__final")
        for t, v in values.items():
            check_tick_number(
                f"prometheus {url}: query {queries[name]!r} at t={t:.0f}", "value", v, count=count
            )
    times = sorted({t for s in series.values() for t in s})
    if not times:
        raise ConfigError(f"{url}: no data between {start_s} and {end_s} for any query of `llmscale analyze`")
    rows = []
    for t in times:
        sig = {n: s[t] for n, s in series.items() if t in s and not n.startswith("__")}
        w, n = sig.get("queue_waiting"), sig.get("serving_replicas")
        if w is not None and n:
            sig["queue_per_replica"] = w / n
        spec = series["__spec"].get(t)
        rows.append(
            {
                "time_s": t,
                "spec": spec if spec is not None else sig.get("serving_replicas", math.nan),
                "ready": sig.get("serving_replicas", math.nan),
                "final": series["__final"].get(t, spec if spec is not None else math.nan),
                "signals": sig,
            }
        )
    return table_from_rows(url, "live", rows)
