"""``llmscale run`` with a tenants file holds a scale-up at the tenant's MIG quota, as ``llmscale
tenants`` does (seed 003 4.2): the same file, the same quota arithmetic, the core's admission input.

- the live check admits what the tenants backtest's ``admit`` admits, with the same note, for any
  quota, held count and request (a pool and nodes with room, so only the quota limits);
- a controller whose scale-up the quota holds whole starts no cooldown (the core's ``settle``):
  once the quota grows, it scales at the next tick instead of 300 s later;
- ``llmscale run`` end to end on emulate's replicas: static asking for 3 of a tenant whose quota is
  2 scales to 2, and its decision lines say ``mig-quota`` with the counts;
- a wrong tenant or file stops ``run`` before its first tick, naming the config field and the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
import yaml
from live_fakes import PLAIN, FakeCluster, FollowingSource, controller, static_run
from test_live_run_emulate import AUTH, _run, emulate  # noqa: F401  (fixture)
from test_live_run_emulate import _config as emulate_config

from llmscale.backtest.tenants import load_tenant_quota
from llmscale.clock import ManualClock
from llmscale.config import parse_config
from llmscale.controller.admission import MigQuota
from llmscale.errors import ConfigError
from llmscale.tenancy.pool import MigPool, admit
from llmscale.types import FleetView
from llmscale.wiring import build_quota


def _tenants_file(tmp_path: Path, quota: int = 2) -> Path:
    doc = {
        "pool": {"gpu": "h100-80gb", "gpus": 2, "gpus_per_node": 1},
        "tenants": {
            "chat": {
                "model": "llama-3-8b",
                "profile": "3g.40gb",
                "quota": quota,
                "policy": "slo",
                "workload": {"preset": "default", "duration_s": 60},
            },
            "code": {
                "model": "llama-3-8b",
                "profile": "1g.10gb",
                "quota": 1,
                "policy": "static",
                "params": {"replicas": 1},
                "workload": {"preset": "default", "duration_s": 60},
            },
        },
    }
    p = tmp_path / "tenants.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize("quota", [0, 1, 2, 4])
@pytest.mark.parametrize("held", [0, 1, 2, 3])
@pytest.mark.parametrize("requested", [1, 2, 5])
def test_the_live_quota_admits_what_the_tenants_backtest_admits(quota, held, requested):
    pool = MigPool("h100-80gb", 8, 8)  # 16 free 3g placements: only the quota can hold
    adm = admit(pool, "3g.40gb", requested, quota=quota, held=held, node_failures={})
    verdict, doc = MigQuota("chat", "3g.40gb", quota).check(FleetView(held, ready=held), held + requested)
    assert doc["admitted"] == adm.admitted and doc["requested"] == requested and doc["held"] == held
    if adm.held_by is None:
        assert verdict is None
    else:
        assert adm.held_by == "quota"
        assert verdict is not None and verdict.guard == "mig-quota"
        assert (verdict.limit, verdict.note) == (held + adm.admitted, adm.note)


def test_a_scale_up_held_whole_by_the_quota_starts_no_cooldown(tmp_path):
    cluster = FakeCluster(2)
    guards = PLAIN.merged({"cooldown_up_s": 300.0})
    c = controller(FollowingSource(cluster), cluster, primary=static_run(4, guards), clock=ManualClock())
    c.quota = load_tenant_quota(_tenants_file(tmp_path, quota=2), "chat")
    held = c.tick(0.0)
    assert held is not None and held.record is not None
    assert (held.record.proposed.desired, held.record.final, held.record.guard) == (4, 2, "mig-quota")
    counts = {"tenant": "chat", "profile": "3g.40gb", "quota": 2, "held": 2, "requested": 2, "admitted": 0}
    assert held.admission == {"held_by": "quota", "quota": counts}
    assert cluster.calls == [] and c.state.guard_state.last_up_s == -math.inf
    c.quota = MigQuota("chat", "3g.40gb", 4)  # the ResourceQuota was raised
    scaled = c.tick(15.0)
    assert scaled is not None and scaled.record is not None and scaled.record.guard is None
    assert cluster.calls == [(4, 15.0)]  # at once, not after a 300 s cooldown from the held tick


def test_run_with_a_tenants_file_holds_at_the_quota(tmp_path, emulate):  # noqa: F811
    tenants = _tenants_file(tmp_path, quota=2)
    cfg = emulate_config(
        tmp_path,
        emulate.base_url,
        admission={"mig_quota": {"tenants_file": str(tenants), "tenant": "chat"}},
    )
    proc = _run("--config", str(cfg), "--max-ticks", "2")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    spec = httpx.get(emulate.base_url + "/admin/replicas", timeout=5, headers=AUTH).json()["spec_replicas"]
    assert spec == 2
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    first = lines[0]
    assert (first["desired_before_guards"], first["desired"], first["guard"]) == (3, 2, "mig-quota")
    assert first["applied"] is True and first["admission"]["held_by"] == "quota"
    assert first["admission"]["quota"]["admitted"] == 1 and first["guard_note"].endswith("room for 1")


@pytest.mark.parametrize(
    ("mig_quota", "match"),
    [
        pytest.param({"tenant": "nobody"}, r"mig_quota: .*tenants: no tenant 'nobody'", id="tenant"),
        pytest.param({"tenants_file": "missing.yaml"}, r"admission\.mig_quota: missing\.yaml", id="file"),
    ],
)
def test_a_wrong_tenants_file_or_tenant_stops_run_before_its_first_tick(tmp_path, mig_quota, match):
    spec = {"tenants_file": str(_tenants_file(tmp_path)), "tenant": "chat", **mig_quota}
    cfg = parse_config(
        {
            "target": {"name": "emulated"},
            "metrics": {"source": "scrape", "scrape": {"emulate_url": "http://127.0.0.1:9"}},
            "policy": {"name": "static", "params": {"replicas": 3}},
            "actuator": {"kind": "emulate", "emulate": {"url": "http://127.0.0.1:9"}},
            "admission": {"mig_quota": spec},
        }
    )
    with pytest.raises(ConfigError, match=match):
        build_quota(cfg, "llmscale.yaml")
