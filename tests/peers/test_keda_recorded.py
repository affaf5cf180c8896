"""keda-queue's activation and scale-to-zero beside KEDA's own scale executor, on recorded cases.

``tests/peers/tables/keda_executor.json`` holds what KEDA's ``RequestScale`` for a ScaledObject
(``pkg/scaling/executor/scale_scaledobjects.go`` of kedacore/keda at the tag the table names,
compiled unmodified by ``tests/peers/recorders/record_keda_executor.py``) does for a grid of target
replicas, trigger activity, ``minReplicaCount``, ``cooldownPeriod`` and time since the trigger was
last active: the replicas it writes to the target (or that it leaves them to the HPA) and whether it
stamps ``lastActiveTime``. :class:`~llmscale.policies.keda.KedaPolicy` gets the same inputs (the
queue at 50 for an active trigger, 0 for an inactive one, ``activationThreshold`` 0) and must
write the same replicas where KEDA writes them, never scale to zero where KEDA leaves the target to
the HPA, and keep the trigger's last active time as KEDA does. The activation comparison itself
(``value > activationThreshold``) is the Prometheus scaler's and is not in the recorded file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmscale.policies.keda import KedaConfig, KedaPolicy, KedaState
from llmscale.types import FleetView, Signals, SignalValue

pytestmark = pytest.mark.peers

TABLE = json.loads((Path(__file__).parent / "tables" / "keda_executor.json").read_text())
NOW_S = 10_000.0


def _ours(c: dict[str, Any]) -> tuple[int, str, bool]:
    cooldown = 300.0 if c["cooldown_period_s"] is None else float(c["cooldown_period_s"])
    cfg = KedaConfig(min_replicas=c["min_replicas"], max_replicas=50, cooldown_period_s=cooldown)
    last = None if c["idle_s"] is None else NOW_S - c["idle_s"]
    signals = Signals(
        time_s=NOW_S,
        fleet=FleetView(spec_replicas=c["current"], ready=c["current"]),
        values={"queue_waiting": SignalValue(50.0 if c["active"] else 0.0)},
    )
    d, state = KedaPolicy(cfg).decide(signals, KedaState(last_active_s=last), NOW_S)
    return d.desired, d.rule, state.last_active_s == NOW_S


def test_the_table_is_kedas_released_code() -> None:
    assert TABLE["source"] == "kedacore/keda" and TABLE["tag"].startswith("v2.")
    assert len(TABLE["commit"]) == 40 and TABLE["files"] == ["pkg/scaling/executor/scale_scaledobjects.go"]
    reasons = {c["active_reason"] for c in TABLE["cases"]}
    assert len(TABLE["cases"]) >= 150 and reasons == {"ScalerActive", "ScalerNotActive", "ScalerCooldown"}
    # activation from zero, scale to zero and raising to the minimum are all recorded
    writes = {(c["current"] > 0, c["replicas"] == 0) for c in TABLE["cases"] if c["wrote"]}
    assert writes == {(False, False), (True, True), (True, False)}


def test_keda_queue_activates_and_scales_to_zero_as_keda() -> None:
    wrong = []
    for c in TABLE["cases"]:
        replicas, rule, stamps = _ours(c)
        if c["wrote"] or c["current"] == 0:  # KEDA's own decision (the HPA is off at 0 replicas)
            same = replicas == c["replicas"]
        else:  # left to the HPA: KEDA's rules must not fire
            same = rule not in {"scale-to-zero", "activate-from-zero", "idle-at-zero"} and replicas > 0
        if not same or stamps != c["stamps_last_active"]:
            wrong.append((c, (replicas, rule, stamps)))
    assert not wrong, f"{len(wrong)} of {len(TABLE['cases'])} differ, e.g. {wrong[:3]}"
