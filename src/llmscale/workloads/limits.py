"""The sane ranges a workload must stay in, written once; loaders and transforms check against them.

A value outside them is a corrupt row or a slip of the unit (milliseconds read as seconds,
epoch seconds read as years), never a request one could replay, and letting it through costs
a traceback deep in numpy or a replay that never ends:

* a token count of 1e30 overflows int64 when converted (it came out as a negative count);
* an arrival at 1e300 s overflowed the per-minute binning of the workload summary;
* a two-row trace spanning 1e9 s made the controller tick 6.7e7 times (about 2 hours of CPU in
  the pure-Python build, measured at ~100 us a tick) to simulate two requests;
* ``--rate-scale 1e9`` on a 20-request trace asked numpy for 2e10 x 8 bytes = 149 GiB.

Each limit's message names it, so a user whose data really is that large knows what to cut.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BYTES_PER_SCALED_REQUEST",
    "MAX_ABS_TIME_S",
    "MAX_REQUESTS",
    "MAX_SPAN_S",
    "MAX_TOKENS",
    "describe_span",
]

#: Longest prompt or output a request may have, tokens. The longest context window served today
#: is 10 million tokens (Llama 4 Scout); a count above that is not a request. Far below 2^53, so
#: every count is exact as a float64 and as an int64.
MAX_TOKENS: Final = 10_000_000

#: Largest magnitude of a time value in a trace, seconds: 1e11 s as a Unix time is the year 5138,
#: beyond any real clock, and 1e11 / 60 s per summary bin stays an exact int64. A value above it
#: is a unit slip (epoch milliseconds are ~1.7e12 today) or a corrupt row.
MAX_ABS_TIME_S: Final = 1e11

#: Longest span a replay covers, first to last request: 31 days. The published traces fit (Azure's
#: week-long 2024 trace, ServeGen's 14 days); a longer one is cut with start_s / duration_s.
#: Cost of the limit itself: at the fastest controller tick (knative-kpa, 2 s) 31 days is 1.34
#: million ticks, minutes of CPU even with no request in flight.
MAX_SPAN_S: Final = 31 * 86400.0

#: Most requests a workload may hold. 20 million requests is ~1.5 GB while ServeGen merges them
#: (three 8-byte arrays plus sort scratch) and ~28 hours of ServeGen m-large at its 196 req/s mean.
MAX_REQUESTS: Final = 20_000_000

#: Peak bytes :func:`llmscale.workloads.transform.rate_scale` holds per request it produces, for
#: the estimate it refuses with. Measured with tracemalloc on a 500,000-request workload: 73 B
#: at k = 0.5, 93 at 2, 103 at 4, 109 at 10 (index, jitter, bootstrap and sort arrays on top of
#: the three output columns); 112 covers large k.
BYTES_PER_SCALED_REQUEST: Final = 112


def describe_span(span_s: float) -> str:
    """A span in seconds as a person reads it: ``"2.7e+09 s (86 years)"``, ``"90000 s (25.0 h)"``."""
    if span_s >= 2 * 365 * 86400.0:
        return f"{span_s:.3g} s ({span_s / (365.25 * 86400.0):,.0f} years)"
    if span_s >= 2 * 86400.0:
        return f"{span_s:,.0f} s ({span_s / 86400.0:,.1f} days)"
    return f"{span_s:,.0f} s ({span_s / 3600.0:,.1f} h)"
