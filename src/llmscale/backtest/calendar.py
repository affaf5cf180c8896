"""Where a backtest's time line sits on the calendar: what a guards' ``schedule`` is read against.

A backtest's clock starts at 0 with the first request. A schedule such as "at least 6 replicas
from 07:30 on weekdays" needs the wall time of that 0: the trace's own first timestamp when it
has one (an Azure or BurstGPT file's, moved by ``--start-s`` when the run starts later in it),
``--start-at`` when the user gives one, and otherwise a Monday at 00:00 UTC, so a synthetic
workload's first hour is a Monday's first hour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime

from llmscale.errors import ConfigError

__all__ = ["DEFAULT_START_UNIX_S", "parse_start_at", "run_start_unix_s"]

#: 2026-01-05T00:00:00Z, a Monday
DEFAULT_START_UNIX_S = datetime(2026, 1, 5, tzinfo=UTC).timestamp()


def parse_start_at(text: str, where: str = "--start-at") -> float:
    """Unix seconds of an ISO 8601 date-time (no offset: UTC), or of a plain number of seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError as e:
            raise ConfigError(
                f"{where} {text!r}: not an ISO 8601 date-time (e.g. 2026-03-02T07:00:00+01:00) "
                "nor Unix seconds"
            ) from e
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{where} {text!r}: Unix seconds must be finite and >= 0")
    return seconds


def run_start_unix_s(meta: Mapping[str, object], start_at: str | None, window_start_s: float = 0.0) -> float:
    """Unix time of the run's t = 0: ``start_at`` when given, else the trace's first timestamp
    (``meta['start_timestamp']``) plus ``window_start_s``, else :data:`DEFAULT_START_UNIX_S`."""
    if start_at is not None:
        return parse_start_at(start_at)
    label = meta.get("start_timestamp")
    if isinstance(label, str) and label.strip():
        try:
            return parse_start_at(label, "the trace's first timestamp") + window_start_s
        except ConfigError:
            pass  # a timestamp format llmscale reads but cannot place (e.g. seconds of nothing)
    return DEFAULT_START_UNIX_S
