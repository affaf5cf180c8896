"""Decision logs written the way `llmscale backtest --decisions` and `llmscale run` write them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def backtest_line(
    t: float,
    *,
    spec: int,
    final: int,
    observed: Mapping[str, float | None],
    inputs: Mapping[str, float | None] | None = None,
    policy: str = "slo",
) -> dict[str, Any]:
    """One line as TickRecord.as_json writes it (assessed: with fleet_state and observed)."""
    return {
        "time_s": t,
        "policy": policy,
        "replicas": {"spec": spec, "pending": 0, "loading": 0, "warmup": 0, "ready": spec, "draining": 0},
        "desired_before_guards": final,
        "desired": final,
        "rule": "test",
        "inputs": dict(inputs or {}),
        "note": "",
        "guard": None,
        "guard_note": "",
        "applied": final != spec,
        "fleet_state": "steady",
        "observed": dict(observed),
    }


def write_log(path: Path, lines: Sequence[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path
