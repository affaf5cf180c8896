"""The :class:`Workload` value: a request trace as three aligned numpy arrays.

Every loader, generator, preset and transformation in :mod:`llmscale.workloads`
returns one of these, so the simulator reads one shape of data whatever the
source. Invariants (checked on construction, so a Workload in hand is valid):

* at least one request;
* ``arrival_s`` float64, finite, sorted ascending, ``arrival_s[0] == 0.0``
  (loaders shift the trace so its first request arrives at 0);
* ``input_tokens`` / ``output_tokens`` int64, every value >= 1;
* ``meta`` a JSON-serialisable mapping (format, path, rows, seed, notes, ...).

The arrays are private read-only copies: a Workload cannot change after it is
made, which lets the simulator, the report and a cache share one safely.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Workload"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Fixed 60 s bins from t=0 for the "peak 1-min rate": that is how the Azure
# conversation trace's published 8.5 req/s peak is reproduced (8.45 measured).
_PEAK_BIN_S = 60.0


def _frozen_copy(values: Any, dtype: type[np.generic], what: str) -> npt.NDArray[Any]:
    arr = np.array(values, dtype=dtype, copy=True)
    if arr.ndim != 1:
        raise ValueError(f"Workload.{what} must be 1-D, got shape {arr.shape}")
    arr.flags.writeable = False
    return arr


# eq=False on purpose: a generated __eq__ would compare numpy arrays with ``==``
# (ambiguous truth value) and a generated __hash__ would hash them (TypeError).
# Workloads compare by identity; compare arrays explicitly when needed.
@dataclass(frozen=True, eq=False)
class Workload:
    """An immutable request trace: arrival times and token counts.

    Attributes:
        name: Short identifier, e.g. ``"azure_llm_2023_conv"`` or ``"preset:default"``.
        arrival_s: Arrival time of each request in seconds, sorted, first at 0.0.
        input_tokens: Prompt length of each request (tokens, >= 1).
        output_tokens: Generated length of each request (tokens, >= 1).
        meta: JSON-serialisable provenance: ``format``, ``path``, ``rows``,
            ``seed``, ``sorted``, ``clamped_rows``, ``rate_scale``, ``window``, ...
    """

    name: str
    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    meta: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        arrival_s = _frozen_copy(self.arrival_s, np.float64, "arrival_s")
        input_tokens = _frozen_copy(self.input_tokens, np.int64, "input_tokens")
        output_tokens = _frozen_copy(self.output_tokens, np.int64, "output_tokens")
        n = arrival_s.size
        if n == 0:
            raise ValueError("Workload needs at least one request")
        if input_tokens.size != n or output_tokens.size != n:
            raise ValueError(
                f"Workload arrays differ in length: arrival_s {n}, "
                f"input_tokens {input_tokens.size}, output_tokens {output_tokens.size}"
            )
        if not np.all(np.isfinite(arrival_s)):
            raise ValueError("Workload.arrival_s has non-finite values")
        if n > 1 and bool(np.any(np.diff(arrival_s) < 0)):
            raise ValueError("Workload.arrival_s must be sorted ascending (use Workload.from_arrays)")
        if arrival_s[0] != 0.0:
            raise ValueError(
                f"Workload.arrival_s must start at 0.0, starts at {arrival_s[0]!r} (use Workload.from_arrays)"
            )
        if int(input_tokens.min()) < 1 or int(output_tokens.min()) < 1:
            raise ValueError("Workload token counts must all be >= 1")
        meta = dict(self.meta)
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Workload.meta must be JSON-serialisable: {exc}") from exc
        object.__setattr__(self, "arrival_s", arrival_s)
        object.__setattr__(self, "input_tokens", input_tokens)
        object.__setattr__(self, "output_tokens", output_tokens)
        object.__setattr__(self, "meta", meta)

    @classmethod
    def from_arrays(
        cls,
        name: str,
        arrival_s: npt.ArrayLike,
        input_tokens: npt.ArrayLike,
        output_tokens: npt.ArrayLike,
        meta: Mapping[str, object] | None = None,
    ) -> Workload:
        """Build a Workload from raw arrays, normalising the time axis.

        Arrivals are stably sorted (the token arrays follow the same order) and
        shifted so the first request arrives at 0.0. ``meta`` gains
        ``sorted`` (True when the input was out of order and had to be sorted)
        and ``t0_offset_s`` (the raw time of the first request, in seconds of
        the input's own axis), unless the caller already set them.
        """
        t = np.asarray(arrival_s, dtype=np.float64)
        inp = np.asarray(input_tokens, dtype=np.int64)
        out = np.asarray(output_tokens, dtype=np.int64)
        out_meta: dict[str, object] = dict(meta or {})
        was_sorted = t.size < 2 or not bool(np.any(np.diff(t) < 0))
        if not was_sorted:
            order = np.argsort(t, kind="stable")
            t, inp, out = t[order], inp[order], out[order]
        t0 = float(t[0]) if t.size else 0.0
        out_meta.setdefault("sorted", not was_sorted)
        out_meta.setdefault("t0_offset_s", t0)
        return cls(name=name, arrival_s=t - t0, input_tokens=inp, output_tokens=out, meta=out_meta)

    # -- derived quantities -------------------------------------------------

    @property
    def num_requests(self) -> int:
        """Number of requests."""
        return int(self.arrival_s.size)

    def __len__(self) -> int:
        return self.num_requests

    @property
    def duration_s(self) -> float:
        """Last arrival minus first arrival, in seconds (0.0 for a single request)."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def mean_rate_rps(self) -> float:
        """Requests per second over the trace span: ``num_requests / duration_s``.

        0.0 when the span is zero (one request, or all at the same instant):
        there is no time axis to divide by.
        """
        span_s = self.duration_s
        return self.num_requests / span_s if span_s > 0 else 0.0

    def peak_rate_rps(self, bin_s: float = _PEAK_BIN_S) -> float:
        """Largest request count in fixed ``bin_s`` bins from t=0, divided by ``bin_s``."""
        if bin_s <= 0:
            raise ValueError(f"bin_s must be > 0, got {bin_s}")
        counts = np.bincount((self.arrival_s // bin_s).astype(np.int64))
        return float(counts.max()) / bin_s

    def summary(self) -> dict[str, object]:
        """JSON-able statistics: counts, rates and token-length percentiles."""
        inp = self.input_tokens
        out = self.output_tokens
        return {
            "name": self.name,
            "requests": self.num_requests,
            "duration_s": round(self.duration_s, 6),
            "mean_rps": round(self.mean_rate_rps, 6),
            "peak_1min_rps": round(self.peak_rate_rps(_PEAK_BIN_S), 6),
            "input_mean_tokens": round(float(inp.mean()), 3),
            "input_p50_tokens": float(np.percentile(inp, 50)),
            "input_p99_tokens": float(np.percentile(inp, 99)),
            "output_mean_tokens": round(float(out.mean()), 3),
            "output_p50_tokens": float(np.percentile(out, 50)),
            "output_p99_tokens": float(np.percentile(out, 99)),
        }

    def to_csv(self, path: str | Path) -> None:
        """Write the plain-CSV format (``arrival_s,input_tokens,output_tokens``).

        ``load_trace`` reads it back exactly (arrival times are written as the
        shortest decimal that round-trips the float64).
        """
        rows = zip(
            self.arrival_s.tolist(), self.input_tokens.tolist(), self.output_tokens.tolist(), strict=True
        )
        lines = ["arrival_s,input_tokens,output_tokens"]
        lines.extend(f"{a!r},{i},{o}" for a, i, o in rows)
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def __repr__(self) -> str:
        return (
            f"Workload(name={self.name!r}, requests={self.num_requests}, "
            f"duration_s={self.duration_s:.3f}, mean_rps={self.mean_rate_rps:.3f})"
        )
