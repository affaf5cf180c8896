"""The controller's memory across restarts: guard state and last decision as a small JSON dict.

A restarted controller that forgot its cooldown clocks would act at once on its first
tick, e.g. shrink a fleet it grew 20 s earlier (cooldown_down_s = 300). So after every
applied decision the live loop saves the :class:`GuardState` (cooldown clocks,
confirmation streaks, stabilisation history) and the decision itself through a
:class:`StateStore` (an annotation on the target, or a file), and loads it at start.

Times are the live loop's clock, epoch seconds (:class:`llmscale.clock.UnixClock`), so
they mean the same to the next process. ``-inf`` ("never") is stored as ``null``:
JSON has no infinities.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from llmscale.errors import LlmscaleError
from llmscale.guards import GuardState
from llmscale.ranges import finite_number, shown_value
from llmscale.types import TickRecord

__all__ = [
    "STATE_VERSION",
    "PersistedState",
    "StateFormatError",
    "StateStore",
    "decision_to_dict",
    "state_from_dict",
    "state_to_dict",
]

#: bump when the document's shape changes; older documents are ignored with a warning
STATE_VERSION = 1


class StateStore(Protocol):
    """Where the document lives (``cluster/state_store.py``: an annotation, a file)."""

    def load(self) -> dict[str, Any] | None:
        """The last saved document, or None when nothing was saved."""
        ...

    def save(self, doc: dict[str, Any]) -> None:
        """Replace the saved document; raises an LlmscaleError subclass on failure."""
        ...


class StateFormatError(LlmscaleError):
    """A stored document that is not a state this version can read."""


@dataclass(frozen=True)
class PersistedState:
    guard_state: GuardState
    #: the last applied decision (see :func:`decision_to_dict`), None before the first
    last_decision: Mapping[str, Any] | None
    #: the target the state belongs to (``namespace/name``)
    target: str


def decision_to_dict(record: TickRecord) -> dict[str, Any]:
    """The part of a tick worth remembering: when, who, what was asked and why."""
    return {
        "time_s": record.time_s,
        "policy": record.policy,
        "proposed": record.proposed.desired,
        "final": record.final,
        "rule": record.proposed.rule,
        "guard": record.guard,
        "applied": record.applied,
    }


def _time_out(t: float) -> float | None:
    return None if math.isinf(t) else t


def _time_in(v: Any, field: str) -> float:
    if v is None:
        return -math.inf
    f = finite_number(v)
    if f is None:
        raise StateFormatError(f"{field} = {shown_value(v)}, expected a finite number or null")
    return f


def state_to_dict(
    state: GuardState, last_decision: Mapping[str, Any] | None, *, target: str
) -> dict[str, Any]:
    """A JSON-safe document of ``state``; :func:`state_from_dict` reads it back unchanged."""
    return {
        "version": STATE_VERSION,
        "target": target,
        "guard_state": {
            "last_up_s": _time_out(state.last_up_s),
            "last_change_s": _time_out(state.last_change_s),
            "up_streak": state.up_streak,
            "down_streak": state.down_streak,
            "history": [[t, n] for t, n in state.history],
            "down_since_s": state.down_since_s,
        },
        "last_decision": None if last_decision is None else dict(last_decision),
    }


def state_from_dict(doc: Mapping[str, Any]) -> PersistedState:
    """Read a document of :func:`state_to_dict`; raises StateFormatError naming the bad field."""
    if doc.get("version") != STATE_VERSION:
        raise StateFormatError(f"version = {doc.get('version')!r}, this llmscale reads {STATE_VERSION}")
    g = doc.get("guard_state")
    if not isinstance(g, Mapping):
        raise StateFormatError("guard_state is missing or not a mapping")
    try:
        # Oldest first, as the guards keep it (they drop expired proposals from the front).
        history = tuple(
            sorted(
                ((_time_in(t, "history time"), int(n)) for t, n in g.get("history") or ()), key=lambda h: h[0]
            )
        )
        up_streak = int(g.get("up_streak", 0))
        down_streak = int(g.get("down_streak", 0))
    except (TypeError, ValueError) as e:
        raise StateFormatError(f"guard_state: {e}") from e
    since = g.get("down_since_s")
    state = GuardState(
        last_up_s=_time_in(g.get("last_up_s"), "last_up_s"),
        last_change_s=_time_in(g.get("last_change_s"), "last_change_s"),
        up_streak=up_streak,
        down_streak=down_streak,
        history=history,
        down_since_s=None if since is None else _time_in(since, "down_since_s"),
    )
    last = doc.get("last_decision")
    if last is not None and not isinstance(last, Mapping):
        raise StateFormatError("last_decision is not a mapping")
    return PersistedState(guard_state=state, last_decision=last, target=str(doc.get("target", "")))
