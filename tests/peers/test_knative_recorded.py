"""knative-kpa's ``Scale`` beside Knative's own, on ticks recorded from its Go code.

``tests/peers/tables/knative_kpa.json`` holds Knative's decisions (knative/serving at the tag the
table names; ``pkg/autoscaler/scaling/autoscaler.go`` compiled unmodified by
``tests/peers/recorders/record_knative_kpa.py``) on scripted ticks: the ready pods and the
stable and panic window averages its metric client answers. Each scenario replays here through
:func:`llmscale.policies.knative.kpa_scale` with the state carried from tick to tick as the policy
carries it, and every decision must be Knative's: the desired pods before bounds, whether the
autoscaler is panicking, and the pods the panic ratchet holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.policies.knative import KpaConfig, kpa_scale

pytestmark = pytest.mark.peers

TABLE = json.loads((Path(__file__).parent / "tables" / "knative_kpa.json").read_text())


def _config(spec: dict) -> KpaConfig:
    return KpaConfig(
        target_concurrency=spec["target_value"],
        stable_window_s=spec["stable_window_s"],
        panic_threshold_pct=100.0 * spec["panic_threshold"],
        max_scale_up_rate=spec["max_scale_up_rate"],
        max_scale_down_rate=spec["max_scale_down_rate"],
        scale_down_delay_s=spec["scale_down_delay_s"],
    )


def test_the_table_is_knatives_released_code():
    assert TABLE["source"] == "knative/serving" and TABLE["tag"].startswith("knative-v1.")
    assert len(TABLE["commit"]) == 40 and "pkg/autoscaler/scaling/autoscaler.go" in TABLE["files"]
    assert sum(len(s["ticks"]) for s in TABLE["scenarios"]) >= 200


@pytest.mark.parametrize("scenario", TABLE["scenarios"], ids=[s["name"] for s in TABLE["scenarios"]])
def test_kpa_scale_decides_as_knative(scenario):
    cfg = _config(scenario["spec"])
    reachable = scenario["spec"]["reachable"]
    ticks, outcomes = scenario["ticks"], scenario["outcomes"]
    # newAutoscaler: more than one ready pod at the start means starting in panic, holding them
    first = ticks[0]
    panic_time = first["time_s"] if first["ready"] > 1 else None
    max_panic = first["ready"] if first["ready"] > 1 else 0
    delay: tuple[tuple[float, int], ...] = ()
    for tick, knative in zip(ticks, outcomes, strict=True):
        where = f"{scenario['name']} at {tick['time_s']} s"
        if tick.get("no_data"):
            # Knative: an invalid result, nothing changed; the policy: a no-data hold, state kept
            assert not knative["valid"], where
            continue
        step = kpa_scale(
            cfg, tick["ready"], tick["stable"], tick["panic"], tick["time_s"], panic_time, max_panic, delay,
            reachable=reachable,
        )  # fmt: skip
        panic_time, max_panic, delay = step.panic_time_s, step.max_panic_pods, step.delay_window
        assert knative["valid"], where
        assert step.desired == knative["desired"], (where, step, knative)
        assert (panic_time is not None) == knative["panicking"], (where, step, knative)
        if knative["panicking"]:
            assert max_panic == knative["max_panic_pods"], (where, step, knative)
