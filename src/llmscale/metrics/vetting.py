"""Whether a replica's sample can be read as its load: the metrics llmscale reads are finite, >= 0.

Every quantity the signals read is a count, a counter, a ratio, a percentage, MiB or seconds:
none can be negative, infinite or NaN. A page that says otherwise comes from a broken exporter
(a counter that wrapped, a gauge computed from a division by zero), a proxy in the way, or
an attack; it is not the replica's load. Read as data, one replica's negative counters made
the fleet's request rate read 0.0 for a minute while 0.6 req/s arrived (the per-replica rates
summed to below zero), and the jump back from the negatives read as a 30x spike. So such a
sample makes its replica *unknown*, like a failed scrape: the guards hold scale-down, and a
fleet whose replicas are all unknown never scales down.

Only the names llmscale reads are judged (``metrics/names.py``'s tables, the DCGM fields, the
simulator's own series): an exporter's unrelated series (a summary's NaN quantile, a Go
runtime gauge) must not blind the controller to a healthy replica.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from llmscale.metrics.names import DCGM, SIM, TGI, TRITON, VLLM, VLLM_OLD, Names
from llmscale.types import HistogramView

__all__ = ["READ_HISTOGRAMS", "READ_VALUES", "distrust"]

_HISTOGRAM_FIELDS = ("ttft", "e2e", "itl", "tpot", "queue_time")


def _names(tables: tuple[Names, ...], fields: tuple[str, ...]) -> frozenset[str]:
    return frozenset(n for t in tables for f in fields if (n := getattr(t, f)) is not None)


_TABLES = (VLLM, VLLM_OLD, TGI, TRITON)
_VALUE_FIELDS = tuple(f for f in Names.__dataclass_fields__ if f not in _HISTOGRAM_FIELDS)

#: scalar series (gauges, counters) llmscale reads, under every exporter's name
READ_VALUES: frozenset[str] = (
    _names(_TABLES, _VALUE_FIELDS)
    | frozenset(v for k, v in vars(DCGM).items() if k.isupper() and isinstance(v, str))
    | frozenset(v for k, v in vars(SIM).items() if k.isupper() and isinstance(v, str))
    | frozenset({"nv_gpu_utilization"})  # Triton's own GPU gauge (metrics/exposition.py)
)
#: histogram families llmscale reads
READ_HISTOGRAMS: frozenset[str] = _names(_TABLES, _HISTOGRAM_FIELDS)


def _bad(v: float) -> bool:
    return not 0.0 <= v < math.inf  # False for NaN too: every comparison with NaN is False


def distrust(
    values: Mapping[str, float],
    histograms: Mapping[str, HistogramView],
    nan: Collection[str] = (),
) -> str | None:
    """Why ``values`` / ``histograms`` cannot be read as the replica's load; None when they can.

    ``nan``: names the page had a NaN sample for (a parser leaves those out of ``values``).
    Cost: one C-level min and sum over the values on a clean page (the usual case); the read
    names are walked only when something is off somewhere on the page.
    """
    bad = [n for n in nan if n in READ_VALUES or n in READ_HISTOGRAMS]
    if bad:
        return f"NaN sample(s) of {', '.join(sorted(bad))}: no value is not zero"
    vals = values.values()
    # NaN anywhere makes the sum NaN, a negative value the min negative, an infinity the sum infinite.
    if vals and not (min(vals) >= 0.0 and sum(vals) < math.inf):
        off = sorted(n for n in values.keys() & READ_VALUES if _bad(values[n]))
        if off:
            shown = ", ".join(f"{n} = {values[n]!r}" for n in off[:3])
            return f"impossible value(s): {shown}{' ...' if len(off) > 3 else ''} (must be finite, >= 0)"
    for family in histograms.keys() & READ_HISTOGRAMS:
        h = histograms[family]
        cum = h.cumulative
        if (cum and not (min(cum) >= 0.0 and sum(cum) < math.inf)) or _bad(h.count) or _bad(h.sum):
            tail = list(cum)[-3:]
            return f"impossible histogram {family}: counts ...{tail}, sum {h.sum!r} (must be finite, >= 0)"
    return None
