"""A decision log (or a Prometheus range) as columns of numbers, one row per controller tick.

One format, two writers: ``llmscale backtest --decisions`` and ``llmscale run``'s decision log
(``controller/decision_log.py``) both write a tick's record with
:meth:`llmscale.types.TickRecord.as_json` (its numbers under ``inputs``, its time as ``time_s``,
the replicas after guards as ``desired``); a live line adds a trace id, repeated when a scale
failed after its line was written (the reader keeps the last line of each trace id, as that
module asks). Live logs written before the formats merged name these ``signals``, ``ts_unix`` and
``final``: they are read too. Failed ticks (``error`` set, no numbers) are skipped.

A line carries the fleet's numbers under ``observed`` (``controller/core.py``'s
``LOGGED_SIGNALS``: load, throughput, P99, queue entropy, bandwidth, diagnostics), and the
numbers its policy read, whose names differ between policies: ``slo``
logs ``arrival_rps`` and ``ttft_p99_s``, ``bandwidth-entropy`` logs ``bw_p95`` and ``entropy``,
``three-layer`` logs ``qps``. :data:`QUANTITIES` maps each quantity the analyses need to the
names that carry it, first match wins; an analysis whose quantity no line carries says so
instead of guessing.

A backtest log holds every policy's ticks, one after the other: :func:`read_decision_log`
keeps one policy (``policy=``), by default the first that is not the oracle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmscale.errors import ConfigError
from llmscale.ranges import shown_value

__all__ = [
    "MAX_MAGNITUDE",
    "QUANTITIES",
    "TickTable",
    "check_tick_number",
    "read_decision_log",
    "table_from_rows",
]

#: quantity -> the signal names that carry it, in order of preference
QUANTITIES: dict[str, tuple[str, ...]] = {
    # offered load: arrivals first; finished requests per second is the proxy the catalogue has
    "load_rps": ("arrival_rps", "request_rate_rps", "qps"),
    # what the fleet delivered: generated tokens per second, else finished requests per second
    "throughput": ("generation_tps", "request_rate_rps"),
    # the tail the SLO is about, and what the latency predictors predict
    "p99_s": ("ttft_p99_s", "e2e_p99_s", "p99_s"),
    "queue_entropy": ("queue_entropy", "entropy"),
    "bw_p95": ("bw_saturation_p95", "bw_p95"),
    "queue_waiting": ("queue_waiting",),
    "queue_per_replica": ("queue_per_replica",),
    "running": ("running",),
    "prompt_tokens": ("prompt_len_mean_tokens", "prompt_tokens"),
    "ghost_replicas": ("ghost_replicas",),
    "tenant_drift": ("tenant_drift",),
}


@dataclass(frozen=True)
class TickTable:
    """Columns over ticks in time order; a missing number is NaN.

    ``signals`` holds every number a line logged under its own name; ``spec`` / ``ready`` are
    the fleet before the tick, ``final`` the replicas decided after guards. ``source`` names
    where it came from, for messages.
    """

    source: str
    policy: str
    time_s: np.ndarray
    spec: np.ndarray
    ready: np.ndarray
    final: np.ndarray
    signals: Mapping[str, np.ndarray]
    #: quantity -> the signal name it was read from (only quantities some tick carries)
    resolved: Mapping[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.time_s.size)

    def quantity(self, name: str) -> np.ndarray | None:
        """The column of a :data:`QUANTITIES` entry, or None when no tick logged it."""
        src = self.resolved.get(name)
        return None if src is None else self.signals[src]

    def serving(self) -> np.ndarray:
        """Serving replicas: the ``serving_replicas`` signal where logged, else the ready count."""
        s = self.signals.get("serving_replicas")
        return self.ready if s is None else np.where(np.isfinite(s), s, self.ready)

    def tick_s(self) -> np.ndarray:
        """How long each tick stands for: the gap to the next tick (the last repeats the median)."""
        if self.time_s.size < 2:
            return np.ones_like(self.time_s)
        gaps = np.diff(self.time_s)
        return np.append(gaps, float(np.median(gaps)))


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return math.nan
    f = float(v)  # _row has refused the integers float cannot hold
    return f if math.isfinite(f) else math.nan


#: Largest magnitude a logged number may have: far above any rate, latency or token count
#: (1e15 req/s), far below where the analyses' squares and products overflow (1e154): a log of
#: 1e308 bandwidths doubled to inf in the phase diagram's coordinates.
MAX_MAGNITUDE = 1e15


def check_tick_number(where: str, field: str, v: Any, *, count: bool = False) -> None:
    """Refuse a number no writer of the log wrote; leave non-numbers and NaN to :func:`_number`.

    json reads a 400-digit integer as an int that float() cannot hold (OverflowError), and
    NaN/Infinity are how a writer spells a missing reading. A replica count must lie in
    [0, MAX_REPLICAS] (10,000, the guards' bound): a log whose ``serving_replicas`` was -3 read
    its 20 unchanged ticks as "20 scale-up ticks", and 1e308 serving replicas divided the load
    down to 1e-306 req/s per replica, whose range squared to 0 in the knee. Other signals may be
    negative (a trend) or a rate a hair below 0 from rounding: those are the analyses' to weigh.
    """
    from llmscale.guards import MAX_REPLICAS

    if isinstance(v, bool) or not isinstance(v, int | float):
        return
    shown = shown_value(v)
    try:
        f = float(v)
    except OverflowError:
        raise ConfigError(f"{where}: field {field} = {shown}: not a finite number") from None
    if not math.isfinite(f):
        return
    if count and not 0 <= f <= MAX_REPLICAS:
        raise ConfigError(
            f"{where}: field {field} = {shown}: a replica count must be in [0, {MAX_REPLICAS:,}]"
        )
    if abs(f) > MAX_MAGNITUDE:
        raise ConfigError(f"{where}: field {field} = {shown}: beyond +-{MAX_MAGNITUDE:g}, no reading")


def table_from_rows(
    source: str,
    policy: str,
    rows: Sequence[Mapping[str, Any]],
) -> TickTable:
    """Rows ``{"time_s", "spec", "ready", "final", "signals": {name: number}}`` -> a TickTable."""
    rows = sorted(rows, key=lambda r: float(r["time_s"]))
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r["signals"]))
    cols = {n: np.array([_number(r["signals"].get(n)) for r in rows], dtype=float) for n in names}
    resolved: dict[str, str] = {}
    for q, aliases in QUANTITIES.items():
        for a in aliases:
            if a in cols and np.isfinite(cols[a]).any():
                resolved[q] = a
                break
    return TickTable(
        source=source,
        policy=policy,
        time_s=np.array([float(r["time_s"]) for r in rows], dtype=float),
        spec=np.array([_number(r.get("spec")) for r in rows], dtype=float),
        ready=np.array([_number(r.get("ready")) for r in rows], dtype=float),
        final=np.array([_number(r.get("final")) for r in rows], dtype=float),
        signals=cols,
        resolved=resolved,
    )


def _row(path: Path, lineno: int, doc: Any) -> tuple[str, str | None, dict[str, Any]] | None:
    """(policy, trace id, row) of one line; None for a failed tick. Raises ConfigError on a bad line."""
    where = f"{path}:{lineno}"
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: a decision line must be a JSON object, got {type(doc).__name__}")
    t = doc.get("time_s", doc.get("ts_unix"))
    # compared, not converted: float() of a 400-digit integer raises; no clock reads 1e300 s
    if isinstance(t, bool) or not isinstance(t, int | float) or not -1e300 < t < 1e300:
        raise ConfigError(f"{where}: field time_s (or ts_unix) = {shown_value(t)}: must be a finite number")
    nums = doc.get("inputs", doc.get("signals"))
    if nums is None:
        if doc.get("error") is not None:
            return None
        nums = {}
    if not isinstance(nums, dict):
        raise ConfigError(f"{where}: field inputs/signals must be an object, got {type(nums).__name__}")
    replicas = doc.get("replicas") or {}
    if not isinstance(replicas, dict):
        raise ConfigError(f"{where}: field replicas must be an object, got {type(replicas).__name__}")
    final = doc.get("desired", doc.get("final"))
    observed = doc.get("observed") or {}
    if not isinstance(observed, dict):
        raise ConfigError(f"{where}: field observed must be an object, got {type(observed).__name__}")
    trace = doc.get("trace_id")
    if trace is not None and not isinstance(trace, str):
        raise ConfigError(f"{where}: field trace_id must be a string, got {shown_value(trace)}")
    for key in ("spec", "ready"):
        check_tick_number(where, f"replicas.{key}", replicas.get(key), count=True)
    check_tick_number(where, "desired" if "desired" in doc else "final", final, count=True)
    for section, values in (("observed", observed), ("inputs" if "inputs" in doc else "signals", nums)):
        for k, v in values.items():
            check_tick_number(where, f"{section}.{k}", v, count=k == "serving_replicas")
    # the fleet's numbers every line carries (controller/core.py's LOGGED_SIGNALS), then the policy's
    signals = {
        k: v
        for k, v in {**observed, **nums}.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    drift = doc.get("drift")
    if isinstance(drift, dict):
        # the live log's model-drift readings (controller/drift.py): {"itl": {"ratio": ...}, ...}
        for q in ("itl", "ttft"):
            reading = drift.get(q)
            ratio = reading.get("ratio") if isinstance(reading, dict) else None
            if isinstance(ratio, int | float) and not isinstance(ratio, bool):
                signals.setdefault(f"model_drift_{q}_ratio", ratio)
    row = {
        "time_s": float(t),
        "spec": replicas.get("spec"),
        "ready": replicas.get("ready"),
        "final": final,
        "signals": signals,
    }
    return str(doc.get("policy", "")), trace, row


def read_decision_log(path: str | Path, *, policy: str | None = None) -> TickTable:
    """Read a decision log (either writer) for one policy. Raises ConfigError naming file and line."""
    from llmscale.documents import no_duplicate_keys
    from llmscale.edge import MAX_LOG_BYTES, InputFileError, read_input_text

    p = Path(path)
    try:
        text = read_input_text(p, MAX_LOG_BYTES, what="a decision log")
    except InputFileError as e:
        raise ConfigError(f"{e.path}: cannot read the decision log: {e.problem}") from e
    by_policy: dict[str, list[dict[str, Any]]] = {}
    by_trace: dict[str, tuple[str, int]] = {}
    # "\n" only: str.splitlines() also breaks at U+2028, U+0085 or \x1c, which JSON allows raw
    # inside a string (a policy named "slo\u2028x" made line 1 "not JSON"); "\r" is JSON whitespace
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            # strict as the other documents (llmscale.documents): a repeated key is no line we wrote
            doc = json.loads(line, object_pairs_hook=no_duplicate_keys)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{lineno}, column {e.colno}: not JSON ({e.msg})") from e
        except (ValueError, RecursionError) as e:  # a duplicate key; brackets thousands deep
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            raise ConfigError(f"{p}:{lineno}: not accepted JSON: {why}") from e
        got = _row(p, lineno, doc)
        if got is None:
            continue
        name, trace, row = got
        if name == "oracle" or (not row["signals"] and row["spec"] is None):
            continue
        rows = by_policy.setdefault(name, [])
        if trace is not None and trace in by_trace:
            # a second line of the same tick (its scale failed): it replaces the first
            prev_name, idx = by_trace[trace]
            by_policy[prev_name][idx] = row
            continue
        if trace is not None:
            by_trace[trace] = (name, len(rows))
        rows.append(row)
    if not by_policy:
        raise ConfigError(f"{p}: no controller tick with numbers in this decision log")
    if policy is None:
        policy = next(iter(by_policy))
    elif policy not in by_policy:
        raise ConfigError(f"{p}: no tick of policy {policy!r}; the log has {', '.join(sorted(by_policy))}")
    return table_from_rows(str(p), policy, by_policy[policy])
