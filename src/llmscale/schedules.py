"""Replica bounds by time of day and day of week: the guards' ``schedule``.

A service whose traffic follows office hours wants a higher floor before the morning peak than a
reactive controller would reach in time (a replica takes minutes to load its model), and a lower
ceiling at night. Each rule opens a window at the times of a five-field cron expression (minute,
hour, day of month, month, day of week; evaluated with croniter in the rule's IANA time zone) that
lasts ``duration_s``, and sets ``min_replicas`` and/or ``max_replicas`` while it is open:

.. code-block:: yaml

    guards:
      min_replicas: 1
      max_replicas: 20
      schedule:
        - {name: office-hours, cron: "30 7 * * 1-5", duration_s: 39600, min_replicas: 6,
           timezone: Europe/Berlin}
        - {name: nights, cron: "0 22 * * *", duration_s: 28800, max_replicas: 8}

Overlapping rules: the floor is the highest of the open rules' floors, the ceiling the lowest of
their ceilings; a bound no open rule sets is the guards' own. A floor above the ceiling (two rules
that disagree) is held at the ceiling: more than the ceiling is never asked for. E.g. at 08:00 on a
Tuesday in Berlin the office-hours rule is open (07:30 + 11 h): bounds [6, 20]; at 23:00, nights:
[1, 8].

Times: the controller's time line is Unix seconds live; a backtest's starts at 0 and is placed
on the calendar by its start time (``backtest --start-at``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from llmscale.errors import ConfigError

__all__ = ["ScheduleRule", "parse_schedule", "scheduled_bounds"]

#: the longest window a rule may hold open: a week (a weekly rule's whole period)
MAX_DURATION_S = 7 * 86400.0


@dataclass(frozen=True)
class ScheduleRule:
    """One window: opens at each ``cron`` time (in ``timezone``) and stays open ``duration_s``."""

    cron: str
    duration_s: float
    min_replicas: int | None = None
    max_replicas: int | None = None
    timezone: str = "UTC"
    name: str = ""

    def __post_init__(self) -> None:
        from croniter import croniter

        label = f"schedule rule {self.name!r}" if self.name else "schedule rule"
        if not isinstance(self.cron, str) or len(self.cron.split()) != 5 or not croniter.is_valid(self.cron):
            raise ConfigError(
                f"{label}: cron = {self.cron!r}, must be five fields (minute hour day month weekday), "
                "e.g. '30 7 * * 1-5'"
            )
        d = self.duration_s
        if isinstance(d, bool) or not isinstance(d, int | float) or not (0 < d <= MAX_DURATION_S):
            raise ConfigError(
                f"{label}: duration_s = {d!r}, must be a number in (0, {MAX_DURATION_S:g}] (a week)"
            )
        if self.min_replicas is None and self.max_replicas is None:
            raise ConfigError(f"{label}: sets neither min_replicas nor max_replicas")
        for key in ("min_replicas", "max_replicas"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ConfigError(f"{label}: {key} = {v!r}, must be a whole number >= 0")
        if (
            self.min_replicas is not None
            and self.max_replicas is not None
            and self.min_replicas > self.max_replicas
        ):
            raise ConfigError(
                f"{label}: min_replicas = {self.min_replicas} above max_replicas = {self.max_replicas}"
            )
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError) as e:
            raise ConfigError(f"{label}: timezone = {self.timezone!r}, not an IANA time zone name") from e

    def is_open(self, unix_s: float) -> bool:
        """Whether the window of the latest opening at or before ``unix_s`` still holds."""
        from croniter import croniter

        tz = ZoneInfo(self.timezone)
        # croniter's get_prev is strictly before its start: a microsecond later makes an opening
        # at exactly ``unix_s`` count (cron times are whole minutes).
        now = datetime.fromtimestamp(unix_s, tz=UTC).astimezone(tz) + timedelta(microseconds=1)
        opened: datetime = croniter(self.cron, now).get_prev(datetime)
        return bool(unix_s - opened.timestamp() < self.duration_s)


def parse_schedule(raw: object, where: str = "guards.schedule") -> tuple[ScheduleRule, ...]:
    """Rules from a YAML list of mappings (or rules already); ConfigError naming the item and key."""
    if isinstance(raw, tuple) and all(isinstance(r, ScheduleRule) for r in raw):
        return raw
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise ConfigError(f"{where}: must be a list of rules, got {type(raw).__name__}")
    known = {"cron", "duration_s", "min_replicas", "max_replicas", "timezone", "name"}
    rules: list[ScheduleRule] = []
    for i, item in enumerate(raw):
        if isinstance(item, ScheduleRule):
            rules.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}[{i}]: must be a mapping with cron and duration_s, got {item!r}")
        unknown = sorted(set(map(str, item)) - known)
        if unknown:
            raise ConfigError(f"{where}[{i}]: unknown key(s) {unknown}; known: {', '.join(sorted(known))}")
        missing = [k for k in ("cron", "duration_s") if k not in item]
        if missing:
            raise ConfigError(f"{where}[{i}]: missing {', '.join(missing)}")
        try:
            rules.append(ScheduleRule(**{str(k): v for k, v in item.items()}))
        except ConfigError as e:
            raise ConfigError(f"{where}[{i}]: {e}") from e
    return tuple(rules)


def scheduled_bounds(
    rules: Sequence[ScheduleRule], min_replicas: int, max_replicas: int, unix_s: float
) -> tuple[int, int, tuple[str, ...]]:
    """(floor, ceiling, names of the open rules) at ``unix_s``; the guards' own bounds when none
    is open. A floor above the ceiling is held at the ceiling."""
    if not rules or not math.isfinite(unix_s):
        return min_replicas, max_replicas, ()
    open_rules = [r for r in rules if r.is_open(unix_s)]
    if not open_rules:
        return min_replicas, max_replicas, ()
    floors = [r.min_replicas for r in open_rules if r.min_replicas is not None]
    ceilings = [r.max_replicas for r in open_rules if r.max_replicas is not None]
    hi = min(ceilings) if ceilings else max_replicas
    lo = min(max(floors) if floors else min_replicas, hi)
    names = tuple(r.name or r.cron for r in open_rules)
    return lo, hi, names


def rules_as_json(rules: Sequence[ScheduleRule]) -> list[dict[str, Any]]:
    """The rules as the YAML that configures them (for documents and decision logs)."""
    return [
        {k: v for k, v in vars(r).items() if v is not None and not (k == "name" and not v)} for r in rules
    ]
