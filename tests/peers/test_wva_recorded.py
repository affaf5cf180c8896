"""wva-saturation's analysis beside WVA's own ``AnalyzeModelSaturation`` and
``CalculateSaturationTargets``, on recorded cases.

``tests/peers/tables/wva_saturation.json`` holds what WVA's V1 saturation analyzer
(``internal/saturation/analyzer.go`` of llm-d-incubation/workload-variant-autoscaler at the commit
the table names, compiled unmodified by ``tests/peers/recorders/record_wva_saturation.py``) gives for
one variant's pods: which are saturated, the average spare KV and queue, the scale-up and safe
scale-down verdicts and the target replicas, under three threshold sets, stable and in transition.
llmscale's :func:`~llmscale.policies.wva.analyze_saturation` and
:func:`~llmscale.policies.wva.saturation_target` must agree on every case.

Mapping: WVA's CurrentReplicas is the deployment's replicas (llmscale's spec replicas) and its
PendingReplicas the pods not yet ready (llmscale's starting replicas); DesiredReplicas is 0 (unset) in
every case because llmscale writes its decision to the spec directly, so desired != current does not
arise. The min/max bounds are not in analyzer.go and are not recorded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from llmscale.policies.wva import WvaConfig, analyze_saturation, saturation_target

pytestmark = pytest.mark.peers

TABLE = json.loads((Path(__file__).parent / "tables" / "wva_saturation.json").read_text())


def _ours(c: dict[str, Any]) -> tuple[int, float, float, bool, bool, int]:
    cfg = WvaConfig(**c["config"])
    peaks = {f"pod-{j}": (kv, float(q)) for j, (kv, q) in enumerate(zip(c["kv"], c["queue"], strict=True))}
    a = analyze_saturation(peaks, cfg)
    target, _ = saturation_target(a, c["current"], starting=c["pending"])
    return a.non_saturated, a.avg_spare_kv, a.avg_spare_queue, a.scale_up, a.scale_down_safe, target


def test_the_table_is_wvas_code() -> None:
    assert TABLE["source"] == "llm-d-incubation/workload-variant-autoscaler"
    assert len(TABLE["commit"]) == 40 and TABLE["files"] == ["internal/saturation/analyzer.go"]
    assert len(TABLE["sha256"]["internal/saturation/analyzer.go"]) == 64
    cases = TABLE["cases"]
    assert len(cases) >= 300 and {c["thresholds"] for c in cases} == {"default", "production", "development"}
    stable = [c for c in cases if c["current"] == len(c["kv"])]
    # scale-ups, safe scale-downs and holds among the stable cases, and transitions besides
    assert {c["target"] - c["current"] for c in stable} == {-1, 0, 1} and len(stable) < len(cases)


def test_wva_saturation_analyses_and_targets_as_wva() -> None:
    wrong = []
    for c in TABLE["cases"]:
        non_sat, spare_kv, spare_queue, up, safe, target = _ours(c)
        same = (
            non_sat == c["non_saturated"]
            and math.isclose(spare_kv, c["avg_spare_kv"], rel_tol=0, abs_tol=1e-12)
            and math.isclose(spare_queue, c["avg_spare_queue"], rel_tol=0, abs_tol=1e-12)
            and (up, safe, target) == (c["scale_up"], c["scale_down_safe"], c["target"])
        )
        if not same:
            wrong.append((c, (non_sat, spare_kv, spare_queue, up, safe, target)))
    assert not wrong, f"{len(wrong)} of {len(TABLE['cases'])} differ, e.g. {wrong[:3]}"
