"""aibrix-apa's replica rule beside AIBrix's own ``computeTargetReplicas``, on recorded cases.

``tests/peers/tables/aibrix_apa.json`` holds what APA's Go code (vllm-project/aibrix at the tag
the table names, ``apa.go`` compiled unmodified by ``tests/peers/recorders/record_aibrix_apa.py``)
recommends for a grid of current replicas and per-pod values around the tolerance band, with
AIBrix's default tolerances and rates and others. llmscale's
:func:`llmscale.policies.aibrix.apa_replicas` must recommend the same on every case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmscale.policies.aibrix import apa_replicas

pytestmark = pytest.mark.peers

TABLE = json.loads((Path(__file__).parent / "tables" / "aibrix_apa.json").read_text())


def test_the_table_is_aibrixs_released_code():
    assert TABLE["source"] == "vllm-project/aibrix" and TABLE["tag"].startswith("v")
    assert len(TABLE["commit"]) == 40 and TABLE["files"] == ["pkg/controller/podautoscaler/algorithm/apa.go"]
    replicas = {c["replicas"] for c in TABLE["cases"]}
    assert len(TABLE["cases"]) >= 300 and len(replicas) > 10  # scale-ups, scale-downs and holds


def test_apa_replicas_recommends_as_aibrix():
    wrong = []
    for c in TABLE["cases"]:
        ours, _ = apa_replicas(
            c["current"], c["value"], c["target"], c["up_tolerance"], c["down_tolerance"],
            c["max_scale_up_rate"], c["max_scale_down_rate"],
        )  # fmt: skip
        if ours != c["replicas"]:
            wrong.append((c, ours))
    assert not wrong, f"{len(wrong)} of {len(TABLE['cases'])} differ, e.g. {wrong[:3]}"
