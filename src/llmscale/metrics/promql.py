"""The PromQL :class:`~llmscale.metrics.prometheus.PrometheusSource` asks, one query per signal input.

Every query returns one series per replica, labelled by the replica label
(default ``pod``), so the answer folds straight into per-replica samples under
the exporter's own metric names (the keys ``signals/window.py`` reads):

* a gauge or counter ``X``: ``sum by (pod) (X{sel})`` — or ``avg`` for the
  ratios :func:`llmscale.metrics.exposition.aggregation_of` averages, so a
  Prometheus answer and a direct scrape of the same page agree;
* a histogram family ``F``: ``sum by (pod, le) (F_bucket{sel})``, plus
  ``sum by (pod) (F_sum{sel})`` and ``sum by (pod) (F_count{sel})``;
* vLLM's renamed metrics read the new name and fall back to the old one per
  pod: ``(new) or ((old) unless on (pod) (new))``, so a fleet half-way through
  an upgrade reads each pod under whichever name it exports, and a pod that
  exports both (0.9-0.10 do) is read once.

Counters and histograms come back raw (not ``rate``-d): the signal functions
take increases over their window, the same way for Prometheus, scrapes and
the simulator. Every query can be replaced, added or removed (see
:func:`with_overrides`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from llmscale.errors import ConfigError
from llmscale.metrics.exposition import aggregation_of
from llmscale.metrics.names import DCGM, TGI, TRITON, VLLM, VLLM_OLD, Names

__all__ = [
    "BACKENDS",
    "DCGM_FIELDS",
    "HistogramQuery",
    "QuerySet",
    "default_queries",
    "undated_query",
    "with_overrides",
]

BACKENDS: dict[str, tuple[Names, Names | None]] = {
    "vllm": (VLLM, VLLM_OLD),
    "tgi": (TGI, None),
    "triton": (TRITON, None),
}

_GAUGE_FIELDS = ("running", "waiting", "kv_usage", "preemptions", "prompt_tokens", "generation_tokens")
_HISTOGRAM_FIELDS = ("ttft", "e2e", "itl", "tpot", "queue_time", "output_tokens", "prompt_lengths")
_DCGM_FIELDS = (
    DCGM.GPU_UTIL,
    DCGM.MEM_COPY_UTIL,
    DCGM.FB_USED,
    DCGM.FB_FREE,
    DCGM.GR_ENGINE_ACTIVE,
    DCGM.SM_ACTIVE,
    DCGM.SM_OCCUPANCY,
    DCGM.DRAM_ACTIVE,
    DCGM.TENSOR_ACTIVE,
)
#: the values read from the DCGM exporter, not the engine: a page of the engine served from a
#: cache leaves them moving (:class:`~llmscale.metrics.prometheus.PrometheusSource` dates a replica
#: by its engine's series only)
DCGM_FIELDS: frozenset[str] = frozenset(_DCGM_FIELDS)
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FAMILY = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?")


@dataclass(frozen=True, slots=True)
class HistogramQuery:
    """Three PromQL expressions for one histogram family, each by the replica label.

    ``buckets`` must keep the ``le`` label; ``sum`` and ``count`` may be empty
    strings (then the sum reads 0 and the count is the ``+Inf`` bucket).
    """

    buckets: str
    sum: str = ""
    count: str = ""


@dataclass(frozen=True, slots=True)
class QuerySet:
    """Value queries (exporter metric name -> PromQL) and histogram queries (family -> queries)."""

    replica_label: str
    values: Mapping[str, str] = field(default_factory=dict)
    histograms: Mapping[str, HistogramQuery] = field(default_factory=dict)
    #: series per replica and read name, ``count by (pod, __name__) (...)``: the value queries sum
    #: a replica's series, so a label explosion (10,000 queue series) would be summed into a queue
    #: without it (None: not asked)
    series: str | None = None
    #: the selector of the engine's read series, ``{__name__=~"...", sel}`` (gauges, counters and
    #: histogram counts): :func:`undated_query` asks when they last changed (None: not asked)
    read_series: str | None = None


def _selector(name: str, sel: str) -> str:
    return f"{name}{{{sel}}}" if sel else name


def _fallback(new: str, old: str, label: str) -> str:
    return f"({new}) or (({old}) unless on ({label}) ({new}))"


def _value_query(name: str, sel: str, label: str) -> str:
    agg = {"sum": "sum", "mean": "avg", "max": "max"}[aggregation_of(name)]
    return f"{agg} by ({label}) ({_selector(name, sel)})"


def _histogram_query(family: str, sel: str, label: str) -> HistogramQuery:
    return HistogramQuery(
        buckets=f"sum by ({label}, le) ({_selector(family + '_bucket', sel)})",
        sum=f"sum by ({label}) ({_selector(family + '_sum', sel)})",
        count=f"sum by ({label}) ({_selector(family + '_count', sel)})",
    )


def _clean_selector(selector: str, what: str) -> str:
    sel = selector.strip()
    if sel.startswith("{") and sel.endswith("}"):
        sel = sel[1:-1].strip()
    if "{" in sel or "}" in sel:
        raise ConfigError(f"{what} = {selector!r}: give label matchers only, e.g. 'namespace=\"llm\"'")
    return sel


def _check_label(label: str, what: str) -> None:
    if not _LABEL_NAME.fullmatch(label):
        raise ConfigError(f"{what} = {label!r} is not a Prometheus label name")


def default_queries(
    backend: str = "vllm",
    *,
    replica_label: str = "pod",
    selector: str = "",
    dcgm: bool = True,
    dcgm_replica_label: str | None = None,
    dcgm_selector: str = "",
) -> QuerySet:
    """The queries for ``backend`` (vllm, tgi, triton), plus the DCGM fields when ``dcgm``.

    ``selector`` holds label matchers for the engine's series
    (``'namespace="llm",job="vllm"'``); DCGM series come from another job, so
    they have their own selector and replica label (a DCGM exporter scraped
    without ``honor_labels`` carries the pod as ``exported_pod``).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}, must be one of {', '.join(sorted(BACKENDS))}")
    _check_label(replica_label, "replica_label")
    dcgm_label = dcgm_replica_label or replica_label
    _check_label(dcgm_label, "dcgm_replica_label")
    sel = _clean_selector(selector, "selector")
    dsel = _clean_selector(dcgm_selector, "dcgm_selector")
    names, old = BACKENDS[backend]
    values: dict[str, str] = {}
    for f in _GAUGE_FIELDS:
        name = getattr(names, f)
        if name is None:
            continue
        q = _value_query(name, sel, replica_label)
        old_name = None if old is None else getattr(old, f)
        if old_name is not None and old_name != name:
            q = _fallback(q, _value_query(old_name, sel, replica_label), replica_label)
        values[name] = q
    histograms: dict[str, HistogramQuery] = {}
    for f in _HISTOGRAM_FIELDS:
        family = getattr(names, f)
        if family is None:
            continue
        h = _histogram_query(family, sel, replica_label)
        old_family = None if old is None else getattr(old, f)
        if old_family is not None and old_family != family:
            o = _histogram_query(old_family, sel, replica_label)
            h = HistogramQuery(
                buckets=_fallback(h.buckets, o.buckets, replica_label),
                sum=_fallback(h.sum, o.sum, replica_label),
                count=_fallback(h.count, o.count, replica_label),
            )
        histograms[family] = h
    if dcgm:
        for name in _DCGM_FIELDS:
            values[name] = _value_query(name, dsel, dcgm_label)
    # The engine's read names (both generations of vLLM's): the gauges and counters, and each
    # histogram's _count (one per series of the family).
    read = sorted(
        {
            n
            for table in (names, old)
            if table is not None
            for n in [getattr(table, f) for f in _GAUGE_FIELDS]
            + [f"{getattr(table, f)}_count" for f in _HISTOGRAM_FIELDS if getattr(table, f)]
            if n
        }
    )
    # metric names hold no regex metacharacters ([a-zA-Z_:][a-zA-Z0-9_:]*): joined as they are
    matchers = ", ".join(m for m in (f'__name__=~"{"|".join(read)}"', sel) if m)
    series = f"count by ({replica_label}, __name__) ({{{matchers}}})"
    return QuerySet(
        replica_label=replica_label,
        values=values,
        histograms=histograms,
        series=series,
        read_series=f"{{{matchers}}}",
    )


def undated_query(read_series: str, replica_label: str, window_s: float) -> str:
    """The replicas whose read series Prometheus cannot date yet, one series each.

    Those whose series *all* began within the last ``window_s`` and none of which has changed
    since its first sample: what Prometheus holds of them may be one old copy, scraped from a
    cache or a sidecar exporter that started cold and served what it kept (``signals/rates.py``
    starts no rate from such a sample). A replica with any series older than ``window_s`` is
    dated, changed or not (Prometheus scraped it before; an idle replica's counters never move):
    so a fleet scraped for longer than the window has none. Worked, window 60 s, 1 s scrapes:
    a target first scraped 3 s ago whose 3 samples are the same bytes is listed; its 4th, if
    different, was rendered after Prometheus first asked, and the replica is no longer listed.
    """
    w = f"{max(1, round(window_s * 1000))}ms"
    label = replica_label
    # Every replica with read series, less those seen to change and those held for longer than
    # the window. A replica's series are summed, then looked at every second of the window (a
    # subquery): changes() drops the metric name, and a replica's series of different names share
    # their other labels, so changes() of the series themselves is refused ("same labelset").
    # A change between two steps is seen at the next step; a replica first scraped after the last
    # step has no point in the subquery at all, and stays listed (not seen to change).
    return (
        f"count by ({label}) ({read_series})"
        f" unless on ({label}) (changes((sum by ({label}) ({read_series}))[{w}:{UNDATED_STEP}]) > 0)"
        f" unless on ({label}) (count by ({label}) ({read_series} offset {w}))"
    )


#: the step of :func:`undated_query`'s subquery: a window of 60 s is 60 sums of a replica's
#: read series (13 for vLLM; 500 replicas: 390,000 samples a tick); a change between two steps
#: is seen at the next one
UNDATED_STEP = "1s"


def with_overrides(
    base: QuerySet,
    *,
    values: Mapping[str, str | None] | None = None,
    histograms: Mapping[str, HistogramQuery | str | None] | None = None,
) -> QuerySet:
    """``base`` with queries replaced or added (a string) or removed (None).

    A histogram given as a string is a family name in Prometheus whose
    ``_bucket``/``_sum``/``_count`` series are read for the key's family, with
    optional matchers: ``{"vllm:time_to_first_token_seconds": 'my_ttft_seconds{job="a"}'}``.
    """
    vals = dict(base.values)
    for k, q in (values or {}).items():
        if q is None:
            vals.pop(k, None)
        elif not q.strip():
            raise ConfigError(f"query for {k!r} is empty: give PromQL, or null to drop it")
        else:
            vals[k] = q
    hists = dict(base.histograms)
    for k, h in (histograms or {}).items():
        if h is None:
            hists.pop(k, None)
        elif isinstance(h, str):
            m = _FAMILY.fullmatch(h.strip())
            if m is None:
                raise ConfigError(
                    f"histogram {k!r} = {h!r}: give a family name, optionally with {{matchers}}"
                )
            hists[k] = _histogram_query(m.group(1), _clean_selector(m.group(2) or "", k), base.replica_label)
        else:
            hists[k] = h
    return QuerySet(
        replica_label=base.replica_label,
        values=vals,
        histograms=hists,
        series=base.series,
        read_series=base.read_series,
    )
