"""The live controller's decision log: one JSON line per tick, saying what it decided and why.

The decision itself is written as the backtest writes it, by the one function both call
(:meth:`llmscale.types.TickRecord.as_json`: ``time_s``, ``replicas``, ``desired_before_guards``,
``desired``, ``rule``, ``inputs``, ``guard``, ``applied``, ``fleet_state``, ``observed``, and
``standby`` for a policy with a standby pool), so ``llmscale analyze`` reads one format and
``tests/controller/test_adapter_parity.py`` compares the two logs field for field. The live line
adds what only a live tick has around it (before the release that merged the formats it named
``time_s`` / ``inputs`` / ``desired_before_guards`` / ``desired`` as ``ts_unix`` / ``signals`` /
``proposed`` / ``final``; ``analyze`` still reads such logs).

A line carries a trace id (so an alert or an operator's question can point at one tick),
the policy version (name + hash of its parameters and guards + llmscale version: two lines
with the same version came from the same decision function), the fleet by phase, the
numbers that fired the rule, the proposal before guards and the result after them, which
guard changed it and why, whether the target was scaled, and the shadow policy's answer.

Every tick writes a line, a failed one too: its ``error`` says why, and the fields it never
got to (``desired_before_guards``, ``desired``, ``replicas``, ...) are null. A tick that scales writes its
line *before* it acts (``applied: true`` says the scale was asked for), so a tick whose line
cannot be written does not act; if the scale then fails, a second line with the same
``trace_id`` records it (``applied: false``, ``actuation_error``). Readers keep the last line
of each trace id.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from llmscale import __version__
from llmscale.errors import LlmscaleError
from llmscale.types import TickRecord

__all__ = ["DecisionLog", "DecisionLogError", "LogEntry", "new_trace_id", "policy_version"]


def policy_version(name: str, params: Mapping[str, Any], guards: Mapping[str, Any]) -> str:
    """``name:hash12@llmscale-X.Y.Z``; the hash covers parameters and guard settings, sorted."""
    blob = json.dumps({"params": dict(params), "guards": dict(guards)}, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return f"{name}:{digest}@llmscale-{__version__}"


def new_trace_id() -> str:
    return uuid.uuid4().hex


class DecisionLogError(LlmscaleError):
    """The decision log cannot be opened or written: the tick must not act."""


#: the fields of a tick's line that come from its TickRecord: null on a failed tick's line
_RECORD_FIELDS = (
    "policy",
    "replicas",
    "desired_before_guards",
    "desired",
    "rule",
    "inputs",
    "note",
    "guard",
    "guard_note",
    "applied",
    "fleet_state",
)

#: what a line says of the shadow policy's decision (besides its policy and version)
_SHADOW_FIELDS = ("desired_before_guards", "desired", "rule", "inputs", "note", "guard", "guard_note")


@dataclass(frozen=True)
class LogEntry:
    """What the live loop knows about a tick besides the :class:`TickRecord`.

    ``record`` is None for a tick that failed before it decided; ``error`` then says why.
    """

    record: TickRecord | None
    trace_id: str
    policy_version: str
    mode: str
    target: str
    unknown_replicas: int
    #: no replica reported metrics this tick: the controller held any scale-down
    metrics_outage: bool = False
    #: {"reason": conflict|server_error|forbidden|other, "message": ...} when scaling failed
    actuation_error: Mapping[str, str] | None = None
    shadow: TickRecord | None = None
    shadow_version: str | None = None
    tick_duration_s: float | None = None
    #: the model-drift hook's readings and factors this tick (``controller/drift.py``), if on
    drift: Mapping[str, Any] | None = None
    #: why the tick failed (``Type: message``); None for a tick that completed
    error: str | None = None
    #: the tick's time when ``record`` is None (a record carries its own)
    time_s: float | None = None
    #: with leader election on: whether this replica held the Lease this tick (a standby decides
    #: and logs but never acts), its term (the Lease's transitions when it took it) and identity
    leader: bool | None = None
    lease_term: int | None = None
    identity: str | None = None
    #: the node layer's answer when this tick wanted to scale up and node checks are configured
    #: (``controller/admission.py``): ``held_by`` "node" or None, and each node's readings
    admission: Mapping[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        r = self.record
        t = r.time_s if r is not None else self.time_s if self.time_s is not None else 0.0
        ts = datetime.fromtimestamp(t, tz=UTC)
        doc: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "trace_id": self.trace_id,
            "target": self.target,
            "mode": self.mode,
            "policy_version": self.policy_version,
            "unknown_replicas": self.unknown_replicas,
            "metrics_outage": self.metrics_outage,
        }
        if r is not None:
            doc.update(r.as_json())  # the backtest's line, verbatim
        else:
            doc["time_s"] = round(t, 3)
            doc.update(dict.fromkeys(_RECORD_FIELDS))
            doc["applied"] = False
        doc["error"] = self.error
        doc["actuation_error"] = dict(self.actuation_error) if self.actuation_error else None
        if self.shadow is not None:
            s = self.shadow.as_json()
            doc["shadow"] = {"policy": s["policy"], "policy_version": self.shadow_version} | {
                k: s[k] for k in _SHADOW_FIELDS
            }
        else:
            doc["shadow"] = None
        if self.tick_duration_s is not None:
            doc["tick_duration_s"] = round(self.tick_duration_s, 6)
        if self.drift is not None:
            doc["drift"] = dict(self.drift)
        if self.admission is not None:
            doc["admission"] = dict(self.admission)
        if self.leader is not None:
            doc["leader"] = self.leader
            doc["lease_term"] = self.lease_term
            doc["identity"] = self.identity
        clean: dict[str, Any] = _finite(doc)
        return clean


def _finite(v: Any) -> Any:
    """``v`` with NaN / infinities as null: a policy's odd number must not break the log line."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


class DecisionLog:
    """Appends one JSON line per tick to a file, or to standard output for ``"-"``.

    The file is opened on the first write, not in the constructor (no side effects at
    construction), and every line is flushed so a crash loses at most the tick in flight.
    """

    def __init__(self, path: str | Path, *, stream: IO[str] | None = None) -> None:
        self.path = str(path)
        self._stream = stream
        self._owned = False

    def open(self) -> None:
        """Open the file for appending now (the live loop does at start, to refuse an unwritable
        path before the first tick rather than fail every tick). Raises DecisionLogError."""
        if self._stream is not None:
            return
        if self.path == "-":
            self._stream = sys.stdout
            return
        try:
            self._stream = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        except OSError as e:
            raise DecisionLogError(f"cannot append to {self.path}: {e.strerror or e}") from e
        self._owned = True

    def write(self, entry: LogEntry) -> None:
        """Append ``entry`` as one line and flush it; raises DecisionLogError when it cannot."""
        self.open()
        assert self._stream is not None
        line = json.dumps(entry.as_json(), allow_nan=False) + "\n"
        try:
            self._stream.write(line)
            self._stream.flush()
        except (OSError, ValueError) as e:  # ValueError: the file was closed under us
            raise DecisionLogError(f"cannot write the decision log {self.path}: {e}") from e

    def close(self) -> None:
        if self._owned and self._stream is not None:
            self._stream.close()
        self._stream = None
        self._owned = False
