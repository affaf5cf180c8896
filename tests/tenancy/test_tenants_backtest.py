"""Several tenants on one MIG pool, backtested together: quota, pool and node checks hold scale-ups.

The scenario of docs/tenancy.md's worked example: ``chat`` (Llama-3-8B on H100 3g.40gb) meets a
x4 flash crowd from minute 5 to minute 13 (4 -> 16 req/s; one 3g replica carries ~6.4 req/s
within the SLO); ``code`` (Qwen2-7B, 3g.40gb) serves a steady 2 req/s beside it.
"""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from llmscale.backtest.tenants import TenantsResult, load_tenants, parse_tenants, run_tenants
from llmscale.errors import ConfigError

SPIKE_START_S = 300.0


def config(*, chat_quota: int, gpus: int, background: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "pool": {"gpu": "h100-80gb", "gpus": gpus, "gpus_per_node": 1, "background": background or []},
        "tenants": {
            "chat": {
                "model": "llama-3-8b",
                "profile": "3g.40gb",
                "quota": chat_quota,
                "policy": "slo",
                "workload": {
                    "preset": "flash-crowd",
                    "params": {
                        "rate_rps_mean": 4,
                        "duration_s": 900,
                        "spike_start_s": SPIKE_START_S,
                        "spike_duration_s": 480,
                    },
                },
                "max_replicas": 6,
            },
            "code": {
                "model": "qwen2-7b",
                "profile": "3g.40gb",
                "quota": 2,
                "policy": "slo",
                "workload": {"preset": "azure-like", "params": {"rate_rps_mean": 2, "duration_s": 900}},
                "max_replicas": 4,
            },
        },
    }


def run(cfg: dict[str, Any]) -> tuple[TenantsResult, list[dict[str, Any]]]:
    out = io.StringIO()
    result = run_tenants(parse_tenants(cfg), decisions_out=out)
    return result, [json.loads(line) for line in out.getvalue().splitlines()]


def held(lines: list[dict[str, Any]], tenant: str, by: str) -> list[dict[str, Any]]:
    return [
        ln for ln in lines if ln["tenant"] == tenant and ln["admission"] and ln["admission"]["held_by"] == by
    ]


def test_a_tenant_hits_its_quota() -> None:
    """Quota 2 of 3g.40gb: the flash crowd asks for more, the quota holds it, and chat pays in SLO."""
    res2, lines = run(config(chat_quota=2, gpus=2))
    chat, code = res2.tenants
    quota_lines = held(lines, "chat", "quota")
    assert quota_lines, "the flash crowd should have asked for more than the quota"
    assert min(ln["time_s"] for ln in quota_lines) >= SPIKE_START_S
    first = quota_lines[0]["admission"]
    assert first["room"]["quota"] < first["requested"]
    assert first["note"].startswith("quota: ")
    assert all(ln["slices_held"] <= 2 for ln in lines if ln["tenant"] == "chat")
    assert chat.max_slices_held == 2
    assert (
        chat.held_ticks["quota"] == len(quota_lines)
        and chat.held_ticks["pool"] == chat.held_ticks["node"] == 0
    )
    # The pool had room (2 GPUs = four 3g positions): the quota, not the pool, was the limit.
    assert all(ln["admission"]["room"]["pool"] > ln["admission"]["room"]["quota"] for ln in quota_lines)
    # The core applied the verdict: each held line's desired is what was admitted, under the
    # quota's guard name (controller/core.py's settle), never above the spec plus the admitted.
    for ln in quota_lines:
        adm = ln["admission"]
        assert ln["guard"] == "mig-quota" and ln["desired"] == ln["desired_after_admission"], ln
        assert ln["desired"] < ln["desired_before_guards"] and ln["guard_note"].endswith(adm["note"]), ln
    # The neighbour is untouched: its own slices, its own SLO.
    assert code.held_ticks == {"quota": 0, "pool": 0, "node": 0}
    assert code.result.summary["slo_attainment"] >= 0.99
    assert res2.max_memory_slices_used <= 2 * 8

    # The same hour with quota 4 (and a third GPU): chat grows past 2 slices and meets more of its SLO.
    res4, _ = run(config(chat_quota=4, gpus=3))
    chat4 = res4.tenants[0]
    assert chat4.max_slices_held > 2
    assert chat4.result.summary["slo_attainment"] > chat.result.summary["slo_attainment"]
    assert chat4.slice_hours > chat.slice_hours
    assert chat4.gpu_hours == pytest.approx(chat4.slice_hours * 3 / 7)


def test_a_node_check_holds_the_scale_up() -> None:
    """GPU 1 (node 1) is free but its containers are throttled 20% from t = 250 s: held by `node`."""
    bg = [{"node": 1, "from_s": 250, "to_s": 900, "cpu_throttled_ratio": 0.2}]
    res, lines = run(config(chat_quota=4, gpus=2, background=bg))
    node_lines = held(lines, "chat", "node")
    assert node_lines
    assert all(250 <= ln["time_s"] < 900 for ln in node_lines)
    adm = node_lines[0]["admission"]
    assert adm["node_failures"] == {"node1": ["cpu_throttled 20.0% >= 10%"]}
    assert adm["note"] == "node check: node1: cpu_throttled 20.0% >= 10%"
    assert adm["room"]["pool"] > adm["room"]["node"]
    # Node 1 received no replica while throttled; node 0 (GPU 0) is full with chat's and code's 3g.
    throttled = [ln for ln in lines if 250 <= ln["time_s"] < 900 and ln["admission"]]
    assert not [p for ln in throttled for p in ln["admission"]["placements"] if p.startswith("gpu1")]
    assert res.tenants[0].held_ticks["node"] == len(node_lines)


def test_the_pool_holds_when_every_position_is_taken() -> None:
    """One H100: chat's and code's first 3g take both 3g positions; chat's scale-ups meet a full pool."""
    res, lines = run(config(chat_quota=4, gpus=1))
    pool_lines = held(lines, "chat", "pool")
    assert pool_lines
    assert all(ln["admission"]["room"]["pool"] == 0 for ln in pool_lines)
    assert res.occupancy_end == ["33333333"]


def test_slices_come_back_when_replicas_are_gone() -> None:
    """On-off traffic: the tenant scales down in the idle phases and its slices return to the pool."""
    cfg = {
        "pool": {"gpu": "h100-80gb", "gpus": 1},
        "tenants": {
            "burst": {
                "model": "qwen2-7b",
                "profile": "2g.20gb",
                "quota": 3,
                "policy": "slo",
                "workload": {"preset": "on-off", "params": {"duration_s": 2400}, "rate_scale": 0.03},
                "max_replicas": 3,
            }
        },
    }
    res, lines = run(cfg)
    held_series = [ln["slices_held"] for ln in lines]
    assert max(held_series) == 3
    assert any(b < a for a, b in itertools.pairwise(held_series)), "never released a slice"
    used_end = sum(c != "." for c in "".join(res.occupancy_end))
    assert used_end == held_series[-1] * 2  # a 2g.20gb spans 2 memory slices


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        pytest.param(
            {"profile": "3g.20gb"},
            r"tenants\.chat\.profile: MIG profile '3g\.20gb' is not one of h100-80gb's",
            id="profile of another GPU",
        ),
        pytest.param(
            {"profile": "1g.10gb"},
            r"tenants\.chat: llama-3-8b needs 16 GB of weights",
            id="weights do not fit the slice",
        ),
        pytest.param(
            {"quota": 0},
            r"tenants\.chat\.initial_replicas: 1 exceeds the quota \(0\)",
            id="quota below initial",
        ),
        pytest.param({"policy": "sloo"}, r"tenants\.chat\.policy: sloo: unknown policy", id="unknown policy"),
        pytest.param(
            {"quotaa": 2}, r"tenants\.chat\.quotaa: Extra inputs are not permitted", id="unknown key"
        ),
    ],
)
def test_config_errors_name_the_key(patch: dict[str, Any], message: str) -> None:
    cfg = config(chat_quota=2, gpus=1)
    cfg["tenants"]["chat"].update(patch)
    with pytest.raises(ConfigError, match=message):
        parse_tenants(cfg, source="tenants.yaml")


def test_pool_errors(tmp_path: Path) -> None:
    cfg = config(chat_quota=2, gpus=1, background=[{"node": 3, "from_s": 0, "to_s": 10}])
    with pytest.raises(ConfigError, match=r"pool\.background\.0\.node: 3, the pool has nodes 0\.\.0"):
        parse_tenants(cfg, source="tenants.yaml")
    cfg = config(chat_quota=2, gpus=1)
    cfg["pool"]["gpu"] = "h200"
    with pytest.raises(ConfigError, match=r"pool\.gpu: .*no MIG profiles known for h200"):
        parse_tenants(cfg)
    bad = tmp_path / "t.yaml"
    bad.write_text("pool: [1, 2\n")
    with pytest.raises(ConfigError, match=r"t\.yaml: line \d+ not valid YAML"):
        load_tenants(bad)
