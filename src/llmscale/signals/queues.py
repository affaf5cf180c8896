"""Queue and concurrency signals at the newest observation, and the fleet counts.

Sums run over *serving* replicas (READY) whose scrape succeeded; a failed
scrape is unknown, so it is left out of the sum and counted in
``unknown_replicas``, never read as an empty queue (AIBrix's bug, STYLE 10).
Per-replica values divide by the known replicas: 3 known of 4 serving with
queues 4, 6, 8 and a gateway queue of 6 give ``queue_waiting`` = 24 and
``queue_per_replica`` = 24 / 3 = 8.

With no serving replica at all (every replica still starting), the replicas'
share is known to be zero: ``queue_waiting`` is the gateway queue and
``running`` is 0; the per-replica values and the maximum are undefined (None).
"""

from __future__ import annotations

from llmscale.signals.window import WAITING, FleetWindow, first_value
from llmscale.types import SignalValue

__all__ = ["queue_signals"]


def queue_signals(fw: FleetWindow) -> dict[str, SignalValue]:
    """queue_waiting(_max), queue_per_replica, running(_per_replica), gateway_queue, fleet counts."""
    t = fw.newest_totals
    gateway = t.gateway
    gw = float(gateway or 0)
    known = len(fw.known)
    unknown = fw.unknown
    gw_note = "" if gateway is None else f" + gateway {gateway}"
    values: dict[str, SignalValue] = {
        "gateway_queue": SignalValue(
            None if gateway is None else float(gateway),
            "" if gateway is not None else "the source sees no gateway queue",
        ),
        "serving_replicas": SignalValue(float(known), f"{unknown} unknown" if unknown else ""),
        "unknown_replicas": SignalValue(float(unknown)),
    }
    if t.serving == 0:
        none = SignalValue(None, "no serving replica")
        values.update(
            queue_waiting=SignalValue(gw, "no serving replica: the gateway queue only"),
            running=SignalValue(0.0, "no serving replica"),
            queue_waiting_max=none,
            queue_per_replica=none,
            running_per_replica=none,
        )
        return values
    if t.waiting_n:
        waiting = t.waiting + gw
        note = f"{t.waiting_n} replica(s){gw_note}" + (f"; {unknown} unknown left out" if unknown else "")
        queue_max = max(v for s in fw.known if (v := first_value(s.values, WAITING)) is not None)
        values.update(
            queue_waiting=SignalValue(waiting, note),
            queue_waiting_max=SignalValue(queue_max, note),
            queue_per_replica=SignalValue(waiting / t.waiting_n, note),
        )
    else:
        what = "all serving scrapes failed" if known == 0 else "no serving replica reports a waiting queue"
        values.update(
            queue_waiting=SignalValue(None, what),
            queue_waiting_max=SignalValue(None, what),
            queue_per_replica=SignalValue(None, what),
        )
    if t.running_n:
        note = f"{t.running_n} replica(s)" + (f"; {unknown} unknown left out" if unknown else "")
        values.update(
            running=SignalValue(t.running, note),
            running_per_replica=SignalValue(t.running / t.running_n, note),
        )
    else:
        what = "all serving scrapes failed" if known == 0 else "no serving replica reports running requests"
        values.update(running=SignalValue(None, what), running_per_replica=SignalValue(None, what))
    return values
